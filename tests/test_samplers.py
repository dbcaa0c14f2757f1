"""ShardAwareSampler: coverage, equal and disjoint rank slices, block/window structure, resume.

The invariants are checked with Hypothesis on explicit shard sizes (the sampler needs nothing
else); the dataset tests check that a packed dataset's manifest gives the shard ranges and that
a DataLoader driven by the sampler reads the whole dataset with batches of many classes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from imagetools import png_bytes, write_tree
from torch.utils.data import DataLoader, Subset

import packer
from packer.format.backends import Backend
from packer.read.samplers import ShardAwareSampler

sizes_st = st.lists(st.integers(0, 90), min_size=1, max_size=12)
config_st = st.fixed_dictionaries({
    "block_size": st.integers(1, 20), "window": st.integers(1, 6), "seed": st.integers(0, 2**31),
})


def rank_orders(sizes: list[int], world: int, epoch: int = 0, **kwargs: object) -> list[list[int]]:
    out = []
    for rank in range(world):
        sampler = ShardAwareSampler(sizes, world, rank, **kwargs)  # type: ignore[arg-type]
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def block_of(sizes: list[int], block_size: int) -> list[tuple[int, int]]:
    """(shard, block within shard) of every sample, from the definition (not the sampler's code)."""
    out = []
    for shard, size in enumerate(sizes):
        out.extend((shard, local // block_size) for local in range(size))
    return out


# ---------------------------------------------------------------- coverage and rank split


@settings(max_examples=150, deadline=None)
@given(sizes=sizes_st, world=st.integers(1, 5), epoch=st.integers(0, 50), drop_last=st.booleans(),
       config=config_st)
def test_ranks_split_the_epoch_evenly_and_cover_it(sizes: list[int], world: int, epoch: int,
                                                   drop_last: bool, config: dict[str, int]) -> None:
    n = sum(sizes)
    orders = rank_orders(sizes, world, epoch, drop_last=drop_last, **config)
    per_rank = n // world if drop_last else -(-n // world)
    assert [len(o) for o in orders] == [per_rank] * world
    assert all(len(ShardAwareSampler(sizes, world, r, drop_last=drop_last)) == per_rank
               for r in range(world))
    together = [i for o in orders for i in o]
    counts = Counter(together)
    assert set(counts) <= set(range(n))
    if drop_last:
        assert max(counts.values(), default=1) == 1  # no repeats, only the tail is dropped
        assert len(counts) == n - n % world
    else:
        assert set(counts) == set(range(n))  # every sample, padding only repeats
        assert len(together) - n == per_rank * world - n
    if n % world == 0:
        assert len(counts) == len(together)  # disjoint across ranks
    # Ranks hold contiguous slices of one epoch order: concatenated, they are the 1-rank order,
    # cut short (drop_last) or padded by repeating it from its start.
    (single,) = rank_orders(sizes, 1, epoch, **config)
    m = min(n, len(together))
    assert together[:m] == single[:m]
    assert together[n:] == (single * world)[: max(0, len(together) - n)]


def assert_windows(order: list[int], blocks: list[tuple[int, int]], window: int) -> None:
    """``order`` is a run of windows, each the samples of ``window`` whole blocks (the last: fewer)."""
    block_len = Counter(blocks)
    touched: set[tuple[int, int]] = set()
    seen = 0
    windows = []
    for index in order:
        touched.add(blocks[index])
        seen += 1
        assert len(touched) <= window
        if seen == sum(block_len[b] for b in touched) and len(touched) == window:
            windows.append(touched)
            touched, seen = set(), 0
    assert seen == sum(block_len[b] for b in touched)  # the last window is whole blocks too
    if touched:
        windows.append(touched)
    assert sum(len(w) for w in windows) == len(block_len)  # every block in exactly one window
    assert all(len(w) == window for w in windows[:-1])


@settings(max_examples=150, deadline=None)
@given(sizes=sizes_st, epoch=st.integers(0, 50), config=config_st)
def test_windows_are_whole_blocks_inside_shards(sizes: list[int], epoch: int,
                                                config: dict[str, int]) -> None:
    (order,) = rank_orders(sizes, 1, epoch, **config)
    assert_windows(order, block_of(sizes, config["block_size"]), config["window"])


@settings(max_examples=50, deadline=None)
@given(sizes=sizes_st, world=st.integers(1, 4), config=config_st)
def test_order_is_a_function_of_seed_and_epoch(sizes: list[int], world: int,
                                               config: dict[str, int]) -> None:
    assert rank_orders(sizes, world, 3, **config) == rank_orders(sizes, world, 3, **config)
    if sum(sizes) >= 40:
        assert rank_orders(sizes, world, 3, **config) != rank_orders(sizes, world, 4, **config)


def test_order_is_pinned() -> None:
    """Same seed and epoch give the same order on every machine (torch's generator, not `random`)."""
    sampler = ShardAwareSampler([10, 0, 7, 3], 3, 1, block_size=4, window=2, seed=0)
    assert list(sampler) == [0, 12, 3, 2, 1, 11, 14]


def test_shuffle_false_keeps_dataset_order_in_contiguous_slices() -> None:
    assert rank_orders([5, 6], 3, shuffle=False) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 0]]
    assert rank_orders([5, 6], 3, 7, shuffle=False, drop_last=True) == [[0, 1, 2], [3, 4, 5],
                                                                        [6, 7, 8]]


def test_more_ranks_than_samples_pads_every_rank() -> None:
    assert rank_orders([2], 5, shuffle=False) == [[0], [1], [0], [1], [0]]
    assert rank_orders([2], 5, drop_last=True) == [[]] * 5
    assert rank_orders([0, 0], 2) == [[], []]


# ---------------------------------------------------------------- arguments


def test_rank_and_world_come_from_explicit_arguments() -> None:
    sampler = ShardAwareSampler([100], num_replicas=4, rank=3)
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (4, 3, 25)
    alone = ShardAwareSampler([100])  # torch.distributed is not initialised here
    assert (alone.num_replicas, alone.rank, len(alone)) == (1, 0, 100)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_replicas": 0}, "num_replicas must be at least 1"),
    ({"num_replicas": 2, "rank": 2}, "rank 2 is out of range"),
    ({"rank": -1}, "rank -1 is out of range"),
    ({"block_size": 0}, "block_size must be at least 1"),
    ({"window": 0}, "window must be at least 1"),
])
def test_bad_arguments_raise(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShardAwareSampler([10], **kwargs)  # type: ignore[arg-type]


def test_bad_sources_raise() -> None:
    with pytest.raises(ValueError, match="shard size 1 is -3"):
        ShardAwareSampler([4, -3])
    with pytest.raises(TypeError, match="use DistributedSampler"):
        ShardAwareSampler(Subset(range(10), [1, 2]))  # type: ignore[arg-type]


# ---------------------------------------------------------------- resume


@settings(max_examples=100, deadline=None)
@given(sizes=sizes_st, world=st.integers(1, 4), epoch=st.integers(0, 9), data=st.data(),
       config=config_st)
def test_resume_mid_epoch_yields_exactly_the_rest(sizes: list[int], world: int, epoch: int,
                                                  data: st.DataObject, config: dict[str, int]) -> None:
    rank = data.draw(st.integers(0, world - 1))
    sampler = ShardAwareSampler(sizes, world, rank, **config)  # type: ignore[arg-type]
    sampler.set_epoch(epoch)
    full = list(sampler)
    k = data.draw(st.integers(0, len(full)))
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(k)]
    state = sampler.state_dict()
    assert state["yielded"] == k and all(type(v) is int for v in state.values())
    assert sampler.state_dict(consumed=k) == state

    fresh = ShardAwareSampler(sizes, world, rank, seed=12345, block_size=config["block_size"],
                              window=config["window"])
    fresh.load_state_dict(dict(state))
    fresh.set_epoch(epoch)  # the training loop's usual call keeps the resume
    assert head + list(fresh) == full
    assert fresh.state_dict()["yielded"] == len(full)
    assert list(fresh) == full  # the resume applies once; the next pass is the whole epoch
    fresh.load_state_dict(state)
    fresh.set_epoch(epoch + 1)  # another epoch starts from its beginning
    assert list(fresh) == rank_orders(sizes, world, epoch + 1, **config)[rank]


def test_state_of_a_plain_dataloader_counts_consumed_samples() -> None:
    sampler = ShardAwareSampler([50, 50], block_size=8, window=3)
    sampler.set_epoch(2)
    loader = DataLoader(range(100), batch_size=10, sampler=sampler, num_workers=2, prefetch_factor=2)
    batches = []
    for batch in loader:
        batches.append(batch.tolist())
        if len(batches) == 3:
            break
    assert sampler.state_dict()["yielded"] > 30  # the workers ran ahead
    state = sampler.state_dict(consumed=30)
    resumed = ShardAwareSampler([50, 50], block_size=8, window=3)
    resumed.load_state_dict(state)
    rest = [i for b in DataLoader(range(100), batch_size=10, sampler=resumed) for i in b.tolist()]
    assert sum(batches, []) + rest == rank_orders([50, 50], 1, 2, block_size=8, window=3)[0]
    with pytest.raises(ValueError, match="consumed=101 is out of range"):
        sampler.state_dict(consumed=101)


@pytest.mark.parametrize("change", [
    {"num_replicas": 2}, {"sizes": [30, 31]}, {"sizes": [20, 40]}, {"block_size": 5}, {"window": 2},
    {"shuffle": False}, {"drop_last": True},
])
def test_mismatched_state_raises(change: dict[str, object]) -> None:
    saved = ShardAwareSampler([30, 30]).state_dict()
    key = {"sizes": "num_samples" if sum(change.get("sizes", [])) != 60 else "shard_layout"}.get(
        next(iter(change)), next(iter(change)))
    args = dict(change)
    other = ShardAwareSampler(args.pop("sizes", [30, 30]), **args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"state has {key}="):
        other.load_state_dict(saved)


def test_malformed_state_raises() -> None:
    sampler = ShardAwareSampler([30])
    state = sampler.state_dict()
    with pytest.raises(ValueError, match="missing yielded"):
        sampler.load_state_dict({k: v for k, v in state.items() if k != "yielded"})
    with pytest.raises(ValueError, match="non-integer epoch"):
        sampler.load_state_dict({**state, "epoch": "3"})
    with pytest.raises(ValueError, match="yielded=31 is out of range"):
        sampler.load_state_dict({**state, "yielded": 31})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_through_the_sampler(num_workers: int) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader(sampler: ShardAwareSampler) -> DataLoader[int]:
        return stateful.StatefulDataLoader(range(90), batch_size=7, sampler=sampler,
                                           num_workers=num_workers)

    sampler = ShardAwareSampler([40, 50], block_size=6, window=3, seed=5)
    sampler.set_epoch(1)
    first = loader(sampler)
    seen, state = [], None
    for batch in first:
        seen.extend(batch.tolist())
        if len(seen) == 28:
            state = first.state_dict()
            break
    again = ShardAwareSampler([40, 50], block_size=6, window=3)
    second = loader(again)
    second.load_state_dict(state)
    rest = [i for batch in second for i in batch.tolist()]
    assert seen + rest == rank_orders([40, 50], 1, 1, block_size=6, window=3, seed=5)[0]


# ---------------------------------------------------------------- on a packed dataset

CLASSES = 8
PER_CLASS = 16


@pytest.fixture
def sharded(tmp_path: Path, backend: Backend) -> Path:
    """8 classes x 16 tiny PNGs, packed into several shards."""
    spec = {f"c{c}/{i:02d}.png": png_bytes(8, 8, c * PER_CLASS + i)
            for c in range(CLASSES) for i in range(PER_CLASS)}
    src = write_tree(tmp_path / "src", spec)
    dst = tmp_path / "dst"
    packer.convert(src, dst, to=backend.name, shard_size="4KB")
    return dst


def _targets(batch: list[tuple[bytes, int]]) -> list[int]:
    return [target for _, target in batch]


def test_reads_a_packed_dataset_by_its_shards(sharded: Path) -> None:
    ds = packer.open_dataset(sharded, decode=False)
    shards = ds.manifest.shards
    assert len(shards) > 2
    sizes = [s.num_samples for s in shards]
    assert [s.first for s in shards] == [sum(sizes[:i]) for i in range(len(sizes))]
    sampler = ShardAwareSampler(ds, block_size=5, window=4)
    assert sampler.shard_sizes == tuple(sizes)
    order = list(sampler)
    assert sorted(order) == list(range(len(ds)))
    assert_windows(order, block_of(sizes, 5), 4)

    loader = DataLoader(ds, batch_size=16, sampler=sampler, collate_fn=_targets, num_workers=0)
    targets = [t for batch in loader for t in batch]
    assert Counter(targets) == Counter(np.asarray(ds.targets).tolist())


def test_batches_mix_many_classes(sharded: Path) -> None:
    """ImageFolder order is class order; blocks from the whole dataset still give mixed batches."""
    ds = packer.open_dataset(sharded, decode=False)
    targets = np.asarray(ds.targets)
    sampler = ShardAwareSampler(ds, block_size=4, window=8)
    per_batch = []
    for epoch in range(5):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        per_batch += [len(set(targets[b.numpy()].tolist())) for b in order.split(16)]
    assert np.mean(per_batch) >= 5  # of 8 classes; reading shard by shard would give 1-2
    in_order = [len(set(targets[i: i + 16].tolist())) for i in range(0, len(targets), 16)]
    assert max(in_order) <= 2
