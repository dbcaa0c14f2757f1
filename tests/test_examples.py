"""The runnable examples: each runs end to end here, with stand-ins for what a laptop lacks.

The Python examples run as ``python examples/NAME ARGS`` would, but in this test process
(:func:`inprocess.run_file`): a fresh interpreter importing torch per run cost more than the
runs themselves. What needs processes of its own keeps them: the shell scripts, and
``torchrun`` with two ranks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from imagetools import jpeg_bytes, write_tree
from inprocess import run_file_ok

import packer
from packer.format.manifest import MANIFEST_NAME

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

FAKE_SBATCH = textwrap.dedent('''\
    #!{python}
    """A stand-in for Slurm's sbatch: logs the call, runs the job at once, prints a job id."""
    import json, os, subprocess, sys
    args = sys.argv[1:]
    opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    with open(os.environ["FAKE_SBATCH_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    job = str(1000 + sum(1 for _ in open(os.environ["FAKE_SBATCH_LOG"])))
    env = dict(os.environ, SLURM_CPUS_PER_TASK=opts.get("cpus-per-task", "1"), SLURM_JOB_ID=job)
    if "array" in opts:
        low, high = (int(x) for x in opts["array"].split("-"))
        for task in range(low, high + 1):
            slurm = dict(SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN=str(low),
                         SLURM_ARRAY_TASK_MAX=str(high), SLURM_ARRAY_TASK_COUNT=str(high - low + 1))
            subprocess.run(["bash", "-c", opts["wrap"]], env={{**env, **slurm}}, check=True,
                           stdout=sys.stderr)
    else:
        subprocess.run(["bash", "-c", opts["wrap"]], env=env, check=True, stdout=sys.stderr)
    print(job + ";cluster")
''')


@pytest.mark.slow
def test_slurm_convert_submits_an_array_and_a_dependent_merge(tmp_path: Path) -> None:
    spec = {f"{cls}/{i:02d}.jpg": jpeg_bytes(20, 16, i) for i in range(12) for cls in ("cat", "dog")}
    src = write_tree(tmp_path / "src", spec)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(FAKE_SBATCH.format(python=sys.executable))
    sbatch.chmod(0o755)
    packer_bin = bin_dir / "packer"
    packer_bin.write_text(f"#!/bin/sh\nexec {sys.executable} -m packer \"$@\"\n")
    packer_bin.chmod(0o755)
    log = tmp_path / "sbatch.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", FAKE_SBATCH_LOG=str(log), TASKS="3", CPUS="1",
               SHARD_SIZE="2KB", BACKEND="hdf5", PARTITION="cpu")
    dst = tmp_path / "dst with space"
    command = ["bash", str(EXAMPLES / "slurm_convert.sh"), str(src), str(dst), "--check", "header"]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "array job 1001 (3 tasks) -> merge job 1002" in result.stdout
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert "--array=0-2" in calls[0] and "--partition=cpu" in calls[0]
    assert "--dependency=afterok:1001" in calls[1]
    manifest = json.loads((dst / MANIFEST_NAME).read_text())
    assert manifest["check"] == "header" and manifest["backend"] == "hdf5"
    local = tmp_path / "local"
    packer.convert(src, local, to="hdf5", shard_size="2KB", check="header", workers=1)
    assert len(manifest["shards"]) > 3
    assert [s["sha256"] for s in manifest["shards"]] == [
        s.sha256 for s in packer.open_dataset(local).manifest.shards]


def _load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """This environment without torchrun's or Slurm's variables, with ``packer`` on PATH."""
    drop = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("SLURM_", "TORCHELASTIC"))}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    packer_bin = bin_dir / "packer"
    packer_bin.write_text(f"#!/bin/sh\nexec {sys.executable} -m packer \"$@\"\n")
    packer_bin.chmod(0o755)
    env["PATH"] = f"{bin_dir}:{Path(sys.executable).parent}:{env['PATH']}"
    return env


def test_train_classifier_arguments_and_models() -> None:
    example = _load_example("train_classifier")
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args([])
    assert exit_info.value.code == 2  # DATA is required without --smoke
    with pytest.raises(SystemExit):
        example.parse_args(["data", "--resume"])  # --resume needs --checkpoint
    args = example.parse_args(["train", "val", "--fast", "--sampler", "shard", "--workers", "3"])
    assert (args.data, args.val, args.fast, args.sampler, args.workers) == ("train", "val", True, "shard", 3)
    assert example.parse_args(["--smoke"]).workers is None  # make_loader chooses
    for arch, size in [("tiny", 32), ("resnet10", 64), ("resnet18", 64)]:
        model = example.ResNet(arch, 5).eval()
        assert model(torch.zeros(2, 3, size, size)).shape == (2, 5)


def test_checkpoints_are_written_atomically(tmp_path: Path) -> None:
    example = _load_example("train_classifier")
    path = tmp_path / "run" / "ckpt.pt"
    example.save_checkpoint(str(path), {"epoch": 1, "weights": torch.ones(2)})
    example.save_checkpoint(str(path), {"epoch": 2, "weights": torch.zeros(2)})
    assert torch.load(path, weights_only=True)["epoch"] == 2
    assert os.listdir(path.parent) == ["ckpt.pt"]  # no temporary file left behind


@pytest.mark.slow
@pytest.mark.parametrize("options", [[], ["--fast", "--sampler", "shard"]])
def test_train_classifier_smoke(tmp_path: Path, options: list[str]) -> None:
    result = run_file_ok(EXAMPLES / "train_classifier.py", "--smoke", *options, cwd=tmp_path,
                         env=_clean_env(tmp_path))
    assert result.stdout.rstrip().endswith("smoke OK")
    assert "resumed from" in result.stdout and "at epoch 1" in result.stdout
    assert ("fast path" if options else "PIL transforms") in result.stdout
    assert ("sampler=shard" if options else "sampler=random") in result.stdout


@pytest.mark.slow
def test_train_classifier_smoke_under_torchrun_with_two_gloo_ranks(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(EXAMPLES / "train_classifier.py"), "--smoke"]
    result = subprocess.run(command, cwd=tmp_path, env=_clean_env(tmp_path), capture_output=True, text=True,
                            timeout=180, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 process(es) on cpu" in result.stdout and "sampler=distributed" in result.stdout
    assert result.stdout.count("smoke OK") == 1  # rank 0 logs


def test_convert_and_train_script_parses() -> None:
    script = EXAMPLES / "convert_and_train.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    usage = subprocess.run(["bash", str(script), "only-one-argument"], capture_output=True, text=True,
                           check=False)
    assert usage.returncode == 2 and "convert_and_train.sh SRC DST" in usage.stderr


@pytest.mark.slow
def test_convert_and_train_end_to_end_and_again(tmp_path: Path) -> None:
    spec = {f"{cls}/{i:02d}.jpg": jpeg_bytes(48, 40, i + 10 * n)
            for n, cls in enumerate(("ant", "bee", "cat")) for i in range(8)}
    spec["cat/broken.jpg"] = b"not a jpeg"
    src = write_tree(tmp_path / "src", spec)
    dst = tmp_path / "packed data"
    env = {**_clean_env(tmp_path), "PYTHON": sys.executable, "LIMIT": "8", "BACKEND": "hdf5"}
    command = ["bash", str(EXAMPLES / "convert_and_train.sh"), str(src), str(dst), "--arch", "tiny",
               "--size", "32", "--batch-size", "8", "--epochs", "2", "--stop-after", "1", "--log-every", "0"]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
                           check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Packed 24 samples in 3 classes" in first.stdout and ": OK" in first.stdout
    assert "packed / folder" in first.stdout and "epoch 0: loss" in first.stdout
    assert packer.open_dataset(dst).manifest.backend == "hdf5"
    assert (tmp_path / "packed data.pt").exists()
    again = subprocess.run(command, cwd=tmp_path, env={**env, "BENCH": "0"}, capture_output=True, text=True,
                           timeout=180, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already complete" in again.stdout and "packed / folder" not in again.stdout
    assert "at epoch 1" in again.stdout and "epoch 1: loss" in again.stdout


@pytest.mark.slow
def test_convert_and_train_without_arguments_runs_on_the_demo_tree(tmp_path: Path) -> None:
    env = {**_clean_env(tmp_path), "PYTHON": sys.executable, "BENCH": "0", "TMPDIR": str(tmp_path)}
    result = subprocess.run(["bash", str(EXAMPLES / "convert_and_train.sh")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Packed 300 samples in 4 classes" in result.stdout and "skipped 3" in result.stdout
    assert "epoch 1: loss" in result.stdout
    assert not list(tmp_path.glob("packer-e2e-*"))  # the temporary work directory is gone


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_train_minimal_trains_on_a_packed_dataset_at_a_url(tmp_path: Path, http_server_factory: Any) -> None:
    spec = {f"{cls}/{i:02d}.jpg": jpeg_bytes(24, 20, i + 10 * n)
            for n, cls in enumerate(("ant", "bee", "cat")) for i in range(4)}
    dst = tmp_path / "site" / "packed"
    packer.convert(write_tree(tmp_path / "src", spec), dst, to="hdf5", workers=1)
    url = f"{http_server_factory(tmp_path / 'site').url}/packed"
    result = run_file_ok(EXAMPLES / "train_minimal.py", url, "--epochs", "1", "--batch-size", "4",
                         "--workers", "1", "--size", "16", "--cache-dir", tmp_path / "cache",
                         "--cache-limit", "64MB", cwd=tmp_path, env=_clean_env(tmp_path))
    bound = packer.NodeCache(tmp_path / "cache").info().last_bound
    assert bound is not None and bound.limit == 64_000_000  # the option reached the reader
    assert "'ant', 'bee', 'cat'" in result.stdout
    epoch = re.search(r"^epoch 0: loss (\S+), train accuracy (\S+)%, \d+ images/s$", result.stdout, re.M)
    assert epoch, result.stdout
    assert 0 < float(epoch[1]) < 10 and 0 <= float(epoch[2]) <= 100
    assert "epoch 1:" not in result.stdout


def test_every_example_is_run_by_a_test() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    examples = sorted(path.name for path in EXAMPLES.iterdir() if path.suffix in (".py", ".sh"))
    assert examples, f"no examples found under {EXAMPLES}"
    untested = [name for name in examples if f'EXAMPLES / "{name}"' not in source]
    assert not untested, f"examples no test runs: {untested}"
