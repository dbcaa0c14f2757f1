#!/usr/bin/env python3
"""Time conversions with object storage at either end against the same conversion on local disk.

    python scripts/bench_convert_url.py [--images 1200] [--shard-size 8MB] [--latency-ms 20]
                                        [--workers 2] [--check none] [--repeats 2] [--quick]
                                        [--server rclone|moto] [--root DIR] [--json]

Makes a photo-like ImageFolder tree (``--quick``: packer's demo tree), tars it, and serves a
folder holding the tar through an S3-API server on 127.0.0.1 (``rclone serve s3``, else moto),
behind a fault proxy adding ``--latency-ms`` to every request (one round trip to a bucket). Then,
in one run, with the same options, the four ways of converting the tar, repetitions interleaved:

- ``local -> local``: the tar on disk into a folder (the baseline);
- ``url -> local``: the tar read from ``s3://`` by byte ranges (issue 28 item 2);
- ``local -> url``: shards staged locally and uploaded as they finish, ``index.json`` last;
- ``url -> url``: both.

Printed per case: the median seconds, images/s, its ratio to the baseline, and what the proxy
served (the bytes fetched, against the tar's size: about 1x means each byte once, nothing
downloaded whole twice). Every case's shards and sample index are checked equal to the
baseline's. Ratios, not seconds, are the figures to compare across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_remote import BUCKET, make_corpus, s3_env, start_server  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402

CASES = ("local -> local", "url -> local", "local -> url", "url -> url")


@dataclass
class CaseResult:
    """One way of converting, over every repetition."""

    case: str
    seconds: list[float]
    fetched_bytes: int  # what the proxy served in the last repetition
    requests: int
    same_shards: bool

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def data_files(store_url: str) -> dict[str, bytes]:
    """The shard and sample-index files of the dataset at ``store_url``, by key."""
    import packer

    store = packer.open_store(store_url)
    return {key: store.read(key) for key in sorted(store.list())
            if key.startswith(("shard-", "samples/"))}


def run_once(case: str, tar: str, src_url: str, root: str, run: int, args: argparse.Namespace,
             proxy: FaultProxy) -> tuple[float, str]:
    """Convert once the way ``case`` says; (seconds, where the dataset went)."""
    import packer

    src = src_url if case.startswith("url") else tar
    dst = (f"s3://{BUCKET}/out-{case.split()[0]}-{run}" if case.endswith("url")
           else os.path.join(root, f"out-{case.split()[0]}-{run}"))
    proxy.requests = proxy.bytes_out = 0
    started = time.perf_counter()
    packer.convert(src, dst, to="lmdb", shard_size=args.shard_size, check=args.check, workers=args.workers,
                   overwrite=True,
                   **({"staging": os.path.join(root, f"staging-{run}")} if dst.startswith("s3://") else {}))
    return time.perf_counter() - started, dst


def measure(tar: str, root: str, args: argparse.Namespace, proxy: FaultProxy) -> list[CaseResult]:
    """Every case ``--repeats`` times, interleaved; the first run's output is the reference."""
    results = {case: CaseResult(case, [], 0, 0, True) for case in CASES}
    reference: dict[str, bytes] | None = None
    src_url = f"s3://{BUCKET}/in/{os.path.basename(tar)}"
    for run in range(args.repeats):
        for case in CASES:
            seconds, dst = run_once(case, tar, src_url, root, run, args, proxy)
            result = results[case]
            result.seconds.append(seconds)
            result.fetched_bytes, result.requests = proxy.bytes_out, proxy.requests
            files = data_files(dst)
            reference = files if reference is None else reference
            result.same_shards = result.same_shards and files == reference
    return list(results.values())


def table(results: list[CaseResult], images: int, tar_bytes: int) -> str:
    base = results[0].median
    lines = ["| case | seconds (median) | images/s | vs local -> local | fetched / tar | requests | "
             "same shards |", "|---|---|---|---|---|---|---|"]
    for r in results:
        same = "yes" if r.same_shards else "NO"
        lines.append(f"| {r.case} | {r.median:.2f} | {images / r.median:,.0f} | {base / r.median:.2f}x | "
                     f"{r.fetched_bytes / tar_bytes:.2f}x | {r.requests:,} | {same} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1200)
    parser.add_argument("--shard-size", default="8MB")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--check", choices=["full", "header", "none"], default="none")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--server", choices=["rclone", "moto"], default=None,
                        help="default: rclone where its binary is found, else moto")
    parser.add_argument("--root", default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="packer's demo tree instead of photo-like JPEGs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    root = args.root or tempfile.mkdtemp(prefix="bench-convert-url-")
    served = os.path.join(root, "served")
    tar = os.path.join(served, BUCKET, "in", "train.tar")
    os.makedirs(os.path.dirname(tar), exist_ok=True)
    tree = os.path.join(root, f"tree-{args.images}{'-demo' if args.quick else ''}")
    if not os.path.isdir(tree):
        make_corpus(tree, args.images, quick=args.quick)
    with tarfile.open(tar, "w") as archive:
        archive.add(tree, arcname="train")
    images = sum(1 for _, _, names in os.walk(tree) for _ in names)
    kind = args.server or ("rclone" if shutil.which("rclone") else "moto")
    with open(os.path.join(root, "server.log"), "wb") as log:
        server, endpoint = start_server(kind, served, log)
        try:
            with FaultProxy(endpoint, latency_ms=args.latency_ms) as proxy:
                os.environ.update(s3_env(proxy.url))
                if kind == "moto":
                    import boto3

                    boto3.client("s3").create_bucket(Bucket=BUCKET)
                    boto3.client("s3").upload_file(tar, BUCKET, "in/train.tar")
                results = measure(tar, root, args, proxy)
        finally:
            server.terminate()
            server.wait(timeout=30)
    tar_bytes = os.path.getsize(tar)
    if not args.root:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"images": images, "tar_bytes": tar_bytes, "latency_ms": args.latency_ms,
                          "cases": [{**asdict(r), "median": r.median} for r in results]}))
    else:
        given = shlex.join(sys.argv[1:] if argv is None else argv)
        print(f"command: python scripts/bench_convert_url.py {given}")
        print(f"{images} images, a {tar_bytes / 1e6:.1f} MB tar; {args.latency_ms:g} ms a request, "
              f"{args.workers} worker(s), --check {args.check}, server {kind}")
        print(table(results, images, tar_bytes))
    return 0 if all(r.same_shards for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
