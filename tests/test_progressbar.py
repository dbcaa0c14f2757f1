"""Drawing a progress bar starts no thread: a later conversion in the process still forks its
workers (a monitor thread would make them start by spawn, several times slower)."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import packer
from packer.progressbar import ProgressBar


def test_bars_of_verify_and_export_start_no_thread(packed: Path, tmp_path: Path) -> None:
    before = threading.active_count()
    stream = io.StringIO()

    with ProgressBar(total=3, file=stream, disable=False) as bar:
        bar.update(3)
    assert "3/3" in stream.getvalue()
    packer.verify_dataset(packed, deep=True, progress=True)
    packer.export_dataset(packed, tmp_path / "out", progress=True)
    assert threading.active_count() == before
