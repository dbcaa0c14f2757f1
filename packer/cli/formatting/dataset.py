"""What a dataset holds, whether it is whole, and what was shown or exported, as text."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

from packer.cli.formatting.listing import MAX_LISTED, append_listing
from packer.sizes import format_size
from packer.tools.export.coco import CocoExport
from packer.tools.export.masks import MaskExport
from packer.tools.export.webdataset import WebDatasetExport
from packer.tools.export.writer import ExportResult
from packer.tools.export.yolo import YoloExport
from packer.tools.info import DatasetInfo
from packer.tools.preview.sheet import ContactSheet
from packer.tools.show import SampleInfo
from packer.tools.verify import VerifyReport

__all__ = ["format_export", "format_field_stats", "format_info", "format_sample_info", "format_sheet",
           "format_coco_export", "format_mask_export", "format_verify", "format_webdataset_export",
           "format_yolo_export"]


def _listed(lines: list[str], title: str, items: list[str]) -> None:
    append_listing(lines, title, items, more="packer info --json lists all")


def _version_lines(info: dict[str, Any]) -> list[str]:
    """The version, the versions kept, and what the last update did."""
    kept = info.get("versions_kept") or []
    older = [str(v) for v in kept if v != info["version"]]
    line = f"  version {info['version']}" + (f" (older versions kept: {', '.join(older)}; "
                                               "`packer gc` removes them)" if older else "")
    lines = [line]
    update = info.get("last_update") or {}
    if update:
        lines.append(f"  last update from version {update['from_version']}: files "
                     f"+{update['files_added']} -{update['files_removed']} ~{update['files_changed']}; "
                     f"shards {update['shards_written']} written, {update['shards_reused']} reused; "
                     f"{format_size(update['bytes_written'])} written"
                     + (" (compared by checksum)" if update.get("checksum") else ""))
    if info.get("update_in_progress"):
        lines.append("  an update is running or was interrupted: run the same `packer update` to finish it")
    lines.extend(_lease_line(lease) for lease in info.get("leases") or ())
    return lines


def _lease_line(lease: dict[str, Any]) -> str:
    """``  in use: update by host node7 pid 4242 since ... (lease until ...)``, or why it is stale."""
    who = (f"{lease['command']} by host {lease['host']} pid {lease['pid']} since {lease['since']} "
           f"(lease until {lease['until']})")
    if lease["stale"]:
        return f"  stale lease: {who}: {lease['stale_reason']}; the next writer takes it over"
    return f"  in use: {who}"


def _source_kind(info: dict[str, Any]) -> str:
    """`` (archive; label_field=json:label)``: the kind of source and its options, when recorded."""
    kind = info.get("source_kind")
    if not kind:
        return ""
    params = "; ".join(f"{k}={v}" for k, v in sorted((info.get("source_params") or {}).items()))
    return f" ({kind}" + (f"; {params}" if params else "") + ")"


#: Field parameters ``info`` leaves out (long, or the same as the dataset's own line).
_QUIET_PARAMS = frozenset({"classes", "codec", "codec_params", "check", "max_pixels"})


def _field_lines(fields: list[dict[str, Any]]) -> list[str]:
    """The schema of a dataset with fields: name, type and its telling parameters."""
    if not fields:
        return []
    width = max(len(f["name"]) for f in fields)
    lines = ["fields:"]
    for f in fields:
        params = f.get("params") or {}
        shown = [f"{k}={json.dumps(v)}" for k, v in sorted(params.items()) if k not in _QUIET_PARAMS]
        if params.get("classes"):
            shown.append(f"{len(params['classes'])} classes")
        lines.append(f"  {f['name']:<{width}}  {f['type']}" + (f" ({', '.join(shown)})" if shown else ""))
    return lines


def format_info(record: DatasetInfo) -> str:
    """Render :func:`dataset_info` for people (from its JSON form, the one ``--json`` prints)."""
    info = record.to_dict()
    lines = [
        f"{info['path']}",
        f"  backend {info['backend']}, codec {info['codec']}, check {info['check']}, "
        f"format v{info['format_version']}, {info['created_by']} at {info['created_at']}",
        f"  source  {info['source']}" + _source_kind(info),
        *[f"  source note: {note}" for note in info.get("source_notes") or ()],
        *_list_lines(info.get("list")),
        *_version_lines(info),
        f"  samples {info['num_samples']} in {info['num_classes']} classes, "
        f"{len(info['shards'])} shard(s), {format_size(info['num_bytes'])}",
        f"  skipped {len(info['skipped'])}",
        *_field_lines(info.get("fields") or []),
        "classes:" if not info.get("fields") or info["classes"] else "classes: none (no class label)",
    ]
    counts = info["class_counts"]
    width = max((len(name) for name in counts), default=0)
    for index, (name, count) in enumerate(counts.items()):
        if index == MAX_LISTED and len(counts) > MAX_LISTED + 1:
            lines.append(f"  ... and {len(counts) - MAX_LISTED} more classes")
            break
        lines.append(f"  {index:>4}  {name:<{width}}  {count}")
    lines.append("shards:")
    for index, shard in enumerate(info["shards"]):
        if index == MAX_LISTED and len(info["shards"]) > MAX_LISTED + 1:
            lines.append(f"  ... and {len(info['shards']) - MAX_LISTED} more shards")
            break
        last = shard["first"] + shard["num_samples"] - 1
        span = f"{shard['first']}..{last}" if shard["num_samples"] else "none (every file skipped)"
        lines.append(f"  {shard['path']}  samples {span}"
                     f"  ({shard['num_samples']}), {format_size(shard['num_bytes'])}, "
                     f"{info.get('digest', 'sha256')} {shard['sha256'][:16]}")
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

def format_sample_info(info: SampleInfo) -> str:
    """A few aligned lines for people."""
    labelled = info.class_name or info.target >= 0
    lines = [
        f"sample   #{info.index} of {info.num_samples} (numbered from 0)",
        f"path     {info.relpath}",
        f"class    {info.class_name} (target {info.target})" if labelled
        else "class    none (the samples have no class label)",
        f"stored   {info.stored_bytes} bytes ({format_size(info.stored_bytes)}), codec {info.codec}, "
        f"{info.backend} shard {info.shard}",
        f"image    {info.width}x{info.height} {info.mode} {info.format}"
        + ("" if info.mode == "RGB" else " (the dataset yields it as RGB)"),
    ]
    if info.fields:
        width = max(len(name) for name in info.fields)
        lines.append("fields:")
        lines.extend(f"  {name:<{width}}  {text}" for name, text in info.fields.items())
    return "\n".join(lines)

def format_export(result: ExportResult) -> str:
    """Two or three lines for people: what was written, and what was not and why."""
    how = result.exported_as
    lines = [f"Exported {result.written} samples of {len(result.classes)} classes to {result.out} "
             f"({format_size(result.bytes_written)}, {result.seconds:.1f} s): {how}."]
    if result.renamed:
        lines.append(f"  {result.renamed} file(s) renamed to their stored format's suffix.")
    left_out = []
    if result.not_selected:
        left_out.append(f"{result.not_selected} sample(s) not selected (--classes/--limit)")
    if result.skipped_in_dataset:
        left_out.append(f"{result.skipped_in_dataset} file(s) the conversion skipped (never packed; "
                        "packer info lists them)")
    if left_out:
        lines.append("  not exported: " + "; ".join(left_out) + ".")
    return "\n".join(lines)

def format_webdataset_export(result: WebDatasetExport) -> str:
    """What was written, and the command that converts it back."""
    fields = "".join(f" --field {spec}" for spec in result.fields)
    if result.classes_file:
        fields += f" --classes {result.classes_file}"
    return (f"Exported {result.written} samples as {len(result.shards)} WebDataset shard(s) to {result.out} "
            f"({format_size(result.bytes_written)}, {result.seconds:.1f} s).\n"
            f"  convert it back with: packer convert {result.out} DST --to lmdb{fields}")


def format_coco_export(result: CocoExport) -> str:
    """What was written, and the command that converts it back."""
    return (f"Exported {result.images} images with {result.annotations} annotations of {result.categories} "
            f"categories as a COCO file to {result.out} ({format_size(result.bytes_written)}, "
            f"{result.seconds:.1f} s).\n"
            f"  convert it back with: packer convert {result.annotations_file} DST --to lmdb")


def format_mask_export(result: MaskExport) -> str:
    """What was written, and the command that converts it back."""
    classes = f" --classes {result.classes_file}" if result.classes_file else ""
    return (f"Exported {result.written} images and their masks ({result.layout} layout) to {result.out} "
            f"({format_size(result.bytes_written)}, {result.seconds:.1f} s).\n"
            f"  convert it back with: packer convert {result.out} DST --to lmdb --source-format masks"
            f"{classes}")


def format_yolo_export(result: YoloExport) -> str:
    """What was written, and the command that converts it back."""
    return (f"Exported {result.written} images with {result.boxes} boxes of {len(result.classes)} classes "
            f"({result.label_files} label files) as a YOLO set to {result.out} "
            f"({format_size(result.bytes_written)}, {result.seconds:.1f} s).\n"
            f"  convert it back with: packer convert {result.out} DST --to lmdb --source-format yolo")


def format_sheet(sheet: ContactSheet, out: str | os.PathLike[str]) -> str:
    """What was written, for people; names the samples that did not decode, if any."""
    width, height = sheet.image.size
    lines = [f"Wrote {os.fspath(out)}: {len(sheet.cells)} samples of {len(sheet.rows)} classes "
             f"({width}x{height} px sheet, seed {sheet.seed})."]
    failed = sheet.failed
    if failed:
        named = ", ".join(f"#{c.index} ({c.relpath})" for c in failed[:5])
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        lines.append(f"warning: {len(failed)} sample(s) could not be decoded: {named}{more}; "
                     f"run packer verify {sheet.root} --deep")
    return "\n".join(lines)


def _list_lines(listing: dict[str, Any] | None) -> list[str]:
    """How a list source was read (nothing for a folder tree)."""
    if not listing:
        return []
    lines = [f"  list    {listing['list']} ({listing['format']}, root {listing['root']})"]
    if listing["format"] != "text":
        lines.append(f"  columns path {listing['path_column']!r}, label {listing['label_column']!r}"
                     + (f", kept {', '.join(listing['metadata_columns'])}" if listing["metadata_columns"]
                        else ""))
    return lines


def _spread_words(spread: dict[str, float] | None) -> str:
    if spread is None:
        return "none"
    return f"min {spread['min']:g}, mean {spread['mean']:g}, max {spread['max']:g}"


def _counted(counts: dict[str, int]) -> str:
    shown = [f"{name} {n}" for name, n in list(counts.items())[:MAX_LISTED]]
    more = f", ... and {len(counts) - MAX_LISTED} more" if len(counts) > MAX_LISTED else ""
    return ", ".join(shown) + more if shown else "none"


def format_field_stats(stats: dict[str, dict[str, Any]]) -> str:
    """Render :func:`packer.tools.field_stats.field_statistics` for people, one field a line."""
    read = next(iter(stats.values()))["samples"] if stats else 0
    lines = [f"field statistics ({read} samples read):"]
    width = max((len(name) for name in stats), default=0)
    for name, found in stats.items():
        kind = found["type"]
        if kind == "boxes":
            words = (f"{found['boxes']} boxes, per sample {_spread_words(found['per_sample'])}, "
                     f"{found['without_boxes']} sample(s) without")
        elif "counts" in found:
            words = "counts: " + _counted(found["counts"])
        elif "samples_with_value" in found:
            words = "samples holding each value: " + _counted(found["samples_with_value"])
        elif "length" in found:
            words = "length " + _spread_words(found["length"])
        elif "values" in found:
            words = _spread_words(found["values"])
        elif "shapes" in found:
            words = "shapes: " + _counted(found["shapes"])
        else:
            words = "(no statistics for this type)"
        lines.append(f"  {name:<{width}}  {kind}: {words}")
    return "\n".join(lines)
