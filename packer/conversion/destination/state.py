"""The output directory DST: its states, and the refusals that guard every move between them.

States (:class:`DestinationState`), told apart by what DST holds:

* ``EMPTY``: DST is absent or an empty directory; a conversion may start.
* ``FOREIGN``: a file, or a non-empty directory without packer's marker or manifest. Never
  written, never deleted, even with ``overwrite``: packer refuses rather than guess what a stray
  ``--overwrite`` may destroy.
* ``PARTIAL``: packer's in-progress marker and no manifest: a conversion that is running (array
  tasks write into one DST at once) or was interrupted. DST's lease tells the two apart: a
  running conversion holds it (:mod:`packer.conversion.destination.lock`), an interrupted one left none, or
  a stale one that the next run takes over.
* ``COMPLETE``: a manifest (``index.json``, written last and atomically): a dataset.

Moves: :meth:`Destination.check` refuses, touching nothing (and names the process that holds
DST's lease, if one does, rather than advise to resume a conversion that is running); every
move after it lives in :mod:`packer.conversion.destination.lifecycle`, each behind one context manager that
holds the lease and either finishes or discards. Packer's own bookkeeping in DST (the lease
folder, an older packer's lock file) makes no directory non-empty or foreign.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Sequence
from typing import Any

from packer.conversion.destination.lock import LEASE_DIR, LOCK_NAME
from packer.conversion.plan import JobPlan
from packer.conversion.receipts import ShardResult, load_receipt
from packer.errors import OutputError, OutputExistsError
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME, Manifest
from packer.store.lease.claim import EXCLUSIVE, busy_error, lease_holders
from packer.store.lease.holder import LeaseHolder
from packer.store.local import LocalStore
from packer.store.urls import is_url

__all__ = ["OWN_NAMES", "TMP_DIR", "UPDATE_NAME", "Destination", "DestinationState", "json_bytes"]

#: DST's staging area: shards are written here, then renamed into DST.
TMP_DIR = ".tmp"
#: Present while ``packer update`` writes a new version of a complete DST, or after it was killed.
UPDATE_NAME = ".packer-update"
#: Packer's bookkeeping in DST, which neither makes it non-empty nor is cleared with it.
#: What the scan of SRC kept for later runs over it (an archive's index), while a conversion is
#: not complete; with the lease and the lock, a DST holding only these is empty.
SCANS_DIR = ".packer-scans"
OWN_NAMES = frozenset({LEASE_DIR, LOCK_NAME, SCANS_DIR})
_SNIFF_BYTES = 64 << 20


class DestinationState(str, enum.Enum):
    """What DST holds; see the module docstring."""

    EMPTY = "empty"
    FOREIGN = "foreign"
    PARTIAL = "partial"
    COMPLETE = "complete"


class Destination:
    """The output directory of one conversion (an absolute path); see the module docstring."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if is_url(path):  # else "s3://b/x" would quietly become the local folder ./s3:/b/x
            raise OutputError(f"{os.fspath(path)!r} is a URL: only convert() (packer convert) writes into "
                              "a URL, through a local staging folder. Do this on a local dataset, then "
                              "publish it with packer push.")
        self.path = os.path.abspath(os.fspath(path))

    def __repr__(self) -> str:
        return f"Destination({self.path!r})"

    @property
    def state(self) -> DestinationState:
        """What DST holds now."""
        dst = self.path
        if not os.path.lexists(dst) or (os.path.isdir(dst) and not set(os.listdir(dst)) - OWN_NAMES):
            return DestinationState.EMPTY
        if not os.path.isdir(dst) or not self._is_packers():
            return DestinationState.FOREIGN
        if os.path.exists(os.path.join(dst, MANIFEST_NAME)):
            return DestinationState.COMPLETE
        return DestinationState.PARTIAL

    def _is_packers(self) -> bool:
        """Whether DST holds packer's marker, or an ``index.json`` that is a packer manifest
        (``index.json`` is a common name: its mere presence does not make a directory packer's)."""
        if os.path.exists(os.path.join(self.path, IN_PROGRESS_NAME)):
            return True
        # An array task between writing its marker aside and linking it into place (claim):
        # another task starting at that instant must see a conversion, not a foreign directory.
        aside = f".{IN_PROGRESS_NAME}."
        if any(name.startswith(aside) and name.endswith(".tmp") for name in os.listdir(self.path)):
            return True
        try:
            with open(os.path.join(self.path, MANIFEST_NAME), "rb") as handle:
                text = handle.read(_SNIFF_BYTES + 1)
            data = json.loads(text) if len(text) <= _SNIFF_BYTES else None
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and data.get("format") == "packer"

    def check(self, src: str, *, overwrite: bool, resume: bool = False,
              task: bool = False) -> DestinationState:
        """Refuse a DST that must not be written; touch nothing; return its state (``task``:
        for an array task, which runs alongside the other tasks).

        Raises:
            DatasetBusyError: another process holds DST's lease (for an array task: an
                exclusive one); the message names it.
            OutputExistsError: DST is not empty and neither ``overwrite`` nor (for an
                interrupted conversion) ``resume`` allows writing it; the message names the flags.
            OutputError: DST is a file, lies inside SRC (or SRC inside it), or is a foreign
                non-empty directory; or both ``overwrite`` and ``resume`` were asked.
        """
        dst = self.path
        if overwrite and resume:
            raise OutputError("Choose resume=True (finish an interrupted conversion) or "
                              "overwrite=True (start again), not both.")
        real_dst, real_src = os.path.realpath(dst), os.path.realpath(src)
        if real_dst == real_src or real_dst.startswith(real_src + os.sep):
            raise OutputError(f"Destination {dst!r} is inside the source {src!r}: it would become "
                              "part of the tree it packs. Choose a directory outside the source.")
        if real_src.startswith(real_dst.rstrip(os.sep) + os.sep):
            raise OutputError(f"The source {src!r} is inside the destination {dst!r}: writing there "
                              "could delete it. Choose a destination outside the source.")
        if os.path.lexists(dst) and not os.path.isdir(dst):
            raise OutputError(f"Destination {dst!r} exists and is not a directory: choose another path.")
        state = self.state
        allowed = overwrite or resume
        if state is DestinationState.FOREIGN:
            if allowed:
                raise OutputError(f"Destination {dst!r} is not empty and is not a packer dataset: "
                                  "packer will not delete or resume it. Choose a new directory.")
            raise OutputExistsError(f"Destination {dst!r} is not empty: choose a new directory.")
        live = self.live_holders(exclusive_only=task)
        if live:
            raise busy_error(f"convert into {dst!r}", live)
        if state is DestinationState.PARTIAL and not allowed:
            raise OutputExistsError(f"Destination {dst!r} holds an interrupted conversion: finish it "
                                    "with resume=True, or start again with overwrite=True.")
        if state is DestinationState.COMPLETE and not allowed:
            raise OutputExistsError(f"Destination {dst!r} is a packer dataset: choose a new directory, "
                                    "or pass overwrite=True to replace it.")
        return state

    def marker(self) -> dict[str, Any]:
        """What DST's in-progress marker recorded ({} if absent or unreadable)."""
        try:
            with open(os.path.join(self.path, IN_PROGRESS_NAME), encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def recorded_plan(self) -> JobPlan:
        """The plan DST's marker recorded (raises OutputError when there is none)."""
        return JobPlan.from_marker(self.marker(), self.path)

    def ensure_complete(self, fingerprint: str) -> Manifest:
        """DST's manifest, after checking DST is a complete dataset of the plan ``fingerprint``.

        Raises:
            OutputError: DST is a dataset of another source tree or other options.
        """
        manifest = Manifest.load(self.path)
        if manifest.extra.get("plan_fingerprint") != fingerprint:
            raise OutputError(f"{self.path!r} is a complete dataset of another source tree or other "
                              "options: nothing to resume. Choose a new directory, or replace it "
                              "(overwrite=True).")
        return manifest

    def finished(self, fingerprints: Sequence[str]) -> dict[int, ShardResult]:
        """The shards already finished in DST for these planned ``fingerprints`` (by position).
        A shard is kept when its receipt matches the planned shard and its file is there with
        the size the receipt records. (A shard renamed in whose receipt was never written is
        written again: it gets the same content name, and the file already there is kept.)"""
        kept: dict[int, ShardResult] = {}
        for index, fingerprint in enumerate(fingerprints):
            receipt = load_receipt(self.path, fingerprint)
            if receipt is not None:
                kept[index] = receipt
        return kept

    def live_holders(self, *, exclusive_only: bool = False) -> list[LeaseHolder]:
        """The processes holding DST's lease now (stale leases left out): the exclusive holder
        and the array tasks, or the exclusive holder only."""
        if not os.path.isdir(os.path.join(self.path, LEASE_DIR)):
            return []
        return [holder for slot, holder in lease_holders(LocalStore(self.path))
                if holder.stale_reason() is None and (slot == EXCLUSIVE or not exclusive_only)]


def json_bytes(record: dict[str, Any]) -> bytes:
    """A marker's bytes: sorted, indented JSON."""
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8")
