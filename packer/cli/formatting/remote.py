"""Text for ``packer push``, ``packer gc URL`` and ``packer cache info``."""

from __future__ import annotations

import time

from packer.sizes import format_size
from packer.store.cache.node import CacheInfo
from packer.tools.publish import PushResult, RemoteGcResult

__all__ = ["format_cache_info", "format_push", "format_remote_gc"]


def format_push(result: PushResult) -> str:
    """What a push uploaded and found already there."""
    return (f"Pushed {result.src} (version {result.version}) to {result.url}: "
            f"{len(result.uploaded)} file(s) uploaded ({format_size(result.uploaded_bytes)} of data), "
            f"{len(result.skipped)} already there.")


def format_remote_gc(result: RemoteGcResult) -> str:
    """What garbage collection removed under a URL (or would)."""
    verb = "would remove" if result.dry_run else "removed"
    kept = ", ".join(str(v) for v in result.kept_versions)
    return (f"gc {result.url}: kept version(s) {kept}; {verb} {len(result.removed)} object(s), "
            f"{format_size(result.freed_bytes)}.")


def format_cache_info(info: CacheInfo) -> str:
    """Where the cache is, what it holds, its bound and its disk's free space."""
    if info.limit is not None:
        bound = f"bound {format_size(info.limit)}"
    else:
        bound = "bound set by each reading process (cache_limit=)"
        last = info.last_bound
        if last is None:
            bound += "; none recorded yet"
        else:
            limit = "none (a free-space floor only)" if last.limit is None else format_size(last.limit)
            bound += (f"; last {limit}, keeping {format_size(last.min_free)} free, by pid {last.pid} "
                      f"on {last.host} {(time.time() - last.since) / 3600:.1f} h ago")
    oldest = ("" if info.oldest is None
              else f"; least recently used {(time.time() - info.oldest) / 3600:.1f} h ago")
    return "\n".join([
        f"cache {info.directory}",
        f"  holds {format_size(info.num_bytes)} in {info.entries} entries{oldest}",
        f"  {bound}",
        f"  {format_size(info.free_bytes)} free on its disk",
    ])
