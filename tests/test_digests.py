"""Checksum algorithms (packer.digests): BLAKE3 for new datasets where its wheel is installed,
SHA-256 datasets unchanged; every checksum of a dataset made with the one its manifest names.

The tests that write BLAKE3 datasets need the ``blake3`` wheel (the ``fast`` extra, which
.ci/run installs for them); those that prove the refusals without it hide the module.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot, image_bytes, write_tree

import packer
from packer.cli import cli
from packer.conversion.engines.executor import ExecutorEngine
from packer.digests import (
    DIGEST_VARIABLE,
    DIGESTS,
    SHA256,
    DigestAlgorithm,
    default_digest,
    digest_names,
    get_digest,
)
from packer.errors import ManifestError, MissingExtraError, UnknownNameError
from packer.format.manifest import DIGEST_FORMAT_VERSION, Manifest
from packer.format.records import digest64
from packer.format.sample_index import SampleIndex
from packer.format.shardset import ShardSet
from packer.store import NodeCache
from packer.store.local import LocalStore
from packer.testing.faultstore import FaultStore

needs_blake3 = pytest.mark.skipif(importlib.util.find_spec("blake3") is None,
                                  reason="needs the blake3 wheel (pip install 'packer-shards[fast]')")


def _tree(root: Path, per_class: int = 6) -> Path:
    return write_tree(root, {f"c{c}/img{i:02d}.png": image_bytes(".png", 20 + i, 16 + c, 7 * c + i)
                             for c in range(2) for i in range(per_class)})


@pytest.fixture
def no_blake3(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one without the blake3 wheel."""
    monkeypatch.setitem(sys.modules, "blake3", None)
    monkeypatch.delitem(sys.modules, "packer.digest_blake3", raising=False)
    monkeypatch.delitem(DIGESTS._loaded, "blake3", raising=False)


def test_the_algorithms_hash_as_their_reference_implementations(tmp_path: Path) -> None:
    data = os.urandom(3 << 20 | 17)  # several read blocks and a ragged end
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert set(digest_names()) >= {"sha256", "blake3"}
    assert SHA256.hex(data) == hashlib.sha256(data).hexdigest() == SHA256.file(str(path))
    assert pickle.loads(pickle.dumps(SHA256)) is SHA256  # by name: a worker gets the same object
    with pytest.raises(UnknownNameError, match="sha256"):
        get_digest("md5")


@needs_blake3
def test_blake3_hashes_as_the_blake3_reference(tmp_path: Path) -> None:
    import blake3

    data = os.urandom(3 << 20 | 5)
    path = tmp_path / "blob"
    path.write_bytes(data)
    algorithm = get_digest("blake3")
    assert algorithm.hex(data) == blake3.blake3(data).hexdigest() == algorithm.file(str(path))
    assert algorithm.hex(data) != SHA256.hex(data)


def test_the_default_is_blake3_only_where_it_is_installed(no_blake3: None, tmp_path: Path) -> None:
    assert default_digest() == "sha256"
    src = _tree(tmp_path / "src")
    packer.convert(src, tmp_path / "dst", to="lmdb", workers=1)
    manifest = Manifest.load(tmp_path / "dst")
    assert manifest.digest == "sha256" and manifest.format_version == 2
    assert "digest" not in json.loads((tmp_path / "dst" / "index.json").read_text())  # as before 0.4
    assert "digest" not in packer.convert(src, tmp_path / "d2", to="lmdb", digest="sha256",
                                          workers=1).manifest.extra["options"]


@pytest.mark.skipif(importlib.util.find_spec("blake3") is None, reason="the blake3 wheel is not installed")
def test_packer_digest_names_the_default_of_new_datasets(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src")
    assert default_digest() == "blake3"
    monkeypatch.setenv(DIGEST_VARIABLE, " sha256 ")
    assert default_digest() == "sha256"
    result = subprocess.run([sys.executable, "-m", "packer", "convert", str(src), str(tmp_path / "dst"),
                             "--to", "lmdb", "-q"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert Manifest.load(tmp_path / "dst").digest == "sha256"
    named = packer.convert(src, tmp_path / "d2", to="lmdb", digest="blake3", workers=1)  # digest= first
    assert named.manifest.digest == "blake3"


def test_a_bad_packer_digest_is_refused_naming_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            no_blake3: None) -> None:
    src = _tree(tmp_path / "src")
    monkeypatch.setenv(DIGEST_VARIABLE, "md5")
    with pytest.raises(UnknownNameError, match=r"md5.*PACKER_DIGEST='md5'.*unset it"):
        packer.convert(src, tmp_path / "dst", to="lmdb", workers=1)
    monkeypatch.setenv(DIGEST_VARIABLE, "blake3")
    with pytest.raises(MissingExtraError, match=r"packer-shards\[fast\].*PACKER_DIGEST='blake3'"):
        packer.convert(src, tmp_path / "dst", to="lmdb", workers=1)
    assert not (tmp_path / "dst").exists()
    named = packer.convert(src, tmp_path / "d2", to="lmdb", digest="sha256", workers=1)  # digest= first
    assert named.manifest.digest == "sha256"


def test_asking_for_blake3_without_it_names_the_extra(no_blake3: None, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    with pytest.raises(MissingExtraError, match=r"packer-shards\[fast\]"):
        packer.convert(src, tmp_path / "dst", to="lmdb", digest="blake3")
    assert not (tmp_path / "dst").exists()
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "dst"), "--to", "lmdb",
                                      "--digest", "blake3", "-q"])
    assert result.exit_code != 0 and "packer-shards[fast]" in result.output


@needs_blake3
@pytest.mark.parametrize("backend", ["lmdb", "hdf5"])
def test_a_blake3_dataset_holds_the_same_shard_bytes_under_its_own_names(tmp_path: Path,
                                                                         backend: str) -> None:
    src = _tree(tmp_path / "src")
    sha = packer.convert(src, tmp_path / "sha", to=backend, digest="sha256", shard_size="2KB", workers=1)
    fast = packer.convert(src, tmp_path / "b3", to=backend, shard_size="2KB", workers=1)  # the default
    b3 = fast.manifest
    assert b3.digest == "blake3" and b3.format_version == DIGEST_FORMAT_VERSION
    assert b3.extra["options"]["digest"] == "blake3"
    algorithm = get_digest("blake3")
    assert len(b3.shards) == len(sha.manifest.shards) > 1
    for old, new in zip(sha.manifest.shards, b3.shards, strict=True):
        shard_bytes = (tmp_path / "b3" / new.path).read_bytes()
        assert shard_bytes == (tmp_path / "sha" / old.path).read_bytes()  # the format is unchanged
        assert new.sha256 == algorithm.hex(shard_bytes)
        assert new.path == f"shard-{new.sha256[:16]}{Path(new.path).suffix}" != old.path
    for entry in b3.sample_index.values():
        assert entry.sha256 == algorithm.file(str(tmp_path / "b3" / entry.path))
    # each record's digest and each source's are BLAKE3's, from the bytes packed
    index, shards = SampleIndex.of(tmp_path / "b3", b3), ShardSet(tmp_path / "b3")
    files = {p.relative_to(src).as_posix(): p.read_bytes() for p in src.rglob("*.png")}
    for i in range(len(shards)):
        payload = bytes(shards.read(i))
        assert index.records[i, 2] == digest64(payload, algorithm) != digest64(payload)
        assert index.sources[i, 2] == digest64(files[index.path(i)], algorithm)
    assert packer.verify_dataset(tmp_path / "b3", deep=True).ok
    info = packer.dataset_info(tmp_path / "b3")
    assert info.digest == "blake3" and info.to_dict()["digest"] == "blake3"
    shown = CliRunner().invoke(cli, ["info", str(tmp_path / "b3")])
    assert shown.exit_code == 0 and f"blake3 {b3.shards[0].sha256[:16]}" in shown.output


@needs_blake3
def test_verify_names_the_algorithm_of_a_damaged_blake3_shard(tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    manifest = packer.convert(_tree(tmp_path / "src"), dst, to="lmdb", digest="blake3", workers=1).manifest
    shard = dst / manifest.shards[0].path
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    report = packer.verify_dataset(dst)
    assert not report.ok
    assert any(p.kind == "checksum_mismatch" and "blake3" in p.message for p in report.problems)


@needs_blake3
def test_a_dataset_keeps_its_algorithm_when_updated(tmp_path: Path) -> None:
    """An old (SHA-256) dataset updated where blake3 is the default stays SHA-256: every shard
    is reused, not renamed; and a BLAKE3 one stays BLAKE3, its update equal to a fresh one."""
    src = _tree(tmp_path / "src", per_class=8)
    old = tmp_path / "old"
    packer.convert(src, old, to="lmdb", digest="sha256", shard_size="2KB", workers=1)
    (src / "c1" / "new.png").write_bytes(image_bytes(".png", 30, 30, 99))
    result = packer.update(src, old, workers=1)
    assert result.manifest.digest == "sha256" and result.shards_written == 1
    assert "digest" not in json.loads((old / "index.json").read_text())
    fast, fresh = tmp_path / "fast", tmp_path / "fresh"
    packer.convert(src, fast, to="lmdb", digest="blake3", shard_size="2KB", workers=1)
    (src / "c0" / "img00.png").unlink()
    (src / "c0" / "more.png").write_bytes(image_bytes(".png", 31, 17, 5))
    updated = packer.update(src, fast, workers=1)
    assert updated.manifest.digest == "blake3" and 0 < updated.shards_written < len(updated.manifest.shards)
    packer.convert(src, fresh, to="lmdb", digest="blake3", shard_size="2KB", workers=1)
    packer.collect_garbage(fast)
    assert dataset_snapshot(fast) == dataset_snapshot(fresh)
    # --checksum compares contents by the dataset's algorithm: nothing changed, nothing written
    assert packer.update(src, fast, checksum=True, workers=1).shards_written == 0


@needs_blake3
def test_array_tasks_and_merge_check_blake3_shards(tmp_path: Path) -> None:
    src, dst = _tree(tmp_path / "src"), tmp_path / "dst"
    for task in range(2):
        packer.convert_task(src, dst, task_id=task, num_tasks=2, to="lmdb", digest="blake3",
                            shard_size="2KB", workers=1)
    merged = packer.merge(dst, verify=True)
    single = packer.convert(src, tmp_path / "one", to="lmdb", digest="blake3", shard_size="2KB", workers=1)
    assert [s.path for s in merged.manifest.shards] == [s.path for s in single.manifest.shards]


@needs_blake3
@pytest.mark.parametrize("mode", ["whole", "ranged"])
def test_a_blake3_dataset_read_through_the_cache_checks_every_fetch(tmp_path: Path, mode: str) -> None:
    dst = tmp_path / "dst"
    packer.convert(_tree(tmp_path / "src"), dst, to="lmdb", digest="blake3", shard_size="2KB", workers=1)
    local = [bytes(ShardSet(dst).read(i)) for i in range(len(ShardSet(dst)))]
    store = FaultStore(LocalStore(dst))
    store.corrupt(count=1, match="shard-")  # a damaged transfer: caught by BLAKE3, fetched again
    remote = ShardSet(store, cache=NodeCache(tmp_path / "cache"), mode=mode)
    assert [bytes(remote.read(i)) for i in range(len(remote))] == local


@needs_blake3
def test_reading_a_blake3_dataset_from_a_url_without_blake3_names_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "dst"
    packer.convert(_tree(tmp_path / "src"), dst, to="lmdb", digest="blake3", workers=1)
    monkeypatch.setitem(sys.modules, "blake3", None)
    monkeypatch.delitem(sys.modules, "packer.digest_blake3", raising=False)
    monkeypatch.delitem(DIGESTS._loaded, "blake3", raising=False)
    assert len(packer.open_dataset(dst)) == 12  # a local dataset is read without hashing
    with pytest.raises(MissingExtraError, match=r"packer-shards\[fast\]"):
        ShardSet(FaultStore(LocalStore(dst)), cache=NodeCache(tmp_path / "cache"))
    with pytest.raises(MissingExtraError, match=r"packer-shards\[fast\]"):
        packer.verify_dataset(dst)


def _manifest_data(tmp_path: Path) -> dict:
    dst = tmp_path / "m"
    if not dst.exists():
        packer.convert(_tree(tmp_path / "src"), dst, to="lmdb", digest="sha256", workers=1)
    return json.loads((dst / "index.json").read_text())


def test_a_manifest_names_a_known_algorithm_in_a_format_that_holds_it(tmp_path: Path) -> None:
    data = _manifest_data(tmp_path)
    data.update(digest="blake3", format_version=DIGEST_FORMAT_VERSION)
    manifest = Manifest.from_json(json.dumps(data))
    assert manifest.digest == "blake3" and json.loads(manifest.to_json())["digest"] == "blake3"
    for version in (2, 1):  # an older format cannot say it (3 needs a schema)
        with pytest.raises(ManifestError, match="cannot record the digest 'blake3'"):
            Manifest.from_json(json.dumps({**data, "format_version": version}))
    with pytest.raises(ManifestError, match="'md5', which this packer does not know"):
        Manifest.from_json(json.dumps({**data, "digest": "md5"}))
    with pytest.raises(ManifestError, match="upgrade packer"):
        Manifest.from_json(json.dumps({**data, "format_version": DIGEST_FORMAT_VERSION + 1}))


def test_sample_index_files_are_named_by_the_datasets_algorithm(tmp_path: Path) -> None:
    from packer.format.sample_index import write_index_file

    array = np.arange(7, dtype=np.int64)
    entry = write_index_file(str(tmp_path), "targets", array, digest=SHA256)
    assert entry.sha256 == SHA256.file(str(tmp_path / entry.path)) and entry.sha256[:16] in entry.path
    shutil.rmtree(tmp_path / "samples")


def test_an_array_task_given_no_digest_follows_the_plans(tmp_path: Path) -> None:
    """Tasks on machines with and without the blake3 wheel (here: another default for the first
    task) write one dataset; the plan's algorithm wins over a task's own default, not over a choice."""
    src, dst = _tree(tmp_path / "src"), tmp_path / "dst"
    threads = cf.ThreadPoolExecutor(1)  # in this process: the test's algorithm is registered here only
    run = {"to": "lmdb", "shard_size": "2KB", "engine": ExecutorEngine(threads, 1, name="threads")}
    DIGESTS.register("blake2b", DigestAlgorithm("blake2b", hashlib.blake2b), replace=True)
    try:
        packer.convert_task(src, dst, task_id=0, num_tasks=2, digest="blake2b", **run)
        with pytest.raises(packer.ResumeError, match="every array task must run the same command"):
            packer.convert_task(src, dst, task_id=1, num_tasks=2, digest="sha256", **run)
        packer.convert_task(src, dst, task_id=1, num_tasks=2, **run)
        merged = packer.merge(dst, verify=True)
        assert merged.manifest.digest == "blake2b"
        single = packer.convert(src, tmp_path / "one", digest="blake2b", **run)
        assert [s.path for s in merged.manifest.shards] == [s.path for s in single.manifest.shards]
    finally:
        DIGESTS.unregister("blake2b")
        threads.shutdown()
