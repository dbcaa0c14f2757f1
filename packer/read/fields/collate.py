"""Batching samples with fields: :func:`collate_fields`, for a ``DataLoader``'s ``collate_fn``.

Fields of one shape in every sample (images after a resize, masks after a crop, class labels)
are stacked into one tensor; fields whose length varies (boxes, their labels, multi-labels) are
kept as a list of tensors, one per sample, as detection models take them (torchvision's
``targets``), or, named in ``pad``, padded into one ``[B, N_max, ...]`` tensor with the fill
given, beside ``<name>_lengths`` (``int64 [B]``). Text and other values stay lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["collate_fields"]


def _tensor(value: Any) -> torch.Tensor | None:
    """``value`` as a tensor when it is one (a numpy array, a number), else None (text, images)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, bool | int | float | np.number | np.bool_):
        return torch.as_tensor(value)
    return None


def _padded(tensors: list[torch.Tensor], fill: float, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if len({t.shape[1:] for t in tensors}) > 1 or any(t.ndim == 0 for t in tensors):
        raise ValueError(f"field {name!r}: only the first dimension may vary to pad it, not "
                         f"{sorted({tuple(t.shape) for t in tensors})}")
    lengths = torch.tensor([len(t) for t in tensors], dtype=torch.int64)
    out = tensors[0].new_full((len(tensors), int(lengths.max()), *tensors[0].shape[1:]), fill)
    for row, tensor in enumerate(tensors):
        out[row, : len(tensor)] = tensor
    return out, lengths


def collate_fields(batch: Sequence[Mapping[str, Any]],
                   pad: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One batch of sample dicts as one dict (see the module docstring).

    ``pad``: field name -> fill value, for varying-length fields to pad (e.g.
    ``{"boxes": 0, "box_labels": -1}``); bind it with ``functools.partial(collate_fields,
    pad=...)``, which pickles to spawned workers.

    Raises:
        ValueError: the samples have different fields, or ``pad`` names a field that is not
            numeric or varies in more than its first dimension.
    """
    if not batch:
        return {}
    names = list(batch[0])
    if any(list(sample) != names for sample in batch):
        raise ValueError(f"every sample of a batch needs the same fields; the first has {names}")
    pad = dict(pad or {})
    out: dict[str, Any] = {}
    for name in names:
        values = [sample[name] for sample in batch]
        tensors = [_tensor(v) for v in values]
        if any(t is None for t in tensors):
            if name in pad:
                raise ValueError(f"field {name!r} is not numeric ({type(values[0]).__name__}): it "
                                 "cannot be padded")
            out[name] = values
            continue
        ready = [t for t in tensors if t is not None]
        if name in pad:
            out[name], out[f"{name}_lengths"] = _padded(ready, pad[name], name)
        elif len({t.shape for t in ready}) == 1 and len({t.dtype for t in ready}) == 1:
            out[name] = torch.stack(ready)
        else:
            out[name] = ready
    unknown = sorted(set(pad) - set(names))
    if unknown:
        raise ValueError(f"pad names no field(s) {unknown} of the samples ({', '.join(names)})")
    return out
