"""The runnable examples: each runs end to end here, with stand-ins for what a laptop lacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from imagetools import jpeg_bytes, write_tree

import packer
from packer.manifest import MANIFEST_NAME

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
