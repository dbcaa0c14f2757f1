"""Cut the ImageFolder order into shards: contiguous ranges of at most ``shard_size`` bytes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ShardPlan", "plan_shards"]


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """One planned shard: source items ``start`` (inclusive) to ``stop`` (exclusive)."""

    index: int
    start: int
    stop: int
    planned_bytes: int

    @property
    def num_items(self) -> int:
        """How many source files this shard will try to pack."""
        return self.stop - self.start


def plan_shards(sizes: Sequence[int], shard_size: int) -> tuple[ShardPlan, ...]:
    """Cut items of the given byte ``sizes`` into contiguous shards of at most ``shard_size``.

    A shard closes before the item that would take it past ``shard_size``; an item larger than
    ``shard_size`` gets a shard of its own. Unknown sizes (negative) count as 0. The plan
    depends on nothing but its inputs, so the same tree and options give the same shards.

    Raises:
        ValueError: ``shard_size`` is not positive.
    """
    if shard_size <= 0:
        raise ValueError(f"shard_size must be positive, not {shard_size}")
    plans: list[ShardPlan] = []
    start = 0
    planned = 0
    for position, size in enumerate(sizes):
        size = max(size, 0)
        if position > start and planned + size > shard_size:
            plans.append(ShardPlan(len(plans), start, position, planned))
            start, planned = position, 0
        planned += size
    if start < len(sizes):
        plans.append(ShardPlan(len(plans), start, len(sizes), planned))
    return tuple(plans)
