"""`packer cache info` says where a cache's bound comes from (issue 26: it printed `bound none`
after reads with ``cache_limit=``, because a bound is set per reading process)."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from packer.cli import cli
from packer.store.cache.node import NodeCache


def _fill(cache: NodeCache, key: str, data: bytes) -> None:
    cache.fetch(key, len(data), lambda f: f.write(data))


def test_info_names_the_last_bound_a_reader_set(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    runner = CliRunner()
    before = runner.invoke(cli, ["cache", "info", "--dir", str(folder)])
    assert before.exit_code == 0, before.output
    assert "bound set by each reading process (cache_limit=); none recorded yet" in before.output

    _fill(NodeCache(folder, limit="5MB", min_free=None), "a", b"x" * 10)
    after = runner.invoke(cli, ["cache", "info", "--dir", str(folder)])
    assert after.exit_code == 0, after.output
    assert "bound none" not in after.output
    assert f"last 4.8 MiB, keeping 0 B free, by pid {os.getpid()}" in after.output
    assert "holds 10 B in 1 entries" in after.output

    info = NodeCache(folder).info()
    assert info.last_bound is not None and info.last_bound.limit == 5_000_000
    _fill(NodeCache(folder, min_free=None), "b", b"y")  # a reader without a bound is recorded too
    assert NodeCache(folder).info().last_bound.limit is None  # type: ignore[union-attr]
    assert NodeCache(folder, limit=7).info().limit == 7  # a bound given here is this process's


def test_a_damaged_record_is_no_record(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    _fill(NodeCache(folder, limit="1MB", min_free=None), "a", b"x")
    (folder / "v1" / "bound.json").write_text("{not json")
    assert NodeCache(folder).info().last_bound is None


def test_cache_help_names_the_default_location() -> None:
    out = CliRunner().invoke(cli, ["cache", "--help"]).output
    assert "$XDG_CACHE_HOME/packer" in out and "$PACKER_CACHE" in out
    info = CliRunner().invoke(cli, ["cache", "info", "--help"]).output
    assert "$XDG_CACHE_HOME/packer" in info
