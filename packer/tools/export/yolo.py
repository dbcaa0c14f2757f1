"""Write a packed detection dataset as a YOLO set: ``packer export DST OUT --as-yolo``.

OUT gets ``images/`` and ``labels/`` side by side, as Ultralytics reads them, and ``data.yaml``
naming the box classes: each sample's image at ``images/<path>`` (a dataset converted from a YOLO
set keeps its ``images/<split>/`` paths, so its splits come back) and, unless it has no boxes
(a background image), ``labels/<path without suffix>.txt`` with a line per box, ``class cx cy w
h`` normalised to [0, 1] (its boxes converted from whatever format and units they are stored
in, the image's size read from its header). A YOLO dataset's ``segments`` field writes a segment
line, ``class x1 y1 ...``, where a box came from one. Numbers are written so that float32 boxes
read back bit for bit: converting the export with ``source_format="yolo"`` gives the same boxes,
classes and segments.

Needs a ``boxes`` field tied to the image and its ``box_labels``. Paths come from data, so each is
checked as a key (:mod:`packer.keys`) before the first file is written; OUT must be absent or
empty (``overwrite``: files of the same names are replaced).
"""

from __future__ import annotations

import json
import os
import posixpath
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from packer.format.codecs import get_codec
from packer.format.fields.stored import stored_decoder
from packer.format.fields.types.targets import as_xyxy
from packer.format.shardset import ShardSet
from packer.tools.export.files import check_out, make_dirs, write_file
from packer.tools.export.samples import check_paths, detection_fields, each_record

__all__ = ["YoloExport", "export_yolo"]



@dataclass(frozen=True)
class YoloExport:
    """What :func:`export_yolo` wrote."""

    out: str
    written: int  # images
    label_files: int  # images with at least one box
    boxes: int
    classes: tuple[str, ...]
    bytes_written: int
    seconds: float


def _number(value: float) -> str:
    """``value`` as the shortest text that reads back as the same float32."""
    return np.format_float_positional(np.float32(value), unique=True, trim="-")


def _label_text(boxes: np.ndarray, classes: np.ndarray, segments: list[Any] | None) -> str:
    """The label file of one image (normalised cxcywh boxes)."""
    lines = []
    for number, (box, label) in enumerate(zip(boxes, classes, strict=True)):
        polygon = segments[number] if segments is not None and number < len(segments) else None
        coordinates = polygon if polygon else box
        lines.append(" ".join([str(int(label)), *(_number(v) if not polygon else repr(float(v))
                                                  for v in coordinates)]))
    return "".join(line + "\n" for line in lines)


def _normalised(boxes: np.ndarray, params: dict[str, Any], size: tuple[int, int]) -> np.ndarray:
    """``boxes`` as cxcywh normalised to the image's ``size``."""
    if params["format"] == "cxcywh" and params["normalized"]:
        return boxes
    corners = as_xyxy(boxes.astype(np.float64).reshape(-1, 4), params["format"])
    if not params["normalized"]:
        corners = corners / np.array([size[0], size[1], size[0], size[1]], dtype=np.float64)
    x1, y1, x2, y2 = corners.T
    return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=1)


def _image_path(relpath: str) -> str:
    """Where a sample's image goes under OUT: its path, under ``images/`` (once)."""
    return relpath if relpath.startswith("images/") else f"images/{relpath}"


def _yaml(names: list[str]) -> str:
    """``data.yaml``: the set's folders and class names (JSON strings are YAML's double-quoted)."""
    listed = "".join(f"  {i}: {json.dumps(name, ensure_ascii=False)}\n" for i, name in enumerate(names))
    return f"path: .\ntrain: images\nval: images\nnames:\n{listed}"


def export_yolo(dst: str | os.PathLike[str], out: str | os.PathLike[str], *, overwrite: bool = False,
                progress: bool = False) -> YoloExport:
    """Write the packed dataset ``dst`` as a YOLO set under ``out`` (see the module docstring).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: ``dst`` is not
            a complete, intact packer dataset.
        DatasetError: its samples have no boxes with box labels.
        UnsafeKeyError: a sample path that makes no safe key; nothing was written.
        OutputExistsError, OutputError: ``out`` is not empty (without ``overwrite``), not allowed
            or cannot be written.
    """
    started = time.perf_counter()
    top = os.path.abspath(os.fspath(out))
    shards = ShardSet(dst)
    try:
        manifest, index = shards.manifest, shards.index
        image, boxes, labels, segments = detection_fields(manifest.schema, shards.root)
        paths = [_image_path(index.path(i)) for i in range(manifest.num_samples)]
        check_paths(shards, paths)
        check_out(top, shards.root, manifest.source, overwrite=overwrite)
        names = list(manifest.schema[labels].params.get("classes") or ())
        counts = _write_samples(shards, top, paths, (image, boxes, labels, segments), progress)
        data = _yaml(names or [str(i) for i in range(counts[2])]).encode("utf-8")
        write_file(os.path.join(top, "data.yaml"), data)
    finally:
        shards.close()
    return YoloExport(top, manifest.num_samples, counts[0], counts[1], tuple(names), counts[3] + len(data),
                      time.perf_counter() - started)


def _write_samples(shards: ShardSet, top: str, paths: list[str], names: tuple[str, str, str, str | None],
                   progress: bool) -> tuple[int, int, int, int]:
    """Write every image and label file; label files, boxes, classes seen (one past the
    largest) and bytes written."""
    image, boxes, labels, segments = names
    schema = shards.manifest.schema
    field = schema[image]
    codec = get_codec(field.params["codec"], field.params["codec_params"])
    params = dict(schema[boxes].params)
    decoder = stored_decoder(schema)
    wanted = (image, *(n for n in (boxes, labels, segments) if n))
    make_dirs(top)
    label_files = box_count = top_class = written = 0
    for i, record in each_record(shards, progress=progress):
        values = decoder.decode(record, wanted, raw=frozenset({image}))
        stored = values[image]
        data = codec.exported_bytes(stored)
        write_file(os.path.join(top, *paths[i].split("/")), data)
        written += len(data)
        found = np.asarray(values[boxes]).reshape(-1, 4)
        if not len(found):
            continue
        described = codec.describe(stored)
        text = _label_text(_normalised(found, params, (described.width, described.height)),
                           np.asarray(values[labels]), values.get(segments) if segments else None)
        label_path = "labels/" + posixpath.splitext(paths[i][len("images/"):])[0] + ".txt"
        write_file(os.path.join(top, *label_path.split("/")), text.encode("utf-8"))
        label_files, box_count = label_files + 1, box_count + len(found)
        top_class = max(top_class, int(np.max(values[labels])) + 1)
        written += len(text)
    return label_files, box_count, top_class, written
