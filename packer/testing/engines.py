"""The contract of an engine: what :class:`EngineContract` checks.

An engine runs conversion tasks somewhere (:class:`~packer.conversion.engines.base.Engine`)
and must not change the output. The contract converts on it and compares the files with the
built-in local engine's (many shards, and one shard packed in segments), adding up the progress
it reports on the way; makes a task fail two ways (a file that cannot be packed under
``strict``, a source file gone from under the run) and expects the local engine's error types;
and interrupts a run as Ctrl-C does: ``ConversionInterrupted``, DST left incomplete, and
``resume=True`` finishing it.

Engines are opened by name, as ``open_engine(name, **engine_options)`` does, once per test
class; so a plugin registers an opener (a context manager factory taking an
:class:`~packer.conversion.engines.select.EngineRequest`)::

    from packer.testing import EngineContract

    class TestMyEngine(EngineContract):
        engine = "mycluster"         # registered with ENGINES.register("mycluster", opener)
        opener = open_my_cluster     # or set this and the contract registers it for the tests
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pytest

from packer.conversion.engines.base import Engine
from packer.conversion.engines.local import LocalEngine
from packer.conversion.engines.select import ENGINES, EngineOpener, open_engine
from packer.conversion.run import convert
from packer.errors import ConversionInterrupted, IncompleteDatasetError, PackerError
from packer.format.manifest import Manifest
from packer.testing.faults import Before, StopAfter, Watching, interrupt
from packer.testing.plugins import registered
from packer.testing.snapshots import dataset_snapshot
from packer.testing.trees import ImageTree, image_tree

__all__ = ["EngineContract"]

#: A dozen tiny images make about eight shards at this size; at ``_ONE_SHARD`` they make one.
_SMALL, _ONE_SHARD = "1500", "1MB"


class EngineContract:
    """Every promise of an engine; subclass it with ``engine`` set (see the module docstring)."""

    engine: ClassVar[str]
    #: Registered under ``engine`` for the tests, when that name is not registered yet.
    opener: ClassVar[EngineOpener | None] = None
    #: What the engine is opened with (``open_engine``'s keywords).
    engine_options: ClassVar[Mapping[str, Any]] = {"workers": 2}
    #: The backend the conversions write.
    backend: ClassVar[str] = "lmdb"

    def open(self) -> AbstractContextManager[Engine]:
        """The engine under test, open for a ``with`` block."""
        return open_engine(self.engine, **self.engine_options)

    @pytest.fixture(scope="class")
    def opened(self) -> Iterator[Engine]:
        """The engine under test, opened once for the class (clusters take seconds to start)."""
        opener = type(self).opener  # from the class: a plain function, not a bound method
        name = self.engine
        with registered(ENGINES, name, opener, lambda value: ENGINES.register(name, value)), \
                self.open() as engine:
            yield engine

    @pytest.fixture(scope="class")
    def reference(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        """A tree and what the local engine writes of it, once for the class: by shard size,
        the snapshot of the dataset; ``strict``: the error it raises on the tree's bad file."""
        work = tmp_path_factory.mktemp("engine-contract")
        tree = image_tree(work / "src")
        found: dict[str, Any] = {"tree": tree}
        for shard_size in (_SMALL, _ONE_SHARD):
            self.convert(tree, work / shard_size, shard_size, workers=1)
            found[shard_size] = dataset_snapshot(work / shard_size)
        with pytest.raises(PackerError) as caught:
            self.convert(tree, work / "strict", _SMALL, workers=1, strict=True)
        found["strict"] = caught.value
        return found

    def convert(self, tree: ImageTree, dst: Path, shard_size: str, **options: Any) -> Manifest:
        """Convert ``tree`` into ``dst`` with ``self.backend``; the manifest."""
        return convert(tree.root, dst, to=self.backend, shard_size=shard_size, **options).manifest

    def test_it_writes_what_the_local_engine_writes(self, tmp_path: Path, opened: Engine,
                                                    reference: dict[str, Any]) -> None:
        tree: ImageTree = reference["tree"]
        assert opened.parallelism >= 1
        for shard_size in (_SMALL, _ONE_SHARD):  # many whole-shard tasks; one shard in segments
            watching = Watching(opened)
            manifest = self.convert(tree, tmp_path / shard_size, shard_size, engine=watching, progress=True)
            assert manifest.num_samples == len(tree.samples)
            assert dataset_snapshot(tmp_path / shard_size) == reference[shard_size], shard_size
            assert watching.results, "the engine handed no result back"
            assert watching.net() == (len(tree.samples), len(tree.broken)), \
                f"progress reported (packed, skipped) {watching.net()} at shard size {shard_size}"

    def test_a_bad_file_under_strict_fails_as_on_the_local_engine(self, tmp_path: Path, opened: Engine,
                                                                  reference: dict[str, Any]) -> None:
        local = reference["strict"]
        with pytest.raises(PackerError) as caught:
            self.convert(reference["tree"], tmp_path / "dst", _SMALL, engine=opened, strict=True)
        there = caught.value
        assert type(there) is type(local), f"{type(there).__name__} where the local engine raises " \
                                           f"{type(local).__name__}: {there}"
        assert (getattr(there, "path", None), getattr(there, "reason", None)) == \
               (getattr(local, "path", None), getattr(local, "reason", None))
        with pytest.raises(IncompleteDatasetError):
            Manifest.load(tmp_path / "dst")

    def test_a_source_file_gone_mid_run_fails_as_on_the_local_engine(self, tmp_path: Path,
                                                                    opened: Engine) -> None:
        errors = []
        for name, engine in (("local", LocalEngine(1)), ("engine", opened)):
            tree = image_tree(tmp_path / f"src-{name}", broken=False)
            victim = tree.root / tree.samples[-1][0]
            with pytest.raises(PackerError) as caught:
                self.convert(tree, tmp_path / name, _SMALL, engine=Before(engine, partial(os.unlink, victim)))
            errors.append(caught.value)
        local, there = errors
        assert type(there) is type(local), f"{type(there).__name__} where the local engine raises " \
                                           f"{type(local).__name__}: {there}"
        assert tree.samples[-1][0] in str(there)

    def test_ctrl_c_keeps_finished_shards_for_resume(self, tmp_path: Path, opened: Engine,
                                                     reference: dict[str, Any]) -> None:
        tree: ImageTree = reference["tree"]
        dst = tmp_path / "dst"
        # An engine of its own (``opened`` only registers it): closing it waits for, or stops,
        # what still runs after the interrupt, so that nothing writes into DST while it resumes.
        with self.open() as engine, pytest.raises(ConversionInterrupted):
            self.convert(tree, dst, _SMALL, engine=StopAfter(engine, 1, interrupt))
        with pytest.raises(IncompleteDatasetError):
            Manifest.load(dst)
        resumed = convert(tree.root, dst, to=self.backend, shard_size=_SMALL, resume=True, workers=1)
        assert resumed.resumed_shards >= 1
        assert dataset_snapshot(dst) == reference[_SMALL]
