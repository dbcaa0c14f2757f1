"""Text for ``packer update``, ``packer upgrade`` and ``packer gc``."""

from __future__ import annotations

from packer.conversion.maintenance.gc import GcResult
from packer.conversion.maintenance.updating import UpdateResult
from packer.conversion.maintenance.upgrading import UpgradeResult
from packer.sizes import format_size

__all__ = ["format_gc", "format_update", "format_upgrade"]


def format_update(result: UpdateResult) -> str:
    """What an update found and did (or, dry run, would do)."""
    files = (f"files: {result.files_added} added, {result.files_removed} removed, "
             f"{result.files_changed} changed")
    if result.up_to_date:
        done = "nothing to write" if result.dry_run else "nothing written"
        return f"{result.dst} is up to date at version {result.version} ({files}); {done}."
    if result.dry_run:
        return "\n".join([
            f"Dry run: {result.dst} at version {result.from_version}; {files}.",
            f"  an update would write {result.shards_written} shard(s) (about "
            f"{format_size(result.bytes_written)}) and reuse {result.shards_reused}.",
            "Nothing was written."])
    m = result.manifest
    lines = [
        f"Updated {result.dst} from version {result.from_version} to {result.version}: {files}.",
        f"  shards: {result.shards_written} written ({format_size(result.bytes_written)}), "
        f"{result.shards_reused} reused, {len(m.shards)} in all; {m.num_samples} samples in "
        f"{len(m.classes)} classes, {len(m.skipped)} skipped; {result.seconds:.1f} s",
    ]
    if result.resumed_shards:
        lines.append(f"  resumed: kept {result.resumed_shards} shard(s) the interrupted update had written")
    if result.collected is not None:
        lines.append("  " + format_gc(result.collected))
    else:
        lines.append(f"  version {result.from_version} stays readable; `packer gc {result.dst}` removes "
                     "its files")
    return "\n".join(lines)


def format_upgrade(result: UpgradeResult) -> str:
    """What an upgrade checked and wrote."""
    m = result.manifest
    if result.already_current:
        return (f"{result.dst} is already a format-{m.format_version} dataset (version {m.version}): "
                "nothing to upgrade; `packer update` works on it.")
    compared = ("each stored image equals its source file byte for byte" if result.bytes_compared else
                f"the {m.codec} codec re-encodes, so paths, classes, labels and skipped files were "
                "compared, not bytes")
    lines = [
        f"Upgraded {result.dst} to format {m.format_version} (version {m.version}): "
        f"{result.samples_compared} samples in {len(m.classes)} classes checked against {m.source}; "
        f"{compared}.",
        f"  {result.shards_kept} shard file(s) kept as they were; source identities recorded; "
        f"{result.seconds:.1f} s",
    ]
    if result.shards_reusable < result.shards_kept:
        lines.append(f"  `packer update` works now; its first run rewrites "
                     f"{result.shards_kept - result.shards_reusable} shard(s) into the current layout.")
    else:
        lines.append("  `packer update` works now.")
    return "\n".join(lines)


def format_gc(result: GcResult) -> str:
    """What garbage collection removed (or would)."""
    verb = "would remove" if result.dry_run else "removed"
    kept = ", ".join(str(v) for v in result.kept_versions)
    gone = ", ".join(str(v) for v in result.removed_versions) or "none"
    return (f"gc {result.dst}: kept version(s) {kept}; {verb} version(s) {gone}: "
            f"{len(result.removed_files)} file(s), {format_size(result.freed_bytes)}.")
