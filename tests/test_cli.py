"""The command line, through click's CliRunner: exit codes, one-line errors, output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from packer.cli import cli
from packer.format.backends import backend_names
from packer.format.manifest import IN_PROGRESS_NAME


def _tree(root: Path, *, bad: bool = True) -> Path:
    rng = np.random.default_rng(0)
    for name in ("ant", "bee"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.jpg")
    if bad:
        (root / "bee" / "broken.jpg").write_bytes(b"not a jpeg at all")
    return root


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_help_for_every_command(runner: CliRunner) -> None:
    for args in ([], ["convert"], ["info"], ["demo"]):
        result = runner.invoke(cli, [*args, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.stdout
    assert all(name in runner.invoke(cli, ["convert", "--help"]).stdout for name in backend_names())


def test_python_dash_m_packer_works() -> None:
    result = subprocess.run([sys.executable, "-m", "packer", "--help"], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0
    assert "convert" in result.stdout and "info" in result.stdout


@pytest.mark.parametrize("backend", backend_names())
def test_convert_then_info(runner: CliRunner, tmp_path: Path, backend: str) -> None:
    src, dst = _tree(tmp_path / "src"), tmp_path / "dst"
    result = runner.invoke(cli, ["convert", str(src), str(dst), "--to", backend])
    assert result.exit_code == 0, result.output
    assert "Packed 6 samples in 2 classes" in result.stdout
    assert "skipped 1 of 7 images found" in result.stdout
    assert "not_an_image 1" in result.stdout and "index.json" in result.stdout

    text = runner.invoke(cli, ["info", str(dst)])
    assert text.exit_code == 0
    assert f"backend {backend}" in text.stdout and "bee/broken.jpg: not_an_image" in text.stdout

    raw = runner.invoke(cli, ["info", str(dst), "--json"])
    assert raw.exit_code == 0
    info = json.loads(raw.stdout)
    assert info["backend"] == backend and info["codec"] == "original"
    assert info["num_samples"] == 6 and info["classes"] == ["ant", "bee"]
    assert info["class_counts"] == {"ant": 3, "bee": 3}
    assert sum(s["num_samples"] for s in info["shards"]) == 6
    assert all({"path", "num_samples", "num_bytes"} <= set(s) for s in info["shards"])
    assert info["skipped"] == [{"path": "bee/broken.jpg", "reason": "not_an_image",
                                "detail": info["skipped"][0]["detail"]}]


def test_missing_source_is_one_line_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["convert", str(tmp_path / "nope"), str(tmp_path / "dst"),
                                 "--to", "lmdb"])
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "nope" in lines[0]
    assert not (tmp_path / "dst").exists()


def test_usage_errors_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    bad_backend = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "zip"])
    assert bad_backend.exit_code == 2 and "'zip' is not one of" in bad_backend.stderr
    bad_size = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb",
                                   "--shard-size", "lots"])
    assert bad_size.exit_code == 2 and "invalid size 'lots'" in bad_size.stderr
    missing = runner.invoke(cli, ["convert", str(src)])
    assert missing.exit_code == 2
    assert not (tmp_path / "d").exists()


def test_existing_destination_needs_overwrite(runner: CliRunner, tmp_path: Path) -> None:
    src, dst = _tree(tmp_path / "src"), tmp_path / "dst"
    assert runner.invoke(cli, ["convert", str(src), str(dst), "--to", "hdf5"]).exit_code == 0
    before = sorted((p.name, p.stat().st_mtime_ns) for p in dst.iterdir())
    again = runner.invoke(cli, ["convert", str(src), str(dst), "--to", "hdf5"])
    assert again.exit_code == 3
    assert "--overwrite" in again.stderr and str(dst) in again.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in dst.iterdir()) == before
    replaced = runner.invoke(cli, ["convert", str(src), str(dst), "--to", "lmdb", "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(runner.invoke(cli, ["info", str(dst), "--json"]).stdout)["backend"] == "lmdb"


def test_foreign_directory_is_never_overwritten(runner: CliRunner, tmp_path: Path) -> None:
    src, dst = _tree(tmp_path / "src"), tmp_path / "mine"
    dst.mkdir()
    (dst / "thesis.tex").write_text("precious")
    result = runner.invoke(cli, ["convert", str(src), str(dst), "--to", "lmdb", "--overwrite"])
    assert result.exit_code == 1 and "not a packer dataset" in result.stderr
    assert (dst / "thesis.tex").read_text() == "precious"


def test_strict_stops_at_first_bad_file(runner: CliRunner, tmp_path: Path) -> None:
    src, dst = _tree(tmp_path / "src"), tmp_path / "dst"
    result = runner.invoke(cli, ["convert", str(src), str(dst), "--to", "lmdb", "--strict"])
    assert result.exit_code == 1
    assert "broken.jpg" in result.stderr and "not_an_image" in result.stderr
    assert not (dst / "index.json").exists()
    info = runner.invoke(cli, ["info", str(dst)])
    assert info.exit_code == 1 and "incomplete" in info.stderr


def test_info_on_foreign_and_incomplete_directories(runner: CliRunner, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    result = runner.invoke(cli, ["info", str(foreign)])
    assert result.exit_code == 1 and "not a packer dataset" in result.stderr
    (foreign / IN_PROGRESS_NAME).write_text("{}")
    result = runner.invoke(cli, ["info", str(foreign)])
    assert result.exit_code == 1 and "incomplete" in result.stderr and "--overwrite" in result.stderr


def test_quiet_prints_nothing(runner: CliRunner, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", bad=False)
    result = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb", "-q"])
    assert result.exit_code == 0 and result.stdout == ""


def test_options_reach_the_library(runner: CliRunner, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", bad=False)
    (src / ".hidden_class").mkdir()
    Image.new("RGB", (4, 4)).save(src / ".hidden_class" / "x.jpg")
    (src / "empty_class").mkdir()
    dst = tmp_path / "d"
    refused = runner.invoke(cli, ["convert", str(src), str(dst), "--to", "lmdb"])
    assert refused.exit_code == 1 and "empty_class" in refused.stderr and "--allow-empty" in refused.stderr
    result = runner.invoke(cli, ["convert", str(src), str(dst), "--to", "lmdb", "--allow-empty",
                                 "--include-hidden", "--shard-size", "1kB", "--max-pixels", "100",
                                 "--check", "header"])
    assert result.exit_code == 0, result.output
    info = json.loads(runner.invoke(cli, ["info", str(dst), "--json"]).stdout)
    assert info["classes"] == [".hidden_class", "ant", "bee", "empty_class"]
    assert info["check"] == "header"
    # 12x16 = 192 pixels > 100: every image is a decompression bomb under this limit.
    assert {s["reason"] for s in info["skipped"]} == {"decompression_bomb"}
    assert info["num_samples"] == 1 and info["class_counts"][".hidden_class"] == 1


@pytest.mark.slow
def test_console_script_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(["packer", "demo", str(tmp_path / "demo")], capture_output=True,
                            text=True, env=env, timeout=240, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo OK" in result.stdout
    for name in backend_names():
        expected = f"{name}: 300 samples, pixels identical to the folder, stored bytes byte-exact"
        assert expected in result.stdout
    again = subprocess.run(["packer", "info", str(tmp_path / "demo" / "lmdb")], capture_output=True,
                           text=True, check=False)
    assert again.returncode == 0 and "samples 300 in 4 classes" in again.stdout
