"""packer.write and reading fields back: samples with masks, boxes, captions and arrays.

Every behaviour runs on every backend where bytes matter (round trips, determinism, resume);
the rules about samples (skips, refusals) run once.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import packer
from packer.conversion.engines import LocalEngine
from packer.errors import DatasetError, SchemaError
from packer.format.backends import Backend
from packer.testing.faults import StopAfter, exit_code_of, kill_self

SCHEMA: list[dict[str, Any]] = [
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "cat", "dog"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["cat", "dog"]}},
    {"name": "caption", "type": "text"},
    {"name": "label", "type": "label", "params": {"classes": ["indoor", "outdoor"]}},
]


def _sample(i: int) -> dict[str, Any]:
    """Sample ``i``: its values depend on ``i`` alone, so two calls give equal samples."""
    rng = np.random.default_rng(i)
    height, width = 24 + i % 3 * 4, 32 + i % 2 * 8
    k = i % 4
    boxes = np.array([[j, j + 1, j + 9.5, j + 12.25] for j in range(k)], np.float32).reshape(k, 4)
    return {"__key__": f"img/{i:03d}", "image": rng.integers(0, 256, (height, width, 3), dtype=np.uint8),
            "mask": rng.integers(0, 3, (height, width), dtype=np.uint8), "boxes": boxes,
            "box_labels": [j % 2 for j in range(k)], "caption": f"sample {i}: ünïcode ✓",
            "label": i % 2}


def _samples(n: int) -> Iterator[dict[str, Any]]:
    return (_sample(i) for i in range(n))


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the manifest and its versions (they record times) and lock files."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "index.json" and p.parent.name != "versions"
            and not p.name.endswith("-lock")}


@pytest.mark.parametrize("workers", [1, 2])
def test_every_field_round_trips_exactly(tmp_path: Path, backend: Backend, workers: int) -> None:
    result = packer.write(tmp_path / "ds", _samples(12), SCHEMA, to=backend.name, workers=workers,
                          shard_size="8KB")
    manifest = result.manifest
    assert manifest.num_samples == 12 and not manifest.skipped and len(manifest.shards) > 1
    assert manifest.format_version == 3 and manifest.classes == ("indoor", "outdoor")
    assert [f.name for f in manifest.schema] == [f["name"] for f in SCHEMA]
    dataset = packer.open_dataset(tmp_path / "ds")
    assert isinstance(dataset, packer.FieldDataset) and len(dataset) == 12
    assert dataset.targets == [i % 2 for i in range(12)]
    for i in range(12):
        want, got = _sample(i), dataset[i]
        assert list(got) == [f["name"] for f in SCHEMA]
        assert np.array_equal(np.asarray(got["image"]), want["image"])  # PNG: lossless
        assert np.array_equal(np.asarray(got["mask"]), want["mask"])
        assert np.array_equal(np.asarray(got["boxes"]), want["boxes"])
        assert np.asarray(got["boxes"]).dtype == np.float32 and np.asarray(got["boxes"]).shape == (i % 4, 4)
        assert list(np.asarray(got["box_labels"])) == want["box_labels"]
        assert got["caption"] == want["caption"] and got["label"] == want["label"]
    assert dataset.samples[5][0].endswith("img/005")


def test_same_samples_give_the_same_bytes_whatever_the_workers(tmp_path: Path, backend: Backend) -> None:
    for name, workers in (("one", 1), ("two", 2)):
        packer.write(tmp_path / name, _samples(10), SCHEMA, to=backend.name, workers=workers,
                     shard_size="8KB")
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    keys = [os.path.basename(p) for p, _ in packer.open_dataset(tmp_path / "two").samples]
    assert keys == [f"{i:03d}" for i in range(10)]


def _write_killed_after_one_shard(dst: Path) -> None:
    engine = StopAfter(LocalEngine(1), 1, kill_self)
    packer.write(dst, _samples(10), SCHEMA, to="lmdb", engine=engine, shard_size="8KB")


def test_a_killed_write_resumes_to_the_same_dataset_and_its_spool_goes(tmp_path: Path) -> None:
    packer.write(tmp_path / "whole", _samples(10), SCHEMA, to="lmdb", workers=1, shard_size="8KB")
    dst = tmp_path / "ds"
    assert exit_code_of(functools.partial(_write_killed_after_one_shard, dst)) == -9
    assert not (dst / "index.json").exists()
    assert [p.name for p in tmp_path.iterdir() if "packer-spool" in p.name]  # left by the kill
    with pytest.raises(packer.PackerError, match="resume"):  # an unfinished DST is not reused silently
        packer.write(dst, _samples(10), SCHEMA, to="lmdb", workers=1, shard_size="8KB")
    result = packer.write(dst, _samples(10), SCHEMA, to="lmdb", workers=1, shard_size="8KB", resume=True)
    assert result.resumed_shards >= 1 and result.manifest.num_samples == 10
    assert _files(dst) == _files(tmp_path / "whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "whole"]


def test_misfit_samples_are_skipped_with_their_reasons_and_the_counts_add_up(tmp_path: Path) -> None:
    samples = [_sample(i) for i in range(8)]
    samples[1]["mask"] = np.zeros((5, 5), np.uint8)                       # not the image's size
    samples[2]["boxes"] = np.array([[3, 3, 3, 9]], np.float32)            # no area
    samples[2]["box_labels"] = [0]
    samples[3]["label"] = 7                                               # no such class
    del samples[4]["label"]                                               # no class at all
    samples[5]["mask"] = np.full_like(samples[5]["mask"], 9)              # no such mask class
    result = packer.write(tmp_path / "ds", samples, SCHEMA, to="lmdb", workers=1)
    skipped = {s.path: s.reason for s in result.manifest.skipped}
    assert skipped == {"img/001": "mask_size", "img/002": "degenerate_box", "img/003": "missing_label",
                       "img/004": "missing_label", "img/005": "mask_value"}
    assert result.manifest.num_samples + len(skipped) == len(samples) == result.found
    keys = [p.rsplit("/", 1)[-1] for p, _ in packer.open_dataset(tmp_path / "ds").samples]
    assert keys == ["000", "006", "007"]


def test_strict_refuses_the_first_misfit(tmp_path: Path) -> None:
    samples = [_sample(0), {**_sample(1), "mask": np.zeros((2, 2), np.uint8)}]
    with pytest.raises(packer.PackerError, match="img/001"):
        packer.write(tmp_path / "ds", samples, SCHEMA, to="lmdb", workers=1, strict=True)
    assert not (tmp_path / "ds" / "index.json").exists()


def test_a_schema_without_a_label_has_no_classes(tmp_path: Path, backend: Backend) -> None:
    schema = [{"name": "image", "type": "image"}, {"name": "caption", "type": "text"},
              {"name": "embedding", "type": "ndarray", "params": {"dtype": "float32", "shape": [4]}}]
    samples = [{"image": Image.new("RGB", (8, 6), (i, 0, 0)), "caption": f"c{i}",
                "embedding": np.arange(4, dtype=np.float32) + i} for i in range(5)]
    result = packer.write(tmp_path / "ds", samples, schema, to=backend.name, workers=1)
    assert result.manifest.classes == () and result.manifest.num_samples == 5
    dataset = packer.open_dataset(tmp_path / "ds")
    got = dataset[3]
    assert got["caption"] == "c3" and np.array_equal(got["embedding"], np.arange(4, dtype=np.float32) + 3)
    assert np.asarray(got["image"])[0, 0].tolist() == [3, 0, 0]
    assert [os.path.basename(p) for p, _ in dataset.samples] == [f"{i:08d}" for i in range(5)]


def test_image_file_bytes_are_kept_as_given_with_the_original_codec(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (10, 7), (9, 8, 7)).save(buffer, format="JPEG", quality=90)
    jpeg = buffer.getvalue()
    packer.write(tmp_path / "ds", [{"image": jpeg, "caption": "x"}],
                 [{"name": "image", "type": "image"}, {"name": "caption", "type": "text"}], to="lmdb")
    raw = packer.open_dataset(tmp_path / "ds", decode={"image": False})[0]
    assert bytes(raw["image"]) == jpeg and raw["caption"] == "x"
    assert packer.open_dataset(tmp_path / "ds", decode=False)[0]["caption"] == b"x"


@pytest.mark.parametrize(("samples", "match"), [
    ([{"image": b"", "colour": 1}], "colour"),
    ([{"__key__": "a", "image": b""}, {"__key__": "a", "image": b""}], "twice"),
    ([{"__key__": "../escape", "image": b""}], r"\.\."),
    ([{"__key__": "/abs", "image": b""}], "absolute"),
    (["not a dict"], "dict"),
])
def test_a_bad_sample_is_refused_before_anything_is_written(tmp_path: Path, samples: list[Any],
                                                            match: str) -> None:
    with pytest.raises((ValueError, packer.PackerError), match=match):
        packer.write(tmp_path / "ds", samples, [{"name": "image", "type": "image"}], to="lmdb")
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["ds"])  # the spool is gone
    assert not (tmp_path.parent / "escape").exists()


def test_a_label_field_needs_its_classes_and_source_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="classes"):
        packer.write(tmp_path / "a", [], [{"name": "image", "type": "image"},
                                          {"name": "label", "type": "label"}], to="lmdb")
    with pytest.raises(TypeError, match="label_column"):
        packer.write(tmp_path / "b", [], [{"name": "image", "type": "image"}], to="lmdb",
                     label_column="y")
    with pytest.raises(SchemaError):
        packer.write(tmp_path / "c", [], [{"name": "mask", "type": "mask", "params": {"image": "nope"}}],
                     to="lmdb")


def test_a_codec_that_resizes_under_masks_is_refused_before_a_sample_is_read(tmp_path: Path) -> None:
    def samples() -> Iterator[dict[str, Any]]:
        raise AssertionError("the schema and codec are checked before any sample is taken")
        yield {}

    with pytest.raises(SchemaError, match=r"field 'mask' .*resize=8.*full size .*while loading\)\.$"):
        packer.write(tmp_path / "ds", samples(), SCHEMA, to="lmdb", codec="pixels",
                     codec_options={"resize": 8})
    assert not (tmp_path / "ds").exists()
    assert list(tmp_path.iterdir()) == []  # no spool either


def test_the_imagefolder_classes_refuse_a_dataset_with_fields(tmp_path: Path) -> None:
    packer.write(tmp_path / "ds", _samples(3), SCHEMA, to="lmdb")
    with pytest.raises(DatasetError, match="open_dataset"):
        packer.LMDBImageDataset(tmp_path / "ds")
    with pytest.raises(TypeError, match="transform="):
        packer.open_dataset(tmp_path / "ds", target_transform=int)


def test_fields_selects_and_orders_and_an_unknown_one_is_named(tmp_path: Path) -> None:
    packer.write(tmp_path / "ds", _samples(4), SCHEMA, to="lmdb")
    dataset = packer.open_dataset(tmp_path / "ds", fields=("label", "caption"))
    assert dataset[2] == {"label": 0, "caption": _sample(2)["caption"]}
    with pytest.raises(DatasetError, match="colour"):
        packer.open_dataset(tmp_path / "ds", fields=("colour",))
    with pytest.raises(DatasetError, match="colour"):
        packer.open_dataset(tmp_path / "ds", decode={"colour": False})


def test_an_imagefolder_dataset_reads_as_dicts_with_fields(tmp_path: Path, standard_tree: Path) -> None:
    packer.convert(standard_tree, tmp_path / "ds", to="lmdb")
    pairs = packer.open_dataset(tmp_path / "ds")
    dicts = packer.open_dataset(tmp_path / "ds", fields=("image", "label"))
    assert not isinstance(pairs, packer.FieldDataset) and isinstance(dicts, packer.FieldDataset)
    image, target = pairs[1]
    assert dicts[1]["label"] == target
    assert np.array_equal(np.asarray(dicts[1]["image"]), np.asarray(image))
    with pytest.raises(TypeError, match="decode"):
        packer.open_dataset(tmp_path / "ds", decode={"image": False})


def _to_tensors(sample: dict[str, Any]) -> dict[str, Any]:
    """A plain joint transform: the image and mask cut to a fixed 16x16 corner, as tensors."""
    image = torch.from_numpy(np.asarray(sample["image"])[:16, :16].copy()).permute(2, 0, 1)
    mask = torch.from_numpy(np.asarray(sample["mask"])[:16, :16].copy())
    return {**sample, "image": image, "mask": mask, "boxes": torch.from_numpy(np.asarray(sample["boxes"])),
            "box_labels": torch.as_tensor(np.asarray(sample["box_labels"], np.int64))}


def test_collate_stacks_lists_and_pads() -> None:
    batch = [_to_tensors(_sample(i)) for i in (1, 2, 3)]
    out = packer.collate_fields(batch)
    assert out["image"].shape == (3, 3, 16, 16) and out["mask"].shape == (3, 16, 16)
    assert isinstance(out["boxes"], list) and [b.shape[0] for b in out["boxes"]] == [1, 2, 3]
    assert out["caption"] == [s["caption"] for s in batch] and out["label"].tolist() == [1, 0, 1]
    padded = packer.collate_fields(batch, pad={"boxes": 0, "box_labels": -1})
    assert padded["boxes"].shape == (3, 3, 4) and padded["boxes_lengths"].tolist() == [1, 2, 3]
    assert padded["box_labels"].tolist() == [[0, -1, -1], [0, 1, -1], [0, 1, 0]]
    assert torch.equal(padded["boxes"][1, :2], batch[1]["boxes"]) and not padded["boxes"][0, 1:].any()
    with pytest.raises(ValueError, match="caption"):
        packer.collate_fields(batch, pad={"caption": 0})
    with pytest.raises(ValueError, match="same fields"):
        packer.collate_fields([batch[0], {"image": batch[1]["image"]}])


@pytest.mark.slow
def test_a_two_worker_loader_gives_every_sample_once(tmp_path: Path) -> None:
    packer.write(tmp_path / "ds", _samples(12), SCHEMA, to="hdf5", shard_size="8KB")
    dataset = packer.open_dataset(tmp_path / "ds", transform=_to_tensors)
    collate = functools.partial(packer.collate_fields, pad={"boxes": 0, "box_labels": -1})
    loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="spawn",
                        collate_fn=collate)
    captions = [c for batch in loader for c in batch["caption"]]
    assert captions == [_sample(i)["caption"] for i in range(12)]
    batch = next(iter(loader))
    assert batch["image"].dtype == torch.uint8 and batch["boxes_lengths"].tolist() == [0, 1, 2, 3]
