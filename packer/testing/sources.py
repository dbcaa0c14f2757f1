"""The contract of a kind of source: what :class:`SourceContract` checks.

A source scans into items with identities and reads one item's bytes through a picklable
reader (:class:`~packer.source.base.Source`). The contract writes one generated tree (nested
folders, a non-ASCII name, a file that is no image) in the kind's own format, then checks that
scanning is deterministic and finds the tree's images in ImageFolder order, that identities do
not change between scans, that the reader pickles small and reads the tree's very bytes (with
dimensions and digests to match), and that converting the source gives the tree's dataset:
the same samples, labels, bytes, skipped files and shard files; ``verify_dataset(against=...)``
the source passes. One ``slow`` test converts with workers started by ``spawn`` (the reader
crosses into a fresh interpreter) and reads the result through a ``DataLoader`` whose two
workers are started by ``spawn`` too: every sample, once.

A kind needs one method besides its name: how to write a tree in its format::

    from packer.testing import SourceContract

    class TestMySource(SourceContract):
        kind = "mykind"               # a registered kind, or set source_class too
        source_class = MySource

        def write_source(self, tree, work):
            ...                       # write tree.root's images under work
            return work / "data.my", {}   # the location, and convert()'s source options
"""

from __future__ import annotations

import hashlib
import pickle
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from packer.conversion.run import convert
from packer.format.manifest import Manifest
from packer.source.base import Source, SourceIndex, SourceOptions
from packer.source.imagecheck import image_dimensions
from packer.source.registry import SOURCES, open_source, register_source
from packer.testing.plugins import registered
from packer.testing.trees import ImageTree, image_tree
from packer.tools.verify import verify_dataset

__all__ = ["KindOfSource", "SourceContract"]

SHARD_SIZE = "3KB"
#: The reference tree, this kind's source of it, and the options convert() needs for it.
Written = tuple[ImageTree, Path, dict[str, Any]]
_REFERENCES: dict[str, tuple[ImageTree, Manifest, list[bytes]]] = {}


def reference_tree(factory: pytest.TempPathFactory, backend: str) -> tuple[ImageTree, Manifest, list[bytes]]:
    """The tree every source contract writes, and its own conversion: made once per session."""
    key = f"{factory.getbasetemp()}:{backend}"
    if key not in _REFERENCES:
        from packer.read.opening import open_dataset  # torch: only when a test reads

        work = factory.mktemp("source-contract")
        tree = image_tree(work / "tree", count=18, nested=True)
        manifest = convert(tree.root, work / "tree.packed", to=backend, shard_size=SHARD_SIZE,
                           workers=1).manifest
        dataset = open_dataset(work / "tree.packed", decode=False)
        _REFERENCES[key] = (tree, manifest, [dataset[i][0] for i in range(len(dataset))])
    return _REFERENCES[key]


class KindOfSource:
    """What every source contract shares: the kind under test (registered for each test when
    not yet), the backend its conversions write, and the ``written`` fixture: the reference tree
    and the kind's source of it, from :meth:`write_source`."""

    kind: ClassVar[str]
    #: Registered under ``kind`` for the tests, when that name is not registered yet.
    source_class: ClassVar[type[Source] | None] = None
    #: False where the kind names classes its own way (numbers): labels must still match.
    same_class_names: ClassVar[bool] = True
    #: The backend the conversions write.
    backend: ClassVar[str] = "lmdb"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        """Write ``tree`` in this kind's format under ``work``; its location and options. Each
        contract says what it must hold; a subclass that does not define it fails its tests."""
        pytest.fail(f"{type(self).__name__} must define write_source(tree, work): how to write a "
                    f"tree as a {self.kind} source")

    @pytest.fixture(autouse=True)
    def _source_registered(self) -> Iterator[None]:
        kind = self.kind
        with registered(SOURCES, kind, self.source_class, lambda cls: register_source(kind, cls)):
            yield

    @pytest.fixture
    def written(self, tmp_path_factory: pytest.TempPathFactory,
                tmp_path: Path) -> Written:
        """The reference tree, and this kind's source of it (location, options)."""
        tree, _, _ = reference_tree(tmp_path_factory, self.backend)
        work = tmp_path / "source"
        work.mkdir()
        location, options = self.write_source(tree, work)
        return tree, location, {"source_format": self.kind, **options}


class SourceContract(KindOfSource):
    """Every promise of a kind of source; subclass it with ``kind`` and :meth:`write_source`
    (see the module docstring)."""

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        """Write ``tree``'s images, with their relative paths and classes, in this kind's format
        under ``work``; return the source's location and the options ``convert()`` needs
        (``root=...``, ``label_field=...``; the kind itself is added)."""
        return super().write_source(tree, work)

    def scan(self, location: Path, options: dict[str, Any]) -> tuple[SourceIndex, Source]:
        """Open the source as ``convert()`` does and scan it."""
        given = {key: value for key, value in options.items() if key != "source_format"}
        source = open_source(location, SourceOptions(format=self.kind, **given))
        return source.scan(), source

    def test_scans_the_same_items_in_imagefolder_order(self, written: Written) -> None:
        tree, location, options = written
        first, source = self.scan(location, options)
        again, other = self.scan(location, options)
        source.close()
        other.close()
        assert first.items == again.items and first.classes == again.classes, "scanning is not deterministic"
        relpaths = [item.relpath for item in first.items]
        assert len(set(relpaths)) == len(relpaths), "two items share a relative path"
        wanted = {relpath for relpath, _ in tree.samples}
        packable = [(item.relpath, item.label) for item in first.items if item.relpath in wanted]
        assert [rel for rel, _ in packable] == [rel for rel, _ in tree.samples], "items out of order"
        assert [label for _, label in packable] == [label for _, label in tree.samples]
        assert set(relpaths) <= wanted | set(tree.broken), sorted(set(relpaths) - wanted)
        if self.same_class_names:
            assert first.classes == tree.classes
        else:
            assert len(first.classes) == len(tree.classes)

    def test_identities_are_stable(self, written: Written) -> None:
        _, location, options = written
        first, source = self.scan(location, options)
        source.close()
        again, other = self.scan(location, options)
        other.close()
        assert [item.identity for item in first.items] == [item.identity for item in again.items]

    def test_reader_pickles_and_reads_the_tree_bytes(self, written: Written) -> None:
        tree, location, options = written
        index, source = self.scan(location, options)
        try:
            blob = pickle.dumps(source.reader())
            assert len(blob) < 65536, f"a pickled reader takes {len(blob)} bytes; tasks carry one each"
            reader = pickle.loads(blob)
            wanted = dict(tree.samples)
            for item in index.items:
                where = reader.where(item.relpath)  # for messages: names the file, somehow
                assert isinstance(where, str) and item.relpath.rsplit("/", 1)[-1] in where, where
                if item.relpath not in wanted or reader.known_skip(item) is not None:
                    continue
                data = tree.read(item.relpath)
                assert reader.read(item) == data, item.relpath
                assert reader.dimensions(item) == image_dimensions(data), item.relpath
                assert reader.digest(item) == hashlib.sha256(data).hexdigest(), item.relpath
        finally:
            source.close()

    def test_converts_to_the_tree_s_dataset(self, written: Written,
                                            tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
        from packer.read.opening import open_dataset

        tree, location, options = written
        _, expected, payloads = reference_tree(tmp_path_factory, self.backend)
        dst = tmp_path / "dst"
        manifest = convert(location, dst, to=self.backend, shard_size=SHARD_SIZE, workers=2,
                           **options).manifest
        assert manifest.extra["source"]["kind"] == self.kind
        dataset = open_dataset(dst, decode=False)
        assert [tuple(sample) for sample in dataset.samples] == list(tree.samples)
        assert [dataset[i][0] for i in range(len(dataset))] == payloads
        if self.same_class_names:
            assert tuple(dataset.classes) == tree.classes
        assert sorted((s.path, s.reason) for s in manifest.skipped) == sorted(
            (s.path, s.reason) for s in expected.skipped)
        assert [(s.path, s.num_samples, s.sha256) for s in manifest.shards] == [
            (s.path, s.num_samples, s.sha256) for s in expected.shards]
        report = verify_dataset(dst, against=location)
        assert report.ok and report.samples_compared == manifest.num_samples, report.problems

    @pytest.mark.slow
    @pytest.mark.timeout(240)
    def test_spawned_workers_convert_it_and_read_it(self, written: Written,
                                                    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        from packer.conversion.engines import local as local_engine
        from packer.read.loader import make_loader
        from packer.read.opening import open_dataset  # torch: only when a test reads

        tree, location, options = written
        _, _, payloads = reference_tree(tmp_path_factory, self.backend)
        monkeypatch.setattr(local_engine, "START_METHOD", "spawn")
        dst = tmp_path / "dst"
        convert(location, dst, to=self.backend, shard_size=SHARD_SIZE, workers=2, **options)
        dataset = open_dataset(dst, decode=False)
        assert dataset[0][0] == payloads[0]  # the parent has read: workers must not need its handles
        loader = make_loader(dataset, 4, train=False, num_workers=2, persistent_workers=False,
                             pin_memory=False, multiprocessing_context="spawn", collate_fn=list)
        got = Counter((hashlib.sha256(data).hexdigest(), label) for batch in loader for data, label in batch)
        wanted = Counter((hashlib.sha256(data).hexdigest(), label)
                         for data, (_, label) in zip(payloads, tree.samples, strict=True))
        assert got == wanted
