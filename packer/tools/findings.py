"""What ``packer verify`` found: problems by kind, and what was checked (see packer.tools.verify)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MAX_LISTED", "Problem", "VerifyReport"]

#: Problems listed in detail per kind; every one is counted in ``problem_counts``.
MAX_LISTED = 20


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong: the file or sample (relative path), a kind code, and what to know."""

    path: str
    kind: str
    message: str


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_dataset` checked and found.

    ``problems`` lists at most :data:`MAX_LISTED` problems of each kind; ``problem_counts``
    counts them all. ``samples_skipped`` counts samples that ``deep``/``against`` could not
    read because their shard is damaged; ``notes`` says which.
    """

    root: str
    deep: bool
    against: str | None
    num_shards: int
    num_samples: int
    shards_checked: int
    files_checked: int
    bytes_hashed: int
    samples_checked: int
    samples_compared: int
    samples_skipped: int
    problems: tuple[Problem, ...]
    problem_counts: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problem_counts

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys (for ``--json``)."""
        data: dict[str, Any] = {"root": self.root, "ok": self.ok} | asdict(self)
        data["problem_counts"] = dict(sorted(self.problem_counts.items()))
        data["problems"], data["notes"] = list(data["problems"]), list(self.notes)
        return data


class Findings:
    """Problems as they are found: each counted, the first ``MAX_LISTED`` of a kind kept."""

    def __init__(self) -> None:
        self.listed: list[Problem] = []
        self.counts: Counter[str] = Counter()
        self.notes: list[str] = []

    def add(self, path: str, kind: str, message: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= MAX_LISTED:
            self.listed.append(Problem(path, kind, message))
