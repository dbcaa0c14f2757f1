#!/usr/bin/env python3
"""Several nodes reading one S3 dataset under DDP: what each node fetches, and what each rank sees.

Usage::

    python scripts/bench_nodes.py [--images 1200] [--nodes 2] [--ranks 2] [--epochs 2]
        [--caches full small] [--latency-ms 20] [--workers 1] [--batch-size 32] [--root DIR]

A corpus (as ``bench_remote.py`` makes it) is converted to LMDB (``--shard-size`` shards) and
pushed to an S3-API server on 127.0.0.1 (``rclone serve s3``, else moto). Each "node" is a cache
folder and its own ``FaultProxy`` (``scripts/faultproxy.py``, ``--latency-ms`` a request) in
front of the server, so the proxy's counters are exactly what that node fetched. ``--nodes`` x
``--ranks`` processes (spawned) form one gloo process group; the ranks of a node share its cache
folder, as torchrun's local ranks share a node's disk. Each rank opens the dataset's URL through
its node's proxy and reads ``--epochs`` epochs through ``packer.make_loader`` (stored bytes, no
decode: this measures the storage path), which picks the sampler: a uniform
``DistributedSampler`` where the dataset fits the cache (``full``: a bound of twice the dataset
a node), a ``ShardWindowSampler`` split by shard across ranks where it does not (``small``: a
tenth of the dataset a node). Per epoch it reports, for each node, the MB fetched and requests
made (and the ratio of bytes to the dataset's), the slowest rank's seconds and the images/s of
the whole job; and checks that the ranks' samples (identified by the digest of their stored
bytes) are disjoint and together the whole dataset.

The targets (issue 28): each node fetches each byte at most once an epoch (bytes a node at most
1x the dataset, and ~0 in later epochs when it fits), ranks disjoint and complete.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing
import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # faultproxy, bench_remote beside this file
from bench_remote import BUCKET, make_corpus, s3_env, start_server  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402

CACHES = {"full": 2.0, "small": 0.1}  # a node's cache bound, as a fraction of the dataset


def digest_batch(batch: list[tuple[Any, int]]) -> list[str]:
    """A batch of stored samples as the digests of their bytes (the collate of every rank)."""
    return [hashlib.blake2b(bytes(image), digest_size=8).hexdigest() for image, _ in batch]


@dataclass(frozen=True)
class RankSpec:
    """What one rank needs: where the dataset is, its node's proxy and cache, and the job's shape."""

    url: str
    endpoint: str
    cache_dir: str
    cache_limit: int
    rank: int
    world: int
    local_world: int
    master_port: int
    epochs: int
    batch_size: int
    workers: int


def rank_main(spec: RankSpec, barrier: Any, results: Any) -> None:
    """One rank: join the group, read every epoch, wait at the barrier after each (so the parent
    reads the proxies between epochs), report ``(rank, epoch, seconds, digests)``."""
    os.environ.update(s3_env(spec.endpoint))
    os.environ["LOCAL_WORLD_SIZE"] = str(spec.local_world)
    import torch.distributed as dist

    import packer

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec.master_port}", rank=spec.rank,
                            world_size=spec.world)
    try:
        dataset = packer.open_dataset(spec.url, decode=False, cache_dir=spec.cache_dir,
                                      cache_limit=spec.cache_limit)
        loader = packer.make_loader(dataset, spec.batch_size, num_workers=spec.workers, seed=0,
                                    drop_last=False, pin_memory=False, collate_fn=digest_batch)
        for epoch in range(spec.epochs):
            loader.sampler.set_epoch(epoch)
            start = time.perf_counter()
            seen = [digest for batch in loader for digest in batch]
            results.put((spec.rank, epoch, time.perf_counter() - start, seen,
                         type(getattr(loader.sampler, "sampler", loader.sampler)).__name__))
            barrier.wait()  # every rank is done with the epoch: the parent reads the proxies
            barrier.wait()  # the parent has read them
    finally:
        dist.destroy_process_group()


@dataclass
class EpochFigures:
    """One epoch of a case: per node (MB fetched, requests), the slowest rank's seconds, images."""

    node_bytes: list[int]
    node_requests: list[int]
    seconds: float
    images: int
    problems: list[str] = field(default_factory=list)


@dataclass
class CaseResult:
    """A case's epochs, the sampler the ranks used, and the dataset's bytes (the ratios' unit)."""

    case: str
    dataset_bytes: int
    sampler: str = ""
    epochs: list[EpochFigures] = field(default_factory=list)


def rank_problems(seen: dict[int, list[str]], expected: Sequence[str]) -> list[str]:
    """What is wrong with one epoch's samples by rank: a sample on two ranks, one on none, ranks
    of unequal lengths (padding repeats samples within a rank's epoch only where the count needs it)."""
    problems = []
    owners: dict[str, set[int]] = {}
    for rank, digests in seen.items():
        for digest in digests:
            owners.setdefault(digest, set()).add(rank)
    shared = sorted(d for d, ranks in owners.items() if len(ranks) > 1)
    if shared and len(expected) % len(seen) == 0:
        problems.append(f"{len(shared)} sample(s) read by more than one rank")
    missing = sorted(set(expected) - set(owners))
    if missing:
        problems.append(f"{len(missing)} sample(s) read by no rank")
    foreign = sorted(set(owners) - set(expected))
    if foreign:
        problems.append(f"{len(foreign)} sample(s) that are not the dataset's (damaged reads)")
    if len({len(d) for d in seen.values()}) > 1:
        problems.append(f"ranks read unequal epochs: {sorted(len(d) for d in seen.values())}")
    return problems


def free_port() -> int:
    """A port free on 127.0.0.1 a moment ago (the process group's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def node_proxies(upstream: str, nodes: int, latency_ms: float) -> Iterator[list[FaultProxy]]:
    """One started latency proxy per node, stopped on exit."""
    proxies = [FaultProxy(upstream, latency_ms=latency_ms).start() for _ in range(nodes)]
    try:
        yield proxies
    finally:
        for proxy in proxies:
            proxy.stop()


def run_case(case: str, url: str, upstream: str, expected: Sequence[str], dataset_bytes: int, root: str, *,
             nodes: int = 2, ranks: int = 2, epochs: int = 2, latency_ms: float = 20.0, workers: int = 1,
             batch_size: int = 32, timeout: float = 600.0) -> CaseResult:
    """Run one case (``full`` or ``small``, :data:`CACHES`) with fresh node caches under ``root``."""
    context = multiprocessing.get_context("spawn")
    world = nodes * ranks
    barrier, results = context.Barrier(world + 1), context.Queue()
    result = CaseResult(case, dataset_bytes)
    limit = max(1, int(CACHES[case] * dataset_bytes))
    for node in range(nodes):  # every case starts cold
        shutil.rmtree(os.path.join(root, f"{case}-node{node}"), ignore_errors=True)
    with node_proxies(upstream, nodes, latency_ms) as proxies:
        port = free_port()
        processes = []
        for rank in range(world):
            cache = os.path.join(root, f"{case}-node{rank // ranks}")
            spec = RankSpec(url, proxies[rank // ranks].url, cache, limit, rank, world, ranks, port, epochs,
                            batch_size, workers)
            processes.append(context.Process(target=rank_main, args=(spec, barrier, results)))
        for process in processes:
            process.start()
        try:
            before = [(p.bytes_out, p.requests) for p in proxies]
            for _ in range(epochs):
                barrier.wait(timeout=timeout)
                after = [(p.bytes_out, p.requests) for p in proxies]
                reports = [results.get(timeout=60) for _ in range(world)]
                barrier.wait(timeout=60)
                seen = {rank: digests for rank, _, _, digests, _ in reports}
                result.sampler = reports[0][4]
                result.epochs.append(EpochFigures(
                    [a[0] - b[0] for a, b in zip(after, before, strict=True)],
                    [a[1] - b[1] for a, b in zip(after, before, strict=True)],
                    max(seconds for _, _, seconds, _, _ in reports), sum(len(d) for d in seen.values()),
                    rank_problems(seen, expected)))
                before = after
        finally:
            for process in processes:
                process.join(timeout=60)
                if process.is_alive():
                    process.kill()
    failed = [p.exitcode for p in processes if p.exitcode]
    if failed:
        raise RuntimeError(f"{len(failed)} rank(s) of case {case!r} failed (exit codes {failed})")
    return result


def dataset_digests(packed: str) -> tuple[list[str], int]:
    """Every sample's digest (as :func:`digest_batch` makes it) and the dataset's stored bytes."""
    import packer

    dataset = packer.open_dataset(packed, decode=False)
    return ([hashlib.blake2b(bytes(dataset[i][0]), digest_size=8).hexdigest() for i in range(len(dataset))],
            sum(shard.num_bytes for shard in dataset.manifest.shards))


def table(results: list[CaseResult], nodes: int) -> str:
    """The Markdown table of every case and epoch."""
    heads = ["case", "sampler", "epoch", *(f"node {n}: MB (x dataset) / requests" for n in range(nodes)),
             "slowest rank s", "images/s", "ranks"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for result in results:
        for number, epoch in enumerate(result.epochs, 1):
            cells = [f"{b / 1e6:.2f} ({b / result.dataset_bytes:.2f}x) / {r}"
                     for b, r in zip(epoch.node_bytes, epoch.node_requests, strict=True)]
            check = "disjoint, complete" if not epoch.problems else "; ".join(epoch.problems)
            lines.append("| " + " | ".join([result.case, result.sampler, str(number), *cells,
                                            f"{epoch.seconds:.2f}", f"{epoch.images / epoch.seconds:.0f}",
                                            check]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1200)
    parser.add_argument("--shard-size", default="4MB")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=2, help="ranks a node")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--caches", nargs="+", choices=sorted(CACHES), default=["full", "small"])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers a rank")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--server", choices=["rclone", "moto"], default=None,
                        help="default: rclone where its binary is found, else moto")
    parser.add_argument("--root", default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="packer's demo tree instead of photo-like JPEGs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    import packer

    root = args.root or tempfile.mkdtemp(prefix="bench-nodes-")
    os.makedirs(root, exist_ok=True)
    src = os.path.join(root, f"src-{args.images}{'-demo' if args.quick else ''}")
    if not os.path.isdir(src):
        make_corpus(src, args.images, quick=args.quick)
    packed = os.path.join(root, "packed")
    packer.convert(src, packed, to="lmdb", shard_size=args.shard_size, overwrite=True)
    expected, size = dataset_digests(packed)
    served = os.path.join(root, "served")
    os.makedirs(os.path.join(served, BUCKET), exist_ok=True)
    kind = args.server or ("rclone" if shutil.which("rclone") else "moto")
    with open(os.path.join(root, "server.log"), "wb") as log:
        server, endpoint = start_server(kind, served, log)
        try:
            os.environ.update(s3_env(endpoint))
            if kind == "moto":
                import boto3

                boto3.client("s3").create_bucket(Bucket=BUCKET)
            from packer.tools.publish import push_dataset

            url = f"s3://{BUCKET}/packer"
            push_dataset(packed, url)
            results = [run_case(case, url, endpoint, expected, size, root, nodes=args.nodes, ranks=args.ranks,
                                epochs=args.epochs, latency_ms=args.latency_ms, workers=args.workers,
                                batch_size=args.batch_size) for case in args.caches]
        finally:
            server.terminate()
            server.wait(timeout=30)
    shards = len(packer.open_dataset(packed).manifest.shards)
    if not args.root:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"samples": len(expected), "dataset_bytes": size, "shards": shards,
                          "nodes": args.nodes, "ranks": args.ranks, "cases": [asdict(r) for r in results]}))
    else:
        print(f"command: python scripts/bench_nodes.py {shlex.join(sys.argv[1:] if argv is None else argv)}")
        print(f"{len(expected)} samples, {size / 1e6:.1f} MB in {shards} shards; {args.nodes} nodes x "
              f"{args.ranks} ranks, {args.workers} worker(s) a rank, {args.latency_ms:g} ms a request, "
              f"server {kind}")
        print(table(results, args.nodes))
        print("targets: each node at most 1x the dataset's bytes an epoch (and ~0 after the first when "
              "it fits); ranks disjoint and complete")
    return 1 if any(e.problems for r in results for e in r.epochs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
