"""Conversion into a URL (issue 28 item 2): shards written to a bounded local staging folder,
uploaded as they finish, ``index.json`` last; resumable after a kill; the result equals a local
conversion file for file. On a real S3-API server (moto) on 127.0.0.1, with the fault proxy for
latency and failures."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot
from remote_fixtures import convert_killed_after_an_upload

import packer
from packer.cli import cli
from packer.conversion.remote.uploads import ShardUploads
from packer.errors import (
    DatasetBusyError,
    OutputError,
    OutputExistsError,
    StoreError,
)
from packer.store import open_store
from packer.store.lease.claim import held_lease
from packer.store.local import LocalStore
from packer.testing.trees import image_tree

OPTIONS: dict[str, Any] = {"to": "lmdb", "shard_size": "1500"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    image_tree(tmp_path / "tree", 24)
    return tmp_path / "tree"


@pytest.fixture
def staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$PACKER_STAGING`` for the test: where conversions to a URL stage by default."""
    root = tmp_path / "staging"
    monkeypatch.setenv("PACKER_STAGING", str(root))
    return root


def _objects(url: str, options: dict[str, str] | None = None) -> dict[str, bytes]:
    store = open_store(url, options)
    return {key: store.read(key) for key in sorted(store.list())}


def _snapshot(url: str, options: dict[str, str] | None = None) -> dict[str, object]:
    """Every object under ``url``, as :func:`dataset_snapshot` sees a local dataset (only
    ``created_at`` may differ between two conversions); the URL holds nothing else."""
    with tempfile.TemporaryDirectory() as folder:
        for key, data in _objects(url, options).items():
            (Path(folder) / key).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / key).write_bytes(data)
        names = sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if p.is_file())
        return {"names": names, **dataset_snapshot(folder)}


def _local_twin(tree: Path, tmp_path: Path, **options: Any) -> dict[str, object]:
    local = tmp_path / f"local-{len(list(tmp_path.glob('local-*')))}"
    packer.convert(tree, local, **{**OPTIONS, **options})
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*")
                   if p.is_file() and p.name != ".packer-lock")
    return {"names": names, **dataset_snapshot(local)}


def test_a_conversion_into_a_url_equals_a_local_one_file_for_file(
        tree: Path, tmp_path: Path, s3_bucket: str, s3_env: dict[str, str], staging: Path) -> None:
    url = f"{s3_bucket}/train"
    result = packer.convert(tree, url, **OPTIONS, workers=2)
    assert result.dst == url and result.manifest.num_samples == 24
    assert len(result.manifest.shards) > 3
    assert _snapshot(url) == _local_twin(tree, tmp_path)
    assert not any(staging.iterdir())  # the staging folder goes once the dataset is published
    dataset = packer.open_dataset(url, cache_dir=tmp_path / "cache")
    assert len(dataset) == 24 and dataset.classes == ["ant", "bee", "cow"]


def test_the_command_line_converts_into_a_url(tree: Path, tmp_path: Path, s3_bucket: str,
                                              s3_env: dict[str, str]) -> None:
    url = f"{s3_bucket}/cli"
    given = tmp_path / "my-staging"
    out = CliRunner().invoke(cli, ["convert", str(tree), url, "--to", "lmdb", "--shard-size", "1500",
                                   "--staging", str(given), "--staging-limit", "4KB", "-q"])
    assert out.exit_code == 0, out.output
    assert _snapshot(url) == _local_twin(tree, tmp_path)
    assert not given.exists()
    again = CliRunner().invoke(cli, ["convert", str(tree), url, "--to", "lmdb", "--shard-size", "1500"])
    assert again.exit_code != 0 and "already holds a packer dataset" in again.output


def test_a_url_holding_a_dataset_is_refused_resumed_or_replaced(
        tree: Path, tmp_path: Path, s3_bucket: str, s3_env: dict[str, str], staging: Path) -> None:
    url = f"{s3_bucket}/ds"
    packer.convert(tree, url, **OPTIONS)
    before = _objects(url)
    with pytest.raises(OutputExistsError, match="already holds a packer dataset"):
        packer.convert(tree, url, **OPTIONS)
    done = packer.convert(tree, url, **OPTIONS, resume=True)  # this very conversion: nothing to do
    assert done.already_complete and _objects(url) == before
    with pytest.raises(OutputError, match="another source or other options"):
        packer.convert(tree, url, **{**OPTIONS, "shard_size": "3000"}, resume=True)
    packer.convert(tree, url, **{**OPTIONS, "shard_size": "3000"}, overwrite=True)
    assert _snapshot(url) == _local_twin(tree, tmp_path, shard_size="3000")  # the old shards are gone
    assert set(before) - set(_objects(url))


def test_staging_holds_at_most_its_bound_of_finished_shards(tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / ".in-progress.json").write_text("{}")
    seen: list[int] = []

    def staged_bytes() -> int:  # shards are removed by the upload threads meanwhile
        total = 0
        for path in staged.glob("shard-*"):
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
        return total

    class SlowStore(LocalStore):  # a real store whose uploads take a while
        def put_file(self, key: str, path: str) -> None:
            seen.append(staged_bytes())
            time.sleep(0.05)
            super().put_file(key, path)

    remote = SlowStore(str(tmp_path / "remote"))
    sizes = [1000] * 10
    with ShardUploads(str(staged), remote, limit=2500, threads=4) as uploads:
        for number, size in enumerate(sizes):
            name = f"shard-{number:016x}.lmdb"
            (staged / name).write_bytes(bytes(size))
            uploads(SimpleNamespace(entry=SimpleNamespace(path=name, num_bytes=size)))  # type: ignore[arg-type]
            assert staged_bytes() <= 2500 + size
    assert sorted(os.listdir(tmp_path / "remote")) == [f"shard-{n:016x}.lmdb" for n in range(10)]
    assert not list(staged.glob("shard-*")) and max(seen) <= 3000
    assert sorted(os.listdir(staged / ".uploaded")) == sorted(["url", *os.listdir(tmp_path / "remote")])


def test_a_failed_upload_stops_the_run_and_resume_finishes_it(
        tree: Path, tmp_path: Path, s3_bucket: str, fault_proxy: Any, staging: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from servers import remote_env

    for name, value in remote_env(fault_proxy.url).items():
        monkeypatch.setenv(name, value)
    url = f"{s3_bucket}/faulty"
    fault_proxy.inject("status", count=10_000, match="shard-", status=403)
    with pytest.raises(StoreError, match="resume") as caught:
        packer.convert(tree, url, **OPTIONS, workers=1)
    assert "shard-" in str(caught.value) and url in str(caught.value)
    assert "index.json" not in open_store(url).list()
    fault_proxy.clear()
    with pytest.raises(OutputExistsError, match="resume=True"):
        packer.convert(tree, url, **OPTIONS)
    result = packer.convert(tree, url, **OPTIONS, resume=True)
    assert not result.already_complete
    assert _snapshot(url) == _local_twin(tree, tmp_path)


@pytest.mark.slow
def test_a_conversion_killed_midway_resumes_into_the_same_dataset(
        tmp_path: Path, s3_bucket: str, s3_server: Any, staging: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from servers import remote_env

    image_tree(tmp_path / "tree", 90)
    tree = tmp_path / "tree"
    url = f"{s3_bucket}/killed"
    for name, value in remote_env(s3_server.endpoint).items():
        monkeypatch.setenv(name, value)
    up = convert_killed_after_an_upload(str(tree), url, s3_server.endpoint, staging=staging)
    result = packer.convert(tree, url, **OPTIONS, resume=True)
    assert result.resumed_shards >= len(up)
    assert _snapshot(url) == _local_twin(tree, tmp_path)


def test_two_conversions_into_one_url_are_kept_apart(tree: Path, s3_bucket: str, s3_env: dict[str, str],
                                                     staging: Path) -> None:
    url = f"{s3_bucket}/busy"
    with held_lease(open_store(url), "push", what="a push elsewhere"):
        with pytest.raises(DatasetBusyError):
            packer.convert(tree, url, **OPTIONS)
    assert "index.json" not in open_store(url).list()


def test_a_staging_folder_of_another_url_is_refused(
        tree: Path, tmp_path: Path, s3_bucket: str, fault_proxy: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from servers import remote_env

    for name, value in remote_env(fault_proxy.url).items():
        monkeypatch.setenv(name, value)
    given = tmp_path / "shared-staging"
    first, second = f"{s3_bucket}/first", f"{s3_bucket}/second"
    fault_proxy.inject("status", count=10_000, match="index.json", status=403)  # the switch fails
    with pytest.raises(StoreError):
        packer.convert(tree, first, **OPTIONS, staging=given)
    fault_proxy.clear()
    with pytest.raises(OutputError, match=f"holds a conversion to {first}"):
        packer.convert(tree, second, **OPTIONS, staging=given, resume=True)
    assert not [key for key in open_store(second).list() if key.startswith("shard-")]
    packer.convert(tree, first, **OPTIONS, staging=given, resume=True)  # the one it stages for
    assert "index.json" in open_store(first).list()


@pytest.mark.parametrize("call", ["update", "merge", "task", "write"])
def test_what_cannot_write_a_url_says_so_instead_of_making_a_local_folder(
        call: str, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = "s3://bucket/ds"
    with pytest.raises(OutputError, match="is a URL"):
        if call == "update":
            packer.update(tree, url)
        elif call == "merge":
            packer.merge(url)
        elif call == "task":
            packer.convert_task(tree, url, task_id=0, num_tasks=2, **OPTIONS)
        else:
            packer.write(url, [{"label": 1}], schema=[{"name": "label", "type": "int"}], to="lmdb")
    assert not (tmp_path / "s3:").exists()


def test_staging_options_need_a_url(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="for a DST that is a URL"):
        packer.convert(tree, tmp_path / "out", **OPTIONS, staging=tmp_path / "s")


def test_a_conversion_into_an_azure_url_equals_a_local_one(
        tree: Path, tmp_path: Path, staging: Path, azure_container: tuple[str, dict[str, str]]) -> None:
    """The same conversion into Azure Blob Storage (Azurite), its lease a conditional create there."""
    container, options = azure_container
    url = f"{container}/train"
    result = packer.convert(tree, url, **OPTIONS, storage_options=options)
    assert result.dst == url and result.manifest.num_samples == 24
    assert _snapshot(url, options) == _local_twin(tree, tmp_path)
