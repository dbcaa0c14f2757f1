"""Leases: which process may write a dataset now, across hosts, on any store.

A lease is a key under ``.packer-lease/`` created only if it is absent
(:meth:`~packer.store.base.Store.put_if_absent`: a hard link on a file system, NFS included; a
conditional put on object storage), holding a :class:`~packer.store.lease.holder.LeaseHolder`
record: host, pid, command, token, since and until when. Its holder renews it (a forked keeper,
:mod:`packer.store.lease.keeper`: every ``PACKER_LEASE_RENEW`` seconds, default a third of
``PACKER_LEASE_TTL``, default 60) and deletes it when done. Nothing here needs ``flock``, which
some NFS set-ups honour only within one host and object stores do not have.

Two kinds of lease exclude each other: the *exclusive* one (``exclusive.json``: convert, merge,
update, gc, push) and one *shared* lease per array task (``task-00003.json``), which exclude
only the exclusive one and the same task run twice. Each side creates its own key first, then
looks for the other's: of two that start together at least one sees the other and backs off.

A stale lease (expired, or held by a process of this machine that is gone) is taken over, with
a warning that names its holder, never silently, and never by two takers at once: a lease's
content is deleted only by whoever first creates ``.claim-<digest>-<n>.json`` for exactly that
content, and only if the key still holds it (a holder that renewed meanwhile keeps its lease).
A claim whose claimer died is stepped over (``n + 1``) once it is stale itself.

Limits: host clocks must agree (NTP); a holder stopped for longer than the time to live (a
suspended VM) loses its lease and learns it at its next :meth:`Lease.check`, which writers call
before they commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterator

from packer.errors import DatasetBusyError, ObjectNotFoundError, StoreError
from packer.store.base import Store
from packer.store.lease.holder import LeaseHolder, format_time
from packer.store.lease.keeper import Keeper

__all__ = ["EXCLUSIVE", "LEASE_DIR", "Lease", "acquire_lease", "busy_error", "held_lease", "lease_holders",
           "lease_ttl"]

log = logging.getLogger(__name__)

#: The folder (key prefix) of a dataset's leases.
LEASE_DIR = ".packer-lease"
#: The slot of the exclusive lease.
EXCLUSIVE = "exclusive"
_TASK = "task-"
_CLAIM = ".claim-"
#: How long a claim on a stale lease may take before others step over it (seconds).
_CLAIM_TTL = 30.0
_ATTEMPTS = 20
#: Seconds before its expiry a holder stops deleting its own lease outright (clock skew).
_RELEASE_MARGIN = 5.0


def lease_ttl() -> tuple[float, float]:
    """The lease's time to live and renewal interval, in seconds (``PACKER_LEASE_TTL``,
    ``PACKER_LEASE_RENEW``).

    Raises:
        ValueError: a variable is not a positive number, or renewal is not more often than expiry.
    """
    ttl = _seconds("PACKER_LEASE_TTL", 60.0)
    every = _seconds("PACKER_LEASE_RENEW", ttl / 3)
    if every >= ttl:
        raise ValueError(f"PACKER_LEASE_RENEW ({every:g} s) must be shorter than PACKER_LEASE_TTL "
                         f"({ttl:g} s): a lease renewed less often than it expires is lost")
    return ttl, every


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name}={text!r} is not a positive number of seconds")
    return value


def _key(slot: str) -> str:
    return f"{LEASE_DIR}/{slot}.json"


def _slot(task: int | None) -> str:
    return EXCLUSIVE if task is None else f"{_TASK}{task:05d}"


def _read(store: Store, key: str) -> bytes | None:
    try:
        return store.read(key)
    except ObjectNotFoundError:
        return None


class Lease:
    """A lease this process holds (from :func:`acquire_lease`); :meth:`release` it when done."""

    def __init__(self, store: Store, slot: str, holder: LeaseHolder, keeper: Keeper | None) -> None:
        self.store = store
        self.slot = slot
        self.holder = holder
        self._keeper = keeper

    def __repr__(self) -> str:
        return f"Lease({self.store.describe(_key(self.slot))!r}, {self.holder.command!r})"

    def check(self) -> None:
        """Make sure this process still holds the lease (call it before a commit).

        Raises:
            DatasetBusyError: the lease expired (its keeper could not renew it) or another
                process took it over; nothing should be committed.
        """
        data = _read(self.store, _key(self.slot))
        current = LeaseHolder.from_bytes(data) if data is not None else None
        if current is None or current.token != self.holder.token:
            now = f"; {current.describe()} holds it now" if current is not None else ""
            raise DatasetBusyError(f"This {self.holder.command} of {self.store.url!r} lost its lease "
                                   f"(it was taken over while this process did not renew it{now}). "
                                   "Nothing was committed: run it again once the other is done.")
        if time.time() >= current.expires:
            raise DatasetBusyError(f"This {self.holder.command} of {self.store.url!r} could not renew "
                                   f"its lease, which expired at {format_time(current.expires)}. "
                                   "Nothing was committed: check the storage, then run it again.")

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still this process's (idempotent)."""
        if self._keeper is None:
            return
        self._keeper.stop()
        self._keeper = None
        with contextlib.suppress(StoreError, OSError):
            _drop_own(self.store, _key(self.slot), self.holder)


def acquire_lease(store: Store, command: str, *, task: int | None = None, what: str = "") -> Lease:
    """Take the exclusive lease of the dataset at ``store`` (or array task ``task``'s shared one).

    ``command`` names the holder in messages and in ``dataset_info``; ``what`` is the phrase a
    refusal starts with (default ``"<command> <url>"``). A stale lease is taken over with a
    warning that names its holder.

    Raises:
        DatasetBusyError: a live lease excludes this one; the message names its holder (host,
            pid, command, since and until when).
        StoreError: the store cannot create a key only if it is absent (an HTTP URL).
    """
    ttl, every = lease_ttl()
    slot = _slot(task)
    mine = LeaseHolder.new(command, ttl)
    phrase = what or f"{command} {store.url!r}"
    taken = _take_slot(store, slot, mine, phrase)
    try:
        others = _others(store, slot)
        if others:
            raise busy_error(phrase, others)
        keeper = Keeper.start(store, _key(slot), mine, ttl=ttl, every=every)
    except BaseException:
        _drop_own(store, _key(slot), mine)
        raise
    if taken is not None:
        log.warning("took over the lease of %s from %s", store.url, taken)
    return Lease(store, slot, mine, keeper)


@contextlib.contextmanager
def held_lease(store: Store, command: str, *, task: int | None = None, what: str = "") -> Iterator[Lease]:
    """:func:`acquire_lease` for the duration of a block; released however the block ends."""
    lease = acquire_lease(store, command, task=task, what=what)
    try:
        yield lease
    finally:
        lease.release()


def lease_holders(store: Store) -> list[tuple[str, LeaseHolder]]:
    """Every lease record under the store, by slot (``exclusive``, ``task-00003``), stale ones
    included (:meth:`LeaseHolder.stale_reason` tells). Empty where the store cannot list (HTTP)."""
    if store.read_only:
        return []
    found: list[tuple[str, LeaseHolder]] = []
    for key in sorted(store.list(LEASE_DIR)):
        slot = key.rsplit("/", 1)[-1].removesuffix(".json")
        if slot.startswith(_CLAIM) or not key.endswith(".json"):
            continue
        data = _read(store, key)
        holder = LeaseHolder.from_bytes(data) if data is not None else None
        if holder is not None:
            found.append((slot, holder))
    return found


def busy_error(phrase: str, holders: list[LeaseHolder]) -> DatasetBusyError:
    """The refusal to ``phrase`` (``"Cannot update '/data/x'"``...) while ``holders`` hold leases."""
    named = "; ".join(holder.describe() for holder in holders[:4])
    more = f" (and {len(holders) - 4} more)" if len(holders) > 4 else ""
    return DatasetBusyError(f"Cannot {phrase}: it is in use by {named}{more}. Wait for it to finish, "
                            "then run this again (a lease is renewed while its holder runs; one whose "
                            "holder died expires and is then taken over).")


def _take_slot(store: Store, slot: str, mine: LeaseHolder, phrase: str) -> str | None:
    """Create ``slot``'s key for ``mine``, taking over a stale one; return what was taken over.

    Raises:
        DatasetBusyError: a live holder has it.
    """
    key, data, taken = _key(slot), mine.to_bytes(), None
    for _ in range(_ATTEMPTS):
        if store.put_if_absent(key, data):
            return taken
        seen = _read(store, key)
        if seen is None:
            continue  # released meanwhile: try again
        current = LeaseHolder.from_bytes(seen)
        if current is not None and current.token == mine.token:
            return taken  # a retried create whose first try had succeeded
        reason = "its record cannot be read" if current is None else current.stale_reason()
        if reason is None and current is not None:
            raise busy_error(phrase, [current])
        if _remove_version(store, key, seen):
            who = current.describe() if current is not None else store.describe(key)
            taken = f"{who}, {reason}"
        else:
            time.sleep(0.05)  # another process is taking it over: look again
    raise DatasetBusyError(f"Cannot {phrase}: its lease ({store.describe(key)}) changed hands "
                           f"{_ATTEMPTS} times while this process tried to take it. Run this again.")


def _others(store: Store, slot: str) -> list[LeaseHolder]:
    """The live holders that exclude ``slot``'s (stale ones are taken over on the way)."""
    if slot == EXCLUSIVE:
        keys = [key for key in sorted(store.list(LEASE_DIR))
                if key.rsplit("/", 1)[-1].startswith(_TASK) and key.endswith(".json")]
    else:
        keys = [_key(EXCLUSIVE)]
    live = []
    for key in keys:
        data = _read(store, key)
        holder = LeaseHolder.from_bytes(data) if data is not None else None
        if data is None or holder is None:
            continue
        reason = holder.stale_reason()
        if reason is None:
            live.append(holder)
        elif _remove_version(store, key, data):
            log.warning("removed the stale lease of %s: %s, %s", store.url, holder.describe(), reason)
    return live


def _drop_own(store: Store, key: str, mine: LeaseHolder) -> None:
    """Delete ``key`` if it holds ``mine``'s lease. While it has not expired nobody may take it
    over (its holder, this process, is alive), so it is deleted at once: no claim is needed, and
    none could be made on a full disk (a conversion that failed for want of space must still let
    go of DST). An expired one may be being taken over: only a claim's winner deletes it."""
    data = _read(store, key)
    current = LeaseHolder.from_bytes(data) if data is not None else None
    if data is None or current is None or current.token != mine.token:
        return
    if time.time() < current.expires - _RELEASE_MARGIN:
        store.delete(key)
    else:
        _remove_version(store, key, data)


def _remove_version(store: Store, key: str, seen: bytes) -> bool:
    """Delete ``key`` if it still holds exactly ``seen``; whether this call did. Only the first
    to create a claim for these bytes may delete them (see the module docstring)."""
    digest = hashlib.sha256(seen).hexdigest()[:16]
    me = LeaseHolder.new("takeover", _CLAIM_TTL)
    claims: list[str] = []
    number = 1
    for _ in range(2 * _ATTEMPTS):
        claim = f"{LEASE_DIR}/{_CLAIM}{digest}-{number}.json"
        claims.append(claim)
        if store.put_if_absent(claim, me.to_bytes()):
            break
        data = _read(store, claim)
        other = LeaseHolder.from_bytes(data) if data is not None else None
        if other is not None and other.token == me.token:
            break  # a retried create whose first try had succeeded
        claims.pop()
        if data is None:
            continue  # its claimer just finished: try the same number again
        if other is not None and other.stale_reason() is None:
            return False  # another process is on it
        claims.append(claim)  # its claimer died: step over it
        number += 1
    else:
        return False
    try:
        if _read(store, key) != seen:
            return False  # renewed, released or taken meanwhile
        store.delete(key)
        return True
    finally:
        for claim in claims:
            with contextlib.suppress(StoreError, OSError):
                store.delete(claim)
