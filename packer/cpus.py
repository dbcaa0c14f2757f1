"""How many CPUs this process may use: the one answer conversion workers and DataLoaders share."""

from __future__ import annotations

import math
import os
from typing import Final

__all__ = ["available_cpus"]

_CGROUP_CPU_MAX: Final = "/sys/fs/cgroup/cpu.max"


def _cgroup_cpus() -> int | None:
    """CPUs the cgroup v2 quota allows (containers: ``docker --cpus``, Kubernetes limits), if any."""
    try:
        with open(_CGROUP_CPU_MAX, encoding="ascii") as handle:
            quota, period = handle.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, math.ceil(int(quota) / int(period)))
    except (ValueError, ZeroDivisionError):
        return None


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask (Slurm and taskset restrict it), capped by
    a cgroup v2 CPU quota (which the mask does not show), else ``os.cpu_count()``."""
    # No affinity API on macOS and Windows.
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_cpus()
    return max(1, min(cpus, quota) if quota is not None else cpus)
