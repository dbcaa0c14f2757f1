"""Run a repository script or example in this test process, as ``python FILE ARGS`` would.

Starting a fresh interpreter that imports torch costs 2-3 s on the CI machine, more than most
smoke runs themselves, and the scripts' and examples' tests do not test interpreter isolation:
:func:`run_file` runs the file as ``__main__`` in this process instead (``runpy``), with its
own ``sys.argv``, working directory, ``sys.path[0]`` (the file's folder, as for ``python
FILE``) and environment, and with its output captured. What the file changes in the process is
put back afterwards: the environment, the working directory, ``sys.path``, warning filters,
logging's root level and handlers, torch's thread count (scripts pin one thread, as in a
DataLoader worker) and the global random states of torch, numpy and ``random`` (scripts seed
them). A fresh interpreter has one thread, and packer's conversions start their workers by
``fork`` only then (by ``spawn``, which imports torch again per worker, otherwise): the file runs
without tqdm's monitor thread, which any earlier progress bar in this process leaves running.
Processes a file starts itself (DataLoader workers, ``subprocess`` children) are started as
they would be from ``python FILE``; children inherit the environment given here. Tests of
isolation itself (``torchrun``, shell scripts) keep their own subprocesses.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import runpy
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Ran:
    """What a file printed and how it exited, as :class:`subprocess.CompletedProcess` has it."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _without_tqdm_monitor() -> Iterator[None]:
    """No tqdm monitor thread while the file runs, nor after it (tqdm makes one per process)."""
    monitor = tqdm.monitor
    if monitor is not None:
        monitor.exit()
        tqdm.monitor = None
    interval = tqdm.monitor_interval
    tqdm.monitor_interval = 0
    try:
        yield
    finally:
        tqdm.monitor_interval = interval


@contextlib.contextmanager
def _restored_process_state() -> Iterator[None]:
    environ, cwd, path = dict(os.environ), os.getcwd(), list(sys.path)
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    threads = torch.get_num_threads()
    rng = torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        with warnings.catch_warnings(), _without_tqdm_monitor():
            yield
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        root.setLevel(level)
        root.handlers[:] = handlers
        torch.set_num_threads(threads)
        torch.set_rng_state(rng[0])
        np.random.set_state(rng[1])
        random.setstate(rng[2])


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"): the message goes to stderr, status 1
    return 1


def run_file(path: Path, *args: object, cwd: Path, env: Mapping[str, str] | None = None) -> Ran:
    """Run ``path`` as ``python path ARGS`` from ``cwd`` would, in this process.

    ``env`` replaces the environment while the file runs, as ``subprocess.run(env=...)`` does.
    The checkout goes first on ``PYTHONPATH`` (for the processes the file starts) and on
    ``sys.path``, so that the file imports this working tree's packer however packer is
    installed. An exception other than ``SystemExit`` propagates, the file's output printed first.
    """
    stdout, stderr = io.StringIO(), io.StringIO()
    with _restored_process_state():
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        inherited = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *inherited])
        sys.path[:0] = [str(path.parent), str(ROOT)]
        os.chdir(cwd)
        argv = sys.argv
        sys.argv = [str(path), *(str(arg) for arg in args)]
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                try:
                    runpy.run_path(str(path), run_name="__main__")
                    code = 0
                except SystemExit as exit_:
                    code = _exit_code(exit_.code)
        except Exception:  # the traceback says what failed; pytest shows this output with it
            print(f"--- stdout of {path.name}\n{stdout.getvalue()}\n--- stderr\n{stderr.getvalue()}",
                  file=sys.stderr)
            raise
        finally:
            sys.argv = argv
    return Ran(code, stdout.getvalue(), stderr.getvalue())


def run_file_ok(path: Path, *args: object, cwd: Path, env: Mapping[str, str] | None = None) -> Ran:
    """:func:`run_file`, failing the test with the file's output unless it exits 0."""
    ran = run_file(path, *args, cwd=cwd, env=env)
    assert ran.returncode == 0, (f"{path.name} exited {ran.returncode}\n--- stdout\n{ran.stdout}"
                                 f"\n--- stderr\n{ran.stderr}")
    return ran
