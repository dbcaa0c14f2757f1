"""The dry run: the same scan and shard plan as a conversion, an honest size estimate, no writes."""

from __future__ import annotations

import ast
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from imagetools import STANDARD_IMAGES, Dir, Symlink, jpeg_bytes, png_bytes

import packer
from packer import EmptySourceError, SourceNotFoundError, UnknownNameError, convert, scan_imagefolder
from packer.cli.formatting import format_plan
from packer.conversion.dryrun import ConversionPlan, plan_conversion
from packer.conversion.sharding import plan_shards
from packer.format.backends import Backend
from packer.format.manifest import Manifest


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` (directories too, links not followed) -> (mtime_ns, size)."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames + ([""] if dirpath == str(root) else []):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            out[os.path.relpath(path, root)] = (st.st_mtime_ns, st.st_size)
    return out


def output_bytes(dst: Path) -> int:
    """Bytes of every file a conversion left under ``dst`` (shards, sample index, manifest)."""
    return sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- what the scan found


def test_class_map_and_counts_match_the_scan(standard_tree: Path) -> None:
    plan = plan_conversion(standard_tree, to="lmdb")
    index = scan_imagefolder(standard_tree)
    assert plan.src == index.root
    assert plan.classes == index.classes
    assert plan.class_to_idx == index.class_to_idx
    assert plan.class_counts == tuple(Counter(i.label for i in index.items)[c]
                                      for c in range(len(index.classes)))
    assert plan.num_images == len(index.items) == STANDARD_IMAGES
    assert plan.source_bytes == sum(i.size for i in index.items) and plan.unknown_sizes == 0
    assert plan.empty_classes == () and plan.would_fail_empty is False
    assert plan.report == index.report and plan.report.other_files == 1  # dog/notes.txt


def test_extension_mix_is_lower_cased(standard_tree: Path) -> None:
    plan = plan_conversion(standard_tree, to="hdf5")
    assert plan.extensions == Counter({".png": 6, ".jpg": 5, ".bmp": 1, ".jpeg": 1, ".webp": 1})
    assert "extensions: .png 6, .jpg 5, .bmp 1, .jpeg 1, .webp 1" in format_plan(plan)


def test_is_valid_file_and_suffixless_names(make_tree: Any) -> None:
    src = make_tree({"c/a.jpg": jpeg_bytes(), "c/raw": png_bytes(), "c/b.image": png_bytes()})
    plan = plan_conversion(src, to="lmdb", is_valid_file=lambda p: not p.endswith(".jpg"))
    assert plan.extensions == Counter({"": 1, ".image": 1})
    assert plan.report.other_files == 1
    assert "extensions: (none) 1, .image 1" in format_plan(plan)


def test_hidden_entries_are_listed_and_include_hidden_packs_them(make_tree: Any) -> None:
    src = make_tree({"c/a.jpg": jpeg_bytes(8, 8, 1), "c/._a.jpg": jpeg_bytes(8, 8, 2),
                     "c/.ipynb_checkpoints/a-checkpoint.jpg": jpeg_bytes(8, 8, 3),
                     ".DS_Store": b"x", "root.txt": b"y"})
    plan = plan_conversion(src, to="lmdb")
    assert sorted(plan.report.ignored_hidden) == [".DS_Store", "c/._a.jpg", "c/.ipynb_checkpoints"]
    assert plan.num_images == 1 and plan.report.root_files == 1
    text = format_plan(plan)
    assert "ignored hidden entries" in text and "--include-hidden" in text
    for entry in plan.report.ignored_hidden:
        assert f"\n  {entry}\n" in text
    assert "1 file(s) at the root" in text
    shown = plan_conversion(src, to="lmdb", include_hidden=True)
    assert shown.num_images == 3 and shown.report.ignored_hidden == ()
    assert "ignored hidden entries" not in format_plan(shown)


def test_broken_link_has_unknown_size(make_tree: Any) -> None:
    data = jpeg_bytes()
    src = make_tree({"c/a.jpg": data, "c/gone.jpg": Symlink("nowhere.jpg")})
    plan = plan_conversion(src, to="hdf5")
    assert plan.num_images == 2 and plan.unknown_sizes == 1 and plan.source_bytes == len(data)
    assert "unknown sizes: 1 file(s)" in format_plan(plan)


def test_empty_classes_are_reported_not_raised(make_tree: Any, tmp_path: Path) -> None:
    src = make_tree({"a/1.jpg": jpeg_bytes(), "empty/readme.txt": b"hi", "void": Dir()})
    plan = plan_conversion(src, to="lmdb")
    assert plan.classes == ("a", "empty", "void") and plan.class_counts == (1, 0, 0)
    assert plan.empty_classes == ("empty", "void") and plan.would_fail_empty is True
    text = format_plan(plan)
    assert "EMPTY" in text and "--allow-empty" in text and "'empty', 'void'" in text
    assert text.splitlines()[-1].startswith("Nothing was written")
    with pytest.raises(EmptySourceError):  # what the warning predicts
        convert(src, tmp_path / "dst", to="lmdb")
    allowed = plan_conversion(src, to="lmdb", allow_empty=True)
    assert allowed.empty_classes == ("empty", "void") and allowed.would_fail_empty is False
    assert "WARNING" not in format_plan(allowed)


# ----------------------------------------------------------------------------- the plan is convert's


@pytest.mark.parametrize("shard_size", [1500, "3kB", None])
def test_shard_plan_is_what_convert_writes(standard_tree: Path, tmp_path: Path, backend: Backend,
                                           shard_size: int | str | None) -> None:
    kwargs: dict[str, Any] = {} if shard_size is None else {"shard_size": shard_size}
    plan = plan_conversion(standard_tree, to=backend.name, **kwargs)
    index = scan_imagefolder(standard_tree)
    expected = plan_shards([i.size for i in index.items], [i.relpath for i in index.items], plan.shard_size)
    assert [(s.start, s.stop, s.planned_bytes) for s in plan.shards] == [
        (p.start, p.stop, p.planned_bytes) for p in expected]
    for shard in plan.shards:
        assert shard.first_path == index.items[shard.start].relpath
        assert shard.last_path == index.items[shard.stop - 1].relpath
    manifest = convert(standard_tree, tmp_path / "dst", to=backend.name, **kwargs).manifest
    assert not manifest.skipped
    assert [(s.start, s.num_images) for s in plan.shards] == [
        (e.first, e.num_samples) for e in manifest.shards]
    assert [s.name for s in plan.shards] == [f"shard-{n:05d}" for n in range(len(plan.shards))]
    if shard_size is not None:
        assert len(plan.shards) > 1


def test_estimate_is_close_to_the_real_output(make_tree: Any, tmp_path: Path,
                                              backend: Backend) -> None:
    # Few dozen small JPEGs (values stored inside LMDB leaf pages) plus a few that need LMDB
    # overflow pages, in one shard and in many.
    spec: dict[str, Any] = {f"c{i % 3}/{i:03d}.jpg": jpeg_bytes(16, 12, i) for i in range(36)}
    spec.update({f"big/{i}.jpg": jpeg_bytes(96, 64, i) for i in range(4)})
    _assert_the_estimate_is_close(make_tree(spec), tmp_path, backend, 8000)


def _assert_the_estimate_is_close(src: Path, tmp_path: Path, backend: Backend, shard_size: int) -> int:
    """Plan and convert ``src`` in one shard and in shards of ``shard_size``: the estimates of
    the output and of each shard within 0.8-1.25x of what was written; the output's bytes."""
    real = 0
    for size in (None, shard_size):
        kwargs: dict[str, Any] = {} if size is None else {"shard_size": size}
        plan = plan_conversion(src, to=backend.name, **kwargs)
        dst = tmp_path / f"dst-{size}"
        convert(src, dst, to=backend.name, **kwargs)
        real = output_bytes(dst)
        assert plan.estimated_output_bytes is not None
        assert 0.8 * real <= plan.estimated_output_bytes <= 1.25 * real, (size, real)
        written = Manifest.load(dst).shards
        assert len(written) == len(plan.shards)
        for shard, entry in zip(plan.shards, written, strict=True):
            assert shard.estimated_bytes is not None
            assert 0.8 * entry.num_bytes <= shard.estimated_bytes <= 1.25 * entry.num_bytes
    return real


# ----------------------------------------------------------------------------- nothing is written


def test_nothing_is_written(standard_tree: Path, tmp_path: Path, backend: Backend) -> None:
    (standard_tree / "void").mkdir()
    before = snapshot(tmp_path)
    plan = plan_conversion(standard_tree, to=backend.name, shard_size=2000)
    json.dumps(plan.to_dict())
    format_plan(plan)
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "dst").exists()


# ----------------------------------------------------------------------------- bad options


def test_bad_options_raise_before_scanning(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(UnknownNameError, match="Unknown backend 'zarr'; available: hdf5, lmdb"):
        plan_conversion(missing, to="zarr")
    with pytest.raises(UnknownNameError, match="Unknown codec 'webp'; available: jpeg, original, pixels"):
        plan_conversion(missing, to="lmdb", codec="webp")
    with pytest.raises(ValueError, match="invalid size"):
        plan_conversion(missing, to="lmdb", shard_size="lots")
    with pytest.raises(SourceNotFoundError):
        plan_conversion(missing, to="lmdb")


# ----------------------------------------------------------------------------- output


def test_to_dict_is_json_and_matches_the_plan(standard_tree: Path) -> None:
    plan = plan_conversion(standard_tree, to="lmdb", shard_size=3000)
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["dry_run"] is True and data["backend"] == "lmdb" and data["codec"] == "original"
    assert data["classes"] == list(plan.classes)
    assert data["class_counts"] == dict(zip(plan.classes, plan.class_counts, strict=True))
    assert data["extensions"] == dict(plan.extensions)
    assert data["num_images"] == STANDARD_IMAGES and data["shard_size"] == 3000
    assert data["estimated_output_bytes"] == plan.estimated_output_bytes
    assert data["scan"]["other_files"] == 1
    assert [(s["name"], s["start"], s["stop"]) for s in data["shards"]] == [
        (s.name, s.start, s.stop) for s in plan.shards]


def test_format_plan_names_every_class_and_ends_with_the_no_write_line(standard_tree: Path) -> None:
    plan = plan_conversion(standard_tree, to="hdf5", shard_size=3000)
    text = format_plan(plan)
    header = text.splitlines()[0]
    assert header.startswith(f"Dry run: {plan.src} -> hdf5, codec original: {STANDARD_IMAGES} images "
                             "in 4 classes")
    assert f"in {len(plan.shards)} shard(s)" in header
    for index, name in enumerate(plan.classes):
        assert any(line.split()[:1] == [str(index)] and name in line for line in text.splitlines())
    for shard in plan.shards:
        assert shard.name in text
    assert "WARNING" not in text
    assert text.splitlines()[-1] == ("Nothing was written (dry run). To convert for real, run the same "
                                     "command without --dry-run.")


def test_long_lists_are_capped(make_tree: Any) -> None:
    spec: dict[str, Any] = {f"class{i:02d}/x.jpg": jpeg_bytes(8, 8, i) for i in range(25)}
    spec.update({f"class00/.junk{i:02d}": b"" for i in range(23)})
    plan = plan_conversion(make_tree(spec), to="lmdb", shard_size=1)
    assert len(plan.shards) == 25 and len(plan.report.ignored_hidden) == 23
    text = format_plan(plan)
    assert "... and 5 more classes" in text
    assert "... 5 more shards" in text and "shard-00019" in text
    assert "shard-00020" not in text
    assert "... and 3 more" in text


def test_plan_is_a_frozen_record(standard_tree: Path) -> None:
    plan = plan_conversion(standard_tree, to="lmdb")
    assert isinstance(plan, ConversionPlan)
    with pytest.raises(AttributeError):
        plan.backend = "hdf5"  # type: ignore[misc]
    assert hash(plan) == hash(plan_conversion(standard_tree, to="lmdb"))


def test_dryrun_imports_neither_torch_nor_click() -> None:
    tree = ast.parse((Path(packer.__file__).parent / "conversion" / "dryrun.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name.split(".")[0] for name in imported} & {"torch", "click", "torchvision"}


def test_a_webdataset_dry_run_speaks_of_samples_and_shows_the_pattern(standard_tree: Path,
                                                                      tmp_path: Path) -> None:
    from sourcekinds import write_webdataset

    write_webdataset(standard_tree, tmp_path / "wds", per_shard=4)
    pattern = str(tmp_path / "wds" / "shard-{000000..000003}.tar")
    plan = plan_conversion(pattern, to="lmdb")
    text = format_plan(plan)
    assert text.startswith(f"Dry run: {pattern} -> lmdb") and f"{plan.num_images} samples in" in text
    assert "classes (index, name, samples):" in text
    assert "at the root (outside any class)" not in text and "without an image name" not in text
    assert plan.to_dict()["src"] == plan.src and "would_stop" not in plan.to_dict()


def test_a_parquet_dry_run_speaks_of_rows_and_says_when_nothing_would_be_packed(tmp_path: Path) -> None:
    from parquet_tools import Row, write_table

    table = write_table(tmp_path / "t" / "train.parquet",
                        [Row("imgs/0.png", None, 0), Row("imgs/1.png", None, 1), Row(None, None, 0)],
                        classes=["a", "b"])
    plan = plan_conversion(str(tmp_path / "t" / "*.parquet"), to="lmdb")
    text = format_plan(plan)
    assert text.startswith(f"Dry run: {tmp_path / 't' / '*.parquet'} -> lmdb") and "3 rows in" in text
    assert "at the root (outside any class)" not in text
    assert plan.would_stop is not None and not plan.would_fail_empty
    assert plan.to_dict()["would_stop"] == plan.would_stop
    assert "(missing 2, missing_image 1)" in plan.would_stop
    assert f"WARNING: the conversion would stop: {plan.would_stop}." in text
    with pytest.raises(EmptySourceError) as raised:
        convert(table, tmp_path / "dst", to="lmdb", workers=1)
    stops = plan.would_stop.replace("*.parquet", "train.parquet")
    assert f"The conversion stops: {stops}" in str(raised.value)
    assert not (tmp_path / "dst").exists()


def test_a_run_that_reads_nothing_packable_stops_before_the_manifest(make_tree: Any, tmp_path: Path) -> None:
    src = make_tree({"a/x.jpg": b"not an image", "b/y.png": b"nor this"})
    with pytest.raises(EmptySourceError, match=r"every one of the 2 images .* is skipped \(not_an_image 2\)"):
        convert(src, tmp_path / "dst", to="lmdb", workers=1)
    assert not (tmp_path / "dst" / "index.json").exists()
    with pytest.raises(packer.IncompleteDatasetError):
        packer.open_dataset(tmp_path / "dst")


def _coco_with_many_outlines(folder: Path, images: int = 24) -> Path:
    """Tiny images with 30 boxes and 24-point polygons each: the fields outweigh the images."""
    rng = np.random.default_rng(7)
    entries, annotations = [], []
    for number in range(images):
        name = f"img{number:03d}.jpg"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(jpeg_bytes(20, 16, number))
        entries.append({"id": number + 1, "file_name": name, "width": 20, "height": 16})
        for box in range(30):
            ring = [round(float(v), 2) for v in rng.uniform(0, 15, 24)]
            annotations.append({"id": len(annotations) + 1, "image_id": number + 1,
                                "category_id": 1 + box % 3,
                                "bbox": [1.0, 1.0, 10.0, 8.0], "area": 80.0, "iscrowd": 0,
                                "segmentation": [ring]})
    categories = [{"id": i, "name": f"thing{i}", "supercategory": "x"} for i in (1, 2, 3)]
    path = folder / "instances.json"
    path.write_text(json.dumps({"images": entries, "annotations": annotations, "categories": categories}))
    return path


def test_the_estimate_counts_what_fields_add_to_each_record(tmp_path: Path, backend: Backend) -> None:
    src = _coco_with_many_outlines(tmp_path / "coco")
    images = sum(p.stat().st_size for p in (tmp_path / "coco").glob("*.jpg"))
    real = _assert_the_estimate_is_close(src, tmp_path, backend, 40_000)
    assert real > 5 * images  # the boxes, labels and outlines are most of the dataset
