"""Per-field statistics of a dataset with fields (``packer info DST --field-stats``).

What people check before training on a detection or segmentation set: boxes per sample, how
often each class appears among the boxes, which mask values occur in how many samples, how long
the captions are. Unlike :func:`packer.tools.info.dataset_info` this reads records (every one,
or ``limit`` spread evenly over the dataset, always the same ones); no image is decoded.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from packer.errors import ShardError
from packer.format.fields.schema import Field
from packer.format.fields.stored import stored_decoder
from packer.format.shardset import ShardSet

__all__ = ["field_statistics", "sample_positions"]

#: Types summarised by the numbers of their values (min, mean, max).
_SCALARS = frozenset({"int", "float"})


def sample_positions(num_samples: int, limit: int | None) -> list[int]:
    """The positions read: all of them, or ``limit`` spread evenly (first and last included)."""
    if limit is None or limit >= num_samples:
        return list(range(num_samples))
    if limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    if limit == 1:
        return [0]
    return sorted({round(i * (num_samples - 1) / (limit - 1)) for i in range(limit)})


def _spread(values: Iterable[float]) -> dict[str, float] | None:
    found = np.fromiter(values, dtype=np.float64)
    if not found.size:
        return None
    return {"min": float(found.min()), "mean": round(float(found.mean()), 3), "max": float(found.max())}


def _named(counts: Counter[int], classes: tuple[str, ...] | list[str]) -> dict[str, int]:
    """Counts by class name, every class included (a class never seen counts 0), then the
    values that name no class, by value."""
    named = {name: counts.get(value, 0) for value, name in enumerate(classes)}
    return {**named, **{str(v): n for v, n in sorted(counts.items()) if not 0 <= v < len(classes)}}


class _Tally:
    """What one field's values add up to, summarised by :meth:`result`."""

    def __init__(self, spec: Field, classes: tuple[str, ...] = ()) -> None:
        self.spec = spec
        self.classes = tuple(spec.params.get("classes") or ()) or classes
        self.sizes: list[float] = []
        self.counts: Counter[int] = Counter()
        self.shapes: Counter[str] = Counter()

    def add(self, value: Any) -> None:
        kind = self.spec.type
        if kind == "boxes":
            self.sizes.append(len(np.asarray(value).reshape(-1, 4)))
        elif kind in ("box_labels", "labels"):
            self.counts.update(int(v) for v in np.asarray(value).reshape(-1))
        elif kind == "label":
            self.counts[int(value)] += 1
        elif kind == "mask":
            self.counts.update(int(v) for v in np.unique(np.asarray(value)))  # samples holding each value
        elif kind == "text":
            self.sizes.append(len(value))
        elif kind == "bytes":
            self.sizes.append(len(value))
        elif kind in _SCALARS:
            self.sizes.append(float(value))
        elif kind == "ndarray":
            array = np.asarray(value)
            self.shapes[f"{list(array.shape)} {array.dtype}"] += 1

    def result(self, samples: int) -> dict[str, Any]:
        kind, classes = self.spec.type, self.classes
        out: dict[str, Any] = {"type": kind, "samples": samples}
        if kind == "boxes":
            out.update(boxes=int(sum(self.sizes)), per_sample=_spread(self.sizes),
                       without_boxes=sum(1 for n in self.sizes if n == 0))
        elif kind in ("box_labels", "labels", "label"):
            out["counts"] = _named(self.counts, classes)
        elif kind == "mask":
            out["samples_with_value"] = _named(self.counts, classes)
        elif kind in ("text", "bytes"):
            out["length"] = _spread(self.sizes)
        elif kind in _SCALARS:
            out["values"] = _spread(self.sizes)
        elif kind == "ndarray":
            out["shapes"] = dict(self.shapes.most_common())
        return out


def field_statistics(root: str | os.PathLike[str], *, limit: int | None = None,
                     storage_options: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """``{field: statistics}`` of the dataset at ``root`` (a path or a URL), in schema order,
    over every sample or ``limit`` of them (:func:`sample_positions`). Image fields are left out
    (their sizes are in the manifest); an ImageFolder dataset gives its ``label`` counts.

    Raises:
        NotADatasetError, ManifestError: see :meth:`packer.format.manifest.Manifest.load`.
        ShardError: a record cannot be decoded (the data is damaged: run ``verify_dataset``).
        ValueError: ``limit`` is not positive.
    """
    shards = ShardSet(root, storage_options=storage_options)
    try:
        manifest, schema = shards.manifest, shards.manifest.schema
        positions = sample_positions(manifest.num_samples, limit)
        if schema.is_imagefolder():
            label = schema.label_field()
            counts: Counter[int] = Counter(int(shards.index.targets[p]) for p in positions)
            return {"label": {"type": "label", "samples": len(positions),
                              "counts": _named(counts, manifest.classes if label else ())}}
        read = tuple(f.name for f in schema.in_record() if f.type != "image")
        tallies = {f.name: _Tally(f, tuple(manifest.classes) if f.type == "label" else ())
                   for f in schema if f.type != "image"}
        decoder = stored_decoder(schema)
        label = schema.label_field()
        for position in positions:
            try:
                values = decoder.decode(shards.read(position), read)
            except ValueError as err:
                raise ShardError(f"Sample {position} of {shards.root!r} cannot be decoded ({err}): the data "
                                 "is damaged; run verify_dataset(deep=True).") from err
            if label is not None:
                values[label.name] = int(shards.index.targets[position])
            for name, value in values.items():
                tallies[name].add(value)
        return {name: tally.result(len(positions)) for name, tally in tallies.items()}
    finally:
        shards.close()
