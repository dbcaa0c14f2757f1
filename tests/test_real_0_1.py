"""Datasets written by the real packer 0.1 (its code, from this repository's history): they
open, `update` refuses and names `upgrade`, `upgrade` keeps every shard file, and then `update`
works as on any dataset and equals a fresh conversion."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from imagetools import mixed_tree, png_bytes

import packer
from packer.cli import cli

ROOT = Path(__file__).resolve().parent.parent
#: The last commit of packer 0.1 (the golden record was taken there, before the 0.2 layout).
RELEASE_0_1 = "bf7282e"


@pytest.fixture(scope="module")
def packer_0_1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """packer 0.1's package, exported from git history (skipped where history is absent)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    where = tmp_path_factory.mktemp("packer-0.1")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", RELEASE_0_1, "packer"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        pytest.skip(f"packer 0.1 ({RELEASE_0_1}) is not in this clone's history")
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def _convert_with_0_1(old: Path, src: Path, dst: Path, backend: str) -> None:
    code = ("import sys, packer\n"
            "assert packer.__file__.startswith(sys.argv[1]), packer.__file__\n"
            "packer.convert(sys.argv[2], sys.argv[3], to=sys.argv[4], shard_size='16KB')\n")
    env = {**os.environ, "PYTHONPATH": str(old)}
    proc = subprocess.run([sys.executable, "-c", code, str(old), str(src), str(dst), backend], env=env,
                          capture_output=True, text=True, check=False, timeout=300, cwd=old)
    assert proc.returncode == 0, proc.stderr


def _digests(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["lmdb", "hdf5"])
def test_a_dataset_of_packer_0_1_upgrades_in_place_then_updates_like_any(
        packer_0_1: Path, tmp_path: Path, backend: str) -> None:
    src, dst = mixed_tree(tmp_path / "src", 30, broken=False), tmp_path / "dst"
    _convert_with_0_1(packer_0_1, src, dst, backend)
    written = _digests(dst)
    assert len([name for name in written if name.startswith("shard-")]) > 1

    packer.convert(src, tmp_path / "fresh", to=backend)
    fresh = packer.open_dataset(tmp_path / "fresh", decode=False)
    old = packer.open_dataset(dst, decode=False)
    assert old.classes == fresh.classes and list(old.targets) == list(fresh.targets)
    assert [old[i] for i in range(len(old))] == [fresh[i] for i in range(len(fresh))]

    runner = CliRunner()
    refused = runner.invoke(cli, ["update", str(src), str(dst)])
    assert refused.exit_code == 1 and "packer upgrade SRC DST" in refused.output
    assert _digests(dst) == written

    upgraded = runner.invoke(cli, ["upgrade", str(src), str(dst)])
    assert upgraded.exit_code == 0, upgraded.output
    after = _digests(dst)
    assert {name: after[name] for name in written if name != "index.json"} == {
        name: digest for name, digest in written.items() if name != "index.json"}
    assert packer.Manifest.load(dst).format_version == 2

    os.remove(sorted((src / "bee").iterdir())[0])
    (src / "cow" / "zz-new.png").write_bytes(png_bytes(20, 14, seed=99))
    assert runner.invoke(cli, ["update", str(src), str(dst)]).exit_code == 0
    assert runner.invoke(cli, ["gc", str(dst), "--keep-versions", "1"]).exit_code == 0
    packer.convert(src, tmp_path / "again", to=backend, shard_size="16KB")  # 0.1's options
    mine, theirs = _digests(dst), _digests(tmp_path / "again")
    assert {k: v for k, v in mine.items() if not k.startswith(("versions", "index"))} == {
        k: v for k, v in theirs.items() if not k.startswith(("versions", "index"))}
