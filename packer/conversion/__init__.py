"""Layer 3, the job: turn a source tree into a packed dataset, crash-safely, on any engine.

:func:`convert` (:mod:`~packer.conversion.run`) checks DST (:mod:`~packer.conversion.destination`),
scans and plans (:mod:`~packer.conversion.job`, built from one :class:`ConversionOptions`), writes
shards on an engine (:mod:`~packer.conversion.execution`, :mod:`~packer.conversion.engines`) and
commits the manifest (:mod:`~packer.conversion.merging`). Array tasks
(:mod:`~packer.conversion.array_run`) write shares of the shards that :func:`merge` joins.
:func:`update` (:mod:`~packer.conversion.updating`) writes a new version of a dataset from its
changed source, and :func:`collect_garbage` (:mod:`~packer.conversion.gc`) deletes old versions.
Never imports :mod:`packer.read`. Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.conversion.array_run import TaskResult, convert_task, run_conversion_task
    from packer.conversion.arrayjob import ArrayTask, array_task
    from packer.conversion.destination import Destination, DestinationState
    from packer.conversion.dryrun import ConversionPlan, PlannedShard, dry_run, plan_conversion
    from packer.conversion.engines import ENGINES, Engine, ExecutorEngine, LocalEngine, open_engine
    from packer.conversion.gc import GcResult, collect_garbage
    from packer.conversion.merging import MergeResult, merge
    from packer.conversion.options import DEFAULT_SHARD_SIZE, ConversionOptions
    from packer.conversion.run import ConversionResult, convert, run_conversion
    from packer.conversion.updating import UpdateResult, update

__all__ = ["ArrayTask", "ConversionOptions", "ConversionPlan", "ConversionResult",
           "DEFAULT_SHARD_SIZE", "Destination", "DestinationState", "ENGINES", "Engine",
           "ExecutorEngine", "GcResult", "LocalEngine", "MergeResult", "PlannedShard", "TaskResult",
           "UpdateResult", "array_task", "collect_garbage", "convert", "convert_task", "dry_run",
           "merge", "open_engine", "plan_conversion", "run_conversion", "run_conversion_task", "update"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".run": ["ConversionResult", "convert", "run_conversion"],
    ".array_run": ["TaskResult", "convert_task", "run_conversion_task"],
    ".options": ["ConversionOptions", "DEFAULT_SHARD_SIZE"],
    ".dryrun": ["ConversionPlan", "PlannedShard", "dry_run", "plan_conversion"],
    ".merging": ["MergeResult", "merge"],
    ".updating": ["UpdateResult", "update"],
    ".gc": ["GcResult", "collect_garbage"],
    ".destination": ["Destination", "DestinationState"],
    ".arrayjob": ["ArrayTask", "array_task"],
    ".engines": ["ENGINES", "Engine", "ExecutorEngine", "LocalEngine", "open_engine"],
}, __all__)
