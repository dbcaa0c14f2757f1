"""What ``packer bench`` and ``packer demo`` measured, as text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # packer.tools.bench and demo import torch; this module must not
    from packer.tools.bench import BenchReport
    from packer.tools.demo.run import DemoReport
    from packer.tools.profiling import LoadProfile

__all__ = ["format_bench", "format_demo", "format_profile", "format_sweep"]


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

def format_demo(report: DemoReport) -> str:
    """The demo's checks, its speed table and verdict, for people."""
    lines = [""]
    for name, result in report.conversions.items():
        pixel_bad, byte_bad = report.mismatches[name], report.byte_mismatches[name]
        lines.append(f"{name}: {result.manifest.num_samples} samples, pixels "
                     f"{'identical to the folder' if not pixel_bad else f'{pixel_bad} DIFFER'}, "
                     f"stored bytes {'byte-exact' if not byte_bad else f'{byte_bad} DIFFER'}")
        for skipped in result.manifest.skipped:
            lines.append(f"  skipped {skipped.path}: {skipped.reason}")
    if report.speeds:
        loader = f"DataLoader(num_workers={report.workers}, batch_size={report.batch_size})"
        lines += ["", f"training-style loading: {loader}, RandomResizedCrop(224) + flip,",
                  f"normalised float32 batches; median of {report.repeats} epochs, each row against "
                  "the folder's standard pipeline in this run:",
                  f"  {'source':<8} {'pipeline':<10} {'cache':<6} {'images/s':>9} {'vs folder':>10}"]
        for row in report.speeds:
            lines.append(f"  {row.source:<8} {row.pipeline:<10} {row.cache:<6} {row.images_per_second:>9.0f} "
                         f"{row.ratio:>9.2f}x")
        lines += ["standard: PIL decode, crop, resize, ToTensor and Normalize per image in the workers;",
                  "fast path: RandomResizedCropFlip on the stored bytes in the workers (uint8 batches),",
                  "Normalize once per batch. On a warm local disk the standard pipeline is bound by",
                  "decoding on both sides; shared storage (NFS, Lustre) is where packing wins most."]
    lines.append("")
    lines.append("demo OK: every sample matches, every broken file was caught." if report.ok
                 else "demo FAILED: see the lines above.")
    return "\n".join(lines)

