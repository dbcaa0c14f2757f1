"""What two datasets must share to be "the same dataset", and small helpers to damage one.

:func:`dataset_snapshot` is every file of a finished dataset and its manifest without the
fields that only say when it was written: two conversions of one source with the same options
give equal snapshots, however many workers, on whichever engine, resumed or not, and an update
followed by ``collect_garbage()`` equals a fresh conversion of the edited source.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from packer.format.manifest import MANIFEST_NAME

__all__ = ["dataset_snapshot", "files_under", "flip_byte"]

#: Manifest fields that record when and in which order a dataset was written, not what it holds.
_VOLATILE = ("created_at", "version", "last_update")
#: Top-level files named so coordinate writers (a lock, a lease): not part of what DST holds.
_COORDINATION_PREFIX = ".packer-"


def files_under(root: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``root`` by relative POSIX path (a partial dataset has no manifest yet)."""
    top = Path(root)
    return {path.relative_to(top).as_posix(): path.read_bytes()
            for path in sorted(top.rglob("*")) if path.is_file()}


def dataset_snapshot(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The files of the finished dataset at ``root`` and its manifest, less what only says when
    it was written (see the module docstring). Left out: the kept manifests of versions (each
    has its own time stamp) and top-level ``.packer-*`` files (a lock or lease, not data)."""
    top = Path(root)
    manifest = json.loads((top / MANIFEST_NAME).read_text(encoding="utf-8"))
    files = {relpath: data for relpath, data in files_under(top).items()
             if relpath != MANIFEST_NAME and not relpath.startswith(("versions/", _COORDINATION_PREFIX))}
    for name in _VOLATILE:
        manifest.pop(name, None)
    return {"files": files, "manifest": manifest}


def flip_byte(path: str | os.PathLike[str], offset: int | None = None) -> int:
    """Invert one byte of the file at ``path`` (the middle one by default); return its offset."""
    size = os.path.getsize(path)
    where = size // 2 if offset is None else offset
    with open(path, "r+b") as handle:
        handle.seek(where)
        byte = handle.read(1)
        handle.seek(where)
        handle.write(bytes([byte[0] ^ 0xFF]))
    return where
