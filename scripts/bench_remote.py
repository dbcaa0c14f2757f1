#!/usr/bin/env python3
"""packer reading from an S3-API server through a latency proxy, against the same dataset on
local disk and against MosaicML Streaming and LitData, in one run.

Usage::

    python scripts/bench_remote.py [--images 1500] [--workers 2] [--batch-size 64]
        [--latency-ms 20] [--root DIR] [--keep] [--skip-peers] [--quick]

A corpus (``--src``, else generated: the shared tools' ``make_corpus.py`` where it and its photos
are found, else packer's demo tree) is converted to LMDB (``--shard-size`` shards) and pushed to
``rclone serve s3`` on 127.0.0.1: Go and light, where moto's Python server (``--server moto``)
would take much of a 2-core machine from the decoding workers. Remote cases read through one
``FaultProxy`` (``scripts/faultproxy.py``) adding ``--latency-ms`` to every request, an object
store's round trip. Each case runs in a fresh process: two shuffled epochs through the fast path
(``RandomResizedCropFlip(224)`` on stored bytes in ``--workers`` workers, ``Normalize`` per batch
in the main process; packer through ``make_loader``, which reads ahead for a URL). Cases:

* ``local``: the dataset on local disk, page cache warm: the baseline of every ratio;
* ``ranged``, ``ranged-small``: records as byte ranges through the node cache's blocks, the cache
  bounded at twice the dataset and at a tenth of it (where ``make_loader`` shuffles shards, then
  samples within windows of shards that fit the cache: ``ShardWindowSampler``);
* ``uniform-small``: ``ranged-small`` with a uniform shuffle (``sampler="random"``), what packer
  did before: the cost of a shuffle that ignores the cache;
* ``whole``, ``auto``: whole shards staged in the cache (bound: twice the dataset); packer's choice;
* ``streaming``, ``litdata``: Streaming's ``MDSWriter`` (``image: bytes``, ``label: int``) and
  LitData's ``optimize`` formats of the same bytes, same shard size, server and proxy, read by
  their ``StreamingDataset`` (shuffled, cache bounded at twice the dataset) with the same workers,
  batch size, decode and transform; ``streaming-small``, ``litdata-small``: the same with the
  cache bounded at a tenth of the dataset, as ``ranged-small``; only where ``--peers-python``
  imports them (never packer dependencies; run the whole script with that interpreter for one
  torch build in every row).
  Two workarounds: LitData's obstore client refuses plain http, so its boto3 path is used; and
  Streaming 0.13's workers would share, across fork, the S3 client it opened the dataset with,
  so each gets its own (shared, they read each other's bytes: corrupt shards). Both peers shuffle
  shard by shard, which is kinder to a cache than packer's uniform shuffle.

Reading the table: ``epoch 1`` is a cold start (open the dataset, start the workers, read every
sample into an empty cache), ``epoch 2`` the next epoch on the same workers; ratios divide by the
``local`` figure of the same epoch. ``MB fetched`` and ``requests`` are what the proxy served per
epoch; ``cache peak`` is the cache's largest size, sampled every 0.25 s. Figures are medians of
``--reps`` runs, interleaved (run 1 of every case, then run 2, ...), each from an empty cache: on 2
cores shared by server, proxy and workers, single runs differ by 10-20 %.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS_TOOL = ROOT.parent / "shared" / "tools" / "make_corpus.py"
PACKER_CASES = ["local", "ranged", "ranged-small", "uniform-small", "whole", "auto"]
#: The cases whose cache holds a tenth of the dataset.
SMALL_CACHE = ("ranged-small", "uniform-small", "streaming-small", "litdata-small")
PEER_CASES = ["streaming", "litdata", "streaming-small", "litdata-small"]
BUCKET, KEY, SECRET = "bench", "testing", "testing"
PEER_ADVICE = ("pip install mosaicml-streaming litdata, in a virtual environment made with "
               "--system-site-packages if they would replace this one's torch or numpy, and pass "
               "--peers-python VENV/bin/python")


@dataclass
class Result:
    """One case's runs: ``epochs`` holds (seconds, images, MB fetched, requests) of epoch 1 and 2
    of each run in turn; the figures are medians over the runs."""

    case: str
    epochs: list[tuple[float, int, float, int]] = field(default_factory=list)
    cache_peak: int = 0
    error: str = ""

    def rate(self, epoch: int) -> float:
        """Images/s of epoch 1 (``epoch`` 0) or 2 (1)."""
        return statistics.median(images / seconds for seconds, images, _, _ in self.epochs[epoch::2])

    def traffic(self, epoch: int) -> tuple[float, float]:
        """(MB fetched, requests) in epoch 1 (0) or 2 (1)."""
        runs = self.epochs[epoch::2]
        return statistics.median(run[2] for run in runs), statistics.median(run[3] for run in runs)


# ----------------------------------------------------------------------------- the reading side


class PeerSample:
    """A peer's ``{"image": bytes, "label": int}`` as packer's fast path yields a sample."""

    def __init__(self) -> None:
        import packer

        self.transform = packer.RandomResizedCropFlip(224)

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        return self.transform(sample["image"]), int(sample["label"])


def litdata_without_obstore(_: int = 0) -> None:
    """LitData's obstore client has no ``allow_http`` for a plain-http endpoint: use boto3."""
    import litdata.streaming.downloader as downloader

    downloader._OBSTORE_AVAILABLE = False  # no public switch in litdata 0.2


def streaming_own_client(_: int) -> None:
    """Streaming 0.13 keeps the S3 client it read ``index.json`` with in the parent: forked workers
    share its pooled connection and read each other's bytes (corrupt shards). One per worker."""
    import torch

    info = torch.utils.data.get_worker_info()
    for stream in getattr(info.dataset, "streams", ()) if info is not None else ():
        stream._downloader.clean_up()


def build_loader(case: str, spec: dict[str, Any]) -> Any:
    """The case's loader (``spec``: url, cache, mode, limit, workers, batch_size)."""
    from torch.utils.data import DataLoader

    common: dict[str, Any] = {"batch_size": spec["batch_size"], "num_workers": spec["workers"],
                              "persistent_workers": spec["workers"] > 0}
    if case.startswith("streaming"):
        import streaming

        sample = PeerSample()

        class Decoded(streaming.StreamingDataset):  # type: ignore[misc]  # fork workers: not pickled
            def __getitem__(self, index: int) -> tuple[Any, int]:
                return sample(super().__getitem__(index))

        return DataLoader(Decoded(remote=spec["url"], local=spec["cache"], shuffle=True,
                                  cache_limit=spec["limit"], batch_size=spec["batch_size"]),
                          worker_init_fn=streaming_own_client, **common)
    if case.startswith("litdata"):
        import litdata

        litdata_without_obstore()
        dataset = litdata.StreamingDataset(spec["url"], cache_dir=spec["cache"], shuffle=True,
                                           max_cache_size=spec["limit"], transform=PeerSample())
        return litdata.StreamingDataLoader(dataset, worker_init_fn=litdata_without_obstore, **common)
    import packer

    remote = {} if case == "local" else {"cache_dir": spec["cache"], "cache_limit": spec["limit"],
                                         "mode": spec["mode"]}
    dataset = packer.open_dataset(spec["url"], packer.RandomResizedCropFlip(224), decode=False, **remote)
    # make_loader: for a URL, a ReadAheadSampler fetches into the cache in the shuffled order
    chosen = {"sampler": "random"} if case == "uniform-small" else {}
    return packer.make_loader(dataset, seed=0, drop_last=False, pin_memory=False, **common, **chosen)


def measure_one(case: str, spec: dict[str, Any]) -> None:
    """In a fresh process: two epochs; after each, print ``EPOCH`` and wait for the parent's go."""
    import torch

    from packer.tools.bench import BatchNormalizer

    torch.set_num_threads(1)
    if case == "local":
        for folder, _, names in os.walk(spec["url"]):  # warm the page cache
            for name in names:
                Path(folder, name).read_bytes()
    normalizer = BatchNormalizer(spec["workers"])
    started = time.perf_counter()
    loader = build_loader(case, spec)  # epoch 1 includes opening the dataset
    with normalizer.threads():
        for epoch in (1, 2):
            images = 0
            for batch in loader:
                images += len(normalizer(batch[0]))
            print(f"EPOCH {epoch} {time.perf_counter() - started:.6f} {images}", flush=True)
            sys.stdin.readline()
            started = time.perf_counter()


# ----------------------------------------------------------------------------- preparing


def make_corpus(dst: str, images: int, *, quick: bool) -> None:
    """A photo-like ImageFolder tree of about ``images`` images."""
    photos = any(importlib.util.find_spec(name) for name in ("skimage", "sklearn"))
    if not quick and CORPUS_TOOL.is_file() and photos:
        classes = max(1, min(10, images // 10))
        subprocess.run([sys.executable, str(CORPUS_TOOL), "--classes", str(classes), "--per-class",
                        str(math.ceil(images / classes)), "--out", dst, "--workers", "2"], check=True)
    else:
        from packer.tools.demo.tree import make_demo_tree

        make_demo_tree(dst, per_class=math.ceil(images / 4))


def prepare(args: argparse.Namespace, root: str) -> tuple[str, int, int]:
    """The corpus and its LMDB conversion, reused from ``--root``: (path, images, bytes)."""
    import packer

    src = args.src or os.path.join(root, f"src-{args.images}{'-demo' if args.quick else ''}")
    if not args.src and not os.path.isdir(src):
        make_corpus(src, args.images, quick=args.quick)
    packed = os.path.join(root, f"lmdb-{Path(src).name}-{args.shard_size}")
    if not os.path.exists(os.path.join(packed, "index.json")):
        packer.convert(src, packed, to="lmdb", shard_size=args.shard_size, overwrite=True)
    dataset = packer.open_dataset(packed)
    return packed, len(dataset), sum(shard.num_bytes for shard in dataset.manifest.shards)


class PackedItem:
    """Sample ``index`` of a packed dataset as a peer's dict (LitData's ``optimize`` function)."""

    dataset: Any

    def __init__(self, root: str) -> None:
        self.root, self.dataset = root, None

    def __call__(self, index: int) -> dict[str, Any]:
        import packer

        if self.dataset is None:
            self.dataset = packer.open_dataset(self.root, decode=False)
        image, label = self.dataset[index]
        return {"image": bytes(image), "label": int(label)}


def write_peers(packed: str, out: str, shard_bytes: int, cases: list[str]) -> None:
    """(In the peers' interpreter) Streaming's and LitData's formats of ``packed``'s stored bytes."""
    import packer

    item, count = PackedItem(packed), len(packer.open_dataset(packed))
    if "streaming" in cases:
        from streaming import MDSWriter

        with MDSWriter(out=os.path.join(out, "streaming"), columns={"image": "bytes", "label": "int"},
                       size_limit=shard_bytes) as writer:
            for index in range(count):
                writer.write(item(index))
    if "litdata" in cases:
        import litdata

        litdata.optimize(fn=item, inputs=list(range(count)), output_dir=os.path.join(out, "litdata"),
                         chunk_bytes=shard_bytes, num_workers=1, verbose=False)


def die_with_parent() -> None:
    """Linux, in the server's process before exec: SIGTERM it when this process dies, killed or not."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_server(kind: str, root: str, log: Any) -> tuple[subprocess.Popen[bytes], str]:
    """``rclone serve s3`` over ``root`` (buckets are its folders), or moto; (process, endpoint)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # rclone: --etag-hash "" spares an MD5 of the whole object per ranged GET; no
    # --dir-cache-time 0s, which makes rclone 1.75 spin a core once a folder is cached.
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    if kind == "rclone":
        command = [shutil.which("rclone") or "rclone", "serve", "s3", root, "--addr", f"127.0.0.1:{port}",
                   "--auth-key", f"{KEY},{SECRET}", "--etag-hash", "", "--config", os.devnull]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                               preexec_fn=die_with_parent if sys.platform == "linux" else None)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{kind} did not start on 127.0.0.1:{port}; its output is in {log.name}")


def s3_env(endpoint: str) -> dict[str, str]:
    """Every client's settings for ``endpoint`` (rclone also returns an upload's CRC on ranged
    GETs, so responses are checked only when required)."""
    return {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "S3_ENDPOINT_URL": endpoint,
            "AWS_EC2_METADATA_DISABLED": "true", "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
            "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required", "LITDATA_ASYNC_CHUNK_PREFETCH": "0"}


def publish(args: argparse.Namespace, packed: str, root: str, peers: list[str]) -> None:
    """Upload packer's dataset and the peers' formats of it to the server ``AWS_ENDPOINT_URL`` names."""
    import boto3

    from packer.sizes import parse_size
    from packer.tools.publish import push_dataset

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    push_dataset(packed, f"s3://{BUCKET}/packer")
    out = os.path.join(root, "peers")
    if peers:
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([args.peers_python, os.path.abspath(__file__), "--write-peers", packed, out,
                        str(parse_size(args.shard_size)), ",".join(peers)], check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for case in peers:
        for name in sorted(os.listdir(os.path.join(out, case))):
            client.upload_file(os.path.join(out, case, name), BUCKET, f"{case}/{name}")


def cache_limit(case: str, size: int, peers: str, notes: list[str]) -> int:
    """A case's cache bound: twice the dataset, or a tenth for ``SMALL_CACHE``; Streaming refuses a
    bound under four of its largest shards, so ``streaming-small`` gets that where a tenth is less
    (noted under the table: that row's cache is larger than the others')."""
    if case not in SMALL_CACHE:
        return 2 * size
    if case != "streaming-small":
        return size // 10
    with open(os.path.join(peers, "streaming", "index.json")) as file:
        shards = json.load(file)["shards"]
    least = 4 * max(shard["raw_data"]["bytes"] + ((shard.get("zip_data") or {}).get("bytes") or 0)
                    for shard in shards)
    if least > size // 10:
        notes.append(f"streaming-small: cache {least / 1e6:.1f} MB, not a tenth ({size / 10e6:.1f} MB): "
                     "Streaming refuses a cache_limit under four times its largest shard")
    return max(size // 10, least)


def peer_format(case: str) -> str:
    """The peer whose format a case reads (``streaming-small`` reads ``streaming``'s)."""
    return case.split("-")[0]


# ----------------------------------------------------------------------------- measuring, reporting


def cache_bytes(case: str, directory: str) -> int:
    """Bytes in a case's cache: packer's ``NodeCache.info``, else the files under the folder."""
    if case in PACKER_CASES:
        from packer.store.cache.node import NodeCache

        return NodeCache(directory).info().num_bytes
    try:
        return sum(path.stat().st_size for path in Path(directory).rglob("*") if path.is_file())
    except FileNotFoundError:  # a file evicted meanwhile: no sample this time
        return 0


def run_case(result: Result, spec: dict[str, Any], python: str, proxy: Any, log_dir: str) -> None:
    """Run ``result.case`` once in a child, with an empty cache; count the proxy's traffic and
    sample the cache per epoch."""
    case, done, before = result.case, threading.Event(), len(result.epochs)
    shutil.rmtree(spec["cache"], ignore_errors=True)
    os.makedirs(spec["cache"])

    def sample() -> None:
        while not done.wait(0.25):
            result.cache_peak = max(result.cache_peak, cache_bytes(case, spec["cache"]))

    command = [python, os.path.abspath(__file__), "--one", case, "--spec", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(os.path.join(log_dir, f"{case}.log"), "w+b") as log:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                 text=True, env=env)
        threading.Thread(target=sample, daemon=True).start()
        requests, sent = proxy.requests, proxy.bytes_out
        for line in child.stdout or ():
            if line.startswith("EPOCH "):
                _, _, seconds, images = line.split()
                result.epochs.append((float(seconds), int(images), (proxy.bytes_out - sent) / 1e6,
                                      proxy.requests - requests))
                result.cache_peak = max(result.cache_peak, cache_bytes(case, spec["cache"]))
                requests, sent = proxy.requests, proxy.bytes_out
                if child.stdin is not None:
                    child.stdin.write("go\n")
                    child.stdin.flush()
        done.set()
        if child.wait() != 0 or len(result.epochs) < before + 2:
            log.seek(0)
            result.error = log.read().decode(errors="replace")[-2000:]
            del result.epochs[before:]


def table(results: list[Result]) -> list[str]:
    base = next((r for r in results if r.case == "local" and not r.error), None)
    lines = ["| case | epoch 1 img/s | vs local | epoch 2 img/s | vs local | MB fetched (ep 1 / 2) | "
             "requests (ep 1 / 2) | cache peak MB |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.case} | failed | | | | | | |")
            continue
        ratio = [f"{r.rate(e) / base.rate(e):.2f}x" if base else "-" for e in (0, 1)]
        (mb1, req1), (mb2, req2) = r.traffic(0), r.traffic(1)
        traffic = (["-"] * 3 if r.case == "local" else
                   [f"{mb1:.1f} / {mb2:.1f}", f"{req1:.0f} / {req2:.0f}", f"{r.cache_peak / 1e6:.1f}"])
        lines.append(f"| {r.case} | {r.rate(0):,.0f} | {ratio[0]} | {r.rate(1):,.0f} | {ratio[1]} | "
                     + " | ".join(traffic) + " |")
    return lines


def targets(results: list[Result], dataset_mb: float) -> list[str]:
    """The issue's targets, each with the packer rows that meet it."""
    ok = {r.case: r for r in results if not r.error}
    if "local" not in ok:
        return ["targets: no local baseline, so no ratios"]
    mine = [ok[case] for case in PACKER_CASES[1:] if case in ok]
    above = [r for r in mine if r.case not in SMALL_CACHE]

    def verdict(rows: list[Result], epoch: int, floor: float) -> str:
        met = [r.case for r in rows if r.rate(epoch) >= floor]
        return f"met by {', '.join(met)}" if met else "not met"

    base = ok["local"]
    small = [r for r in mine if r.case == "ranged-small"]
    fetched = " / ".join(f"{r.traffic(e)[0] / dataset_mb:.2f}x" for r in small for e in (0, 1)) or "-"
    lines = ["targets:", "- epoch 1 >= 0.5x local warm: " + verdict(mine, 0, 0.5 * base.rate(0)),
             "- epoch 2, cache above the dataset, >= 0.9x local: " + verdict(above, 1, 0.9 * base.rate(1)),
             "- cache a tenth of the dataset, each epoch >= 0.6x local: " + " and ".join(
                 f"epoch {e + 1} {verdict(small, e, 0.6 * base.rate(e))}" for e in (0, 1)),
             f"- cache a tenth, bytes fetched per epoch <= 1.1x the dataset: {fetched} (epoch 1 / 2)"]
    for rows, peers, bound in ((above, ["streaming", "litdata"], "cache above the dataset"),
                               (small, ["streaming-small", "litdata-small"], "cache a tenth")):
        measured = [ok[case] for case in peers if case in ok]
        if not measured:
            lines.append(f"- {bound}, packer >= the faster of Streaming and LitData: not measured (no peers)")
            continue
        for epoch in (0, 1):
            best = max(measured, key=lambda r: r.rate(epoch))
            lines.append(f"- {bound}, packer >= the faster peer in epoch {epoch + 1} ({best.case}, "
                         f"{best.rate(epoch):,.0f} img/s): " + verdict(rows, epoch, best.rate(epoch)))
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--src", help="an ImageFolder tree to read (default: generate --images images)")
    add("--images", type=int, default=1500)
    add("--workers", type=int, default=2)
    add("--batch-size", type=int, default=64)
    add("--latency-ms", type=float, default=20.0, help="added to every request (default 20)")
    add("--reps", type=int, default=1, help="runs of every case, interleaved; medians (default 1)")
    add("--shard-size", default="16MB", help="packer's shard size, and the peers' (default 16MB)")
    add("--root", help="working directory; its corpus and conversion are reused (default: temporary)")
    add("--keep", action="store_true", help="keep everything written (also server files and caches)")
    add("--cases", nargs="+", choices=PACKER_CASES + PEER_CASES, default=PACKER_CASES + PEER_CASES)
    add("--skip-peers", action="store_true", help="no Streaming or LitData cases")
    add("--peers-python", default=sys.executable, help="an interpreter that imports the peers")
    add("--server", choices=["rclone", "moto"], default="rclone" if shutil.which("rclone") else "moto")
    add("--quick", action="store_true", help="smoke run: 100 images, 1 worker, batch 16, 1MB shards")
    add("--one", help=argparse.SUPPRESS)
    add("--spec", help=argparse.SUPPRESS)
    add("--write-peers", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.images, args.workers, args.batch_size, args.shard_size = 100, 1, 16, "1MB"
    if args.skip_peers:
        args.cases = [case for case in args.cases if case not in PEER_CASES]
    return args


def main() -> int:
    args = parse_args()
    if args.one:
        measure_one(args.one, json.loads(args.spec))
        return 0
    if args.write_peers:
        packed, out, shard_bytes, cases = args.write_peers
        write_peers(packed, out, int(shard_bytes), cases.split(","))
        return 0
    sys.path.insert(0, str(ROOT / "scripts"))
    from faultproxy import FaultProxy

    root = os.path.abspath(args.root or tempfile.mkdtemp(prefix="bench_remote_"))
    served, caches, logs = (os.path.join(root, name) for name in ("served", "cache", "logs"))
    for folder in (served, caches, logs):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    wanted = [case for case in args.cases if case in PEER_CASES]
    imports = {name: subprocess.run([args.peers_python, "-c", f"import {name}"], capture_output=True,
                                    check=False).returncode == 0 for name in {peer_format(c) for c in wanted}}
    peers = [case for case in wanted if imports[peer_format(case)]]
    missing = [case for case in wanted if case not in peers]
    notes = []
    if missing:
        notes.append(f"skipped {', '.join(missing)}: {args.peers_python} cannot import them; {PEER_ADVICE}")
    packed, count, size = prepare(args, root)
    print(f"dataset: {count} images, {size / 1e6:.1f} MB; {args.server}, {args.latency_ms:g} ms", flush=True)
    results = [Result(case) for case in args.cases if case not in missing]
    with open(os.path.join(logs, "server.log"), "wb") as server_log:
        server, endpoint = start_server(args.server, served, server_log)
        try:
            os.environ.update(s3_env(endpoint))
            publish(args, packed, root, sorted({peer_format(case) for case in peers}))
            limits = {r.case: cache_limit(r.case, size, os.path.join(root, "peers"), notes) for r in results}
            with FaultProxy(endpoint, latency_ms=args.latency_ms) as proxy:
                os.environ.update(s3_env(proxy.url))
                for run, result in ((run, r) for run in range(args.reps) for r in results if not r.error):
                    case = result.case
                    prefix = "packer" if case in PACKER_CASES else peer_format(case)
                    spec = {"url": packed if case == "local" else f"s3://{BUCKET}/{prefix}",
                            "cache": os.path.join(caches, case),
                            "mode": "ranged" if case in SMALL_CACHE else case.split("-")[0],
                            "limit": limits[case],
                            "workers": args.workers, "batch_size": args.batch_size}
                    python = args.peers_python if case in PEER_CASES else sys.executable
                    run_case(result, spec, python, proxy, logs)
                    done = "failed" if result.error else " / ".join(
                        f"{n / t:,.0f}" for t, n, _, _ in result.epochs[-2:])
                    print(f"  run {run + 1}, {case}: {done} img/s", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=10)
    print("\ncommand: " + shlex.join(["python", os.path.relpath(__file__), *sys.argv[1:]]))
    print(f"{count} images ({size / 1e6:.0f} MB), {args.workers} workers, batch {args.batch_size}, "
          f"{args.latency_ms:g} ms per request ({args.server}); images/s, median of {args.reps} run(s)")
    print("\n".join([*table(results), *targets(results, size / 1e6), *notes]))
    for result in results:
        if result.error:
            print(f"\n{result.case} failed:\n{result.error}", file=sys.stderr)
    if not args.keep:
        shutil.rmtree(root if not args.root else served, ignore_errors=True)
        shutil.rmtree(caches, ignore_errors=True)
    return 1 if any(result.error for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
