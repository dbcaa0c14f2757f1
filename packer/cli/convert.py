"""``packer convert`` and ``packer merge``: parse the flags, build the options, call, print."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from typing import Any

import click

from packer.cli.errors import in_cli_terms, report_in_cli_terms
from packer.cli.output import say
from packer.conversion.engines.select import ENGINES
from packer.conversion.options import DEFAULT_SHARD_SIZE, ConversionOptions
from packer.digests import digest_names
from packer.format.backends import backend_names
from packer.format.codecs import CHECK_LEVELS, DEFAULT_MAX_PIXELS, codec_class, codec_names
from packer.sizes import parse_size
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.registry import SOURCES

__all__ = ["SizeType", "convert", "merge"]


class SizeType(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """A byte size such as ``512MB`` or ``1GiB``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_size(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)



@click.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--source-format", type=click.Choice(SOURCES.names(sort=False)), default=None,
              help="What SRC is, where detection could guess wrong [default: detected].")
@click.option("--root", type=click.Path(path_type=str), default=None,
              help="SRC is a list file or a COCO file: the folder (or, for a list, archive) its "
                   "paths are relative to [default: the file's folder].")
@click.option("--path-column", default=None,
              help="A CSV or JSON Lines list: its image-path column [default: path, file_name, ...].")
@click.option("--label-column", default=None,
              help="A CSV or JSON Lines list, or a Parquet table: its label column "
                   "[default: label, class, ...].")
@click.option("--label-field", default=None,
              help="WebDataset: the member holding the label, e.g. cls, txt or json:label "
                   "[default: cls].")
@click.option("--image-column", default=None,
              help="A Parquet table: its image column [default: image, img, ...].")
@click.option("--field", "fields", multiple=True, metavar="[NAME=]KEY:TYPE",
              help="A column of a CSV or JSON Lines list or of a Parquet table, or a member of "
                   "WebDataset samples, as a field of TYPE (text, int, float, json; members and Parquet "
                   "columns also bytes, image, mask, boxes.xywh, box_labels, labels, ...): "
                   "caption:text, mask=seg.png:mask, boxes=json#objects.bbox:boxes.xywh. Repeat for "
                   "more. Samples then read back as dicts.")
@click.option("--drop-unannotated", is_flag=True, default=False,
              help="A COCO file: skip its images without annotations (listed as no_annotation) "
                   "[default: packed, with zero boxes].")
@click.option("--classes", "classes_file", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Integer labels, a segmentation set's mask values or a YOLO set's box classes: a "
                   "file naming their classes, one per line (line i names label i).")
@click.option("--to", "backend", type=click.Choice(backend_names()), required=True,
              help="Storage backend of the shards.")
@click.option("--shard-size", type=SizeType(), default=DEFAULT_SHARD_SIZE, show_default="1GiB",
              help="Shard size, e.g. 512MB or 1GiB: shards hold a quarter to twice it, "
                   "about 0.8 of it on average.")
@click.option("--codec", type=click.Choice(codec_names()), default="original", show_default=True,
              help="How images are stored: 'original' keeps the source bytes untouched, 'jpeg' "
                   "re-encodes, 'pixels' stores decoded RGB (no decode when reading).")
@click.option("--resize", type=click.IntRange(min=1), default=None,
              help="With --codec jpeg or pixels: shrink so the short side is this many pixels.")
@click.option("--quality", type=click.IntRange(1, 100), default=None,
              help="With --codec jpeg: JPEG quality [default: 90].")
@click.option("--check", type=click.Choice(CHECK_LEVELS), default="full", show_default=True,
              help="Prove each image readable: full decode, header only, or not at all.")
@click.option("--max-pixels", type=click.IntRange(min=1), default=DEFAULT_MAX_PIXELS,
              show_default=True, help="Skip images with more pixels as decompression_bomb.")
@click.option("--max-bytes", type=SizeType(), default=DEFAULT_MAX_BYTES, show_default="256MiB",
              help="The most bytes of one archive member, table cell or record that are read, "
                   "e.g. 64MiB: larger ones are skipped as too_large.")
@click.option("--digest", type=click.Choice(digest_names()), default=None,
              help="The dataset's checksums: blake3 (about 4.7x faster to hash; pip install "
                   "'packer-shards[fast]') or sha256 [default: blake3 where installed, else sha256].")
@click.option("--strict", is_flag=True, help="Stop at the first bad file (exit 1) instead of skipping it.")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing packer dataset or interrupted conversion at DST.")
@click.option("--resume", is_flag=True,
              help="Finish an interrupted conversion, keeping its finished shards.")
@click.option("--staging", type=click.Path(file_okay=False, path_type=str), default=None,
              help="DST is a URL: the local folder shards are written to before their upload (a "
                   "killed run resumes from it) [default: one per URL under $PACKER_STAGING, else "
                   "~/.cache/packer-staging].")
@click.option("--staging-limit", type=SizeType(), default=None,
              help="DST is a URL: most bytes of finished shards waiting for their upload; the "
                   "workers wait while it is reached [default: four shards].")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes writing shards [default: the usable CPUs].")
@click.option("--dry-run", is_flag=True,
              help="Print the class map, counts, extensions, size estimate and shard plan; write nothing.")
@click.option("--include-hidden", is_flag=True,
              help="Pack files and folders whose names start with '.' (ImageFolder does).")
@click.option("--allow-empty", is_flag=True, help="Accept class folders without images.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the plan as JSON.")
@click.option("--engine", type=click.Choice(ENGINES.names(sort=False)), default="local", show_default=True,
              help="Where shard tasks run: worker processes here, a Dask cluster, or Dask workers "
                   "in Slurm/PBS jobs (dask, slurm, pbs need: pip install 'packer-shards[dask]').")
@click.option("--scheduler", default=None,
              help="--engine dask: a running scheduler (tcp://host:8786) whose workers see SRC and "
                   "DST; without it a local cluster of --workers processes starts.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="--engine slurm/pbs: batch jobs to start.")
@click.option("--partition", "--queue", "queue", default=None,
              help="--engine slurm: partition; pbs: queue.")
@click.option("--walltime", default=None, help="--engine slurm/pbs: job time limit, e.g. 02:00:00.")
@click.option("--account", default=None, help="--engine slurm/pbs: account or project to charge.")
@click.option("--job-cores", type=click.IntRange(min=1), default=4, show_default=True,
              help="--engine slurm/pbs: cores per job (one worker process each).")
@click.option("--job-memory", default="16GB", show_default=True,
              help="--engine slurm/pbs: memory per job.")
@click.option("--print-job-script", is_flag=True,
              help="--engine slurm/pbs: print the batch script each job would run; submit nothing.")
@click.option("--num-tasks", type=click.IntRange(min=1), default=None,
              help="Array job: the number of tasks (read from Slurm when absent); each writes "
                   "its share of the shards, then `packer merge DST` writes the manifest.")
@click.option("--task-id", type=click.IntRange(min=0), default=None,
              help="Array job: this task's id, from 0 (read from SLURM_ARRAY_TASK_ID or "
                   "JOB_COMPLETION_INDEX when absent).")
def convert(src: str, dst: str, **given: Any) -> None:
    """Convert SRC into a packed dataset at DST.

    SRC is an ImageFolder tree (SRC/<class>/<image>); a list file of images and labels (plain
    text lines 'relative/path label', a CSV with a header, or JSON Lines; paths relative to
    --root, a folder or an archive); a .tar, .tar.gz or .zip of a tree, or of per-class tars
    (ImageNet's train tar); WebDataset shards (a .tar, a folder, or train-{000000..000146}.tar);
    Parquet image tables (a .parquet file, a folder or a glob); a COCO instances file (.json,
    its images under --root: boxes, box labels, crowd flags, areas, segmentations per image);
    a segmentation set (Pascal VOC, Cityscapes, ADE20K: images and masks matched by stem); or
    a YOLO set (images/<split> beside labels/<split>, names from data.yaml).
    The kind is detected and printed by --dry-run; --source-format names it. Nothing is extracted.

    DST is a new or empty directory, or a URL (s3://bucket/prefix, gs://..., az://...): then
    the shards are written to a local staging folder, uploaded as they finish and removed there,
    and index.json goes up last; a killed run is finished with --resume. SRC may be a URL of a
    tar, .tar.gz or zip archive, read by byte ranges (never downloaded whole).
    """
    from packer.cli.formatting import format_conversion, format_plan, format_task
    from packer.conversion.array_run import run_conversion_task
    from packer.conversion.arrayjob import array_task
    from packer.conversion.dryrun import dry_run
    from packer.conversion.engines.select import open_engine
    from packer.conversion.run import run_conversion

    options = _options(given)
    quiet, overwrite, resume = given["quiet"], given["overwrite"], given["resume"]
    if given["dry_run"]:
        plan = dry_run(src, options)
        # The source's own sentences (why it would stop) speak the library's keywords: as flags here.
        say(json.dumps(plan.to_dict(), indent=2) if given["as_json"]
            else report_in_cli_terms(format_plan(plan)))
        return
    if given["print_job_script"]:
        say(_job_script(given))
        return
    try:
        task = array_task(given["task_id"], given["num_tasks"], os.environ)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    if task is not None and (overwrite or resume):
        raise click.UsageError("Array tasks always keep finished shards and never overwrite: drop "
                               "--overwrite/--resume (clear DST first to start again).")
    with ExitStack() as stack:
        try:
            engine = stack.enter_context(open_engine(given["engine"], **_engine_options(given)))
        except ValueError as err:
            raise click.UsageError(str(err)) from None
        if task is None:
            summary = format_conversion(run_conversion(
                src, dst, options, overwrite=overwrite, resume=resume, engine=engine, progress=not quiet,
                staging=given["staging"], staging_limit=given["staging_limit"]))
        else:
            if not quiet:
                say(f"task {task.task_id} of {task.num_tasks} (from {in_cli_terms(task.source)})",
                           err=True)
            summary = format_task(run_conversion_task(src, dst, options, task_id=task.task_id,
                                                      num_tasks=task.num_tasks, engine=engine,
                                                      progress=not quiet))
    if not quiet:
        say(summary)


def _options(given: dict[str, Any]) -> ConversionOptions:
    """The conversion options the flags ask for; --resize/--quality only where the codec takes them."""
    codec = codec_class(given["codec"])
    codec_options: dict[str, Any] = {}
    for flag in ("resize", "quality"):
        if given[flag] is None:
            continue
        if flag not in codec.takes:
            takers = [name for name in codec_names() if flag in codec_class(name).takes]
            why = (f" (the {codec.name} codec stores files untouched)" if codec.keeps_source_bytes
                   else "")
            raise click.UsageError(f"--{flag} needs " + " or ".join(f"--codec {name}" for name in takers)
                                   + why + ".")
        codec_options[flag] = given[flag]
    return ConversionOptions(
        to=given["backend"], shard_size=given["shard_size"], codec=codec.name,
        codec_options=codec_options, check=given["check"], max_pixels=given["max_pixels"],
        max_bytes=given["max_bytes"], strict=given["strict"], include_hidden=given["include_hidden"],
        allow_empty=given["allow_empty"], root=given["root"], path_column=given["path_column"],
        label_column=given["label_column"], classes_file=given["classes_file"],
        source_format=given["source_format"], label_field=given["label_field"],
        image_column=given["image_column"], drop_unannotated=given["drop_unannotated"],
        fields=given["fields"], digest=given["digest"])


def _engine_options(given: dict[str, Any]) -> dict[str, Any]:
    return {"workers": given["workers"], "scheduler": given["scheduler"], "jobs": given["jobs"],
            "queue": given["queue"], "walltime": given["walltime"], "account": given["account"],
            "cores": given["job_cores"], "memory": given["job_memory"]}


def _job_script(given: dict[str, Any]) -> str:
    from packer.conversion.engines.dask_cluster import job_script

    if given["engine"] not in ("slurm", "pbs"):
        raise click.UsageError("--print-job-script needs --engine slurm or --engine pbs.")
    return job_script(given["engine"], queue=given["queue"], walltime=given["walltime"] or "01:00:00",
                      cores=given["job_cores"], memory=given["job_memory"], account=given["account"])


@click.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--no-verify", is_flag=True,
              help="Trust the shards' sizes and receipts; do not hash them again.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def merge(dst: str, no_verify: bool, quiet: bool) -> None:
    """Finish DST after array tasks: check every shard, then write the manifest.

    Names the missing shard files and the tasks to run again (exit 1) when some are not
    there; does nothing on a complete dataset.
    """
    from packer.cli.formatting import format_merge
    from packer.conversion.merging import merge as run_merge
    from packer.progressbar import ProgressBar

    with ProgressBar(desc="checking shards", unit="shard", disable=True if quiet else None) as bar:
        result = run_merge(dst, verify=not no_verify, on_shard=lambda name: bar.update())
    if not quiet:
        say(format_merge(result))
