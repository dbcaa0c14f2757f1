"""The dataset half of the backend contract: whole conversions written with the backend.

A conversion must give the source's classes, samples, labels and bytes through
``open_dataset``; ``verify_dataset`` must catch one flipped byte in a shard; a dataset with
fields (an image, a mask, boxes with labels, a caption, an array) written by ``write`` must read
back value for value, and ``verify`` catch a flipped byte in it too; a conversion
SIGKILLed midway must look incomplete, refuse a plain re-run and, resumed, keep its finished
shards and end with the very files an uninterrupted run writes; an update SIGKILLed midway must
leave the previous version whole and readable and, run again, equal a fresh conversion.
The kills run in a forked child (:mod:`packer.testing.faults`); the last two are ``slow``.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from PIL import Image

from packer.conversion.engines.local import LocalEngine
from packer.conversion.maintenance.gc import collect_garbage
from packer.conversion.maintenance.updating import update
from packer.conversion.run import convert
from packer.conversion.writing.write import write
from packer.errors import IncompleteDatasetError, OutputError
from packer.format.backends import Backend
from packer.format.manifest import Manifest
from packer.format.records import digest64
from packer.testing.faults import StopAfter, exit_code_of, kill_self
from packer.testing.snapshots import dataset_snapshot, flip_byte
from packer.testing.trees import ImageTree, edit_tree, image_tree
from packer.tools.verify import verify_dataset

__all__ = ["DatasetContract"]

#: Small enough that a dozen tiny images make about eight shards.
SHARD_SIZE = "1500"


#: The schema of the dataset with fields the contract writes.
FIELDS_SCHEMA: list[dict[str, Any]] = [
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "a", "b"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "xywh"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["a", "b"]}},
    {"name": "caption", "type": "text"},
    {"name": "embedding", "type": "ndarray", "params": {"dtype": "float32", "shape": [None, 3]}},
]


def field_sample(i: int) -> dict[str, Any]:
    """Sample ``i`` of the dataset with fields: every value from ``i`` alone (sizes, box counts
    and array lengths vary, zero boxes included)."""
    rng = np.random.default_rng(i)
    height, width, count = 10 + i % 3 * 5, 12 + i % 4 * 3, i % 4
    boxes = np.array([[j, j + 0.5, 3.25, 4 + j] for j in range(count)], np.float32).reshape(count, 4)
    return {"__key__": f"sample/{i:03d}", "image": rng.integers(0, 256, (height, width, 3), dtype=np.uint8),
            "mask": rng.integers(0, 3, (height, width), dtype=np.uint8), "boxes": boxes,
            "box_labels": np.array([j % 2 for j in range(count)], np.int64),
            "caption": f"sample {i} \u2713", "embedding": rng.standard_normal((i % 5, 3)).astype(np.float32)}


def _contents(dst: Path) -> Counter[tuple[int, int]]:
    """What the current version of ``dst`` holds: a multiset of (payload digest, label)."""
    from packer.read.opening import open_dataset  # torch: only when a test reads

    dataset = open_dataset(dst, decode=False)
    return Counter((digest64(dataset[i][0]), int(dataset[i][1])) for i in range(len(dataset)))


class DatasetContract:
    """Conversions, verification, crash and update safety with ``backend`` (see the module
    docstring); part of :class:`~packer.testing.backends.BackendContract`."""

    backend: ClassVar[Backend]

    def convert(self, tree: ImageTree, dst: Path, **options: Any) -> Manifest:
        """Convert ``tree`` into ``dst`` with this backend and small shards; the manifest."""
        options.setdefault("workers", 2)
        return convert(tree.root, dst, to=self.backend.name, shard_size=SHARD_SIZE, **options).manifest

    def test_a_conversion_reads_back_as_its_source_and_verify_finds_a_flipped_byte(
            self, tmp_path: Path) -> None:
        from packer.read.opening import open_dataset

        tree = image_tree(tmp_path / "src")
        dst = tmp_path / "dst"
        manifest = self.convert(tree, dst)
        assert manifest.backend == self.backend.name and len(manifest.shards) > 2
        assert [(s.path, s.reason) for s in manifest.skipped] == [(b, "truncated") for b in tree.broken]
        for shard in manifest.shards:
            assert shard.path.endswith(self.backend.suffix)
            assert (dst / shard.path).stat().st_size == shard.num_bytes
        raw = open_dataset(dst, decode=False)
        assert tuple(raw.classes) == tree.classes
        assert [tuple(sample) for sample in raw.samples] == list(tree.samples)
        assert list(raw.targets) == [label for _, label in tree.samples]
        assert [raw[i][0] for i in range(len(raw))] == [tree.read(rel) for rel, _ in tree.samples]
        decoded = open_dataset(dst)
        for i, (relpath, label) in enumerate(tree.samples):
            image, target = decoded[i]
            with Image.open(tree.root / relpath) as source:
                assert np.array_equal(np.asarray(image), np.asarray(source.convert("RGB"))), relpath
            assert target == label
        assert verify_dataset(dst, deep=True, against=tree.root).ok
        # One flipped byte in a shard: verify names it; flipped back, all is well again.
        victim = max(manifest.shards, key=lambda shard: shard.num_bytes).path
        offset = flip_byte(dst / victim)
        report = verify_dataset(dst)
        assert not report.ok and victim in {problem.path for problem in report.problems}
        assert not verify_dataset(dst, deep=True).ok
        flip_byte(dst / victim, offset)  # flipped back: whole again
        assert verify_dataset(dst, deep=True).ok

    def test_a_dataset_with_fields_reads_back_and_verify_finds_a_flipped_byte(self, tmp_path: Path) -> None:
        from packer.read.opening import open_dataset

        dst = tmp_path / "fields"
        manifest = write(dst, (field_sample(i) for i in range(12)), FIELDS_SCHEMA, to=self.backend.name,
                         shard_size=SHARD_SIZE, workers=2).manifest
        assert manifest.backend == self.backend.name and manifest.num_samples == 12
        dataset = open_dataset(dst)
        for i in range(12):
            want, got = field_sample(i), dataset[i]
            assert np.array_equal(np.asarray(got["image"]), want["image"]), i
            for name in ("mask", "boxes", "box_labels", "embedding"):
                assert np.array_equal(np.asarray(got[name]), want[name]), (i, name)
            assert got["caption"] == want["caption"], i
        assert verify_dataset(dst, deep=True).ok
        victim = max(manifest.shards, key=lambda shard: shard.num_bytes).path
        offset = flip_byte(dst / victim)
        assert not verify_dataset(dst).ok
        flip_byte(dst / victim, offset)
        assert verify_dataset(dst, deep=True).ok

    @pytest.mark.slow
    @pytest.mark.timeout(300)
    def test_a_killed_conversion_resumes_to_the_same_files(self, tmp_path: Path) -> None:
        tree = image_tree(tmp_path / "src")
        clean, dst = tmp_path / "clean", tmp_path / "dst"
        self.convert(tree, clean)
        engine = StopAfter(LocalEngine(2), 2, kill_self)
        code = exit_code_of(partial(self.convert, tree, dst, engine=engine, workers=None))
        assert code == -9, f"the conversion should have been killed after two shards; it exited {code}"
        with pytest.raises(IncompleteDatasetError):
            Manifest.load(dst)
        shards_before = {p.name: p.stat().st_mtime_ns for p in dst.glob(f"*{self.backend.suffix}")}
        assert len(shards_before) >= 2, "the shards finished before the kill are gone"
        with pytest.raises(OutputError):  # neither resume nor overwrite: DST is left alone
            self.convert(tree, dst)
        assert {p.name: p.stat().st_mtime_ns for p in dst.glob(f"*{self.backend.suffix}")} == shards_before
        resumed = convert(tree.root, dst, to=self.backend.name, shard_size=SHARD_SIZE, resume=True, workers=2)
        assert resumed.resumed_shards >= 2
        for name, mtime in shards_before.items():  # finished shards were kept, not rewritten
            if (dst / name).exists():
                assert (dst / name).stat().st_mtime_ns == mtime, name
        assert dataset_snapshot(dst) == dataset_snapshot(clean)

    @pytest.mark.slow
    @pytest.mark.timeout(300)
    def test_a_killed_update_keeps_the_old_version_and_finishes_when_run_again(self, tmp_path: Path) -> None:
        tree = image_tree(tmp_path / "src")
        dst, fresh = tmp_path / "dst", tmp_path / "fresh"
        self.convert(tree, dst, workers=1)
        version_1 = _contents(dst)
        edited = edit_tree(tree)
        self.convert(edited, fresh, workers=1)
        engine = StopAfter(LocalEngine(1), 1, kill_self)
        code = exit_code_of(partial(update, edited.root, dst, engine=engine))
        assert code == -9, f"the update should have been killed after one shard; it exited {code}"
        assert Manifest.load(dst).version == 1 and _contents(dst) == version_1
        assert verify_dataset(dst, deep=True).ok
        again = update(edited.root, dst, workers=1)
        assert again.version == 2
        collect_garbage(dst)
        assert dataset_snapshot(dst) == dataset_snapshot(fresh)
