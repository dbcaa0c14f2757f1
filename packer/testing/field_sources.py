"""The contract of a kind of source that carries fields: what :class:`FieldSourceContract` checks.

A source whose samples hold more than an image and a class (a list file's extra columns,
WebDataset members, Parquet columns, a plugin's own) declares a schema when it scans, and its
conversion reads back as dicts. The contract uses the tree :class:`~packer.testing.sources.SourceContract`
writes and gives every image of it two fields, :func:`field_values`: a ``caption`` (text, not
ASCII) and a ``number`` (int). The kind writes them in its own format; the contract checks
that the dry run plans the schema (image, label, caption, number) without writing anything,
that the conversion gives each image its bytes, label, caption and number, that the broken
file is skipped with the same reason as in the tree's own conversion and the counts add up,
that ``verify_dataset(against=...)`` compares every sample field by field, and (``slow``) that
workers started by ``spawn`` convert it and read it through a ``DataLoader``: every sample
once, with its fields.

A kind needs one method besides its name::

    from packer.testing import FieldSourceContract, field_values

    class TestMyFieldSource(FieldSourceContract):
        kind = "mykind"

        def write_source(self, tree, work):
            ...  # tree.root's images with field_values(relpath) for each
            return work / "data.my", {"fields": ["caption:text", "number:int"]}
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from packer.conversion.dryrun import plan_conversion
from packer.conversion.run import convert
from packer.testing.sources import SHARD_SIZE, KindOfSource, Written, reference_tree
from packer.testing.trees import ImageTree
from packer.tools.verify import verify_dataset

__all__ = ["FieldSourceContract", "field_values"]

#: The names and types of the fields every image of the contract's tree carries.
FIELD_TYPES: dict[str, str] = {"caption": "text", "number": "int"}


def field_values(relpath: str) -> dict[str, Any]:
    """The fields of the tree image at ``relpath``: a caption (non-ASCII text) and a number,
    both from the path alone, so that every kind writes the same values."""
    number = int(hashlib.sha256(relpath.encode("utf-8")).hexdigest()[:6], 16) - 2**23  # some negative
    return {"caption": f"a photo of {relpath} \u2713 ü", "number": number}


class FieldSourceContract(KindOfSource):
    """Every promise of a kind of source with fields; subclass it with ``kind`` and
    :meth:`write_source` (see the module docstring)."""

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        """Write ``tree``'s images, their classes and :func:`field_values` in this kind's format
        under ``work``; return the location and ``convert()``'s options (``fields=...``)."""
        return super().write_source(tree, work)

    def _expected(self, tree: ImageTree) -> list[tuple[bytes, int, str, int]]:
        return [(tree.read(relpath), label, *field_values(relpath).values())
                for relpath, label in tree.samples]

    def test_the_dry_run_plans_the_schema_and_writes_nothing(self, written: Written, tmp_path: Path) -> None:
        tree, location, options = written
        before = sorted(p.name for p in tmp_path.iterdir())
        plan = plan_conversion(location, to=self.backend, **options)
        types = {f["name"]: f["type"] for f in plan.schema}
        assert types.get("image") == "image" and types.get("label") == "label", types
        assert {name: types.get(name) for name in FIELD_TYPES} == FIELD_TYPES, types
        assert plan.num_images == len(tree.files), "the plan does not count every file"
        assert sorted(p.name for p in tmp_path.iterdir()) == before, "the dry run wrote something"

    def test_converts_field_for_field(self, written: Written, tmp_path_factory: pytest.TempPathFactory,
                                      tmp_path: Path) -> None:
        from packer.read.opening import open_dataset  # torch: only when a test reads

        tree, location, options = written
        _, reference, _ = reference_tree(tmp_path_factory, self.backend)
        dst = tmp_path / "dst"
        manifest = convert(location, dst, to=self.backend, shard_size=SHARD_SIZE, workers=2,
                           **options).manifest
        dataset = open_dataset(dst, decode={"image": False})
        got = [(d["image"], int(d["label"]), d["caption"], int(d["number"]))
               for d in (dataset[i] for i in range(len(dataset)))]
        assert got == self._expected(tree)
        if self.same_class_names:
            assert tuple(dataset.classes) == tree.classes
        assert sorted((s.path, s.reason) for s in manifest.skipped) == sorted(
            (s.path, s.reason) for s in reference.skipped)
        assert manifest.num_samples + len(manifest.skipped) == len(tree.files), "the counts do not add up"
        report = verify_dataset(dst, against=location)
        assert report.ok and report.samples_compared == manifest.num_samples, report.problems

    @pytest.mark.slow
    @pytest.mark.timeout(240)
    def test_spawned_workers_convert_it_and_read_it(self, written: Written, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        from packer.conversion.engines import local as local_engine
        from packer.read.loader import make_loader
        from packer.read.opening import open_dataset

        tree, location, options = written
        monkeypatch.setattr(local_engine, "START_METHOD", "spawn")
        dst = tmp_path / "dst"
        convert(location, dst, to=self.backend, shard_size=SHARD_SIZE, workers=2, **options)
        dataset = open_dataset(dst, decode={"image": False})
        loader = make_loader(dataset, 4, train=False, num_workers=2, persistent_workers=False,
                             pin_memory=False, multiprocessing_context="spawn", collate_fn=list)
        got = Counter((hashlib.sha256(d["image"]).hexdigest(), int(d["label"]), d["caption"],
                       int(d["number"])) for batch in loader for d in batch)
        wanted = Counter((hashlib.sha256(data).hexdigest(), label, caption, number)
                         for data, label, caption, number in self._expected(tree))
        assert got == wanted
