"""``packer push`` and ``packer cache``: publish a dataset to object storage; show and empty
the node's cache of remote bytes."""

from __future__ import annotations

import click

from packer.cli.output import say

__all__ = ["cache", "push"]


@click.command()
@click.argument("dst", type=click.Path(path_type=str))
@click.argument("url")
@click.option("--workers", type=click.IntRange(min=1), default=8, show_default=True,
              help="Files uploaded at once.")
def push(dst: str, url: str, workers: int) -> None:
    """Upload the finished dataset DST to URL (s3://bucket/prefix, gs://..., az://...).

    Shards and index files go first, then each version's manifest, then index.json last, so a
    reader never sees a half-published version. Files already there are skipped: after
    `packer update DST`, a push uploads only the new ones; an interrupted push is finished by
    running it again. Credentials come from the cloud's usual environment (AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL for S3-compatible servers).
    """
    from packer.cli.formatting.remote import format_push
    from packer.tools.publish import push_dataset

    say(format_push(push_dataset(dst, url, workers=workers)))


@click.group()
def cache() -> None:
    """The node's cache of remote datasets ($PACKER_CACHE, else $XDG_CACHE_HOME/packer, else
    ~/.cache/packer).

    Its bound is set per reading process (cache_limit= of open_dataset); `info` shows the last one.
    """


_DIR = click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=str), default=None,
                    help="The cache directory (default: $PACKER_CACHE, else $XDG_CACHE_HOME/packer, "
                         "else ~/.cache/packer).")


@cache.command("info")
@_DIR
def cache_info(directory: str | None) -> None:
    """Show where the cache is, how much it holds and how much room its disk has."""
    from packer.cli.formatting.remote import format_cache_info
    from packer.store import NodeCache

    say(format_cache_info(NodeCache(directory).info()))


def _age(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise click.BadParameter(f"{text!r}: write a number with s, m, h, d or w (e.g. 7d)") from None


@cache.command("clear")
@_DIR
@click.option("--older-than", default=None, help="Only entries unused for this long (30m, 12h, 7d).")
def cache_clear(directory: str | None, older_than: str | None) -> None:
    """Delete cached entries (all, or those unused for --older-than). Readers using an entry
    keep reading it; a later read fetches it again."""
    from packer.sizes import format_size
    from packer.store import NodeCache

    store_cache = NodeCache(directory)
    entries, freed = store_cache.clear(older_than=None if older_than is None else _age(older_than))
    say(f"Removed {entries} entr{'y' if entries == 1 else 'ies'} ({format_size(freed)}) from "
               f"{store_cache.directory}.")


