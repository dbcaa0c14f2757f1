"""PerProcess: one resource per process, made anew in a forked child, the parent's kept."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
from typing import Any

import pytest

from packer.per_process import PerProcess

fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")


class Resource:
    """What a factory makes: the pid that made it, and how many were made in that process."""

    made = 0

    def __init__(self) -> None:
        Resource.made += 1
        self.pid = os.getpid()
        self.number = Resource.made


def _in_child(per: PerProcess[Resource], parents: Resource, results: Any) -> None:
    inherited = per.current()
    mine = per.get()
    results.put((inherited is None, mine is not parents, mine.pid == os.getpid(), mine is per.get(),
                 per.clear() is mine, per.current() is None))


def test_get_makes_the_resource_once_however_many_threads_ask() -> None:
    calls = []
    gate = threading.Barrier(8)

    def factory() -> object:
        calls.append(1)
        return object()

    per: PerProcess[object] = PerProcess(factory)
    assert per.current() is None
    got: list[object] = []

    def ask() -> None:
        gate.wait()
        got.append(per.get())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and all(g is got[0] for g in got) and per.current() is got[0]


def test_clear_drops_the_resource_and_the_next_get_makes_another() -> None:
    per = PerProcess(Resource)
    first = per.get()
    assert per.clear() is first and per.current() is None and per.clear() is None
    second = per.get()
    assert second is not first and per.get() is second


@fork
def test_a_forked_child_makes_its_own_and_the_parent_keeps_its_own() -> None:
    per = PerProcess(Resource)
    parents = per.get()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_in_child, args=(per, parents, results))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert results.get(timeout=5) == (True, True, True, True, True, True)
    assert per.get() is parents and per.current() is parents and parents.pid == os.getpid()


def _get_in_child(per: PerProcess[Resource], results: Any) -> None:
    results.put(per.get().pid == os.getpid())


@fork
def test_a_child_forked_while_another_thread_makes_the_resource_does_not_wait_for_it() -> None:
    # A parent's thread is inside the factory, holding the making lock, when the fork happens:
    # that thread does not exist in the child, so waiting for its lock there would hang.
    entered, release = threading.Event(), threading.Event()

    def slow() -> Resource:
        if threading.current_thread() is not threading.main_thread() and not release.is_set():
            entered.set()
            release.wait(30)
        return Resource()

    per = PerProcess(slow)
    maker = threading.Thread(target=per.get)
    maker.start()
    assert entered.wait(10)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_get_in_child, args=(per, results))
    child.start()
    child.join(20)
    release.set()
    maker.join(10)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0 and results.get(timeout=5) is True
    assert per.get().pid == os.getpid()


def test_pickles_as_an_empty_one_with_the_same_factory() -> None:
    per = PerProcess(Resource)
    made = per.get()
    copy = pickle.loads(pickle.dumps(per))
    assert copy.current() is None
    assert copy.get() is not made and isinstance(copy.get(), Resource) and per.get() is made
