"""A finished shard's receipt: what it holds, left next to DST's shards until the manifest is written.

A task writes ``DST/.receipts/<fingerprint>.json`` after its shard is renamed into place (the
fingerprint of the shard's planned inputs, :func:`packer.conversion.destination.resume.shard_fingerprint`; the
file's own name comes from its contents, so the plan cannot know it). A shard file with a
matching receipt is finished: ``--resume`` keeps it untouched, and ``packer merge`` builds
the manifest from the receipts alone, without scanning the source again.

A receipt also carries the shard's rows of the records array (:mod:`packer.format.records`:
where each payload lies in the file, and its digest), base64 of little-endian int64, so that
finishing a dataset reads no shard back; a receipt without them (an older packer's) still
counts, and its shard is read back instead.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from packer.format.manifest import ShardEntry, SkippedFile
from packer.format.records import records_from_bytes
from packer.store.durable import atomic_write_bytes

__all__ = ["RECEIPTS_DIR", "UPLOADED_DIR", "ShardResult", "load_receipt", "mark_uploaded", "receipt_path",
           "receipted_files"]

#: Where finished shards leave their receipts, under DST.
RECEIPTS_DIR = ".receipts"
#: A conversion to a URL (:mod:`packer.conversion.remote`) notes here each shard it uploaded and
#: then removed from its staging folder: a file named as the shard, holding its size.
UPLOADED_DIR = ".uploaded"


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
    #: The shard's rows of the records array (:func:`packer.format.records.records_to_bytes`),
    #: or None when unknown (a shard reused by ``packer update``, an older packer's receipt).
    records: bytes | None = None

    def records_array(self) -> np.ndarray | None:
        """``int64[n, 3]`` records of the packed samples, or None when unknown."""
        if self.records is None:
            return None
        return records_from_bytes(self.records, len(self.relpaths))

    def to_json(self) -> str:
        """The receipt's text (built field by field: ``dataclasses.asdict`` deep-copies every
        path and tuple, a third of the cost of writing a receipt)."""
        data: dict[str, Any] = {
            "entry": _plain(self.entry),
            "relpaths": self.relpaths,
            "targets": self.targets,
            "skipped": [_plain(skip) for skip in self.skipped],
            "bytes_in": self.bytes_in,
            "fingerprint": self.fingerprint,
            "metadata": self.metadata,
            "sources": self.sources,
            "records": None if self.records is None else base64.b64encode(self.records).decode("ascii"),
        }
        return json.dumps(data, sort_keys=True) + "\n"


def _plain(record: ShardEntry | SkippedFile) -> dict[str, Any]:
    """A flat record's fields as a dict (their values are plain already)."""
    return {field.name: getattr(record, field.name) for field in fields(record)}


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
            records=_records(data.get("records")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _records(text: object) -> bytes | None:
    """A receipt's records, or None when it has none (an older packer's) or they are damaged."""
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
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
        finished = _uploaded_size(dst, result.entry.path) == result.entry.num_bytes
    return result if finished else None


def mark_uploaded(dst: str, relpath: str, size: int) -> None:
    """Note that the shard ``relpath`` (``size`` bytes) is at the URL DST stages for, so that its
    local file may go and :func:`load_receipt` still keeps it."""
    path = os.path.join(dst, UPLOADED_DIR, relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write_bytes(path, f"{size}\n".encode("ascii"))


def _uploaded_size(dst: str, relpath: str) -> int | None:
    try:
        with open(os.path.join(dst, UPLOADED_DIR, relpath), "rb") as handle:
            return int(handle.read(32))
    except (OSError, ValueError):
        return None


def receipted_files(dst: str) -> set[str]:
    """The shard files every receipt in DST names (a run in progress, or killed, wrote them)."""
    folder = os.path.join(dst, RECEIPTS_DIR)
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    found = (_read_receipt(os.path.join(folder, name)) for name in names if name.endswith(".json"))
    return {result.entry.path for result in found if result is not None}
