"""ShardWindowSampler: shards shuffled, then samples shuffled within windows of shards that fit a
byte bound; every sample once an epoch, equal rank slices, resumable; chosen by make_loader for
training on a URL dataset larger than its cache, where each record is then fetched about once
an epoch (the proxy of a real S3 server counts the requests)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import packer
from packer.read.readahead import ReadAheadSampler
from packer.read.samplers import SeededRandomSampler
from packer.testing.trees import image_tree
from packer.tools.publish import push_dataset

#: Twelve shards of uneven counts and bytes.
SIZES = [5, 8, 3, 7, 6, 4, 9, 2, 5, 6, 3, 4]
BYTES = [100 * n for n in SIZES]


def _shard_of(index: int) -> int:
    first = 0
    for shard, size in enumerate(SIZES):
        if index < first + size:
            return shard
        first += size
    raise AssertionError(index)


def test_every_sample_once_an_epoch_in_windows_that_fit() -> None:
    sampler = packer.ShardWindowSampler(SIZES, window_bytes=1500, shard_bytes=BYTES, seed=3)
    order = list(sampler)
    assert sorted(order) == list(range(sum(SIZES))) and len(sampler) == sum(SIZES)
    # The order walks the windows one after another: each run of samples of one window holds
    # every sample of its shards, and the shards of a window hold at most 1500 bytes.
    shards = [_shard_of(i) for i in order]
    position = 0
    generator = torch.Generator()
    generator.manual_seed(3)
    windows = sampler.windows(torch.randperm(len(SIZES), generator=generator).tolist())
    assert sorted(s for w in windows for s in w) == list(range(len(SIZES)))
    for window in windows:
        count = sum(SIZES[s] for s in window)
        assert set(shards[position:position + count]) == set(window)
        assert sum(BYTES[s] for s in window) <= 1500 or len(window) == 1
        position += count
    assert len(windows) > 3  # the bound cuts the dataset into several windows


def test_a_shard_bigger_than_a_window_is_read_in_runs_that_fit() -> None:
    # A node whose cache is smaller than one shard: each shard is cut into equal runs of
    # consecutive samples no bigger than the window, and the runs are shuffled like shards.
    sampler = packer.ShardWindowSampler(SIZES, window_bytes=250, shard_bytes=BYTES, seed=4)
    assert [p[:2] for p in sampler.pieces[:7]] == [(0, 1), (1, 3), (3, 5),  # 500 B in 3 runs,
                                                  (5, 7), (7, 9), (9, 11), (11, 13)]  # 800 B in 4
    assert all(size <= 250 for _, _, size in sampler.pieces)
    assert sum(stop - start for start, stop, _ in sampler.pieces) == sum(SIZES)
    order = list(sampler)
    assert sorted(order) == list(range(sum(SIZES)))
    windows = sampler.windows(range(len(sampler.pieces)))
    assert all(sum(sampler.pieces[p][2] for p in w) <= 250 for w in windows)
    # Each window's samples come together in the order: no window spans more than its bytes.
    position = 0
    generator = torch.Generator()
    generator.manual_seed(4)
    for window in sampler.windows(torch.randperm(len(sampler.pieces), generator=generator).tolist()):
        members = {i for p in window for i in range(*sampler.pieces[p][:2])}
        assert set(order[position:position + len(members)]) == members
        position += len(members)
    # Counted windows never cut a shard.
    assert len(packer.ShardWindowSampler(SIZES, window_shards=1).pieces) == len(SIZES)


def test_the_order_depends_on_seed_and_epoch_alone() -> None:
    def order(seed: int, epoch: int) -> list[int]:
        sampler = packer.ShardWindowSampler(SIZES, window_shards=3, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(1, 1) and order(1, 0) != order(2, 0)
    unshuffled = packer.ShardWindowSampler(SIZES, window_shards=3, shuffle=False)
    assert list(unshuffled) == list(range(sum(SIZES)))


def test_ranks_take_equal_contiguous_slices_of_one_order() -> None:
    ranks = [packer.ShardWindowSampler(SIZES, 3, rank, window_shards=2, seed=5) for rank in range(3)]
    slices = [list(sampler) for sampler in ranks]
    assert len({len(s) for s in slices}) == 1 and all(len(s) == len(ranks[0]) for s in slices)
    whole = ranks[0].epoch_order().tolist()
    assert sum(slices, []) == whole
    assert Counter(whole) - Counter(range(sum(SIZES))) == Counter(whole[:len(whole) - sum(SIZES)])  # padding


def test_it_resumes_mid_epoch_and_refuses_another_sampler_s_state() -> None:
    sampler = packer.ShardWindowSampler(SIZES, window_bytes=900, shard_bytes=BYTES, seed=7)
    sampler.set_epoch(2)
    full = list(sampler)
    state = sampler.state_dict(consumed=20)
    again = packer.ShardWindowSampler(SIZES, window_bytes=900, shard_bytes=BYTES)
    again.load_state_dict(state)
    again.set_epoch(2)
    assert list(again) == full[20:]
    other = packer.ShardWindowSampler(SIZES, window_bytes=600, shard_bytes=BYTES)
    with pytest.raises(ValueError, match="window_bytes=900, this sampler has window_bytes=600"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="Not a ShardWindowSampler state: missing window_bytes"):
        other.load_state_dict(packer.ShardAwareSampler(SIZES).state_dict())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "give one of window_bytes"),
    ({"window_bytes": 10, "window_shards": 2}, "give one of window_bytes"),
    ({"window_shards": 0}, "window_shards must be a positive int"),
    ({"window_bytes": 100}, "window_bytes needs each shard's bytes"),
])
def test_bad_windows_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        packer.ShardWindowSampler(SIZES, **kwargs)


def test_a_packed_dataset_gives_its_shards_bytes(tmp_path: Path) -> None:
    tree = image_tree(tmp_path / "tree", count=24)
    packer.convert(tree.root, tmp_path / "ds", to="lmdb", shard_size="2KB", workers=1)
    dataset = packer.open_dataset(tmp_path / "ds", decode=False)
    biggest = max(s.num_bytes for s in dataset.manifest.shards)
    sampler = packer.ShardWindowSampler(dataset, window_bytes=2 * biggest)
    assert sampler.shard_bytes == tuple(s.num_bytes for s in dataset.manifest.shards)
    assert sorted(sampler) == list(range(len(dataset)))


@pytest.mark.slow
def test_make_loader_windows_a_url_dataset_larger_than_its_cache(tmp_path: Path, s3_bucket: str, s3_env: Any,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    tree = image_tree(tmp_path / "tree", count=60)
    packer.convert(tree.root, tmp_path / "ds", to="lmdb", shard_size="6KB", workers=1)
    url = f"{s3_bucket}/ds"
    push_dataset(tmp_path / "ds", url)
    size = packer.open_dataset(tmp_path / "ds").manifest.num_bytes
    small = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "small", cache_limit=size // 3)
    assert small.access_mode == "ranged"
    with caplog.at_level("WARNING", logger="packer.read.loader"):
        loader = packer.make_loader(small, 8, num_workers=2, collate_fn=list)
    warned = [r.getMessage() for r in caplog.records if "does not fit its node cache" in r.getMessage()]
    assert len(warned) == 1 and "windows of about 8.3% of the dataset" in warned[0]  # a third / 4
    assert "sampler='random'" in warned[0] and "cache_limit=" in warned[0]
    assert isinstance(loader.sampler, ReadAheadSampler)
    window = loader.sampler.sampler
    assert isinstance(window, packer.ShardWindowSampler) and window.window_bytes == size // 3 // 4
    got = Counter(bytes(p) for batch in loader for p, _ in batch)
    assert sum(got.values()) == len(small) // 8 * 8  # drop_last for training; each sample once
    assert max(got.values()) == 1
    roomy = packer.open_dataset(url, decode=False, cache_dir=tmp_path / "roomy")
    assert roomy.access_mode == "whole"
    assert isinstance(packer.make_loader(roomy, 8, num_workers=0).sampler.sampler, SeededRandomSampler)
    evaluation = packer.make_loader(small, 8, train=False, num_workers=0)
    assert not isinstance(evaluation.sampler.sampler, packer.ShardWindowSampler)  # in order
