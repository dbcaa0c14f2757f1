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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, overload

import numpy as np
from torch.utils.data import Dataset

from packer.errors import DatasetError
from packer.format.codecs import Codec, get_codec
from packer.format.manifest import Manifest
from packer.format.sample_index import SampleIndex
from packer.format.shardset import ShardSet
from packer.read.batching import batch_samples, new_batch_tensor
from packer.read.transforms import BatchTransform

__all__ = ["HDF5ImageDataset", "LMDBImageDataset", "PackedImageDataset", "open_dataset"]


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
        root: The DST of a finished ``packer convert``.
        transform: Applied to each image (any callable: torchvision, PIL or plain torch).
        target_transform: Applied to each class index.
        decode: ``False`` returns the stored bytes instead of a PIL image (for your own or a
            GPU decoder); ``transform`` then receives the bytes.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: the directory is
            not a complete, intact packer dataset; the message says what to do.
    """

    backend: ClassVar[str | None] = None

    def __init__(
        self,
        root: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        *,
        decode: bool = True,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.transform = transform
        self.target_transform = target_transform
        self.decode = decode
        self._open_shards()

    @classmethod
    def _over(cls, shards: ShardSet, transform: Callable[[Any], Any] | None,
              target_transform: Callable[[int], Any] | None, *, decode: bool) -> PackedImageDataset:
        """A dataset over a ShardSet already opened (:func:`open_dataset` loads the manifest once
        to pick the class); the same as ``cls(shards.root, ...)``."""
        dataset = cls.__new__(cls)
        dataset.root, dataset.transform, dataset.target_transform = shards.root, transform, target_transform
        dataset.decode = decode
        dataset._open_shards(shards)
        return dataset

    def _open_shards(self, opened: ShardSet | None = None) -> None:
        """Load the manifest and check the files (``opened``: already done by open_dataset)."""
        shards = opened if opened is not None and opened.root == self.root else ShardSet(self.root)
        manifest = shards.manifest
        if self.backend is not None and manifest.backend != self.backend:
            right = _CLASSES.get(manifest.backend, PackedImageDataset).__name__
            raise DatasetError(f"{self.root!r} holds {manifest.backend} shards, not {self.backend}: "
                               f"use {right} or packer.open_dataset().")
        self._shards = shards
        self._codec: Codec = get_codec(manifest.codec, manifest.codec_params)
        self._index = SampleIndex.of(self.root, manifest)
        self.classes: list[str] = list(manifest.classes)
        self.class_to_idx: dict[str, int] = {name: i for i, name in enumerate(self.classes)}

    @property
    def manifest(self) -> Manifest:
        """The dataset's manifest (backend, codec, shards, skipped files...)."""
        return self._shards.manifest

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
        return {"root": self.root, "transform": self.transform, "version": self.manifest.version,
                "target_transform": self.target_transform, "decode": self.decode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root = state["root"]
        self.transform = state["transform"]
        self.target_transform = state["target_transform"]
        self.decode = state["decode"]
        # The version the parent opened: a worker started after `packer update` reads it too.
        self._open_shards(ShardSet(self.root, state.get("version")))

    def __repr__(self) -> str:
        m = self.manifest
        return (f"{type(self).__name__}(root={self.root!r}, samples={len(self)}, "
                f"classes={len(self.classes)}, backend={m.backend!r}, codec={m.codec!r})")


class LMDBImageDataset(PackedImageDataset):
    """A dataset converted with ``--to lmdb``."""

    backend = "lmdb"


class HDF5ImageDataset(PackedImageDataset):
    """A dataset converted with ``--to hdf5``."""

    backend = "hdf5"


_CLASSES: dict[str, type[PackedImageDataset]] = {"lmdb": LMDBImageDataset, "hdf5": HDF5ImageDataset}


def open_dataset(
    path: str | os.PathLike[str],
    transform: Callable[[Any], Any] | None = None,
    target_transform: Callable[[int], Any] | None = None,
    *,
    decode: bool = True,
) -> PackedImageDataset:
    """Open a packed dataset with the class for its backend.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: as the classes do.
    """
    shards = ShardSet(path)  # loaded once, then handed to the dataset
    cls = _CLASSES.get(shards.manifest.backend, PackedImageDataset)
    return cls._over(shards, transform, target_transform, decode=decode)
