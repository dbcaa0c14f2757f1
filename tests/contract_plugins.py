"""Third-party implementations of every extension point, written as a plugin author would.

tests/test_contracts.py runs packer's contract suites (:mod:`packer.testing`) for them exactly as
for the built-ins; each is registered through the public register function only for its tests.
They live in a module of their own so that spawned conversion workers can import them.

* ``recordlog`` backend: one file, a length-prefixed record log and an offsets footer;
* ``png-test`` codec: every image re-encoded as PNG (lossless, not the source's bytes);
* ``pool`` engine: a ``ProcessPoolExecutor`` behind :class:`ExecutorEngine`;
* ``dirstore://`` store: a plain directory that is not treated as local (everything is fetched);
* ``keyedcsv`` source: a CSV of image files with their sample keys and classes.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import io
import multiprocessing
import os
import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from packer.conversion.engines import Engine, ExecutorEngine
from packer.conversion.engines.select import EngineRequest
from packer.errors import ObjectNotFoundError, ShardError, SourceError
from packer.format.backends import Backend, ShardReader, ShardWriter
from packer.format.codecs import Codec, ExportFormat, check_image
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem
from packer.store.base import Store

# -- backend -----------------------------------------------------------------------------------

_MAGIC, _END = b"RLOG0001", b"RLOGEND1"
_U64 = struct.Struct("<Q")


class RecordLogWriter(ShardWriter):
    """``RLOG0001``, then each record as ``<u64 length><payload>``, then the footer: the
    ``u64`` offset of every record, the record count and ``RLOGEND1``."""

    def __init__(self, path: str, *, capacity: int) -> None:
        super().__init__(path, capacity=capacity)
        self._offsets: list[int] = []
        self._finished = False
        try:
            self._file = open(path, "wb")  # noqa: SIM115 - closed in close/abort
            self._file.write(_MAGIC)
        except OSError as err:
            raise ShardError(f"Cannot create record log {path!r}: {err}") from err

    def write(self, payload: bytes) -> None:
        self._offsets.append(self._file.tell())
        self._file.write(_U64.pack(len(payload)) + payload)
        self.count += 1

    def finish(self) -> None:
        """Write the footer and flush: the file holds its final bytes (not yet synced)."""
        if self._finished:
            return
        footer = struct.pack(f"<{len(self._offsets)}Q", *self._offsets) + _U64.pack(len(self._offsets))
        self._file.write(footer + _END)
        self._file.flush()
        self._finished = True

    def close(self) -> None:
        if self._file.closed:
            return
        self.finish()
        os.fsync(self._file.fileno())
        self._file.close()

    def abort(self) -> None:
        self._file.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


def _footer(path: str, fd: int) -> np.ndarray:
    size = os.fstat(fd).st_size
    tail = os.pread(fd, 16, size - 16) if size >= 24 else b""
    if len(tail) != 16 or tail[8:] != _END or os.pread(fd, 8, 0) != _MAGIC:
        raise ShardError(f"{path!r} is not a record log")
    count = _U64.unpack(tail[:8])[0]
    return np.frombuffer(os.pread(fd, 8 * count, size - 16 - 8 * count), dtype="<u8").astype(np.int64)


class RecordLogReader(ShardReader):
    """Reads a record log: the footer once per process, then one ``pread`` per record."""

    _fd: int | None = None
    _offsets: np.ndarray | None = None

    def _open(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as err:
            raise ShardError(f"Cannot open record log {self.path!r}: {err}") from err
        try:
            offsets = _footer(self.path, fd)
        except ShardError:
            os.close(fd)
            raise
        if len(offsets) != self.num_samples:
            os.close(fd)
            raise ShardError(f"{self.path!r} holds {len(offsets)} records, not {self.num_samples}")
        self._fd, self._offsets = fd, offsets

    def _read_many(self, indices: Sequence[int]) -> list[bytes]:
        if self._fd is None or self._offsets is None:
            raise ShardError(f"record log {self.path!r} is not open")
        out = []
        for index in indices:
            start = int(self._offsets[index])
            length = _U64.unpack(os.pread(self._fd, 8, start))[0]
            out.append(os.pread(self._fd, length, start + 8))
        return out

    def stored_count(self) -> int:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return len(_footer(self.path, fd))
        finally:
            os.close(fd)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._offsets = None


def record_log_size(sizes: Sequence[int]) -> int:
    return len(_MAGIC) + sum(8 + size for size in sizes) + 8 * len(sizes) + 8 + len(_END)


def record_log_ranges(path: str, num_samples: int) -> np.ndarray:
    fd = os.open(path, os.O_RDONLY)
    try:
        offsets = _footer(path, fd)
        ends = np.append(offsets[1:], os.fstat(fd).st_size - 16 - 8 * len(offsets))
    finally:
        os.close(fd)
    return np.stack([offsets + 8, ends - offsets - 8], axis=1).reshape(num_samples, 2)


RECORD_LOG = Backend(name="recordlog", suffix=".rlog", writer=RecordLogWriter, reader=RecordLogReader,
                     description="one file: length-prefixed records and an offsets footer",
                     estimate=record_log_size, ranges=record_log_ranges)

# -- codec -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PngCodec(Codec):
    """Every image stored as a lossless PNG of its RGB pixels."""

    name: ClassVar[str] = "png-test"
    takes: ClassVar[tuple[str, ...]] = ("level",)
    level: int = 6

    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        check_image(data, check="full", max_pixels=max_pixels)
        buffer = io.BytesIO()
        with Image.open(io.BytesIO(data)) as image:
            image.convert("RGB").save(buffer, "PNG", compress_level=self.level)
        return buffer.getvalue()

    def decode(self, data: bytes) -> Image.Image:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")

    def params(self) -> dict[str, Any]:
        return {"level": self.level}

    def planned_bytes(self, image_size: tuple[int, int] | None, size: int) -> int:
        return max(size, 1) if image_size is None else image_size[0] * image_size[1] * 3 + 64

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> PngCodec:
        return cls(level=params.get("level", 6))

    def export_format(self) -> ExportFormat:
        return ExportFormat(".png", (".png",), "the pixels as PNG files")

# -- engine ------------------------------------------------------------------------------------


@contextmanager
def open_pool(request: EngineRequest) -> Iterator[Engine]:
    """``pool``: ``workers`` spawned processes of a ``ProcessPoolExecutor``."""
    workers = request.workers or 2
    # spawn: a forked child of a process with threads (a Dask client's, fsspec's) can deadlock
    with cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield ExecutorEngine(pool, workers, name="pool")

# -- store -------------------------------------------------------------------------------------


class DirectoryStore(Store):
    """``dirstore:///abs/path``: a directory read like a remote store, through the cache."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url.rstrip("/"))
        self.root = self.url[len("dirstore://"):]

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def _missing(self, key: str) -> ObjectNotFoundError:
        return ObjectNotFoundError(f"{self.describe(key)} does not exist")

    def stat(self, key: str) -> int:
        if not os.path.isfile(self._path(key)):
            raise self._missing(key)
        return os.path.getsize(self._path(key))

    def read(self, key: str) -> bytes:
        return self.read_range(key, 0, self.stat(key))

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        try:
            with open(self._path(key), "rb") as handle:
                return os.pread(handle.fileno(), max(stop - start, 0), start)
        except (FileNotFoundError, IsADirectoryError) as err:
            raise self._missing(key) from err

    def sizes(self, keys: Sequence[str]) -> dict[str, int | None]:
        return {key: os.path.getsize(self._path(key)) if os.path.isfile(self._path(key)) else None
                for key in keys}

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".part", "wb") as handle:
            handle.write(data)
        os.replace(path + ".part", path)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Link a written file into place: the link fails where the key exists."""
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = f"{path}.{uuid.uuid4().hex}.part"
        with open(part, "wb") as handle:
            handle.write(data)
        try:
            os.link(part, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(part)
        return True

    def put_file(self, key: str, path: str) -> None:
        with open(path, "rb") as handle:
            self.put(key, handle.read())

    def list(self, prefix: str = "") -> dict[str, int]:
        top = self._path(prefix.rstrip("/"))
        found = {}
        for folder, _, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                found[os.path.relpath(path, self.root).replace(os.sep, "/")] = os.path.getsize(path)
        return found

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"])  # type: ignore[misc]

# -- source ------------------------------------------------------------------------------------


class KeyedFileReader(ItemReader):
    """Reads each item from the file its locator names (an index into the list of files)."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = list(files)

    def read(self, item: SourceItem) -> bytes:
        path = self.files[item.locator[0]]
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as err:
            raise SourceError(f"{path!r} vanished or cannot be read ({err.strerror}): restore it, then "
                              "convert again with resume=True") from err

    def where(self, relpath: str) -> str:
        return f"keyed CSV entry {relpath}"


class KeyedCSVSource(Source):
    """A CSV of ``key,class,file`` rows: sample keys, class names and absolute image files."""

    kind: ClassVar[str] = "keyedcsv"

    def scan(self) -> SourceIndex:
        with open(self.location, newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.DictReader(handle)]
        classes = tuple(sorted({row["class"] for row in rows}))
        label = {name: i for i, name in enumerate(classes)}
        items = []
        for number, row in enumerate(rows):
            stat = os.stat(row["file"])
            items.append(SourceItem(row["key"], label[row["class"]], stat.st_size, stat.st_mtime_ns,
                                    (number,)))
        self._files = [row["file"] for row in rows]
        return SourceIndex(os.path.dirname(self.location), classes, tuple(items), ScanReport())

    def reader(self) -> ItemReader:
        return KeyedFileReader(self._files)
