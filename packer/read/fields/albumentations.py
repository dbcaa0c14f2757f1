"""albumentations over a sample dict, called as its users call it.

albumentations takes ``image=`` (an ``HxWx3`` ``uint8`` array), ``mask=`` or ``masks=`` and
``bboxes=`` with their per-box label fields as keywords, and returns the same keys.
:class:`Albumentations` turns a packed sample (a dict from
:class:`~packer.read.fields.dataset.FieldDataset`) into that call and the result back into the
dict, so one augmentation moves the image, its masks and its boxes together::

    aug = A.Compose([A.RandomResizedCrop((256, 256)), A.HorizontalFlip()],
                    bbox_params=A.BboxParams(format="pascal_voc", label_fields=["box_labels"]))
    ds = packer.open_dataset(dst, transform=packer.Albumentations(
        aug, masks=("mask",), boxes="boxes", box_fields=("box_labels",)))

The bbox format named in ``BboxParams`` must be the boxes field's own (``pascal_voc`` for
``xyxy`` in pixels, ``coco`` for ``xywh`` in pixels, ``yolo`` for normalised ``cxcywh``,
``albumentations`` for normalised ``xyxy``): packer hands the stored values over as they are.
albumentations is not a dependency; the adapter only calls what it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Albumentations"]


def _label_fields(aug: Any) -> tuple[str, ...] | None:
    """The label fields a ``Compose``'s bbox parameters name; None when it has none to read."""
    processor = (getattr(aug, "processors", None) or {}).get("bboxes")
    params = getattr(processor, "params", None)
    fields = getattr(params, "label_fields", None)
    return None if fields is None else tuple(fields)


class Albumentations:
    """Apply the albumentations transform ``aug`` to a sample dict (see the module docstring).

    Args:
        aug: An albumentations transform (usually ``A.Compose``); any callable taking the same
            keywords works.
        image: The image field (a PIL image or an array; given as an ``HxWx3`` ``uint8`` array).
        masks: Mask fields moved with it: one is passed as ``mask=``, several as ``masks=``.
        boxes: The boxes field, passed as ``bboxes=`` (None: no boxes).
        box_fields: Per-box fields (``box_labels``...), passed under their own names, which
            ``BboxParams(label_fields=...)`` must list: albumentations drops their rows with
            the boxes it drops.

    Raises:
        ValueError: ``box_fields`` without ``boxes``, or not in the Compose's label fields.
    """

    def __init__(self, aug: Callable[..., Mapping[str, Any]], *, image: str = "image",
                 masks: Sequence[str] = (), boxes: str | None = None, box_fields: Sequence[str] = ()) -> None:
        if box_fields and boxes is None:
            raise ValueError(f"box_fields {list(box_fields)} need boxes= (the boxes field they belong to)")
        named = _label_fields(aug)
        missing = [f for f in box_fields if named is not None and f not in named]
        if missing:
            raise ValueError(f"box fields {missing} are not in the transform's BboxParams(label_fields="
                             f"{list(named or ())}): add them, or albumentations cannot drop their rows "
                             "with the boxes it drops")
        self.aug, self.image, self.masks = aug, image, tuple(masks)
        self.boxes, self.box_fields = boxes, tuple(box_fields)

    def _arguments(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        image = np.asarray(sample[self.image])
        args: dict[str, Any] = {"image": image if image.ndim == 3 else np.stack([image] * 3, axis=-1)}
        if len(self.masks) == 1:
            args["mask"] = np.asarray(sample[self.masks[0]])
        elif self.masks:
            args["masks"] = [np.asarray(sample[name]) for name in self.masks]
        if self.boxes is not None:
            args["bboxes"] = np.asarray(sample[self.boxes], dtype=np.float32).reshape(-1, 4)
            args.update({name: np.asarray(sample[name]) for name in self.box_fields})
        return args

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """The sample with its image, masks, boxes and per-box fields transformed together."""
        out = self.aug(**self._arguments(sample))
        result = dict(sample)
        result[self.image] = out["image"]
        if len(self.masks) == 1:
            result[self.masks[0]] = out["mask"]
        elif self.masks:
            result.update(zip(self.masks, out["masks"], strict=True))
        if self.boxes is not None:
            result[self.boxes] = np.asarray(out["bboxes"], dtype=np.float32).reshape(-1, 4)
            for name in self.box_fields:
                result[name] = np.asarray(out[name], dtype=np.asarray(sample[name]).dtype)
        return result

    def __repr__(self) -> str:
        return (f"Albumentations({self.aug!r}, image={self.image!r}, masks={list(self.masks)}, "
                f"boxes={self.boxes!r}, box_fields={list(self.box_fields)})")
