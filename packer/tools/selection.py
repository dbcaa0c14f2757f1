"""Which samples of a packed dataset to look at: classes by name, then some samples of each.

``packer preview`` shows a seeded random choice per class and ``packer export`` writes the first
samples of each class; both name classes the same way (``--classes a,b``). Everything here works
on the targets array alone (one stable sort), so it stays fast for a million samples, and it is
torch-free.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

import numpy as np

from packer.errors import ShardError, UnknownNameError

__all__ = ["class_members", "pick_samples", "select_classes"]

_LISTED = 20


def _unknown(name: str, classes: Sequence[str]) -> UnknownNameError:
    close = difflib.get_close_matches(name, classes, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    shown = ", ".join(repr(c) for c in classes[:_LISTED])
    more = f", ... ({len(classes)} in all; `packer info DST` lists them)" if len(classes) > _LISTED else ""
    return UnknownNameError(f"The dataset has no class {name!r}.{hint} Its classes: {shown}{more}.")


def select_classes(classes: Sequence[str], wanted: Iterable[str] | None = None) -> list[int]:
    """Indices of the classes named in ``wanted``, ascending (dataset order), without repeats.

    Each item of ``wanted`` is a class name or a comma-separated list of them (``"cat,dog"``);
    an item that is itself a class name is never split, so names holding commas still work.
    ``None`` selects every class.

    Raises:
        UnknownNameError: a name the dataset lacks; the message lists the valid names.
        ValueError: ``wanted`` names no class at all.
    """
    if wanted is None:
        return list(range(len(classes)))
    index = {name: i for i, name in enumerate(classes)}
    chosen: set[int] = set()
    for item in wanted:
        names = [item] if item in index else [n.strip() for n in item.split(",") if n.strip()]
        for name in names:
            if name not in index:
                raise _unknown(name, classes)
            chosen.add(index[name])
    if not chosen:
        raise ValueError("no class selected: give class names, e.g. classes=cat,dog")
    return sorted(chosen)


def class_members(targets: np.ndarray, num_classes: int) -> list[np.ndarray]:
    """Sample indices of each class, ascending; one stable sort instead of a scan per class.

    Raises:
        ShardError: a target is not a class index (the sample index is damaged).
    """
    labels = np.asarray(targets, dtype=np.int64)
    if labels.size and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ShardError(f"targets outside 0..{num_classes - 1}: the sample index is damaged "
                         "(verify_dataset(deep=True)).")
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=num_classes)
    return np.split(order, np.cumsum(counts)[:-1])


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a fixed, well-spread hash of ``uint64`` values (wrapping arithmetic)."""
    x = values ^ (values >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


def pick_samples(
    members: Sequence[np.ndarray],
    class_ids: Iterable[int],
    *,
    per_class: int | None,
    seed: int | None = None,
) -> dict[int, list[int]]:
    """Up to ``per_class`` sample indices of each class in ``class_ids``, each list ascending.

    ``seed=None`` takes the first samples in dataset order. An integer seed (0 to 2**64 - 1)
    takes the samples whose seeded hash of their index is smallest: a random-looking choice
    that depends on nothing but the seed and the indices (not on NumPy's version, nor on which
    other classes are picked), and a larger ``per_class`` only adds samples to a smaller one's.
    ``per_class=None`` takes every sample.
    """
    if per_class is not None and per_class < 1:
        raise ValueError(f"per_class must be at least 1, not {per_class}")
    if seed is not None and not 0 <= seed < 2**64:
        raise ValueError(f"seed must be from 0 to 2**64 - 1, not {seed}")
    picked: dict[int, list[int]] = {}
    for class_id in class_ids:
        pool = np.asarray(members[class_id], dtype=np.int64)
        k = len(pool) if per_class is None else min(per_class, len(pool))
        if seed is None or k == len(pool):
            chosen = pool[:k]
        else:
            # SplitMix64's output number index + 1 from state ``seed``.
            keys = _mix(np.uint64(seed) + (pool.astype(np.uint64) + np.uint64(1)) * _GOLDEN)
            chosen = np.sort(pool[np.argsort(keys, kind="stable")[:k]])
        picked[class_id] = [int(i) for i in chosen]
    return picked
