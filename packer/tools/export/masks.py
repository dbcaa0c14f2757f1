"""Write a packed segmentation dataset as an image tree beside a mask tree: ``packer export DST
OUT --as-masks``.

A dataset converted from a segmentation set comes back in its own layout
(:mod:`packer.source.masks.layouts`: VOC's ``JPEGImages/`` and ``SegmentationClass/``,
Cityscapes' ``leftImg8bit/`` and ``gtFine/..._gtFine_labelIds.png``, ADE20K's, or ``images/`` and
``masks/``), each image at its path and its mask where that layout puts it; any other dataset
with a mask field is written as ``images/<path>`` beside ``masks/<path stem>.png``. Masks are
lossless PNGs of the class indices (``L``, or ``I;16`` for 16-bit masks; a VOC palette's colours
are not kept, its indices are). The mask's class names, when it has them, go to ``classes.txt``
(line ``i`` names value ``i``). Converting the export (``source_format="masks"``, with
``classes_file=`` that file) gives the same images and masks.

Paths come from data, so each is checked as a key (:mod:`packer.keys`) before the first file is
written; OUT must be absent or empty (``overwrite``: files of the same names are replaced).
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass

import numpy as np

from packer.errors import DatasetError
from packer.format.codecs import get_codec
from packer.format.fields.schema import Field, Schema
from packer.format.fields.stored import first_image_field, stored_decoder, tied_field
from packer.format.manifest import Manifest
from packer.format.shardset import ShardSet
from packer.source.masks.layouts import LAYOUTS
from packer.source.pairs import Layout
from packer.tools.export.files import check_out, make_dirs, write_file
from packer.tools.export.samples import check_paths, each_record, mask_png

__all__ = ["MaskExport", "export_masks"]

_PAIRS: Layout = next(layout for layout in LAYOUTS if layout.name == "pairs")


@dataclass(frozen=True)
class MaskExport:
    """What :func:`export_masks` wrote."""

    out: str
    written: int  # image and mask pairs
    layout: str  # the layout's name (voc, cityscapes, ade20k, pairs)
    classes_file: str | None  # classes.txt, when the masks' classes are named
    bytes_written: int
    seconds: float


def _fields(schema: Schema, root: str) -> tuple[Field, Field]:
    """The image field and the mask tied to it.

    Raises:
        DatasetError: the samples have no mask on their image.
    """
    image = first_image_field(schema)
    mask = tied_field(schema, "mask", image)
    if image is None or mask is None:
        raise DatasetError(f"{root!r} has no mask on its image (fields: {', '.join(schema.names())}): a mask "
                           "tree is images and their masks; export it with export_webdataset() instead.")
    return image, mask


def _layout(manifest: Manifest) -> Layout:
    """The layout the dataset came from (a segmentation set's), else ``pairs``."""
    name = (manifest.extra.get("masks") or {}).get("layout")
    return next((layout for layout in LAYOUTS if layout.name == name), _PAIRS)


def _pair_paths(relpath: str, layout: Layout, suffix: str | None) -> tuple[str, str]:
    """Where a sample's image and mask go under OUT, in ``layout`` (``suffix``: the image codec's
    export suffix, None to keep the path's)."""
    image = relpath if relpath.startswith(layout.images + "/") else f"{layout.images}/{relpath}"
    stem, own = posixpath.splitext(image)
    if suffix is not None and own.lower() != suffix:
        image = stem + suffix
    inner = posixpath.splitext(image[len(layout.images) + 1:])[0]
    if layout.image_suffix and inner.endswith(layout.image_suffix):
        inner = inner[:-len(layout.image_suffix)]
    return image, f"{layout.others}/{inner}{layout.other_suffix}"


def export_masks(dst: str | os.PathLike[str], out: str | os.PathLike[str], *, overwrite: bool = False,
                 progress: bool = False) -> MaskExport:
    """Write the packed dataset ``dst`` as an image tree beside a mask tree under ``out`` (see the
    module docstring).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: ``dst`` is not
            a complete, intact packer dataset.
        DatasetError: its samples have no mask on their image.
        UnsafeKeyError: a sample path that makes no safe key; nothing was written.
        OutputExistsError, OutputError: ``out`` is not empty (without ``overwrite``), not allowed
            or cannot be written.
    """
    started = time.perf_counter()
    top = os.path.abspath(os.fspath(out))
    shards = ShardSet(dst)
    try:
        manifest, index = shards.manifest, shards.index
        image, mask = _fields(manifest.schema, shards.root)
        layout = _layout(manifest)
        suffix = get_codec(image.params["codec"], image.params["codec_params"]).export_format().suffix
        pairs = [_pair_paths(index.path(i), layout, suffix) for i in range(manifest.num_samples)]
        check_paths(shards, (path for pair in pairs for path in pair))
        check_out(top, shards.root, manifest.source, overwrite=overwrite)
        written = _write_pairs(shards, top, pairs, image, mask, progress)
        names = list(mask.params.get("classes") or ())
        classes = os.path.join(top, "classes.txt") if names else None
        if classes is not None:
            text = "".join(f"{name}\n" for name in names).encode("utf-8", "surrogateescape")
            write_file(classes, text)
            written += len(text)
    finally:
        shards.close()
    return MaskExport(top, manifest.num_samples, layout.name, classes, written, time.perf_counter() - started)


def _write_pairs(shards: ShardSet, top: str, pairs: list[tuple[str, str]], image: Field, mask: Field,
                 progress: bool) -> int:
    """Write every image and its mask; the bytes written."""
    codec = get_codec(image.params["codec"], image.params["codec_params"])
    decoder = stored_decoder(shards.manifest.schema)
    stored_png = mask.params["encoding"] == "png"  # the record holds the PNG already: written as is
    raw = frozenset({image.name, mask.name} if stored_png else {image.name})
    make_dirs(top)
    written = 0
    for i, record in each_record(shards, progress=progress):
        values = decoder.decode(record, (image.name, mask.name), raw=raw)
        mask_file = values[mask.name] if stored_png else mask_png(np.asarray(values[mask.name]))
        for path, data in zip(pairs[i], (codec.exported_bytes(values[image.name]), mask_file), strict=True):
            write_file(os.path.join(top, *path.split("/")), data)
            written += len(data)
    return written
