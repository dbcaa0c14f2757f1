#!/usr/bin/env python3
"""Open time and DataLoader worker memory of a packed dataset of a million samples, in one run.

    python scripts/bench_memory.py [--samples 1000000] [--backend lmdb|hdf5] [--classes 1000]
                                   [--workers 2] [--batch-size 256] [--no-decode] [--epochs 1]
                                   [--start-method fork|spawn|forkserver] [--gc-freeze]
                                   [--workdir DIR] [--keep] [--json]

Why: a dataset object that holds a Python list of a million ``(path, target)`` tuples costs every
DataLoader worker its own copy (reference counts write to every page they touch: pytorch issue
13246), and a manifest that grows with the sample count makes opening slow. packer keeps labels
and paths in memory-mapped arrays and opens lazily; this script measures that promise:

1. **Write.** ``--samples`` samples without a million files: 16 distinct 8x8 PNGs are encoded once
   in memory and written, cycling, straight through the backend's ``ShardWriter`` into shards of
   ``--shard-samples`` samples, with paths ``class_0042/img_0001234.png`` in ImageFolder order over
   ``--classes`` classes; then the sample index (``write_sample_index``), each shard's SHA-256 and a
   real ``Manifest``. The result opens with ``packer.open_dataset`` and passes
   ``packer.verify_dataset`` (checked here; ``--deep-verify`` also decodes every sample).
2. **Open.** In ``--open-repeats`` fresh Python processes (imports done and timed first), the time
   of ``packer.open_dataset(DST)`` alone, a second open, ``len(ds)``, ``ds.targets[123456]``,
   ``ds.samples[-1]``, ``np.asarray(ds.targets)``, the first ``ds[0]``, and
   ``len(pickle.dumps(ds))`` (what every spawned worker receives); medians. Also the Python heap
   one more open dataset holds (``tracemalloc``), which is what a forked worker inherits.
3. **Worker memory.** In a fresh process, ``--epochs`` full shuffled epochs through
   ``DataLoader(ds, batch_size, shuffle=True, num_workers, persistent_workers=True)``. Images are
   decoded to PIL in the workers (``--no-decode`` returns the stored bytes instead); the
   ``collate_fn`` reduces each batch to counts in the worker, so only a small tuple crosses the
   pipe and the measurement is the reading side alone (decoding a million 8x8 PNGs takes about a
   minute on 2 cores; ``--no-decode`` about 10 s). Each worker's USS (unique set size:
   ``Private_Clean + Private_Dirty`` of ``/proc/PID/smaps_rollup``) is taken when the workers
   start, when the first batch *that worker* made arrives (the baseline), every ~2% of the epoch
   (for the peak), and after the last batch, while the persistent workers are still alive.
   Growth = end - first batch. The mappings whose private bytes changed most are listed from
   ``/proc/PID/smaps``, so a miss names its structure. With ``--epochs 2`` or more, the growth
   during the last epoch alone is reported too (steady state).

Reading USS: ``Private_Dirty`` is anonymous memory (heap, arrays, Python objects) that only this
process holds: what a leak or a copy-on-read list shows up as. ``Private_Clean`` is mostly file
pages (an LMDB shard or a ``.npy`` mapped by this process and no other): page cache, reclaimable,
not a copy. With one reader a whole LMDB shard becomes that reader's "unique" memory once read;
with two workers most pages are read by both and count as shared. Both parts are reported.
The main process's USS also moves with whatever else maps the same libraries (another torch
process on the machine makes libtorch's pages shared), so compare it within one run only.

Under ``fork``, a worker's first full garbage collection (generation 2) writes to the header of
every object it inherited and so copies the pages holding them: a one-time jump of private dirty
memory the size of the parent's Python heap (about 35 MB after importing torch, PIL and packer),
whatever the dataset's size, and whenever the interpreter happens to run that collection (before
the first batch, during the epoch, or not at all). ``--gc-freeze`` calls ``gc.freeze()`` in the
parent before the workers start, which removes it; ``spawn``/``forkserver`` workers import
everything themselves instead (about 150 MB each, flat).

Targets of the issue (printed next to the figures): opening under 1 s; each worker's USS growth
over an epoch with 2 workers under 50 MB (MB = 10^6 bytes throughout). Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import multiprocessing
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from PIL import Image

from packer import IMG_EXTENSIONS, Manifest, PackerError, backend_names, verify_dataset
from packer.conversion.plan import shard_name
from packer.format.backends import get_backend
from packer.format.codecs import get_codec
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME, ScanInfo, ShardEntry
from packer.format.sample_index import write_sample_index
from packer.source.imagecheck import DEFAULT_MAX_PIXELS
from packer.store.durable import sha256_file

MB = 1_000_000
OPEN_TARGET_S = 1.0
GROWTH_TARGET_MB = 50.0
DISTINCT_IMAGES = 16
IMAGE_SIDE = 8
#: Slack per record for the LMDB map (node header, key, page fill); the writer grows it anyway.
RECORD_OVERHEAD = 64
TRACE_POINTS = 50


# --------------------------------------------------------------------------------------------
# Memory of a process, from /proc


@dataclass(frozen=True)
class Memory:
    """Memory of one process in bytes, from ``/proc/PID/smaps_rollup``."""

    rss: int
    pss: int
    private_clean: int
    private_dirty: int
    anonymous: int

    @property
    def uss(self) -> int:
        """Unique set size: pages no other process maps."""
        return self.private_clean + self.private_dirty

    def to_dict(self) -> dict[str, int]:
        return asdict(self) | {"uss": self.uss}


def _smaps_fields(lines: Iterable[str]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for line in lines:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            totals[key] = totals.get(key, 0) + int(parts[0]) * 1024
    return totals


def read_memory(pid: int) -> Memory:
    """Memory of process ``pid``; ``smaps_rollup`` (Linux 4.14+), else the sum of ``smaps``.

    Raises:
        RuntimeError: the process is gone or /proc cannot be read.
    """
    for name in ("smaps_rollup", "smaps"):
        try:
            with open(f"/proc/{pid}/{name}", encoding="ascii", errors="replace") as handle:
                totals = _smaps_fields(handle)
            break
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}"):
                raise RuntimeError(f"process {pid} is gone; cannot read its memory") from None
        except OSError as err:
            raise RuntimeError(f"cannot read /proc/{pid}/{name}: {err}") from err
    else:
        raise RuntimeError(f"/proc/{pid} has neither smaps_rollup nor smaps: Linux /proc is needed")
    return Memory(rss=totals.get("Rss", 0), pss=totals.get("Pss", 0),
                  private_clean=totals.get("Private_Clean", 0),
                  private_dirty=totals.get("Private_Dirty", 0),
                  anonymous=totals.get("Anonymous", 0))


def private_by_mapping(pid: int) -> dict[str, int]:
    """Private bytes (clean + dirty) of process ``pid`` per mapped file, ``[heap]`` or ``[anon]``."""
    out: dict[str, int] = {}
    name = "[anon]"
    try:
        with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                head = line.split(None, 5)
                if head and "-" in head[0] and ":" not in head[0]:  # a mapping's header line
                    name = head[5].strip() if len(head) > 5 else "[anon]"
                    name = os.path.basename(name) if name.startswith("/") else name
                elif head and head[0] in ("Private_Clean:", "Private_Dirty:"):
                    out[name] = out.get(name, 0) + int(head[1]) * 1024
    except OSError as err:
        raise RuntimeError(f"cannot read /proc/{pid}/smaps: {err}") from err
    return out


def top_growth(before: dict[str, int], after: dict[str, int], count: int = 5) -> list[dict[str, Any]]:
    """The mappings whose private bytes changed most between two :func:`private_by_mapping` calls."""
    grown = {name: after.get(name, 0) - before.get(name, 0) for name in set(before) | set(after)}
    ranked = sorted(grown.items(), key=lambda item: -abs(item[1]))[:count]
    return [{"mapping": name, "growth_bytes": delta} for name, delta in ranked if delta]


# --------------------------------------------------------------------------------------------
# 1. Writing a synthetic dataset through packer's own writers


def tiny_pngs(count: int, side: int, seed: int = 0) -> list[bytes]:
    """``count`` distinct random ``side`` x ``side`` RGB PNGs, encoded in memory."""
    rng = np.random.default_rng(seed)
    images = []
    for _ in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buffer, "PNG")
        images.append(buffer.getvalue())
    return images


def _log(message: str) -> None:
    print(f"[bench_memory {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def write_dataset(dst: str, *, backend_name: str, num_samples: int, num_classes: int,
                  shard_samples: int, images: list[bytes]) -> dict[str, Any]:
    """Write a complete packed dataset into the new directory ``dst``; return timings and sizes.

    Sample ``i`` is ``images[i % len(images)]`` in class ``i * num_classes // num_samples``:
    contiguous classes with zero-padded names, so the order is ImageFolder's.
    """
    backend = get_backend(backend_name)
    os.makedirs(dst)
    marker = os.path.join(dst, IN_PROGRESS_NAME)
    with open(marker, "wb"):
        pass
    cycle_bytes = sum(len(image) for image in images)
    shards: list[ShardEntry] = []
    started = time.perf_counter()
    write_s = hash_s = 0.0
    for number, first in enumerate(range(0, num_samples, shard_samples)):
        count = min(shard_samples, num_samples - first)
        name = shard_name(number) + backend.suffix
        path = os.path.join(dst, name)
        full, rest = divmod(count, len(images))
        capacity = full * cycle_bytes + sum(len(images[(first + k) % len(images)]) for k in range(rest))
        t0 = time.perf_counter()
        with backend.writer(path, capacity=capacity + count * RECORD_OVERHEAD) as writer:
            for i in range(first, first + count):
                writer.write(images[i % len(images)])
        t1 = time.perf_counter()
        shards.append(ShardEntry(name, first, count, os.path.getsize(path), sha256_file(path)))
        write_s += t1 - t0
        hash_s += time.perf_counter() - t1
        _log(f"  {name}: {count} samples, {shards[-1].num_bytes / MB:.1f} MB")

    t0 = time.perf_counter()
    targets = (np.arange(num_samples, dtype=np.int64) * num_classes) // num_samples
    class_width, sample_width = max(4, len(str(num_classes - 1))), max(7, len(str(num_samples - 1)))
    classes = tuple(f"class_{c:0{class_width}d}" for c in range(num_classes))
    target_list: list[int] = targets.tolist()
    relpaths = [f"{classes[c]}/img_{i:0{sample_width}d}.png" for i, c in enumerate(target_list)]
    sample_index = write_sample_index(dst, relpaths, target_list, np.zeros((num_samples, 3), dtype=np.int64))
    del relpaths, target_list
    index_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    manifest = Manifest(
        backend=backend_name,
        codec="original",
        codec_params=get_codec("original").params(),
        check="none",
        max_pixels=DEFAULT_MAX_PIXELS,
        classes=classes,
        class_counts=tuple(int(n) for n in np.bincount(targets, minlength=num_classes)),
        shards=tuple(shards),
        sample_index=sample_index,
        skipped=(),
        scan=ScanInfo(filter="extensions", extensions=IMG_EXTENSIONS, include_hidden=False,
                      symlink_loops="walked_once"),
        source="<synthetic>",
        created_by="packer bench_memory",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra={"synthetic": {"distinct_images": len(images), "image_side": IMAGE_SIDE,
                             "shard_samples": shard_samples}},
    )
    manifest.save(dst)
    os.unlink(marker)
    manifest_s = time.perf_counter() - t0
    disk = manifest.num_bytes + os.path.getsize(os.path.join(dst, MANIFEST_NAME))
    return {"seconds": time.perf_counter() - started, "shards_s": write_s, "hash_s": hash_s,
            "index_s": index_s, "manifest_s": manifest_s, "num_shards": len(shards),
            "payload_bytes": num_samples * cycle_bytes // len(images),
            "shard_bytes": sum(s.num_bytes for s in shards),
            "index_bytes": sum(f.num_bytes for f in sample_index.values()),
            "manifest_bytes": os.path.getsize(os.path.join(dst, MANIFEST_NAME)), "disk_bytes": disk}


def verify(dst: str, *, deep: bool) -> dict[str, Any]:
    """Run ``packer.verify_dataset``; raise with its findings when anything is wrong."""
    started = time.perf_counter()
    report = verify_dataset(dst, deep=deep)
    seconds = time.perf_counter() - started
    if not report.ok:
        listed = "; ".join(f"{p.kind}: {p.message}" for p in report.problems[:5])
        raise RuntimeError(f"verify_dataset({dst!r}) found {report.problem_counts}: {listed}")
    return {"ok": True, "deep": deep, "seconds": seconds, "files_checked": report.files_checked,
            "bytes_hashed": report.bytes_hashed, "samples_checked": report.samples_checked}


# --------------------------------------------------------------------------------------------
# 2. Opening, in a fresh process


def child_open(dst: str, backend_name: str) -> dict[str, Any]:
    """Time opening and first accesses in this (fresh) process; imports are timed apart."""
    t0 = time.perf_counter()
    from packer import open_dataset  # imports its module (and torch) now: timed apart from the open

    get_backend(backend_name)  # the backend module (lmdb / h5py) too
    import_s = time.perf_counter() - t0

    def timed(action: Any) -> tuple[Any, float]:
        start = time.perf_counter()
        value = action()
        return value, time.perf_counter() - start

    ds, open_s = timed(lambda: open_dataset(dst))
    n = len(ds)
    probe = min(123456, n - 1)
    _, reopen_s = timed(lambda: open_dataset(dst))
    _, len_s = timed(lambda: len(ds))
    target, target_s = timed(lambda: ds.targets[probe])
    last, last_s = timed(lambda: ds.samples[-1])
    _, all_targets_s = timed(lambda: np.asarray(ds.targets))
    _, first_read_s = timed(lambda: ds[0])
    blob, pickle_s = timed(lambda: pickle.dumps(ds))
    _, unpickle_s = timed(lambda: pickle.loads(blob))
    # What one more open dataset holds on the Python heap (what a forked worker inherits).
    objects = len(gc.get_objects())
    tracemalloc.start()
    held = open_dataset(dst)
    heap_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    gc_objects = len(gc.get_objects()) - objects
    del held
    return {"import_s": import_s, "open_s": open_s, "reopen_s": reopen_s, "len_s": len_s,
            "target_s": target_s, "sample_last_s": last_s, "all_targets_s": all_targets_s,
            "first_read_s": first_read_s, "pickle_s": pickle_s, "unpickle_s": unpickle_s,
            "pickled_bytes": len(blob), "heap_bytes": heap_bytes, "gc_objects": gc_objects,
            "probe": probe, "target": target, "last_sample": list(last),
            "num_samples": n, "memory": read_memory(os.getpid()).to_dict()}


# --------------------------------------------------------------------------------------------
# 3. A full epoch through a DataLoader, in a fresh process


def summarize_batch(batch: list[tuple[Any, int]]) -> tuple[int, int, int, int]:
    """Collate in the worker down to ``(worker pid, samples, bytes or pixels, sum of targets)``."""
    size = 0
    for sample, _ in batch:
        size += len(sample) if isinstance(sample, bytes | bytearray) else sample.width * sample.height
    return os.getpid(), len(batch), size, sum(int(target) for _, target in batch)


def child_epoch(dst: str, *, workers: int, batch_size: int, decode: bool, epochs: int,
                start_method: str | None, seed: int, gc_freeze: bool) -> dict[str, Any]:
    """Run ``epochs`` epochs and sample every worker's memory; see the module docstring.

    A worker's baseline is taken when the first batch *it* produced arrives (with ``fork`` a
    worker that has not run yet still shares every page with the parent, which would look like
    growth later). With ``--workers 0`` the main process is the one reader and is measured.
    ``gc_freeze`` calls ``gc.freeze()`` before the workers start, so that a forked worker's
    garbage collector never writes to (and so copies) the objects it inherited.
    """
    import torch
    from torch.utils.data import DataLoader

    from packer import open_dataset

    me = os.getpid()
    main_start = read_memory(me)
    ds = open_dataset(dst, decode=decode)
    ds[0]  # touched in the parent first, as users (and packer's worker tests) do
    expected_sum = sum(target * count for target, count in enumerate(ds.manifest.class_counts))
    main_open = read_memory(me)
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0, collate_fn=summarize_batch,
                        generator=torch.Generator().manual_seed(seed),
                        multiprocessing_context=start_method if workers > 0 else None)
    batches = len(loader)
    every = max(1, batches // TRACE_POINTS)
    if gc_freeze:
        gc.collect()
        gc.freeze()
    pids: list[int] = []
    spawned: dict[int, Memory] = {}
    first: dict[int, Memory] = {}
    first_maps: dict[int, dict[str, int]] = {}
    peak: dict[int, int] = {}
    trace: list[dict[str, Any]] = []
    ends: list[dict[int, Memory]] = []
    epochs_out: list[dict[str, Any]] = []
    main_first = main_open
    for epoch in range(epochs):
        started = time.perf_counter()
        seen = target_sum = size = 0
        served: dict[int, int] = {}
        iterator = iter(loader)  # starts the workers (epoch 0) or resets the persistent ones
        if not pids:
            children = multiprocessing.active_children()
            pids = sorted(p.pid for p in children if p.pid is not None) if workers else [me]
            if len(pids) != max(workers, 1):
                raise RuntimeError(f"found {len(pids)} worker processes, expected {workers}")
            spawned = {p: read_memory(p) for p in pids}
        for number, (pid, count, nbytes, tsum) in enumerate(iterator):
            seen, size, target_sum = seen + count, size + nbytes, target_sum + tsum
            served[pid] = served.get(pid, 0) + count
            if number == 0 and epoch == 0:
                main_first = read_memory(me)
            if pid not in pids:
                raise RuntimeError(f"a batch came from process {pid}, not one of the workers {pids} "
                                   "found at the first batch (did a worker restart?)")
            if pid not in first:
                first[pid] = read_memory(pid)
                first_maps[pid] = private_by_mapping(pid)
                peak[pid] = first[pid].uss
            if number % every == 0:
                point: dict[str, Any] = {"epoch": epoch, "batch": number}
                for p in first:
                    uss = read_memory(p).uss
                    peak[p] = max(peak[p], uss)
                    point[str(p)] = uss
                trace.append(point)
        seconds = time.perf_counter() - started
        if seen != len(ds) or target_sum != expected_sum:
            raise RuntimeError(f"epoch {epoch} read {seen} samples (target sum {target_sum}); "
                               f"expected {len(ds)} ({expected_sum})")
        if set(first) != set(pids):
            raise RuntimeError(f"workers {sorted(set(pids) - set(first))} served no batch: "
                               "too few batches for the workers (lower --batch-size)")
        ends.append({p: read_memory(p) for p in pids})
        for p in pids:
            peak[p] = max(peak[p], ends[-1][p].uss)
        epochs_out.append({"epoch": epoch, "seconds": seconds, "samples_per_s": seen / seconds,
                           "decoded_pixels" if decode else "payload_bytes": size,
                           "served": {str(p): n for p, n in served.items()},
                           "workers": {str(p): m.to_dict() for p, m in ends[-1].items()},
                           "main": read_memory(me).to_dict()})
    workers_out = []
    for p in pids:
        last = ends[-1][p]
        figures: dict[str, Any] = {
            "pid": p, "started": spawned[p].to_dict(), "first": first[p].to_dict(),
            "end": last.to_dict(), "peak_uss": peak[p],
            "uss_growth": last.uss - first[p].uss,
            "uss_growth_since_start": last.uss - spawned[p].uss,
            "private_dirty_growth": last.private_dirty - first[p].private_dirty,
            "private_clean_growth": last.private_clean - first[p].private_clean,
            "anonymous_growth": last.anonymous - first[p].anonymous,
            "top_mapping_growth": top_growth(first_maps[p], private_by_mapping(p)),
        }
        if len(ends) > 1:
            figures["last_epoch_uss_growth"] = last.uss - ends[-2][p].uss
            figures["last_epoch_private_dirty_growth"] = last.private_dirty - ends[-2][p].private_dirty
        workers_out.append(figures)
    del iterator, loader  # shuts the persistent workers down
    return {"batches": batches, "trace_every": every, "epochs": epochs_out, "workers": workers_out,
            "trace": trace,
            "main": {"start": main_start.to_dict(), "open": main_open.to_dict(),
                     "first_batch": main_first.to_dict(), "end": read_memory(me).to_dict()}}


# --------------------------------------------------------------------------------------------
# Driver


def run_child(args: argparse.Namespace, mode: str, dst: str, timeout: float) -> dict[str, Any]:
    """Run this script in a fresh interpreter in ``mode``; return the JSON of its last line."""
    command = [sys.executable, os.path.abspath(__file__), "--child", mode, "--dataset", dst,
               "--backend", args.backend, "--workers", str(args.workers),
               "--batch-size", str(args.batch_size), "--epochs", str(args.epochs),
               "--seed", str(args.seed)]
    command += ["--no-decode"] if args.no_decode else []
    command += ["--gc-freeze"] if args.gc_freeze else []
    command += ["--start-method", args.start_method] if args.start_method else []
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the {mode} measurement ran past {timeout:.0f} s") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"the {mode} measurement failed (exit {done.returncode}):\n"
                           f"{done.stderr.strip()[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure_open(args: argparse.Namespace, dst: str) -> dict[str, Any]:
    runs = [run_child(args, "open", dst, timeout=300) for _ in range(args.open_repeats)]
    timed = [key for key, value in runs[0].items() if key.endswith("_s")]
    out: dict[str, Any] = {key: statistics.median(run[key] for run in runs) for key in timed}
    out |= {"open_s_all": [run["open_s"] for run in runs], "repeats": len(runs)}
    kept = ("pickled_bytes", "heap_bytes", "gc_objects", "probe", "target", "last_sample", "num_samples",
            "memory")
    out |= {key: runs[0][key] for key in kept}
    return out


def _mb(value: float) -> str:
    return f"{value / MB:,.1f} MB"


def _ms(value: float) -> str:
    return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.2f} s"


def print_table(result: dict[str, Any]) -> None:
    cfg, write, opened, epoch = result["config"], result["write"], result["open"], result["epoch"]
    met = {True: "met", False: "MISSED"}
    print(f"packer bench_memory: {cfg['samples']:,} samples, {cfg['classes']} classes, backend "
          f"{cfg['backend']}, {cfg['workers']} workers ({cfg['start_method']}), batch {cfg['batch_size']}, "
          f"{'decoded to PIL' if cfg['decode'] else 'bytes (decode=False)'}, {cfg['cpus']} CPUs")
    print(f"  write        {write['seconds']:.1f} s ({write['shards_s']:.1f} s shards, "
          f"{write['hash_s']:.1f} s sha256, {write['index_s']:.1f} s sample index); "
          f"{write['num_shards']} shards")
    print(f"  disk         {_mb(write['disk_bytes'])} ({_mb(write['shard_bytes'])} shards for "
          f"{_mb(write['payload_bytes'])} payload, {_mb(write['index_bytes'])} sample index, "
          f"{write['manifest_bytes'] / 1e3:.1f} kB index.json)")
    check = result["verify"]
    print(f"  verify       verify_dataset: ok ({check['files_checked']} files, "
          f"{_mb(check['bytes_hashed'])} hashed{', deep' if check['deep'] else ''}, "
          f"{check['seconds']:.1f} s)")
    print(f"  open         median {_ms(opened['open_s'])} over {opened['repeats']} fresh processes "
          f"(target < {OPEN_TARGET_S:g} s: {met[opened['open_s'] < OPEN_TARGET_S]}); second open "
          f"{_ms(opened['reopen_s'])}; imports first {_ms(opened['import_s'])}")
    print(f"  access       len {_ms(opened['len_s'])}, targets[{opened['probe']}] {_ms(opened['target_s'])}, "
          f"samples[-1] {_ms(opened['sample_last_s'])}, asarray(targets) {_ms(opened['all_targets_s'])}, "
          f"first ds[0] {_ms(opened['first_read_s'])}")
    print(f"  pickle       {opened['pickled_bytes']} bytes, unpickle {_ms(opened['unpickle_s'])}; an open "
          f"dataset holds {opened['heap_bytes'] / 1e3:.0f} kB of Python heap in {opened['gc_objects']} "
          f"tracked objects; process USS after open {_mb(opened['memory']['uss'])}")
    for run in epoch["epochs"]:
        print(f"  epoch {run['epoch']}      {run['seconds']:.1f} s, {run['samples_per_s']:,.0f} samples/s")
    print("  worker USS (unique memory): at start, after its first batch, at the end of the epoch; growth "
          "= end - first batch,\n  split into private dirty (anonymous: heap, objects) and private clean "
          "(file pages no other process maps)")
    print(f"  {'worker':<8} {'start':>9} {'first':>9} {'end':>9} {'growth':>9} {'dirty':>9} {'clean':>9} "
          f"{'peak':>9}   target < {GROWTH_TARGET_MB:g} MB")
    for w in epoch["workers"]:
        print(f"  {w['pid']:<8} {_mb(w['started']['uss']):>9} {_mb(w['first']['uss']):>9} "
              f"{_mb(w['end']['uss']):>9} "
              f"{w['uss_growth'] / MB:>+6.1f} MB {w['private_dirty_growth'] / MB:>+6.1f} MB "
              f"{w['private_clean_growth'] / MB:>+6.1f} MB {_mb(w['peak_uss']):>9}   "
              f"{met[w['uss_growth'] / MB < GROWTH_TARGET_MB]}")
        grown = ", ".join(f"{g['mapping']} {g['growth_bytes'] / MB:+.1f}"
                          for g in w["top_mapping_growth"][:3])
        print(f"  {'':<8} changed most (MB): {grown or 'nothing'}")
        if "last_epoch_uss_growth" in w:
            print(f"  {'':<8} during the last epoch alone: {w['last_epoch_uss_growth'] / MB:+.1f} MB "
                  f"({w['last_epoch_private_dirty_growth'] / MB:+.1f} MB dirty)")
    main = epoch["main"]
    print(f"  main         RSS {_mb(main['open']['rss'])} after open, {_mb(main['end']['rss'])} at end; "
          f"USS {_mb(main['open']['uss'])} -> {_mb(main['end']['uss'])}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1_000_000, help="samples to write (default 1000000)")
    parser.add_argument("--backend", default="lmdb", choices=backend_names())
    parser.add_argument("--classes", type=int, default=1000, help="classes (default 1000)")
    parser.add_argument("--shard-samples", type=int, default=100_000,
                        help="samples per shard (default 100000: ten shards for a million)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=1, help="epochs; growth is end of last - first batch")
    parser.add_argument("--no-decode", action="store_true",
                        help="read stored bytes (decode=False) instead of decoding to PIL")
    parser.add_argument("--start-method", choices=multiprocessing.get_all_start_methods(), default=None,
                        help=f"worker start method (default: {multiprocessing.get_start_method()})")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="call gc.freeze() in the main process before the workers start")
    parser.add_argument("--open-repeats", type=int, default=5, help="fresh processes timing the open")
    parser.add_argument("--deep-verify", action="store_true", help="also decode every sample in verify")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed")
    parser.add_argument("--workdir", default=None,
                        help="directory for the dataset (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the dataset (its path is printed)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    parser.add_argument("--child", choices=("open", "epoch"), help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("samples", "classes", "shard_samples", "batch_size", "epochs", "open_repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        parser.error("--workers must be 0 or more")
    if args.classes > args.samples:
        parser.error(f"--classes {args.classes} exceeds --samples {args.samples}: ImageFolder has no "
                     "empty classes")
    if not os.path.exists("/proc/self/smaps_rollup") and not os.path.exists("/proc/self/smaps"):
        parser.error("this benchmark reads /proc/PID/smaps: it runs on Linux only")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child == "open":
        print(json.dumps(child_open(args.dataset, args.backend)))
        return 0
    if args.child == "epoch":
        print(json.dumps(child_epoch(args.dataset, workers=args.workers, batch_size=args.batch_size,
                                     decode=not args.no_decode, epochs=args.epochs,
                                     start_method=args.start_method, seed=args.seed,
                                     gc_freeze=args.gc_freeze)))
        return 0

    if args.workdir is not None:
        os.makedirs(args.workdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="packer-bench-memory-", dir=args.workdir)
    dst = os.path.join(work, f"dst-{args.backend}")
    result: dict[str, Any] = {"config": {
        "samples": args.samples, "classes": args.classes, "backend": args.backend,
        "shard_samples": args.shard_samples, "workers": args.workers, "batch_size": args.batch_size,
        "epochs": args.epochs, "decode": not args.no_decode, "seed": args.seed,
        "gc_freeze": args.gc_freeze,
        "start_method": args.start_method or multiprocessing.get_start_method(),
        "cpus": len(os.sched_getaffinity(0)), "python": sys.version.split()[0],
        "dataset": dst, "mb": MB}}
    try:
        _log(f"writing {args.samples:,} samples ({args.backend}) into {dst}")
        result["write"] = write_dataset(dst, backend_name=args.backend, num_samples=args.samples,
                                        num_classes=args.classes, shard_samples=args.shard_samples,
                                        images=tiny_pngs(DISTINCT_IMAGES, IMAGE_SIDE))
        _log(f"written in {result['write']['seconds']:.1f} s; verifying")
        result["verify"] = verify(dst, deep=args.deep_verify)
        _log(f"verify_dataset: ok ({result['verify']['files_checked']} files hashed in "
             f"{result['verify']['seconds']:.1f} s)")
        result["open"] = measure_open(args, dst)
        _log(f"open: median {result['open']['open_s'] * 1e3:.2f} ms; running "
             f"{args.epochs} epoch(s) with {args.workers} workers")
        result["epoch"] = run_child(args, "epoch", dst, timeout=3600 * args.epochs)
        result["targets"] = {
            "open_under_1s": result["open"]["open_s"] < OPEN_TARGET_S,
            "worker_uss_growth_under_50mb": all(w["uss_growth"] < GROWTH_TARGET_MB * MB
                                                for w in result["epoch"]["workers"]),
        }
    finally:
        if args.keep:
            _log(f"kept the dataset: {dst}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, PackerError) as err:
        print(f"bench_memory: error: {err}", file=sys.stderr)
        sys.exit(1)
