"""Installed plugins are found through entry points, in every process: a backend declared in the
``packer.backends`` group converts with spawned workers and reads in spawned DataLoader workers,
which never ran the plugin's registration code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from imagetools import png_bytes, write_tree

TESTS = Path(__file__).resolve().parent

_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import packer
    from packer.conversion.engines import local


    def main(src, dst):
        assert "recordlog" in packer.backend_names(), packer.backend_names()
        local.START_METHOD = "spawn"           # workers that never imported the plugin
        result = packer.convert(src, dst, to="recordlog", workers=2, shard_size="4KB")
        assert result.manifest.backend == "recordlog" and len(result.manifest.shards) > 1
        dataset = packer.open_dataset(dst, decode=False)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                             multiprocessing_context="spawn")
        labels = sorted(int(label) for _payload, label in loader)
        assert labels == sorted(dataset.targets), labels
        print("ok", len(labels))


    if __name__ == "__main__":
        main(sys.argv[1], sys.argv[2])
""")


@pytest.mark.slow
def test_a_backend_declared_as_an_entry_point_works_in_spawned_workers(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "packer_recordlog-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: packer-recordlog\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[packer.backends]\nrecordlog = contract_plugins:RECORD_LOG\n")
    src = tmp_path / "src"
    write_tree(src, {f"{cls}/{i}.png": png_bytes(16 + i, 12, seed=i) for cls in ("a", "b") for i in range(4)})
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    paths = [str(site), str(TESTS), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.run([sys.executable, str(script), str(src), str(tmp_path / "dst")], env=env,
                          capture_output=True, text=True, check=False, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["ok", "8"]


def test_a_registered_name_wins_over_an_entry_point_and_unknown_names_list_both() -> None:
    from packer.errors import UnknownNameError
    from packer.registry import Registry

    registry: Registry[object] = Registry("thing", {"builtin": "json:dumps"},
                                          entry_points="packer.no-such-group")
    assert registry.names() == ("builtin",)
    with pytest.raises(UnknownNameError, match="Unknown thing 'nope'; available: builtin"):
        registry.get("nope")
