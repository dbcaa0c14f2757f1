"""The progress bar every packer function draws (with ``progress=True``) and the CLI shows.

tqdm starts a *monitor thread* with its first bar. A process running a second thread can no
longer start conversion workers by ``fork`` (see :mod:`packer.conversion.engines.local`), so one
``verify_dataset(..., progress=True)`` before ``convert`` made every later conversion of that
process start its workers the slow way (``spawn``). packer's bars update often enough not to
need the monitor; this one never starts it.
"""

from __future__ import annotations

from tqdm import tqdm

__all__ = ["ProgressBar"]


class ProgressBar(tqdm):  # type: ignore[misc]
    """``tqdm`` without its monitor thread."""

    monitor_interval = 0
