"""``packer bench`` and ``packer demo``: how fast a dataset loads, and packer at work."""

from __future__ import annotations

import json
import sys

import click

from packer.cli.output import say
from packer.format.backends import backend_names
from packer.sizes import format_size

__all__ = ["bench", "demo"]


@click.command()
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
    from packer.cli.formatting import format_bench, format_profile, format_sweep
    from packer.tools.bench import bench as run_bench
    from packer.tools.tuning import sweep

    if do_profile:
        from packer.tools.profiling import profile_loading

        chosen = click.get_current_context().get_parameter_source("pipeline")
        profiled = "fast" if chosen is click.core.ParameterSource.DEFAULT else pipeline
        if profiled == "bytes":
            raise click.UsageError("--profile times the train or fast pipeline, not bytes.")
        profile = profile_loading(dst, pipeline=profiled, images=limit or 512, batch_size=batch_size,
                                  workers=workers)
        say(json.dumps(profile.to_dict(), indent=2) if as_json else format_profile(profile))
        return
    if do_sweep:
        results = list(sweep(dst, pipeline=pipeline, batch_size=batch_size, limit=limit,
                             repeats=repeats))
        if as_json:
            say(json.dumps([{"setting": s, "report": r.to_dict()} for s, r in results],
                                  indent=2))
        else:
            say(format_sweep(results))
        return
    report = run_bench(dst, against=src, pipeline=pipeline, workers=workers,
                       batch_size=batch_size, repeats=repeats, limit=limit, cold=cold)
    say(json.dumps(report.to_dict(), indent=2) if as_json else format_bench(report))


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=str))
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="DataLoader workers used to read the datasets back.")
@click.option("--no-speed", is_flag=True,
              help="Skip the speed table (about half the time): only generate, convert and check.")
def demo(directory: str | None, workers: int, no_speed: bool) -> None:
    """Show packer at work on a generated photo-like tree, no data of yours needed.

    Makes a few hundred images (and a few broken files), converts them with every backend,
    reads them back through a DataLoader, checks every sample and prints a speed table. With
    DIRECTORY the tree and datasets are kept there; otherwise they are deleted afterwards.
    """
    from packer.cli.formatting import format_demo
    from packer.tools.demo.run import run_demo

    say(f"packer demo: generating a tree, converting it to {', '.join(backend_names())}, "
               "reading it back ...", err=True)
    report = run_demo(directory, workers=workers, progress=True, timed=not no_speed)
    for name, result in report.conversions.items():
        say(f"{name}: {result.manifest.num_samples} samples, "
                   f"{format_size(result.manifest.num_bytes)} in {len(result.manifest.shards)} "
                   f"shard(s), converted at {result.images_per_second:.0f} images/s")
    say(format_demo(report))
    if directory:
        say(f"\nKept in {directory}: try `packer info {directory}/lmdb`.")
    if not report.ok:
        sys.exit(1)
