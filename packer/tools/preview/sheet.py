"""Contact sheets of a packed dataset: see at a glance that labels and images match.

A sheet has one row per class, in dataset order: a header with the class name, index and
sample count, then up to ``per_class`` thumbnails of that class, each captioned
``class · #index``. Which samples: a seeded random-looking choice per class that depends only
on ``seed`` and the sample indices (see :func:`packer.tools.selection.pick_samples`: the same on every
machine, whatever other classes are selected; a larger ``per_class`` adds samples), shown in
index order. Images are decoded through the dataset's codec, exactly as ``ds[i]`` returns them
(no EXIF rotation or anything else the dataset does not do), then scaled to fit a
``thumb`` x ``thumb`` cell with their aspect ratio kept (small images are enlarged, pixelated
on purpose) and letterboxed on grey. A sample that does not decode gets a pink cell saying so,
and is listed in :attr:`ContactSheet.failed`; run ``packer verify DST --deep``.

In a dataset with fields, each thumbnail shows the boxes (with their labels) and the mask tied
to its image (:mod:`packer.tools.preview.overlay`; ``overlays=False`` leaves them out).

The sheet is a PNG, or (``html=True``) one self-contained HTML page: the same grid, each
thumbnail an inline JPEG, with the dataset summary (see :mod:`packer.tools.preview.html`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from PIL import Image

from packer.format.codecs import get_codec
from packer.format.fields.stored import image_payload
from packer.format.manifest import Manifest
from packer.format.shardset import ShardSet
from packer.store.durable import write_named_file
from packer.tools.preview.draw import PAD, Layout, Painter, Pen, SheetCell, SheetRow
from packer.tools.preview.html import render_html
from packer.tools.preview.overlay import OverlayReader
from packer.tools.selection import class_members, pick_samples, select_classes

__all__ = ["MAX_SHEET_PIXELS", "PAD", "ContactSheet", "SheetCell", "SheetRow", "make_contact_sheet",
           "write_contact_sheet"]

#: The largest sheet drawn: Pillow's own decompression-bomb limit, so any viewer opens it.
MAX_SHEET_PIXELS: Final = 89_478_485
_THUMB_RANGE: Final = (16, 1024)


@dataclass(frozen=True)
class ContactSheet:
    """A drawn contact sheet: the image, its rows and cells, and the dataset it shows."""

    image: Image.Image
    rows: tuple[SheetRow, ...]
    thumb: int
    seed: int
    root: str
    manifest: Manifest = field(repr=False)

    @property
    def cells(self) -> tuple[SheetCell, ...]:
        """Every thumbnail cell, row by row."""
        return tuple(cell for row in self.rows for cell in row.cells)

    @property
    def failed(self) -> tuple[SheetCell, ...]:
        """Cells whose sample could not be decoded."""
        return tuple(cell for cell in self.cells if cell.error is not None)

    def png_bytes(self) -> bytes:
        """The sheet as PNG bytes (the same for the same dataset, options and Pillow)."""
        buffer = io.BytesIO()
        self.image.save(buffer, "PNG", optimize=False)
        return buffer.getvalue()

    def html(self) -> str:
        """One self-contained HTML page: the dataset summary and the same grid."""
        return render_html(self)


def _check_options(per_class: int, thumb: int, seed: int) -> None:
    if per_class < 1:
        raise ValueError(f"per_class must be at least 1, not {per_class}")
    if not _THUMB_RANGE[0] <= thumb <= _THUMB_RANGE[1]:
        raise ValueError(f"thumb must be {_THUMB_RANGE[0]} to {_THUMB_RANGE[1]} pixels, not {thumb}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be from 0 to 2**64 - 1, not {seed}")


def _check_size(layout: Layout, rows: int) -> None:
    width, height = layout.size(rows)
    if width * height > MAX_SHEET_PIXELS:
        raise ValueError(
            f"a sheet of {rows} classes x {layout.columns} thumbnails of {layout.thumb} px would be "
            f"{width}x{height} pixels, over the {MAX_SHEET_PIXELS:,} a viewer opens: select fewer "
            "classes (classes=), fewer samples per class (per_class=) or smaller thumbnails "
            "(thumb=)")


#: The one row of a dataset whose samples have no class label.
NO_CLASS_ROW: Final = "all samples"


def _rows_of(manifest: Manifest, targets: Any) -> tuple[tuple[str, ...], Any]:
    """The rows' names and each sample's row: its class, or one row when there are no classes."""
    if manifest.schema.label_field() is not None:
        return manifest.classes, targets
    return (NO_CLASS_ROW,), np.zeros(manifest.num_samples, dtype=np.int64)


def _images(manifest: Manifest, records: Iterable[bytes]) -> list[bytes]:
    """The stored image of each record (the record itself in an ImageFolder dataset; a damaged
    record as it is, so that it gets its cell saying it does not decode)."""
    schema = manifest.schema
    if schema.is_imagefolder():
        return list(records)
    images = []
    for record in records:
        try:
            images.append(image_payload(schema, record))
        except ValueError:
            images.append(bytes(record))
    return images


def make_contact_sheet(
    dst: str | os.PathLike[str],
    *,
    per_class: int = 8,
    classes: Iterable[str] | None = None,
    seed: int = 0,
    thumb: int = 128,
    overlays: bool = True,
) -> ContactSheet:
    """Draw a contact sheet of the packed dataset ``dst`` (see the module docstring).

    Args:
        dst: The DST of a finished ``packer convert``.
        per_class: Thumbnails per class at most (one column each).
        classes: Class names to show (items may be comma-separated lists); ``None``: all.
        seed: Chooses the samples; the same seed always shows the same samples.
        thumb: Cell size in pixels (16 to 1024).
        overlays: Draw each sample's boxes (with their labels) and mask on its thumbnail
            (:mod:`packer.tools.preview.overlay`); False shows the images alone.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: ``dst`` is not
            a complete, intact packer dataset.
        UnknownNameError: a class the dataset lacks (the message lists the valid names).
        ValueError: an option out of range, or a sheet over :data:`MAX_SHEET_PIXELS`.
    """
    _check_options(per_class, thumb, seed)
    shards = ShardSet(dst)
    manifest = shards.manifest
    index = shards.index
    names, targets = _rows_of(manifest, index.targets)
    class_ids = select_classes(names, classes)
    members = class_members(targets, len(names))
    picked = pick_samples(members, class_ids, per_class=per_class, seed=seed)
    pen = Pen(max(10, thumb // 10))
    layout = Layout(thumb, max(1, max((len(p) for p in picked.values()), default=0)), pen.line_height())
    _check_size(layout, len(class_ids))
    painter = Painter(layout.blank(len(class_ids)), pen, layout,
                      get_codec(manifest.codec, manifest.codec_params))
    drawn = OverlayReader(manifest.schema) if overlays else None
    try:
        rows = []
        for row, class_id in enumerate(class_ids):
            records = list(shards.read_many(picked[class_id]))
            marks = [drawn.overlay(r) for r in records] if drawn is not None and drawn.active else None
            rows.append(painter.row(row, class_id, names[class_id], len(members[class_id]), picked[class_id],
                                    _images(manifest, records), index, marks))
    finally:
        shards.close()
    return ContactSheet(painter.sheet, tuple(rows), thumb, seed, shards.root, manifest)


def write_contact_sheet(
    dst: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    html: bool = False,
    per_class: int = 8,
    classes: Iterable[str] | None = None,
    seed: int = 0,
    thumb: int = 128,
    overlays: bool = True,
) -> ContactSheet:
    """Draw :func:`make_contact_sheet` and write it to ``out`` as PNG, or as HTML with ``html``.

    ``out`` is replaced atomically (a reader never sees half a file).

    Raises:
        OutputError: ``out`` cannot be written (its folder is missing or read-only, ...).
        PackerError: anything :func:`make_contact_sheet` raises (and its ValueError).
    """
    sheet = make_contact_sheet(dst, per_class=per_class, classes=classes, seed=seed, thumb=thumb,
                               overlays=overlays)
    # Names that are not valid UTF-8 (kept with surrogateescape) show as "?" in the page.
    data = sheet.html().encode("utf-8", "replace") if html else sheet.png_bytes()
    write_named_file(out, data, "the contact sheet")
    return sheet


