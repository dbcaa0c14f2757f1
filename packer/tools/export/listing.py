"""``packer export --as-list``: a dataset back in list form, its files beside their list.

A list-file dataset: the files go under OUT at their listed paths (renamed as the codec exports
them), and the list goes next to them, in the format the dataset was converted from and under
the same name: the same columns, the labels as they were given (class names, or numbers), every
other column kept. Converting OUT's list again gives the same samples in the same order.

A keyed dataset (WebDataset shards, Parquet tables: :mod:`packer.tools.layout`): the files go
under OUT at their keys, with ``labels.jsonl`` (one ``{"path", "label", ...}`` object per
sample: the label as its class index, then the sample's metadata, the ``json`` and ``txt``
members or the other columns) and ``classes.txt`` (the class names, one a line, line ``i``
naming class ``i``) beside them. ``packer convert OUT/labels.jsonl DST --classes
OUT/classes.txt`` gives the same samples, labels, classes and metadata in the same order.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from typing import Any

from packer.source.listfile import LABEL_COLUMNS, PATH_COLUMNS

__all__ = ["CLASSES_NAME", "KEYED_LIST_NAME", "keyed_listing", "list_text"]

#: The names of the list and the class names a keyed dataset's ``--as-list`` export writes.
KEYED_LIST_NAME = "labels.jsonl"
CLASSES_NAME = "classes.txt"


def keyed_listing(metadata_columns: Sequence[str]) -> dict[str, Any]:
    """What :func:`list_text` needs to write a keyed dataset's list (JSON Lines, labels as
    class indices): the path and label columns are the first names that no metadata column
    takes, so that no column of the samples is lost."""
    taken = set(metadata_columns)
    path_column = next((c for c in PATH_COLUMNS if c not in taken), "packer_path")
    label_column = next((c for c in LABEL_COLUMNS if c not in taken), "packer_label")
    return {"list": KEYED_LIST_NAME, "format": "jsonl", "path_column": path_column,
            "label_column": label_column, "labels": "numbers", "metadata_columns": list(metadata_columns)}


def list_text(listing: dict[str, Any], names: Sequence[str], labels: Sequence[Any],
              metadata: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """``(file name, text)`` of the list of the exported files ``names`` with ``labels``."""
    name = os.path.basename(str(listing["list"]))
    fmt = listing["format"]
    if fmt == "text":
        return name, "".join(f"{path} {label}\n" for path, label in zip(names, labels, strict=True))
    path_key, label_key = listing["path_column"], listing["label_column"]
    rows = [{path_key: path, label_key: label, **other}
            for path, label, other in zip(names, labels, metadata, strict=True)]
    if fmt == "jsonl":
        return name, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[path_key, label_key, *listing["metadata_columns"]],
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return name, buffer.getvalue()
