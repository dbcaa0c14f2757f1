"""Parquet image tables for the tests, written from generated trees (no binary fixtures).

:func:`tree_rows` lists a tree's images in ImageFolder order; :func:`write_table` writes rows as
the Hugging Face hub ships them: an ``image`` column of structs ``{bytes, path}``, an int64
``label`` column and the ``datasets`` features under the schema metadata key ``huggingface``.
Variants: a plain binary image column, string labels, no or old-style metadata, several row
groups; :func:`write_tables` splits rows into several files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from packer.source.imagefolder import scan_imagefolder

IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


@dataclass(frozen=True)
class Row:
    """One row: the image (``data`` None: a null image), its path and its label."""

    path: str | None
    data: bytes | None
    label: int | str | None
    extra: Mapping[str, Any] = field(default_factory=dict)


def tree_rows(root: str | os.PathLike[str]) -> tuple[tuple[str, ...], list[Row]]:
    """The classes of the tree at ``root`` and its images as rows, in ImageFolder order (each
    row's path is the image's path in the tree, its label the class number)."""
    index = scan_imagefolder(root)
    rows = [Row(item.relpath, Path(root, *item.relpath.split("/")).read_bytes(), item.label)
            for item in index.items]
    return index.classes, rows


def features(classes: Sequence[str] | None, *, image: str = "image", label: str = "label") -> dict[str, Any]:
    """The ``datasets`` features of a table: an Image column and, given names, a ClassLabel."""
    found: dict[str, Any] = {image: {"_type": "Image"}}
    found[label] = ({"names": list(classes), "_type": "ClassLabel"} if classes is not None
                    else {"dtype": "int64", "_type": "Value"})
    return found


def table(rows: Sequence[Row], *, classes: Sequence[str] | None = None, binary: bool = False,
          string_labels: bool = False, metadata: str | None = "info", image: str = "image",
          label: str = "label") -> pa.Table:
    """``rows`` as a table (see the module docstring).

    Args:
        classes: The ClassLabel names recorded in the metadata (None: none recorded).
        binary: A plain binary image column instead of ``{bytes, path}`` structs.
        string_labels: The labels are class names (a string column); the rows hold names.
        metadata: ``"info"`` (today's ``datasets``: ``{"info": {"features": ...}}``), ``"top"``
            (features at the top level, as older versions wrote) or None (no metadata).
    """
    if binary:
        images = pa.array([r.data for r in rows], pa.binary())
    else:
        images = pa.array([None if r.data is None and r.path is None else {"bytes": r.data, "path": r.path}
                           for r in rows], IMAGE_TYPE)
    labels = pa.array([r.label for r in rows], pa.string() if string_labels else pa.int64())
    columns: dict[str, pa.Array] = {image: images, label: labels}
    for name in dict.fromkeys(k for r in rows for k in r.extra):
        columns[name] = pa.array([r.extra.get(name) for r in rows])
    result = pa.table(columns)
    if metadata is not None:
        found = features(classes, image=image, label=label)
        if string_labels:
            found[label] = {"dtype": "string", "_type": "Value"}
        meta = {"info": {"features": found}} if metadata == "info" else {"features": found}
        result = result.replace_schema_metadata({"huggingface": json.dumps(meta)})
    return result


def write_table(path: str | os.PathLike[str], rows: Sequence[Row], *, row_group_size: int | None = None,
                **options: Any) -> Path:
    """Write ``rows`` to the Parquet file ``path`` (``options``: those of :func:`table`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table(rows, **options), target, row_group_size=row_group_size)
    return target


def write_tables(folder: str | os.PathLike[str], rows: Sequence[Row], *, files: int, stem: str = "train",
                 **options: Any) -> list[Path]:
    """Write ``rows`` in order into ``files`` files ``<stem>-0000i-of-0000n.parquet`` in ``folder``."""
    per_file = -(-len(rows) // files)
    return [write_table(Path(folder) / f"{stem}-{i:05d}-of-{files:05d}.parquet",
                        rows[i * per_file:(i + 1) * per_file], **options)
            for i in range(files)]
