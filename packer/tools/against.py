"""``packer verify --against SRC``: compare every stored sample with its source file, byte for byte.

Only for codecs that keep the source bytes; SRC is the tree, or the list file (whose root holds
the files) the dataset was converted from.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from packer.errors import PackerError
from packer.format.codecs import codec_class
from packer.format.manifest import Manifest
from packer.tools.findings import Findings

__all__ = ["compare_with_source", "keeps_source_bytes", "safe_relpath", "source_root"]


def safe_relpath(path: str) -> bool:
    """A relative POSIX path that stays inside the directory it is joined to."""
    pure = PurePosixPath(path)
    return bool(path) and not pure.is_absolute() and ".." not in pure.parts


def compare_with_source(src: str, rel: str, payload: bytes, found: Findings) -> bool:
    """Compare one stored payload with ``src/rel``; True when it was compared."""
    if not safe_relpath(rel):
        found.add(rel, "label_error", f"{rel!r} is not a path inside the source; not compared")
        return False
    try:
        with open(os.path.join(src, *rel.split("/")), "rb") as handle:
            source = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        found.add(rel, "source_missing", f"{rel} is packed but missing from the source {src}")
        return False
    except OSError as err:
        found.add(rel, "source_unreadable", f"{rel} cannot be read from the source: {err}")
        return False
    if source != payload:
        differ = next((i for i, (a, b) in enumerate(zip(source, payload, strict=False)) if a != b),
                      min(len(source), len(payload)))
        found.add(rel, "source_differs", f"{rel}: stored {len(payload)} bytes, the source has "
                  f"{len(source)}; they first differ at byte {differ}")
    return True


def keeps_source_bytes(name: str) -> bool:
    """Whether codec ``name`` stores the source bytes (False for one this packer lacks)."""
    try:
        return codec_class(name).keeps_source_bytes
    except PackerError:
        return False


def source_root(against: str, manifest: Manifest) -> str:
    """The folder the stored paths are relative to: SRC itself, or, when SRC is the dataset's list
    file, the root it was converted with (another list file: its own directory)."""
    if not os.path.isfile(against):
        return against
    listing = manifest.extra.get("list") or {}
    if listing.get("list") == against and listing.get("root"):
        return str(listing["root"])
    return os.path.dirname(against)
