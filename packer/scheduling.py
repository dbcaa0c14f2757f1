"""Turn planned shards into worker tasks, and finished tasks into finished shards.

With at least as many shards to write as workers, each worker writes whole shards. With fewer
(a small dataset, or the last shards of a resumed run) the shards are cut into segments packed
in parallel and then assembled, so every worker has work; the bytes written are the same
either way, so the output never depends on the number of workers.
"""

from __future__ import annotations

from collections.abc import Iterable

from packer.planning import plan_shards
from packer.shardwork import AssembleTask, SegmentResult, SegmentTask, ShardResult, ShardTask

__all__ = ["Collector", "SEGMENTS_PER_WORKER", "make_tasks"]

#: Segments per worker when shards are too few: small enough pieces to balance the load.
SEGMENTS_PER_WORKER = 4

Task = ShardTask | SegmentTask | AssembleTask


def make_tasks(shards: list[ShardTask], workers: int) -> list[Task]:
    """Whole-shard tasks, or segment tasks when there are fewer shards than workers.

    Segments pay for their parallelism with one more local copy of the payloads, so they are
    used only when each file costs CPU (a decode check, or a codec that re-encodes); storing
    original bytes unchecked is I/O-bound and gains nothing from them.
    """
    io_bound = all(s.check == "none" and s.codec == "original" for s in shards)
    if workers <= 1 or not shards or len(shards) >= workers or io_bound:
        return list(shards)
    pieces = -(-SEGMENTS_PER_WORKER * workers // len(shards))  # per shard, rounded up
    tasks: list[Task] = []
    for shard in shards:
        sizes = [max(size, 0) for _, _, size in shard.items]
        target = max(1, -(-sum(sizes) // pieces))
        for number, part in enumerate(plan_shards(sizes, target)):
            tasks.append(SegmentTask(shard, number, part.start, part.stop))
    return tasks


class Collector:
    """Gathers results; when the last segment of a shard is in, asks for its assembly."""

    def __init__(self, tasks: list[Task]) -> None:
        self.shards: dict[int, ShardResult] = {}
        self._expected: dict[int, int] = {}
        self._segments: dict[int, list[SegmentResult]] = {}
        self._owners: dict[int, ShardTask] = {}
        self._index_of = {task.shard.name: task.shard.index for task in tasks}
        for task in tasks:
            if isinstance(task, SegmentTask):
                index = task.shard.index
                self._expected[index] = self._expected.get(index, 0) + 1
                self._owners[index] = task.shard

    def __call__(self, result: ShardResult | SegmentResult) -> Iterable[Task]:
        if isinstance(result, ShardResult):
            self.shards[self._index_of[result.entry.path]] = result
            return ()
        done = self._segments.setdefault(result.shard, [])
        done.append(result)
        if len(done) < self._expected[result.shard]:
            return ()
        ordered = tuple(sorted(done, key=lambda segment: segment.segment))
        return (AssembleTask(self._owners[result.shard], ordered),)
