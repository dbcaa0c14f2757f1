"""``make_loader``: its choices on machines of every shape (patched), overrides, errors, a real epoch."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from imagetools import digest_collate
from torch.utils.data import DataLoader, Dataset, DistributedSampler, SequentialSampler

import packer
from packer import cpus as cpus_module
from packer.read.loader import (
    MAX_WORKERS,
    LoaderSettings,
    SeededRandomSampler,
    available_cpus,
    default_workers,
    loader_settings,
    make_loader,
)

Machine = Callable[..., None]


class Numbers(Dataset[int]):
    """A map-style dataset of ``0..n-1``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Machine:
    """``machine(cpus=..., cuda=..., local_world_size=..., world=(size, rank) or None, quota=...)``."""

    def shape(cpus: int = 8, *, cuda: bool = False, local_world_size: int | None = None,
              world: tuple[int, int] | None = None, quota: int | None = None) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
        monkeypatch.setattr(cpus_module, "_cgroup_cpus", lambda: quota)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        if local_world_size is None:
            monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world_size))
        monkeypatch.setattr(dist, "is_initialized", lambda: world is not None)
        if world is not None:
            monkeypatch.setattr(dist, "get_world_size", lambda group=None: world[0])
            monkeypatch.setattr(dist, "get_rank", lambda group=None: world[1])

    shape()
    return shape


@pytest.mark.parametrize(("cpus", "local", "workers"), [
    (1, None, 0),      # one core: a worker would only time-share it with the main process
    (2, None, 1),      # at least one worker from two cores up
    (3, None, 2),
    (8, None, 7),      # one core left to the main process
    (17, None, 16),
    (64, None, MAX_WORKERS),   # capped
    (64, 8, 7),        # torchrun, 8 ranks per node: 8 cores each
    (16, 8, 1),        # 2 cores per rank
    (8, 8, 1),         # 1 core per rank: still one worker (several CPUs in all)
    (2, 2, 1),
])
def test_workers_follow_the_cpus_and_the_local_ranks(machine: Machine, cpus: int, local: int | None,
                                                     workers: int) -> None:
    machine(cpus=cpus, local_world_size=local)
    settings = loader_settings()
    assert settings.num_workers == workers == default_workers(cpus, local or 1)
    assert settings.cpus == cpus and settings.local_world_size == (local or 1)
    assert settings.prefetch_factor == (2 if workers else None)
    assert settings.persistent_workers is (workers > 0)


def test_a_cgroup_quota_caps_the_cpus(machine: Machine, monkeypatch: pytest.MonkeyPatch,
                                      tmp_path: Path) -> None:
    machine(cpus=64, quota=3)
    assert available_cpus() == 3 and loader_settings().num_workers == 2
    monkeypatch.undo()  # the real parser on a fake cgroup file
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(cpus_module, "_CGROUP_CPU_MAX", str(cpu_max))
    assert cpus_module._cgroup_cpus() is None  # no file: no quota
    for text, cpus in [("max 100000\n", None), ("250000 100000\n", 3), ("50000 100000\n", 1),
                       ("garbage\n", None)]:
        cpu_max.write_text(text)
        assert cpus_module._cgroup_cpus() == cpus, text


def test_without_an_affinity_api_the_cpu_count_is_used(machine: Machine,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert available_cpus() == 6 and loader_settings().num_workers == 5
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert available_cpus() == 1 and loader_settings().num_workers == 0


@pytest.mark.parametrize("cuda", [True, False])
def test_pin_memory_only_with_cuda(machine: Machine, cuda: bool) -> None:
    machine(cuda=cuda)
    assert loader_settings().pin_memory is cuda
    assert make_loader(Numbers(8), 4, num_workers=0).pin_memory is cuda


def test_train_and_eval(machine: Machine) -> None:
    machine(cpus=4)
    train, evaluation = loader_settings(train=True), loader_settings(train=False)
    assert (train.sampler, train.shuffle, train.drop_last) == ("random", True, True)
    assert (evaluation.sampler, evaluation.shuffle, evaluation.drop_last) == ("sequential", False, False)
    assert (train.world_size, train.rank) == (1, 0)
    loader = make_loader(Numbers(10), 4)
    assert isinstance(loader, DataLoader) and isinstance(loader.sampler, SeededRandomSampler)
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (3, 2, True)
    assert loader.batch_size == 4 and loader.drop_last is True
    loader = make_loader(Numbers(10), 4, train=False)
    assert isinstance(loader.sampler, SequentialSampler) and loader.drop_last is False


def test_a_real_loader_in_the_main_process(machine: Machine) -> None:
    machine(cpus=1)
    train = make_loader(Numbers(10), 4, seed=3)
    batches = [batch.tolist() for batch in train]
    assert len(batches) == 2 and all(len(b) == 4 for b in batches)  # the partial batch dropped
    assert len(set(sum(batches, []))) == 8
    evaluation = [batch.tolist() for batch in make_loader(Numbers(10), 4, train=False)]
    assert evaluation == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_set_epoch_makes_the_order_a_function_of_seed_and_epoch() -> None:
    sampler = SeededRandomSampler(Numbers(50), seed=7)
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == list(range(50)) and first != second  # no set_epoch: new order
    sampler.set_epoch(3)
    third = list(sampler)
    again = SeededRandomSampler(Numbers(50), seed=7)
    again.set_epoch(3)
    assert list(again) == third
    again.set_epoch(4)
    assert list(again) != third
    other = SeededRandomSampler(Numbers(50), seed=8)
    other.set_epoch(3)
    assert list(other) != third


def test_under_an_initialised_process_group(machine: Machine) -> None:
    machine(cpus=16, local_world_size=4, world=(8, 5))
    settings = loader_settings()
    assert (settings.sampler, settings.world_size, settings.rank) == ("distributed", 8, 5)
    assert settings.num_workers == 3  # 16 CPUs / 4 local ranks - 1
    loader = make_loader(Numbers(64), 4, seed=11)
    sampler = loader.sampler
    assert isinstance(sampler, DistributedSampler)
    assert (sampler.num_replicas, sampler.rank, sampler.shuffle, sampler.seed) == (8, 5, True, 11)
    assert len(list(sampler)) == 8
    evaluation = make_loader(Numbers(64), 4, train=False).sampler
    assert isinstance(evaluation, DistributedSampler) and evaluation.shuffle is False
    assert loader_settings(distributed=False).sampler == "random"  # each rank reads everything


def test_a_group_of_one_is_not_distributed_unless_asked(machine: Machine) -> None:
    machine(world=(1, 0))
    assert loader_settings().sampler == "random"
    assert loader_settings(distributed=True).sampler == "distributed"
    assert isinstance(make_loader(Numbers(4), 2, distributed=True).sampler, DistributedSampler)


def test_shard_sampler(machine: Machine, packed: Path) -> None:
    machine(world=(2, 1))
    ds = packer.open_dataset(packed)
    sampler = make_loader(ds, 2, sampler="shard", seed=4).sampler
    assert isinstance(sampler, packer.ShardAwareSampler)
    assert (sampler.num_replicas, sampler.rank, sampler.shuffle, sampler.seed) == (2, 1, True, 4)
    assert make_loader(ds, 2, sampler="shard", train=False).sampler.shuffle is False
    machine(world=None)
    single = make_loader(ds, 2, sampler="shard").sampler
    assert (single.num_replicas, single.rank) == (1, 0)
    with pytest.raises(TypeError, match="needs a packer dataset"):
        make_loader(Numbers(4), 2, sampler="shard")


@pytest.mark.filterwarnings("ignore:This DataLoader will create 5 worker processes")
def test_explicit_values_win(machine: Machine) -> None:
    machine(cpus=2, cuda=False)
    custom = SequentialSampler(range(6))
    loader = make_loader(Numbers(6), 3, num_workers=5, prefetch_factor=4, persistent_workers=False,
                         pin_memory=True, drop_last=False, sampler=custom, collate_fn=list, timeout=30)
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers, loader.pin_memory,
            loader.drop_last) == (5, 4, False, True, False)
    assert loader.sampler is custom and loader.collate_fn is list and loader.timeout == 30
    assert loader_settings(sampler=custom).sampler == "custom"
    assert loader_settings(num_workers=0).prefetch_factor is None
    assert loader_settings(sampler="sequential").shuffle is False
    assert loader_settings(train=False, sampler="random").shuffle is True


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_workers": -1}, "num_workers must be an integer of at least 0"),
    ({"num_workers": "2"}, "num_workers must be an integer"),
    ({"num_workers": True}, "num_workers must be an integer"),
    ({"prefetch_factor": 0}, "prefetch_factor must be an integer of at least 1"),
    ({"num_workers": 0, "prefetch_factor": 2}, "needs num_workers > 0"),
    ({"num_workers": 0, "persistent_workers": True}, "persistent_workers=True needs num_workers > 0"),
    ({"sampler": "bogus"}, "sampler must be one of random, sequential, distributed, shard"),
    ({"sampler": 3}, "sampler must be a name"),
    ({"distributed": True}, "needs an initialised process group"),
    ({"sampler": "distributed"}, "needs an initialised process group"),
    ({"train": "yes"}, "train must be True, False or None"),
    ({"pin_memory": 1}, "pin_memory must be True, False or None"),
])
def test_invalid_settings(machine: Machine, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        loader_settings(**kwargs)
    with pytest.raises(ValueError, match=message):
        make_loader(Numbers(4), 2, **kwargs)


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((0,), {}, "batch_size must be an integer of at least 1"),
    ((None,), {}, "batch_size must be an integer"),
    ((2,), {"seed": "x"}, "seed must be an int"),
    ((2,), {"shuffle": True}, "does not take shuffle"),
    ((2,), {"batch_sampler": object(), "generator": None}, "does not take batch_sampler, generator"),
])
def test_invalid_make_loader_arguments(machine: Machine, args: tuple[Any, ...], kwargs: dict[str, Any],
                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_loader(Numbers(4), *args, **kwargs)


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_local_world_size_is_refused(machine: Machine, monkeypatch: pytest.MonkeyPatch,
                                           value: str) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE"):
        loader_settings()


def test_settings_print_and_serialise(machine: Machine) -> None:
    machine(cpus=4, cuda=True)
    settings = loader_settings()
    assert isinstance(settings, LoaderSettings)
    assert str(settings) == ("DataLoader(num_workers=3, prefetch_factor=2, persistent_workers=True, "
                             "pin_memory=True, drop_last=True, sampler=random)")
    assert settings.to_dict()["cpus"] == 4
    assert settings.dataloader_kwargs() == {"num_workers": 3, "prefetch_factor": 2,
                                            "persistent_workers": True, "pin_memory": True,
                                            "drop_last": True}


def test_the_docstring_explains_every_choice() -> None:
    doc = make_loader.__doc__ or ""
    for name in ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "drop_last",
                 "set_epoch", "multiprocessing_context", "worker_init_fn"):
        assert f"``{name}" in doc, name


@pytest.mark.slow
def test_an_epoch_through_two_workers_reads_every_sample_once(packed: Path) -> None:
    ds = packer.open_dataset(packed, decode=False)
    expected = Counter(digest_collate([ds[i] for i in range(len(ds))]))
    ds[0]  # the parent has read before the workers start
    loader = make_loader(ds, 4, num_workers=2, drop_last=False, collate_fn=digest_collate)
    assert loader.persistent_workers and loader.prefetch_factor == 2
    orders = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        got = [item for batch in loader for item in batch]
        assert Counter(got) == expected
        orders.append(got)
    assert orders[0] != orders[1]  # shuffled anew
