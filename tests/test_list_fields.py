"""A list file's other columns as typed fields (``fields=`` / ``--field NAME:TYPE``), on
lists written by pandas as users write them (``to_csv``, ``to_json(lines=True)``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import SourceError

CAPTIONS = ["a dog, on grass", "a cat", "two dogs\u00e9", "a cat asleep"]


def _images(folder: Path) -> list[str]:
    names = []
    for i in range(len(CAPTIONS)):
        path = folder / "img" / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((6, 8, 3), i * 40, np.uint8)).save(path)
        names.append(f"img/{i}.png")
    return names


def _frame(folder: Path) -> pd.DataFrame:
    return pd.DataFrame({"file_name": _images(folder), "label": ["dog", "cat", "dog", "cat"],
                         "caption": CAPTIONS, "score": [0.5, 1.25, -2.0, 3.0], "count": [1, 0, 2, 0],
                         "boxes": [json.dumps([[1, 2, 3, 4]] * n) for n in (1, 0, 2, 0)]})


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_columns_read_back_as_typed_fields(kind: str, tmp_path: Path) -> None:
    frame = _frame(tmp_path / "src")
    listed = tmp_path / "src" / f"list.{kind}"
    if kind == "csv":
        frame.to_csv(listed, index=False)
    else:
        frame.assign(boxes=[json.loads(b) for b in frame["boxes"]]).to_json(listed, orient="records",
                                                                            lines=True, force_ascii=False)
    specs = ["caption:text", "score:float", "count:int", "boxes:json"]
    manifest = packer.convert(listed, tmp_path / "ds", to="lmdb", workers=1, fields=specs).manifest
    assert [f.name for f in manifest.schema] == ["image", "label", "caption", "score", "count", "boxes"]
    assert manifest.classes == ("cat", "dog") and not manifest.skipped
    dataset = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    for i, row in frame.iterrows():
        got = dataset[i]
        assert bytes(got["image"]) == (tmp_path / "src" / row["file_name"]).read_bytes()
        assert got["label"] == manifest.classes.index(row["label"])
        assert got["caption"] == row["caption"] and got["score"] == row["score"]
        assert got["count"] == row["count"] and got["boxes"] == json.loads(row["boxes"])
    assert manifest.extra["options"]["list"]["fields"] == specs
    assert packer.update(listed, tmp_path / "ds", workers=1).up_to_date  # the fields are recorded


def test_a_value_that_does_not_fit_skips_its_row_naming_the_column(tmp_path: Path) -> None:
    frame = _frame(tmp_path / "src")
    frame["score"] = frame["score"].astype(object)
    frame.loc[2, "score"] = "high"
    frame.to_csv(tmp_path / "src" / "list.csv", index=False)
    manifest = packer.convert(tmp_path / "src" / "list.csv", tmp_path / "ds", to="lmdb", workers=1,
                              fields=["score:float", "count:int"]).manifest
    assert [(s.path, s.reason) for s in manifest.skipped] == [("img/2.png", "invalid_value")]
    assert "column 'score' (float)" in manifest.skipped[0].detail
    assert manifest.num_samples + len(manifest.skipped) == len(CAPTIONS)


def test_a_row_without_the_column_is_skipped(tmp_path: Path) -> None:
    names = _images(tmp_path / "src")
    rows = [{"path": n, "label": 0, **({"caption": "x"} if i != 1 else {})} for i, n in enumerate(names)]
    (tmp_path / "src" / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = packer.convert(tmp_path / "src" / "list.jsonl", tmp_path / "ds", to="lmdb", workers=1,
                              fields=["caption:text"]).manifest
    assert [(s.path, s.reason) for s in manifest.skipped] == [("img/1.png", "invalid_value")]
    assert "has no 'caption' column" in manifest.skipped[0].detail


def test_bad_field_specs_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    frame = _frame(tmp_path / "src")
    frame.to_csv(tmp_path / "src" / "list.csv", index=False)
    listed, dst = tmp_path / "src" / "list.csv", tmp_path / "ds"
    cases = {("nope:int",): r"has no column 'nope' \(its other columns: 'caption', 'score'",
             ("caption",): r"give \[NAME=\]COLUMN:TYPE", ("caption:blob",): "TYPE one of text, int",
             ("label:int",): "taken by the source's own label",
             ("Caption=caption:text",): "'Caption' is no field name",
             ("caption:text", "caption:json"): "given twice"}
    for specs, message in cases.items():
        with pytest.raises(SourceError, match=message):
            packer.convert(listed, dst, to="lmdb", fields=list(specs))
        assert not dst.exists()
    with pytest.raises(TypeError, match="fields=\\['caption:text'\\]"):
        packer.convert(listed, dst, to="lmdb", fields="caption:text")
    text = tmp_path / "src" / "list.txt"
    text.write_text("img/0.png 0\n")
    with pytest.raises(SourceError, match="plain text: it has no columns"):
        packer.convert(text, dst, to="lmdb", fields=["caption:text"])
    with pytest.raises(SourceError, match="fields= apply to"):
        packer.convert(tmp_path / "src" / "img", dst, to="lmdb", fields=["caption:text"])


def test_the_command_line_takes_repeated_fields(tmp_path: Path) -> None:
    _frame(tmp_path / "src").to_csv(tmp_path / "src" / "list.csv", index=False)
    args = ["convert", str(tmp_path / "src" / "list.csv"), str(tmp_path / "ds"), "--to", "hdf5",
            "--field", "caption:text", "--field", "count:int"]
    plan = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert "label (label, 2 classes), caption (text), count (int)" in plan.output
    done = CliRunner().invoke(cli, [*args, "--workers", "1"])
    assert done.exit_code == 0, done.output
    dataset = packer.open_dataset(tmp_path / "ds", fields=("caption", "count"))
    assert [dataset[i]["caption"] for i in range(len(dataset))] == CAPTIONS


def test_a_field_may_be_named_apart_from_its_column(tmp_path: Path) -> None:
    frame = _frame(tmp_path / "src").rename(columns={"caption": "Caption Text"})
    frame.to_csv(tmp_path / "src" / "list.csv", index=False)
    manifest = packer.convert(tmp_path / "src" / "list.csv", tmp_path / "ds", to="lmdb", workers=1,
                              fields=["caption=Caption Text:text"]).manifest
    assert [f.name for f in manifest.schema] == ["image", "label", "caption"]
    dataset = packer.open_dataset(tmp_path / "ds", fields=("caption",))
    assert [dataset[i]["caption"] for i in range(len(dataset))] == CAPTIONS
