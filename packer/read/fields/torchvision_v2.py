"""torchvision.transforms.v2 over a sample dict: the image, its masks and boxes as tv_tensors.

torchvision's v2 transforms move every ``tv_tensors`` value of the structure they are given
together: an ``Image``, its ``Mask`` values and ``BoundingBoxes`` (which carry their format and
``canvas_size``), and pass everything else through. :class:`TorchvisionV2` wraps a packed sample's
fields in those types, then calls the transform on the whole dict, so one v2 pipeline crops the
image with its masks and boxes::

    from torchvision.transforms import v2
    aug = v2.Compose([v2.RandomResizedCrop(256), v2.RandomHorizontalFlip(),
                      v2.SanitizeBoundingBoxes(labels_getter=lambda s: s["box_labels"])])
    ds = packer.open_dataset(dst)
    ds.transform = packer.TorchvisionV2.for_schema(ds.schema, aug)

Boxes keep their format (``xyxy``, ``xywh``, ``cxcywh``); normalised boxes (YOLO's) are given in
pixels of the image, since torchvision's are always in pixels. Per-box fields (``box_labels``)
become ``int64`` tensors: name them in ``SanitizeBoundingBoxes(labels_getter=...)`` so that it
drops their rows with the boxes it drops. torchvision is not a dependency: it is imported when the
adapter is first called, and an error says how to install it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from PIL import Image

from packer.format.fields.schema import Schema
from packer.lazy import optional_module
from packer.read.joint.targets import Targets, targets_for_schema

__all__ = ["TorchvisionV2"]

_BOX_FORMATS = {"xyxy": "XYXY", "xywh": "XYWH", "cxcywh": "CXCYWH"}


def _tv_tensors() -> Any:
    return optional_module("torchvision.tv_tensors", needed_by="TorchvisionV2",
                           install="torchvision (0.16 or newer, the build made for your torch)")


def _image(value: Any, name: str, tv: Any) -> Any:
    """A decoded image field (PIL image, ``HxWx3`` array or ``3xHxW`` tensor) as a tv Image."""
    if isinstance(value, Image.Image):
        return tv.Image(torch.from_numpy(np.array(value.convert("RGB"))).permute(2, 0, 1))
    if isinstance(value, torch.Tensor) and value.ndim == 3:
        return tv.Image(value)
    if isinstance(value, np.ndarray) and value.ndim == 3:
        return tv.Image(torch.from_numpy(np.ascontiguousarray(value)).permute(2, 0, 1))
    raise TypeError(f"image field {name!r} must be decoded (a PIL image, an HxWx3 array or a 3xHxW "
                    f"tensor), not {type(value).__name__}: open the dataset without "
                    f"decode={{{name!r}: False}}")


class TorchvisionV2:
    """Apply the ``torchvision.transforms.v2`` transform ``transform`` to a sample dict (see the
    module docstring).

    Args:
        transform: A v2 transform (usually ``v2.Compose``); any callable taking the dict works.
        targets: The image field and the masks and boxes that move with it (see
            :meth:`for_schema`, which reads them from the dataset's schema).
    """

    def __init__(self, transform: Callable[[dict[str, Any]], Any], targets: Targets) -> None:
        self.transform, self.targets = transform, targets

    @classmethod
    def for_schema(cls, schema: Schema, transform: Callable[[dict[str, Any]], Any], *,
                   image: str = "image") -> TorchvisionV2:
        """The adapter moving every mask and boxes field ``schema`` ties to ``image``, with the
        boxes' format and normalisation as recorded."""
        return cls(transform, targets_for_schema(schema, image))

    def wrap(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """``sample`` with its image, masks, boxes and per-box fields as tv_tensors and tensors."""
        tv, name = _tv_tensors(), self.targets.image
        if name not in sample:
            raise KeyError(f"the sample has no image field {name!r}; its fields are {', '.join(sample)}")
        out = dict(sample)
        out[name] = image = _image(sample[name], name, tv)
        height, width = (int(v) for v in image.shape[-2:])
        for mask in self.targets.masks:
            out[mask] = tv.Mask(torch.as_tensor(np.asarray(sample[mask])))
        for boxes, spec in self.targets.boxes.items():
            values = torch.as_tensor(np.asarray(sample[boxes], dtype=np.float32).reshape(-1, 4))
            if spec.normalized:
                values = values * torch.tensor([width, height, width, height], dtype=torch.float32)
            out[boxes] = tv.BoundingBoxes(values, format=_BOX_FORMATS[spec.format],
                                          canvas_size=(height, width))
            for row in spec.rows:
                out[row] = torch.as_tensor(np.asarray(sample[row], dtype=np.int64))
        return out

    def __call__(self, sample: Mapping[str, Any]) -> Any:
        """The transform's result on the wrapped sample."""
        return self.transform(self.wrap(sample))
