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
from typing import Final

from packer.errors import SourceNotFoundError
from packer.source.pairs import Layout, Pairing, find_layout

__all__ = ["LAYOUTS", "find_pairing", "looks_like_mask_tree"]

LAYOUTS: Final = (
    Layout("voc", "JPEGImages", "SegmentationClass", "", ".png", detected=True),
    Layout("cityscapes", "leftImg8bit", "gtFine", "_leftImg8bit", "_gtFine_labelIds.png", detected=True),
    Layout("ade20k", "images", "annotations", "", ".png", detected=False),
    Layout("pairs", "images", "masks", "", ".png", detected=False),
)


def looks_like_mask_tree(location: str) -> bool:
    """Whether the folder ``location`` is laid out as a detected layout (VOC, Cityscapes)."""
    return find_layout(location, tuple(layout for layout in LAYOUTS if layout.detected)) is not None


def find_pairing(location: str) -> Pairing:
    """The layout of the segmentation set at the folder ``location``.

    Raises:
        SourceNotFoundError: ``location`` is not a folder, or no layout fits it.
    """
    if not os.path.isdir(location):
        raise SourceNotFoundError(f"Mask source {location!r} is not a folder: give the folder of a "
                                  "segmentation set (its images and masks folders).")
    pairing = find_layout(location, LAYOUTS)
    if pairing is None:
        known = "; ".join(f"{layout.images}/ + {layout.others}/ ({layout.name})" for layout in LAYOUTS)
        raise SourceNotFoundError(f"Found no images folder beside a masks folder at {location!r}: a mask "
                                  f"source is one of {known}, given as the folder that holds both or a "
                                  "folder inside the images'.")
    return pairing
