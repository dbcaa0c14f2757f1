"""`packer bench`: the pipelines run, the report adds up, the CLI prints it (no timing asserted)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from imagetools import jpeg_bytes, write_tree

import packer
from packer import cpus as cpus_module
from packer.cli import cli
from packer.cli.formatting import format_bench, format_sweep
from packer.tools import bench as bench_module
from packer.tools.bench import PIPELINES, BenchReport, StandardTrainTransform, Timing, bench
from packer.tools.tuning import sweep


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
    assert [s["make_loader"] for s, _ in results].count(True) == 1
    assert "best on this machine: DataLoader(num_workers=" in format_sweep(results)
    assert "<- make_loader" in format_sweep(results)


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


def test_cold_drops_each_sides_files_before_every_epoch(tree_and_dataset: tuple[Path, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst = tree_and_dataset
    dropped: list[set[str]] = []
    monkeypatch.setattr(bench_module, "drop_page_cache", lambda paths: dropped.append(set(paths)))
    report = bench(dst, against=src, pipeline="train", workers=0, batch_size=4, repeats=2, cold=True)
    assert report.cold and len(report.packed.seconds) == len(report.folder.seconds) == 2
    shards = {str(dst / shard.path) for shard in packer.open_dataset(dst).manifest.shards}
    images = {str(path) for path in src.rglob("*.jpg") if path.name != "broken.jpg"}
    packed_drops = [paths for paths in dropped if shards <= paths]
    assert len(packed_drops) == 2 and all(paths.isdisjoint(images) for paths in packed_drops)
    assert [paths for paths in dropped if paths == images] == [images, images]  # no warm-up epoch
    assert "cold page cache" in format_bench(report)


def test_drop_page_cache_keeps_the_files(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 10000)
    bench_module.drop_page_cache([str(path)])
    assert path.read_bytes() == b"x" * 10000


@pytest.mark.parametrize("pipeline", ["fast", "train"])
def test_profile_times_every_stage(tree_and_dataset: tuple[Path, Path], pipeline: str) -> None:
    from packer.cli.formatting import format_profile
    from packer.tools.profiling import STAGES, profile_loading

    _, dst = tree_and_dataset
    profile = profile_loading(str(dst), pipeline=pipeline, images=8, batch_size=4, workers=0)
    expected = list(STAGES) if pipeline == "fast" else [s for s in STAGES if s != "normalise"]
    assert list(profile.stages) == expected and profile.images == 8
    assert all(ms >= 0 for ms in profile.stages.values()) and profile.stages["collate+transfer"] > 0
    assert profile.total == pytest.approx(sum(profile.stages.values())) and profile.images_per_second > 0
    text = format_profile(profile)
    assert "collate+transfer" in text and "largest stage:" in text and "images/s" in text
    assert json.loads(json.dumps(profile.to_dict()))["pipeline"] == pipeline
    with pytest.raises(ValueError, match="pipeline must be"):
        profile_loading(str(dst), pipeline="bytes")


def test_cli_profile_and_cold(tree_and_dataset: tuple[Path, Path]) -> None:
    src, dst = tree_and_dataset
    runner = CliRunner()
    result = runner.invoke(cli, ["bench", str(dst), "--profile", "--workers", "0", "--limit", "8",
                                 "--batch-size", "4"])
    assert result.exit_code == 0, result.output
    assert "fast pipeline" in result.stdout and "decode" in result.stdout
    doc = json.loads(runner.invoke(cli, ["bench", str(dst), "--profile", "--pipeline", "train", "--json",
                                         "--workers", "0", "--limit", "8", "--batch-size", "4"]).stdout)
    assert doc["pipeline"] == "train" and "read" in doc["ms_per_image"]
    refused = runner.invoke(cli, ["bench", str(dst), "--profile", "--pipeline", "bytes"])
    assert refused.exit_code == 2 and "--profile" in refused.output
    cold = runner.invoke(cli, ["bench", str(dst), "--against", str(src), "--cold", "--workers", "0",
                               "--repeats", "1", "--batch-size", "4"])
    assert cold.exit_code == 0 and "cold page cache" in cold.stdout


def _fake_bench(calls: list[dict[str, Any]]) -> Callable[..., BenchReport]:
    """A stand-in for :func:`packer.tools.bench.bench`: records its arguments; more workers, more speed."""

    def fake(dst: object, **kwargs: Any) -> BenchReport:
        calls.append(kwargs)
        rate = 100.0 * (1 + kwargs["workers"]) + (5 if kwargs["persistent_workers"] else 0)
        timing = Timing("packed", 100, 1.0, [100 / rate] * kwargs["repeats"])
        return BenchReport(kwargs["pipeline"], kwargs["workers"], kwargs["batch_size"], timing, None)

    return fake


@pytest.fixture
def four_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(cpus_module, "_cgroup_cpus", lambda: None)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def test_sweep_measures_make_loader_s_choice_first(monkeypatch: pytest.MonkeyPatch, four_cpus: None,
                                                   tree_and_dataset: tuple[Path, Path]) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(bench_module, "bench", _fake_bench(calls))
    results = list(sweep(tree_and_dataset[1], pipeline="bytes", batch_size=8, limit=5, repeats=1))
    settings = [(s["num_workers"], s["prefetch_factor"], s["persistent_workers"]) for s, _ in results]
    # 4 CPUs: the grid is 1, 2 and 4 workers; make_loader picks 3 (one core for the main process).
    assert settings[0] == (3, 2, True) and results[0][0]["make_loader"] is True
    assert not any(s["make_loader"] for s, _ in results[1:])
    assert set(settings[1:]) == set(itertools.product((1, 2, 4), (2, 4), (True, False)))
    assert len(settings) == len(set(settings)) == 13
    assert all(c["limit"] == 5 and c["repeats"] == 1 and c["pipeline"] == "bytes" for c in calls)
    text = format_sweep(results)
    best = "best on this machine: DataLoader(num_workers=4, prefetch_factor=2, persistent_workers=True)"
    assert best in text
    line = next(row for row in text.splitlines() if row.endswith("<- make_loader"))
    assert line.split()[:3] == ["3", "2", "True"]
    assert "make_loader's default: DataLoader(num_workers=3, prefetch_factor=2, persistent_workers=True), " \
           "405 images/s, 0.80x the best (it leaves the main process a core" in text


def test_sweep_does_not_repeat_a_choice_already_in_the_grid(monkeypatch: pytest.MonkeyPatch,
                                                            tree_and_dataset: tuple[Path, Path]) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(cpus_module, "_cgroup_cpus", lambda: None)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(bench_module, "bench", _fake_bench([]))
    results = list(sweep(tree_and_dataset[1], repeats=1))
    assert len(results) == 8 and [s["make_loader"] for s, _ in results].count(True) == 1
    assert results[0][0] == {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": True,
                             "make_loader": True}


def test_sweep_on_one_cpu_tries_the_main_process(monkeypatch: pytest.MonkeyPatch,
                                                 tree_and_dataset: tuple[Path, Path]) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(cpus_module, "_cgroup_cpus", lambda: None)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(bench_module, "bench", _fake_bench(calls))
    results = list(sweep(tree_and_dataset[1], repeats=1))
    assert results[0][0] == {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False,
                             "make_loader": True}
    assert calls[0]["workers"] == 0 and len(results) == 5
    text = format_sweep(results)
    assert "0.49x the best (on one CPU a worker only time-shares it" in text
    assert format_sweep([]) == "no settings were measured"


def test_cli_sweep_prints_the_winner_and_the_default(monkeypatch: pytest.MonkeyPatch, four_cpus: None,
                                                     tree_and_dataset: tuple[Path, Path]) -> None:
    monkeypatch.setattr(bench_module, "bench", _fake_bench([]))
    dst = str(tree_and_dataset[1])
    result = CliRunner().invoke(cli, ["bench", dst, "--sweep", "--repeats", "1", "--limit", "4"])
    assert result.exit_code == 0, result.output
    assert "best on this machine: DataLoader(num_workers=4" in result.stdout
    assert "make_loader's default: DataLoader(num_workers=3" in result.stdout
    doc = json.loads(CliRunner().invoke(cli, ["bench", dst, "--sweep", "--repeats", "1", "--json"]).stdout)
    defaults = [entry["setting"] for entry in doc if entry["setting"]["make_loader"]]
    assert defaults == [{"num_workers": 3, "prefetch_factor": 2, "persistent_workers": True,
                         "make_loader": True}]
