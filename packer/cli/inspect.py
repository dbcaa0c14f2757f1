"""The ``packer`` commands that look at a finished dataset: ``info``, ``verify``, ``show``,
``preview``, ``export``.

Thin, like the rest of the command line (:mod:`packer.cli` registers them on its group, which
turns packer's errors into one line and an exit code): parse, call one library function, print.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from packer.cli.errors import report_in_cli_terms
from packer.cli.output import say
from packer.errors import PackerError

__all__ = ["export_command", "info", "preview", "show", "verify"]

_CLASSES_HELP = ("Only these classes: names separated by commas, or the option repeated "
                 "[default: every class].")


@click.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=str), required=True,
              help="The file to write: a PNG, or an HTML page with --html.")
@click.option("--per-class", type=click.IntRange(min=1), default=8, show_default=True,
              help="Thumbnails per class at most (one row per class).")
@click.option("--classes", multiple=True, help=_CLASSES_HELP)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which samples of each class are shown; the same seed shows the same ones.")
@click.option("--thumb", type=click.IntRange(16, 1024), default=128, show_default=True,
              help="Size of a thumbnail cell in pixels.")
@click.option("--html", "as_html", is_flag=True,
              help="Write one self-contained HTML page (the dataset summary and the same grid).")
@click.option("--no-overlays", "no_overlays", is_flag=True,
              help="Samples with fields: show the images alone [default: boxes, their labels and "
                   "masks drawn on them].")
def preview(dst: str, out: str, per_class: int, classes: tuple[str, ...], seed: int, thumb: int,
            as_html: bool, no_overlays: bool) -> None:
    """Draw a contact sheet of DST to check by eye that labels and images match.

    One row per class, in class order: a header with its name and sample count, then up to
    --per-class thumbnails of a seeded random choice of its samples in index order, each
    captioned "class · #index". Images are decoded as the dataset returns them and fitted,
    aspect kept, into square cells; in a dataset with fields, each one's boxes (outlined in
    their class's colour, named) and mask (coloured, half transparent) are drawn on it. A sample
    that does not decode gets a pink cell and a warning. Sheets over 89,478,485 pixels are
    refused (exit 2): select fewer classes.
    """
    from packer.cli.formatting import format_sheet
    from packer.tools.preview.sheet import write_contact_sheet

    try:
        sheet = write_contact_sheet(dst, out, html=as_html, per_class=per_class,
                                    classes=classes or None, seed=seed, thumb=thumb,
                                    overlays=not no_overlays)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    say(format_sheet(sheet, out))


@click.command("export")
@click.argument("dst", type=click.Path(path_type=str))
@click.argument("out", type=click.Path(file_okay=False, path_type=str))
@click.option("--classes", multiple=True, help=_CLASSES_HELP)
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many samples per class, the first ones in dataset order.")
@click.option("--overwrite", is_flag=True,
              help="Write into a non-empty OUT, replacing files of the same names; nothing is deleted.")
@click.option("--as-list", is_flag=True,
              help="A dataset converted from a list file: write its files at their listed paths "
                   "and the list beside them, instead of class folders.")
@click.option("--as-webdataset", is_flag=True,
              help="Write WebDataset shards (every field a member: masks, boxes, captions, ...) instead "
                   "of a tree; the only export of a dataset with fields.")
@click.option("--shard-samples", type=click.IntRange(min=1), default=1000, show_default=True,
              help="With --as-webdataset: samples per shard.")
@click.option("--as-yolo", is_flag=True,
              help="A dataset with boxes: write a YOLO set (images/, labels/*.txt, data.yaml) instead "
                   "of a tree.")
@click.option("--as-coco", is_flag=True,
              help="A dataset with boxes: write a COCO instances file (annotations.json) beside the "
                   "images instead of a tree.")
@click.option("--as-masks", is_flag=True,
              help="A dataset with masks: write the image tree beside the mask tree (its own layout, "
                   "VOC's or Cityscapes', or images/ and masks/) instead of a class tree.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def export_command(dst: str, out: str, classes: tuple[str, ...], limit: int | None, overwrite: bool,
                   as_list: bool, as_webdataset: bool, shard_samples: int, as_yolo: bool,
                   as_coco: bool, as_masks: bool, quiet: bool) -> None:
    """Write DST back as an ImageFolder tree OUT/<class>/<image>.

    Codec original: the files are the source's, byte for byte, at their original relative
    paths (the tree equals the source minus the files that were never packed). Codec jpeg:
    the stored JPEGs, renamed to .jpg; codec pixels: lossless PNGs, renamed to .png (names
    already so suffixed are kept; a name taken already gets the suffix added: a.png.jpg).
    Skipped files were never packed and are not exported; every class folder is made, even
    an empty one. OUT must be new or empty (exit 3 otherwise, unless --overwrite).
    --as-webdataset writes shards of every sample's fields instead, and prints the --field
    options that convert them back; --as-yolo writes a dataset with boxes as a YOLO set, and
    --as-coco as a COCO file beside its images, and --as-masks a dataset with masks as its image
    and mask trees.
    """
    from packer.cli import formatting
    from packer.tools.export import coco, masks, webdataset, yolo
    from packer.tools.export.writer import export_dataset

    layouts: dict[str, tuple[bool, Callable[..., Any], Callable[[Any], str]]] = {
        "--as-webdataset": (as_webdataset, functools.partial(webdataset.export_webdataset,
                                                             samples_per_shard=shard_samples),
                            formatting.format_webdataset_export),
        "--as-yolo": (as_yolo, yolo.export_yolo, formatting.format_yolo_export),
        "--as-coco": (as_coco, coco.export_coco, formatting.format_coco_export),
        "--as-masks": (as_masks, masks.export_masks, formatting.format_mask_export)}
    given = [flag for flag, (chosen, _, _) in layouts.items() if chosen]
    if given and (len(given) > 1 or classes or limit is not None or as_list):
        raise click.UsageError(f"{' and '.join(given)}: give one layout; it exports every sample, so it "
                               "takes no --classes, --limit or --as-list")
    if given:
        _, export, summary = layouts[given[0]]
        written = export(dst, out, overwrite=overwrite, progress=not quiet)
        if not quiet:
            say(summary(written))
        return

    try:
        result = export_dataset(dst, out, classes=classes or None, limit=limit, overwrite=overwrite,
                                as_list=as_list, progress=not quiet)
    except PackerError:  # some are ValueErrors too (UnsafeKeyError): the data's fault, not a usage error
        raise
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    if not quiet:
        say(formatting.format_export(result))


@click.command(context_settings={"ignore_unknown_options": True})  # so that INDEX may be -1
@click.argument("dst", type=click.Path(path_type=str))
@click.argument("index", type=int)
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write the sample's stored bytes, exactly, to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
def show(dst: str, index: int, out: str | None, as_json: bool) -> None:
    """Describe sample INDEX of DST (negative counts from the end, as in Python).

    Prints its relative path, class, stored size, codec and shard, and the stored image's
    width x height, mode and format. -o writes the stored bytes: the source file for codec
    original, a JPEG for jpeg, the raw record for pixels. A dataset with fields: each field's
    value in a line, and -o writes the image field's stored bytes.
    """
    from packer.cli.formatting import format_sample_info
    from packer.tools.consistency import checked_manifest
    from packer.tools.show import sample_info, save_sample

    checked_manifest(dst)  # a damaged manifest is one line and exit 1, never an INDEX usage error
    try:
        info = sample_info(dst, index) if out is None else save_sample(dst, index, out)
    except IndexError as err:
        raise click.BadParameter(str(err), param_hint="INDEX") from None
    say(json.dumps(info.to_dict(), indent=2) if as_json else format_sample_info(info))
    if out is not None and not as_json:
        say(f"wrote {os.path.getsize(out)} bytes to {out}"
            + (" (the image field's stored bytes)" if info.fields else ""))


@click.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
@click.option("--field-stats", "field_stats", is_flag=True,
              help="Also read the records: boxes per sample, class counts, mask values, text lengths.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="With --field-stats: read this many samples, spread evenly [default: all].")
def info(dst: str, as_json: bool, field_stats: bool, limit: int | None) -> None:
    """Show what the packed dataset DST holds: classes, shards, skipped files."""
    from packer.cli.formatting import format_field_stats, format_info
    from packer.tools.field_stats import field_statistics
    from packer.tools.info import dataset_info

    if limit is not None and not field_stats:
        raise click.UsageError("--limit needs --field-stats.")
    summary = dataset_info(dst)
    stats = field_statistics(dst, limit=limit) if field_stats else None
    if as_json:
        say(json.dumps({**summary.to_dict(), **({"field_stats": stats} if stats is not None else {})},
                       indent=2, sort_keys=True))
        return
    say(format_info(summary) + ("" if stats is None else "\n" + format_field_stats(stats)))


@click.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--deep", is_flag=True, help="Also read and decode every sample; check counts and labels.")
@click.option("--against", "src", type=click.Path(path_type=str), default=None,
              help="Compare every sample byte for byte with its source: the tree, list file, "
                   "archive, WebDataset shards or Parquet tables it was converted from.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def verify(dst: str, deep: bool, src: str | None, as_json: bool, quiet: bool) -> None:
    """Check that the dataset DST is whole: sizes and checksums of every file (exit 1 if not)."""
    from packer.cli.formatting import format_verify
    from packer.tools.verify import verify_dataset

    report = verify_dataset(dst, deep=deep, against=src, progress=not quiet and not as_json)
    say(json.dumps(report.to_dict(), indent=2) if as_json else report_in_cli_terms(format_verify(report)))
    if not report.ok:
        sys.exit(1)
