"""What a dataset holds and what a conversion did, as data (for ``--json``) and as text."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from packer.conversion.run import ConversionResult, TaskResult
from packer.format.manifest import MANIFEST_NAME, Manifest
from packer.conversion.merging import MergeResult
from packer.sizes import format_size
from packer.tools.verify import MAX_LISTED, VerifyReport

if TYPE_CHECKING:  # packer.tools.bench imports torch; this module must not
    from packer.tools.bench import BenchReport
    from packer.tools.profiling import LoadProfile

__all__ = ["append_listing", "dataset_info", "format_bench", "format_conversion", "format_info",
           "format_profile", "format_sweep", "format_verify"]

_MAX_LISTED = 20


def dataset_info(root: str | os.PathLike[str]) -> dict[str, Any]:
    """Summarise the dataset at ``root`` from its manifest alone (no shard is read).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError: see :meth:`Manifest.load`.
    """
    path = os.path.abspath(os.fspath(root))
    manifest = Manifest.load(path)
    return {
        "path": path,
        "format_version": manifest.format_version,
        "created_by": manifest.created_by,
        "created_at": manifest.created_at,
        "source": manifest.source,
        "backend": manifest.backend,
        "codec": manifest.codec,
        "codec_params": manifest.codec_params,
        "check": manifest.check,
        "num_samples": manifest.num_samples,
        "num_classes": len(manifest.classes),
        "classes": list(manifest.classes),
        "class_counts": dict(zip(manifest.classes, manifest.class_counts, strict=True)),
        "num_bytes": manifest.num_bytes,
        "shards": [
            {"path": s.path, "first": s.first, "num_samples": s.num_samples,
             "num_bytes": s.num_bytes, "sha256": s.sha256}
            for s in manifest.shards
        ],
        "skipped": [{"path": s.path, "reason": s.reason, "detail": s.detail}
                    for s in manifest.skipped],
        "scan": {
            "include_hidden": manifest.scan.include_hidden,
            "ignored_hidden": list(manifest.scan.ignored_hidden),
            "cut_symlink_loops": list(manifest.scan.cut_symlink_loops),
            "unreadable_dirs": list(manifest.scan.unreadable_dirs),
            "other_files": manifest.scan.other_files,
            "root_files": manifest.scan.root_files,
        },
    }


def append_listing(lines: list[str], title: str, items: Sequence[str], *, more: str) -> None:
    """Append ``title (n):`` and the first items to ``lines``; ``more`` says where the rest are."""
    if not items:
        return
    lines.append(f"{title} ({len(items)}):")
    lines.extend(f"  {item}" for item in items[:_MAX_LISTED])
    if len(items) > _MAX_LISTED:
        lines.append(f"  ... and {len(items) - _MAX_LISTED} more ({more})")


def _listed(lines: list[str], title: str, items: list[str]) -> None:
    append_listing(lines, title, items, more="packer info --json lists all")


def format_info(info: dict[str, Any]) -> str:
    """Render :func:`dataset_info` for people."""
    lines = [
        f"{info['path']}",
        f"  backend {info['backend']}, codec {info['codec']}, check {info['check']}, "
        f"format v{info['format_version']}, {info['created_by']} at {info['created_at']}",
        f"  source  {info['source']}",
        f"  samples {info['num_samples']} in {info['num_classes']} classes, "
        f"{len(info['shards'])} shard(s), {format_size(info['num_bytes'])}",
        f"  skipped {len(info['skipped'])}",
        "classes:",
    ]
    counts = info["class_counts"]
    width = max((len(name) for name in counts), default=0)
    for index, (name, count) in enumerate(counts.items()):
        if index == _MAX_LISTED and len(counts) > _MAX_LISTED + 1:
            lines.append(f"  ... and {len(counts) - _MAX_LISTED} more classes")
            break
        lines.append(f"  {index:>4}  {name:<{width}}  {count}")
    lines.append("shards:")
    for index, shard in enumerate(info["shards"]):
        if index == _MAX_LISTED and len(info["shards"]) > _MAX_LISTED + 1:
            lines.append(f"  ... and {len(info['shards']) - _MAX_LISTED} more shards")
            break
        last = shard["first"] + shard["num_samples"] - 1
        span = f"{shard['first']}..{last}" if shard["num_samples"] else "none (every file skipped)"
        lines.append(f"  {shard['path']}  samples {span}"
                     f"  ({shard['num_samples']}), {format_size(shard['num_bytes'])}, "
                     f"sha256 {shard['sha256'][:16]}")
    reasons = Counter(s["reason"] for s in info["skipped"])
    if reasons:
        lines.append("skipped by reason: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items())))
    _listed(lines, "skipped files", [f"{s['path']}: {s['reason']} ({s['detail']})"
                                     for s in info["skipped"]])
    scan = info["scan"]
    _listed(lines, "ignored hidden entries (ImageFolder would read them)", scan["ignored_hidden"])
    _listed(lines, "directory symlink loops not followed again", scan["cut_symlink_loops"])
    _listed(lines, "unreadable directories (their files were not found)", scan["unreadable_dirs"])
    return "\n".join(lines)


def format_conversion(result: ConversionResult) -> str:
    """One summary of a finished conversion: counts, sizes, speed, where skips are listed."""
    m = result.manifest
    skipped = len(m.skipped)
    if result.already_complete:
        return (f"{result.dst} is already complete: {m.num_samples} samples in {len(m.shards)} "
                "shard(s) of this source and options; nothing to do.")
    lines = [
        f"Packed {m.num_samples} samples in {len(m.classes)} classes into {result.dst} "
        f"({m.backend}, {len(m.shards)} shard(s)); skipped {skipped} of {result.found} images found.",
        f"  in {format_size(result.bytes_in)}, out {format_size(m.num_bytes)}, "
        f"{result.seconds:.1f} s, {result.images_per_second:.0f} images/s",
    ]
    if result.resumed_shards:
        lines.append(f"  resumed: kept {result.resumed_shards} finished shard(s) of the interrupted "
                     "run; images/s counts the whole dataset")
    if skipped:
        reasons = Counter(s.reason for s in m.skipped)
        lines.append("  skipped: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items()))
                     + f"; listed in {os.path.join(result.dst, MANIFEST_NAME)} under \"skipped\" "
                     f"(see: packer info {result.dst})")
    if m.scan.unreadable_dirs:
        lines.append(f"  warning: {len(m.scan.unreadable_dirs)} unreadable directories; "
                     f"see packer info {result.dst}")
    return "\n".join(lines)


def format_task(result: TaskResult) -> str:
    """One array task's summary, and what is left before ``packer merge``."""
    where = f"task {result.task_id} of {result.num_tasks}"
    if result.already_complete:
        return f"{result.dst} is already complete (merged); {where} has nothing to do."
    lines = [f"{where.capitalize()}: {len(result.shards)} shard(s) of {result.dst}: wrote "
             f"{result.written}, kept {result.kept} finished earlier; {result.samples} samples, "
             f"{result.skipped} skipped, {format_size(result.bytes_in)} read in {result.seconds:.1f} s."]
    if result.missing:
        lines.append(f"  {len(result.missing)} shard(s) of other tasks not finished yet; when every "
                     f"task is done, run: packer merge {result.dst}")
    else:
        lines.append(f"  every shard is finished: run packer merge {result.dst}")
    return "\n".join(lines)


def format_merge(result: MergeResult) -> str:
    """What ``packer merge`` did."""
    m = result.manifest
    if result.already_complete:
        return (f"{result.dst} is already complete: {m.num_samples} samples in {len(m.shards)} "
                "shard(s); nothing to merge.")
    return (f"Merged {len(m.shards)} shard(s) into {result.dst}: {m.num_samples} samples in "
            f"{len(m.classes)} classes, {len(m.skipped)} skipped, {format_size(m.num_bytes)} "
            f"(see: packer info {result.dst}).")


def format_verify(report: VerifyReport) -> str:
    """Render a :class:`VerifyReport` for people: the verdict, each problem, what was checked."""
    total = sum(report.problem_counts.values())
    verdict = "OK" if report.ok else f"DAMAGED: {total} problem(s)"
    lines = [f"{report.root}: {verdict}"]
    listed = Counter(p.kind for p in report.problems)
    width = max((len(p.kind) for p in report.problems), default=0)
    lines.extend(f"  {p.kind:<{width}}  {p.message}" for p in report.problems)
    for kind, count in sorted(report.problem_counts.items()):
        if count > listed[kind]:
            lines.append(f"  ... and {count - listed[kind]} more {kind} (--json lists the first "
                         f"{MAX_LISTED} of each kind)")
    lines.extend(f"  note: {note}" for note in report.notes)
    lines.append(f"checked: {report.shards_checked} of {report.num_shards} shard(s) and "
                 f"{report.files_checked - report.shards_checked} index file(s) match their "
                 f"size and sha256 ({report.bytes_hashed} bytes)")
    if report.deep:
        lines.append(f"  deep: {report.samples_checked} of {report.num_samples} samples read and "
                     "decoded, labels checked")
    if report.against is not None:
        lines.append(f"  against {report.against}: {report.samples_compared} of "
                     f"{report.num_samples} samples compared byte for byte")
    if report.samples_skipped:
        lines.append(f"  {report.samples_skipped} sample(s) in damaged shards were not read")
    return "\n".join(lines)


def format_bench(report: BenchReport) -> str:
    """Render :func:`packer.tools.bench.bench` for people."""
    lines = [f"pipeline {report.pipeline}, DataLoader(num_workers={report.workers}, "
             f"batch_size={report.batch_size}), {'cold' if report.cold else 'warm'} page cache, "
             f"{len(report.packed.seconds)} timed epochs each, alternating; medians (min-max)"]
    for timing in (report.packed, report.folder):
        if timing is None:
            continue
        fig = timing.to_dict()
        lines.append(f"  {timing.name:<7} {fig['images_per_second']:8.0f} images/s "
                     f"({fig['min_images_per_second']:.0f}-{fig['max_images_per_second']:.0f}), "
                     f"{fig['mb_per_second']:7.1f} MB/s, {timing.images} images")
    if report.ratio is not None:
        lines.append(f"  packed / folder: {report.ratio:.2f}x")
    return "\n".join(lines)


def format_profile(profile: LoadProfile) -> str:
    """Render :func:`packer.tools.profiling.profile_loading` for people: a stage table and the verdict."""
    lines = [f"where the time per image goes, {profile.pipeline} pipeline: {profile.description}",
             f"{profile.images} images, batches of {profile.batch_size}; CPU ms per image, each stage "
             "timed alone", f"  {'stage':<18} {'ms/image':>9} {'share':>6}"]
    total = profile.total or 1.0
    for name, ms in profile.stages.items():
        lines.append(f"  {name:<18} {ms:9.3f} {100 * ms / total:5.0f}%")
    lines.append(f"  {'total':<18} {profile.total:9.3f}")
    busiest = max(profile.stages, key=profile.stages.__getitem__)
    cores = min(profile.cpus, profile.workers + 1)
    lines.append(f"ceiling: {profile.ceiling:,.0f} images/s if {cores} core(s) did only this work; "
                 f"measured through DataLoader(num_workers={profile.workers}): "
                 f"{profile.images_per_second:,.0f} images/s "
                 f"({profile.images_per_second / profile.ceiling:.0%} of it)" if profile.ceiling else "")
    lines.append(f"largest stage: {busiest}")
    return "\n".join(lines)


def format_sweep(results: list[tuple[dict[str, Any], BenchReport]]) -> str:
    """Rank the settings :func:`packer.tools.bench.sweep` tried, best first; mark and compare
    :func:`packer.make_loader`'s choice (the setting with ``"make_loader": True``, if any)."""
    if not results:
        return "no settings were measured"
    ranked = sorted(results, key=lambda item: -item[1].packed.images_per_second)
    best_rate = ranked[0][1].packed.images_per_second
    first = ranked[0][1]
    lines = [f"pipeline {first.pipeline}, batch_size {first.batch_size}, {first.packed.images} images, "
             f"{len(first.packed.seconds)} timed epochs per setting; medians",
             "num_workers  prefetch_factor  persistent_workers  images/s  vs best"]
    default: tuple[dict[str, Any], BenchReport] | None = None
    for setting, report in ranked:
        rate = report.packed.images_per_second
        mark = ""
        if setting.get("make_loader"):
            default, mark = (setting, report), "  <- make_loader"
        lines.append(f"{setting['num_workers']:>11}  {setting['prefetch_factor']!s:>15}  "
                     f"{setting['persistent_workers']!s:>18}  {rate:8.0f}  {rate / best_rate:6.2f}x{mark}")
    lines.append(f"best on this machine: {_loader_call(ranked[0][0])}")
    if default is not None:
        rate = default[1].packed.images_per_second
        line = (f"make_loader's default: {_loader_call(default[0])}, {rate:.0f} images/s, "
                f"{rate / best_rate:.2f}x the best")
        if default[0]["num_workers"] == 0 < ranked[0][0]["num_workers"]:
            line += " (on one CPU a worker only time-shares it with the training step, not run here)"
        elif default[0]["num_workers"] < ranked[0][0]["num_workers"]:
            line += (" (it leaves the main process a core for the training step, which this "
                     "benchmark does not run)")
        lines.append(line)
    return "\n".join(lines)


def _loader_call(setting: dict[str, Any]) -> str:
    return (f"DataLoader(num_workers={setting['num_workers']}, "
            f"prefetch_factor={setting['prefetch_factor']}, "
            f"persistent_workers={setting['persistent_workers']})")
