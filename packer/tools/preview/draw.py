"""Drawing a contact sheet: rows of letterboxed, captioned thumbnails in Pillow's default font.

Geometry, with ``PAD`` pixels around and between everything: each row is a header line (the
class), a row of ``thumb`` x ``thumb`` cells, a caption line under each cell, and a gap. Images
are scaled to fit a cell with their aspect ratio kept (small ones enlarged with nearest-neighbour
resampling, so that they look as small as they are) and centred on grey.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from PIL import Image, ImageDraw, ImageFont, ImageOps

from packer.format.codecs import Codec
from packer.format.sample_index import SampleIndex
from packer.source.imagecheck import UndecodableImage, decoder_failures
from packer.tools.preview.overlay import Overlay, draw_overlay

__all__ = ["PAD", "Layout", "Painter", "Pen", "SheetCell", "SheetRow"]

#: Space around and between everything on the sheet, in pixels.
PAD: Final = 6
_BACKGROUND = (255, 255, 255)
_LETTERBOX = (226, 226, 226)
_FAILED = (255, 214, 214)
_FontType = ImageFont.ImageFont | ImageFont.FreeTypeFont | ImageFont.TransposedFont


@dataclass(frozen=True)
class SheetCell:
    """One thumbnail: which sample, and where its ``thumb`` x ``thumb`` cell is on the sheet."""

    index: int
    relpath: str
    target: int
    class_name: str
    box: tuple[int, int, int, int]  # left, top, right, bottom of the cell (right/bottom excluded)
    error: str | None = None  # why the sample could not be decoded; None when it was

    @property
    def caption(self) -> str:
        """``class · #index``, as printed under the thumbnail."""
        return f"{self.class_name} · #{self.index}"


@dataclass(frozen=True)
class SheetRow:
    """One class of the sheet: its header and how many of its samples are shown."""

    target: int
    class_name: str
    num_samples: int
    cells: tuple[SheetCell, ...]
    header_xy: tuple[int, int]


class Pen:
    """Pillow's default font at ``size`` pixels, with text fitted to widths and to its glyphs.

    The default font covers ASCII and a few Latin-1 signs (a fixed-size bitmap font on Pillow
    < 10.1 covers Latin-1). A character it lacks is drawn without its accents when that helps
    (``é`` as ``e``), else as ``?``: the HTML page shows every name exactly.
    """

    def __init__(self, size: int) -> None:
        try:
            self.font: _FontType = ImageFont.load_default(size=size)
        except TypeError:  # Pillow < 10.1 takes no size
            self.font = ImageFont.load_default()
        self._notdef = self._mask("\u0378")  # an unassigned code point: the missing-glyph box
        self._has: dict[str, bool] = {}

    def _mask(self, char: str) -> tuple[bytes, tuple[int, int]] | None:
        try:
            mask = self.font.getmask(char)
        except UnicodeEncodeError:  # the bitmap font encodes text as Latin-1
            return None
        return bytes(mask), mask.size

    def _drawn(self, char: str) -> bool:
        if char not in self._has:
            mask = self._mask(char)
            self._has[char] = mask is not None and (char.isascii() or mask != self._notdef)
        return self._has[char]

    def clean(self, text: str) -> str:
        """``text`` with every character the font lacks folded to ASCII, or ``?``."""
        out = []
        for char in text:
            if not self._drawn(char):
                folded = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
                char = folded if folded and all(self._drawn(c) for c in folded) else "?"
            out.append(char)
        return "".join(out)

    def width(self, text: str) -> int:
        """Drawn width of ``text`` in pixels."""
        left, _, right, _ = self.font.getbbox(text)
        return int(right - left)

    def line_height(self) -> int:
        """Pixels for one line of text, spacing included."""
        return int(self.font.getbbox("Ag|")[3]) + 4

    def fit(self, head: str, tail: str, width: int) -> str:
        """``head + tail``, cleaned, with ``head`` cut short (marked ``...``) to fit ``width``."""
        head, tail = self.clean(head), self.clean(tail)
        if self.width(head + tail) <= width:
            return head + tail
        while head and self.width(head + "..." + tail) > width:
            head = head[:-1]
        return head + "..." + tail


def _thumbnail(codec: Codec, payload: bytes, thumb: int) -> tuple[Image.Image, tuple[int, int]]:
    """The decoded image scaled to fit ``thumb`` x ``thumb``, aspect kept, and its own size."""
    image = codec.decode(payload)
    method = (Image.Resampling.NEAREST if max(image.size) < thumb else Image.Resampling.LANCZOS)
    return ImageOps.contain(image, (thumb, thumb), method=method), image.size


@dataclass(frozen=True)
class Layout:
    """Where everything goes on a sheet of ``columns`` cells of ``thumb`` pixels per row."""

    thumb: int
    columns: int
    line: int

    @property
    def row_height(self) -> int:
        """Pixels from one row's header to the next one's."""
        return self.line + self.thumb + self.line + PAD  # header, cells, captions, gap

    def blank(self, rows: int) -> Image.Image:
        """An empty sheet for ``rows`` rows."""
        return Image.new("RGB", self.size(rows), _BACKGROUND)

    def size(self, rows: int) -> tuple[int, int]:
        """Width and height of a sheet of ``rows`` rows."""
        return PAD + self.columns * (self.thumb + PAD), PAD + rows * self.row_height

    def cell(self, row: int, column: int) -> tuple[int, int, int, int]:
        """The box of one cell: left, top, right, bottom (right and bottom excluded)."""
        left = PAD + column * (self.thumb + PAD)
        top = PAD + row * self.row_height + self.line
        return left, top, left + self.thumb, top + self.thumb


class Painter:
    """Draws rows of letterboxed, captioned thumbnails onto one sheet."""

    def __init__(self, sheet: Image.Image, pen: Pen, layout: Layout, codec: Codec) -> None:
        self.sheet, self.pen, self.layout, self.codec = sheet, pen, layout, codec
        self.draw = ImageDraw.Draw(sheet)

    def row(self, row: int, target: int, name: str, count: int, chosen: Sequence[int],
            payloads: Sequence[bytes], index: SampleIndex,
            overlays: Sequence[Overlay | None] | None = None) -> SheetRow:
        """The header and cells of one class (with each sample's boxes and mask drawn, if given)."""
        header_xy = (PAD, PAD + row * self.layout.row_height)
        header = f"{name}  (class {target}, {count} sample{'s' * (count != 1)}, showing {len(chosen)})"
        self.draw.text(header_xy, self.pen.fit(header, "", self.sheet.width - 2 * PAD), fill=(0, 0, 0),
                       font=self.pen.font)
        cells = []
        drawn = overlays if overlays is not None else [None] * len(chosen)
        for column, (i, payload, overlay) in enumerate(zip(chosen, payloads, drawn, strict=True)):
            sample = SheetCell(i, index.path(i), target, name, self.layout.cell(row, column))
            cells.append(self.cell(sample, payload, overlay))
        return SheetRow(target, name, count, tuple(cells), header_xy)

    def cell(self, cell: SheetCell, payload: bytes, overlay: Overlay | None = None) -> SheetCell:
        """Paste one letterboxed thumbnail (or a failure note) in its box, draw the overlay on
        it, and caption it."""
        left, top, right, bottom = cell.box
        thumb = right - left
        try:
            with decoder_failures():
                image, size = _thumbnail(self.codec, payload, thumb)
                if overlay is not None:
                    image = draw_overlay(image, size, overlay, self.pen.font)
        except UndecodableImage as err:
            cell = replace(cell, error=str(err))
            self.draw.rectangle((left, top, right - 1, bottom - 1), fill=_FAILED)
            self.draw.text((left + 3, top + 3), self.pen.fit("cannot decode", "", thumb - 6),
                           fill=(160, 0, 0), font=self.pen.font)
        else:
            self.draw.rectangle((left, top, right - 1, bottom - 1), fill=_LETTERBOX)
            self.sheet.paste(image, (left + (thumb - image.width) // 2, top + (thumb - image.height) // 2))
        caption = self.pen.fit(cell.class_name, f" · #{cell.index}", thumb)
        self.draw.text((left, bottom + 1), caption, fill=(60, 60, 60), font=self.pen.font)
        return cell
