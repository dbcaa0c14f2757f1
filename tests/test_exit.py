"""A script that keeps a dataset at module level exits quietly (issue 26: at interpreter exit,
``ShardReader.__del__`` ran after module teardown and printed ``Exception ignored in``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import packer
from packer.format.backends import Backend

SCRIPTS = {
    "module level": """
        from packer import open_dataset
        ds = open_dataset({dst!r})
        image, label = ds[0]
        print(len(ds), label)
    """,
    "two datasets, one raw": """
        from packer import open_dataset
        a = open_dataset({dst!r})
        b = open_dataset({dst!r}, decode=False)
        a[0]; b[1]
        print(len(a), len(b))
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=list(SCRIPTS))
def test_a_script_holding_a_dataset_exits_without_noise(
        script: str, backend: Backend, standard_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / f"out.{backend.name}"
    packer.convert(standard_tree, dst, to=backend.name)
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(SCRIPTS[script]).format(dst=str(dst)))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
