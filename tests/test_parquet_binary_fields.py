"""Binary columns of Parquet tables as fields: a segmentation table's ``annotation`` (an ``Image``
column of palette or gray PNGs, as Hugging Face segmentation sets ship) as a ``mask``, a second
``Image`` column as an ``image``, a plain binary column as ``bytes``. Tables written by Hugging
Face ``datasets``; the expected masks are ``datasets``' own decoding of the same table."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import packer
from packer.errors import SourceError

datasets = pytest.importorskip("datasets")

FIELDS = ["mask=annotation:mask", "depth:image", "raw:bytes", "caption:text"]


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, "PNG")
    return out.getvalue()


def _rows(count: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(count):
        height, width = 12 + i, 16
        mask = rng.integers(0, 4, (height, width), dtype=np.uint8)
        mask[0, 0] = 255  # VOC's boundary value
        rows.append({"image": {"bytes": _png(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)),
                               "path": None},
                     "annotation": {"bytes": _png(mask, "L"), "path": None},
                     "depth": {"bytes": _png(rng.integers(0, 256, (height, width), dtype=np.uint8)),
                               "path": None},
                     "raw": bytes([i]) * (i + 1), "caption": f"scene {i} \u00e9"})
    return rows


def _table(path: Path, rows: list[dict[str, Any]]) -> Path:
    features = datasets.Features({"image": datasets.Image(), "annotation": datasets.Image(),
                                  "depth": datasets.Image(), "raw": datasets.Value("binary"),
                                  "caption": datasets.Value("string")})
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


@pytest.mark.parametrize("backend", ["lmdb", "hdf5"])
def test_a_segmentation_table_reads_back_mask_for_mask(tmp_path: Path, backend: str) -> None:
    table = _table(tmp_path / "train.parquet", _rows(9))
    plan = packer.plan_conversion(table, to=backend, fields=FIELDS)
    assert [(f["name"], f["type"]) for f in plan.schema] == [
        ("image", "image"), ("mask", "mask"), ("depth", "image"), ("raw", "bytes"), ("caption", "text")]
    manifest = packer.convert(table, tmp_path / "ds", to=backend, workers=2, fields=FIELDS).manifest
    assert manifest.num_samples == 9 and not manifest.skipped
    assert manifest.schema["mask"].params["image"] == "image"
    theirs = datasets.Dataset.from_parquet(str(table))
    ours = packer.open_dataset(tmp_path / "ds", decode={"depth": False})
    for i in range(9):
        got, want = ours[i], theirs[i]
        assert np.array_equal(np.asarray(got["mask"]), np.asarray(want["annotation"])), i
        assert np.array_equal(np.asarray(got["image"]), np.asarray(want["image"].convert("RGB"))), i
        assert got["depth"] == _rows(9)[i]["depth"]["bytes"]  # the original codec keeps the PNG
        assert got["raw"] == want["raw"] and got["caption"] == want["caption"]
    report = packer.verify_dataset(tmp_path / "ds", against=table)
    assert report.ok and report.samples_compared == 9, report.problems


def test_bad_cells_skip_their_rows_and_the_counts_add_up(tmp_path: Path) -> None:
    rows = _rows(6)
    rows[1]["annotation"] = None  # no mask
    rows[2]["annotation"] = {"bytes": _png(np.zeros((3, 3), np.uint8), "L"), "path": None}  # not its size
    rows[3]["raw"] = b"x" * 5000  # over max_bytes
    table = _table(tmp_path / "train.parquet", rows)
    manifest = packer.convert(table, tmp_path / "ds", to="lmdb", workers=1, fields=FIELDS,
                              max_bytes=4096).manifest
    reasons = sorted(s.reason for s in manifest.skipped)
    assert reasons == ["invalid_value", "mask_size", "too_large"]
    assert manifest.num_samples + len(manifest.skipped) == 6
    details = " ".join(s.detail for s in manifest.skipped)
    assert "'annotation'" in details and "'raw'" in details


@pytest.mark.parametrize(("spec", "message"), [
    ("mask=caption:mask", r"column 'caption' is string, neither binary nor an Image column"),
    ("mask=annotation.bytes:mask", r"a whole binary or Image column, not a path.*mask=annotation:mask"),
])
def test_a_column_that_holds_no_bytes_is_refused_before_anything_is_written(
        tmp_path: Path, spec: str, message: str) -> None:
    table = _table(tmp_path / "train.parquet", _rows(2))
    with pytest.raises(SourceError, match=message):
        packer.convert(table, tmp_path / "ds", to="lmdb", fields=[spec])
    assert not (tmp_path / "ds").exists()


def test_a_cell_changed_under_the_conversion_is_an_error(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reads the mask again: a table rewritten after the scan is named, never packed."""
    table = _table(tmp_path / "train.parquet", _rows(3))
    from packer.source.parquet import fields as table_fields

    scanned = table_fields.field_records

    def then_rewritten(batch: Any, specs: Any, max_bytes: int) -> list[str]:
        records = scanned(batch, specs, max_bytes)
        changed = pq.read_table(table).to_pylist()
        changed[0]["annotation"] = {"bytes": _png(np.ones((12, 16), np.uint8), "L"), "path": None}
        pq.write_table(pa.Table.from_pylist(changed, schema=pq.read_schema(table)), table)
        return records

    monkeypatch.setattr(table_fields, "field_records", then_rewritten)
    with pytest.raises(SourceError, match=r"Row 0 of .*changed during the conversion.*'annotation'"):
        packer.convert(table, tmp_path / "ds", to="lmdb", workers=1, fields=FIELDS)
