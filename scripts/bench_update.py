#!/usr/bin/env python3
"""What `packer update` writes after a small edit of the source, against a full conversion, in one run.

    python scripts/bench_update.py SRC [--workdir W] [--to lmdb] [--shard-size 4MB] [--files 20]
        [--workers N] [--seed 0] [--scenarios NAME ...] [--check] [--json]

SRC is any ImageFolder tree (``SRC/<class>/<image>``; make one with ``make_corpus.py`` from
packer's shared tools, e.g. ``--classes 10 --per-class 300``). It is never modified: the
benchmark works on a hard-link copy of it (a copy where links are impossible). First it times a
full ``packer.convert`` of that copy, the baseline: its seconds, shards and shard bytes. Then,
for each scenario, it puts the copy back in that state, applies one edit (``k`` = ``--files``,
the same edit for the same ``--seed``), runs ``packer.update`` on a hard-link copy of the
baseline dataset (an update never rewrites a file, so the copies stay independent) and records
what it wrote:

* ``a-added``: ``k`` new images in one class, named to sort between existing ones (an existing
  name plus ``_new``), made from images of another class (flipped, re-encoded: new bytes);
* ``b-removed``: ``k`` images removed, spread over the whole order (so across classes);
* ``c-changed``: ``k`` images re-encoded in place of the old (same name, new bytes and size);
* ``d-new-class``: a new class whose name sorts last, with as many images as the mean class;
* ``e-added-1pct``: 1 % of the image count as new images spread over all classes.

New and changed files are always written as new files (the old name unlinked first), never
through a hard link into SRC.

It prints one row per scenario: files added/removed/changed (as ``update`` counted them),
shards written out of the new version's total, the shards the edits touch (new-version shards
holding an added or changed file, plus baseline shards that held a removed file; written
minus touched is the cascade), shard bytes written, and the update's seconds, each also as a
ratio of the full conversion's figure measured in the same run (machines are noisy; the ratios
travel). The bound column checks what content-defined shard boundaries promise
(:mod:`packer.conversion.sharding`): an edit of ``k`` files writes at most ``k + 1`` shards
(``k`` = files added + removed + changed), and a new class sorting last writes its own shards
plus at most one. A bound that fails prints ``FAIL``, with each written shard that holds no added
or changed file and the baseline shards its samples came from, and the script exits 1; timings
are never judged.

``--check`` also converts each edited source afresh and checks that the updated dataset, once
``packer.collect_garbage`` dropped the baseline version from it, is that conversion byte for
byte: every shard and sample-index file by name and bytes, and the manifests but for
``created_at``, ``version`` and ``last_update``. A difference prints ``DIFFERENT`` (exit 1).
``--json`` prints everything as JSON instead of the table.

The work directory (default ``./bench_update_work``) keeps everything for a look afterwards;
the next run replaces what it holds:

* ``W/src``: the hard-link copy of SRC, back in its unedited state at the end;
* ``W/base``: the baseline conversion (version 1);
* ``W/<scenario>/dst``: a hard-link copy of ``W/base`` updated to version 2 (both versions kept;
  with ``--check`` only version 2, after garbage collection);
* ``W/<scenario>/fresh``: with ``--check``, the fresh conversion of the edited source;
* ``W/<scenario>/edits.json``: the files the edit added, removed and changed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

import packer
from packer.cpus import available_cpus
from packer.format.sample_index import SampleIndex

SCENARIOS = ("a-added", "b-removed", "c-changed", "d-new-class", "e-added-1pct")
LOCK_NAME = ".packer-lease"  # a running writer's lease folder: never shared between copies
VOLATILE = ("created_at", "version", "last_update")  # manifest fields an update may differ in
FLIPS = (Image.Transpose.FLIP_LEFT_RIGHT, Image.Transpose.FLIP_TOP_BOTTOM, Image.Transpose.ROTATE_180)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- copies -------------------------------------------------------------------------------------

def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: a copy with the same mtime
        shutil.copy2(src, dst)
    return dst


def hardlink_tree(src: str, dst: str, skip: Iterable[str] = ()) -> None:
    """Make ``dst`` a copy of directory ``src`` whose files are hard links (``skip``: names left out)."""
    if os.path.lexists(dst):
        shutil.rmtree(dst)
    names = set(skip)
    shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy,
                    ignore=(lambda _dir, entries: [e for e in entries if e in names]) if names else None)


def warm(root: str) -> None:
    """Read every file under ``root`` once, so that the baseline starts from a warm page cache."""
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                while handle.read(1 << 20):
                    pass


# -- edits --------------------------------------------------------------------------------------

@dataclass
class Edit:
    """What one scenario did to the source (relative POSIX paths)."""

    scenario: str
    description: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    new_class: str | None = None


def spread(rng: random.Random, n: int, k: int) -> list[int]:
    """``min(k, n)`` distinct positions in ``range(n)``: one at random in each of that many equal strata."""
    k = min(k, n)
    return [i * n // k + rng.randrange((i + 1) * n // k - i * n // k) for i in range(k)]


def variant(path: str, rng: random.Random) -> tuple[bytes, str]:
    """New bytes made from the image at ``path``: flipped and re-encoded; and their file extension."""
    ext = os.path.splitext(path)[1]
    fmt = Image.registered_extensions().get(ext.lower(), "PNG")
    with Image.open(path) as image:
        image.load()
        flipped = image.transpose(rng.choice(FLIPS))
    out = io.BytesIO()
    if fmt == "JPEG":
        flipped.convert("RGB").save(out, "JPEG", quality=rng.randint(70, 95))
    else:
        flipped.save(out, fmt)
    return out.getvalue(), ext


def write_new(root: str, relpath: str, data: bytes) -> None:
    """Write ``data`` as a new file (never through a hard link into SRC: any old name is unlinked)."""
    path = os.path.join(root, *relpath.split("/"))
    if os.path.lexists(path):
        os.unlink(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "xb") as handle:
        handle.write(data)


def _free_name(root: str, relpath_stem: str, ext: str, taken: set[str]) -> str:
    name, n = f"{relpath_stem}_new{ext}", 1
    while name in taken or os.path.lexists(os.path.join(root, *name.split("/"))):
        n += 1
        name = f"{relpath_stem}_new{n}{ext}"
    taken.add(name)
    return name


def _add_next_to(root: str, anchors: list[str], donors: list[str], rng: random.Random) -> list[str]:
    """A new image right after each anchor in the order, made from the matching donor."""
    added: list[str] = []
    taken: set[str] = set()
    for anchor, donor in zip(anchors, donors, strict=True):
        data, ext = variant(os.path.join(root, *donor.split("/")), rng)
        name = _free_name(root, os.path.splitext(anchor)[0], ext, taken)
        write_new(root, name, data)
        added.append(name)
    return added


def _donors(rng: random.Random, samples: list[tuple[str, int]], count: int,
            not_label: int | None = None) -> list[str]:
    pool = [path for path, label in samples if label != not_label] or [path for path, _ in samples]
    return [pool[i] for i in spread(rng, len(pool), count)] if count <= len(pool) else \
        [rng.choice(pool) for _ in range(count)]


def edit_added(root: str, classes: list[str], samples: list[tuple[str, int]], k: int,
               rng: random.Random) -> Edit:
    labels = sorted({label for _, label in samples})
    label = rng.choice(labels)
    in_class = [path for path, lab in samples if lab == label]
    anchors = [in_class[i * len(in_class) // k] for i in range(k)]  # spread through the class
    added = _add_next_to(root, anchors, _donors(rng, samples, k, not_label=label), rng)
    return Edit("a-added", f"+{k} in class {classes[label]}", added=added)


def edit_removed(root: str, classes: list[str], samples: list[tuple[str, int]], k: int,
                 rng: random.Random) -> Edit:
    removed = [samples[i][0] for i in spread(rng, len(samples), k)]
    for relpath in removed:
        os.unlink(os.path.join(root, *relpath.split("/")))
    return Edit("b-removed", f"-{len(removed)} across classes", removed=removed)


def edit_changed(root: str, classes: list[str], samples: list[tuple[str, int]], k: int,
                 rng: random.Random) -> Edit:
    changed = [samples[i][0] for i in spread(rng, len(samples), k)]
    for relpath in changed:
        data, _ = variant(os.path.join(root, *relpath.split("/")), rng)
        write_new(root, relpath, data)
    return Edit("c-changed", f"~{len(changed)} re-encoded", changed=changed)


def edit_new_class(root: str, classes: list[str], samples: list[tuple[str, int]], k: int,
                   rng: random.Random) -> Edit:
    name = max(classes) + "_new"  # sorts after every class
    count = max(1, round(len(samples) / len(classes)))
    added = []
    for i, donor in enumerate(_donors(rng, samples, count)):
        data, ext = variant(os.path.join(root, *donor.split("/")), rng)
        added.append(f"{name}/{i:06d}{ext}")
        write_new(root, added[-1], data)
    return Edit("d-new-class", f"class {name} (+{count}) last", added=added, new_class=name)


def edit_added_1pct(root: str, classes: list[str], samples: list[tuple[str, int]], k: int,
                    rng: random.Random) -> Edit:
    count = max(1, round(len(samples) / 100))
    anchors = [samples[i] for i in spread(rng, len(samples), count)]
    donors = [_donors(rng, samples, 1, not_label=label)[0] for _, label in anchors]
    added = _add_next_to(root, [path for path, _ in anchors], donors, rng)
    return Edit("e-added-1pct", f"+{len(added)} (1 %) over all classes", added=added)


EDITS: dict[str, Callable[[str, list[str], list[tuple[str, int]], int, random.Random], Edit]] = {
    "a-added": edit_added, "b-removed": edit_removed, "c-changed": edit_changed,
    "d-new-class": edit_new_class, "e-added-1pct": edit_added_1pct,
}


# -- what was written -----------------------------------------------------------------------------

def shard_contents(root: str, manifest: packer.Manifest) -> list[list[tuple[str, int]]]:
    """Per shard of ``manifest``, ``(relpath, label)`` of its samples, in order."""
    index = SampleIndex.of(root, manifest)
    return [[(index.path(i), int(index.targets[i])) for i in range(s.first, s.first + s.num_samples)]
            for s in manifest.shards]


def shards_holding(contents: list[list[tuple[str, int]]], relpaths: Iterable[str]) -> set[int]:
    """Numbers of the shards (``contents`` from :func:`shard_contents`) that hold any of ``relpaths``."""
    wanted = set(relpaths)
    return {number for number, samples in enumerate(contents) if any(path in wanted for path, _ in samples)}


def dataset_differences(updated: str, fresh: str) -> list[str]:
    """How two finished datasets differ: files (but the manifests of versions and the lock) by
    name and bytes, and ``index.json`` but for its volatile fields. Empty when they are the same."""
    def files(root: str) -> dict[str, bytes]:
        top = Path(root)
        return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*"))
                if p.is_file() and p.name not in ("index.json", LOCK_NAME) and p.parent.name != "versions"}

    def manifest(root: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(Path(root, "index.json").read_text(encoding="utf-8"))
        for key in VOLATILE:
            data.pop(key, None)
        return data

    ours, theirs = files(updated), files(fresh)
    found = [f"only in the update: {name}" for name in sorted(ours.keys() - theirs.keys())]
    found += [f"only in the conversion: {name}" for name in sorted(theirs.keys() - ours.keys())]
    found += [f"bytes differ: {name}" for name in sorted(ours.keys() & theirs.keys())
              if ours[name] != theirs[name]]
    left, right = manifest(updated), manifest(fresh)
    found += [f"manifest field differs: {key}" for key in sorted(left.keys() | right.keys())
              if left.get(key) != right.get(key)]
    return found


# -- the run --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Baseline:
    """The full conversion every scenario starts from and is measured against."""

    root: str
    manifest: packer.Manifest
    contents: list[list[tuple[str, int]]]  # per shard, (relpath, label) of its samples
    seconds: float

    @property
    def samples(self) -> list[tuple[str, int]]:
        return [sample for shard in self.contents for sample in shard]

    @property
    def shard_bytes(self) -> int:
        return sum(shard.num_bytes for shard in self.manifest.shards)


def run_scenario(name: str, args: argparse.Namespace, work: str, source: str,
                 base: Baseline) -> dict[str, Any]:
    """Reset the source, edit it, update a copy of the baseline; what the update wrote, checked."""
    scenario_dir = os.path.join(work, name)
    if os.path.lexists(scenario_dir):
        shutil.rmtree(scenario_dir)
    os.makedirs(scenario_dir)
    hardlink_tree(args.src, source)  # back to the baseline's state
    dst = os.path.join(scenario_dir, "dst")
    hardlink_tree(base.root, dst, skip=[LOCK_NAME])
    rng = random.Random(f"{args.seed}/{name}")
    edit = EDITS[name](source, list(base.manifest.classes), base.samples, args.files, rng)
    with open(os.path.join(scenario_dir, "edits.json"), "w", encoding="utf-8") as handle:
        json.dump({"added": edit.added, "removed": edit.removed, "changed": edit.changed,
                   "new_class": edit.new_class}, handle, indent=2)

    _log(f"[{name}] {edit.description}: packer.update")
    started = time.perf_counter()
    result = packer.update(source, dst, workers=args.workers)
    seconds = time.perf_counter() - started
    manifest = result.manifest
    counted = (result.files_added, result.files_removed, result.files_changed)
    made = (len(edit.added), len(edit.removed), len(edit.changed))

    contents = shard_contents(dst, manifest)
    new_touched = shards_holding(contents, edit.added + edit.changed)
    old_touched = shards_holding(base.contents, edit.removed)
    touched = len(new_touched) + len(old_touched)
    if edit.new_class is None:
        bound = sum(counted) + 1
        bound_rule = "files added + removed + changed + 1"
    else:
        bound = len(new_touched) + 1
        bound_rule = "shards of the new class + 1"
    problems = []
    if counted != made:
        problems.append(f"update counted +{counted[0]}/-{counted[1]}/~{counted[2]}, the edit made "
                        f"+{made[0]}/-{made[1]}/~{made[2]}")
    if result.shards_written > bound:
        problems.append(f"{result.shards_written} shards written > bound {bound} ({bound_rule})")
    # Written shards that hold no added or changed file, and which baseline shards their
    # samples were in: where a rewrite spread beyond the shards the edits landed in.
    old_shard_of = {path: number for number, samples in enumerate(base.contents) for path, _ in samples}
    kept = {shard.path for shard in base.manifest.shards}
    beyond = [{"shard": number, "samples": len(contents[number]),
               "from_baseline_shards": sorted({old_shard_of[path] for path, _ in contents[number]
                                               if path in old_shard_of})}
              for number, shard in enumerate(manifest.shards)
              if shard.path not in kept and number not in new_touched]
    row: dict[str, Any] = {
        "scenario": name, "description": edit.description,
        "files_added": result.files_added, "files_removed": result.files_removed,
        "files_changed": result.files_changed,
        "shards_written": result.shards_written, "shards_reused": result.shards_reused,
        "shards_total": len(manifest.shards), "shards_touched": touched,
        "shards_touched_new": sorted(new_touched), "shards_touched_baseline": sorted(old_touched),
        "cascade": result.shards_written - touched, "written_without_edits": beyond,
        "bytes_written": result.bytes_written, "bytes_vs_full": result.bytes_written / base.shard_bytes,
        "seconds": seconds, "seconds_vs_full": seconds / base.seconds,
        "bound": bound, "bound_rule": bound_rule, "bound_ok": not problems, "problems": problems,
        "version": result.version,
    }
    if args.check:
        _log(f"[{name}] --check: packer.convert of the edited source, then collect_garbage on the update")
        fresh = os.path.join(scenario_dir, "fresh")
        started = time.perf_counter()
        packer.convert(source, fresh, to=args.to, shard_size=args.shard_size, workers=args.workers)
        row["check_convert_seconds"] = time.perf_counter() - started
        packer.collect_garbage(dst, keep_versions=1)
        differences = dataset_differences(dst, fresh)
        row["equal"] = not differences
        row["differences"] = differences
    return row


def _mb(num_bytes: float) -> str:
    return f"{num_bytes / 1e6:.1f} MB" if num_bytes >= 1e5 else f"{num_bytes / 1e3:.1f} kB"


def print_table(report: dict[str, Any], check: bool) -> None:
    base = report["baseline"]
    print(f"{report['src']}: {base['images']} images; backend {report['backend']}, shard size "
          f"{report['shard_size']}, --files {report['files']}, seed {report['seed']}, "
          f"workers {report['workers']}, {report['cpus']} CPUs")
    header = (f"{'scenario':<14} {'edit':<32} {'files +/-/~':>12} {'shards written/total':>21} "
              f"{'touched':>13} {'bytes written':>14} {'vs full':>8} {'update s':>9} {'vs full':>8}  bound")
    if check:
        header += "           same as convert"
    print(header)
    print("-" * len(header))
    for row in report["scenarios"]:
        files = f"+{row['files_added']}/-{row['files_removed']}/~{row['files_changed']}"
        shards = f"{row['shards_written']}/{row['shards_total']}"
        touched = f"{row['shards_touched']} ({row['cascade']:+d})"
        bound = f"{'ok' if row['bound_ok'] else 'FAIL'} (<= {row['bound']})"
        line = (f"{row['scenario']:<14} {row['description']:<32} {files:>12} {shards:>21} {touched:>13} "
                f"{_mb(row['bytes_written']):>14} {100 * row['bytes_vs_full']:>6.1f} % "
                f"{row['seconds']:>9.2f} {row['seconds_vs_full']:>7.3f}x  {bound:<16}")
        if check:
            line += f" {'equal' if row['equal'] else 'DIFFERENT'}"
        print(line.rstrip())
    print(f"full conversion (baseline): {base['images']} images, {base['shards']} shards, "
          f"{_mb(base['shard_bytes'])} of shards, {base['seconds']:.2f} s")
    print("touched: new-version shards holding an added or changed file + baseline shards that held "
          "a removed file; (+n): shards written beyond them")
    for row in report["scenarios"]:
        for problem in row["problems"]:
            print(f"FAIL {row['scenario']}: {problem}")
        if not row["bound_ok"]:
            for extra in row["written_without_edits"]:
                print(f"  written, no added or changed file: shard {extra['shard']} ({extra['samples']} "
                      f"samples) from baseline shards {extra['from_baseline_shards']}")
        for difference in row.get("differences", [])[:10]:
            print(f"DIFFERENT {row['scenario']}: {difference}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", help="an ImageFolder tree (never modified)")
    parser.add_argument("--workdir", default="bench_update_work",
                        help="where the copies and datasets go (kept; replaced by the next run)")
    parser.add_argument("--to", default="lmdb", choices=packer.backend_names())
    parser.add_argument("--shard-size", default="4MB", help="planned bytes per shard (default 4MB)")
    parser.add_argument("--files", type=int, default=20, help="k: files added, removed, changed (default 20)")
    parser.add_argument("--workers", type=int, default=None,
                        help="for convert and update (default: packer's choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS, metavar="NAME",
                        help="scenarios to run (default all): " + ", ".join(SCENARIOS))
    parser.add_argument("--check", action="store_true",
                        help="also check each update equals a fresh conversion, byte for byte")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead")
    args = parser.parse_args(argv)
    if args.files < 1:
        parser.error("--files must be at least 1")
    args.src = os.path.realpath(args.src)
    work = os.path.realpath(args.workdir)
    if not os.path.isdir(args.src):
        parser.error(f"{args.src} is not a directory")
    if os.path.commonpath([args.src, work]) in (args.src, work):
        parser.error(f"the work directory {work} and SRC {args.src} must not contain one another")

    os.makedirs(work, exist_ok=True)
    source, base_root = os.path.join(work, "src"), os.path.join(work, "base")
    for name in SCENARIOS:  # the previous run's, so that nothing stale is left next to this run's
        if os.path.lexists(os.path.join(work, name)):
            shutil.rmtree(os.path.join(work, name))
    _log(f"hard-link copy of {args.src} -> {source}")
    hardlink_tree(args.src, source)
    if os.path.lexists(base_root):
        shutil.rmtree(base_root)
    warm(source)
    _log(f"baseline: packer.convert {source} -> {base_root}")
    started = time.perf_counter()
    converted = packer.convert(source, base_root, to=args.to, shard_size=args.shard_size,
                               workers=args.workers)
    base_seconds = time.perf_counter() - started
    manifest = converted.manifest
    base = Baseline(base_root, manifest, shard_contents(base_root, manifest), base_seconds)
    if not base.manifest.num_samples:
        parser.error(f"{args.src} holds no image packer could pack")
    baseline = {"images": base.manifest.num_samples, "found": converted.found,
                "shards": len(base.manifest.shards), "shard_bytes": base.shard_bytes,
                "bytes": base.manifest.num_bytes, "seconds": base_seconds}
    rows = [run_scenario(name, args, work, source, base) for name in args.scenarios]
    hardlink_tree(args.src, source)  # leave W/src as W/base was made from
    ok = all(row["bound_ok"] and row.get("equal", True) for row in rows)
    report = {"src": args.src, "workdir": work, "backend": args.to, "shard_size": args.shard_size,
              "files": args.files, "seed": args.seed, "workers": args.workers, "cpus": available_cpus(),
              "check": args.check, "baseline": baseline, "scenarios": rows, "ok": ok}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report, args.check)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
