"""The ``packer`` command line: parse, call one library function, print. No logic lives here.

Exit codes: 0 success; 1 a packer error (one line on stderr: what, which path, what to do);
2 a usage error; 3 the destination exists (pass ``--overwrite``); 130 interrupted.
"""

from __future__ import annotations

import json
import logging
import sys
from contextlib import ExitStack
from typing import Any

import click

from packer.format.backends import backend_names
from packer.cli.samples import export_command, preview, show
from packer.format.codecs import CHECK_LEVELS, DEFAULT_MAX_PIXELS, codec_names
from packer.conversion.run import DEFAULT_SHARD_SIZE
from packer.conversion.engines import ENGINES
from packer.errors import PackerError
from packer.sizes import format_size, parse_size

__all__ = ["cli", "main"]


class _SizeType(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """A byte size such as ``512MB`` or ``1GiB``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_size(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)


class _CommandFailed(click.ClickException):
    """A packer error shown as one ``Error: ...`` line on stderr, with packer's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _PackerGroup(click.Group):
    """Turns packer errors and Ctrl-C into one line and an exit code, for every command."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PackerError as err:
            raise _CommandFailed(str(err), err.exit_code) from err
        except KeyboardInterrupt:
            raise _CommandFailed("Interrupted; a conversion in progress left DST incomplete "
                                 "(convert again with --overwrite).", 130) from None


@click.group(cls=_PackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="packer", prog_name="packer")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """Pack an ImageFolder tree into LMDB or HDF5 shards and read it fast in PyTorch."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # libraries that set their own loggers' levels
        handler.setLevel(level)                   # (Dask logs at INFO) obey -v too


@cli.command()
@click.argument("src", type=click.Path(file_okay=False, path_type=str))
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--to", "backend", type=click.Choice(backend_names()), required=True,
              help="Storage backend of the shards.")
@click.option("--shard-size", type=_SizeType(), default=DEFAULT_SHARD_SIZE, show_default="1GiB",
              help="Planned bytes per shard, e.g. 512MB or 1GiB.")
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
@click.option("--strict", is_flag=True, help="Stop at the first bad file (exit 1) instead of skipping it.")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing packer dataset or interrupted conversion at DST.")
@click.option("--resume", is_flag=True,
              help="Finish an interrupted conversion, keeping its finished shards.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes writing shards [default: the usable CPUs].")
@click.option("--dry-run", is_flag=True,
              help="Print the class map, counts, extensions, size estimate and shard plan; write nothing.")
@click.option("--include-hidden", is_flag=True,
              help="Pack files and folders whose names start with '.' (ImageFolder does).")
@click.option("--allow-empty", is_flag=True, help="Accept class folders without images.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the plan as JSON.")
@click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
              help="Where shard tasks run: worker processes here, a Dask cluster, or Dask workers "
                   "in Slurm/PBS jobs (dask, slurm, pbs need: pip install 'packer[dask]').")
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
def convert(src: str, dst: str, backend: str, shard_size: int, codec: str, resize: int | None,
            quality: int | None, check: str,
            max_pixels: int, strict: bool, overwrite: bool, resume: bool, workers: int | None,
            dry_run: bool, include_hidden: bool, allow_empty: bool, quiet: bool,
            as_json: bool, engine: str, scheduler: str | None, jobs: int | None, queue: str | None,
            walltime: str | None, account: str | None, job_cores: int, job_memory: str,
            print_job_script: bool, num_tasks: int | None, task_id: int | None) -> None:
    """Convert the ImageFolder tree SRC (SRC/<class>/<image>) into a packed dataset at DST."""
    import os

    from packer.conversion.arrayjob import array_task
    from packer.conversion.run import convert as run_convert
    from packer.conversion.run import convert_task
    from packer.conversion.engines import open_engine
    from packer.cli.formatting import format_conversion, format_task

    options: dict[str, Any] = {}
    if resize is not None:
        if codec == "original":
            raise click.UsageError("--resize needs --codec jpeg or --codec pixels (the original "
                                   "codec stores files untouched).")
        options["resize"] = resize
    if quality is not None:
        if codec != "jpeg":
            raise click.UsageError("--quality needs --codec jpeg.")
        options["quality"] = quality
    if dry_run:
        from packer.cli.formatting import format_plan
        from packer.conversion.dryrun import plan_conversion

        plan = plan_conversion(src, to=backend, shard_size=shard_size, codec=codec,
                               codec_options=options,
                               include_hidden=include_hidden, allow_empty=allow_empty)
        click.echo(json.dumps(plan.to_dict(), indent=2) if as_json else format_plan(plan))
        return
    if print_job_script:
        if engine not in ("slurm", "pbs"):
            raise click.UsageError("--print-job-script needs --engine slurm or --engine pbs.")
        from packer.conversion.engines.dask_cluster import job_script

        click.echo(job_script(engine, queue=queue, walltime=walltime or "01:00:00", cores=job_cores,
                              memory=job_memory, account=account))
        return
    try:
        task = array_task(task_id, num_tasks, os.environ)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    if task is not None and (overwrite or resume):
        raise click.UsageError("Array tasks always keep finished shards and never overwrite: drop "
                               "--overwrite/--resume (clear DST first to start again).")
    engine_options: dict[str, Any] = {
        "workers": workers, "scheduler": scheduler, "jobs": jobs, "queue": queue, "walltime": walltime,
        "account": account, "cores": job_cores, "memory": job_memory}
    common: dict[str, Any] = {
        "to": backend, "shard_size": shard_size, "codec": codec, "codec_options": options,
        "check": check, "max_pixels": max_pixels, "strict": strict, "include_hidden": include_hidden,
        "allow_empty": allow_empty, "progress": not quiet}
    with ExitStack() as stack:
        try:
            chosen = stack.enter_context(open_engine(engine, **engine_options))
        except ValueError as err:
            raise click.UsageError(str(err)) from None
        if task is None:
            result = run_convert(src, dst, overwrite=overwrite, resume=resume, engine=chosen, **common)
            summary = format_conversion(result)
        else:
            if not quiet:
                click.echo(f"task {task.task_id} of {task.num_tasks} (from {task.source})", err=True)
            summary = format_task(convert_task(src, dst, task_id=task.task_id, num_tasks=task.num_tasks,
                                               engine=chosen, **common))
    if not quiet:
        click.echo(summary)


@cli.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--no-verify", is_flag=True,
              help="Trust the shards' sizes and receipts; do not hash them again.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def merge(dst: str, no_verify: bool, quiet: bool) -> None:
    """Finish DST after array tasks: check every shard, then write the manifest.

    Names the missing shard files and the tasks to run again (exit 1) when some are not
    there; does nothing on a complete dataset.
    """
    from tqdm import tqdm

    from packer.conversion.merging import merge as run_merge
    from packer.cli.formatting import format_merge

    with tqdm(desc="checking shards", unit="shard", disable=True if quiet else None) as bar:
        result = run_merge(dst, verify=not no_verify, on_shard=lambda name: bar.update())
    if not quiet:
        click.echo(format_merge(result))


@cli.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
def info(dst: str, as_json: bool) -> None:
    """Show what the packed dataset DST holds: classes, shards, skipped files."""
    from packer.cli.formatting import format_info
    from packer.tools.info import dataset_info

    summary = dataset_info(dst)
    click.echo(json.dumps(summary, indent=2, sort_keys=True) if as_json else format_info(summary))


@cli.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--deep", is_flag=True, help="Also read and decode every sample; check counts and labels.")
@click.option("--against", "src", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Compare every sample byte for byte with its file in this source tree.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def verify(dst: str, deep: bool, src: str | None, as_json: bool, quiet: bool) -> None:
    """Check that the dataset DST is whole: sizes and checksums of every file (exit 1 if not)."""
    from packer.cli.formatting import format_verify
    from packer.tools.verify import verify_dataset

    report = verify_dataset(dst, deep=deep, against=src, progress=not quiet and not as_json)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_verify(report))
    if not report.ok:
        sys.exit(1)


@cli.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--against", "src", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Also read this source folder the same way, alternating, and print the ratio.")
@click.option("--pipeline", type=click.Choice(["bytes", "train", "fast"]), default="train",
              show_default=True, help="bytes: stored bytes only; train: the standard PIL training "
              "pipeline; fast: packer's fused uint8 path with batch normalisation.")
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Read a fixed random subset of this many samples.")
@click.option("--sweep", "do_sweep", is_flag=True,
              help="Try num_workers x prefetch_factor x persistent_workers; print the best and "
                   "how make_loader's default compares.")
@click.option("--cold", is_flag=True,
              help="Drop the files from the page cache before every epoch (fresh workers each "
                   "time): what a new job on a cold machine sees.")
@click.option("--profile", "do_profile", is_flag=True,
              help="Time each stage (read, decode, crop/resize, collate+transfer, normalise) per "
                   "image and show the largest; --pipeline fast (the default here) or train.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
def bench(dst: str, src: str | None, pipeline: str, workers: int, batch_size: int, repeats: int,
          limit: int | None, cold: bool, do_sweep: bool, do_profile: bool, as_json: bool) -> None:
    """Measure how fast DST loads in a DataLoader (images/s, MB/s), optionally against SRC."""
    from packer.tools.bench import bench as run_bench
    from packer.tools.bench import sweep
    from packer.cli.formatting import format_bench, format_profile, format_sweep

    if do_profile:
        from packer.tools.profiling import profile_loading

        chosen = click.get_current_context().get_parameter_source("pipeline")
        profiled = "fast" if chosen is click.core.ParameterSource.DEFAULT else pipeline
        if profiled == "bytes":
            raise click.UsageError("--profile times the train or fast pipeline, not bytes.")
        profile = profile_loading(dst, pipeline=profiled, images=limit or 512, batch_size=batch_size,
                                  workers=workers)
        click.echo(json.dumps(profile.to_dict(), indent=2) if as_json else format_profile(profile))
        return
    if do_sweep:
        results = list(sweep(dst, pipeline=pipeline, batch_size=batch_size, limit=limit,
                             repeats=repeats))
        if as_json:
            click.echo(json.dumps([{"setting": s, "report": r.to_dict()} for s, r in results],
                                  indent=2))
        else:
            click.echo(format_sweep(results))
        return
    report = run_bench(dst, against=src, pipeline=pipeline, workers=workers,
                       batch_size=batch_size, repeats=repeats, limit=limit, cold=cold)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_bench(report))


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=str))
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="DataLoader workers used to read the datasets back.")
def demo(directory: str | None, workers: int) -> None:
    """Show packer at work on a generated photo-like tree, no data of yours needed.

    Makes a few hundred images (and a few broken files), converts them with every backend,
    reads them back through a DataLoader, checks every sample and prints a speed table. With
    DIRECTORY the tree and datasets are kept there; otherwise they are deleted afterwards.
    """
    from packer.cli.formatting import format_demo
    from packer.tools.demo import run_demo

    click.echo(f"packer demo: generating a tree, converting it to {', '.join(backend_names())}, "
               "reading it back ...", err=True)
    report = run_demo(directory, workers=workers, progress=True)
    for name, result in report.conversions.items():
        click.echo(f"{name}: {result.manifest.num_samples} samples, "
                   f"{format_size(result.manifest.num_bytes)} in {len(result.manifest.shards)} "
                   f"shard(s), converted at {result.images_per_second:.0f} images/s")
    click.echo(format_demo(report))
    if directory:
        click.echo(f"\nKept in {directory}: try `packer info {directory}/lmdb`.")
    if not report.ok:
        sys.exit(1)


for _command in (preview, export_command, show):  # the commands that look at a dataset's samples
    cli.add_command(_command)


def main() -> None:
    """Entry point of the ``packer`` script and ``python -m packer``."""
    cli(prog_name="packer")
