"""DataLoader workers under fork, spawn and forkserver read exactly what the main process reads.

Each case touches ``ds[0]`` in the parent first (so an open handle exists when workers start)
and compares exact multisets (``Counter``) of (digest, target), never ``zip``.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
from imagetools import (
    PixelDigest,
    ToTensor,
    digest_collate,
    pid_digest_collate,
    png_bytes,
    sha,
    tensor_collate,
    write_tree,
)
from torch.utils.data import DataLoader, DistributedSampler

from packer import convert, open_dataset
from packer.format.backends import Backend, backend_names

NUM_SAMPLES = 40
START_METHODS = ["fork", "spawn", "forkserver"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def packed_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small dataset (40 distinct 8x8 PNGs in 3 classes) per backend, converted once."""
    root = tmp_path_factory.mktemp("workers")
    spec = {f"class{i % 3}/img{i:03d}.png": png_bytes(8, 8, 1000 + i) for i in range(NUM_SAMPLES)}
    src = write_tree(root / "src", spec)
    return {name: Path(convert(src, root / name, to=name, shard_size=600).dst)
            for name in backend_names()}


def sequential(ds: object) -> Counter[tuple[str, int]]:
    items = [ds[i] for i in range(len(ds))]  # type: ignore[index,arg-type]
    expected = Counter(digest_collate(items))
    assert len(expected) == NUM_SAMPLES  # every sample distinct: the multiset is exact
    return expected


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", START_METHODS)
def test_workers_read_every_sample_once_per_epoch(packed_dirs: dict[str, Path], backend: Backend,
                                                  method: str) -> None:
    ds = open_dataset(packed_dirs[backend.name], transform=PixelDigest())
    assert len(ds.manifest.shards) > 1  # batches cross shard boundaries
    ds[0]  # the parent holds an open handle when the workers start
    expected = sequential(ds)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, persistent_workers=True,
                        multiprocessing_context=multiprocessing.get_context(method),
                        collate_fn=pid_digest_collate)
    pids_per_epoch = []
    for _ in range(2):
        got: Counter[tuple[str, int]] = Counter()
        pids = set()
        for pid, batch in loader:
            pids.add(pid)
            got.update(batch)
        assert got == expected
        pids_per_epoch.append(pids)
    assert os.getpid() not in pids_per_epoch[0]
    assert len(pids_per_epoch[0]) == 2
    assert pids_per_epoch[1] == pids_per_epoch[0]  # persistent workers were reused
    assert ds[0] == ds.__getitems__([0])[0]  # and the parent still reads
    ds.close()


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")
def test_pin_memory(packed_dirs: dict[str, Path], backend: Backend) -> None:
    ds = open_dataset(packed_dirs[backend.name], transform=ToTensor())
    ds[0]
    expected = Counter((sha(ds[i][0].numpy().tobytes()), ds[i][1]) for i in range(len(ds)))
    assert len(expected) == NUM_SAMPLES
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, pin_memory=True,
                        multiprocessing_context=multiprocessing.get_context("fork"),
                        collate_fn=tensor_collate)
    got: Counter[tuple[str, int]] = Counter()
    for images, targets in loader:
        assert isinstance(images, torch.Tensor) and images.shape[1:] == (3, 8, 8)
        got.update((sha(image.numpy().tobytes()), int(t)) for image, t in zip(images, targets,
                                                                               strict=True))
    assert got == expected


@pytest.mark.timeout(120)
def test_distributed_sampler_ranks_cover_the_dataset(packed_dirs: dict[str, Path],
                                                     backend: Backend) -> None:
    ds = open_dataset(packed_dirs[backend.name], decode=False)
    ds[0]
    expected = sequential(ds)
    per_rank = []
    for rank in (0, 1):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=3)
        sampler.set_epoch(1)
        loader = DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2,
                            multiprocessing_context=multiprocessing.get_context("fork"),
                            collate_fn=digest_collate)
        per_rank.append(Counter(item for batch in loader for item in batch))
    assert sum(per_rank[0].values()) == sum(per_rank[1].values()) == NUM_SAMPLES // 2
    assert not per_rank[0] & per_rank[1]  # disjoint
    assert per_rank[0] + per_rank[1] == expected  # and together exactly the dataset
