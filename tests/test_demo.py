"""The demo as a library call: it generates, converts, reads back and checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from packer.cli.formatting import format_demo
from packer.errors import OutputError
from packer.format.backends import backend_names
from packer.source.imagefolder import scan_imagefolder
from packer.tools.demo.run import BROKEN_FILES, make_demo_tree, run_demo


def test_demo_tree_is_deterministic(tmp_path: Path) -> None:
    make_demo_tree(str(tmp_path / "a"), per_class=4)
    make_demo_tree(str(tmp_path / "b"), per_class=4)
    a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert a == b
    assert all((tmp_path / "a" / p).read_bytes() == (tmp_path / "b" / p).read_bytes() for p in a)
    index = scan_imagefolder(tmp_path / "a")
    assert len(index.items) == 4 * 4 + len(BROKEN_FILES)


@pytest.mark.slow
def test_small_demo_checks_everything(tmp_path: Path) -> None:
    report = run_demo(str(tmp_path / "demo"), workers=2, per_class=6)
    assert report.ok
    assert set(report.conversions) == set(backend_names())
    for result in report.conversions.values():
        assert {s.path: s.reason for s in result.manifest.skipped} == BROKEN_FILES
        assert result.manifest.num_samples == 4 * 6
    text = format_demo(report)
    assert "demo OK" in text and "vs folder" in text
    # A second run into the same directory replaces the first.
    assert run_demo(str(tmp_path / "demo"), workers=0, per_class=2).ok


def test_demo_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="not empty"):
        run_demo(str(tmp_path), per_class=1)
    assert (tmp_path / "notes.txt").read_text() == "mine"
