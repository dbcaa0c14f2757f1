"""Array tasks whose every file is skipped leave no dataset of 0 samples: merge() stops, as a
single conversion does (issue 26: a conversion that packs nothing is an error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import packer
from packer.cli import cli
from packer.errors import EmptySourceError, IncompleteDatasetError


def _undecodable_tree(root: Path) -> Path:
    for cls in ("ant", "bee"):
        (root / cls).mkdir(parents=True)
        for i in range(3):  # a JPEG name and magic, then garbage: only decoding finds it out
            (root / cls / f"{i}.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(64)) * (i + 1))
    return root


def test_merge_of_tasks_that_packed_nothing_stops(tmp_path: Path) -> None:
    src, dst = _undecodable_tree(tmp_path / "src"), tmp_path / "dst"
    for task in range(2):
        packer.convert_task(src, dst, to="lmdb", task_id=task, num_tasks=2, workers=1, shard_size="1KB")
    with pytest.raises(EmptySourceError, match=r"Cannot merge .*every one of the 6 items .*skipped "
                                               r"\(not_an_image 6\).*0 samples"):
        packer.merge(dst)
    assert not (dst / "index.json").exists()
    with pytest.raises(IncompleteDatasetError):
        packer.open_dataset(dst)
    result = CliRunner().invoke(cli, ["merge", str(dst)])
    assert result.exit_code != 0 and "--overwrite" in result.output, result.output


def test_a_single_run_stops_the_same_way(tmp_path: Path) -> None:
    src, dst = _undecodable_tree(tmp_path / "src"), tmp_path / "dst"
    with pytest.raises(EmptySourceError, match=r"not_an_image 6"):
        packer.convert(src, dst, to="hdf5", workers=1)
    assert not (dst / "index.json").exists()
