"""Several nodes under DDP reading one S3 dataset (issue 28 item 6), through scripts/bench_nodes.py:
two "nodes" (each a cache folder and its own latency proxy, whose counters are what that node
fetched) of two gloo ranks each, reading a dataset pushed to a real S3-API server on 127.0.0.1.

Checked: every epoch the four ranks' samples (by the digest of their stored bytes) are disjoint and
together the whole dataset, with equal lengths, under the uniform ``DistributedSampler`` (the
dataset fits each node's cache) and under ``ShardWindowSampler`` (a cache a tenth of it); where it
fits, each node fetches each byte at most once over the whole job (two epochs), the ranks of a
node sharing what either fetched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bench_remote import _server_missing

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_nodes.py"
#: What a node fetches besides shards: the manifest and the sample index files (a few KiB here).
INDEX_ALLOWANCE = 256 << 10


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict:
    reason = _server_missing()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("nodes")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--images", "96", "--shard-size", "64KB",
                             "--latency-ms", "0", "--epochs", "2", "--json", "--root", str(work)],
                            cwd=work, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr[-4000:]}"
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_ranks_read_disjoint_complete_epochs_on_every_node(figures: dict) -> None:
    assert figures["nodes"] == 2 and figures["ranks"] == 2 and figures["samples"] == 96
    samplers = {case["case"]: case["sampler"] for case in figures["cases"]}
    assert samplers == {"full": "DistributedSampler", "small": "ShardWindowSampler"}
    for case in figures["cases"]:
        assert len(case["epochs"]) == 2
        for epoch in case["epochs"]:
            assert epoch["problems"] == [], (case["case"], epoch)
            assert epoch["images"] == 96  # 24 a rank, no padding
            assert all(b > 0 for b in case["epochs"][0]["node_bytes"])  # each node read for itself


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_node_fetches_each_byte_at_most_once_when_the_dataset_fits(figures: dict) -> None:
    full = next(case for case in figures["cases"] if case["case"] == "full")
    size = figures["dataset_bytes"]
    for node in range(2):
        fetched = sum(epoch["node_bytes"][node] for epoch in full["epochs"])
        assert fetched <= size + INDEX_ALLOWANCE, (node, fetched, size)
