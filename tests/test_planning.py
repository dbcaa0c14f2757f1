"""Shard planning: contiguous, complete, bounded, greedy and deterministic."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from packer.conversion.sharding import ShardPlan, plan_shards

sizes_lists = st.lists(st.one_of(st.integers(0, 5000), st.just(-1)), max_size=200)
shard_sizes = st.integers(1, 20_000)


@settings(deadline=None)
@given(sizes_lists, shard_sizes)
@example([], 1)
@example([0, 0, 0], 1)
@example([10, 10, 10], 10)
@example([11, 1, 1, 11], 10)
@example([-1, -1, 5], 1)
def test_plan_properties(sizes: list[int], shard_size: int) -> None:
    plans = plan_shards(sizes, shard_size)

    # every item in exactly one shard, contiguous and in order, numbered from 0
    covered = [i for plan in plans for i in range(plan.start, plan.stop)]
    assert covered == list(range(len(sizes)))
    assert [plan.index for plan in plans] == list(range(len(plans)))
    for before, after in itertools.pairwise(plans):
        assert before.stop == after.start
    for plan in plans:
        assert plan.num_items == plan.stop - plan.start >= 1
        counted = [max(s, 0) for s in sizes[plan.start:plan.stop]]
        assert plan.planned_bytes == sum(counted)
        # bounded, unless the shard is one oversized item
        assert plan.planned_bytes <= shard_size or plan.num_items == 1
        # greedy: a shard only closes when the next item would not fit
        if plan.stop < len(sizes):
            assert plan.planned_bytes + max(sizes[plan.stop], 0) > shard_size
    # deterministic
    assert plan_shards(list(sizes), shard_size) == plans
    assert plan_shards(tuple(sizes), shard_size) == plans


def test_an_oversized_item_gets_a_shard_of_its_own() -> None:
    assert plan_shards([3, 50, 3, 3], 10) == (
        ShardPlan(0, 0, 1, 3), ShardPlan(1, 1, 2, 50), ShardPlan(2, 2, 4, 6))


def test_exact_fit_closes_on_the_next_item() -> None:
    assert plan_shards([5, 5, 5], 10) == (ShardPlan(0, 0, 2, 10), ShardPlan(1, 2, 3, 5))


def test_unknown_sizes_count_as_zero() -> None:
    assert plan_shards([-1, -1, -1], 1) == (ShardPlan(0, 0, 3, 0),)


def test_no_items_no_shards() -> None:
    assert plan_shards([], 100) == ()


@pytest.mark.parametrize("bad", [0, -1])
def test_shard_size_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="shard_size must be positive"):
        plan_shards([1, 2], bad)
