"""Rules for the output directory DST: when it may be written, resumed, or cleared.

DST may be new or empty; an interrupted conversion (its marker, no manifest) may be resumed
(``resume``) or replaced (``overwrite``); a complete dataset may be replaced. A non-empty
directory that is not packer's own is never deleted, even with ``overwrite``: packer refuses
rather than guess what a stray ``--overwrite`` may destroy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil

from packer.format.durable import atomic_write_bytes, fsync_dir, is_temporary_name
from packer.errors import OutputError, OutputExistsError
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME
from packer.format.sample_index import INDEX_FILES

__all__ = ["RECEIPTS_DIR", "TMP_DIR", "check_destination", "clear_destination", "destination_state",
           "discard_staging", "finish_destination", "read_marker", "remove_stray_temporaries",
           "start_destination", "task_staging"]

TMP_DIR = ".tmp"
#: Where finished shards leave their receipts (kept by ``resume``); same name as in shardwork.
RECEIPTS_DIR = ".receipts"


_SNIFF_BYTES = 64 << 20


def _is_packer_output(dst: str) -> bool:
    """Whether ``dst`` holds packer's marker, or an ``index.json`` that is a packer manifest.

    ``index.json`` is a common name, so its mere presence does not make a directory packer's.
    """
    if os.path.exists(os.path.join(dst, IN_PROGRESS_NAME)):
        return True
    # An array task between writing its marker aside and linking it into place (jobplan):
    # another task starting at that instant must see a conversion, not a foreign directory.
    claim = f".{IN_PROGRESS_NAME}."
    if any(name.startswith(claim) and name.endswith(".tmp") for name in os.listdir(dst)):
        return True
    try:
        with open(os.path.join(dst, MANIFEST_NAME), "rb") as handle:
            text = handle.read(_SNIFF_BYTES + 1)
        data = json.loads(text) if len(text) <= _SNIFF_BYTES else None
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == "packer"


def destination_state(dst: str) -> str:
    """``"empty"`` (absent or empty), ``"complete"``, ``"partial"`` (interrupted) or ``"foreign"``."""
    if not os.path.lexists(dst) or (os.path.isdir(dst) and not os.listdir(dst)):
        return "empty"
    if not os.path.isdir(dst):
        return "foreign"
    if not _is_packer_output(dst):
        return "foreign"
    return "complete" if os.path.exists(os.path.join(dst, MANIFEST_NAME)) else "partial"


def read_marker(dst: str) -> dict[str, object]:
    """The plan an interrupted conversion recorded in its marker ({} if unreadable)."""
    try:
        with open(os.path.join(dst, IN_PROGRESS_NAME), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check_destination(dst: str, src: str, *, overwrite: bool, resume: bool = False) -> str:
    """Refuse a DST that must not be written; touch nothing; return :func:`destination_state`.

    Raises:
        OutputExistsError: DST is not empty and neither ``overwrite`` nor (for an interrupted
            conversion) ``resume`` allows writing it; the message names the flags.
        OutputError: DST is a file, lies inside SRC (or SRC inside it), or is a foreign
            non-empty directory; or both ``overwrite`` and ``resume`` were asked.
    """
    if overwrite and resume:
        raise OutputError("Choose --resume (finish an interrupted conversion) or --overwrite "
                          "(start again), not both.")
    real_dst, real_src = os.path.realpath(dst), os.path.realpath(src)
    if real_dst == real_src or real_dst.startswith(real_src + os.sep):
        raise OutputError(f"Destination {dst!r} is inside the source {src!r}: it would become part "
                          "of the tree it packs. Choose a directory outside the source.")
    if real_src.startswith(real_dst.rstrip(os.sep) + os.sep):
        raise OutputError(f"The source {src!r} is inside the destination {dst!r}: writing there "
                          "could delete it. Choose a destination outside the source.")
    if os.path.lexists(dst) and not os.path.isdir(dst):
        raise OutputError(f"Destination {dst!r} exists and is not a directory: choose another path.")
    state = destination_state(dst)
    if state == "foreign":
        if overwrite or resume:
            raise OutputError(f"Destination {dst!r} is not empty and is not a packer dataset: packer "
                              "will not delete or resume it. Choose a new directory.")
        raise OutputExistsError(f"Destination {dst!r} is not empty: choose a new directory.")
    if state == "partial" and not (overwrite or resume):
        raise OutputExistsError(f"Destination {dst!r} holds an interrupted conversion: finish it "
                                "with --resume, or start again with --overwrite.")
    if state == "complete" and not (overwrite or resume):
        raise OutputExistsError(f"Destination {dst!r} is a packer dataset: choose a new directory, "
                                "or pass --overwrite (overwrite=True) to replace it.")
    return state


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


def remove_stray_temporaries(dst: str) -> None:
    """Delete half-written ``.<name>.<pid>.tmp`` files a killed run left (see durable.py)."""
    samples = os.path.dirname(INDEX_FILES["targets"])
    for folder in (dst, os.path.join(dst, samples), os.path.join(dst, RECEIPTS_DIR)):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if is_temporary_name(name) and os.path.isfile(path):
                os.unlink(path)


def start_destination(dst: str, plan: dict[str, object]) -> str:
    """Create DST, mark it as a conversion in progress, and return its (emptied) staging dir.

    Shards already in DST stay: ``resume`` keeps those whose receipts match the plan.
    """
    os.makedirs(dst, exist_ok=True)
    remove_stray_temporaries(dst)
    atomic_write_bytes(os.path.join(dst, IN_PROGRESS_NAME),
                       (json.dumps(plan, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    staging = os.path.join(dst, TMP_DIR)
    if os.path.isdir(staging):
        shutil.rmtree(staging)
    os.makedirs(staging)
    return staging


def task_staging(dst: str, task_id: int, num_tasks: int) -> str:
    """Array task ``task_id``'s own (emptied) staging dir: tasks running at the same time into
    one DST never touch each other's half-written files."""
    staging = os.path.join(dst, TMP_DIR, f"task-{task_id:05d}-of-{num_tasks:05d}")
    if os.path.isdir(staging):
        shutil.rmtree(staging)
    os.makedirs(staging)
    return staging


def discard_staging(dst: str, staging: str | None = None) -> None:
    """Delete what stopped workers left half-written in ``staging`` (default: DST's own);
    finished shards stay in DST."""
    staging = staging or os.path.join(dst, TMP_DIR)
    if os.path.isdir(staging):
        for name in os.listdir(staging):
            path = os.path.join(staging, name)
            if os.path.isfile(path) or os.path.islink(path):
                os.unlink(path)


def finish_destination(dst: str) -> None:
    """After the manifest is in place: drop the marker, the staging dir and the receipts
    (another ``merge`` finishing at the same time may have dropped them already)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(dst, IN_PROGRESS_NAME))
    shutil.rmtree(os.path.join(dst, TMP_DIR), ignore_errors=True)
    shutil.rmtree(os.path.join(dst, RECEIPTS_DIR), ignore_errors=True)
    fsync_dir(dst)
