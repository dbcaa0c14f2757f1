"""Cut the sample order into shards at content-defined boundaries, so that edits stay local.

A shard is a contiguous range of the sample order. Where shards end is decided by the items
themselves, not by counting bytes from the first item:

1. Item ``i`` is a *natural boundary* when a hash of its relative path falls below
   ``RATE * size_i / shard_size``: natural boundaries come about ``RATE`` times per
   ``shard_size`` bytes, wherever the items lie in the order.
2. A natural boundary *ends a shard* when the previous natural boundary (or the start) lies at
   least ``shard_size / 4`` bytes before it. This looks only backwards, at the items just
   before, never at where earlier shards ended: so shards hold at least a quarter of
   ``shard_size``, and no choice depends on a choice made far away.
3. A stretch longer than ``2 * shard_size`` between two shard ends is cut the same way with
   four times as many natural boundaries (the same hash under a higher threshold), and so on;
   a last piece under a quarter shard joins the one before. Only a stretch that still has no
   such point (a run of huge files) is cut greedily at ``2 * shard_size``. The stretch at the
   end of the order is always cut so (files appended after it must not move its cuts).

Shards hold between a quarter and twice ``shard_size`` bytes (the last ones of the order
fewer; a file larger than twice gets a shard of its own), about 0.8 ``shard_size`` on average
(measured: long stretches are cut into smaller pieces). Why: with fixed-size cuts, adding one file early in
the order moves every later boundary, so ``packer update`` would rewrite every shard after the
edit. Here adding, removing or changing a file moves at most the boundaries within a quarter of
a shard after it: ``k`` edits rewrite about ``k + 1`` shards (fewer when they share shards),
and the rest stay byte for byte the same (the shards hold payloads alone; labels live in the
sample index, so relabelling or a new class moves nothing). Measured in ``scripts/bench_update.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ShardPlan", "cut_greedily", "is_natural_boundary", "plan_shards", "shard_bounds"]

_HASH_RANGE = float(1 << 64)
#: Natural boundaries per ``shard_size`` bytes: with the quarter-shard lower bound, stretches
#: between shard ends average ``shard_size`` (x * exp(-x / 4) = 1).
RATE = 1.43


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


def shard_bounds(shard_size: int) -> tuple[int, int]:
    """``(fewest, most)`` planned bytes of a shard (the last shard may hold fewer, and an item
    larger than ``most`` gets a shard of its own)."""
    return max(shard_size // 4, 1), 2 * shard_size


def is_natural_boundary(relpath: str, size: int, shard_size: int) -> bool:
    """Whether a shard may end after this item: a hash of its path alone decides, with a
    probability that grows with its size (the same answer in every run and every version)."""
    digest = hashlib.blake2b(relpath.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_RANGE < RATE * max(size, 0) / shard_size


def plan_shards(sizes: Sequence[int], relpaths: Sequence[str], shard_size: int) -> tuple[ShardPlan, ...]:
    """Cut items of the given byte ``sizes`` and ``relpaths`` into contiguous shards.

    See the module docstring for the rule. Unknown sizes (negative) count as 0. The plan
    depends on nothing but its inputs, so the same tree and options give the same shards.

    Raises:
        ValueError: ``shard_size`` is not positive, or the sequences differ in length.
    """
    if shard_size <= 0:
        raise ValueError(f"shard_size must be positive, not {shard_size}")
    if len(sizes) != len(relpaths):
        raise ValueError(f"{len(sizes)} sizes for {len(relpaths)} paths")
    counted = [max(size, 0) for size in sizes]
    ranges = _cut(counted, relpaths, 0, len(counted), shard_size, 0) if counted else []
    return tuple(ShardPlan(number, first, stop, sum(counted[first:stop]))
                 for number, (first, stop) in enumerate(ranges))


#: How many times a long stretch is cut again with denser natural boundaries.
_LEVELS = 3


def _cut(sizes: list[int], relpaths: Sequence[str], start: int, stop: int, shard_size: int,
         level: int) -> list[tuple[int, int]]:
    """Items ``start:stop`` cut at level ``level`` (rate ``RATE * 4**level``), then every piece
    longer than ``2 * shard_size``, and the last piece of the order, again at the next level.
    Depends on this stretch alone."""
    fewest, most = shard_bounds(shard_size)
    last = stop == len(sizes)  # the end of the order is no boundary: what follows may grow it
    if level > 0 and not last and (sum(sizes[start:stop]) <= most or stop - start == 1):
        return [(start, stop)]
    if level > _LEVELS:
        return cut_greedily(sizes, start, stop, most)
    scale = 4 ** level
    ends: list[int] = []
    total = last_natural = 0
    for position in range(start, stop):
        total += sizes[position]
        if is_natural_boundary(relpaths[position], sizes[position] * scale, shard_size):
            if total - last_natural >= fewest:
                ends.append(position + 1)
            last_natural = total
    if ends and ends[-1] != stop and level > 0 and sum(sizes[ends[-1]:stop]) < fewest:
        ends.pop()  # no sliver at the end of a stretch: the last piece takes it
    if not ends or ends[-1] != stop:
        ends.append(stop)
    pieces: list[tuple[int, int]] = []
    first = start
    for end in ends:
        pieces.extend(_cut(sizes, relpaths, first, end, shard_size, level + 1))
        first = end
    return pieces


def cut_greedily(sizes: Sequence[int], start: int, stop: int, most: int) -> list[tuple[int, int]]:
    """Items ``start:stop`` cut before each item that would take a piece past ``most`` bytes (an
    item larger stands alone): the last resort here, and how a shard is shared out in segments."""
    pieces: list[tuple[int, int]] = []
    first, planned = start, 0
    for position in range(start, stop):
        if position > first and planned + sizes[position] > most:
            pieces.append((first, position))
            first, planned = position, 0
        planned += sizes[position]
    pieces.append((first, stop))
    return pieces
