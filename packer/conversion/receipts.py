"""A finished shard's receipt: what it holds, left next to DST's shards until the manifest is written.

A task writes ``DST/.receipts/<fingerprint>.json`` after its shard is renamed into place (the
fingerprint of the shard's planned inputs, :func:`packer.conversion.resume.shard_fingerprint`; the
file's own name comes from its contents, so the plan cannot know it). A shard file with a
matching receipt is finished: ``--resume`` keeps it untouched, and ``packer merge`` builds
the manifest from the receipts alone, without scanning the source again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from packer.format.manifest import ShardEntry, SkippedFile

__all__ = ["RECEIPTS_DIR", "ShardResult", "load_receipt", "receipt_path", "receipted_files"]

#: Where finished shards leave their receipts, under DST.
RECEIPTS_DIR = ".receipts"


@dataclass(frozen=True)
class ShardResult:
    """A finished shard: its manifest entry and the samples and skips it holds, in order."""

    entry: ShardEntry
    relpaths: tuple[str, ...]
    targets: tuple[int, ...]
    skipped: tuple[SkippedFile, ...]
    bytes_in: int
    fingerprint: str
    metadata: tuple[str, ...] = ()  # per packed sample, a list source's other columns (JSON)
    #: Per packed sample: the source file's size, mtime (ns) and the first 8 bytes of its
    #: SHA-256 as a signed integer (``samples/sources.npy``: what ``packer update`` compares).
    sources: tuple[tuple[int, int, int], ...] = ()

    def to_json(self) -> str:
        """The receipt's text."""
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def receipt_path(dst: str, fingerprint: str) -> str:
    """Where the shard planned with ``fingerprint`` leaves its receipt once finished."""
    return os.path.join(dst, RECEIPTS_DIR, fingerprint + ".json")


def _read_receipt(path: str) -> ShardResult | None:
    """The receipt at ``path``, or None when it is missing or damaged."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            data = json.load(handle)
        return ShardResult(
            entry=ShardEntry(**data["entry"]),
            relpaths=tuple(data["relpaths"]),
            targets=tuple(data["targets"]),
            skipped=tuple(SkippedFile(**s) for s in data["skipped"]),
            bytes_in=int(data["bytes_in"]),
            fingerprint=str(data["fingerprint"]),
            metadata=tuple(data.get("metadata", ())),
            sources=tuple((int(a), int(b), int(c)) for a, b, c in data.get("sources", ())),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_receipt(dst: str, fingerprint: str) -> ShardResult | None:
    """The receipt of a finished shard, or None when it is missing, damaged, of another plan,
    or its shard file is not there with the size it records."""
    result = _read_receipt(receipt_path(dst, fingerprint))
    if result is None or result.fingerprint != fingerprint:
        return None
    try:
        finished = os.path.getsize(os.path.join(dst, result.entry.path)) == result.entry.num_bytes
    except OSError:
        finished = False
    return result if finished else None


def receipted_files(dst: str) -> set[str]:
    """The shard files every receipt in DST names (a run in progress, or killed, wrote them)."""
    folder = os.path.join(dst, RECEIPTS_DIR)
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    found = (_read_receipt(os.path.join(folder, name)) for name in names if name.endswith(".json"))
    return {result.entry.path for result in found if result is not None}
