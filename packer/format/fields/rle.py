"""COCO run-length encodings (a crowd's ``segmentation``) to and from masks, through pycocotools
(the ``coco`` extra), imported on first use: the one place that knows pycocotools' RLE forms.

An RLE is ``{"size": [height, width], "counts": ...}``, its counts compressed text (as COCO files
hold crowds), compressed bytes, or a list of runs (uncompressed, column-major).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from packer.lazy import optional_module

__all__ = ["coded_rle", "decode_rle", "encode_rle", "mask_api"]


def mask_api(needed_by: str = "CocoMasks") -> Any:
    """``pycocotools.mask`` (MissingExtraError, an ImportError, naming the extra without it)."""
    return optional_module("pycocotools.mask", needed_by=needed_by,
                           install="'packer-shards[coco]' (or pycocotools)")


def coded_rle(api: Any, rle: Mapping[str, Any]) -> dict[str, Any]:
    """``rle`` as pycocotools decodes it: compressed, with bytes counts."""
    height, width = (int(v) for v in rle["size"])
    counts = rle["counts"]
    if isinstance(counts, list):  # uncompressed runs
        return dict(api.frPyObjects(dict(rle), height, width))
    return {"size": [height, width], "counts": counts.encode("ascii") if isinstance(counts, str) else counts}


def decode_rle(rle: Mapping[str, Any], *, needed_by: str = "CocoMasks") -> np.ndarray:
    """The mask ``rle`` encodes: ``uint8 [height, width]``, 1 inside."""
    api = mask_api(needed_by)
    return np.asarray(api.decode(coded_rle(api, rle)), dtype=np.uint8)


def encode_rle(mask: np.ndarray, *, needed_by: str = "CocoMasks") -> dict[str, Any]:
    """A 2-D 0/1 mask as a compressed RLE with text counts (as COCO files hold crowds)."""
    encoded = mask_api(needed_by).encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in encoded["size"]], "counts": encoded["counts"].decode("ascii")}
