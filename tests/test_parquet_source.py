"""Parquet image tables as a source: a table of a tree converts to the tree's dataset, sample for
sample; bad rows are listed with reasons; bad tables fail before anything is written; updates
rewrite only shards near a change; the reader reads each row group once per process."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from imagetools import dataset_snapshot, jpeg_bytes, png_bytes, standard_spec, write_tree
from parquet_tools import Row, table, tree_rows, write_table, write_tables

import packer
from packer.errors import EmptySourceError, MissingExtraError, SourceError, SourceNotFoundError
from packer.registry import Lazy, Registry
from packer.source.base import SourceOptions
from packer.source.parquet.source import ParquetSource
from packer.source.registry import detect_kind, open_source

BROKEN_JPEG = b"\xff\xd8\xff\xe0 not really a jpeg"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", standard_spec())


def _contents(dst: Path) -> tuple[Any, ...]:
    """Classes, samples (key, target) and every payload of the dataset in ``dst``."""
    ds = packer.open_dataset(dst, decode=False)
    return tuple(ds.classes), list(ds.samples), [ds[i][0] for i in range(len(ds))]


def _convert(src: Path | str, dst: Path, backend: str = "lmdb", **options: Any) -> packer.ConversionResult:
    return packer.convert(src, dst, to=backend, workers=1, **options)


def test_a_table_is_detected_and_records_how_it_was_read(tree: Path, tmp_path: Path) -> None:
    # That its samples equal the tree's, in every backend, is SourceContract's (test_contracts.py).
    classes, rows = tree_rows(tree)
    table_path = write_table(tmp_path / "train.parquet", rows, classes=classes, row_group_size=4)
    assert detect_kind(str(table_path)) == "parquet"
    result = _convert(table_path, tmp_path / "dst")
    assert result.manifest.skipped == () and result.found == len(rows)
    source = result.manifest.extra["source"]
    assert source["kind"] == "parquet"
    assert source["params"] == {"image_column": "image", "label_column": "label", "labels": "class_label",
                                "files": 1}


def test_binary_images_and_string_labels_without_metadata(tree: Path, tmp_path: Path) -> None:
    classes, rows = tree_rows(tree)
    named = [Row(None, r.data, classes[int(r.label or 0)]) for r in rows]
    table_path = write_table(tmp_path / "t.parquet", named, binary=True, string_labels=True, metadata=None)
    result = _convert(table_path, tmp_path / "dst")
    _convert(tree, tmp_path / "tree")
    got, want = _contents(tmp_path / "dst"), _contents(tmp_path / "tree")
    assert got[0] == want[0] and got[2] == want[2]  # classes sorted as ImageFolder sorts folders
    assert [t for _, t in got[1]] == [t for _, t in want[1]]
    # no paths: rows are named <file>/<row><suffix>, the suffix from the bytes' magic
    suffix = {".jpeg": ".jpg", ".png": ".png", ".webp": ".webp", ".bmp": ".bmp", ".jpg": ".jpg"}
    assert [key for key, _ in got[1]] == [f"t/{i:08d}{suffix[os.path.splitext(key)[1].lower()]}"
                                          for i, (key, _) in enumerate(want[1])]
    assert result.manifest.extra["source"]["params"]["labels"] == "names"


def test_several_files_and_row_groups_by_folder_glob_and_braces(tree: Path, tmp_path: Path) -> None:
    classes, rows = tree_rows(tree)
    folder = tmp_path / "data"
    files = write_tables(folder, rows, files=3, classes=classes, row_group_size=2)
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [3, 3, 2]  # 5, 5 and 4 rows
    expected = None
    for name, src in [("folder", folder), ("glob", f"{folder}/train-*.parquet"),
                      ("braces", f"{folder}/train-{{00000..00002}}-of-00003.parquet")]:
        result = _convert(src, tmp_path / name)
        assert result.manifest.num_samples == len(rows)
        expected = expected or _contents(tmp_path / name)
        assert _contents(tmp_path / name) == expected, name  # the three name the same files
        assert result.manifest.extra["source"]["params"]["files"] == 3


def test_unused_class_label_names_keep_their_class(tmp_path: Path) -> None:
    rows = [Row(f"{i}.jpg", jpeg_bytes(10, 8, i), i % 2 * 2) for i in range(4)]  # labels 0 and 2
    names = ("ant", "bee", "cow", "dog")
    manifest = _convert(write_table(tmp_path / "t.parquet", rows, classes=names), tmp_path / "dst").manifest
    assert manifest.classes == names and manifest.class_counts == (2, 0, 2, 0)
    plain = _convert(write_table(tmp_path / "n.parquet", rows, metadata=None), tmp_path / "plain").manifest
    assert plain.classes == ("0", "1", "2") and plain.class_counts == (2, 0, 2)  # a gap keeps its class
    old_style = write_table(tmp_path / "old.parquet", rows, classes=names, metadata="top")
    assert open_source(old_style).scan().classes == names  # features at the top level, as old datasets


def test_bad_rows_are_skipped_with_reasons_and_counts_add_up(tmp_path: Path) -> None:
    good = [Row(f"ok/{i}.png", png_bytes(9, 9, i), i % 3) for i in range(4)]
    bad = [Row("no_label.jpg", jpeg_bytes(9, 9, 10), None), Row("unlabelled.jpg", jpeg_bytes(9, 9, 11), -1),
           Row("too_big.jpg", jpeg_bytes(9, 9, 12), 7), Row("null_image.jpg", None, 1),
           Row("empty.jpg", b"", 1), Row("broken.jpg", BROKEN_JPEG, 2)]
    rows = [good[0], *bad[:3], good[1], *bad[3:], *good[2:]]
    result = _convert(write_table(tmp_path / "t.parquet", rows, classes=("a", "b", "c")), tmp_path / "dst")
    manifest = result.manifest
    reasons = {s.path: s.reason for s in manifest.skipped}
    assert {k: v for k, v in reasons.items() if k != "broken.jpg"} == {
        "no_label.jpg": "missing_label", "unlabelled.jpg": "missing_label", "too_big.jpg": "missing_label",
        "null_image.jpg": "missing", "empty.jpg": "empty_file"}  # no bytes: its path names no file
    assert reasons["broken.jpg"] in ("truncated", "decode_error", "not_an_image")
    details = {s.path: s.detail for s in manifest.skipped}
    assert "row 2 of" in details["unlabelled.jpg"] and "-1" in details["unlabelled.jpg"]
    assert manifest.num_samples == 4 and manifest.num_samples + len(manifest.skipped) == len(rows)
    ds = packer.open_dataset(tmp_path / "dst", decode=False)
    assert ds.samples == [(r.path, r.label) for r in good]
    assert [ds[i][0] for i in range(4)] == [r.data for r in good]
    # A dry run counts the rows the scan knows will be skipped apart from the classes.
    plan = packer.plan_conversion(tmp_path / "t.parquet", to="lmdb")
    assert plan.known_skips == {"empty_file": 1, "missing": 1, "missing_label": 3}
    assert list(plan.class_counts) == [2, 1, 2] and plan.num_images == len(rows)  # broken.jpg: class 2


def test_a_null_image_struct_names_rows_by_number(tmp_path: Path) -> None:
    rows = [Row("a.jpg", jpeg_bytes(9, 9, 1), 0), Row(None, None, 0), Row("a.jpg", jpeg_bytes(9, 9, 2), 0)]
    result = _convert(write_table(tmp_path / "t.parquet", rows), tmp_path / "dst")
    assert {s.path: s.reason for s in result.manifest.skipped} == {"t/00000001": "missing_image"}
    ds = packer.open_dataset(tmp_path / "dst", decode=False)
    assert [key for key, _ in ds.samples] == ["t/00000000.jpg", "t/00000002.jpg"]
    assert [m["image_path"] for m in ds.metadata] == ["a.jpg", "a.jpg"]  # paths not unique: kept aside
    assert any("some rows have none" in note for note in result.manifest.extra["source"]["report"]["notes"])


def test_other_columns_are_kept_as_metadata(tmp_path: Path) -> None:
    long_text = "x" * (64 * 1024 + 10)
    extras = [{"caption": "a cat", "score": 0.5, "blob": b"\x00", "tags": ["t"]},
              {"caption": long_text, "score": float("nan"), "blob": None, "tags": []}]
    rows = [Row(f"{i}.jpg", jpeg_bytes(9, 9, i), 0, extra) for i, extra in enumerate(extras)]
    result = _convert(write_table(tmp_path / "t.parquet", rows), tmp_path / "dst")
    ds = packer.open_dataset(tmp_path / "dst", decode=False)
    assert ds.metadata[0] == {"caption": "a cat", "score": 0.5}
    assert ds.metadata[1] == {"caption": long_text[:64 * 1024], "score": None}
    notes = result.manifest.extra["source"]["report"]["notes"]
    assert any("'caption' were cut to 64 KiB" in n for n in notes)
    assert any("['blob', 'tags']" in n for n in notes)


def test_columns_are_found_by_name_or_given(tmp_path: Path) -> None:
    rows = [Row(f"{i}.png", png_bytes(9, 9, i), i) for i in range(3)]
    cifar = table(rows, image="img", label="fine_label", classes=("a", "b", "c"))
    pq.write_table(cifar.append_column("coarse_label", pa.array([0, 0, 1])), tmp_path / "cifar.parquet")
    index = open_source(tmp_path / "cifar.parquet").scan()
    assert index.classes == ("a", "b", "c") and index.metadata_columns == ("coarse_label",)
    custom = table(rows, image="photo", label="kind", metadata=None)
    pq.write_table(custom, tmp_path / "custom.parquet")
    with pytest.raises(SourceError, match=r"no image column.*'photo', 'kind'.*image_column="):
        open_source(tmp_path / "custom.parquet").scan()
    with pytest.raises(SourceError, match=r"no label column.*label_column="):
        open_source(tmp_path / "custom.parquet", SourceOptions(image_column="photo")).scan()
    given = open_source(tmp_path / "custom.parquet", SourceOptions(image_column="photo", label_column="kind"))
    assert [item.label for item in given.scan().items] == [0, 1, 2]
    with pytest.raises(SourceError, match=r"'kind' holds .*not encoded image bytes"):
        open_source(tmp_path / "custom.parquet", SourceOptions(image_column="kind")).scan()


def test_bad_tables_fail_before_anything_is_written(tmp_path: Path) -> None:
    rows = [Row("a.jpg", jpeg_bytes(9, 9, 1), 0)]
    fake = tmp_path / "data" / "b.parquet"
    write_table(tmp_path / "data" / "a.parquet", rows, classes=("x", "y"))
    fake.write_bytes(b"PAR1 this is no table")
    for src in (fake, tmp_path / "data"):
        with pytest.raises(SourceError, match=r"b\.parquet' is not a Parquet file.*source_format="):
            _convert(src, tmp_path / "dst")
        assert not (tmp_path / "dst").exists()
    write_table(fake, rows, classes=("x", "z"))
    with pytest.raises(SourceError, match=r"b\.parquet' does not match .*ClassLabel names differ"):
        _convert(tmp_path / "data", tmp_path / "dst")
    (tmp_path / "data" / "notes.txt").write_text("hi")
    with pytest.raises(SourceError, match=r"'notes\.txt', which is not a \.parquet file"):
        _convert(tmp_path / "data", tmp_path / "dst", source_format="parquet")
    with pytest.raises(SourceNotFoundError, match="matches no file"):
        _convert(tmp_path / "none-*.parquet", tmp_path / "dst", source_format="parquet")
    write_table(tmp_path / "empty.parquet", [], classes=("x",))
    with pytest.raises(EmptySourceError, match="holds no row"):
        _convert(tmp_path / "empty.parquet", tmp_path / "dst")
    unlabelled = [Row("a.jpg", rows[0].data, None), Row("b.jpg", rows[0].data, -1)]
    write_table(tmp_path / "unlabelled.parquet", unlabelled)
    with pytest.raises(EmptySourceError, match="No row .* has a usable label in the column 'label'"):
        _convert(tmp_path / "unlabelled.parquet", tmp_path / "dst")
    write_table(tmp_path / "ids.parquet", [Row("a.jpg", rows[0].data, 123_456_789)])
    with pytest.raises(SourceError, match="holds 123456789.*Is it an id"):
        _convert(tmp_path / "ids.parquet", tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


def test_a_missing_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith("packer.source.parquet.source")]:
        monkeypatch.delitem(sys.modules, name)  # imported afresh, and put back afterwards
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    sources = Registry("source format",
                       {"parquet": Lazy("packer.source.parquet.source:ParquetSource", "parquet")})
    with pytest.raises(MissingExtraError, match=r"pip install 'packer-shards\[parquet\]'"):
        sources.get("parquet")


def _read_into(reader: Any, items: Any, queue: Any) -> None:
    queue.put([reader.read(item) for item in items])


def test_the_reader_pickles_small_and_decodes_each_row_group_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [Row(f"{i}.jpg", jpeg_bytes(9, 9, i), 0) for i in range(10)]
    path = write_table(tmp_path / "t.parquet", rows, row_group_size=3)
    source = open_source(path)
    index, reader = source.scan(), source.reader()
    calls: list[int] = []
    original = pq.ParquetFile.read_row_group

    def counting(self: pq.ParquetFile, group: int, *args: Any, **kwargs: Any) -> pa.Table:
        calls.append(group)
        return original(self, group, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    assert [reader.read(item) for item in index.items] == [r.data for r in rows]
    assert calls == [0, 1, 2, 3]
    context = multiprocessing.get_context("fork")  # the child inherits the open handle and cache
    queue = context.Queue()
    child = context.Process(target=_read_into, args=(reader, index.items[::-1], queue))
    child.start()
    assert queue.get(timeout=60) == [r.data for r in rows[::-1]]
    child.join(60)
    copy = pickle.loads(pickle.dumps(reader))
    assert len(pickle.dumps(reader)) < 400 and copy == reader
    assert copy.read(index.items[4]) == rows[4].data
    changed = [Row(r.path, jpeg_bytes(9, 9, 50 + i), 0) for i, r in enumerate(rows)]
    write_table(path, changed, row_group_size=3)
    with pytest.raises(SourceError, match="changed during the conversion"):
        pickle.loads(pickle.dumps(reader)).read(index.items[0])


def _many_rows(start: int, stop: int) -> list[Row]:
    return [Row(f"{i:04d}.jpg", jpeg_bytes(28 + i % 5, 24, i), i % 3) for i in range(start, stop)]


def test_an_update_rewrites_only_shards_near_appended_rows(tmp_path: Path) -> None:
    path, dst, fresh = tmp_path / "t.parquet", tmp_path / "dst", tmp_path / "fresh"
    rows = _many_rows(0, 160)
    rows[20] = Row(rows[20].path, rows[20].data, None)  # labelled later
    write_table(path, rows, classes=("a", "b", "c"), row_group_size=50)
    first = _convert(path, dst, shard_size="40KB").manifest
    assert len(first.shards) >= 6
    write_table(path, rows + _many_rows(160, 166), classes=("a", "b", "c"), row_group_size=50)
    result = packer.update(path, dst, workers=1)
    assert (result.files_added, result.files_removed, result.files_changed) == (6, 0, 0)
    assert 1 <= result.shards_written <= 2 and result.shards_reused >= len(first.shards) - 2
    rows[20] = Row(rows[20].path, rows[20].data, 1)
    write_table(path, rows + _many_rows(160, 166), classes=("a", "b", "c"), row_group_size=50)
    relabelled = packer.update(path, dst, workers=1)
    assert relabelled.files_changed == 1 and 1 <= relabelled.shards_written <= 2
    assert packer.update(path, dst, checksum=True, workers=2).up_to_date  # rows hashed from threads
    _convert(path, fresh, shard_size="40KB")
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == dataset_snapshot(fresh)


def test_a_dry_run_plans_a_table(tmp_path: Path) -> None:
    rows = _many_rows(0, 30)
    plan = packer.plan_conversion(write_table(tmp_path / "t.parquet", rows), to="lmdb", shard_size="20KB")
    assert plan.num_images == 30 and plan.classes == ("0", "1", "2")
    assert plan.source_bytes == sum(len(r.data or b"") for r in rows) and len(plan.shards) >= 2


def test_options_it_does_not_take_are_refused(tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.parquet", [Row("a.jpg", jpeg_bytes(9, 9, 1), 0)])
    with pytest.raises(SourceError, match="label_field= apply to a WebDataset source"):
        ParquetSource(str(path), SourceOptions(label_field="cls"))
    assert json.loads(json.dumps(open_source(path).params()))["files"] == 1
