"""``verify`` and ``export`` for every kind of source, and against data made to escape.

WebDataset shards and Parquet tables name their samples by key, not by class folder: a fresh
conversion verifies clean and exports, as a tree or as a list, to what converts back to the same
dataset. Class names and sample paths come from data, so a crafted manifest or sample index
(``../escape``, an absolute path, a NUL byte) refuses the export before anything is written,
never writing outside OUT. A damaged manifest is one line and exit 1 from ``show``, ``export``
and ``verify``, never a traceback or a usage error.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from imagetools import jpeg_bytes, png_bytes, standard_spec, write_tree
from parquet_tools import Row, write_table
from sourcekinds import add_member

import packer
from packer.cli import cli
from packer.errors import ManifestError, PackerError, UnsafeKeyError
from packer.format.codecs import get_codec
from packer.format.manifest import MANIFEST_NAME, VERSIONS_DIR, Manifest
from packer.format.sample_index import SampleIndex, write_index_file
from packer.tools.export.plan import DatasetFiles, plan_export
from packer.tools.layout import path_layout

#: Export and these refusals read the manifest and sample index, not the backend's bytes: one
#: backend is enough (tests/test_contracts.py reads every backend back).
BACKEND = "lmdb"


# ------------------------------------------------------------------ helpers


def _webdataset(folder: Path, labels: list[Any], *, json_label: bool = False) -> Path:
    """One shard as real WebDatasets are: ``000000.jpg`` + ``000000.cls`` (or ``.json``) members."""
    folder.mkdir(parents=True)
    with tarfile.open(folder / "shard-000000.tar", "w") as tar:
        for i, label in enumerate(labels):
            add_member(tar, f"{i:06d}.jpg", jpeg_bytes(seed=i))
            if json_label:
                add_member(tar, f"{i:06d}.json", json.dumps({"label": label, "index": i}).encode())
            else:
                add_member(tar, f"{i:06d}.cls", str(label).encode())
    return folder


def _parquet(path: Path, labels: list[str], *, with_paths: bool = True) -> Path:
    """A table of string labels; images named ``img/NN.jpg`` (or by row, without paths)."""
    rows = [Row(f"img/{i:02d}.{'png' if i % 3 == 0 else 'jpg'}" if with_paths else None,
                png_bytes(seed=i) if i % 3 == 0 else jpeg_bytes(seed=i), label)
            for i, label in enumerate(labels)]
    return write_table(path, rows, string_labels=True, binary=not with_paths)


def _convert(src: Path, dst: Path, backend: str, **options: Any) -> Path:
    packer.convert(src, dst, to=backend, workers=1, **options)
    return dst


def _contents(dst: Path) -> tuple[Any, ...]:
    """Classes, samples (path, target), payloads and metadata of the dataset at ``dst``."""
    ds = packer.open_dataset(dst, decode=False)
    return tuple(ds.classes), list(ds.samples), [ds[i][0] for i in range(len(ds))], list(ds.metadata)


def _by_label(dst: Path) -> list[tuple[str, str, bytes]]:
    """Each sample as (class name, file name, bytes), sorted: what a tree export must keep."""
    ds = packer.open_dataset(dst, decode=False)
    return sorted((ds.classes[t], p.rsplit("/", 1)[-1], ds[i][0]) for i, (p, t) in enumerate(ds.samples))


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def _edit_manifest(dst: Path, change: Callable[[dict[str, Any]], object]) -> None:
    """Change ``index.json`` and every kept version the same way (readers may open either)."""
    data = json.loads((dst / MANIFEST_NAME).read_text())
    change(data)
    text = json.dumps(data)
    for path in [dst / MANIFEST_NAME, *(dst / VERSIONS_DIR).glob("*.json")]:
        path.write_text(text)


def _write_manifest_text(dst: Path, text: str) -> None:
    for path in [dst / MANIFEST_NAME, *(dst / VERSIONS_DIR).glob("*.json")]:
        path.write_text(text)


def _set_path(dst: Path, number: int, path: str) -> None:
    """Make sample ``number``'s path ``path`` in the sample index, checksums kept right, as a
    crafted dataset would."""
    index = SampleIndex.of(str(dst), Manifest.load(dst))
    paths = [index.path(i) for i in range(len(index.targets))]
    paths[number] = path
    encoded = [p.encode("utf-8", "surrogateescape") for p in paths]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    entries = {"path_offsets": write_index_file(str(dst), "path_offsets", offsets),
               "paths": write_index_file(str(dst), "paths", b"".join(encoded))}
    _edit_manifest(dst, lambda data: data["sample_index"].update(
        {key: dataclasses.asdict(entry) for key, entry in entries.items()}))


def _tree_dataset(tmp_path: Path) -> Path:
    return _convert(write_tree(tmp_path / "src", standard_spec()), tmp_path / "dst", BACKEND)


def _wds_dataset(tmp_path: Path) -> Path:
    return _convert(_webdataset(tmp_path / "wds", [0, 1, 1, 0, 2, 1]), tmp_path / "dst", BACKEND)


# ------------------------------------------------- 1. keyed sources verify and export


def test_a_webdataset_conversion_verifies_and_exports_as_a_tree(tmp_path: Path) -> None:
    dst = _wds_dataset(tmp_path)
    report = packer.verify_dataset(dst, deep=True)
    assert report.ok and report.samples_checked == 6, report.problems
    result = packer.export_dataset(dst, tmp_path / "out")
    assert result.written == 6 and result.classes == ("0", "1", "2")
    assert (tmp_path / "out" / "2" / "000004.jpg").read_bytes() == jpeg_bytes(seed=4)
    again = _convert(tmp_path / "out", tmp_path / "again", BACKEND)
    assert _by_label(again) == _by_label(dst)


def test_a_webdataset_exports_as_a_list_that_converts_back_to_the_same_dataset(tmp_path: Path) -> None:
    src = _webdataset(tmp_path / "wds", ["zebra", "ant", "ant", "zebra"], json_label=True)
    dst = _convert(src, tmp_path / "dst", BACKEND, label_field="json:label")
    assert packer.verify_dataset(dst, deep=True).ok
    result = packer.export_dataset(dst, tmp_path / "out", as_list=True)
    assert result.lists == ("labels.jsonl", "classes.txt")
    assert (tmp_path / "out" / "classes.txt").read_text() == "ant\nzebra\n"
    again = _convert(tmp_path / "out" / "labels.jsonl", tmp_path / "again", BACKEND,
                     classes_file=tmp_path / "out" / "classes.txt")
    assert _contents(again) == _contents(dst)
    assert packer.open_dataset(again).metadata[0]["json"] == {"label": "zebra", "index": 0}
    out = tmp_path / "out"
    by_cli = CliRunner().invoke(cli, ["convert", str(out / "labels.jsonl"), str(tmp_path / "cli"),
                                      "--to", BACKEND, "--classes", str(out / "classes.txt"), "-q"])
    assert by_cli.exit_code == 0, by_cli.output
    assert _contents(tmp_path / "cli") == _contents(dst)


@pytest.mark.parametrize("with_paths", [True, False])
def test_a_parquet_conversion_verifies_and_exports(tmp_path: Path, with_paths: bool) -> None:
    table = _parquet(tmp_path / "train.parquet", ["dog", "cat", "dog", "bird", "cat"], with_paths=with_paths)
    dst = _convert(table, tmp_path / "dst", BACKEND)
    report = packer.verify_dataset(dst, deep=True, against=table)
    assert report.ok and report.samples_compared == 5, report.problems
    packer.export_dataset(dst, tmp_path / "tree")
    assert _by_label(_convert(tmp_path / "tree", tmp_path / "tree-dst", BACKEND)) == _by_label(dst)
    packer.export_dataset(dst, tmp_path / "list", as_list=True)
    again = _convert(tmp_path / "list" / "labels.jsonl", tmp_path / "again", BACKEND,
                     classes_file=tmp_path / "list" / "classes.txt")
    assert _contents(again) == _contents(dst)


def test_the_command_line_verifies_and_exports_keyed_datasets(tmp_path: Path) -> None:
    runner = CliRunner()
    for name, src in (("wds", _webdataset(tmp_path / "wds", [1, 0, 1])),
                      ("pq", _parquet(tmp_path / "t.parquet", ["b", "a", "b"]))):
        dst = _convert(src, tmp_path / f"{name}-dst", BACKEND)
        verified = runner.invoke(cli, ["verify", "--deep", "-q", str(dst)])
        assert verified.exit_code == 0, verified.output
        for args in ([], ["--as-list"]):
            out = tmp_path / f"{name}-out{len(args)}"
            exported = runner.invoke(cli, ["export", "-q", str(dst), str(out), *args])
            assert exported.exit_code == 0, exported.output
            assert len([p for p in out.rglob("*") if p.suffix in (".jpg", ".png")]) == 3


def test_a_tree_dataset_still_refuses_as_list_and_checks_its_class_folders(tmp_path: Path) -> None:
    dst = _tree_dataset(tmp_path)
    assert path_layout(Manifest.load(dst), "index.json") == "tree"
    with pytest.raises(ValueError, match="not a list file"):
        packer.export_dataset(dst, tmp_path / "out", as_list=True)
    report = packer.verify_dataset(dst, deep=True)
    assert report.ok, report.problems


# --------------------------------------------------- 2. export never writes outside OUT


def test_a_manifest_class_leading_out_refuses_the_export(tmp_path: Path) -> None:
    dst = _tree_dataset(tmp_path)
    _edit_manifest(dst, lambda data: data["classes"].__setitem__(0, "../escape"))
    before = _files(tmp_path)
    with pytest.raises((UnsafeKeyError, ManifestError), match=r"\.\./escape"):
        packer.export_dataset(dst, tmp_path / "out" / "inner")
    assert _files(tmp_path) == before  # no OUT, no escape, nothing anywhere
    result = CliRunner().invoke(cli, ["export", "-q", str(dst), str(tmp_path / "out" / "inner")])
    assert result.exit_code == 1 and "../escape" in result.stderr and "index.json" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and _files(tmp_path) == before


@pytest.mark.parametrize("bad", ["../escape", "/abs/victim", "a/b", "..", ".", "c\x00at", "c\nat", ""])
def test_every_class_folder_is_checked_before_anything_is_written(tmp_path: Path, bad: str) -> None:
    """Export's own check, whatever the manifest loader lets through."""
    dst = _wds_dataset(tmp_path)
    manifest = Manifest.load(dst)
    crafted = dataclasses.replace(manifest, classes=(*manifest.classes[:-1], bad))
    index = SampleIndex.of(str(dst), manifest)
    files = DatasetFiles(str(dst / MANIFEST_NAME), "paths.bin", "targets.npy")
    fmt = get_codec(manifest.codec, manifest.codec_params).export_format()
    for as_list in (False, True):
        with pytest.raises(UnsafeKeyError) as caught:
            plan_export(crafted, index, range(6), range(3), "keys", None, fmt, files, as_list=as_list)
        assert caught.value.key == bad and caught.value.source == str(dst / MANIFEST_NAME)
    ok = plan_export(manifest, index, range(6), range(3), "keys", None, fmt, files, as_list=False)
    assert ok.folders == ("0", "1", "2") and ok.names[4] == "2/000004.jpg"


@pytest.mark.parametrize("bad", ["../../escape.jpg", "ok/../../../escape.jpg", "ABS", "a\x00b.jpg",
                                 "a\x1b]0;title\x07.jpg"])
@pytest.mark.parametrize("kind", ["tree", "webdataset"])
def test_a_crafted_sample_path_refuses_the_whole_export_up_front(tmp_path: Path, bad: str,
                                                                 kind: str) -> None:
    dst = _tree_dataset(tmp_path) if kind == "tree" else _wds_dataset(tmp_path)
    bad = str(tmp_path / "abs-escape.jpg") if bad == "ABS" else bad
    last = packer.open_dataset(dst).manifest.num_samples - 1  # the last one: checked before the first write
    _set_path(dst, last, bad)
    before = _files(tmp_path)
    for as_list in (False, True) if kind == "webdataset" else (False,):
        with pytest.raises(UnsafeKeyError) as caught:
            packer.export_dataset(dst, tmp_path / "out", as_list=as_list)
        assert caught.value.key == bad and "samples/paths" in caught.value.source
        assert _files(tmp_path) == before
    result = CliRunner().invoke(cli, ["export", "-q", str(dst), str(tmp_path / "out")])
    assert result.exit_code == 1, result.output  # a packer error, not a usage error
    assert len(result.stderr.strip().splitlines()) == 1 and "samples/paths" in result.stderr
    assert "\x00" not in result.stderr and "\x1b" not in result.stderr
    assert _files(tmp_path) == before
    report = packer.verify_dataset(dst, deep=True)
    assert [(p.kind, p.path) for p in report.problems] == [("label_error", bad)]


def test_a_tree_sample_outside_its_class_folder_is_refused(tmp_path: Path) -> None:
    dst = _tree_dataset(tmp_path)
    ds = packer.open_dataset(dst)
    other = next(p for p, t in ds.samples if t != ds.samples[0][1])
    _set_path(dst, 0, "x" + other)  # a safe key, in no class folder of its own
    with pytest.raises(ManifestError, match="inside its class folder"):
        packer.export_dataset(dst, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_labels_from_data_that_lead_out_never_escape(tmp_path: Path) -> None:
    """A WebDataset's JSON label, a Parquet string label and a CSV label that would be folders
    outside OUT: refused at conversion, when the manifest loads, or by export; never followed."""
    victim = tmp_path / "victim"
    hostile = ["../../../victim/x", str(victim), "../victim"]
    src = write_tree(tmp_path / "list-src", {f"img/{i}.jpg": jpeg_bytes(seed=i) for i in range(3)})
    with open(src / "labels.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("path", "label"), *((f"img/{i}.jpg", hostile[i]) for i in range(3))])
    wds = _webdataset(tmp_path / "wds", hostile, json_label=True)
    sources = {"wds": (wds, {"label_field": "json:label"}),
               "parquet": (_parquet(tmp_path / "t.parquet", hostile), {}),
               "csv": (src / "labels.csv", {})}
    for name, (location, options) in sources.items():
        out = tmp_path / "deep" / "er" / f"out-{name}"
        try:
            dst = _convert(location, tmp_path / f"dst-{name}", BACKEND, **options)
        except PackerError:
            continue  # refused when converting: fine
        with pytest.raises((UnsafeKeyError, ManifestError)):
            packer.export_dataset(dst, out)
        assert not out.exists() and not victim.exists() and not (tmp_path / "deep" / "er" / "victim").exists()


# ------------------------------------------------ 3. damaged manifests: one line, exit 1


DAMAGE: dict[str, Callable[[dict[str, Any]], object]] = {
    "classes not a list": lambda data: data.update(classes="abc"),
    "shard path not a string": lambda data: data["shards"][0].update(path=5),
    "no targets entry": lambda data: data["sample_index"].pop("targets"),
    "shard ranges with a gap": lambda data: data["shards"][0].update(first=-5),
    "too many samples": lambda data: data["shards"][0].update(num_samples=10**12),
    "fewer class counts": lambda data: data.update(class_counts=data["class_counts"][:1]),
    "fewer classes": lambda data: data.update(classes=data["classes"][:1]),
    "extra.list a number": lambda data: data["extra"].update(list=5),
    "extra.list without fields": lambda data: data["extra"].update(list={"list": 5}),
    "extra.source a string": lambda data: data["extra"].update(source="x"),
    "NUL in a class": lambda data: data["classes"].__setitem__(0, "c\x00t"),
    "NUL in a shard path": lambda data: data["shards"][0].update(path="shard\x00.lmdb"),
    "NUL in an index path": lambda data: data["sample_index"]["paths"].update(path="samples/p\x00.bin"),
}


def _one_line_exit_1(result: Any) -> None:
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Usage:" not in result.output and "Traceback" not in result.output


def test_a_damaged_manifest_is_one_line_and_exit_1(tmp_path: Path) -> None:
    good = _tree_dataset(tmp_path)
    pristine = (good / MANIFEST_NAME).read_text()
    runner = CliRunner()
    damages: dict[str, Callable[[Path], None]] = {
        "invalid JSON": lambda dst: _write_manifest_text(dst, pristine[: len(pristine) // 2]),
        "not an object": lambda dst: _write_manifest_text(dst, "[1, 2]"),
        **{name: (lambda change: lambda dst: _edit_manifest(dst, change))(change)
           for name, change in DAMAGE.items()},
    }
    for name, damage in damages.items():
        _write_manifest_text(good, pristine)
        damage(good)
        for args in (["show", str(good), "0"], ["show", str(good), "-1"], ["show", "--json", str(good), "1"],
                     ["export", "-q", str(good), str(tmp_path / "out")],
                     ["export", "-q", "--as-list", str(good), str(tmp_path / "out")]):
            result = runner.invoke(cli, args)
            try:
                _one_line_exit_1(result)
            except AssertionError as err:
                raise AssertionError(f"{name}: packer {' '.join(args[:2])}: {err}") from err
            assert not (tmp_path / "out").exists(), name
        verified = runner.invoke(cli, ["verify", "--deep", "-q", str(good)])
        assert verified.exit_code == 1 and isinstance(verified.exception, SystemExit), (name, verified.output)
