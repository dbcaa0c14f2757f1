"""What a conversion did, or would do (``--dry-run``), as text for people."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from packer.cli.formatting.listing import MAX_LISTED, append_listing
from packer.conversion.array_run import TaskResult
from packer.conversion.dryrun import ConversionPlan
from packer.conversion.merging import MergeResult
from packer.conversion.run import ConversionResult
from packer.format.manifest import MANIFEST_NAME
from packer.sizes import format_size

__all__ = ["format_conversion", "format_merge", "format_plan", "format_task"]


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

def _listed(lines: list[str], title: str, entries: Sequence[str]) -> None:
    append_listing(lines, title, entries, more="--json lists all")


def _size(num_bytes: int | None) -> str:
    return "unknown" if num_bytes is None else format_size(num_bytes)


def _classes(count: int) -> str:
    return f"{count} class{'' if count == 1 else 'es'}"


def _field_words(spec: Mapping[str, Any]) -> str:
    """One field of a plan's schema: ``boxes (boxes, xywh)``, ``box_labels (box_labels, 80 classes)``."""
    params = spec.get("params") or {}
    kind = spec["type"]
    detail = (params.get("codec") if kind == "image" else params.get("format") if kind == "boxes"
              else params.get("dtype") if kind == "ndarray"
              else _classes(len(params["classes"])) if params.get("classes") else None)
    return f"{spec['name']} ({kind}{f', {detail}' if detail else ''})"


def format_plan(plan: ConversionPlan) -> str:
    """Render a :class:`ConversionPlan` for people; the last line says nothing was written."""
    estimate = ("unknown until encoded" if plan.estimated_output_bytes is None
                else f"about {format_size(plan.estimated_output_bytes)}")
    lines = [
        (f"Dry run: {plan.location or plan.src} -> {plan.backend}, codec {plan.codec}: {plan.num_images} "
         f"{plan.item_words} in "
         f"{len(plan.classes)} classes, {format_size(plan.source_bytes)} of source; output {estimate} "
         f"in {len(plan.shards)} shard(s) of about {format_size(plan.shard_size)}"),
        f"source: {plan.source_description} (--source-format {plan.source_kind})",
    ]
    if plan.schema:
        lines.append("fields: " + ", ".join(_field_words(spec) for spec in plan.schema))
    if plan.classes or not plan.schema:  # a schema without a class label has no classes to list
        lines.append(f"classes (index, name, {plan.item_words}):")
    width = min(max((len(name) for name in plan.classes), default=0), 40)
    for index, (name, count) in enumerate(zip(plan.classes, plan.class_counts, strict=True)):
        if index == MAX_LISTED and len(plan.classes) > MAX_LISTED + 1:
            lines.append(f"  ... and {len(plan.classes) - MAX_LISTED} more classes (--json lists all)")
            break
        lines.append(f"  {index:>4}  {name:<{width}}  {count:>7}" + ("  EMPTY" if count == 0 else ""))
    mix = sorted(plan.extensions.items(), key=lambda pair: (-pair[1], pair[0]))
    lines.append("extensions: " + (", ".join(f"{ext or '(none)'} {n}" for ext, n in mix) or "none"))
    report = plan.report
    hidden_hint = "" if plan.include_hidden else "; --include-hidden packs them"
    _listed(lines, f"ignored hidden entries (ImageFolder would read them{hidden_hint})",
            report.ignored_hidden)
    _listed(lines, "directory symlink loops not followed again", report.cut_symlink_loops)
    _listed(lines, "unreadable directories (their files cannot be found)", report.unreadable_dirs)
    _listed(lines, "noted while scanning", report.notes)
    if plan.known_skips:
        lines.append("will be skipped (known from the scan): "
                     + ", ".join(f"{reason} {n}" for reason, n in plan.known_skips.items()))
    if plan.not_packed is not None:
        lines.append(f"not packed: {plan.not_packed}")
    if plan.unknown_sizes:
        lines.append(f"unknown sizes: {plan.unknown_sizes} file(s) could not be stat'ed (counted as 0 "
                     "bytes; a broken link is skipped when converting)")
    lines.append(f"shards ({len(plan.shards)}):")
    name_width = max((len(s.name) for s in plan.shards), default=5)
    lines.append(f"  {'shard':<{name_width}}  {'items':>17}  {plan.item_words:>7}  {'planned':>10}  "
                 f"{'estimated':>10}  first .. last")
    for shard in plan.shards[:MAX_LISTED]:
        lines.append(f"  {shard.name:<{name_width}}  {f'{shard.start}..{shard.stop - 1}':>17}  "
                     f"{shard.num_images:>7}  {format_size(shard.planned_bytes):>10}  "
                     f"{_size(shard.estimated_bytes):>10}  {shard.first_path} .. {shard.last_path}")
    if len(plan.shards) > MAX_LISTED:
        lines.append(f"  ... {len(plan.shards) - MAX_LISTED} more shards (--json lists all)")
    if plan.would_stop is not None:
        lines.append(f"WARNING: the conversion would stop: {plan.would_stop}.")
    if plan.would_fail_empty:
        names = ", ".join(repr(name) for name in plan.empty_classes)
        lines.append(f"WARNING: the conversion would stop: no image in class(es) {names}. Add images, "
                     "remove the folder(s), or allow empty classes with --allow-empty.")
    lines.append("Nothing was written (dry run). To convert for real, run the same command without "
                 "--dry-run.")
    return "\n".join(lines)

