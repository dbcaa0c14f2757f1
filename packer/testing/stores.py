"""The contract of a store: what :class:`StoreContract` checks.

A store holds the files of one dataset by key (:class:`~packer.store.base.Store`). The contract
checks each method's promise (whole reads, ranges at the edges, sizes, atomic replacing puts,
puts only if absent (one winner among racing creators), uploads of files, recursive listings,
deletes), that a missing key is an ``ObjectNotFoundError`` however it is asked for, that a
store pickles as its URL and options, that a read-only store refuses writes up front, and that
a dataset copied into the store reads back sample for sample, as whole shards and as byte ranges.

The store is opened from ``url`` (``{tmp_path}`` is replaced by the test's temporary folder,
``{unique}`` by a fresh name), so a plugin's class is one line::

    from packer.testing import StoreContract

    class TestMyStore(StoreContract):
        url = "mystore://{tmp_path}/root"
        store_class = MyStore   # registered for the scheme during the tests, if it is not

A store that needs a server overrides the ``store`` fixture; a read-only one overrides
:meth:`StoreContract.put_objects` to place the objects it reads.
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest

from packer.conversion.run import convert
from packer.errors import ObjectNotFoundError, StoreError
from packer.format.manifest import MANIFEST_NAME
from packer.format.shardset import ShardSet
from packer.store.base import Store
from packer.store.cache.node import NodeCache
from packer.store.urls import STORES, open_store, register_store, scheme_of
from packer.testing.plugins import registered
from packer.testing.snapshots import files_under
from packer.testing.trees import image_tree

__all__ = ["StoreContract"]

_BLOB = bytes(range(256)) * 40 + b"tail"  # 10 244 bytes, every byte value


class StoreContract:
    """Every promise of a store; subclass it with ``url`` set (see the module docstring)."""

    url: ClassVar[str] = ""
    storage_options: ClassVar[Mapping[str, Any] | None] = None
    #: Registered for the URL's scheme during the tests, when no store serves it yet.
    store_class: ClassVar[type[Store] | None] = None

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        """The store under test, over a fresh, empty root."""
        url = self.url.format(tmp_path=tmp_path.as_posix(), unique=uuid.uuid4().hex[:12])
        scheme = scheme_of(url)
        if scheme == "file":
            yield open_store(url, self.storage_options)
            return
        with registered(STORES, scheme, self.store_class, lambda cls: register_store(scheme, cls)):
            yield open_store(url, self.storage_options)

    def put_objects(self, store: Store, objects: Mapping[str, bytes]) -> None:
        """Place ``objects`` (key -> bytes) in ``store``; read-only stores override this."""
        for key, data in objects.items():
            store.put(key, data)

    @staticmethod
    def writable(store: Store) -> None:
        """Skip the calling test on a read-only store."""
        if store.read_only:
            pytest.skip(f"{store!r} is read-only")

    # -- reading --------------------------------------------------------------------------

    def test_whole_reads_ranges_and_sizes(self, store: Store) -> None:
        self.put_objects(store, {"a/b/blob.bin": _BLOB, "empty": b"", "top.txt": b"hello"})
        assert store.read("a/b/blob.bin") == _BLOB and store.read("empty") == b""
        assert store.stat("a/b/blob.bin") == len(_BLOB) and store.stat("empty") == 0
        size = len(_BLOB)
        for start, stop in ((0, 1), (3, 700), (size - 5, size), (0, size), (700, 700)):
            assert store.read_range("a/b/blob.bin", start, stop) == _BLOB[start:stop], (start, stop)
        assert store.read_range("a/b/blob.bin", size - 4, size + 100) == _BLOB[-4:], \
            "a range past the end gives the bytes there are"
        ranges = [(size - 10, size), (0, 3), (100, 4000), (0, 3), (5, 5)]
        assert store.read_ranges("a/b/blob.bin", ranges) == [_BLOB[a:b] for a, b in ranges]
        assert store.sizes(["top.txt", "a/b/blob.bin", "nope", "a/b"]) == {
            "top.txt": 5, "a/b/blob.bin": size, "nope": None, "a/b": None}
        assert store.exists("top.txt") and not store.exists("nope") and not store.exists("a/b")
        assert "blob.bin" in store.describe("a/b/blob.bin")

    def test_missing_keys_are_object_not_found(self, store: Store) -> None:
        self.put_objects(store, {"there": b"x"})
        for ask in (lambda: store.stat("nope"), lambda: store.read("nope"),
                    lambda: store.read_range("nope", 0, 3), lambda: store.read("dir/nope")):
            with pytest.raises(ObjectNotFoundError) as caught:
                ask()
            assert "nope" in str(caught.value)
            assert isinstance(caught.value, FileNotFoundError)

    def test_pickles_as_its_url(self, store: Store) -> None:
        self.put_objects(store, {"k": b"value"})
        assert store.read("k") == b"value"  # any client now exists in this process
        blob = pickle.dumps(store)
        again = pickle.loads(blob)
        assert type(again) is type(store) and again.url == store.url
        assert dict(again.options()) == dict(store.options())
        assert again.read("k") == b"value" and again.read_range("k", 1, 3) == b"al"

    def test_a_dataset_in_the_store_reads_back(self, store: Store, tmp_path: Path) -> None:
        tree = image_tree(tmp_path / "src", count=9)
        local = tmp_path / "local"
        convert(tree.root, local, to="lmdb", shard_size="2kB", workers=1)
        files = files_under(local)
        manifest = files.pop(MANIFEST_NAME)
        self.put_objects(store, {**files, MANIFEST_NAME: manifest})  # the manifest last, as push does
        want = [tree.read(relpath) for relpath, _ in tree.samples]
        for mode in ("whole", "ranged"):
            cache = NodeCache(tmp_path / f"cache-{mode}", min_free=0)
            shards = ShardSet(store, cache=cache, mode=mode)
            assert [shards.read(i) for i in range(len(shards))] == want, mode

    # -- writing --------------------------------------------------------------------------

    def test_put_replaces_whole(self, store: Store) -> None:
        self.writable(store)
        store.put("x/y.bin", _BLOB)
        store.put("x/y.bin", b"short")
        assert store.read("x/y.bin") == b"short" and store.stat("x/y.bin") == 5

    def test_put_file_uploads_a_local_file(self, store: Store, tmp_path: Path) -> None:
        self.writable(store)
        local = tmp_path / "upload.bin"
        data = os.urandom(3 << 20) + b"end"
        local.write_bytes(data)
        store.put_file("deep/down/upload.bin", str(local))
        assert store.stat("deep/down/upload.bin") == len(data)
        assert store.read("deep/down/upload.bin") == data
        assert local.read_bytes() == data  # the source file is left alone

    def test_list_is_recursive_with_sizes(self, store: Store) -> None:
        self.writable(store)
        objects = {"index.json": b"{}", "samples/a.npy": b"1234", "samples/deep/b.npy": b"12",
                   "shard-1.lmdb": b"x" * 300, "samplesake": b"not under samples/"}
        self.put_objects(store, objects)
        assert store.list() == {key: len(data) for key, data in objects.items()}
        assert store.list("samples/") == {"samples/a.npy": 4, "samples/deep/b.npy": 2}
        assert store.list("samples") == {"samples/a.npy": 4, "samples/deep/b.npy": 2}
        assert store.list("nothing-here/") == {}

    def test_delete_removes_and_forgives_missing_keys(self, store: Store) -> None:
        self.writable(store)
        self.put_objects(store, {"a/one": b"1", "a/two": b"2"})
        store.delete("a/one")
        store.delete("a/one")  # gone already: no error
        store.delete("never/was")
        assert not store.exists("a/one") and store.read("a/two") == b"2"
        assert store.list("a/") == {"a/two": 1}

    def test_put_if_absent_creates_a_key_once(self, store: Store) -> None:
        self.writable(store)
        try:
            first = store.put_if_absent("lease/key.json", b"first")
        except StoreError:
            pytest.skip(f"{store!r} cannot create a key only if it is absent (it can hold no lease)")
        assert first and not store.put_if_absent("lease/key.json", b"second")
        assert store.read("lease/key.json") == b"first", "a refused create leaves the key alone"
        store.delete("lease/key.json")
        assert store.put_if_absent("lease/key.json", b"third") and store.read("lease/key.json") == b"third"
        with ThreadPoolExecutor(8) as pool:  # racing creators: exactly one wins
            won = list(pool.map(lambda n: store.put_if_absent("lease/race.json", b"%d" % n), range(8)))
        assert won.count(True) == 1 and store.read("lease/race.json") == b"%d" % won.index(True)

    def test_check_writable_tells_up_front(self, store: Store) -> None:
        if not store.read_only:
            store.check_writable()
            return
        with pytest.raises(StoreError, match="read-only"):
            store.check_writable()
        with pytest.raises(StoreError):
            store.put("k", b"v")
