"""Multi-node reading: two gloo ranks train a tiny DDP model from a packed dataset.

Each rank reads through a ``DataLoader`` with a worker, once with ``DistributedSampler`` and
once with :class:`packer.read.samplers.ShardAwareSampler`, and writes the sample indices it saw per
epoch; the test checks that the ranks' epochs are disjoint, complete, of equal length and
different from epoch to epoch, and that a fresh pair of processes resuming from the sampler's
``state_dict`` (taken after a few batches) reads exactly the rest of that epoch.

One backend (LMDB) is enough here: the samplers see only indices and shard sizes, never the
storage; the backend contract suite covers reading from workers for every backend.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from imagetools import png_bytes, write_tree
from PIL import Image
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import packer
from packer.read.datasets import PackedImageDataset
from packer.read.samplers import ShardAwareSampler

WORLD = 2
CLASSES, PER_CLASS = 6, 10  # 60 samples: 30 per rank, no padding, so ranks must be disjoint
BATCH = 5
EPOCHS = 2
RESUME_EPOCH, RESUME_AFTER = 1, 2  # resume epoch 1 after 2 batches
KINDS = ("distributed", "shard_aware")
SHARD_AWARE = {"block_size": 4, "window": 3}


class Crop8:
    """Transform: the top-left 8x8 RGB pixels as a flat float vector (the tiny model's input)."""

    def __call__(self, image: Image.Image) -> torch.Tensor:
        pixels = np.asarray(image, dtype=np.float32)[:8, :8] / 255.0
        return torch.from_numpy(pixels.copy()).flatten()


class WithIndex(Dataset[tuple[torch.Tensor, int, int]]):
    """A packed dataset's samples as ``(input, index, target)``, so coverage can be checked."""

    def __init__(self, packed: PackedImageDataset) -> None:
        self.packed = packed

    def __len__(self) -> int:
        return len(self.packed)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        image, target = self.packed[index]
        return image, index, target


def _sampler(kind: str, data: WithIndex) -> DistributedSampler[Any] | ShardAwareSampler:
    # Both capture rank and world size from the initialised process group, in the main process.
    if kind == "distributed":
        return DistributedSampler(data, seed=7)
    return ShardAwareSampler(data.packed, seed=7, **SHARD_AWARE)


def _loader(data: WithIndex, sampler: Any) -> DataLoader[Any]:
    # The sampler runs in this process, so set_epoch reaches it even with persistent workers.
    # Workers fork: what torchrun-launched ranks do by default on Linux (a rank started by
    # mp.spawn would otherwise spawn its workers too, seconds each on 2 cores).
    return DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=1,
                      persistent_workers=True, multiprocessing_context="fork")


def _run_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader[Any],
               on_batch: Any = None) -> list[int]:
    seen: list[int] = []
    for inputs, indices, targets in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()  # DDP all-reduces here: a rank with fewer batches would hang the others
        optimizer.step()
        seen.extend(indices.tolist())
        if on_batch is not None:
            on_batch(len(seen))
    return seen


def rank_main(rank: int, root: str, out: str, phase: str) -> None:
    """One DDP rank (module level so that ``spawn`` can import it)."""
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous-{phase}", rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=60))
    try:
        data = WithIndex(packer.open_dataset(root, transform=Crop8()))
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(3 * 8 * 8, CLASSES))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        record: dict[str, Any] = {}
        state_path = os.path.join(out, f"state-{rank}.json")
        if phase == "train":
            for kind in KINDS:
                sampler = _sampler(kind, data)
                loader = _loader(data, sampler)
                for epoch in range(EPOCHS):
                    sampler.set_epoch(epoch)

                    def checkpoint(consumed: int, epoch: int = epoch, kind: str = kind,
                                   sampler: Any = sampler) -> None:
                        if kind == "shard_aware" and epoch == RESUME_EPOCH and \
                                consumed == RESUME_AFTER * BATCH:
                            with open(state_path, "w") as handle:  # as a training checkpoint would
                                json.dump(sampler.state_dict(consumed=consumed), handle)

                    record[f"{kind}/{epoch}"] = _run_epoch(model, optimizer, loader, checkpoint)
        else:  # a fresh process resumes the interrupted epoch from the checkpoint
            with open(state_path) as handle:
                state = json.load(handle)
            sampler = ShardAwareSampler(data.packed, **SHARD_AWARE)  # seed and epoch: from the state
            sampler.load_state_dict(state)
            sampler.set_epoch(state["epoch"])
            record["resumed"] = _run_epoch(model, optimizer, _loader(data, sampler))
        record["weights"] = [p.detach().double().sum().item() for p in model.parameters()]
        with open(os.path.join(out, f"{phase}-{rank}.json"), "w") as handle:
            json.dump(record, handle)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ddp_ranks_read_disjoint_complete_equal_epochs_and_resume(tmp_path: Path) -> None:
    spec = {f"c{c}/{i:02d}.png": png_bytes(12, 10, c * PER_CLASS + i)
            for c in range(CLASSES) for i in range(PER_CLASS)}
    src = write_tree(tmp_path / "src", spec)
    root = tmp_path / "dst"
    packer.convert(src, root, to="lmdb", shard_size="2KB")
    ds = packer.open_dataset(root)
    n = len(ds)
    assert n == CLASSES * PER_CLASS and len(ds.manifest.shards) > 2
    ds[0]  # touch the dataset in the parent first (DESIGN: worker safety)

    for phase in ("train", "resume"):
        mp.spawn(rank_main, args=(str(root), str(tmp_path), phase), nprocs=WORLD, join=True)
    train = [json.loads((tmp_path / f"train-{r}.json").read_text()) for r in range(WORLD)]
    resumed = [json.loads((tmp_path / f"resume-{r}.json").read_text()) for r in range(WORLD)]

    for kind in KINDS:
        for epoch in range(EPOCHS):
            r0, r1 = (record[f"{kind}/{epoch}"] for record in train)
            assert len(r0) == len(r1) == n // WORLD, (kind, epoch)
            assert not set(r0) & set(r1), (kind, epoch)
            assert sorted(r0 + r1) == list(range(n)), (kind, epoch)
        for record in train:
            assert record[f"{kind}/0"] != record[f"{kind}/1"], kind
    for epoch in range(EPOCHS):  # ShardAwareSampler: ranks hold contiguous slices of one order
        alone = ShardAwareSampler(ds, 1, 0, seed=7, **SHARD_AWARE)
        alone.set_epoch(epoch)
        assert train[0][f"shard_aware/{epoch}"] + train[1][f"shard_aware/{epoch}"] == list(alone)
    for before, after in zip(train, resumed, strict=True):
        assert after["resumed"] == before[f"shard_aware/{RESUME_EPOCH}"][RESUME_AFTER * BATCH:]
    # DDP kept the replicas identical, so both ranks ran the same number of steps together.
    assert train[0]["weights"] == train[1]["weights"]
    assert resumed[0]["weights"] == resumed[1]["weights"]
