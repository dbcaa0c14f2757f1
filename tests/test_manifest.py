"""The manifest: JSON round trip, and every way reading it can fail."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packer.errors import (
    DatasetError,
    IncompleteDatasetError,
    ManifestError,
    NotADatasetError,
    PackerError,
)
from packer.format.manifest import (
    FORMAT_VERSION,
    IN_PROGRESS_NAME,
    LATEST_FORMAT_VERSION,
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    ScanInfo,
    ShardEntry,
    SkippedFile,
)
from packer.format.sample_index import INDEX_FILES, SampleIndex, write_sample_index
from packer.keys import is_safe_key

texts = st.text(max_size=20)
#: What a manifest may name: keys inside the dataset, and classes that are one folder name each.
_segments = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="/"),
                    min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
keys = st.lists(_segments, min_size=1, max_size=3).map("/".join)
names = _segments
counts = st.integers(0, 2**40)
shas = st.text("0123456789abcdef", min_size=64, max_size=64)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | texts
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10)

manifests = st.builds(
    Manifest,
    backend=st.sampled_from(["lmdb", "hdf5"]),
    codec=st.just("original"),
    codec_params=st.dictionaries(texts, json_values, max_size=3),
    check=st.sampled_from(["full", "header", "none"]),
    max_pixels=st.integers(1, 2**40),
    classes=st.just(()),
    class_counts=st.just(()),
    shards=st.lists(st.builds(ShardEntry, keys, counts, counts, counts, shas), max_size=4).map(tuple),
    sample_index=st.dictionaries(texts, st.builds(FileEntry, keys, counts, shas), max_size=3),
    skipped=st.lists(st.builds(SkippedFile, texts, texts, texts), max_size=4).map(tuple),
    scan=st.builds(ScanInfo, texts, st.lists(texts, max_size=3).map(tuple), st.booleans(), texts,
                   st.lists(texts, max_size=3).map(tuple), st.lists(texts, max_size=3).map(tuple),
                   st.lists(texts, max_size=3).map(tuple), counts, counts),
    source=texts,
    created_by=texts,
    created_at=texts,
    extra=st.dictionaries(texts, json_values, max_size=3),
)
# One count per class, as a manifest that reads back has.
manifests = manifests.flatmap(
    lambda m: st.lists(st.tuples(names, counts), max_size=5, unique_by=lambda p: p[0]).map(
        lambda pairs: dataclasses.replace(m, classes=tuple(n for n, _ in pairs),
                                          class_counts=tuple(c for _, c in pairs))))


@settings(deadline=None)
@given(manifests)
def test_json_round_trip(manifest: Manifest) -> None:
    text = manifest.to_json()
    assert Manifest.from_json(text) == manifest
    assert manifest.to_json() == text  # stable
    data = json.loads(text)
    assert data["format"] == "packer"
    assert data["format_version"] == FORMAT_VERSION
    assert data["num_samples"] == manifest.num_samples == sum(s.num_samples for s in manifest.shards)
    assert text.endswith("\n")
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"


def example_manifest() -> Manifest:
    return Manifest(
        backend="lmdb", codec="original", codec_params={"exif_transpose": False}, check="full",
        max_pixels=1000, classes=("cat", "dög"), class_counts=(2, 1),
        shards=(ShardEntry("shard-00000.lmdb", 0, 2, 100, "a" * 64),
                ShardEntry("shard-00001.lmdb", 2, 1, 50, "b" * 64)),
        sample_index={"targets": FileEntry("samples/targets.npy", 152, "c" * 64)},
        skipped=(SkippedFile("cat/bad.jpg", "truncated", "image file is truncated"),),
        scan=ScanInfo("extensions", (".jpg",), False, "walked_once", (".DS_Store",), (), (), 1, 0),
        source="/data/src", created_by="packer 0.1.0", created_at="2024-01-01T00:00:00+00:00",
    )


def test_save_and_load(tmp_path: Path) -> None:
    manifest = example_manifest()
    path = manifest.save(tmp_path)
    assert path == os.path.join(tmp_path, MANIFEST_NAME)
    assert sorted(os.listdir(tmp_path)) == [MANIFEST_NAME, "versions"]  # no temporary file left behind
    assert os.listdir(tmp_path / "versions") == ["00001.json"]  # the version, kept
    assert Path(path).read_text(encoding="utf-8") == manifest.to_json()
    assert (tmp_path / "versions" / "00001.json").read_text(encoding="utf-8") == manifest.to_json()
    assert Manifest.load(tmp_path, 1) == manifest
    loaded = Manifest.load(tmp_path)
    assert loaded == manifest
    assert loaded.num_samples == 3
    assert loaded.num_bytes == 100 + 50 + 152
    manifest.save(tmp_path)  # replacing works too
    assert Manifest.load(str(tmp_path)) == manifest


# ----------------------------------------------------------------------------- load errors


def test_missing_index_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "something.txt").write_text("hi")
    with pytest.raises(NotADatasetError, match="not a packer dataset") as info:
        Manifest.load(tmp_path)
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, DatasetError) and isinstance(info.value, PackerError)


def test_missing_directory_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(NotADatasetError, match="does not exist"):
        Manifest.load(tmp_path / "nope")


def test_a_file_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("hi")
    with pytest.raises(NotADatasetError, match="is not a directory"):
        Manifest.load(tmp_path / "file")


def test_marker_without_index_is_incomplete(tmp_path: Path) -> None:
    (tmp_path / IN_PROGRESS_NAME).write_text("{}")
    (tmp_path / "shard-00000.lmdb").write_bytes(b"partial")
    with pytest.raises(IncompleteDatasetError, match="incomplete") as info:
        Manifest.load(tmp_path)
    assert isinstance(info.value, DatasetError)
    assert "overwrite=True" in str(info.value)


def _write(tmp_path: Path, data: Any) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    (tmp_path / MANIFEST_NAME).write_text(text, encoding="utf-8")


@pytest.mark.parametrize("text", ["", "{", "not json", '{"format": "packer",}', "\x00"])
def test_malformed_json(tmp_path: Path, text: str) -> None:
    _write(tmp_path, text)
    with pytest.raises(ManifestError, match=MANIFEST_NAME):
        Manifest.load(tmp_path)


@pytest.mark.parametrize("data", [[], '"packer"', {"format": "other"}, {"no": "format"}])
def test_not_a_packer_manifest(tmp_path: Path, data: Any) -> None:
    _write(tmp_path, data)
    with pytest.raises(ManifestError, match="not a packer manifest"):
        Manifest.load(tmp_path)


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 99, "1", None, 1.0])
def test_newer_or_bad_format_version(tmp_path: Path, version: Any) -> None:
    data = example_manifest().to_dict()
    data["format_version"] = version
    _write(tmp_path, data)
    with pytest.raises(ManifestError, match="format version"):
        Manifest.load(tmp_path)


def test_newer_format_version_says_upgrade() -> None:
    data = example_manifest().to_dict()
    data["format_version"] = LATEST_FORMAT_VERSION + 1
    with pytest.raises(ManifestError, match="upgrade packer"):
        Manifest.from_json(json.dumps(data))


REQUIRED = ["backend", "codec", "codec_params", "check", "max_pixels", "classes", "class_counts",
            "shards", "sample_index", "skipped", "scan", "source", "created_by", "created_at"]


@pytest.mark.parametrize("field", REQUIRED)
def test_missing_field(field: str) -> None:
    data = example_manifest().to_dict()
    del data[field]
    with pytest.raises(ManifestError, match=f"lacks the field '{field}'"):
        Manifest.from_json(json.dumps(data))


@pytest.mark.parametrize(("field", "value"), [
    ("backend", 5), ("codec", ["original"]), ("codec_params", []), ("check", None),
    ("max_pixels", "1000"), ("max_pixels", True), ("max_pixels", 1.5), ("classes", "cat"),
    ("class_counts", {}), ("shards", {}), ("sample_index", []), ("skipped", "none"),
    ("scan", []), ("source", 1), ("created_by", False), ("created_at", 0),
])
def test_wrong_field_type(field: str, value: Any) -> None:
    data = example_manifest().to_dict()
    data[field] = value
    with pytest.raises(ManifestError, match=f"field '{field}' should be"):
        Manifest.from_json(json.dumps(data))


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


@pytest.mark.parametrize(("path", "value", "says"), [
    (("shards", 0), "shard-00000.lmdb", "shards[0] should be an object"),
    (("shards", 0, "first"), "0", "shards[0].first should be int"),
    (("shards", 0, "num_samples"), None, "shards[0].num_samples should be int"),
    (("shards", 0, "num_bytes"), True, "shards[0].num_bytes should be int"),
    (("shards", 1, "path"), 7, "shards[1].path should be str"),
    (("shards", 0, "sha256"), 1, "shards[0].sha256 should be str"),
    (("shards", 0, "bogus"), 1, "unknown field(s) ['bogus']"),
    (("sample_index", "targets"), [], "sample_index['targets'] should be an object"),
    (("sample_index", "targets", "num_bytes"), "152", "num_bytes should be int"),
    (("skipped", 0), "cat/bad.jpg", "skipped[0] should be an object"),
    (("skipped", 0, "reason"), 3, "skipped[0].reason should be str"),
    (("scan", "bogus"), 1, "scan has unknown field(s)"),
    (("scan", "other_files"), "1", "scan.other_files should be int"),
    (("scan", "extensions"), ".jpg", "scan.extensions should be a list of str"),
    (("scan", "ignored_hidden"), [1], "scan.ignored_hidden should be a list of str"),
    (("classes", 0), 1, "classes[0] should be str"),
    (("class_counts", 1), "1", "class_counts[1] should be int"),
    (("extra",), [], "field 'extra' should be dict"),
])
def test_malformed_entries(path: tuple[Any, ...], value: Any, says: str) -> None:
    data = json.loads(example_manifest().to_json())
    _set(data, path, value)
    with pytest.raises(ManifestError, match="re-convert") as info:
        Manifest.from_json(json.dumps(data), source="/x/index.json")
    assert says in str(info.value)
    assert "/x/index.json" in str(info.value)


def test_missing_entry_field() -> None:
    data = json.loads(example_manifest().to_json())
    del data["shards"][0]["sha256"]
    with pytest.raises(ManifestError, match=r"shards\[0\] has missing field\(s\) \['sha256'\]"):
        Manifest.from_json(json.dumps(data))


def test_optional_fields_may_be_absent() -> None:
    data = json.loads(example_manifest().to_json())
    del data["extra"]
    for key in ("ignored_hidden", "cut_symlink_loops", "unreadable_dirs", "other_files",
                "root_files"):
        del data["scan"][key]
    manifest = Manifest.from_json(json.dumps(data))
    assert manifest.extra == {}
    assert manifest.scan.ignored_hidden == () and manifest.scan.root_files == 0


# ----------------------------------------------------------------------------- the sample index

relpaths = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
                   max_size=12) | st.binary(min_size=1, max_size=12).map(
    lambda b: b.replace(b"\x00", b"_").decode("utf-8", "surrogateescape"))


@settings(deadline=None, max_examples=50)
@given(st.lists(st.tuples(relpaths, st.integers(0, 2**40)), max_size=30))
def test_sample_index_round_trip(samples: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        sources = [(len(p), 7, -i) for i, (p, _) in enumerate(samples)]
        entries = write_sample_index(root, [p for p, _ in samples], [t for _, t in samples], sources)
        assert set(entries) == {*INDEX_FILES, "sources"}
        for key, entry in entries.items():
            stem, suffix = os.path.splitext(INDEX_FILES.get(key, "samples/sources.npy"))
            assert entry.path == f"{stem}-{entry.sha256[:16]}{suffix}"  # named by its contents
            assert os.path.getsize(os.path.join(root, entry.path)) == entry.num_bytes
        index = pickle.loads(pickle.dumps(SampleIndex(root, len(samples), entries)))
        assert index.sources is not None and index.sources.tolist() == [list(s) for s in sources]
        assert [index.path(i) for i in range(len(samples))] == [p for p, _ in samples]
        assert index.targets.dtype == np.int64
        assert index.targets.tolist() == [t for _, t in samples]
        assert len(pickle.dumps(index)) < 1024


@settings(deadline=None)
@given(manifests, st.sampled_from(["shard", "index", "class"]), texts)
def test_a_manifest_naming_an_unsafe_path_is_refused(manifest: Manifest, where: str, text: str) -> None:
    """Any text may stand where a path or class is: it parses only when it is a safe key
    (a class: one safe folder name); otherwise ManifestError names it, whatever it holds."""
    data = json.loads(manifest.to_json())
    if where == "shard":
        data["shards"].append({"path": text, "first": 0, "num_samples": 0, "num_bytes": 0,
                               "sha256": "0" * 64})
    elif where == "index":
        data["sample_index"]["extra"] = {"path": text, "num_bytes": 0, "sha256": "0" * 64}
    else:
        data["classes"].append(text)
        data["class_counts"].append(0)
    safe = is_safe_key(text) and (where != "class" or ("/" not in text and text != "."))
    if safe:
        Manifest.from_json(json.dumps(data))
    else:
        with pytest.raises(ManifestError, match="refuses|not one folder name"):
            Manifest.from_json(json.dumps(data), source="DST/index.json")


@pytest.mark.parametrize("key", ["../../outside.txt", "/etc/passwd", "samples/../../x", "a\x00b",
                                 "a\x1b]0;x\x07"])
def test_named_paths_outside_the_dataset_are_refused_naming_the_file(key: str) -> None:
    data = json.loads(Manifest.from_json(Manifest(
        backend="lmdb", codec="original", codec_params={}, check="full", max_pixels=1, classes=("a",),
        class_counts=(0,), shards=(), sample_index={}, skipped=(),
        scan=ScanInfo("f", (), False, "x"), source="s", created_by="c", created_at="t").to_json()).to_json())
    data["shards"] = [{"path": key, "first": 0, "num_samples": 0, "num_bytes": 0, "sha256": "0" * 64}]
    with pytest.raises(ManifestError) as caught:
        Manifest.from_json(json.dumps(data), source="/data/x/index.json")
    message = str(caught.value)
    assert "/data/x/index.json" in message and repr(key) in message
    assert "\x1b" not in message and "\x00" not in message  # printed escaped
