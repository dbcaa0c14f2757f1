"""``dataset_info`` returns a frozen record like every other tool (its JSON form unchanged), and
``dataset_versions`` lists what ``open_dataset(version=)`` can pin (issue 26)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import packer
from packer.cli import cli

#: The keys of ``packer info --json`` in packer 0.3 (a dict then): the document must not change.
KEYS_0_3 = {"path", "format_version", "version", "versions_kept", "last_update", "update_in_progress",
            "leases", "created_by", "created_at", "source", "source_kind", "source_params",
            "source_notes", "backend", "codec", "codec_params", "check", "num_samples", "num_classes",
            "classes", "class_counts", "num_bytes", "shards", "skipped", "scan"}


def test_info_is_a_frozen_record_with_the_same_json(standard_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "ds"
    packer.convert(standard_tree, dst, to="lmdb")
    info = packer.dataset_info(dst)
    assert isinstance(info, packer.DatasetInfo)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.num_samples = 0  # type: ignore[misc]
    data = info.to_dict()
    assert set(data) == KEYS_0_3
    assert data["num_samples"] == info.num_samples == len(packer.open_dataset(dst))
    assert data["num_classes"] == info.num_classes == len(info.classes)
    assert set(data["shards"][0]) == {"path", "first", "num_samples", "num_bytes", "sha256"}
    assert [s["path"] for s in data["skipped"]] == [s.path for s in info.skipped]
    printed = CliRunner().invoke(cli, ["info", str(dst), "--json"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == json.loads(json.dumps(data))


def test_indexing_the_record_still_works_with_a_warning(standard_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "ds"
    packer.convert(standard_tree, dst, to="hdf5")
    info = packer.dataset_info(dst)
    with pytest.warns(DeprecationWarning, match=r"use \.num_samples"):
        assert info["num_samples"] == info.num_samples  # type: ignore[index]


def test_dataset_versions_lists_what_version_can_pin(make_tree, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from imagetools import jpeg_bytes

    src = make_tree({f"c{n}/{i}.jpg": jpeg_bytes(16, 16, i + 10 * n) for n in range(2) for i in range(3)})
    dst = tmp_path / "ds"
    packer.convert(src, dst, to="lmdb")
    assert packer.dataset_versions(dst) == [1]
    (src / "c0" / "9.jpg").write_bytes(jpeg_bytes(16, 16, 99))
    packer.update(src, dst)
    assert packer.dataset_versions(dst) == [1, 2] == list(packer.dataset_info(dst).versions_kept)
    assert len(packer.open_dataset(dst, version=1)) == 6 and len(packer.open_dataset(dst)) == 7
