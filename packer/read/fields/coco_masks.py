"""A COCO sample's instance masks, decoded at read time from its ``segmentation`` field.

A dataset converted from a COCO instances file keeps each annotation's segmentation as the file
gives it (polygons, RLE, or compressed RLE for crowds), one entry per box. :class:`CocoMasks` is a
transform that adds ``masks``: a ``uint8`` array ``[N, H, W]`` (N the sample's boxes, H x W its
image), each annotation's mask exactly as pycocotools' ``COCO.annToMask`` draws it::

    ds = packer.open_dataset("coco.packer")
    ds.transform = packer.CocoMasks()
    sample = ds[0]          # sample["masks"][i] is box i's mask (1 inside, 0 outside)

Decoding happens in the ``DataLoader`` workers, only for datasets that ask for it: nothing is
stored twice. An annotation without a segmentation gives an empty mask. pycocotools is not a
dependency (``pip install 'packer-shards[coco]'``); it is imported on the first call.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from packer.format.fields.rle import coded_rle, mask_api

__all__ = ["CocoMasks", "instance_masks"]


def _coordinates(ring: Any) -> bool:
    """Whether ``ring`` is a non-empty list of numbers (a polygon's x, y, x, y, ...)."""
    return isinstance(ring, list) and bool(ring) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in ring)


def _rle(api: Any, segmentation: Any, height: int, width: int, index: int) -> Any:
    """One annotation's segmentation as a compressed RLE at ``height`` x ``width``, as
    ``COCO.annToRLE`` makes it; ValueError naming the annotation when it is none of COCO's forms."""
    if isinstance(segmentation, list):  # polygons: one or more rings of x, y, x, y, ...
        if not segmentation or not all(_coordinates(ring) for ring in segmentation):
            raise ValueError(f"annotation {index}'s polygons are not lists of x, y coordinates")
        try:  # as pycocotools reads them (a first ring of four numbers is a box to it)
            return api.merge(api.frPyObjects(segmentation, height, width))
        except (TypeError, ValueError, IndexError) as err:
            raise ValueError(f"annotation {index}'s polygons cannot be drawn: {err}") from None
    if isinstance(segmentation, Mapping) and {"size", "counts"} <= set(segmentation):
        size = [int(v) for v in segmentation["size"]]
        if size != [height, width]:
            raise ValueError(f"annotation {index}'s RLE is {size[0]}x{size[1]} (height x width), its image "
                             f"{height}x{width}")
        return coded_rle(api, segmentation)
    raise ValueError(f"annotation {index}'s segmentation is neither polygons nor RLE: "
                     f"{type(segmentation).__name__}")


def instance_masks(segmentation: Sequence[Any], height: int, width: int) -> np.ndarray:
    """Each annotation's mask, ``uint8 [N, height, width]``, from a COCO sample's segmentation
    entries (None: an empty mask).

    Raises:
        ValueError: an entry is none of COCO's forms, or an RLE of another size than the image.
        ImportError: pycocotools is not installed (the message says how to install it).
    """
    out = np.zeros((len(segmentation), height, width), dtype=np.uint8)
    if not segmentation:
        return out
    api = mask_api()
    for i, entry in enumerate(segmentation):
        if entry is not None:
            out[i] = api.decode(_rle(api, entry, height, width, i))
    return out


def _image_size(value: Any, name: str) -> tuple[int, int]:
    """``(height, width)`` of an image field, decoded or stored (a header read)."""
    if isinstance(value, Image.Image):
        return value.height, value.width
    if isinstance(value, np.ndarray) and value.ndim in (2, 3):
        return int(value.shape[0]), int(value.shape[1])
    if isinstance(value, torch.Tensor) and value.ndim == 3:
        return int(value.shape[1]), int(value.shape[2])
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            with Image.open(io.BytesIO(bytes(value))) as image:
                return image.height, image.width
        except (OSError, ValueError):
            pass
    raise TypeError(f"image field {name!r} gives no size ({type(value).__name__}): read it decoded, or as "
                    "the stored bytes of an image file")


class CocoMasks:
    """Add ``out`` (the instance masks, :func:`instance_masks`) to a COCO sample dict, from its
    ``segmentation`` field at its ``image`` field's size; the other fields are left as they are.

    Args:
        segmentation: The field holding the annotations' segmentations.
        image: The image field whose size the masks take.
        out: The name of the added field.
    """

    def __init__(self, *, segmentation: str = "segmentation", image: str = "image",
                 out: str = "masks") -> None:
        self.segmentation, self.image, self.out = segmentation, image, out

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """``sample`` with the masks added."""
        for name in (self.segmentation, self.image):
            if name not in sample:
                raise KeyError(f"the sample has no field {name!r}; its fields are {', '.join(sample)}")
        height, width = _image_size(sample[self.image], self.image)
        return {**sample, self.out: instance_masks(sample[self.segmentation] or [], height, width)}
