"""The joint transforms: crop, resize and flip a sample dict's image and, with the same
parameters, its masks and boxes (:class:`JointTransform` and its three layouts).

Each is built from field names (``masks=("mask",)``, ``boxes={"boxes": ("box_labels",)}``) or,
more simply, from the dataset's schema (:meth:`JointTransform.for_schema`), and is picklable
(names and numbers only), so it goes to spawned DataLoader workers as it is::

    ds = packer.open_dataset(dst, decode={"image": False})
    ds.transform = JointRandomResizedCropFlip.for_schema(ds.schema, 224)

Output: the image a ``uint8 (3, H, W)`` tensor; each mask a ``(H, W)`` tensor of its own dtype
(``uint8``/``uint16``: call ``.long()`` on the GPU for a loss); boxes ``float32 [M, 4]`` in the
field's format and normalisation, boxes left with no area (or less than ``min_visibility`` of
theirs) dropped with the same rows of their per-box fields (``box_labels``: ``int64``); other
each outline of a ``polygons`` field (:mod:`packer.read.joint.outlines`) moved, clipped and
flipped with its box, the entries of dropped boxes dropped; other
fields unchanged. Targets named but absent from a sample (a ``fields=`` selection) are skipped.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from packer.format.fields.schema import Schema
from packer.read.crop_params import random_resized_crop_params, size_pair
from packer.read.crop_resize import check_gap
from packer.read.decoding import open_picture, resolve_decoder
from packer.read.joint import layouts
from packer.read.joint.boxes import move_boxes, take_rows
from packer.read.joint.outlines import move_outlines
from packer.read.joint.pixels import place_image, place_mask
from packer.read.joint.placement import Placement
from packer.read.joint.targets import BoxField, OutlineField, Targets, targets_for_schema
from packer.read.resampling import resolve_resampler

__all__ = ["JointLetterbox", "JointRandomResizedCropFlip", "JointScaleJitterCrop", "JointTransform"]


def _range(value: Sequence[float], name: str) -> tuple[float, float]:
    low, high = (float(v) for v in value)
    if not 0 < low <= high:
        raise ValueError(f"{name} must be (low, high) with 0 < low <= high, not {tuple(value)!r}")
    return low, high


def _probability(flip_p: float) -> float:
    if not 0.0 <= flip_p <= 1.0:
        raise ValueError(f"flip_p must be a probability in [0, 1], not {flip_p!r}")
    return float(flip_p)


class JointTransform(ABC):
    """What the joint transforms share: the fields moved, the fused image path, the box rules.

    Args:
        size: Output ``(height, width)``, or an int for a square.
        image: The image field's name.
        masks: Mask fields tied to the image.
        boxes: Boxes fields tied to it: name -> :class:`~packer.read.joint.targets.BoxField`, or
            name -> its per-box fields (xyxy pixels).
        outlines: ``polygons`` fields moved with their boxes: name -> an
            :class:`~packer.read.joint.targets.OutlineField`, or name -> its boxes field (pixels).
        min_visibility: Drop a box keeping less than this fraction of its area after clipping
            (a box with no area left is always dropped).
        mask_fill: Mask value in padding (the ignore index).
        draft_gap, resampler, decoder: As for :class:`packer.read.transforms.RandomResizedCropFlip`.
        generator: A seeded ``torch.Generator``; leave None in DataLoader workers.
    """

    def __init__(self, size: int | Sequence[int], *, image: str = "image", masks: Sequence[str] = (),
                 boxes: Mapping[str, BoxField | Sequence[str]] | None = None,
                 outlines: Mapping[str, OutlineField | str] | None = None, min_visibility: float = 0.0,
                 fill: int | Sequence[int] = 0, mask_fill: int = 255, draft_gap: float = 2.0,
                 resampler: str = "auto", decoder: str = "auto",
                 generator: torch.Generator | None = None) -> None:
        if not 0.0 <= min_visibility <= 1.0:
            raise ValueError(f"min_visibility must be in [0, 1], not {min_visibility!r}")
        self.size = size_pair(size, "size")
        self.targets = Targets.of(image, masks, boxes or {}, outlines)
        self.min_visibility, self.fill, self.mask_fill = float(min_visibility), fill, int(mask_fill)
        self.draft_gap = check_gap(draft_gap)
        self.resampler, self.decoder = resolve_resampler(resampler), resolve_decoder(decoder)
        self.generator = generator

    @classmethod
    def for_schema(cls, schema: Schema, size: int | Sequence[int], *args: Any, image: str = "image",
                   **kwargs: Any) -> JointTransform:
        """The transform moving every mask and boxes field the schema ties to ``image`` (and
        their ``box_labels`` and ``polygons``); other arguments as the constructor's."""
        targets = targets_for_schema(schema, image)
        return cls(size, *args, image=image, masks=targets.masks, boxes=dict(targets.boxes),
                   outlines=dict(targets.outlines), **kwargs)

    @abstractmethod
    def placement(self, width: int, height: int) -> Placement:
        """Where a ``width`` x ``height`` image goes (random draws happen here)."""

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """The transformed sample dict (see the module docstring)."""
        name = self.targets.image
        if name not in sample:
            raise KeyError(f"the sample has no image field {name!r}; its fields are {', '.join(sample)}")
        out = dict(sample)
        picture = open_picture(sample[name], self.decoder)
        try:
            source = (picture.width, picture.height)
            placement = self.placement(*source)
            out[name] = place_image(picture, placement, self.fill, draft_gap=self.draft_gap,
                                    resampler=self.resampler)
        finally:
            picture.close()
        for mask in self.targets.masks:
            if mask in out:
                out[mask] = place_mask(out[mask], placement, source, self.mask_fill, mask)
        kept: dict[str, np.ndarray] = {}
        for boxes, spec in self.targets.boxes.items():
            if boxes in out:
                out[boxes], kept[boxes] = move_boxes(out[boxes], placement, source, fmt=spec.format,
                                                     normalized=spec.normalized,
                                                     min_visibility=self.min_visibility)
                for rows in spec.rows:
                    if rows in out:
                        out[rows] = take_rows(out[rows], kept[boxes], rows)
        for outlines, shape in self.targets.outlines.items():
            if outlines in out:  # with its boxes not selected, every outline stays
                keep = kept[shape.boxes] if shape.boxes in kept else np.ones(len(out[outlines] or []), bool)
                out[outlines] = move_outlines(out[outlines], keep, placement, source,
                                              normalized=shape.normalized, name=outlines)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, targets={self.targets})"


class JointRandomResizedCropFlip(JointTransform):
    """``RandomResizedCrop`` + ``RandomHorizontalFlip`` of the image and its targets.

    Draws as :class:`packer.read.transforms.RandomResizedCropFlip` does (crop, then flip, from
    the same RNG), so the image is exactly that transform's on the same seed. Other arguments
    as :class:`JointTransform`'s.
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), flip_p: float = 0.5, **kwargs: Any) -> None:
        super().__init__(size, **kwargs)
        self.scale, self.ratio = _range(scale, "scale"), _range(ratio, "ratio")
        self.flip_p = _probability(flip_p)

    def placement(self, width: int, height: int) -> Placement:
        box = random_resized_crop_params(width, height, self.scale, self.ratio, self.generator)
        flip = torch.rand(1, generator=self.generator).item() < self.flip_p
        return layouts.crop_placement(box, self.size, flip)


class JointScaleJitterCrop(JointTransform):
    """Segmentation/detection scale jitter (as detectron2's large-scale jitter): resize the image
    by a factor drawn uniformly from ``scale`` times the scale that fits it inside ``size``,
    crop ``size`` at a random place, pad where the scaled image is smaller (bottom and right:
    image ``fill``, masks ``mask_fill``), flip with ``flip_p``.

    Draws, in order: the factor, the crop's top, its left (always drawn, 0 when there is no room),
    the flip.
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.5, 2.0),
                 flip_p: float = 0.5, fill: int | Sequence[int] = 0, mask_fill: int = 255,
                 **kwargs: Any) -> None:
        super().__init__(size, fill=fill, mask_fill=mask_fill, **kwargs)
        self.scale, self.flip_p = _range(scale, "scale"), _probability(flip_p)

    def placement(self, width: int, height: int) -> Placement:
        factor = torch.empty(1).uniform_(*self.scale, generator=self.generator).item()
        scaled = layouts.scaled_size(width, height, factor * layouts.fit_scale(width, height, self.size))
        room = [max(0, s - o) for s, o in zip(scaled, self.size, strict=True)]
        top, left = (int(torch.randint(0, r + 1, (1,), generator=self.generator).item()) for r in room)
        flip = torch.rand(1, generator=self.generator).item() < self.flip_p
        return layouts.jitter_placement(width, height, self.size, scaled, top, left, flip)


class JointLetterbox(JointTransform):
    """Detection letterbox: resize keeping the aspect ratio to fit ``size``, centred, padding
    ``fill`` (114, YOLO's grey) and ``mask_fill``; no randomness, no flip."""

    def __init__(self, size: int | Sequence[int], fill: int | Sequence[int] = 114, mask_fill: int = 255,
                 **kwargs: Any) -> None:
        super().__init__(size, fill=fill, mask_fill=mask_fill, **kwargs)

    def placement(self, width: int, height: int) -> Placement:
        return layouts.letterbox_placement(width, height, self.size)
