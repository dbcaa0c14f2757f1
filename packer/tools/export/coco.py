"""Write a packed detection dataset as a COCO instances file beside its images: ``packer export
DST OUT --as-coco``.

OUT gets ``annotations.json`` and each sample's image at its path (the ``file_name``), so
``packer convert OUT/annotations.json DST`` (its folder being the root) reads it back. Every
sample is an entry of ``images`` (its ``width`` and ``height`` from the image's header) and each
of its boxes an annotation: ``bbox`` as xywh pixels, converted from whatever format and units the
boxes are stored in, ``category_id`` its box label's category. A dataset converted from COCO gives
back what it kept: its image ids, category ids (``extra.coco.category_ids``), ``iscrowd``,
``area`` and ``segmentation`` (polygons or RLE as given), so converting the export gives the same
samples field for field; other datasets get image ids 1..N, categories 1..K named by the box
labels' classes, ``iscrowd`` 0, ``area`` the box's and no segmentation. Annotation ids are 1..M in
order (the dataset does not keep COCO's).

Needs a ``boxes`` field tied to the image and its ``box_labels``. Paths come from data, so each is
checked as a key (:mod:`packer.keys`) before the first file is written; OUT must be absent or
empty (``overwrite``: files of the same names are replaced).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from packer.format.codecs import get_codec
from packer.format.fields.stored import stored_decoder
from packer.format.fields.types.targets import as_xyxy
from packer.format.manifest import Manifest
from packer.format.shardset import ShardSet
from packer.tools.export.files import check_out, make_dirs, write_file
from packer.tools.export.samples import check_paths, detection_fields, each_record

__all__ = ["CocoExport", "export_coco"]

#: The file written beside the images.
ANNOTATIONS_NAME = "annotations.json"


@dataclass(frozen=True)
class CocoExport:
    """What :func:`export_coco` wrote."""

    out: str
    annotations_file: str
    images: int
    annotations: int
    categories: int
    bytes_written: int
    seconds: float


def _xywh_pixels(boxes: np.ndarray, params: dict[str, Any], size: tuple[int, int]) -> np.ndarray:
    """``boxes`` as COCO's xywh pixels."""
    if params["format"] == "xywh" and not params["normalized"]:
        return boxes
    corners = as_xyxy(boxes.astype(np.float64).reshape(-1, 4), params["format"])
    if params["normalized"]:
        corners = corners * np.array([size[0], size[1], size[0], size[1]], dtype=np.float64)
    x1, y1, x2, y2 = corners.T
    return np.stack([x1, y1, x2 - x1, y2 - y1], axis=1)


def _categories(manifest: Manifest, names: list[str]) -> list[dict[str, Any]]:
    """The categories: the COCO file's ids where the dataset came from one, else 1..K."""
    ids = list((manifest.extra.get("coco") or {}).get("category_ids") or [])
    if len(ids) != len(names):
        ids = list(range(1, len(names) + 1))
    return [{"id": int(ident), "name": name} for ident, name in zip(ids, names, strict=True)]


def export_coco(dst: str | os.PathLike[str], out: str | os.PathLike[str], *, overwrite: bool = False,
                progress: bool = False) -> CocoExport:
    """Write the packed dataset ``dst`` as a COCO instances file beside its images under ``out``
    (see the module docstring).

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
        image, boxes, labels, _ = detection_fields(manifest.schema, shards.root, "a COCO file")
        paths = [index.path(i) for i in range(manifest.num_samples)]
        check_paths(shards, paths)
        if ANNOTATIONS_NAME in paths:
            raise ValueError(f"a sample's path is {ANNOTATIONS_NAME!r}, the name of the annotations file")
        check_out(top, shards.root, manifest.source, overwrite=overwrite)
        document, written = _write_images(shards, top, paths, (image, boxes, labels), progress)
    finally:
        shards.close()
    text = json.dumps(document, ensure_ascii=False).encode("utf-8")
    write_file(os.path.join(top, ANNOTATIONS_NAME), text)
    return CocoExport(top, os.path.join(top, ANNOTATIONS_NAME), len(document["images"]),
                      len(document["annotations"]), len(document["categories"]), written + len(text),
                      time.perf_counter() - started)


def _write_images(shards: ShardSet, top: str, paths: list[str], names: tuple[str, str, str],
                  progress: bool) -> tuple[dict[str, Any], int]:
    """Write every image; the COCO document of them all, and the bytes written."""
    schema = shards.manifest.schema
    image, boxes, labels = names
    codec = get_codec(schema[image].params["codec"], schema[image].params["codec_params"])
    params = dict(schema[boxes].params)
    names = list(schema[labels].params.get("classes") or ())
    kept = [name for name in ("iscrowd", "area", "image_id", "segmentation") if name in schema.names()]
    decoder = stored_decoder(schema)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    top_class, written = 0, 0
    make_dirs(top)
    for i, record in each_record(shards, progress=progress):
        values = decoder.decode(record, (image, boxes, labels, *kept), raw=frozenset({image}))
        stored = values[image]
        data = codec.exported_bytes(stored)
        write_file(os.path.join(top, *paths[i].split("/")), data)
        written += len(data)
        described = codec.describe(stored)
        ident = int(values["image_id"]) if "image_id" in values else i + 1
        images.append({"id": ident, "file_name": paths[i], "width": described.width,
                       "height": described.height})
        classes = np.asarray(values[labels]).tolist()
        top_class = max([top_class, *(c + 1 for c in classes)])
        pixels = _xywh_pixels(np.asarray(values[boxes]).reshape(-1, 4), params,
                              (described.width, described.height))
        annotations += _annotations(ident, pixels, classes, values, len(annotations))
    categories = _categories(shards.manifest, names or [str(c) for c in range(top_class)])
    by_label = [c["id"] for c in categories]
    for annotation in annotations:
        annotation["category_id"] = by_label[annotation["category_id"]]
    return {"images": images, "annotations": annotations, "categories": categories}, written


def _annotations(image_id: int, boxes: np.ndarray, classes: list[int], values: dict[str, Any],
                 first: int) -> list[dict[str, Any]]:
    """An image's annotations (``category_id`` still the box label; mapped by the caller)."""
    found = []
    for number, (box, label) in enumerate(zip(boxes, classes, strict=True)):
        x, y, w, h = (float(v) for v in box)
        area = float(np.asarray(values["area"])[number]) if "area" in values else w * h
        crowd = int(np.asarray(values["iscrowd"])[number]) if "iscrowd" in values else 0
        segments = values.get("segmentation")
        polygon = segments[number] if isinstance(segments, list) and number < len(segments) else []
        found.append({"id": first + number + 1, "image_id": image_id, "category_id": int(label),
                      "bbox": [x, y, w, h], "area": area, "iscrowd": crowd, "segmentation": polygon})
    return found
