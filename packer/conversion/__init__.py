"""Layer 4, the job: turn a source into a packed dataset, crash-safely, on any engine.

:func:`convert` (:mod:`~packer.conversion.run`) checks DST (:mod:`~packer.conversion.destination.state`),
scans and plans (:mod:`~packer.conversion.job`, built from one :class:`ConversionOptions`), writes
shards on an engine (:mod:`~packer.conversion.execution`, :mod:`~packer.conversion.engines`) and
commits the manifest (:mod:`~packer.conversion.merging`). Array tasks
(:mod:`~packer.conversion.array_run`) write shares of the shards that :func:`merge` joins.
:func:`update` (:mod:`~packer.conversion.maintenance.updating`) writes a new version of a dataset from its
changed source, :func:`upgrade` (:mod:`~packer.conversion.maintenance.upgrading`) makes a 0.1 dataset
updatable, and :func:`collect_garbage` (:mod:`~packer.conversion.maintenance.gc`) deletes old versions.
Never imports :mod:`packer.read`. Names are imported on first use.

This namespace exports only the public names homed here (the same objects as ``packer.<name>``);
the lifecycle of DST, array-job parsing and the ``run_*`` entry points of the command line are
internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.conversion.array_run import TaskResult, convert_task
    from packer.conversion.dryrun import ConversionPlan, plan_conversion
    from packer.conversion.engines import Engine, ExecutorEngine, LocalEngine, open_engine
    from packer.conversion.maintenance.gc import GcResult, collect_garbage
    from packer.conversion.maintenance.updating import UpdateResult, update
    from packer.conversion.maintenance.upgrading import UpgradeResult, upgrade
    from packer.conversion.merging import MergeResult, merge
    from packer.conversion.options import ConversionOptions
    from packer.conversion.run import ConversionResult, convert
    from packer.conversion.writing.write import write

__all__ = ["ConversionOptions", "ConversionPlan", "ConversionResult", "Engine", "ExecutorEngine",
           "GcResult", "LocalEngine", "MergeResult", "TaskResult", "UpdateResult", "UpgradeResult",
           "collect_garbage", "convert", "convert_task", "merge", "open_engine", "plan_conversion",
           "update", "upgrade", "write"]
_INTERNAL = "it is internal to packer's command line; use packer.convert() and its keywords instead"
__getattr__, __dir__ = lazy_exports(__name__, {
    ".run": ["ConversionResult", "convert"],
    ".writing.write": ["write"],
    ".array_run": ["TaskResult", "convert_task"],
    ".options": ["ConversionOptions"],
    ".dryrun": ["ConversionPlan", "plan_conversion"],
    ".merging": ["MergeResult", "merge"],
    ".maintenance.updating": ["UpdateResult", "update"],
    ".maintenance.upgrading": ["UpgradeResult", "upgrade"],
    ".maintenance.gc": ["GcResult", "collect_garbage"],
    ".engines": ["Engine", "ExecutorEngine", "LocalEngine", "open_engine"],
}, __all__, deprecated={
    "ArrayTask": (".arrayjob", _INTERNAL),
    "array_task": (".arrayjob", _INTERNAL),
    "Destination": (".destination.state",
                    "DST's lifecycle is internal; convert(), update() and merge() run it"),
    "DestinationState": (".destination.state", "DST's lifecycle is internal"),
    "DEFAULT_SHARD_SIZE": (".options", "it is ConversionOptions().shard_size"),
    "ENGINES": (".engines.select", "use packer.engine_names() and packer.register_engine()"),
    "PlannedShard": (".dryrun", "it is the type of ConversionPlan.shards"),
    "dry_run": (".dryrun", "use packer.plan_conversion(src, options=...)"),
    "run_conversion": (".run", "use packer.convert(src, dst, options=...)"),
    "run_conversion_task": (".array_run", "use packer.convert_task(src, dst, options=...)"),
})
