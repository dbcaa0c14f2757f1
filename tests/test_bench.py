"""`packer bench`: the pipelines run, the report adds up, the CLI prints it (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from imagetools import jpeg_bytes, write_tree

import packer
from packer.bench import PIPELINES, StandardTrainTransform, bench, sweep
from packer.cli import cli
from packer.report import format_bench, format_sweep


@pytest.fixture
def tree_and_dataset(tmp_path: Path) -> tuple[Path, Path]:
    spec = {f"{('a', 'b')[i % 2]}/{i:02d}.jpg": jpeg_bytes(40 + i, 30 + i, i) for i in range(12)}
    spec["b/broken.jpg"] = b"not an image"
    src = write_tree(tmp_path / "src", spec)
    packer.convert(src, tmp_path / "dst", to="lmdb", workers=1)
    return src, tmp_path / "dst"


def test_standard_train_transform_is_normalised_float(tmp_path: Path) -> None:
    from PIL import Image

    image = Image.new("RGB", (50, 40), (124, 116, 104))  # about ImageNet's mean colour
    out = StandardTrainTransform(32)(image)
    assert out.shape == (3, 32, 32) and out.dtype == torch.float32
    assert out.abs().max() < 0.05


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_every_pipeline_runs_against_the_folder(tree_and_dataset: tuple[Path, Path],
                                                pipeline: str) -> None:
    src, dst = tree_and_dataset
    report = bench(dst, against=src, pipeline=pipeline, workers=0, batch_size=4, repeats=2)
    assert report.packed.images == report.folder.images == 12  # the broken file left out both sides
    assert len(report.packed.seconds) == len(report.folder.seconds) == 2
    assert report.ratio is not None and report.ratio > 0
    text = format_bench(report)
    assert "packed / folder" in text and f"pipeline {pipeline}" in text
    assert json.loads(json.dumps(report.to_dict()))["pipeline"] == pipeline


def test_limit_reads_a_fixed_subset(tree_and_dataset: tuple[Path, Path]) -> None:
    _, dst = tree_and_dataset
    report = bench(dst, pipeline="bytes", workers=0, batch_size=4, repeats=1, limit=5)
    assert report.packed.images == 5 and report.folder is None and report.ratio is None
    with pytest.raises(ValueError, match="pipeline must be one of"):
        bench(dst, pipeline="gpu")


@pytest.mark.slow
def test_workers_and_sweep(tree_and_dataset: tuple[Path, Path]) -> None:
    src, dst = tree_and_dataset
    report = bench(dst, against=src, pipeline="fast", workers=2, batch_size=4, repeats=1)
    assert report.packed.images == 12
    results = list(sweep(dst, pipeline="bytes", batch_size=4, limit=8, repeats=1))
    settings = {(s["num_workers"], s["prefetch_factor"], s["persistent_workers"]) for s, _ in results}
    assert {p for _, p, _ in settings} == {2, 4} and {q for _, _, q in settings} == {True, False}
    assert "best on this machine: DataLoader(num_workers=" in format_sweep(results)


def test_cli_bench(tree_and_dataset: tuple[Path, Path]) -> None:
    src, dst = tree_and_dataset
    runner = CliRunner()
    result = runner.invoke(cli, ["bench", str(dst), "--against", str(src), "--workers", "0",
                                 "--batch-size", "4", "--repeats", "1", "--pipeline", "fast"])
    assert result.exit_code == 0, result.output
    assert "packed / folder" in result.stdout
    doc = json.loads(runner.invoke(cli, ["bench", str(dst), "--workers", "0", "--repeats", "1",
                                         "--json"]).stdout)
    assert doc["pipeline"] == "train" and doc["folder"] is None
    missing = runner.invoke(cli, ["bench", str(dst.parent / "nope")])
    assert missing.exit_code == 1 and "Error:" in missing.stderr
