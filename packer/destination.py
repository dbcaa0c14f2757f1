"""Rules for the output directory DST: when it may be written, and how it is cleared.

DST may be new, empty, or (with ``overwrite``) an earlier packer dataset or interrupted
conversion. A non-empty directory that is not packer's own is never deleted, even with
``overwrite``: packer refuses rather than guess what a stray ``--overwrite`` may destroy.
"""

from __future__ import annotations

import json
import os
import shutil

from packer.durable import atomic_write_bytes, fsync_dir
from packer.errors import OutputError, OutputExistsError
from packer.manifest import IN_PROGRESS_NAME, MANIFEST_NAME

__all__ = ["TMP_DIR", "check_destination", "clear_destination", "finish_destination",
           "start_destination"]

TMP_DIR = ".tmp"


_SNIFF_BYTES = 64 << 20


def _is_packer_output(dst: str) -> bool:
    """Whether ``dst`` holds packer's marker, or an ``index.json`` that is a packer manifest.

    ``index.json`` is a common name, so its mere presence does not make a directory packer's.
    """
    if os.path.exists(os.path.join(dst, IN_PROGRESS_NAME)):
        return True
    try:
        with open(os.path.join(dst, MANIFEST_NAME), "rb") as handle:
            text = handle.read(_SNIFF_BYTES + 1)
        data = json.loads(text) if len(text) <= _SNIFF_BYTES else None
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == "packer"


def check_destination(dst: str, src: str, *, overwrite: bool) -> None:
    """Refuse a DST that must not be written; touch nothing.

    Raises:
        OutputExistsError: DST is not empty and ``overwrite`` is off.
        OutputError: DST is a file, lies inside SRC, or is a foreign non-empty directory.
    """
    real_dst, real_src = os.path.realpath(dst), os.path.realpath(src)
    if real_dst == real_src or real_dst.startswith(real_src + os.sep):
        raise OutputError(f"Destination {dst!r} is inside the source {src!r}: it would become part "
                          "of the tree it packs. Choose a directory outside the source.")
    if real_src.startswith(real_dst.rstrip(os.sep) + os.sep):
        raise OutputError(f"The source {src!r} is inside the destination {dst!r}: writing there "
                          "could delete it. Choose a destination outside the source.")
    if not os.path.lexists(dst):
        return
    if not os.path.isdir(dst):
        raise OutputError(f"Destination {dst!r} exists and is not a directory: choose another path.")
    if not os.listdir(dst):
        return
    if not overwrite:
        what = "a packer dataset" if _is_packer_output(dst) else "not empty"
        raise OutputExistsError(f"Destination {dst!r} is {what}: choose a new directory, or pass "
                                "--overwrite (overwrite=True) to replace it.")
    if not _is_packer_output(dst):
        raise OutputError(f"Destination {dst!r} is not empty and is not a packer dataset: packer "
                          "will not delete it, even with --overwrite. Choose a new directory.")


def clear_destination(dst: str) -> None:
    """Delete the contents of a packer dataset or interrupted conversion; keep the directory.

    The in-progress marker is written first and removed never, and the manifest goes before
    any shard: a run killed while clearing leaves an incomplete packer directory (which readers
    reject and ``overwrite`` clears), never a complete-looking one or a "foreign" one.
    """
    marker = os.path.join(dst, IN_PROGRESS_NAME)
    if not os.path.exists(marker):
        atomic_write_bytes(marker, b"{}\n")
    manifest = os.path.join(dst, MANIFEST_NAME)
    if os.path.lexists(manifest):
        os.unlink(manifest)
        fsync_dir(dst)
    for name in os.listdir(dst):
        if name == IN_PROGRESS_NAME:
            continue
        path = os.path.join(dst, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def start_destination(dst: str, plan: dict[str, object]) -> str:
    """Create DST, mark it as a conversion in progress, and return its staging directory."""
    os.makedirs(dst, exist_ok=True)
    atomic_write_bytes(os.path.join(dst, IN_PROGRESS_NAME),
                       (json.dumps(plan, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    staging = os.path.join(dst, TMP_DIR)
    if os.path.isdir(staging):
        shutil.rmtree(staging)
    os.makedirs(staging)
    return staging


def finish_destination(dst: str) -> None:
    """After the manifest is in place: drop the marker and the staging directory."""
    os.unlink(os.path.join(dst, IN_PROGRESS_NAME))
    shutil.rmtree(os.path.join(dst, TMP_DIR), ignore_errors=True)
    fsync_dir(dst)
