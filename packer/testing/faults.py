"""Faults the contracts inject at exact points, without sleeps or races.

:class:`StopAfter` wraps any engine and stops the run right after the coordinator handled its
``n``-th finished task: :func:`kill_self` ends the process as a power cut or the out-of-memory
killer would (SIGKILL: no cleanup runs), :func:`interrupt` as Ctrl-C does (KeyboardInterrupt in
the coordinator). :func:`exit_code_of` runs a function in a forked child, so a test survives
the kill and inspects what the child left behind. :class:`Watching` records what an engine
reports, and :class:`Before` runs a function just before the tasks start.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable
from typing import Any

from packer.conversion.engines.base import Engine, OnProgress, OnResult, Progress
from packer.conversion.tasks import Task

__all__ = ["Before", "StopAfter", "Watching", "exit_code_of", "interrupt", "kill_self"]


def kill_self() -> None:
    """SIGKILL this process: nothing after it runs, no handler, no ``finally``."""
    os.kill(os.getpid(), signal.SIGKILL)


def interrupt() -> None:
    """Raise what Ctrl-C raises in the coordinator."""
    raise KeyboardInterrupt


class _Wrapper:
    """An engine that runs its tasks on ``engine`` (same name and parallelism)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name

    @property
    def parallelism(self) -> int:
        """The wrapped engine's."""
        return self.engine.parallelism


class StopAfter(_Wrapper):
    """Runs on ``engine`` and calls ``stop`` once the coordinator has handled ``results`` tasks."""

    def __init__(self, engine: Engine, results: int, stop: Callable[[], None]) -> None:
        super().__init__(engine)
        self.results, self.stop = results, stop

    def run(self, tasks: list[Task], *, on_progress: OnProgress, on_result: OnResult) -> None:
        """Run ``tasks``; see the class docstring."""
        handled = 0

        def result(value: Any) -> Iterable[Task]:
            nonlocal handled
            more = list(on_result(value))
            handled += 1
            if handled == self.results:
                self.stop()
            return more

        self.engine.run(tasks, on_progress=on_progress, on_result=result)


class Watching(_Wrapper):
    """Runs on ``engine`` and keeps every :class:`Progress` record and result it reports."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.progress: list[Progress] = []
        self.results: list[Any] = []

    def run(self, tasks: list[Task], *, on_progress: OnProgress, on_result: OnResult) -> None:
        """Run ``tasks``, recording on the way."""

        def progress(record: Progress) -> None:
            self.progress.append(record)
            on_progress(record)

        def result(value: Any) -> Iterable[Task]:
            self.results.append(value)
            return on_result(value)

        self.engine.run(tasks, on_progress=progress, on_result=result)

    def net(self) -> tuple[int, int]:
        """Files packed and skipped as reported, counts taken back subtracted."""
        sign = [-1 if record.retracted else 1 for record in self.progress]
        return (sum(s * record.packed for s, record in zip(sign, self.progress, strict=True)),
                sum(s * record.skipped for s, record in zip(sign, self.progress, strict=True)))


class Before(_Wrapper):
    """Runs ``action`` once the tasks are planned, then the tasks on ``engine``."""

    def __init__(self, engine: Engine, action: Callable[[], None]) -> None:
        super().__init__(engine)
        self.action = action

    def run(self, tasks: list[Task], *, on_progress: OnProgress, on_result: OnResult) -> None:
        """Call the action, then run ``tasks``."""
        self.action()
        self.engine.run(tasks, on_progress=on_progress, on_result=on_result)


def exit_code_of(target: Callable[[], object], *, timeout: float = 240.0) -> int | None:
    """Run ``target`` in a forked child and return its exit code (``-9`` when it SIGKILLed
    itself; None when it still ran after ``timeout`` seconds, and was killed then).

    The child inherits this process's registrations (a plugin registered only for the test),
    and starts its own conversion workers by fork, being single-threaded.
    """
    child = multiprocessing.get_context("fork").Process(target=target, name="packer-contract-child")
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return child.exitcode
