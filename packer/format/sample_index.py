"""Per-sample labels and relative paths, as compact arrays shared through the page cache.

Layout inside DST (the manifest's ``sample_index`` maps each key to its file):

* ``targets``, ``samples/targets-<h>.npy``: ``int64[N]``, the class index of each packed sample;
* ``path_offsets``, ``samples/path_offsets-<h>.npy``: ``int64[N+1]``; path ``i`` is
  ``paths[o[i]:o[i+1]]``;
* ``paths``, ``samples/paths-<h>.bin``: every relative path (POSIX separators) as UTF-8 with
  ``surrogateescape``, so names that are not valid UTF-8 round-trip to the same bytes;
* ``sources``, ``samples/sources-<h>.npy``: ``int64[N, 3]``, each sample's source file size,
  mtime (ns) and the first 8 bytes of its SHA-256, for ``packer update`` (format 2);
* ``records``, ``samples/records-<h>.npy``: ``int64[N, 3]``, where each sample's payload lies in
  its shard file and a digest of it (:mod:`packer.format.records`), for remote reads;
* only for a list source with columns besides path and label: ``metadata_offsets`` and
  ``metadata`` (``.npy`` and ``.bin``), each sample's other columns as one JSON object, cut the
  same way.

``<h>`` is the start of the file's SHA-256: like shards, index files are named by their
contents and never rewritten, so every version of a dataset names its own (format 1 used the
plain names, ``samples/targets.npy``, which readers still accept through the manifest).

Readers memory-map these files lazily, so a million samples cost every DataLoader worker
almost nothing (no Python list per worker: the copy-on-read growth of pytorch issue 13246).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import ShardError
from packer.format.access import DatasetAccess, LocalAccess
from packer.format.manifest import FileEntry, Manifest
from packer.store.durable import atomic_write_bytes
from packer.store.local import LocalStore

__all__ = ["INDEX_FILES", "METADATA_FILES", "SAMPLES_DIR", "SampleIndex",
           "estimate_index_bytes", "write_index_file", "write_sample_index"]

SAMPLES_DIR: Final = "samples"
#: Every dataset's index files, by key: their names in format 1 (format 2 adds a content hash).
INDEX_FILES: Final[dict[str, str]] = {
    "targets": "samples/targets.npy",
    "path_offsets": "samples/path_offsets.npy",
    "paths": "samples/paths.bin",
}
#: Only for list sources: each sample's other columns, one JSON object per sample, cut the same way.
METADATA_FILES: Final[dict[str, str]] = {
    "metadata_offsets": "samples/metadata_offsets.npy",
    "metadata": "samples/metadata.bin",
}
#: Every index file's plain name (format 1's); ``sources``, ``int64[N, 3]``, is format 2's.
_PLAIN_NAMES: Final = {**INDEX_FILES, "sources": "samples/sources.npy", "records": "samples/records.npy",
                       **METADATA_FILES}

#: The header numpy writes before an array in a ``.npy`` file (format 1.0, padded to 128).
_NPY_HEADER = 128


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _cut(strings: Sequence[str]) -> tuple[bytes, bytes]:
    """``(int64 offsets as .npy, the UTF-8 strings back to back)``: string ``i`` is
    ``blob[offsets[i]:offsets[i + 1]]``."""
    encoded = [s.encode("utf-8", "surrogateescape") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return _npy_bytes(offsets), b"".join(encoded)


def _content_name(plain: str, digest: str) -> str:
    """``samples/targets.npy`` -> ``samples/targets-<first 16 hex of its SHA-256>.npy``."""
    stem, dot, suffix = plain.rpartition(".")
    return f"{stem}-{digest[:16]}{dot}{suffix}"


def write_sample_index(root: str, relpaths: Sequence[str], targets: Sequence[int],
                       sources: Sequence[tuple[int, int, int]] | np.ndarray,
                       metadata: Sequence[str] | None = None,
                       records: np.ndarray | None = None, *,
                       digest: DigestAlgorithm = SHA256) -> dict[str, FileEntry]:
    """Write the sample-index files under ``root`` durably, each named and checksummed by
    ``digest`` (the dataset's algorithm); return their manifest entries.

    ``sources`` holds each sample's source ``(size, mtime_ns, short hash)``; ``metadata`` (a
    list source's other columns, one JSON object per sample) adds two files, ``records``
    (:mod:`packer.format.records`) one. A file already
    there under its content name holds these bytes (an earlier version's) and is kept.
    """
    path_offsets, paths = _cut(relpaths)
    contents = {"targets": _npy_bytes(np.asarray(targets, dtype=np.int64)),
                "path_offsets": path_offsets, "paths": paths,
                "sources": _npy_bytes(np.asarray(sources, dtype=np.int64).reshape(len(relpaths), 3))}
    if records is not None:
        contents["records"] = _npy_bytes(np.asarray(records, dtype=np.int64).reshape(len(relpaths), 3))
    if metadata is not None:
        contents["metadata_offsets"], contents["metadata"] = _cut(metadata)
    return {name: write_index_file(root, name, data, digest=digest) for name, data in contents.items()}


def write_index_file(root: str, key: str, data: bytes | np.ndarray, *,
                     digest: DigestAlgorithm = SHA256) -> FileEntry:
    """Write one sample-index file (``key``: ``targets``, ``sources``, ...; an array is saved
    as ``.npy``) under ``root`` durably, named by its contents; return its manifest entry. A
    file already there under that name holds these bytes (an earlier version's) and is kept."""
    if isinstance(data, np.ndarray):
        data = _npy_bytes(data)
    checksum = digest.hex(data)
    relative = _content_name(_PLAIN_NAMES[key], checksum)
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not (os.path.isfile(path) and os.path.getsize(path) == len(data)):
        atomic_write_bytes(path, data)
    return FileEntry(relative, len(data), checksum)


def estimate_index_bytes(num_samples: int, path_bytes: int) -> int:
    """Bytes of the sample index files for ``num_samples`` paths of ``path_bytes`` in all:
    four ``.npy`` files (128-byte headers; int64 targets, ``n + 1`` offsets, ``3 n`` source
    fields and ``3 n`` record fields) and the paths."""
    return 4 * _NPY_HEADER + 64 * num_samples + 8 + path_bytes


class SampleIndex:
    """Lazily memory-mapped labels and paths of a packed dataset; cheap to pickle.

    ``entries`` are the manifest's ``sample_index`` (:meth:`of`); ``root`` is the dataset's
    directory, or the :class:`~packer.format.access.DatasetAccess` of a dataset behind a URL,
    which fetches each file into the node cache on first use.
    """

    def __init__(self, root: str | DatasetAccess, num_samples: int, entries: Mapping[str, FileEntry]) -> None:
        self.access = root if isinstance(root, DatasetAccess) else LocalAccess(LocalStore(root))
        self.root = self.access.store.url
        self.num_samples = num_samples
        self.entries = dict(entries)
        self.files = {key: entry.path for key, entry in self.entries.items()}
        self._records: np.ndarray | None = None
        self._targets: np.ndarray | None = None
        self._offsets: np.ndarray | None = None
        self._paths: np.ndarray | None = None
        self._metadata: tuple[np.ndarray, np.ndarray] | None = None
        self._metadata_absent = False  # known after the first look: no stat per sample

    @classmethod
    def of(cls, root: str | DatasetAccess, manifest: Manifest) -> SampleIndex:
        """The sample index of ``manifest``'s version of the dataset at ``root``."""
        return cls(root, manifest.num_samples, manifest.sample_index)

    def _local(self, name: str) -> str:
        return self.access.index_file(self.entries[name])

    def _map(self, name: str) -> np.ndarray:
        path = self._local(name)
        if name in ("paths", "metadata"):
            if os.path.getsize(path) == 0:
                return np.zeros(0, dtype=np.uint8)
            return np.memmap(path, dtype=np.uint8, mode="r")
        try:
            array: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as err:  # object arrays (pickles) are refused, never loaded; or not a .npy
            raise ShardError(f"{path} is not a plain numeric array ({err}): the dataset's sample index is "
                             "damaged or was crafted; restore it from a copy, or convert again.") from err
        if array.dtype.kind not in "iu":
            raise ShardError(f"{path} holds {array.dtype} values, not integers: the dataset's sample index "
                             "is damaged or was crafted; restore it from a copy, or convert again.")
        return array

    @property
    def records(self) -> np.ndarray:
        """``int64[N, 3]``: each payload's offset and length in its shard file and a digest
        (:mod:`packer.format.records`), memory-mapped read-only.

        Raises:
            KeyError: the dataset was converted before records were kept.
        """
        if self._records is None:
            self._records = self._map("records")
        return self._records

    @property
    def targets(self) -> np.ndarray:
        """``int64[N]`` class indices, memory-mapped read-only."""
        if self._targets is None:
            self._targets = self._map("targets")
        return self._targets

    def path(self, index: int) -> str:
        """Relative POSIX path of sample ``index``."""
        offsets, blob = self._offsets, self._paths
        if offsets is None or blob is None:
            offsets, blob = self._map("path_offsets"), self._map("paths")
            self._offsets, self._paths = offsets, blob
        start, stop = int(offsets[index]), int(offsets[index + 1])
        return bytes(blob[start:stop]).decode("utf-8", "surrogateescape")

    def inconsistencies(self) -> list[tuple[str, str]]:
        """What is wrong with the index files, as ``(file key in INDEX_FILES, what)`` pairs.

        Checks shapes and dtypes against ``num_samples`` and that the offsets cut the paths
        blob in order; empty when the index is sound.

        Raises:
            OSError, ValueError: a file is missing or is not a readable ``.npy`` array.
        """
        n = self.num_samples
        targets, offsets = self.targets, self._map("path_offsets")
        paths_size = os.path.getsize(self._local("paths"))
        wrong: list[tuple[str, str]] = []
        if targets.shape != (n,) or targets.dtype.kind not in "iu":
            wrong.append(("targets", f"holds {targets.dtype}{list(targets.shape)}, expected "
                                     f"int64[{n}] for the {n} samples of the shards"))
        if offsets.shape != (n + 1,) or offsets.dtype.kind not in "iu":
            wrong.append(("path_offsets", f"holds {offsets.dtype}{list(offsets.shape)}, expected "
                                          f"int64[{n + 1}]"))
        elif int(offsets[0]) != 0 or int(offsets[-1]) != paths_size or bool(np.any(np.diff(offsets) < 0)):
            wrong.append(("path_offsets", f"offsets do not cut the {paths_size} bytes of paths.bin "
                                          "in order"))
        return wrong

    @property
    def has_metadata(self) -> bool:
        """Whether the dataset came from a list file with columns besides path and label."""
        return "metadata" in self.files and os.path.exists(self._local("metadata"))

    def metadata(self, index: int) -> dict[str, Any]:
        """Sample ``index``'s other list columns (``{}`` when there are none), parsed on demand:
        nothing is held per sample in memory."""
        if self._metadata is None:
            if self._metadata_absent or not self.has_metadata:
                self._metadata_absent = True
                return {}
            self._metadata = (self._map("metadata_offsets"), self._map("metadata"))
        offsets, blob = self._metadata
        start, stop = int(offsets[index]), int(offsets[index + 1])
        value: dict[str, Any] = json.loads(bytes(blob[start:stop]).decode("utf-8", "surrogateescape"))
        return value

    @property
    def sources(self) -> np.ndarray | None:
        """``int64[N, 3]``: each sample's source size, mtime (ns) and short hash; None before format 2."""
        if "sources" not in self.files:
            return None
        return self._map("sources")

    def __getstate__(self) -> dict[str, object]:
        where = self.root if isinstance(self.access, LocalAccess) else self.access
        return {"root": where, "num_samples": self.num_samples, "entries": self.entries}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], state["num_samples"], state["entries"])  # type: ignore[misc]
