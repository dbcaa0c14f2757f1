"""How a packed dataset's sample paths are laid out, read from what its manifest recorded.

Which checks and exports make sense depends on where the paths came from:

* ``tree``: an ImageFolder tree, or an archive of one (``extra.source.kind`` ``tree`` or
  ``archive``; datasets written before the kind was recorded too): each path is
  ``<class>/<file>``, its class folder naming its label;
* ``list``: a list file (``extra.list``): paths under the list's root, labels from the list;
* ``keys``: every other kind (WebDataset shards, Parquet tables, a plugin's source): each path
  is the sample's key in its source (``000001.jpg``, ``train/00000012.png``) and its label
  comes from the source's data, not from a folder.

The manifest's ``extra`` is free-form JSON, so what is read from it is type-checked here and a
damaged entry is a :class:`~packer.errors.ManifestError` that names the file, never a
``KeyError`` or ``TypeError`` later on.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from packer.errors import ManifestError
from packer.format.manifest import Manifest

__all__ = ["TREE_KINDS", "Layout", "path_layout", "recorded_listing", "source_kind", "source_record"]

Layout = Literal["tree", "list", "keys"]

#: Source kinds whose sample paths are ``<class>/<file>``.
TREE_KINDS: Final = frozenset({"tree", "archive"})

#: The fields of ``extra.list`` that export reads, with their JSON types.
_LIST_FIELDS: Final[dict[str, type | tuple[type, ...]]] = {
    "list": str, "format": str, "root": str, "labels": str, "metadata_columns": list,
    "path_column": (str, type(None)), "label_column": (str, type(None)),
}
_LIST_FORMATS: Final = ("text", "csv", "jsonl")


def _damaged(source: str, what: str) -> ManifestError:
    return ManifestError(f"{source}: {what}; the manifest is damaged: restore the dataset from a "
                         "copy, or convert it again with overwrite=True.")


def source_kind(manifest: Manifest, source: str) -> str | None:
    """The source kind the conversion recorded (``extra.source.kind``), or ``None`` when the
    dataset predates that record.

    Args:
        manifest: The dataset's manifest.
        source: The manifest's file (or URL), named in errors.

    Raises:
        ManifestError: ``extra.source`` is not an object, or its ``kind`` is not a string.
    """
    recorded = manifest.extra.get("source")
    if recorded is None:
        return None
    if not isinstance(recorded, dict):
        raise _damaged(source, f"extra.source should be an object, not {type(recorded).__name__}")
    kind = recorded.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise _damaged(source, f"extra.source.kind should be a string, not {type(kind).__name__}")
    return kind


def source_record(manifest: Manifest, source: str) -> tuple[str | None, dict[str, Any], list[str]]:
    """``extra.source``'s kind, params and report notes (what ``info`` shows), each type-checked.

    Raises:
        ManifestError: as :func:`source_kind`, or params that are no object, notes no strings.
    """
    kind = source_kind(manifest, source)
    recorded = manifest.extra.get("source") or {}
    params = recorded.get("params") or {}
    report = recorded.get("report") or {}
    notes = report.get("notes") or [] if isinstance(report, dict) else None
    if not isinstance(params, dict):
        raise _damaged(source, f"extra.source.params should be an object, not {type(params).__name__}")
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise _damaged(source, "extra.source.report.notes should be a list of sentences")
    return kind, dict(params), list(notes)


def recorded_listing(manifest: Manifest, source: str) -> dict[str, Any] | None:
    """``extra.list`` (what a list-file dataset recorded of its list), its fields type-checked;
    ``None`` for a dataset of another kind.

    Raises:
        ManifestError: ``extra.list`` is not an object, or lacks a field or has one of the
            wrong type (see :data:`_LIST_FIELDS`), or names an unknown list format.
    """
    listing = manifest.extra.get("list")
    if listing is None:
        return None
    if not isinstance(listing, dict):
        raise _damaged(source, f"extra.list should be an object, not {type(listing).__name__}")
    for name, kind in _LIST_FIELDS.items():
        if not isinstance(listing.get(name), kind):
            found = type(listing[name]).__name__ if name in listing else "missing"
            raise _damaged(source, f"extra.list.{name} is {found}, not the list's {name}")
    if listing["format"] not in _LIST_FORMATS:
        raise _damaged(source, f"extra.list.format is {listing['format']!r}, not one of {_LIST_FORMATS}")
    if listing["format"] != "text" and not (isinstance(listing["path_column"], str)
                                            and isinstance(listing["label_column"], str)):
        raise _damaged(source, f"extra.list names no path or label column of its {listing['format']} list")
    if not all(isinstance(column, str) for column in listing["metadata_columns"]):
        raise _damaged(source, "extra.list.metadata_columns should be a list of column names")
    return listing


def path_layout(manifest: Manifest, source: str) -> Layout:
    """How the sample paths of ``manifest``'s dataset are laid out (see the module docstring).

    Raises:
        ManifestError: ``extra.source`` or ``extra.list`` is damaged, or they disagree (a
            ``list`` kind without its list, or a list recorded for another kind).
    """
    kind = source_kind(manifest, source)
    listing = recorded_listing(manifest, source)
    if kind == "list" or (kind is None and listing is not None):
        if listing is None:
            raise _damaged(source, "the source is a list file, but extra.list is missing")
        return "list"
    if listing is not None:
        raise _damaged(source, f"extra.list is recorded for a source of kind {kind!r}, not a list file")
    return "tree" if kind is None or kind in TREE_KINDS else "keys"
