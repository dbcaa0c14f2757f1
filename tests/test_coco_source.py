"""COCO instances files as a source (packer.source.coco): each image a sample of typed fields.

The COCO files are built here, saved, and read back by pycocotools itself (``COCO``, ``annToMask``,
its RLE encoder): the expected values of every field come from the third-party tool, not from
packer. Images are small generated JPEGs and PNGs written into ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import SourceError
from packer.format.backends import Backend
from packer.source.base import SourceOptions
from packer.source.coco.source import CocoReader, CocoSource
from packer.source.registry import detect_kind
from packer.source.sourcefile import UnpackableFile

coco_api = pytest.importorskip("pycocotools.coco")
mask_api = pytest.importorskip("pycocotools.mask")
#: pycocotools' annToMask under numpy 2 (its own code, not packer's).
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")

#: Category ids out of order in the file: box labels follow ascending ids (1, 18, 44).
CATEGORIES = [{"id": 18, "name": "dog", "supercategory": "animal"},
              {"id": 1, "name": "person", "supercategory": "person"},
              {"id": 44, "name": "bottle", "supercategory": "kitchen"}]
#: id -> (file_name, width, height); ids out of order in the file, one image in a sub-folder.
IMAGES = {3: ("b.jpg", 40, 30), 1: ("c.png", 32, 24), 2: ("a.jpg", 48, 36), 5: ("sub/d.png", 20, 20)}


def _write_image(path: Path, width: int, height: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _rle(width: int, height: int) -> tuple[dict[str, Any], list[float], float]:
    """A crowd region as pycocotools encodes it (counts as text, as COCO files hold them), its
    bbox and its area, by pycocotools."""
    mask = np.zeros((height, width), dtype=np.uint8)
    mask[4:14, 6:20] = 1
    rle = mask_api.encode(np.asfortranarray(mask))
    text = {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}
    return text, [float(v) for v in mask_api.toBbox(rle)], float(mask_api.area(rle))


def _coco() -> dict[str, Any]:
    """A small instances file: polygons, an RLE crowd, a box past its image, one image without
    annotations, one annotation without ``area``, annotations not grouped by image."""
    rle, rle_box, rle_area = _rle(32, 24)
    annotations = [
        {"id": 11, "image_id": 3, "category_id": 1, "bbox": [30.0, 20.0, 15.0, 15.0], "area": 100.0,
         "iscrowd": 0, "segmentation": [[30, 20, 40, 20, 40, 30, 30, 30]]},
        {"id": 12, "image_id": 1, "category_id": 44, "iscrowd": 1, "segmentation": rle, "bbox": rle_box,
         "area": rle_area},
        {"id": 10, "image_id": 3, "category_id": 18, "bbox": [1.37, 2.5, 10.1, 7.3], "area": 50.33,
         "iscrowd": 0, "segmentation": [[1.37, 2.5, 11.47, 2.5, 11.47, 9.8, 1.37, 9.8]]},
        {"id": 13, "image_id": 5, "category_id": 1, "bbox": [0, 0, 20, 20], "iscrowd": 0,
         "segmentation": [[0, 0, 20, 0, 20, 20]]},
    ]
    images = [{"id": i, "file_name": name, "width": w, "height": h} for i, (name, w, h) in IMAGES.items()]
    return {"info": {"description": "packer test"}, "licenses": [], "images": images,
            "annotations": annotations, "categories": [dict(c) for c in CATEGORIES]}


def _write(folder: Path, data: dict[str, Any], *, name: str = "instances_val.json",
           images: dict[int, tuple[str, int, int]] | None = None) -> Path:
    """``data`` as ``folder/name`` (pretty-printed, ``info`` first, as COCO ships it) and its
    images under ``folder``; the file is read back by pycocotools to prove it is a COCO file."""
    folder.mkdir(parents=True, exist_ok=True)
    for ident, (file_name, width, height) in (IMAGES if images is None else images).items():
        _write_image(folder / file_name, width, height, ident)
    path = folder / name
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


@pytest.fixture
def coco_file(tmp_path: Path) -> Path:
    path = _write(tmp_path / "coco", _coco())
    coco_api.COCO(str(path))  # pycocotools reads it
    return path


def _expected_boxes(anns: list[dict[str, Any]], width: int, height: int) -> np.ndarray:
    """COCO's xywh boxes as float32, each clipped to the image where it crosses an edge."""
    boxes = np.asarray([a["bbox"] for a in anns], dtype=np.float32).reshape(-1, 4)
    for box in boxes:
        x1, y1 = max(float(box[0]), 0.0), max(float(box[1]), 0.0)
        x2, y2 = min(float(box[0]) + float(box[2]), width), min(float(box[1]) + float(box[3]), height)
        if (x1, y1, x2, y2) != (box[0], box[1], box[0] + box[2], box[1] + box[3]):
            box[:] = np.asarray([x1, y1, x2 - x1, y2 - y1], dtype=np.float32)
    return boxes


def test_every_field_round_trips_as_pycocotools_reads_it(coco_file: Path, tmp_path: Path,
                                                          backend: Backend) -> None:
    coco = coco_api.COCO(str(coco_file))
    result = packer.convert(coco_file, tmp_path / "ds", to=backend.name, workers=1)
    manifest = result.manifest
    ids = sorted(coco.getImgIds())
    assert manifest.num_samples == len(ids) and not manifest.skipped and manifest.classes == ()
    assert manifest.extra["source"]["kind"] == "coco"
    category_ids = sorted(coco.getCatIds())
    assert manifest.extra["coco"]["category_ids"] == category_ids == [1, 18, 44]
    names = [coco.loadCats(c)[0]["name"] for c in category_ids]
    assert manifest.schema["box_labels"].params["classes"] == names == ["person", "dog", "bottle"]
    assert manifest.schema["boxes"].params["format"] == "xywh"
    dataset = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    assert len(dataset) == len(ids)
    for i, image_id in enumerate(ids):  # samples in ascending image id, as CocoDetection
        info = coco.loadImgs(image_id)[0]
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
        got = dataset[i]
        assert list(got) == ["image", "boxes", "box_labels", "iscrowd", "area", "image_id", "segmentation"]
        assert bytes(got["image"]) == (coco_file.parent / info["file_name"]).read_bytes()
        assert got["image_id"] == image_id
        boxes = np.asarray(got["boxes"])
        assert boxes.dtype == np.float32 and boxes.shape == (len(anns), 4)
        assert np.array_equal(boxes, _expected_boxes(anns, info["width"], info["height"]))
        assert list(got["box_labels"]) == [category_ids.index(a["category_id"]) for a in anns]
        assert list(got["iscrowd"]) == [a["iscrowd"] for a in anns]
        area = np.asarray(got["area"])
        want_area = [a.get("area", a["bbox"][2] * a["bbox"][3]) for a in anns]
        assert area.dtype == np.float32 and np.array_equal(area, np.asarray(want_area, dtype=np.float32))
        assert got["segmentation"] == [a["segmentation"] for a in anns]
        for ann, segmentation in zip(anns, got["segmentation"], strict=True):
            assert np.array_equal(coco.annToMask({**ann, "segmentation": segmentation}), coco.annToMask(ann))
    # the box past its image (annotation 11) is clipped; the others are the file's values exactly
    clipped = dataset[ids.index(3)]["boxes"]
    assert clipped.tolist() == [[30.0, 20.0, 10.0, 10.0], np.float32([1.37, 2.5, 10.1, 7.3]).tolist()]
    empty = dataset[ids.index(2)]  # no annotation: kept, with zero boxes
    assert empty["boxes"].shape == (0, 4) and len(empty["box_labels"]) == len(empty["area"]) == 0
    assert empty["segmentation"] == []


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the manifest and its versions (they record times) and locks."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "index.json" and p.parent.name != "versions"
            and not p.name.endswith("-lock")}


def test_sample_order_and_bytes_do_not_depend_on_workers(coco_file: Path, tmp_path: Path,
                                                         any_backend: Backend) -> None:
    one = packer.convert(coco_file, tmp_path / "one", to=any_backend.name, workers=1, shard_size="2KB")
    two = packer.convert(coco_file, tmp_path / "two", to=any_backend.name, workers=2, shard_size="2KB")
    assert len(one.manifest.shards) > 1
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    dataset = packer.open_dataset(tmp_path / "two", fields=("image_id",))
    assert [dataset[i]["image_id"] for i in range(len(dataset))] == sorted(IMAGES)
    assert two.manifest.num_samples == len(IMAGES)


def _bad_input(folder: Path) -> Path:
    """One good image and one of each bad case, with an annotation of an image not listed."""
    names = {1: "ok.jpg", 2: "missing.jpg", 3: "empty.jpg", 4: "flat.jpg", 5: "../outside.jpg",
             6: "/etc/passwd", 7: "bad\x1bname.jpg", 8: "broken.jpg", 9: "a/../../outside.jpg"}
    data = {"images": [{"id": i, "file_name": n, "width": 16, "height": 12} for i, n in names.items()],
            "categories": [{"id": 1, "name": "thing"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4], "area": 16,
                             "iscrowd": 0, "segmentation": [[1, 1, 5, 1, 5, 5]]},
                            {"id": 2, "image_id": 4, "category_id": 1, "bbox": [2, 2, 0, 5], "area": 0,
                             "iscrowd": 0, "segmentation": []},
                            {"id": 3, "image_id": 99, "category_id": 1, "bbox": [1, 1, 2, 2]}]}
    path = _write(folder / "root", data, images={1: ("ok.jpg", 16, 12), 4: ("flat.jpg", 16, 12)})
    (folder / "root" / "empty.jpg").write_bytes(b"")
    (folder / "root" / "broken.jpg").write_bytes(b"not an image")
    _write_image(folder / "outside.jpg", 16, 12, 0)  # a real image outside the root: never read
    coco_api.COCO(str(path))
    return path


def test_bad_input_is_skipped_with_its_reason_and_the_counts_add_up(tmp_path: Path,
                                                                    any_backend: Backend) -> None:
    path = _bad_input(tmp_path)
    manifest = packer.convert(path, tmp_path / "ds", to=any_backend.name, workers=1).manifest
    reasons = {s.path: s.reason for s in manifest.skipped}
    assert reasons == {"missing.jpg": "missing", "empty.jpg": "empty_file", "flat.jpg": "degenerate_box",
                       "broken.jpg": "not_an_image",
                       "(unsafe file_name of image 5)": "missing_image",
                       "(unsafe file_name of image 6)": "missing_image",
                       "(unsafe file_name of image 7)": "missing_image",
                       "(unsafe file_name of image 9)": "missing_image"}
    assert manifest.num_samples + len(manifest.skipped) == 9
    notes = " ".join(manifest.extra["source"]["report"]["notes"])
    assert "1 annotation(s) name an image id" in notes and "image_id 99" in notes
    assert "4 image(s) have an unsafe file_name" in notes and "\x1b" not in notes
    assert manifest.extra["coco"]["dropped_annotations"] == 1
    dataset = packer.open_dataset(tmp_path / "ds")
    assert len(dataset) == 1 and dataset[0]["image_id"] == 1


def test_an_unsafe_file_name_is_never_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = CocoSource(str(_bad_input(tmp_path)), SourceOptions(format="coco"))
    index, reader = source.scan(), source.reader()
    opened: list[str] = []
    monkeypatch.setattr("packer.source.coco.source.read_source", lambda path: opened.append(path) or b"")
    unsafe = [item for item in index.items if item.relpath.startswith("(unsafe")]
    assert len(unsafe) == 4
    for item in unsafe:
        assert reader.known_skip(item) == "missing_image"
        with pytest.raises(UnpackableFile, match="file_name") as caught:
            reader.read(item)
        assert caught.value.reason == "missing_image"
        assert reader.dimensions(item) is None and reader.digest(item) == ""
    assert opened == []


def test_the_reader_pickles_as_its_root_alone(coco_file: Path) -> None:
    source = CocoSource(str(coco_file), SourceOptions(format="coco"))
    index = source.scan()
    reader = pickle.loads(pickle.dumps(source.reader()))
    assert isinstance(reader, CocoReader) and reader == source.reader()
    assert len(pickle.dumps(reader)) < 200 + len(str(coco_file.parent))
    assert len(index.metadata) == len(index.items) and index.metadata_columns == ()


def _refused(data: dict[str, Any], case: str) -> dict[str, Any]:
    if case == "unknown category":
        data["annotations"][0]["category_id"] = 7
    elif case == "image id twice":
        data["images"].append({**data["images"][0], "file_name": "other.jpg"})
    elif case == "category id twice":
        data["categories"].append({"id": 18, "name": "cat"})
    elif case == "category name twice":
        data["categories"].append({"id": 90, "name": "dog"})
    elif case == "one file twice":
        data["images"].append({"id": 77, "file_name": "./b.jpg", "width": 40, "height": 30})
    elif case == "no images":
        del data["images"]
    elif case == "image id not an integer":
        data["images"][0]["id"] = "3"
    return data


@pytest.mark.parametrize(("case", "message"), [
    ("unknown category", "annotation 11 .* names the category_id 7, which 'categories' does not list"),
    ("image id twice", "the image id 3 is given twice"),
    ("category id twice", "the category id 18 is given twice"),
    ("category name twice", "the category name 'dog' is given to more than one id"),
    ("one file twice", "images 3 and 77 both name the file 'b.jpg'"),
    ("no images", "no 'images' list"),
    ("image id not an integer", "has the id '3', not an integer"),
])
def test_bad_structure_is_one_error_before_anything_is_written(case: str, message: str,
                                                               tmp_path: Path) -> None:
    path = _write(tmp_path / "coco", _refused(_coco(), case))
    with pytest.raises(SourceError, match=message) as caught:
        packer.convert(path, tmp_path / "ds", to="lmdb", source_format="coco")
    assert "nothing was written" in str(caught.value)
    assert not (tmp_path / "ds").exists()


def test_a_resizing_codec_is_refused_before_anything_is_written(coco_file: Path, tmp_path: Path) -> None:
    """Boxes, areas and polygons are in the image's pixels: a resized image would leave them wrong."""
    with pytest.raises(SourceError, match=r"field 'boxes' .*resize=16.* full size.*nothing was written"):
        packer.convert(coco_file, tmp_path / "ds", to="lmdb", codec="jpeg", codec_options={"resize": 16})
    assert not (tmp_path / "ds").exists()
    result = CliRunner().invoke(cli, ["convert", str(coco_file), str(tmp_path / "ds"), "--to", "lmdb",
                                      "--codec", "pixels", "--resize", "16"])
    assert result.exit_code != 0 and "--resize 16" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "ds").exists()


def test_a_file_that_is_no_json_object_is_refused(tmp_path: Path) -> None:
    (tmp_path / "coco").mkdir()
    path = tmp_path / "coco" / "instances.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SourceError, match="the top level is a JSON list"):
        packer.convert(path, tmp_path / "ds", to="lmdb", source_format="coco")
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SourceError, match="not valid JSON"):
        packer.convert(path, tmp_path / "ds", to="lmdb", source_format="coco")


def test_the_root_defaults_to_the_file_s_folder_and_coco_s_layout_names_the_fix(tmp_path: Path) -> None:
    """COCO's layout: annotations/instances_val2017.json with the images in val2017/."""
    images = tmp_path / "coco" / "val2017"
    for ident, (file_name, width, height) in IMAGES.items():
        _write_image(images / file_name, width, height, ident)
    annotations = tmp_path / "coco" / "annotations"
    annotations.mkdir()
    path = annotations / "instances_val2017.json"
    path.write_text(json.dumps(_coco()), encoding="utf-8")
    with pytest.raises(SourceError, match=r"None of the images .*\(the default root\).*give root=.*val2017"):
        packer.convert(path, tmp_path / "ds", to="lmdb")
    assert not (tmp_path / "ds").exists()
    manifest = packer.convert(path, tmp_path / "ds", to="lmdb", root=images).manifest
    assert manifest.num_samples == len(IMAGES) and manifest.extra["coco"]["root"] == str(images)
    with pytest.raises(SourceError, match="None of the images .* under root"):
        packer.convert(path, tmp_path / "ds2", to="lmdb", root=annotations)


def test_detection_peeks_at_a_json_file(coco_file: Path, tmp_path: Path) -> None:
    assert detect_kind(str(coco_file)) == "coco"
    compact = tmp_path / "compact.JSON"
    compact.write_text(json.dumps(_coco(), separators=(",", ":")), encoding="utf-8")
    assert detect_kind(str(compact)) == "coco"
    listing = tmp_path / "list.json"
    listing.write_text('[{"path": "a.jpg", "label": 0}]', encoding="utf-8")
    lines = tmp_path / "list.jsonl"
    lines.write_text('{"path": "a.jpg", "label": 0, "images": 1}\n', encoding="utf-8")
    assert detect_kind(str(listing)) == detect_kind(str(lines)) == "list"
    result = packer.convert(coco_file, tmp_path / "ds", to="lmdb")  # no source_format
    assert result.manifest.extra["source"]["kind"] == "coco"
    assert result.manifest.extra["options"]["source"]["format"] == "coco"


def test_the_command_line_converts_and_dry_runs(coco_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    src, dst, root = str(coco_file), str(tmp_path / "ds"), str(coco_file.parent)
    plan = runner.invoke(cli, ["convert", src, dst, "--to", "lmdb", "--root", root, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert "--source-format coco" in plan.output and "WARNING" not in plan.output
    assert ("fields: image (image, original), boxes (boxes, xywh), box_labels (box_labels, 3 classes), "
            "iscrowd (ndarray, uint8), area (ndarray, float32), image_id (int), segmentation (polygons)"
            in plan.output)
    as_json = runner.invoke(cli, ["convert", src, dst, "--to", "lmdb", "--dry-run", "--json"])
    assert as_json.exit_code == 0, as_json.output
    planned = json.loads(as_json.output)
    assert planned["source_kind"] == "coco" and planned["num_images"] == len(IMAGES)
    assert [f["name"] for f in planned["schema"]][:3] == ["image", "boxes", "box_labels"]
    assert not os.path.exists(tmp_path / "ds")
    done = runner.invoke(cli, ["convert", src, dst, "--to", "lmdb", "--root", root, "--workers", "1"])
    assert done.exit_code == 0, done.output
    assert f"Packed {len(IMAGES)} samples" in done.output
    assert len(packer.open_dataset(tmp_path / "ds")) == len(IMAGES)


def test_options_a_coco_source_does_not_take_are_refused(coco_file: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="label_column= apply to"):
        packer.convert(coco_file, tmp_path / "ds", to="lmdb", label_column="label")


def test_an_image_whose_annotations_change_has_a_new_identity(coco_file: Path) -> None:
    """What resume and update compare: the file's size and mtime, and here its annotations too
    (the image file itself is untouched)."""
    def identities() -> dict[str, tuple[str, int, int]]:
        index = CocoSource(str(coco_file), SourceOptions(format="coco")).scan()
        return {item.relpath: item.identity for item in index.items}

    before = identities()
    assert identities() == before
    data = json.loads(coco_file.read_text(encoding="utf-8"))
    data["annotations"][0]["bbox"] = [2.0, 3.0, 4.0, 5.0]  # annotation 11, of image 3 (b.jpg)
    coco_file.write_text(json.dumps(data), encoding="utf-8")
    after = identities()
    assert [key for key in before if before[key] != after[key]] == ["b.jpg"]


def test_update_rewrites_only_the_shard_of_an_image_whose_annotations_changed(coco_file: Path,
                                                                               tmp_path: Path) -> None:
    shards = len(packer.convert(coco_file, tmp_path / "ds", to="lmdb", workers=1, shard_size="2KB"
                                ).manifest.shards)
    assert shards > 1
    data = json.loads(coco_file.read_text(encoding="utf-8"))
    data["annotations"][0]["bbox"] = [2.0, 3.0, 4.0, 5.0]  # annotation 11, of image 3 (b.jpg)
    coco_file.write_text(json.dumps(data), encoding="utf-8")
    result = packer.update(coco_file, tmp_path / "ds", workers=1)
    assert (result.files_changed, result.shards_written, result.shards_reused) == (1, 1, shards - 1)
    dataset = packer.open_dataset(tmp_path / "ds", fields=("image_id", "boxes"))
    changed = next(dataset[i] for i in range(len(dataset)) if dataset[i]["image_id"] == 3)
    assert changed["boxes"][0].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert packer.update(coco_file, tmp_path / "ds", workers=1).up_to_date


def test_images_without_annotations_are_dropped_on_request_and_listed(coco_file: Path,
                                                                        tmp_path: Path) -> None:
    """drop_unannotated: image 2 (a.jpg, no annotation) is a listed skip, recorded, and update
    keeps the choice; without it the note says how to drop them."""
    kept = packer.convert(coco_file, tmp_path / "kept", to="lmdb", workers=1).manifest
    notes = " ".join(kept.extra["source"]["report"]["notes"])
    assert "1 image(s) have no annotation: kept, with zero boxes (drop_unannotated=True" in notes
    manifest = packer.convert(coco_file, tmp_path / "ds", to="lmdb", workers=1,
                              drop_unannotated=True).manifest
    assert [(s.path, s.reason) for s in manifest.skipped] == [("a.jpg", "no_annotation")]
    assert manifest.num_samples + len(manifest.skipped) == len(IMAGES)
    assert "skipped as no_annotation" in " ".join(manifest.extra["source"]["report"]["notes"])
    assert manifest.extra["options"]["source"]["drop_unannotated"] is True
    assert "drop_unannotated" not in kept.extra["options"].get("source", {})
    dataset = packer.open_dataset(tmp_path / "ds", fields=("image_id",))
    assert [dataset[i]["image_id"] for i in range(len(dataset))] == [1, 3, 5]
    assert packer.update(coco_file, tmp_path / "ds", workers=1).up_to_date
    done = CliRunner().invoke(cli, ["convert", str(coco_file), str(tmp_path / "cli"), "--to", "lmdb",
                                    "--workers", "1", "--drop-unannotated"])
    assert done.exit_code == 0, done.output
    assert len(packer.open_dataset(tmp_path / "cli")) == len(IMAGES) - 1
    tree = tmp_path / "tree" / "cat"
    _write_image(tree / "x.png", 8, 8, 0)
    with pytest.raises(SourceError, match=r"drop_unannotated=True apply to.*COCO"):
        packer.convert(tree.parent, tmp_path / "t", to="lmdb", drop_unannotated=True)


def test_verify_against_the_coco_file_compares_every_field(coco_file: Path, tmp_path: Path) -> None:
    from packer.tools.verify import verify_dataset
    packer.convert(coco_file, tmp_path / "ds", to="lmdb", workers=1)
    assert verify_dataset(tmp_path / "ds", against=coco_file).ok
    data = _coco()
    data["annotations"][0]["bbox"] = [31.0, 20.0, 14.0, 15.0]  # image 3's first box moved
    coco_file.write_text(json.dumps(data, indent=2), encoding="utf-8")
    report = verify_dataset(tmp_path / "ds", against=coco_file)
    assert [p.kind for p in report.problems] == ["source_differs"]
    assert "field 'boxes'" in report.problems[0].message
