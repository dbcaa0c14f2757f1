"""Which kind of source SRC is: the registry of kinds and their detection.

Detection looks at the path alone (a stat, a suffix, for a ``.tar`` its first members), in this
order: a brace pattern or glob of ``.tar`` shards is WebDataset, of ``.parquet`` files Parquet;
a ``.parquet`` file, or a folder holding only ``.parquet`` files, is Parquet; a ``.tar`` whose
members are grouped by key (``key.jpg``, ``key.cls``) is a WebDataset shard, and a folder holding
only ``.tar`` shards a WebDataset set; any other ``.tar``, ``.tar.gz``, ``.tgz`` or ``.zip`` is an
archive of a tree (or of per-class archives); a ``.json`` file that starts as one JSON object
naming ``images``, ``annotations`` or ``categories`` (its first MiB peeked at, nothing parsed) is a
COCO instances file; any other file is a list file; a folder laid out as Pascal VOC
(``JPEGImages/`` + ``SegmentationClass/``) or Cityscapes (``leftImg8bit/`` + ``gtFine/``), or a
folder inside such images' folder, is a segmentation set (``masks``); a folder with ``images/``
beside ``labels/`` and a YAML file (Ultralytics' ``data.yaml``), or inside such ``images/``, is a
YOLO set (``yolo``); any other folder is an ImageFolder tree. ``format=``
(``--source-format``) names the kind where detection could guess wrong.
"""

from __future__ import annotations

import glob
import os
from typing import Final

from packer.errors import SourceError, SourceNotFoundError
from packer.registry import Lazy, Registry
from packer.source.base import Source, SourceOptions
from packer.source.braces import expand_braces
from packer.store.urls import is_url

__all__ = ["ARCHIVE_SUFFIXES", "SOURCES", "detect_kind", "expand_pattern", "open_source", "register_source",
           "source_names"]

#: Every kind of source, by the name ``--source-format`` takes.
SOURCES: Registry[type[Source]] = Registry("source format", entry_points="packer.sources", builtins={
    "tree": "packer.source.tree:TreeSource",
    "list": "packer.source.listfile:ListFileSource",
    "archive": "packer.source.archive.source:ArchiveSource",
    "webdataset": "packer.source.webdataset.source:WebDatasetSource",
    "parquet": Lazy("packer.source.parquet.source:ParquetSource", "parquet"),
    "coco": "packer.source.coco.source:CocoSource",
    "masks": "packer.source.masks.source:MaskPairsSource",
    "yolo": "packer.source.yolo.source:YoloSource",
}, hint="Name one with source_format=, or leave it out to detect it.")



def source_names() -> tuple[str, ...]:
    """Every kind of source, built-ins first (the choices of ``SourceOptions.format``)."""
    return SOURCES.names(sort=False)


def register_source(name: str, source: type[Source], *, replace: bool = False) -> None:
    """Add a kind of source under ``name`` (a plugin; see the contract in :mod:`packer.testing`).

    Registered kinds are chosen by name (``SourceOptions(format=name)``); detection only knows
    the built-in kinds.

    Raises:
        ValueError: the name is taken and ``replace`` is off.
    """
    SOURCES.register(name, source, replace=replace)


#: File names an archive of a tree may have.
ARCHIVE_SUFFIXES: Final = (".tar", ".tar.gz", ".tgz", ".zip")


def expand_pattern(pattern: str) -> list[str]:
    """The paths a brace pattern (``train-{000000..000146}.tar``, ``{train,val}-{0..9}.tar``:
    :mod:`packer.source.braces`) or a glob (``*.parquet``) names, in order (each brace name
    that is a glob, its matches sorted); ``[pattern]`` for a plain path.

    Raises:
        SourceError: unbalanced braces, or a pattern naming too many files.
        UnsafeKeyError: braces that name a file outside the pattern's folder.
    """
    if "{" not in pattern:
        return sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    return [path for name in expand_braces(pattern)
            for path in (sorted(glob.glob(name)) if glob.has_magic(name) else [name])]


def _is_pattern(location: str) -> bool:
    return "{" in location or glob.has_magic(location)


def _only_files_ending(folder: str, suffix: str, besides: tuple[str, ...] = ()) -> bool:
    """Whether ``folder`` holds files ending in ``suffix`` and nothing else (but ``besides``)."""
    with os.scandir(folder) as entries:
        names = [e.name for e in entries if not e.name.startswith(".") and e.name not in besides]
    return bool(names) and all(n.endswith(suffix) and os.path.isfile(os.path.join(folder, n))
                               for n in names)


def detect_kind(location: str) -> str:
    """The kind of source at ``location`` (see the module docstring).

    Raises:
        SourceNotFoundError: nothing is there (a pattern that names no file).
    """
    lowered = location.lower()
    if _is_pattern(location) and not os.path.exists(location):
        paths = expand_pattern(location)
        missing = [p for p in paths if not os.path.isfile(p)]
        if not paths or missing:
            what = f"names {missing[0]!r}, which does not exist" if missing else "matches no file"
            raise SourceNotFoundError(f"Source pattern {location!r} {what}: check the pattern "
                                      "(brace ranges such as train-{000000..000146}.tar, or a glob).")
        return "parquet" if lowered.endswith(".parquet") else "webdataset"
    if os.path.isdir(location):
        if _mask_tree(location):
            return "masks"
        if _yolo_set(location):
            return "yolo"
        if _only_files_ending(location, ".parquet"):
            return "parquet"
        if _only_files_ending(location, ".tar", besides=("classes.txt",)) and _webdataset_shard(
                min(os.path.join(location, n) for n in os.listdir(location) if n.endswith(".tar")
                    and not n.startswith("."))):
            return "webdataset"
        return "tree"
    if os.path.isfile(location):
        if lowered.endswith(".parquet"):
            return "parquet"
        if lowered.endswith(".tar") and _webdataset_shard(location):
            return "webdataset"
        if lowered.endswith(ARCHIVE_SUFFIXES):
            return "archive"
        if lowered.endswith(".json") and _coco_file(location):
            return "coco"
        return "list"
    what = "is not a file or folder" if os.path.lexists(location) else "does not exist"
    raise SourceNotFoundError(f"Source {location!r} {what}: give an ImageFolder tree (root/<class>/<image>), "
                              "a list file, an archive, WebDataset shards, Parquet files or a COCO file.")


def _webdataset_shard(path: str) -> bool:
    """Whether the tar at ``path`` holds WebDataset samples (members grouped by key)."""
    if "webdataset" not in SOURCES:
        return False
    return bool(SOURCES.get("webdataset").looks_like_shard(path))  # type: ignore[attr-defined]


def _coco_file(path: str) -> bool:
    """Whether the ``.json`` file at ``path`` starts as a COCO instances file (a peek)."""
    if "coco" not in SOURCES:
        return False
    return bool(SOURCES.get("coco").looks_like_coco(path))  # type: ignore[attr-defined]


def _mask_tree(path: str) -> bool:
    """Whether the folder at ``path`` is laid out as Pascal VOC or Cityscapes (a few stats)."""
    if "masks" not in SOURCES:
        return False
    return bool(SOURCES.get("masks").looks_like_mask_tree(path))  # type: ignore[attr-defined]


def _yolo_set(path: str) -> bool:
    """Whether the folder at ``path`` is a YOLO set (images/ beside labels/, and a YAML file)."""
    if "yolo" not in SOURCES:
        return False
    return bool(SOURCES.get("yolo").looks_like_yolo(path))  # type: ignore[attr-defined]


def open_source(location: str | os.PathLike[str], options: SourceOptions | None = None) -> Source:
    """The source at ``location``, of the kind ``options.format`` names or detection finds.

    Raises:
        SourceNotFoundError: nothing is there.
        UnknownNameError: ``options.format`` is not a registered kind.
        MissingExtraError: the kind needs an optional dependency (``pip install ...[parquet]``).
        SourceError: an option the kind does not take.
    """
    options = options or SourceOptions()
    if is_url(location):
        return _open_url(os.fspath(location), options)
    path = os.path.abspath(os.fspath(location))  # a pattern too: ``update`` may run elsewhere
    kind = options.format or detect_kind(path)
    if options.format is None and kind == "tree" and not os.path.isdir(path):
        raise SourceNotFoundError(f"Source {path!r} does not exist.")
    return SOURCES.get(kind)(path, options)


def _open_url(url: str, options: SourceOptions) -> Source:
    """An archive behind a URL, read by byte ranges (:mod:`packer.source.archive.files`): the one
    kind of source that may be a URL for now."""
    kind = options.format or ("archive" if url.lower().endswith(ARCHIVE_SUFFIXES) else None)
    if kind != "archive":
        raise SourceError(f"Source {url!r} is a URL: a source read from object storage must be a tar, "
                          ".tar.gz (.tgz) or zip archive (name ending .tar, .tar.gz, .tgz or .zip). "
                          "Mount or download other kinds of source, and convert the local copy.")
    from packer.source.archive.files import archive_exists

    if not archive_exists(url):
        raise SourceNotFoundError(f"Source {url!r} does not exist: check the bucket and the key.")
    return SOURCES.get(kind)(url, options)
