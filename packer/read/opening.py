"""open_dataset: a packed dataset opened with the class for it.

Apart from the classes so that the dict-per-sample dataset (``read/fields``), itself a
:class:`PackedImageDataset`, can be chosen here without the two modules importing each other.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from packer.read.datasets import DATASET_CLASSES, PackedImageDataset, shard_set_of
from packer.read.fields.dataset import FieldDataset, decode_of


def open_dataset(
    path: str | os.PathLike[str],
    transform: Callable[[Any], Any] | None = None,
    target_transform: Callable[[int], Any] | None = None,
    *,
    decode: bool | Mapping[str, bool] = True,
    fields: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
    mode: str = "auto",
    version: int | None = None,
) -> PackedImageDataset:
    """Open a packed dataset, at a path or a URL, with the class for it (the arguments are
    :class:`PackedImageDataset`'s).

    A dataset of images and classes gives ``(image, target)`` pairs, as ImageFolder. A dataset
    whose samples have other fields (masks, boxes, captions), or any dataset opened with
    ``fields=``, gives a dict per sample (:class:`~packer.read.fields.dataset.FieldDataset`):
    ``fields`` selects and orders them, ``decode`` is True, False or per field
    (``{"image": False}``), and ``transform`` receives the dict.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError, StoreError: as the
            classes do. DatasetError: ``fields`` or ``decode`` names no field of the dataset.
        TypeError: ``target_transform`` with a dict per sample (transform the dict instead).
    """
    shards = shard_set_of(path, storage_options=storage_options, cache_dir=cache_dir,
                          cache_limit=cache_limit, mode=mode, version=version)  # loaded once
    if fields is not None or not shards.manifest.schema.is_imagefolder():
        if target_transform is not None:
            raise TypeError("target_transform applies to (image, target) pairs; this dataset gives a "
                            "dict per sample: transform the dict with transform= instead")
        return FieldDataset.over(shards, transform, fields=fields, decode=decode_of(decode))
    if not isinstance(decode, bool):
        raise TypeError(f"decode per field applies to a dataset with fields (or with fields=); "
                        f"{path!r} gives (image, target) pairs: give decode=True or False")
    cls = DATASET_CLASSES.get(shards.manifest.backend, PackedImageDataset)
    return cls._over(shards, transform, target_transform, decode=decode)
