"""Which array task this process is: from ``--task-id``/``--num-tasks``, or the batch system.

Array jobs run one command many times with a different index each: Slurm sets
``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_MIN`` and ``SLURM_ARRAY_TASK_COUNT``; a Kubernetes
indexed Job sets ``JOB_COMPLETION_INDEX`` (the count is the Job's ``completions``, which the
pod cannot see, so ``--num-tasks`` must give it). Task ids count from 0: under Slurm the id is
``SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN``, so ``--array=1-8`` and ``--array=0-7`` both give
tasks 0 to 7. Arrays with a step (``--array=0-15:2``) are not contiguous and are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ArrayTask", "array_task"]


@dataclass(frozen=True)
class ArrayTask:
    """Task ``task_id`` of ``num_tasks``, and where that came from (for messages)."""

    task_id: int
    num_tasks: int
    source: str


def _integer(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def array_task(task_id: int | None, num_tasks: int | None,
               environ: Mapping[str, str]) -> ArrayTask | None:
    """The array task to run, or None for a whole conversion in this process.

    Flags win; missing ones are read from Slurm's or Kubernetes' variables.

    Raises:
        ValueError: half an answer (an id without a count or the reverse), an id out of range,
            or a Slurm array that is not contiguous; the message says which flag to add.
    """
    source = "task_id=, num_tasks="
    if task_id is None:
        slurm_id = _integer(environ, "SLURM_ARRAY_TASK_ID")
        index = _integer(environ, "JOB_COMPLETION_INDEX")
        if slurm_id is not None:
            task_id = slurm_id - (_integer(environ, "SLURM_ARRAY_TASK_MIN") or 0)
            source = "SLURM_ARRAY_TASK_ID"
            if num_tasks is None:
                num_tasks = _integer(environ, "SLURM_ARRAY_TASK_COUNT")
                _check_contiguous(environ, num_tasks)
        elif index is not None:
            task_id, source = index, "JOB_COMPLETION_INDEX"
            if num_tasks is None:
                raise ValueError("JOB_COMPLETION_INDEX is set but the number of tasks is not "
                                 "visible to a pod: pass num_tasks= (the Job's completions).")
    if task_id is None and num_tasks is None:
        return None
    if task_id is None:
        raise ValueError("num_tasks= needs task_id= (or a Slurm/Kubernetes array job that sets it).")
    if num_tasks is None:
        raise ValueError("task_id= needs num_tasks=.")
    if num_tasks < 1 or not 0 <= task_id < num_tasks:
        raise ValueError(f"task id {task_id} (from {source}) is not in 0..{num_tasks - 1} for "
                         f"{num_tasks} tasks; ids count from 0.")
    return ArrayTask(task_id, num_tasks, source)


def _check_contiguous(environ: Mapping[str, str], count: int | None) -> None:
    low, high = _integer(environ, "SLURM_ARRAY_TASK_MIN"), _integer(environ, "SLURM_ARRAY_TASK_MAX")
    step = _integer(environ, "SLURM_ARRAY_TASK_STEP") or 1
    if count is None:
        raise ValueError("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not: pass "
                         "num_tasks=.")
    if step != 1 or (low is not None and high is not None and high - low + 1 != count):
        raise ValueError(f"the Slurm array is not contiguous ({low}-{high}:{step}, {count} tasks): "
                         "use --array=0-N-1 (any %limit is fine), or pass task_id= and num_tasks=.")
