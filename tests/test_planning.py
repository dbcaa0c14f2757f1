"""Shard planning: contiguous, complete, bounded, deterministic, and local under edits."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from packer.conversion.sharding import ShardPlan, is_natural_boundary, plan_shards, shard_bounds

sizes_lists = st.lists(st.one_of(st.integers(0, 5000), st.just(-1)), max_size=200)
shard_sizes = st.integers(1, 20_000)


def _names(count: int) -> list[str]:
    return [f"class/{i:05d}.jpg" for i in range(count)]


@settings(deadline=None)
@given(sizes_lists, shard_sizes)
@example([], 1)
@example([0, 0, 0], 1)
@example([10, 10, 10], 10)
@example([11, 1, 1, 11], 10)
@example([-1, -1, 5], 1)
def test_plan_properties(sizes: list[int], shard_size: int) -> None:
    names = _names(len(sizes))
    plans = plan_shards(sizes, names, shard_size)
    fewest, most = shard_bounds(shard_size)

    # every item in exactly one shard, contiguous and in order, numbered from 0
    covered = [i for plan in plans for i in range(plan.start, plan.stop)]
    assert covered == list(range(len(sizes)))
    assert [plan.index for plan in plans] == list(range(len(plans)))
    for before, after in itertools.pairwise(plans):
        assert before.stop == after.start
    ends = set()
    total = last_natural = 0
    for position, size in enumerate(sizes):
        total += max(size, 0)
        if is_natural_boundary(names[position], size, shard_size):
            if total - last_natural >= fewest:
                ends.add(position + 1)
            last_natural = total
    for plan in plans:
        assert plan.num_items == plan.stop - plan.start >= 1
        counted = [max(s, 0) for s in sizes[plan.start:plan.stop]]
        assert plan.planned_bytes == sum(counted)
        # bounded above, unless the shard is one oversized item
        assert plan.planned_bytes <= most or plan.num_items == 1
        # no shard runs past a boundary that ends one
        assert not any(plan.start < end < plan.stop for end in ends)
    # every boundary that ends a shard does (long stretches are cut further, never merged)
    assert ends <= {plan.stop for plan in plans}
    # deterministic
    assert plan_shards(list(sizes), names, shard_size) == plans
    assert plan_shards(tuple(sizes), tuple(names), shard_size) == plans


def _ranges(items: list[tuple[str, int]], shard_size: int) -> list[tuple[tuple[str, int], ...]]:
    plans = plan_shards([size for _, size in items], [name for name, _ in items], shard_size)
    return [tuple(items[p.start:p.stop]) for p in plans]


@pytest.mark.parametrize("edit", ["insert", "remove", "change"])
def test_a_local_edit_changes_few_shards(edit: str) -> None:
    """The point of content-defined boundaries: k edits rewrite about k + 1 shards, never a
    cascade through the rest of the order (fixed-size cuts would change every later shard)."""
    rng = random.Random(7)
    shard_size = 1_000_000
    items = [(f"c{c:02d}/{i:04d}.jpg", rng.randint(50_000, 150_000)) for c in range(20) for i in range(60)]
    before = set(_ranges(items, shard_size))
    assert len(before) > 50
    counts = []
    for trial in range(40):
        at = rng.randrange(len(items))
        if edit == "insert":
            name = items[at][0].replace(".jpg", "b.jpg")
            edited = items[:at + 1] + [(name, rng.randint(50_000, 150_000))] + items[at + 1:]
        elif edit == "remove":
            edited = items[:at] + items[at + 1:]
        else:
            edited = [*items[:at], (items[at][0], items[at][1] + rng.randint(1, 40_000)), *items[at + 1:]]
        written = [shard for shard in _ranges(edited, shard_size) if shard not in before]
        # the shard edited, a neighbour when a boundary moved, and rarely the pieces of a
        # stretch longer than twice the shard size (cut evenly)
        assert 1 <= len(written) <= 4, (trial, len(written))
        counts.append(len(written))
    assert sum(counts) / len(counts) <= 1.6


def test_a_new_class_at_the_end_rewrites_only_its_shards_and_one() -> None:
    rng = random.Random(5)
    shard_size = 1_000_000
    items = [(f"c{c:02d}/{i:04d}.jpg", rng.randint(50_000, 150_000)) for c in range(10) for i in range(60)]
    added = [(f"zz/{i:04d}.jpg", rng.randint(50_000, 150_000)) for i in range(60)]
    before = set(_ranges(items, shard_size))
    after = _ranges(items + added, shard_size)
    written = [shard for shard in after if shard not in before]
    holding_new = [shard for shard in after if any(item in added for item in shard)]
    assert len(written) <= len(holding_new) + 1


def test_relabelling_moves_no_boundary() -> None:
    sizes = [4000] * 100
    assert plan_shards(sizes, _names(100), 10_000) == plan_shards(sizes, _names(100), 10_000)
    # boundaries depend on paths and sizes only: a plan knows nothing of labels


def test_a_long_stretch_is_cut_into_pieces_and_an_oversized_item_stands_alone() -> None:
    plans = plan_shards([3, 50, 3, 3], ["a", "b", "c", "d"], 1000)  # no natural boundary at all
    assert plans == (ShardPlan(0, 0, 4, 59),)
    plans = plan_shards([3, 50, 3, 3], ["a", "b", "c", "d"], 10)
    assert all(p.planned_bytes <= 20 or p.num_items == 1 for p in plans)
    assert any(p.planned_bytes == 50 and p.num_items == 1 for p in plans)


def test_shards_average_about_the_shard_size() -> None:
    rng = random.Random(3)
    sizes = [rng.randint(50_000, 150_000) for _ in range(20_000)]
    plans = plan_shards(sizes, _names(len(sizes)), 2_000_000)
    mean = sum(p.planned_bytes for p in plans[:-1]) / (len(plans) - 1)
    assert 0.7 * 2_000_000 < mean < 1.1 * 2_000_000  # about 0.8: long stretches make smaller pieces


def test_unknown_sizes_count_as_zero() -> None:
    assert plan_shards([-1, -1, -1], _names(3), 1) == (ShardPlan(0, 0, 3, 0),)


def test_no_items_no_shards() -> None:
    assert plan_shards([], [], 100) == ()


@pytest.mark.parametrize("bad", [0, -1])
def test_shard_size_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="shard_size must be positive"):
        plan_shards([1, 2], _names(2), bad)
