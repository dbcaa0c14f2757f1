"""Scan an ImageFolder tree with torchvision's exact semantics, without importing torchvision.

Restated from ``torchvision.datasets.folder``:

* classes are the sorted names of the immediate sub-directories of the root (a symlink to a
  directory counts); a class's index is its position in that list;
* a class's samples come from ``sorted(os.walk(class_dir, followlinks=True))`` with the file
  names sorted inside each directory, so images in nested folders belong to the top-level class;
* a file is kept when its lower-cased name ends with one of :data:`IMG_EXTENSIONS`, or, when
  ``is_valid_file`` is given, when that callable says so (it receives the full path);
* a class with no kept file is an error unless ``allow_empty``.

Two departures, both recorded in the manifest and the README: names starting with ``.``
(``.ipynb_checkpoints``, ``._img.jpg``, ``.DS_Store``) are ignored unless ``include_hidden``,
and a directory symlink that points back to one of its own ancestors is not followed, so a loop
is walked once instead of until the path gets too long. Unreadable directories, which
``os.walk`` drops silently, are reported. Nothing here opens an image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Final

from packer.errors import EmptySourceError, SourceNotFoundError
from packer.source.base import ScanReport, SourceIndex, SourceItem

__all__ = [
    "IMG_EXTENSIONS",
    "FolderIndex",
    "ScanReport",
    "SourceItem",
    "find_classes",
    "scan_imagefolder",
    "walk_folder",
]

IMG_EXTENSIONS: Final[tuple[str, ...]] = (
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
)


#: The index a scan gives (the name this module had for it before sources had kinds).
FolderIndex = SourceIndex


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def find_classes(root: str | os.PathLike[str], *, include_hidden: bool = False) -> list[str]:
    """Return the sorted class names of ``root``: its immediate sub-directories.

    Raises:
        SourceNotFoundError: ``root`` does not exist or is not a directory.
        EmptySourceError: ``root`` has no class folder.
    """
    top = os.fspath(root)
    if not os.path.isdir(top):
        what = "does not exist" if not os.path.exists(top) else "is not a directory"
        raise SourceNotFoundError(f"Source {top!r} {what}: give the root of an ImageFolder tree "
                                  "(root/<class>/<image>).")
    with os.scandir(top) as entries:
        classes = sorted(e.name for e in entries
                         if e.is_dir() and (include_hidden or not _is_hidden(e.name)))
    if not classes:
        raise EmptySourceError(f"Couldn't find any class folder in {top!r}: an ImageFolder tree "
                               "needs one sub-directory per class (root/<class>/<image>).")
    return classes


def walk_folder(class_dir: str, *, include_hidden: bool, hidden: list[str],
                loops: list[str], unreadable: list[str]) -> list[tuple[str, list[str]]]:
    """List ``(dirpath, sorted file names)`` under ``class_dir``, in ``sorted(os.walk())`` order,
    hidden names left out (and added to ``hidden``) unless ``include_hidden``, a symlink loop cut
    (added to ``loops``), an unreadable folder added to ``unreadable``."""
    found: list[tuple[str, list[str]]] = []
    start = os.stat(class_dir)

    def visit(path: str, ancestors: frozenset[tuple[int, int]]) -> Iterator[tuple[str, list[str]]]:
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            unreadable.append(path)
            return
        files: list[str] = []
        subdirs: list[str] = []
        for entry in entries:
            if not include_hidden and _is_hidden(entry.name):
                hidden.append(entry.path)
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (subdirs if is_dir else files).append(entry.name)
        yield path, sorted(files)
        for name in sorted(subdirs):
            sub = os.path.join(path, name)
            try:
                st = os.stat(sub)
            except OSError:
                unreadable.append(sub)
                continue
            ident = (st.st_dev, st.st_ino)
            if ident in ancestors:
                loops.append(sub)
                continue
            yield from visit(sub, ancestors | {ident})

    found.extend(visit(class_dir, frozenset({(start.st_dev, start.st_ino)})))
    found.sort(key=lambda entry: entry[0])
    return found


def _relpath(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def _file_identity(path: str) -> tuple[int, int]:
    """Size and modification time (ns) of the file at ``path``; ``(-1, -1)`` if it cannot be stat'ed."""
    try:
        status = os.stat(path)
    except OSError:
        return -1, -1
    return status.st_size, status.st_mtime_ns


def scan_imagefolder(
    root: str | os.PathLike[str],
    *,
    extensions: tuple[str, ...] | None = IMG_EXTENSIONS,
    is_valid_file: Callable[[str], bool] | None = None,
    allow_empty: bool = False,
    include_hidden: bool = False,
) -> FolderIndex:
    """Index ``root/<class>/**/<file>`` in torchvision ImageFolder order, without opening images.

    Exactly one of ``extensions`` and ``is_valid_file`` applies, as in torchvision: a given
    ``is_valid_file`` replaces the extension check and receives each file's full path.

    Raises:
        SourceNotFoundError: ``root`` does not exist or is not a directory.
        EmptySourceError: no class folder, or a class without any kept file and ``allow_empty``
            is off; the message names the classes and the way out.
    """
    top = os.path.abspath(os.fspath(root))
    classes = find_classes(top, include_hidden=include_hidden)
    if is_valid_file is None:
        if not extensions:
            raise ValueError("give either extensions or is_valid_file")
        lowered = tuple(ext.lower() for ext in extensions)

        def keep(path: str) -> bool:
            return path.lower().endswith(lowered)
    else:
        keep = is_valid_file  # type: ignore[assignment]  # same signature, a callable

    hidden: list[str] = []
    loops: list[str] = []
    unreadable: list[str] = []
    items: list[SourceItem] = []
    other_files = 0
    empty: list[str] = []
    for label, name in enumerate(classes):
        class_items = 0
        for dirpath, fnames in walk_folder(os.path.join(top, name), include_hidden=include_hidden,
                                           hidden=hidden, loops=loops, unreadable=unreadable):
            for fname in fnames:
                path = os.path.join(dirpath, fname)
                if keep(path):
                    items.append(SourceItem(_relpath(path, top), label, *_file_identity(path)))
                    class_items += 1
                else:
                    other_files += 1
        if class_items == 0:
            empty.append(name)

    with os.scandir(top) as entries:
        root_entries = list(entries)
    root_files = sum(1 for e in root_entries if not e.is_dir() and not _is_hidden(e.name))
    hidden = [e.path for e in root_entries if _is_hidden(e.name) and not include_hidden] + hidden

    if empty and not allow_empty:
        names = ", ".join(repr(c) for c in empty)
        denied = [c for c in empty if os.path.join(top, c) in unreadable]
        why = (f" (permission denied on {', '.join(repr(c) for c in denied)})" if denied else "")
        accepted = ("any file your is_valid_file accepts" if is_valid_file is not None
                    else "extensions " + " ".join(extensions or ()))
        raise EmptySourceError(
            f"Found no image for the class(es) {names} in {top!r}{why}; looked for {accepted}. "
            "Add images, remove the folder, or allow empty classes (allow_empty=True)."
        )
    report = ScanReport(
        ignored_hidden=tuple(_relpath(p, top) for p in hidden),
        cut_symlink_loops=tuple(_relpath(p, top) for p in loops),
        unreadable_dirs=tuple(_relpath(p, top) for p in unreadable),
        other_files=other_files,
        root_files=root_files,
    )
    return FolderIndex(top, tuple(classes), tuple(items), report, include_hidden)
