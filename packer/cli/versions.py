"""``packer update``, ``packer upgrade`` and ``packer gc``: a dataset's versions. Parse, call, print."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from packer.cli.output import say

__all__ = ["gc", "update", "upgrade"]


@click.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--checksum", is_flag=True,
              help="Compare files by content (reads every source file) instead of size and "
                   "modification time: for storage whose times cannot be trusted.")
@click.option("--dry-run", is_flag=True, help="Say what would change and be written; write nothing.")
@click.option("--resume", is_flag=True,
              help="Finish an interrupted update (running the same update again does the same).")
@click.option("--keep-versions", type=click.IntRange(min=1), default=None,
              help="Afterwards delete the files of all but the newest N versions (as packer gc) "
                   "[default: keep every version until packer gc].")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes writing shards [default: the usable CPUs].")
@click.option("--strict", is_flag=True, help="Stop at the first bad file (exit 1) instead of skipping it.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def update(src: str, dst: str, **given: Any) -> None:
    """Bring the packed dataset DST up to date with SRC, as a new version.

    The result is what `packer convert SRC` with DST's recorded options would give; only the
    shards near added, removed or changed files are written. The previous version stays
    readable (a running training job keeps reading it) until `packer gc DST`.
    """
    from packer.cli.formatting import format_update
    from packer.conversion.maintenance.updating import update as run_update

    result = run_update(src, dst, checksum=given["checksum"], dry_run=given["dry_run"],
                        workers=given["workers"], keep_versions=given["keep_versions"],
                        strict=given["strict"], progress=not (given["quiet"] or given["as_json"]))
    if given["as_json"]:
        record = {key: value for key, value in asdict(result).items() if key not in ("manifest", "collected")}
        record["version"] = result.version
        record["collected"] = asdict(result.collected) if result.collected else None
        say(json.dumps(record, indent=2))
    elif not given["quiet"]:
        say(format_update(result))


@click.command()
@click.argument("src", type=click.Path(path_type=str))
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Threads reading SRC and DST [default: the usable CPUs].")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def upgrade(src: str, dst: str, workers: int | None, quiet: bool, as_json: bool) -> None:
    """Make DST, a dataset written by packer 0.1, one that `packer update` works on; no shard
    is rewritten.

    Reads SRC once and checks that it still gives exactly DST's samples (if not, it names the
    files that differ and changes nothing), then records each source file's identity and writes
    a format-2 manifest. The first `packer update` afterwards rewrites the shards into the
    current layout; later ones write only what changed. On a current dataset it does nothing.
    """
    from packer.cli.formatting.versions import format_upgrade
    from packer.conversion.maintenance.upgrading import upgrade as run_upgrade

    result = run_upgrade(src, dst, workers=workers, progress=not (quiet or as_json))
    if as_json:
        record = {key: value for key, value in asdict(result).items() if key != "manifest"}
        record["format_version"] = result.manifest.format_version
        record["version"] = result.manifest.version
        say(json.dumps(record, indent=2))
    elif not quiet:
        say(format_upgrade(result))


@click.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.option("--keep-versions", type=click.IntRange(min=1), default=1, show_default=True,
              help="Versions to keep, newest first (the current one always).")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
def gc(dst: str, keep_versions: int, dry_run: bool) -> None:
    """Delete the files of DST's older versions that no kept version uses (DST may be a URL a
    dataset was pushed to).

    A training job still reading a removed version keeps the files it has open; a worker it
    starts afterwards fails with a clear error. Keep versions that running jobs use.
    """
    from packer.store.urls import is_url

    if is_url(dst):
        from packer.cli.formatting.remote import format_remote_gc
        from packer.tools.publish import collect_remote_garbage

        result = collect_remote_garbage(dst, keep_versions=keep_versions, dry_run=dry_run)
        say(format_remote_gc(result))
        return
    from packer.cli.formatting import format_gc
    from packer.conversion.maintenance.gc import collect_garbage

    say(format_gc(collect_garbage(dst, keep_versions=keep_versions, dry_run=dry_run)))
