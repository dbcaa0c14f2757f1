"""What every export layout does around its own writing: the samples' paths checked as keys
before the first file is written, every record read in dataset order, a batch at a time, under
one progress bar, the detection fields a layout of boxes needs, and a raw mask written as PNG."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

import numpy as np
from PIL import Image

from packer.errors import DatasetError
from packer.format.fields.schema import Schema
from packer.format.fields.stored import first_image_field, tied_field
from packer.format.shardset import ShardSet
from packer.keys import check_key
from packer.progressbar import ProgressBar

__all__ = ["check_paths", "detection_fields", "each_record", "mask_png"]

_BATCH = 256


def check_paths(shards: ShardSet, paths: Iterable[str]) -> None:
    """Each of ``paths`` (where samples will land under OUT) is a safe key.

    Raises:
        UnsafeKeyError: one is not; it and the dataset file holding the paths are named.
    """
    where = shards.store.describe("paths")
    for path in paths:
        check_key(path, source=where, what="sample path")


def each_record(shards: ShardSet, *, progress: bool, unit: str = "img") -> Iterator[tuple[int, bytes]]:
    """``(sample number, record)`` for every sample, in order."""
    count = shards.manifest.num_samples
    with ProgressBar(total=count, unit=unit, desc="exporting", disable=None if progress else True,
                     dynamic_ncols=True) as bar:
        for start in range(0, count, _BATCH):
            chosen = list(range(start, min(start + _BATCH, count)))
            yield from zip(chosen, shards.read_many(chosen), strict=True)
            bar.update(len(chosen))


def mask_png(mask: np.ndarray) -> bytes:
    """A mask's class indices as a lossless PNG (``L``, or ``I;16`` for a 16-bit mask), for a
    mask stored raw (one stored as PNG is written as it is)."""
    out = io.BytesIO()
    Image.fromarray(mask.astype(np.uint16) if mask.dtype == np.uint16 else mask).save(out, "PNG")
    return out.getvalue()


def detection_fields(schema: Schema, root: str, what: str = "a YOLO set") -> tuple[str, str, str, str | None]:
    """The image, boxes, box labels and (a YOLO set's) segments fields; ``what`` the layout
    being written, for the message.

    Raises:
        DatasetError: the samples have no boxes tied to their image, or no labels for them.
    """
    image = first_image_field(schema)
    boxes = tied_field(schema, "boxes", image)
    labels = tied_field(schema, "box_labels", boxes, "boxes")
    if image is None or boxes is None or labels is None:
        raise DatasetError(f"{root!r} has no boxes with box labels on its image (fields: "
                           f"{', '.join(schema.names())}): {what} is boxes and their classes; export "
                           "it with export_webdataset() instead.")
    outlines = tied_field(schema, "polygons", boxes, "boxes")  # a YOLO set's: normalised flat rings
    segments = outlines.name if outlines is not None and outlines.params["normalized"] else next(
        (f.name for f in schema if f.name == "segments" and f.type == "json"), None)  # before polygons
    return image.name, boxes.name, labels.name, segments
