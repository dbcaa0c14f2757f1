"""``verify_dataset``: checksums, deep reads and source comparison.

Deep reads and record counts go through the backend and run per backend (``dst``); checks of
files, the manifest, labels and the source run once (``dst_once``)."""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from imagetools import image_bytes, write_tree

import packer
from packer.cli.formatting import format_verify
from packer.errors import IncompleteDatasetError, ManifestError, NotADatasetError, SourceNotFoundError
from packer.format.backends import Backend
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME
from packer.store.durable import sha256_file
from packer.tools.verify import MAX_LISTED, VerifyReport, verify_dataset

#: 3 classes of unequal size (4, 3, 5 images), tiny PNGs; ``shard_size`` cuts them into 4+ shards.
SPEC = {f"{cls}/{i}.png": image_bytes(".png", 8, 8, seed)
        for seed, (cls, i) in enumerate([(c, i) for c, n in (("ant", 4), ("bee", 3), ("cat", 5))
                                         for i in range(n)])}
SPEC["bee/sub/deep.png"] = image_bytes(".png", 9, 7, 50)
NUM_SAMPLES = 13
SHARD_SIZE = 800


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Path]]:
    """Convert :data:`SPEC` once per backend for the module; tests get copies (see ``dst``)."""
    top = tmp_path_factory.mktemp("verify")
    src = write_tree(top / "src", SPEC)
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            done[name] = top / f"dst-{name}"
            packer.convert(src, done[name], to=name, shard_size=SHARD_SIZE)
        return done[name]

    yield get


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A private copy of the source tree, free to damage."""
    return write_tree(tmp_path / "src", SPEC)


@pytest.fixture
def dst(converted: Callable[[str], Path], backend: Backend, tmp_path: Path) -> Path:
    """A private copy of :data:`SPEC` packed with each ``backend``, free to damage: for checks
    that read shards through the backend (deep reads, record counts)."""
    return Path(shutil.copytree(converted(backend.name), tmp_path / "dst"))


@pytest.fixture
def dst_once(converted: Callable[[str], Path], any_backend: Backend, tmp_path: Path) -> Path:
    """As ``dst``, with one backend: for checks of files, the manifest, labels and the source,
    which do not depend on the backend."""
    return Path(shutil.copytree(converted(any_backend.name), tmp_path / "dst"))


def shards(dst: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((dst / MANIFEST_NAME).read_text())["shards"]
    return entries


def edit_manifest(dst: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads((dst / MANIFEST_NAME).read_text())
    change(data)
    (dst / MANIFEST_NAME).write_text(json.dumps(data))


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def kinds(report: VerifyReport) -> list[tuple[str, str]]:
    return sorted((p.kind, p.path) for p in report.problems)


# ---------------------------------------------------------------- clean datasets


def test_a_clean_dataset_verifies_at_every_depth(dst: Path, src: Path) -> None:
    assert len(shards(dst)) >= 3
    plain = verify_dataset(dst)
    assert plain.ok and plain.problems == () and plain.problem_counts == {}
    assert plain.shards_checked == plain.num_shards == len(shards(dst))
    assert plain.files_checked == plain.num_shards + 5  # targets, path offsets, paths, sources, records
    assert plain.num_samples == NUM_SAMPLES and plain.samples_checked == 0
    assert plain.bytes_hashed == packer.Manifest.load(dst).num_bytes

    deep = verify_dataset(dst, deep=True)
    assert deep.ok and deep.samples_checked == NUM_SAMPLES and deep.samples_compared == 0

    full = verify_dataset(str(dst), deep=True, against=src, progress=True)
    assert full.ok, full.problems
    assert (full.samples_checked, full.samples_compared, full.samples_skipped) == (NUM_SAMPLES,
                                                                                   NUM_SAMPLES, 0)
    text = format_verify(full)
    assert text.startswith(f"{full.root}: OK")
    assert f"{NUM_SAMPLES} of {NUM_SAMPLES} samples compared" in text


# ---------------------------------------------------------------- damaged files


@pytest.mark.parametrize("deep", [False, True])
def test_a_flipped_byte_is_a_checksum_mismatch_naming_the_shard(dst: Path, deep: bool) -> None:
    shard = shards(dst)[1]
    flip_middle_byte(dst / shard["path"])
    report = verify_dataset(dst, deep=deep)
    assert not report.ok
    assert kinds(report) == [("checksum_mismatch", shard["path"])]
    assert shard["path"] in report.problems[0].message
    assert report.shards_checked == report.num_shards - 1
    if deep:  # the damaged shard is not handed to the backend; every other sample is read
        assert report.samples_skipped == shard["num_samples"]
        assert report.samples_checked == NUM_SAMPLES - shard["num_samples"]
        assert any(shard["path"] in note for note in report.notes)
    assert shard["path"] in format_verify(report)


@pytest.mark.parametrize("deep", [False, True])
def test_a_deleted_shard_is_missing(dst_once: Path, deep: bool) -> None:
    shard = shards(dst_once)[0]
    (dst_once / shard["path"]).unlink()
    report = verify_dataset(dst_once, deep=deep)
    assert kinds(report) == [("missing", shard["path"])]
    assert report.samples_checked == (NUM_SAMPLES - shard["num_samples"] if deep else 0)


@pytest.mark.parametrize("deep", [False, True])
def test_a_truncated_shard_is_a_size_mismatch(dst_once: Path, deep: bool) -> None:
    shard = shards(dst_once)[-1]
    path = dst_once / shard["path"]
    path.write_bytes(path.read_bytes()[: shard["num_bytes"] // 2])
    report = verify_dataset(dst_once, deep=deep)
    assert kinds(report) == [("size_mismatch", shard["path"])]
    assert f"says {shard['num_bytes']}" in report.problems[0].message


def test_every_damaged_shard_is_named(dst_once: Path, src: Path) -> None:
    first, second, third = shards(dst_once)[:3]
    flip_middle_byte(dst_once / first["path"])
    (dst_once / third["path"]).unlink()
    report = verify_dataset(dst_once, deep=True, against=src)
    assert kinds(report) == [("checksum_mismatch", first["path"]), ("missing", third["path"])]
    assert report.samples_compared == report.samples_checked == NUM_SAMPLES - report.samples_skipped
    assert report.samples_skipped == first["num_samples"] + third["num_samples"]
    assert report.samples_checked >= second["num_samples"]
    text = format_verify(report)
    assert "DAMAGED: 2 problem(s)" in text
    assert first["path"] in text and third["path"] in text


def test_a_damaged_sample_index_file(dst_once: Path) -> None:
    paths, targets_name = index_file(dst_once, "paths"), index_file(dst_once, "targets")
    flip_middle_byte(dst_once / paths)
    targets = dst_once / targets_name
    targets.write_bytes(targets.read_bytes()[:-8])
    report = verify_dataset(dst_once, deep=True)
    assert kinds(report) == sorted([("checksum_mismatch", paths), ("size_mismatch", targets_name)])
    assert report.shards_checked == report.num_shards
    assert report.samples_checked == NUM_SAMPLES  # shards are intact: every sample still decodes
    assert any("labels and paths were not checked" in note for note in report.notes)


# ---------------------------------------------------------------- deep checks


def test_shards_holding_other_counts_than_the_manifest(dst: Path) -> None:
    # Move one sample from shard 0 to shard 1 in the manifest only: ranges still add up.
    def move(data: dict[str, Any]) -> None:
        data["shards"][0]["num_samples"] -= 1
        data["shards"][1]["first"] -= 1
        data["shards"][1]["num_samples"] += 1

    edit_manifest(dst, move)
    assert verify_dataset(dst).ok  # files and ranges are fine; only reading shows it
    first, second = shards(dst)[:2]
    report = verify_dataset(dst, deep=True)
    assert kinds(report) == sorted([("count_mismatch", first["path"]), ("count_mismatch", second["path"])])
    assert f"holds {first['num_samples'] + 1} records" in kinds_messages(report)[first["path"]]
    assert report.samples_skipped == first["num_samples"] + second["num_samples"]


def kinds_messages(report: VerifyReport) -> dict[str, str]:
    return {p.path: p.message for p in report.problems}


def test_an_undecodable_sample_is_a_decode_error(make_tree: Callable[..., Path], tmp_path: Path,
                                                 any_backend: Backend) -> None:
    tree = make_tree({"ant/ok.png": image_bytes(".png"), "ant/bad.jpg": b"\xff\xd8 not a jpeg",
                      "bee/ok.png": image_bytes(".png", seed=3)})
    out = tmp_path / "dst"
    packer.convert(tree, out, to=any_backend.name, check="none")  # trusts the files: packs bad.jpg
    assert verify_dataset(out, against=tree).ok
    report = verify_dataset(out, deep=True)
    assert kinds(report) == [("decode_error", "ant/bad.jpg")]
    assert report.samples_checked == 3


def index_file(dst: Path, key: str) -> str:
    """The sample-index file ``key`` (``targets``, ``paths``, ...) as the manifest names it."""
    return str(packer.Manifest.load(dst).sample_index[key].path)


def replace_targets(dst: Path, change: Callable[[np.ndarray], None]) -> None:
    """Rewrite the targets file and its manifest entry, so that only deep checks can tell."""
    path = dst / index_file(dst, "targets")
    targets = np.load(path)
    change(targets)
    np.save(path, targets, allow_pickle=False)

    def rehash(data: dict[str, Any]) -> None:
        entry = data["sample_index"]["targets"]
        entry["num_bytes"] = path.stat().st_size
        entry["sha256"] = sha256_file(str(path))

    edit_manifest(dst, rehash)


def test_labels_that_disagree_with_paths_and_counts(dst_once: Path) -> None:
    def damage(targets: np.ndarray) -> None:
        targets[0], targets[-1] = targets[-1], targets[0]  # counts unchanged, folders wrong
        targets[5] = 99

    replace_targets(dst_once, damage)
    assert verify_dataset(dst_once).ok
    report = verify_dataset(dst_once, deep=True)
    assert kinds(report) == [("label_error", "ant/0.png"), ("label_error", "bee/1.png"),
                             ("label_error", "cat/4.png"), ("label_error", index_file(dst_once, "targets"))]
    assert "target 99" in kinds_messages(report)["bee/1.png"]
    assert report.problem_counts == {"label_error": 4}


def test_an_inconsistent_manifest(dst_once: Path) -> None:
    def damage(data: dict[str, Any]) -> None:
        data["shards"][2]["first"] += 1
        data["class_counts"][0] += 1

    edit_manifest(dst_once, damage)
    report = verify_dataset(dst_once, deep=True)
    assert ("inconsistent_manifest", shards(dst_once)[2]["path"]) in kinds(report)
    assert ("inconsistent_manifest", MANIFEST_NAME) in kinds(report)
    assert report.samples_checked == NUM_SAMPLES  # samples are still read, named by shard


def test_a_manifest_path_outside_the_dataset_is_not_followed(dst_once: Path, tmp_path: Path) -> None:
    (tmp_path / "outside").write_bytes(b"x")
    edit_manifest(dst_once, lambda data: data["shards"][0].update(path="../outside"))
    with pytest.raises(ManifestError, match=r"'\.\./outside', which has a '\.\.' segment"):
        verify_dataset(dst_once)  # refused where the manifest is parsed, before any file is opened


# ---------------------------------------------------------------- against SRC


def test_against_names_changed_and_missing_source_files(dst_once: Path, src: Path) -> None:
    (src / "bee" / "1.png").write_bytes(image_bytes(".png", 8, 8, 1234))
    (src / "cat" / "3.png").unlink()
    report = verify_dataset(dst_once, against=src)
    assert kinds(report) == [("source_differs", "bee/1.png"), ("source_missing", "cat/3.png")]
    assert report.samples_compared == NUM_SAMPLES - 1
    assert report.samples_checked == 0  # no decoding without deep
    assert "first differ at byte" in kinds_messages(report)["bee/1.png"]


def test_against_a_reencoding_codec_is_not_applicable(dst_once: Path, src: Path) -> None:
    edit_manifest(dst_once, lambda data: data.update(codec="jpeg"))
    report = verify_dataset(dst_once, against=src)
    assert kinds(report) == [("not_applicable", MANIFEST_NAME)]
    assert "'jpeg'" in report.problems[0].message and "deep=True" in report.problems[0].message
    assert report.samples_compared == 0


def test_against_a_missing_source_is_refused(dst_once: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        verify_dataset(dst_once, against=tmp_path / "nowhere")


def test_problems_are_listed_up_to_a_cap_and_all_counted(tmp_path: Path) -> None:
    many = {f"c{i % 2}/{i:02}.png": image_bytes(".png", 4, 4, i) for i in range(MAX_LISTED + 5)}
    tree = write_tree(tmp_path / "src", many)
    packer.convert(tree, tmp_path / "dst", to="lmdb")
    for rel in many:
        (tree / rel).write_bytes(b"changed")
    report = verify_dataset(tmp_path / "dst", against=tree)
    assert report.problem_counts == {"source_differs": MAX_LISTED + 5}
    assert len(report.problems) == MAX_LISTED
    assert "... and 5 more source_differs" in format_verify(report)


# ---------------------------------------------------------------- not a dataset, output formats


def test_an_interrupted_conversion_is_incomplete(dst_once: Path) -> None:
    (dst_once / MANIFEST_NAME).unlink()
    (dst_once / IN_PROGRESS_NAME).write_text("{}\n")
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        verify_dataset(dst_once, deep=True)


def test_a_directory_without_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(NotADatasetError):
        verify_dataset(tmp_path)


def test_to_dict_is_json_with_stable_keys(dst_once: Path, src: Path) -> None:
    flip_middle_byte(dst_once / shards(dst_once)[0]["path"])
    report = verify_dataset(dst_once, deep=True, against=src)
    data = json.loads(json.dumps(report.to_dict()))
    assert list(data) == ["root", "ok", "deep", "against", "num_shards", "num_samples",
                          "shards_checked", "files_checked", "bytes_hashed", "samples_checked",
                          "samples_compared", "samples_skipped", "problems", "problem_counts",
                          "notes"]
    assert data["ok"] is False and data["deep"] is True and data["against"] == str(src)
    assert data["problem_counts"] == {"checksum_mismatch": 1}
    assert data["problems"] == [{"path": shards(dst_once)[0]["path"], "kind": "checksum_mismatch",
                                 "message": report.problems[0].message}]


def test_verify_is_core_torch_and_click_free() -> None:
    tree = ast.parse((Path(packer.__file__).parent / "tools" / "verify.py").read_text(encoding="utf-8"))
    top = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
           for alias in node.names}
    top |= {node.module.split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module}
    assert not top & {"torch", "click", "torchvision"}
