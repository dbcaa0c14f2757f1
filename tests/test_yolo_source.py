"""YOLO sets as a source (packer.source.yolo): Ultralytics' ``images/<split>`` beside
``labels/<split>/*.txt``, class names from ``data.yaml``.

The sets are written here as Ultralytics lays them out (``data.yaml`` dumped by PyYAML with
``path``, ``train``, ``val`` and ``names``, label lines ``class cx cy w h`` normalised, segment
lines ``class x1 y1 x2 y2 ...``); the expected boxes are the label files' own numbers.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import SourceError, SourceNotFoundError
from packer.format.backends import Backend
from packer.source.registry import detect_kind
from packer.source.sourcefile import UnpackableFile
from packer.source.yolo.labels import parse_labels

yaml = pytest.importorskip("yaml")

NAMES = ["person", "bicycle", "traffic light"]
#: split -> stem -> label lines (None: no label file, a background image).
LABELS: dict[str, dict[str, list[str] | None]] = {
    "train": {"000001": ["0 0.5 0.5 0.25 0.5", "2 0.1 0.2 0.1 0.1"],
              "000002": ["1 0.3 0.4 0.2 0.2", "0 0.2 0.2 0.4 0.2 0.4 0.6"],  # a box, a triangle
              "000003": None},
    "val": {"000004": ["2 0.9 0.9 0.2 0.2"]},
}


def _image(path: Path, seed: int, size: tuple[int, int] = (40, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _write(root: Path, names: object = None) -> Path:
    for split, stems in LABELS.items():
        for i, (stem, lines) in enumerate(stems.items()):
            _image(root / "images" / split / f"{stem}.jpg", i)
            if lines is not None:
                label = root / "labels" / split / f"{stem}.txt"
                label.parent.mkdir(parents=True, exist_ok=True)
                label.write_text("\n".join(lines) + "\n")
    document = {"path": str(root), "train": "images/train", "val": "images/val",
                "names": names if names is not None else dict(enumerate(NAMES))}
    (root / "data.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return root


@pytest.fixture
def yolo(tmp_path: Path) -> Path:
    return _write(tmp_path / "coco8")


def _expected(lines: list[str] | None) -> tuple[np.ndarray, list[int]]:
    boxes, labels = [], []
    for line in lines or []:
        values = [float(v) for v in line.split()[1:]]
        if len(values) > 4:
            xs, ys = values[0::2], values[1::2]
            values = [(min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2, max(xs) - min(xs), max(ys) - min(ys)]
        boxes.append(values)
        labels.append(int(line.split()[0]))
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 4), labels


def test_a_split_converts_and_reads_back_box_for_box(yolo: Path, tmp_path: Path, backend: Backend) -> None:
    split = yolo / "images" / "train"
    assert detect_kind(str(split)) == detect_kind(str(yolo)) == "yolo"
    manifest = packer.convert(split, tmp_path / "ds", to=backend.name, workers=1).manifest
    assert manifest.num_samples == 3 and not manifest.skipped and manifest.classes == ()
    assert manifest.schema["box_labels"].params["classes"] == NAMES
    boxes = manifest.schema["boxes"].params
    assert boxes["format"] == "cxcywh" and boxes["normalized"]
    assert manifest.extra["yolo"]["names_from"] == str(yolo / "data.yaml")
    assert manifest.extra["yolo"]["background_images"] == 1
    dataset = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    for i, (stem, lines) in enumerate(LABELS["train"].items()):
        got = dataset[i]
        assert list(got) == ["image", "boxes", "box_labels", "segments"]
        assert bytes(got["image"]) == (split / f"{stem}.jpg").read_bytes()
        boxes, labels = _expected(lines)
        assert np.array_equal(got["boxes"], boxes) and got["boxes"].dtype == np.float32
        assert list(got["box_labels"]) == labels
    assert dataset[1]["segments"] == [[], [0.2, 0.2, 0.4, 0.2, 0.4, 0.6]]
    assert dataset[2]["boxes"].shape == (0, 4)  # a background image: kept, no boxes
    notes = " ".join(manifest.extra["source"]["report"]["notes"])
    assert "1 image(s) have no label file" in notes and "images/train/000003.jpg" in notes


def test_the_root_holds_every_split_and_names_may_be_a_list(tmp_path: Path) -> None:
    root = _write(tmp_path / "set", names=NAMES)
    manifest = packer.convert(root, tmp_path / "ds", to="lmdb", workers=1).manifest
    assert manifest.num_samples == 4 and manifest.schema["box_labels"].params["classes"] == NAMES
    dataset = packer.open_dataset(tmp_path / "ds", fields=("box_labels",))
    assert [list(dataset[i]["box_labels"]) for i in range(4)] == [[0, 2], [1, 0], [], [2]]


def test_bad_label_files_skip_their_image_with_the_line_named(yolo: Path, tmp_path: Path,
                                                             any_backend: Backend) -> None:
    split = yolo / "images" / "train"
    labels = yolo / "labels" / "train"
    cases = {"words": "0 a b c d", "short": "0 0.5 0.5 0.2", "class": "7 0.5 0.5 0.2 0.2",
             "flat": "0 0.5 0.5 0.0 0.2", "negative": "-1 0.5 0.5 0.2 0.2"}
    for i, (stem, line) in enumerate(cases.items()):
        _image(split / f"{stem}.jpg", 10 + i)
        (labels / f"{stem}.txt").write_text(f"0 0.5 0.5 0.1 0.1\n{line}\n")
    (labels / "binary.txt").write_bytes(b"\xff\xfe\x00garbage")
    _image(split / "binary.jpg", 20)
    (split / "empty.jpg").write_bytes(b"")
    (labels / "orphan.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    (split / "notes.md").write_text("not an image")
    manifest = packer.convert(split, tmp_path / "ds", to=any_backend.name, workers=1).manifest
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in manifest.skipped}
    assert reasons == {"words.jpg": "invalid_value", "short.jpg": "invalid_value",
                       "class.jpg": "missing_label", "flat.jpg": "degenerate_box",
                       "negative.jpg": "invalid_value",
                       "binary.jpg": "invalid_value", "empty.jpg": "empty_file"}
    details = {s.path.rsplit("/", 1)[-1]: s.detail for s in manifest.skipped}
    assert "labels/train/words.txt, line 2" in details["words.jpg"]
    images = [p for p in split.iterdir() if p.suffix == ".jpg"]
    assert manifest.num_samples + len(manifest.skipped) == len(images) == 10
    assert manifest.extra["yolo"]["orphan_labels"] == 1
    assert manifest.scan.other_files == 2  # notes.md, orphan.txt


def test_boxes_past_the_image_are_clipped_as_documented(yolo: Path, tmp_path: Path) -> None:
    (yolo / "labels" / "train" / "000001.txt").write_text("0 0.95 0.5 0.2 0.2\n")
    packer.convert(yolo / "images" / "train", tmp_path / "ds", to="lmdb", workers=1)
    boxes = packer.open_dataset(tmp_path / "ds", fields=("boxes",))[0]["boxes"]
    assert np.allclose(boxes, [[0.925, 0.5, 0.15, 0.2]])  # x from 0.85 to 1.0


def test_names_problems_are_one_error_before_anything_is_written(yolo: Path, tmp_path: Path) -> None:
    data = yolo / "data.yaml"
    for document, message in [({"names": {0: "a", 2: "b"}}, "map 0, 1, ... K-1"),
                              ({"names": ["a", "b"], "nc": 3}, "nc: 3 but names 2"),
                              ({"names": ["a", "a"]}, "names a class twice"),
                              ({"names": ["a"], "kpt_shape": [17, 3]}, "pose")]:
        data.write_text(yaml.safe_dump(document))
        with pytest.raises(SourceError, match=message):
            packer.convert(yolo, tmp_path / "ds", to="lmdb")
        assert not (tmp_path / "ds").exists()
    data.write_text("names: [unclosed")
    with pytest.raises(SourceError, match="Cannot read the YAML file"):
        packer.convert(yolo, tmp_path / "ds", to="lmdb")
    classes = tmp_path / "names.txt"
    classes.write_text("\n".join(NAMES))
    manifest = packer.convert(yolo, tmp_path / "ds", to="lmdb", classes_file=classes).manifest
    assert manifest.schema["box_labels"].params["classes"] == NAMES


def test_without_names_the_labels_are_unnamed_and_said_so(yolo: Path, tmp_path: Path) -> None:
    os.remove(yolo / "data.yaml")
    assert detect_kind(str(yolo)) == "tree"  # images/ + labels/ alone say too little
    manifest = packer.convert(yolo, tmp_path / "ds", to="lmdb", source_format="yolo").manifest
    assert manifest.schema["box_labels"].params["classes"] == []
    assert "the box labels are unnamed" in " ".join(manifest.extra["source"]["report"]["notes"])
    with pytest.raises(SourceNotFoundError, match="images/ folder beside a labels/ folder"):
        packer.convert(yolo / "labels", tmp_path / "d2", to="lmdb", source_format="yolo")


def test_edited_labels_are_a_change_update_sees(yolo: Path, tmp_path: Path) -> None:
    split = yolo / "images" / "train"
    converted = packer.convert(split, tmp_path / "ds", to="lmdb", workers=1, shard_size="1KB")
    shards = len(converted.manifest.shards)
    label = yolo / "labels" / "train" / "000002.txt"
    label.write_text("1 0.5 0.5 0.5 0.5\n")
    os.utime(label, ns=(1, 1))
    result = packer.update(split, tmp_path / "ds", workers=1)
    assert (result.files_changed, result.shards_written, result.shards_reused) == (1, 1, shards - 1)
    boxes = packer.open_dataset(tmp_path / "ds", fields=("boxes",))[1]["boxes"]
    assert boxes.tolist() == [[0.5, 0.5, 0.5, 0.5]]


def test_a_label_file_parses_as_ultralytics_writes_it() -> None:
    parsed = parse_labels(b"\xef\xbb\xbf0 0.5 0.5 0.2 0.2\n\n  1 0.1 0.1 0.3 0.1 0.2 0.4  \r\n", "a.txt")
    assert parsed.classes == [0, 1]
    assert np.allclose(parsed.box_array(), [[0.5, 0.5, 0.2, 0.2], [0.2, 0.25, 0.2, 0.3]])
    with pytest.raises(UnpackableFile, match="a.txt, line 1: the class '0.5' is not a whole number"):
        parse_labels(b"0.5 0.5 0.5 0.2 0.2\n", "a.txt")
    with pytest.raises(UnpackableFile, match="not finite"):
        parse_labels(b"0 nan 0.5 0.2 0.2\n", "a.txt")


def test_the_command_line_dry_runs_and_converts(yolo: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    command = ["convert", str(yolo / "images" / "train"), str(tmp_path / "ds"), "--to", "lmdb"]
    plan = runner.invoke(cli, [*command, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert "--source-format yolo" in plan.output
    assert "boxes (boxes, cxcywh" in plan.output and "box_labels (box_labels, 3 classes)" in plan.output
    done = runner.invoke(cli, command)
    assert done.exit_code == 0, done.output
    assert "Packed 3 samples" in done.output


def test_verify_against_the_set_compares_every_field(yolo: Path, tmp_path: Path) -> None:
    from packer.tools.verify import verify_dataset
    packer.convert(yolo, tmp_path / "ds", to="lmdb", workers=1, source_format="yolo")
    assert verify_dataset(tmp_path / "ds", against=yolo).ok
    (yolo / "labels" / "val" / "000004.txt").write_text("1 0.9 0.9 0.2 0.2\n")  # another class
    report = verify_dataset(tmp_path / "ds", against=yolo)
    assert [(p.kind, p.path) for p in report.problems] == [("source_differs", "images/val/000004.jpg")]
    assert "field 'box_labels'" in report.problems[0].message
