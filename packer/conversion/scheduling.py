"""Turn planned shards into worker tasks, and finished tasks into finished shards.

With at least as many shards to write as workers, each worker writes whole shards. With fewer
(a small dataset, or the last shards of a resumed run) the shards are cut into segments packed
in parallel, and the coordinator writes each such shard from its segments in order as they
come in, so every worker has work; the bytes written are the same either way, so the output
never depends on the number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from packer.conversion.engines.base import task_error
from packer.conversion.receipts import ShardResult
from packer.conversion.sharding import cut_greedily
from packer.conversion.tasks import SegmentResult, SegmentTask, ShardAssembler, ShardTask, Task, shard_of
from packer.errors import ShardError

__all__ = ["Collector", "SEGMENTS_PER_WORKER", "make_tasks"]

#: Segments per worker when shards are too few: small enough pieces to balance the load.
SEGMENTS_PER_WORKER = 4


def make_tasks(shards: list[ShardTask], workers: int) -> list[Task]:
    """Whole-shard tasks, or segment tasks when there are fewer shards than workers.

    Segments pay for their parallelism with one more local copy of the payloads, so they are
    used only when each file costs CPU (a decode check, or a codec that re-encodes); storing
    original bytes unchecked is I/O-bound and gains nothing from them.
    """
    io_bound = all(s.check == "none" and s.codec.keeps_source_bytes for s in shards)
    if workers <= 1 or not shards or len(shards) >= workers or io_bound:
        return list(shards)
    pieces = -(-SEGMENTS_PER_WORKER * workers // len(shards))  # per shard, rounded up
    tasks: list[Task] = []
    for shard in shards:
        sizes = [max(item.size, 0) for item in shard.items]
        target = max(1, -(-sum(sizes) // pieces))
        for number, (start, stop) in enumerate(cut_greedily(sizes, 0, len(sizes), target)):
            tasks.append(SegmentTask(shard, number, start, stop))
    return tasks


class Collector:
    """Gathers finished shards; writes segmented shards as their segments come in.

    Writing happens here, in the coordinator, while the workers pack later segments. A write
    failure (disk full, read-only) ends the run with the same one-line error a worker's gives.
    """

    def __init__(self, tasks: list[Task], on_shard: Callable[[ShardResult], None] | None = None) -> None:
        self.shards: dict[int, ShardResult] = {}
        self._on_shard = on_shard
        self._index_of = {shard_of(task).fingerprint: shard_of(task).index for task in tasks}
        counts: dict[int, int] = {}
        owners: dict[int, ShardTask] = {}
        for task in tasks:
            if isinstance(task, SegmentTask):
                counts[task.shard.index] = counts.get(task.shard.index, 0) + 1
                owners[task.shard.index] = task.shard
        self._assemblers = {index: ShardAssembler(owners[index], count)
                            for index, count in counts.items()}

    def __call__(self, result: ShardResult | SegmentResult) -> Iterable[Task]:
        if isinstance(result, ShardResult):
            self._finished(self._index_of[result.fingerprint], result)
            return ()
        assembler = self._assemblers[result.shard]
        try:
            finished = assembler.add(result)
        except (OSError, ShardError) as err:  # a write failure (ShardWriteError is an OSError)
            assembler.abort()
            raise task_error(assembler.task, err) from err
        if finished is not None:
            self._finished(result.shard, finished)
        return ()

    def _finished(self, index: int, result: ShardResult) -> None:
        self.shards[index] = result
        if self._on_shard is not None:
            self._on_shard(result)

    def abort(self) -> None:
        """Drop half-written segmented shards after a failure."""
        for assembler in self._assemblers.values():
            assembler.abort()
