"""Where an export writes: OUT checked against the dataset and its source, folders made, and
each file written under a temporary name and renamed, so no half-written file has a final name.
Shared by every export layout (a tree, WebDataset shards, a YOLO set, a mask tree)."""

from __future__ import annotations

import contextlib
import os

from packer.errors import OutputError, OutputExistsError

__all__ = ["check_out", "make_dirs", "write_file"]


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_out(out: str, root: str, source: str, *, overwrite: bool) -> None:
    """Refuse an OUT inside the dataset (or holding it), the source itself, a file, or a
    non-empty folder without ``overwrite``."""
    real_out, real_root = os.path.realpath(out), os.path.realpath(root)
    if _inside(real_out, real_root) or _inside(real_root, real_out):
        raise OutputError(f"Export target {out!r} and dataset {root!r} lie inside one another: choose "
                          "a directory outside the dataset.")
    if source and os.path.realpath(source) == real_out:
        raise OutputError(f"{out!r} is the source tree {root!r} was converted from: export elsewhere.")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise OutputError(f"Export target {out!r} exists and is not a directory: choose another path.")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise OutputExistsError(f"Export target {out!r} is not empty: choose a new directory, or pass "
                                "overwrite=True to write into it (files of the same names are replaced, "
                                "nothing is deleted).")


def _fail(err: OSError, where: str) -> OutputError:
    return OutputError(f"Cannot write the export at {err.filename or where!r}: {err.strerror or err}; "
                       "free space or fix permissions, then export again with overwrite=True.")


def make_dirs(path: str) -> None:
    """Make ``path`` and its parents (an OutputError naming it when that fails)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise _fail(err, path) from err


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` under a temporary name in the same folder, then rename it to ``path``."""
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".packer-export-{os.getpid()}.tmp")
    try:
        if not os.path.isdir(folder):
            os.makedirs(folder, exist_ok=True)
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _fail(err, path) from err
        raise
