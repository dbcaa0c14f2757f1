"""The output directory DST and its lifecycle: every state, and every move between them.

States (:class:`DestinationState`), told apart by what DST holds:

* ``EMPTY``: DST is absent or an empty directory; a conversion may start.
* ``FOREIGN``: a file, or a non-empty directory without packer's marker or manifest. Never
  written, never deleted, even with ``overwrite``: packer refuses rather than guess what a stray
  ``--overwrite`` may destroy.
* ``PARTIAL``: packer's in-progress marker and no manifest: a conversion that is running (array
  tasks write into one DST at once) or was interrupted. Nothing on disk tells the two apart, so
  ``resume`` and ``merge`` are safe to run at any time and ``overwrite`` is the user's call.
* ``COMPLETE``: a manifest (``index.json``, written last and atomically): a dataset.

Moves: :meth:`Destination.check` (refuse, touching nothing) -> :meth:`Destination.start`
(clear a replaced dataset, record the plan in the marker, empty the staging area, keep finished
shards when resuming) or :meth:`Destination.claim` (array tasks: record the plan once, then
check it) -> shards are renamed in as they finish -> :meth:`Destination.finish` after the
manifest is in place (drop the marker, staging and receipts). :meth:`Destination.discard_staging`
cleans up after a failed run; finished shards stay for ``--resume``. An update of a COMPLETE DST
moves :meth:`Destination.begin_update` -> :meth:`Destination.end_update`; it stays COMPLETE.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

from packer.conversion.plan import JobPlan, shards_of_task
from packer.conversion.receipts import RECEIPTS_DIR, ShardResult, load_receipt
from packer.errors import OutputError, OutputExistsError, ResumeError
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME, VERSIONS_DIR, Manifest
from packer.format.sample_index import SAMPLES_DIR
from packer.store.durable import atomic_write_bytes, create_exclusively, fsync_dir, is_temporary_name

__all__ = ["TMP_DIR", "UPDATE_NAME", "Destination", "DestinationState"]

#: DST's staging area: shards are written here, then renamed into DST.
TMP_DIR = ".tmp"
#: Present while ``packer update`` writes a new version of a complete DST, or after it was killed.
UPDATE_NAME = ".packer-update"
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
        self.path = os.path.abspath(os.fspath(path))

    def __repr__(self) -> str:
        return f"Destination({self.path!r})"

    @property
    def state(self) -> DestinationState:
        """What DST holds now."""
        dst = self.path
        if not os.path.lexists(dst) or (os.path.isdir(dst) and not os.listdir(dst)):
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

    def check(self, src: str, *, overwrite: bool, resume: bool = False) -> DestinationState:
        """Refuse a DST that must not be written; touch nothing; return its state.

        Raises:
            OutputExistsError: DST is not empty and neither ``overwrite`` nor (for an
                interrupted conversion) ``resume`` allows writing it; the message names the flags.
            OutputError: DST is a file, lies inside SRC (or SRC inside it), or is a foreign
                non-empty directory; or both ``overwrite`` and ``resume`` were asked.
        """
        dst = self.path
        if overwrite and resume:
            raise OutputError("Choose --resume (finish an interrupted conversion) or --overwrite "
                              "(start again), not both.")
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
        if state is DestinationState.PARTIAL and not allowed:
            raise OutputExistsError(f"Destination {dst!r} holds an interrupted conversion: finish it "
                                    "with --resume, or start again with --overwrite.")
        if state is DestinationState.COMPLETE and not allowed:
            raise OutputExistsError(f"Destination {dst!r} is a packer dataset: choose a new directory, "
                                    "or pass --overwrite (overwrite=True) to replace it.")
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
                              "options: nothing to resume. Choose a new directory, or --overwrite it.")
        return manifest

    def start(self, plan: JobPlan, *, keep: bool) -> tuple[str, dict[int, ShardResult]]:
        """Make DST a conversion in progress of ``plan``: return its emptied staging dir and the
        shards kept from an earlier attempt (``keep``, for ``resume``), by number.

        A complete dataset or a conversion that is not kept is cleared first (the marker is
        written before anything is deleted, the manifest goes before any shard, so a run killed
        while clearing leaves an incomplete packer directory, never a complete-looking one).
        """
        os.makedirs(self.path, exist_ok=True)
        if not keep and self.state in (DestinationState.COMPLETE, DestinationState.PARTIAL):
            self._clear()
        staging = self._open(IN_PROGRESS_NAME, plan.to_marker())
        kept = self.keep_finished(plan.shard_fingerprints) if keep else {}
        return staging, kept

    def begin_update(self, plan: JobPlan, from_version: int) -> tuple[str, dict[int, ShardResult]]:
        """Mark a complete DST as being updated from ``from_version`` by ``plan`` (it stays
        complete); return the emptied staging dir and the shards an interrupted run of this
        very update finished (their receipts match), by number."""
        staging = self._open(UPDATE_NAME, {"from_version": from_version, "plan": plan.to_marker()})
        return staging, self.keep_finished(plan.shard_fingerprints)

    def _open(self, marker: str, record: dict[str, Any]) -> str:
        """Write ``marker`` with ``record``; return the emptied staging dir."""
        self.remove_stray_temporaries()
        atomic_write_bytes(os.path.join(self.path, marker), _json_bytes(record))
        return self.emptied(os.path.join(self.path, TMP_DIR))

    def claim(self, plan: JobPlan, task_id: int) -> tuple[str, list[int], dict[int, ShardResult]]:
        """For array task ``task_id``: record ``plan`` unless another task already did, check
        that DST's plan is this one, and return the task's own emptied staging dir, its shard
        numbers and those of them already finished.

        The marker appears atomically, first writer wins (:func:`~packer.store.durable.create_exclusively`),
        so tasks starting together agree.

        Raises:
            ResumeError: DST holds the plan of another source, other options or task count.
        """
        num_tasks = plan.num_tasks or 1
        mine = shards_of_task(plan.num_shards, task_id, num_tasks)
        os.makedirs(self.path, exist_ok=True)
        create_exclusively(os.path.join(self.path, IN_PROGRESS_NAME), _json_bytes(plan.to_marker()))
        recorded = self.marker()
        if recorded.get("fingerprint") != plan.fingerprint:
            raise ResumeError(f"{self.path!r} holds a conversion of another source tree or other "
                              "options: every array task must run the same command. Use a new DST, "
                              "or finish that conversion first.")
        if recorded.get("num_tasks") != plan.num_tasks:
            raise ResumeError(f"{self.path!r} is being converted as {recorded.get('num_tasks')} tasks, "
                              f"not {plan.num_tasks}: every array task must use the same --num-tasks.")
        staging = self.emptied(os.path.join(self.path, TMP_DIR,
                                             f"task-{task_id:05d}-of-{num_tasks:05d}"))
        kept = self.keep_finished([plan.shard_fingerprints[i] for i in mine])
        return staging, mine, {mine[position]: result for position, result in kept.items()}

    def keep_finished(self, fingerprints: Sequence[str]) -> dict[int, ShardResult]:
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

    def discard_staging(self, staging: str | None = None) -> None:
        """Delete what stopped workers left half-written in ``staging`` (default: DST's own);
        finished shards stay in DST."""
        staging = staging or os.path.join(self.path, TMP_DIR)
        if os.path.isdir(staging):
            for name in os.listdir(staging):
                path = os.path.join(staging, name)
                if os.path.isfile(path) or os.path.islink(path):
                    # a worker thread still finishing may remove its own file first (CI saw it
                    # with a thread-pool engine): gone is what we want
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)

    def remove_stray_temporaries(self) -> None:
        """Delete half-written ``.<name>.<pid>.tmp`` files a killed run left (see durable.py)."""
        for folder in (self.path, os.path.join(self.path, SAMPLES_DIR), os.path.join(self.path, VERSIONS_DIR),
                       os.path.join(self.path, RECEIPTS_DIR)):
            if not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                if is_temporary_name(name) and os.path.isfile(path):
                    os.unlink(path)

    def finish(self, manifest: Manifest) -> None:
        """After ``manifest`` is in place: drop the marker, the staging dir, the receipts
        (another ``merge`` finishing at the same time may have dropped them already) and any
        shard file it does not name (a shard renamed in by a run killed before its receipt,
        whose redo came out otherwise: a decoder crash pinned on a file of it)."""
        named = {shard.path for shard in manifest.shards}
        for name in os.listdir(self.path):
            if name.startswith("shard-") and name not in named:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(os.path.join(self.path, name))
        self._close(IN_PROGRESS_NAME)

    def end_update(self) -> None:
        """After the new version's ``index.json`` is in place: drop the update's marker, staging
        and receipts."""
        self._close(UPDATE_NAME)

    def _close(self, marker: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, marker))
        shutil.rmtree(os.path.join(self.path, TMP_DIR), ignore_errors=True)
        shutil.rmtree(os.path.join(self.path, RECEIPTS_DIR), ignore_errors=True)
        fsync_dir(self.path)

    def _clear(self) -> None:
        """Delete the contents of a packer dataset or conversion; keep the directory."""
        marker = os.path.join(self.path, IN_PROGRESS_NAME)
        if not os.path.exists(marker):
            atomic_write_bytes(marker, b"{}\n")
        manifest = os.path.join(self.path, MANIFEST_NAME)
        if os.path.lexists(manifest):
            os.unlink(manifest)
            fsync_dir(self.path)
        for name in os.listdir(self.path):
            if name == IN_PROGRESS_NAME:
                continue
            path = os.path.join(self.path, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)

    @staticmethod
    def emptied(staging: str) -> str:
        """``staging``, created empty (what an earlier attempt left there is gone)."""
        if os.path.isdir(staging):
            shutil.rmtree(staging)
        os.makedirs(staging)
        return staging


def _json_bytes(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8")
