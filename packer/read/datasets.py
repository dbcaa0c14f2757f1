"""PyTorch datasets over a packed directory: drop-ins for ``torchvision.datasets.ImageFolder``.

``LMDBImageDataset`` and ``HDF5ImageDataset`` take the same arguments and expose ImageFolder's
attributes (``classes``, ``class_to_idx``, ``samples``, ``targets``, ``imgs``) with the same
sample order. They hold paths, never open handles, across ``__init__``, pickling and fork, so
any ``DataLoader`` (``fork``, ``spawn``, ``forkserver``, persistent workers) reads them safely.
``samples`` and ``targets`` are read-only list-like views over memory-mapped arrays, so a
million samples add no Python objects to every worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, overload

import numpy as np
from torch.utils.data import Dataset

from packer.errors import DatasetError
from packer.format.codecs import Codec, get_codec
from packer.format.manifest import Manifest
from packer.format.shardset import ShardSet
from packer.read.batching import batch_samples, new_batch_tensor
from packer.read.transforms import BatchTransform
from packer.store.cache.node import NodeCache
from packer.store.urls import is_url

__all__ = ["HDF5ImageDataset", "LMDBImageDataset", "PackedImageDataset"]


class _ListView(Sequence[Any]):
    """Read-only list-like view: indexing, slicing, iteration, ``==`` with lists."""

    def __init__(self, length: int, get: Callable[[int], Any]) -> None:
        self._length = length
        self._get = get

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"index out of range for {self._length} samples")
        return self._get(index)

    def __iter__(self) -> Iterator[Any]:
        return (self._get(i) for i in range(self._length))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == self._length and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(self._get(i)) for i in range(min(self._length, 3)))
        return f"[{head}{', ...' if self._length > 3 else ''}]  # {self._length} items"


class _TargetsView(_ListView):
    """Targets as Python ints; ``np.asarray(view)`` returns the whole array at once."""

    def __init__(self, targets: np.ndarray) -> None:
        super().__init__(len(targets), lambda i: int(targets[i]))
        self._targets = targets

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.array(self._targets, dtype=dtype)


class PackedImageDataset(Dataset[tuple[Any, Any]]):
    """A packed dataset of any backend; prefer :func:`open_dataset` or a backend's class.

    Args:
        root: The DST of a finished ``packer convert``, or the URL it was published to with
            ``packer push`` (``s3://bucket/prefix``, ``gs://``, ``az://``, ``http(s)://``).
        transform: Applied to each image (any callable: torchvision, PIL or plain torch).
        target_transform: Applied to each class index.
        decode: ``False`` returns the stored bytes instead of a PIL image (for your own or a
            GPU decoder); ``transform`` then receives the bytes.
        storage_options: For a URL: credentials, endpoint, ``retries``, ``timeout`` (else the
            cloud's usual environment variables and config files).
        cache_dir: For a URL: the node's cache directory (default ``$PACKER_CACHE``, else
            ``~/.cache/packer``), shared by every worker, rank and job on the machine.
        cache_limit: For a URL: the cache's bound, bytes or a size such as ``"50GB"``
            (default: none but a free-space floor of 1 GiB).
        mode: For a URL: ``"whole"`` stages whole shards in the cache, ``"ranged"`` fetches
            records as byte ranges; ``"auto"`` (default) stages when the cache holds the dataset.
            ``access_mode`` says which was chosen.
        version: The version to read (default: the current one). Under DDP, have rank 0 open
            the dataset and pass its ``manifest.version`` to the others, so that a push or an
            update during start-up cannot give ranks different versions.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: the directory is
            not a complete, intact packer dataset; the message says what to do.
        StoreError: a URL cannot be reached, is missing, or refuses the credentials.
    """

    backend: ClassVar[str | None] = None
    #: Whether this class reads samples with fields (a dict each); the ImageFolder classes do not.
    reads_fields: ClassVar[bool] = False

    def __init__(
        self,
        root: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        *,
        decode: bool = True,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        mode: str = "auto",
        version: int | None = None,
    ) -> None:
        self.transform = transform
        self.target_transform = target_transform
        self.decode = decode
        self._open_shards(shard_set_of(root, storage_options=storage_options, cache_dir=cache_dir,
                                     cache_limit=cache_limit, mode=mode, version=version))

    @classmethod
    def _over(cls, shards: ShardSet, transform: Callable[[Any], Any] | None,
              target_transform: Callable[[int], Any] | None, *, decode: bool) -> PackedImageDataset:
        """A dataset over a ShardSet already opened (:func:`open_dataset` loads the manifest once
        to pick the class); the same as ``cls(shards.root, ...)``."""
        dataset = cls.__new__(cls)
        dataset.transform, dataset.target_transform = transform, target_transform
        dataset.decode = decode
        dataset._open_shards(shards)
        return dataset

    def _open_shards(self, shards: ShardSet) -> None:
        """Take an opened ShardSet: check its backend, set the ImageFolder attributes."""
        self.root = shards.root
        manifest = shards.manifest
        if self.backend is not None and manifest.backend != self.backend:
            right = DATASET_CLASSES.get(manifest.backend, PackedImageDataset).__name__
            raise DatasetError(f"{self.root!r} holds {manifest.backend} shards, not {self.backend}: "
                               f"use {right} or packer.open_dataset().")
        if not self.reads_fields and not manifest.schema.is_imagefolder():
            raise DatasetError(f"{self.root!r} holds samples with the fields "
                               f"{', '.join(manifest.schema.names())}, not an image and a class: open it "
                               "with packer.open_dataset(), which returns a dict per sample.")
        self._shards = shards
        self._codec: Codec = get_codec(manifest.codec, manifest.codec_params)
        self._index = shards.index
        self.classes: list[str] = list(manifest.classes)
        self.class_to_idx: dict[str, int] = {name: i for i, name in enumerate(self.classes)}

    @property
    def manifest(self) -> Manifest:
        """The dataset's manifest (backend, codec, shards, skipped files...)."""
        return self._shards.manifest

    @property
    def access_mode(self) -> str:
        """How the shards are read: ``local``, or for a URL ``whole`` or ``ranged``."""
        return self._shards.access.mode

    @property
    def cache_room(self) -> int | None:
        """For a dataset read from a URL: the bytes its node cache may hold (its bound, else what
        its disk has free beyond the floor); None for a dataset on a local path."""
        cache = getattr(self._shards.access, "cache", None)
        if cache is None:
            return None
        if cache.limit is not None:
            return int(cache.limit)
        try:
            stats = os.statvfs(cache.directory)
        except OSError:
            return None
        return max(0, stats.f_bavail * stats.f_frsize - cache.min_free)

    @property
    def samples(self) -> Sequence[tuple[str, int]]:
        """``(relative_path, target)`` per sample in ImageFolder order, POSIX separators."""
        return _ListView(len(self), lambda i: (self._index.path(i), int(self._index.targets[i])))

    @property
    def imgs(self) -> Sequence[tuple[str, int]]:
        """Alias of :attr:`samples`, as in ImageFolder."""
        return self.samples

    @property
    def targets(self) -> Sequence[int]:
        """Class index per sample; ``np.asarray(ds.targets)`` is fast."""
        return _TargetsView(self._index.targets)

    @property
    def metadata(self) -> Sequence[dict[str, Any]]:
        """Per sample, the list file's other columns (``{}`` each for a folder tree or a list of
        only paths and labels). A read-only list-like view: each row is parsed when asked for,
        from a memory-mapped file, so no worker holds them as Python objects."""
        return _ListView(len(self), self._index.metadata)

    def __len__(self) -> int:
        return self._shards.manifest.num_samples

    def _finish(self, payload: bytes, target: int) -> tuple[Any, Any]:
        sample: Any = self._codec.decode(payload) if self.decode else payload
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, self._label(target)

    def _label(self, target: int) -> Any:
        return target if self.target_transform is None else self.target_transform(target)

    def _normalise(self, index: int) -> int:
        index = int(index)
        return index + len(self) if index < 0 else index

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        index = self._normalise(index)
        payload = self._shards.read(index)
        return self._finish(payload, int(self._index.targets[index]))

    def __getitems__(self, indices: Sequence[int]) -> Sequence[tuple[Any, Any]]:
        """A batch in one read per shard (used by ``DataLoader`` automatically).

        With ``decode=False`` and a :class:`~packer.read.transforms.BatchTransform` (packer's fast
        transforms), the whole batch goes through the transform in one call, straight from
        reused read memory into one ``uint8`` batch tensor, which ``default_collate`` then
        passes on without a copy (:mod:`packer.read.batching`); each sample is a view of it.
        """
        wanted = [self._normalise(i) for i in indices]
        targets = self._index.targets
        if not self.decode and isinstance(self.transform, BatchTransform):
            out = new_batch_tensor((len(wanted), 3, *self.transform.size))
            images = self.transform.batch(self._shards.read_batch(wanted), out=out)
            return batch_samples(images, [self._label(int(targets[i])) for i in wanted])
        payloads = self._shards.read_many(wanted)
        return [self._finish(p, int(targets[i])) for p, i in zip(payloads, wanted, strict=True)]

    def close(self) -> None:
        """Close open shard handles now (they reopen on the next read)."""
        self._shards.close()

    def __getstate__(self) -> dict[str, Any]:
        # The shard set pickles the version the parent opened (a worker started after `packer
        # update` reads it too) and, for a URL, the manifest and the access chosen.
        return {"shards": self._shards, "transform": self.transform,
                "target_transform": self.target_transform, "decode": self.decode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.transform = state["transform"]
        self.target_transform = state["target_transform"]
        self.decode = state["decode"]
        self._open_shards(state["shards"])

    def __repr__(self) -> str:
        m = self.manifest
        remote = "" if self.access_mode == "local" else f", access={self.access_mode!r}"
        return (f"{type(self).__name__}(root={self.root!r}, samples={len(self)}, "
                f"classes={len(self.classes)}, backend={m.backend!r}, codec={m.codec!r}{remote})")


class LMDBImageDataset(PackedImageDataset):
    """A dataset converted with ``--to lmdb``."""

    backend = "lmdb"


class HDF5ImageDataset(PackedImageDataset):
    """A dataset converted with ``--to hdf5``."""

    backend = "hdf5"


def shard_set_of(root: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None,
                 cache_dir: str | os.PathLike[str] | None, cache_limit: int | str | None,
                 mode: str, version: int | None) -> ShardSet:
    """The dataset's shard set; a URL's through the node cache that the arguments describe."""
    cache = NodeCache(cache_dir, limit=cache_limit) if is_url(root) else None
    return ShardSet(root, version, storage_options=storage_options, cache=cache, mode=mode)


DATASET_CLASSES: dict[str, type[PackedImageDataset]] = {
    "lmdb": LMDBImageDataset, "hdf5": HDF5ImageDataset}
