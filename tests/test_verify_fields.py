"""``verify --against SRC`` on datasets with fields: every field is compared with the source's,
as the conversion encodes it, and a difference names the field; against a bare folder only
the image is compared."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.tools.verify import verify_dataset

wds = pytest.importorskip("webdataset")


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, "PNG")
    return out.getvalue()


def _shards(folder: Path, captions: list[str], mask_value: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(folder / "s-%06d.tar"), maxcount=3, verbose=0) as sink:
        for i, caption in enumerate(captions):
            sink.write({"__key__": f"k{i}", "png": _png(np.full((8, 12, 3), 20 * i, np.uint8)),
                        "seg.png": _png(np.full((8, 12), mask_value, np.uint8)), "txt": caption,
                        "cls": i % 2})
    return folder


FIELDS = ["mask=seg.png:mask", "caption=txt:text"]


def test_an_unchanged_source_verifies_field_for_field(tmp_path: Path) -> None:
    shards = _shards(tmp_path / "wds", ["a", "b", "c", "d"])
    packer.convert(shards, tmp_path / "ds", to="lmdb", workers=1, fields=FIELDS)
    report = verify_dataset(tmp_path / "ds", against=shards)
    assert report.ok and report.samples_compared == 4


def test_a_changed_caption_or_mask_is_named(tmp_path: Path) -> None:
    shards = _shards(tmp_path / "wds", ["a", "b", "c", "d"])
    packer.convert(shards, tmp_path / "ds", to="lmdb", workers=1, fields=FIELDS)
    for path in shards.iterdir():
        path.unlink()
    _shards(shards, ["a", "B", "c", "d"])
    report = verify_dataset(tmp_path / "ds", against=shards)
    assert [(p.kind, p.path) for p in report.problems] == [("source_differs", "k1.png")]
    assert "field 'caption'" in report.problems[0].message
    for path in shards.iterdir():
        path.unlink()
    _shards(shards, ["a", "b", "c", "d"], mask_value=2)
    report = verify_dataset(tmp_path / "ds", against=shards)
    assert len(report.problems) == 4 and all("field 'mask'" in p.message for p in report.problems)


def test_a_list_with_fields_against_its_list_and_its_folder(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "img").mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((6, 6, 3), 40 * i, np.uint8)).save(root / "img" / f"{i}.png")
    listed = root / "list.csv"
    pd.DataFrame({"path": [f"img/{i}.png" for i in range(3)], "label": ["x", "y", "x"],
                  "score": [0.5, 1.5, 2.5]}).to_csv(listed, index=False)
    packer.convert(listed, tmp_path / "ds", to="hdf5", workers=1, fields=["score:float"])
    assert verify_dataset(tmp_path / "ds", against=listed).ok
    assert verify_dataset(tmp_path / "ds", against=root).ok  # the folder: images alone
    pd.DataFrame({"path": [f"img/{i}.png" for i in range(3)], "label": ["x", "y", "x"],
                  "score": [0.5, 9.0, 2.5]}).to_csv(listed, index=False)
    report = verify_dataset(tmp_path / "ds", against=listed)
    assert [p.path for p in report.problems] == ["img/1.png"]
    assert "field 'score'" in report.problems[0].message
    result = CliRunner().invoke(cli, ["verify", str(tmp_path / "ds"), "--against", str(listed), "--json"])
    assert result.exit_code != 0 and "field 'score'" in json.dumps(json.loads(result.output))
