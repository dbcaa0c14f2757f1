"""Remote datasets against real servers on 127.0.0.1: an S3-API server (moto), behind a fault
proxy where a test counts what crossed the wire, and an HTTP server with range support (rclone
serve http); faults and latency that need no server (transient errors, damaged or cut bodies, a
server down for a while, a slow download) come from :class:`packer.testing.faultstore.FaultStore`
over the local dataset, through the same retries and cache. Which failures are final and which
are retried, per class, against the real servers: tests/test_retrying.py.

Every test compares what a store gives with what the local dataset gives, byte for byte, or
expects exactly one clear error. Nothing patches a client.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from imagetools import jpeg_bytes, write_tree

import packer
from packer.cli import cli
from packer.errors import (
    BucketNotFoundError,
    CacheError,
    IntegrityError,
    MissingExtraError,
    NotADatasetError,
    ObjectNotFoundError,
    StoreUnavailableError,
    VersionGoneError,
)
from packer.format.backends import Backend
from packer.format.shardset import ShardSet
from packer.registry import Lazy, Registry
from packer.store import NodeCache
from packer.store.local import LocalStore
from packer.store.retrying import RetryPolicy, ShortRead
from packer.testing.faultstore import FaultStore
from packer.tools.publish import collect_remote_garbage, push_dataset

FAST = {"retries": 6, "timeout": 5}
QUICK = RetryPolicy(retries=4, base=0.001, cap=0.01)


def _tree(root: Path, classes: int = 3, per_class: int = 8, seed: int = 0) -> Path:
    """Photo-sized JPEGs (a few KB each, noisy so they do not compress away)."""
    spec = {f"c{c}/img{i:02d}.jpg": jpeg_bytes(96 + 8 * i, 64 + 4 * c, seed + 31 * c + i)
            for c in range(classes) for i in range(per_class)}
    return write_tree(root, spec)


@pytest.fixture
def local_dataset(tmp_path: Path, backend: Backend) -> Path:
    src = _tree(tmp_path / "src")
    dst = tmp_path / "dst"
    packer.convert(src, dst, to=backend.name, shard_size="40KB", workers=1)
    return dst


def _payloads(dataset: Any) -> list[tuple[bytes, int]]:
    return [(bytes(dataset[i][0]), int(dataset[i][1])) for i in range(len(dataset))]


def _faulty(local: Path, policy: RetryPolicy = QUICK) -> FaultStore:
    """The local dataset seen as a remote store: faults injected in-process, retried as a URL's are."""
    return FaultStore(LocalStore(local), policy=policy)


def _records(dataset: Path | ShardSet) -> list[bytes]:
    shards = dataset if isinstance(dataset, ShardSet) else ShardSet(dataset)
    return [bytes(shards.read(i)) for i in range(len(shards))]


def _pushed(local: Path, bucket: str, name: str = "ds") -> str:
    url = f"{bucket}/{name}"
    push_dataset(local, url)
    return url


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["whole", "ranged"])
def test_a_pushed_dataset_reads_back_sample_for_sample(local_dataset: Path, s3_bucket: str, s3_env: Any,
                                                       tmp_path: Path, mode: str) -> None:
    url = _pushed(local_dataset, s3_bucket)
    local = packer.open_dataset(local_dataset, decode=False)
    remote = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "cache", mode=mode)
    assert remote.access_mode == mode
    assert remote.classes == local.classes and list(remote.targets) == list(local.targets)
    assert list(remote.samples) == list(local.samples)
    assert remote[0][0] == local[0][0]  # touched in the parent first
    expected = Counter(_payloads(local))
    for context in ("fork", "spawn", "forkserver") if mode == "ranged" else ("fork", "spawn"):
        loader = torch.utils.data.DataLoader(remote, batch_size=5, num_workers=2, shuffle=True,
                                             multiprocessing_context=context, collate_fn=list,
                                             persistent_workers=True)
        for _ in range(2):  # two epochs through the same persistent workers
            got = Counter((bytes(p), int(t)) for batch in loader for p, t in batch)
            assert got == expected, context


@pytest.mark.slow
def test_a_cache_bound_far_below_the_dataset_holds(tmp_path: Path, s3_bucket: str, s3_env: Any) -> None:
    src = _tree(tmp_path / "src", classes=4, per_class=20)
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="lmdb", shard_size="60KB", workers=1)
    url = _pushed(dst, s3_bucket)
    local = packer.open_dataset(dst, decode=False)
    size = local.manifest.num_bytes
    bound = size // 10
    remote = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "cache", cache_limit=bound)
    assert remote.access_mode == "ranged"  # auto: the cache cannot hold the dataset
    cache = NodeCache(tmp_path / "cache")
    peak = 0
    loader = torch.utils.data.DataLoader(remote, batch_size=8, num_workers=2, shuffle=True,
                                         multiprocessing_context="fork", collate_fn=list)
    got: Counter[tuple[bytes, int]] = Counter()
    for batch in loader:
        got.update((bytes(p), int(t)) for p, t in batch)
        peak = max(peak, cache.info().num_bytes)
    assert got == Counter(_payloads(local))
    assert peak <= bound, (peak, bound, size)


def test_auto_stages_whole_shards_when_the_cache_holds_the_dataset(local_dataset: Path, s3_bucket: str,
                                                                   s3_env: Any, tmp_path: Path) -> None:
    url = _pushed(local_dataset, s3_bucket)
    remote = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "cache")
    assert remote.access_mode == "whole" and "access='whole'" in repr(remote)
    assert _payloads(remote) == _payloads(packer.open_dataset(local_dataset, decode=False))


@pytest.mark.parametrize("mode", ["whole", "ranged"])
def test_transient_faults_are_retried_and_the_bytes_are_exact(local_dataset: Path, tmp_path: Path,
                                                               mode: str) -> None:
    store = _faulty(local_dataset)
    store.inject("read", lambda: TimeoutError("stalled"), count=1)  # the manifest
    reset = lambda: ConnectionResetError(errno.ECONNRESET, "reset")  # noqa: E731 - a fresh one per fault
    store.inject("read_range", reset, count=2, match="shard-")
    store.inject("read_range", ShortRead("got 10 of 4096 bytes"), on_call=3, count=2, match="shard-")
    assert _records(ShardSet(store, cache=NodeCache(tmp_path / "c"), mode=mode)) == _records(local_dataset)
    assert store.calls["read"] == 2


@pytest.mark.parametrize(("mode", "fault"), [("whole", "corrupt"), ("ranged", "corrupt"),
                                            ("whole", "truncate")])
def test_a_corrupted_transfer_is_fetched_again(local_dataset: Path, tmp_path: Path, mode: str,
                                               fault: str) -> None:
    store = _faulty(local_dataset)
    getattr(store, fault)(count=1, match="shard-")  # bytes a client took for a whole body
    assert _records(ShardSet(store, cache=NodeCache(tmp_path / "c"), mode=mode)) == _records(local_dataset)


def test_a_short_block_is_never_cached(local_dataset: Path, tmp_path: Path) -> None:
    """A store that hands back fewer bytes than a block (a remote store checks, and retries)
    is one clear error naming the cache entry, and nothing short is kept."""
    store = _faulty(local_dataset)
    store.truncate(count=1, match="shard-")
    shards = ShardSet(store, cache=NodeCache(tmp_path / "c"), mode="ranged")
    with pytest.raises(IntegrityError, match="the download wrote"):
        shards.read(0)
    assert _records(shards) == _records(local_dataset)


@pytest.mark.parametrize("mode", ["whole", "ranged"])
def test_a_corrupted_object_is_one_clear_error(local_dataset: Path, s3_bucket: str, s3_server: Any,
                                               s3_env: Any, tmp_path: Path, mode: str) -> None:
    url = _pushed(local_dataset, s3_bucket)
    bucket, prefix = url[len("s3://"):].split("/", 1)
    client = s3_server.client()
    key = next(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/shard-")["Contents"])
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    for position in range(0, len(data), 97):  # damage every record, keep the size
        data[position] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    remote = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "c", mode=mode, storage_options=FAST)
    with pytest.raises(IntegrityError, match=key.rsplit("/", 1)[-1]):
        _payloads(remote)
    result = CliRunner().invoke(cli, ["verify", url])
    assert result.exit_code == 1 and key.rsplit("/", 1)[-1] in result.output


@pytest.mark.parametrize("backend", ["lmdb"], indirect=True)  # the store's retries, not a backend's
def test_a_server_down_for_a_second_mid_epoch_is_ridden_out(local_dataset: Path, tmp_path: Path) -> None:
    # Full jitter waits a random fraction of each backoff: 40 tries of up to 0.2 s outlast the
    # one-second outage with near certainty (8 tries of up to 0.4 s fell short now and then).
    store = _faulty(local_dataset, policy=RetryPolicy(retries=40, base=0.05, cap=0.2))
    shards = ShardSet(store, cache=NodeCache(tmp_path / "c"), mode="ranged")
    expected = _records(local_dataset)
    assert bytes(shards.read(0)) == expected[0]
    store.inject("read_range", lambda: ConnectionRefusedError(errno.ECONNREFUSED, "refused"), count=10**6)
    timer = threading.Timer(1.0, store.clear)
    started = time.monotonic()
    timer.start()
    try:
        assert _records(shards) == expected
    finally:
        timer.cancel()
    assert time.monotonic() - started >= 0.9  # it did wait for the server


def test_a_server_that_stays_down_is_one_clear_error(local_dataset: Path, tmp_path: Path) -> None:
    store = _faulty(local_dataset, policy=RetryPolicy(retries=2, base=0.001, cap=0.01))
    shards = ShardSet(store, cache=NodeCache(tmp_path / "c"), mode="ranged")
    store.inject("read_range", lambda: ConnectionRefusedError(errno.ECONNREFUSED, "refused"), count=10**6)
    with pytest.raises(StoreUnavailableError, match="kept failing after 3 tries"):
        shards.read(len(shards) - 1)
    assert store.calls["read_range"] == 3


def test_missing_objects_buckets_and_credentials_say_so(local_dataset: Path, s3_bucket: str, s3_env: Any,
                                                        tmp_path: Path) -> None:
    with pytest.raises(NotADatasetError, match="no index.json"):
        packer.open_dataset(f"{s3_bucket}/nothing-here", cache_dir=tmp_path / "c")
    with pytest.raises(BucketNotFoundError, match="bucket does not exist"):
        packer.open_dataset("s3://no-such-bucket-here/ds", cache_dir=tmp_path / "c")
    url = _pushed(local_dataset, s3_bucket)
    store = packer.open_dataset(url, cache_dir=tmp_path / "c")._shards.store
    with pytest.raises(ObjectNotFoundError, match="does not exist"):
        store.read("shard-missing.lmdb")
    result = CliRunner().invoke(cli, ["info", "s3://no-such-bucket-here/ds"])
    assert result.exit_code == 1 and "bucket does not exist" in result.output


def test_the_cache_disk_full_is_one_clear_error(local_dataset: Path, s3_bucket: str, s3_env: Any,
                                                tmp_path: Path) -> None:
    url = _pushed(local_dataset, s3_bucket)
    cache_dir = tmp_path / "c"
    full = NodeCache(cache_dir, min_free=shutil.disk_usage(tmp_path).free * 2)  # its disk is "full"
    with pytest.raises(CacheError, match=str(cache_dir)):
        ShardSet(url, cache=full, mode="ranged", storage_options=FAST).read(0)


_JOB = textwrap.dedent("""
    import sys, packer
    ds = packer.open_dataset(sys.argv[1], decode=False, cache_dir=sys.argv[2], mode=sys.argv[3])
    print(sum(len(ds[i][0]) for i in range(len(ds))))
""")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["whole", "ranged"])
def test_two_jobs_sharing_one_cache(local_dataset: Path, s3_bucket: str,
                                                         fault_proxy: Any, s3_env: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    url = _pushed(local_dataset, s3_bucket)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.latency_ms = 20
    cache = tmp_path / "shared-cache"
    jobs = [subprocess.Popen([sys.executable, "-c", _JOB, url, str(cache), mode], stdout=subprocess.PIPE,
                             text=True, env=os.environ.copy()) for _ in range(2)]
    outputs = [job.communicate(timeout=120)[0] for job in jobs]
    assert all(job.returncode == 0 for job in jobs), outputs
    local = packer.open_dataset(local_dataset, decode=False)
    assert outputs[0] == outputs[1] == f"{sum(len(p) for p, _ in _payloads(local))}\n"
    data_bytes = local.manifest.num_bytes
    # each shard or run of blocks fetched once for both jobs (runs that merely overlap may not be)
    assert fault_proxy.bytes_out < 1.3 * data_bytes + 20_000, (fault_proxy.bytes_out, data_bytes)


_SLOW_JOB = textwrap.dedent("""
    import sys
    from packer.format.shardset import ShardSet
    from packer.store import NodeCache
    from packer.store.local import LocalStore
    from packer.testing.faultstore import FaultStore
    store = FaultStore(LocalStore(sys.argv[1]))
    store.stall(30, count=100, match="shard-")
    ShardSet(store, cache=NodeCache(sys.argv[2]), mode="whole").read(0)
""")


@pytest.mark.parametrize("backend", ["lmdb"], indirect=True)  # the cache's behaviour, not a backend's
def test_a_download_killed_midway_leaves_nothing_taken_for_data(local_dataset: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    job = subprocess.Popen([sys.executable, "-c", _SLOW_JOB, str(local_dataset), str(cache)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = cache / "v1" / "tmp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (partial.is_dir() and any(partial.iterdir())):
        time.sleep(0.05)  # until a shard's download has begun (each request takes 30 s)
    assert partial.is_dir() and any(partial.iterdir())
    job.kill()
    job.wait()
    shards = ShardSet(_faulty(local_dataset), cache=NodeCache(cache), mode="whole")
    assert _records(shards) == _records(local_dataset)


@pytest.mark.slow
def test_an_update_pushes_only_new_objects_and_version_1_readers_keep_reading(
        tmp_path: Path, s3_bucket: str, s3_env: Any) -> None:
    src = _tree(tmp_path / "src", classes=3, per_class=10)
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="lmdb", shard_size="40KB", workers=1)
    url = f"{s3_bucket}/ds"
    first = push_dataset(dst, url)
    v1_local = _payloads(packer.open_dataset(dst, decode=False))
    reader_v1 = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "c1", mode="ranged")
    assert reader_v1.manifest.version == 1

    write_tree(src, {"c3/new00.jpg": jpeg_bytes(100, 70, 999),
                     "c3/new01.jpg": jpeg_bytes(90, 80, 998)})
    packer.update(src, dst)
    second = push_dataset(dst, url)
    v2 = packer.open_dataset(dst, decode=False).manifest
    assert len(v2.shards) > len(second.uploaded) - 3  # not every shard went up again
    kept = {s.path for s in v2.shards} & set(first.uploaded)
    assert kept and kept <= set(second.skipped)  # unchanged shards were not uploaded again
    assert not any(p in first.uploaded for p in second.uploaded if p.startswith(("shard-", "samples/")))
    assert second.uploaded[-1] == "index.json"

    assert _payloads(reader_v1) == v1_local  # still version 1, read after the push of version 2
    current = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "c2")
    assert current.manifest.version == 2
    assert _payloads(current) == _payloads(packer.open_dataset(dst, decode=False))

    result = collect_remote_garbage(url, keep_versions=1)
    assert result.kept_versions == (2,) and "versions/00001.json" in result.removed
    with pytest.raises(VersionGoneError, match="Version 1"):
        ShardSet(url, version=1, cache=NodeCache(tmp_path / "c3"))


def test_an_http_server_serves_a_dataset(local_dataset: Path, http_server_factory: Any,
                                         tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(local_dataset, site / "ds")
    server = http_server_factory(site)
    local = packer.open_dataset(local_dataset, decode=False)
    for mode in ("whole", "ranged"):
        remote = packer.open_dataset(f"{server.url}/ds", decode=False, cache_dir=tmp_path / f"c-{mode}",
                                     mode=mode, storage_options=FAST)
        assert _payloads(remote) == _payloads(local)
    with pytest.raises(Exception, match="read-only"):
        push_dataset(local_dataset, f"{server.url}/other")


def test_without_the_extra_a_url_names_it() -> None:
    """A machine without s3fs (the `remote` extra): the core install works, a URL names the extra."""
    code = textwrap.dedent("""
        import sys
        sys.modules["s3fs"] = None  # as if the extra were not installed
        import packer
        try:
            packer.open_dataset("s3://bucket/ds")
        except packer.MissingExtraError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'packer-shards[remote]'" in out.stdout, out.stderr


def test_a_missing_extra_names_it() -> None:
    registry: Registry[Any] = Registry("scheme", {"xs": Lazy("packer_no_such_module:X", "remote")})
    with pytest.raises(MissingExtraError, match=r"pip install 'packer-shards\[remote\]'"):
        registry.get("xs")


def test_cli_push_cache_info_and_clear(local_dataset: Path, s3_bucket: str, s3_env: Any, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    url = f"{s3_bucket}/ds"
    result = runner.invoke(cli, ["push", str(local_dataset), url])
    assert result.exit_code == 0 and "already there" in result.output, result.output
    again = runner.invoke(cli, ["push", str(local_dataset), url])
    assert "0 B of data" in again.output
    assert runner.invoke(cli, ["info", url]).exit_code == 0
    assert runner.invoke(cli, ["show", url, "0"]).exit_code == 0
    info = runner.invoke(cli, ["cache", "info"])
    assert str(tmp_path / "cache") in info.output and "entries" in info.output
    cleared = runner.invoke(cli, ["cache", "clear"])
    assert cleared.exit_code == 0 and "Removed" in cleared.output
    assert NodeCache(tmp_path / "cache").info().entries == 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["whole", "ranged"])
def test_read_ahead_fetches_in_sampler_order_for_the_workers(
        local_dataset: Path, s3_bucket: str, fault_proxy: Any, s3_env: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    url = _pushed(local_dataset, s3_bucket)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    remote = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "c", mode=mode)
    loader = packer.make_loader(remote, batch_size=4, num_workers=2, sampler="shard", collate_fn=list,
                                multiprocessing_context="fork")
    assert isinstance(loader.sampler, packer.ReadAheadSampler)
    loader.sampler.set_epoch(1)  # passed through to the ShardAwareSampler
    got = Counter((bytes(p), int(t)) for batch in loader for p, t in batch)
    assert got == Counter(_payloads(packer.open_dataset(local_dataset, decode=False)))
    assert NodeCache(tmp_path / "c").info().entries > 0
    local_loader = packer.make_loader(packer.open_dataset(local_dataset), batch_size=4, num_workers=0)
    assert not isinstance(local_loader.sampler, packer.ReadAheadSampler)


def test_read_ahead_stays_off_when_the_cache_cannot_hold_its_window(local_dataset: Path, s3_bucket: str,
                                                                    s3_env: Any, tmp_path: Path) -> None:
    url = _pushed(local_dataset, s3_bucket)
    roomy = packer.open_dataset(url, cache_dir=tmp_path / "a", mode="ranged")
    tight = packer.open_dataset(url, cache_dir=tmp_path / "b", mode="ranged",
                                cache_limit=roomy.manifest.num_bytes // 4)
    assert packer.ReadAheadSampler(range(len(roomy)), roomy, lookahead=64).active()
    assert not packer.ReadAheadSampler(range(len(tight)), tight, lookahead=64).active()
    assert list(packer.ReadAheadSampler(range(len(tight)), tight)) == list(range(len(tight)))
