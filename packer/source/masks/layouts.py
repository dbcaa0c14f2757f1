"""Where a segmentation set keeps its images and its masks, and how a mask names its image.

The layouts known, tried in this order:

- ``voc``: ``JPEGImages/<stem>.jpg`` and ``SegmentationClass/<stem>.png`` (Pascal VOC);
- ``cityscapes``: ``leftImg8bit/<split>/<city>/<stem>_leftImg8bit.png`` and
  ``gtFine/<split>/<city>/<stem>_gtFine_labelIds.png`` (its other ``gtFine`` files are not masks);
- ``ade20k``: ``images/<split>/<stem>.jpg`` and ``annotations/<split>/<stem>.png`` (ADE20K's scene parsing);
- ``pairs``: ``images/**/<stem>.<image extension>`` and ``masks/**/<stem>.png``.

Only ``voc`` and ``cityscapes`` are detected (their folder names say what they are);
``source_format="masks"`` reads all four.

SRC is the folder holding both (``VOC2012/``, ``cityscapes/``, ``ADEChallengeData2016/``), or a
folder inside the images' (``cityscapes/leftImg8bit/train``, ``ADEChallengeData2016/images/training``):
the masks are then the same sub-folder of the masks' folder. The image of a mask is the file of
the same relative folder and stem with any image extension.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from packer.errors import SourceNotFoundError

__all__ = ["LAYOUTS", "Layout", "Pairing", "find_pairing", "looks_like_mask_tree"]


@dataclass(frozen=True)
class Layout:
    """One way of laying out a segmentation set (a row of the module docstring's table)."""

    name: str
    images: str
    masks: str
    #: What an image's stem ends with beyond the mask's (Cityscapes' ``_leftImg8bit``).
    image_suffix: str
    #: What a mask's name ends with, extension included: files that do not are not masks.
    mask_suffix: str
    #: Whether finding this layout is distinctive enough to detect it without source_format=.
    detected: bool


LAYOUTS: Final = (
    Layout("voc", "JPEGImages", "SegmentationClass", "", ".png", detected=True),
    Layout("cityscapes", "leftImg8bit", "gtFine", "_leftImg8bit", "_gtFine_labelIds.png", detected=True),
    Layout("ade20k", "images", "annotations", "", ".png", detected=False),
    Layout("pairs", "images", "masks", "", ".png", detected=False),
)


@dataclass(frozen=True)
class Pairing:
    """A layout found at SRC: ``base`` holds both folders, ``sub`` is the part of each walked."""

    layout: Layout
    base: str
    sub: tuple[str, ...]

    @property
    def image_folder(self) -> str:
        """The folder of the images walked (``base/<images>/<sub>``)."""
        return os.path.join(self.base, self.layout.images, *self.sub)

    @property
    def mask_folder(self) -> str:
        """The folder of the masks walked (``base/<masks>/<sub>``)."""
        return os.path.join(self.base, self.layout.masks, *self.sub)


def _found(location: str, layouts: tuple[Layout, ...]) -> Pairing | None:
    top = os.path.abspath(location)
    for layout in layouts:
        if os.path.isdir(os.path.join(top, layout.images)) and os.path.isdir(os.path.join(top, layout.masks)):
            return Pairing(layout, top, ())
    parts = top.split(os.sep)
    for layout in layouts:
        for at in range(len(parts) - 1, 0, -1):
            if parts[at] == layout.images:
                base = os.sep.join(parts[:at]) or os.sep
                pairing = Pairing(layout, base, tuple(parts[at + 1:]))
                if os.path.isdir(pairing.mask_folder):
                    return pairing
    return None


def looks_like_mask_tree(location: str) -> bool:
    """Whether the folder ``location`` is laid out as a detected layout (VOC, Cityscapes)."""
    return _found(location, tuple(layout for layout in LAYOUTS if layout.detected)) is not None


def find_pairing(location: str) -> Pairing:
    """The layout of the segmentation set at the folder ``location``.

    Raises:
        SourceNotFoundError: ``location`` is not a folder, or no layout fits it.
    """
    if not os.path.isdir(location):
        raise SourceNotFoundError(f"Mask source {location!r} is not a folder: give the folder of a "
                                  "segmentation set (its images and masks folders).")
    pairing = _found(location, LAYOUTS)
    if pairing is None:
        known = "; ".join(f"{layout.images}/ + {layout.masks}/ ({layout.name})" for layout in LAYOUTS)
        raise SourceNotFoundError(f"Found no images folder beside a masks folder at {location!r}: a mask "
                                  f"source is one of {known}, given as the folder that holds both or a "
                                  "folder inside the images'.")
    return pairing
