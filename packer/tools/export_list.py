"""``packer export --as-list``: a list-file dataset back in its list form.

The files go under OUT at their listed paths (renamed as the codec exports them), and the list
goes next to them, in the format the dataset was converted from and under the same name: the
same columns, the labels as they were given (class names, or numbers), every other column kept.
Converting OUT's list again gives the same samples in the same order.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["list_text"]


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
