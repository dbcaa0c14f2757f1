"""One unit of conversion work: pack one planned shard, in whatever process runs it.

A :class:`ShardTask` carries everything a worker needs (it pickles small and holds no handle);
:func:`write_shard` reads, checks and encodes each source file, writes the shard under
``DST/.tmp`` with a name no other attempt uses, fsyncs and hashes it, renames it into place and
then writes its receipt ``DST/.receipts/<shard>.json``. A shard file with a matching receipt is
finished: ``--resume`` keeps it untouched. Running the same task twice gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from packer.backends import get_backend
from packer.codecs import get_codec
from packer.destination import RECEIPTS_DIR
from packer.durable import atomic_write_bytes, fsync_dir, sha256_file
from packer.errors import BadImageError, SourceError
from packer.manifest import ShardEntry, SkippedFile
from packer.sourcefile import UnpackableFile, read_source

__all__ = ["RECEIPTS_DIR", "ShardResult", "ShardTask", "load_receipt", "write_shard"]


#: ``notify(event, relpath)``: ``"file"`` before a file is read (so a crash can be pinned on
#: it), then ``"packed"`` or ``"skipped"``.
Notify = Callable[[str, str], None]


@dataclass(frozen=True)
class ShardTask:
    """Everything needed to pack shard ``index``: source items, options, where to write."""

    index: int
    name: str
    src: str
    dst: str
    staging: str
    backend: str
    codec: str
    check: str
    max_pixels: int
    strict: bool
    planned_bytes: int
    items: tuple[tuple[str, int, int], ...]
    fingerprint: str
    crashed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardResult:
    """A finished shard: its manifest entry and the samples and skips it holds, in order."""

    entry: ShardEntry
    relpaths: tuple[str, ...]
    targets: tuple[int, ...]
    skipped: tuple[SkippedFile, ...]
    bytes_in: int
    fingerprint: str

    def to_json(self) -> str:
        """The receipt's text."""
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def shard_fingerprint(index: int, options: dict[str, Any], items: tuple[tuple[str, int, int], ...]) -> str:
    """Identity of a shard's inputs: same fingerprint, same shard bytes."""
    text = json.dumps({"index": index, "options": options, "items": items}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _receipt_path(dst: str, name: str) -> str:
    return os.path.join(dst, RECEIPTS_DIR, name + ".json")


def load_receipt(dst: str, name: str) -> ShardResult | None:
    """The receipt of a finished shard, or None when it is missing, damaged or not finished."""
    try:
        with open(_receipt_path(dst, name), encoding="utf-8", errors="surrogateescape") as handle:
            data = json.load(handle)
        result = ShardResult(
            entry=ShardEntry(**data["entry"]),
            relpaths=tuple(data["relpaths"]),
            targets=tuple(data["targets"]),
            skipped=tuple(SkippedFile(**s) for s in data["skipped"]),
            bytes_in=int(data["bytes_in"]),
            fingerprint=str(data["fingerprint"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        finished = os.path.getsize(os.path.join(dst, name)) == result.entry.num_bytes
    except OSError:
        finished = False
    return result if finished else None


def _pack_bytes(task: ShardTask, relpath: str, size: int) -> bytes:
    """Read and encode one file; UnpackableFile says why it cannot be packed."""
    path = os.path.join(task.src, *relpath.split("/"))
    try:
        data = read_source(path)
    except FileNotFoundError as err:
        raise SourceError(f"Source file {path!r} vanished during the conversion: restore it (or "
                          "re-plan with --overwrite), then run the same command with --resume.") from err
    except OSError as err:
        raise SourceError(f"Reading {path!r} failed: {err}. Fix the storage, then run the same "
                          "command with --resume.") from err
    if size >= 0 and len(data) != size:
        raise SourceError(f"Source file {path!r} changed during the conversion ({size} bytes when "
                          f"scanned, {len(data)} now): convert again with --overwrite.")
    codec = get_codec(task.codec)
    return codec.encode(data, check=task.check, max_pixels=task.max_pixels)


def write_shard(task: ShardTask, notify: Notify) -> ShardResult:
    """Pack ``task`` into ``DST/<name>`` and its receipt; see the module docstring.

    Raises:
        BadImageError: under ``strict``, the first file that cannot be packed.
        SourceError: a source file vanished, changed or could not be read (I/O error).
        ShardError, OSError: the shard could not be written (disk full, read-only, ...).
    """
    backend = get_backend(task.backend)
    tmp_path = os.path.join(task.staging, f"{task.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    relpaths: list[str] = []
    targets: list[int] = []
    skipped: list[SkippedFile] = []
    bytes_in = 0
    with backend.writer(tmp_path, capacity=max(task.planned_bytes, 1)) as writer:
        for relpath, label, size in task.items:
            notify("file", relpath)
            if relpath in task.crashed:
                bad = UnpackableFile("decode_error", task.crashed[relpath])
            else:
                try:
                    payload = _pack_bytes(task, relpath, size)
                except UnpackableFile as err:
                    bad = err
                else:
                    writer.write(payload)
                    relpaths.append(relpath)
                    targets.append(label)
                    bytes_in += size
                    notify("packed", relpath)
                    continue
            if task.strict:
                raise BadImageError(f"{os.path.join(task.src, relpath)!r} cannot be packed: "
                                    f"{bad.reason} ({bad.detail}). Fix or remove the file, or "
                                    "convert without --strict to skip and list it.",
                                    path=relpath, reason=bad.reason)
            skipped.append(SkippedFile(relpath, bad.reason, bad.detail))
            notify("skipped", relpath)
    try:
        checksum, num_bytes = sha256_file(tmp_path), os.path.getsize(tmp_path)
        os.replace(tmp_path, os.path.join(task.dst, task.name))
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise
    fsync_dir(task.dst)
    first = -1  # global numbering is only known once every earlier shard is done
    result = ShardResult(ShardEntry(task.name, first, len(relpaths), num_bytes, checksum),
                         tuple(relpaths), tuple(targets), tuple(skipped), bytes_in, task.fingerprint)
    os.makedirs(os.path.join(task.dst, RECEIPTS_DIR), exist_ok=True)
    receipt = result.to_json().encode("utf-8", "surrogateescape")
    atomic_write_bytes(_receipt_path(task.dst, task.name), receipt)
    return result
