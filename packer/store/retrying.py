"""Retries for remote stores: what is transient, how long to back off, and the one error after.

Transient faults (5xx, 408, 429, throttling such as S3's ``SlowDown``, timeouts, refused or
dropped connections, a body shorter than asked) are retried with exponential backoff and full
jitter; a missing object or bucket, a refused credential, or any other request the store refuses
(a 4xx) is not (retrying cannot fix it). After the last try the caller gets one
:class:`~packer.errors.StoreUnavailableError` naming the URL and the cause. What a fault is comes
from the exception's structured fields (:mod:`packer.store.clienterrors`), never its message.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from packer.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ObjectNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from packer.store.clienterrors import (
    BUCKET_CODES,
    DENIED_CODES,
    MISSING_CODES,
    ShortRead,
    facts,
    is_client_fault,
)

__all__ = ["RetryPolicy", "ShortRead", "classify", "retry"]

log = logging.getLogger(__name__)

T = TypeVar("T")

@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more tries after the first, waiting about ``base * 2**n`` (capped at ``cap``)
    seconds with full jitter: the defaults ride out about half a minute of outage."""

    retries: int = 8
    base: float = 0.25
    cap: float = 8.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before try ``attempt + 1`` (full jitter, so clients spread out)."""
        return random.uniform(0, min(self.cap, self.base * (2 ** attempt)))  # noqa: S311

    def budget(self) -> float:
        """The longest total wait, for messages."""
        return float(sum(min(self.cap, self.base * (2 ** n)) for n in range(self.retries)))


def classify(err: BaseException, what: str) -> StoreError | None:
    """The final error for ``err`` (a missing object or bucket, refused access), or ``None`` when
    it is transient and worth another try. ``what`` names the URL for the message.

    Decided from structured fields only (:func:`~packer.store.clienterrors.facts`): exception
    types, HTTP status, a service's error code, errno; never from message text.
    """
    if isinstance(err, StoreUnavailableError):
        return None
    if isinstance(err, StoreError):
        return err
    found = facts(err)
    if found.codes & BUCKET_CODES:
        return BucketNotFoundError(f"{what}: the bucket does not exist ({err}). Check the URL "
                                   "and the endpoint (AWS_ENDPOINT_URL).")
    if FileNotFoundError in found.kinds or 404 in found.statuses or found.codes & MISSING_CODES:
        return ObjectNotFoundError(f"{what} does not exist. Check the URL, or push the dataset "
                                   "there first (`packer push`).")
    if (PermissionError in found.kinds or found.statuses & {401, 403} or found.codes & DENIED_CODES
            or found.credentials):
        return AccessDeniedError(f"{what}: access denied ({err}). Check the credentials "
                                 "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or storage_options=).")
    if found.transient():
        return None
    return StoreError(f"{what}: the store refused the request ({type(err).__name__}: {err}); trying "
                      "again would not help. Check the URL and storage_options=.")


def retry(call: Callable[[], T], what: str, policy: RetryPolicy) -> T:
    """``call()``, tried again on transient faults; see the module docstring.

    Raises:
        ObjectNotFoundError, AccessDeniedError: at once, not retried.
        StoreUnavailableError: still failing after ``policy.retries`` more tries.
    """
    attempt = 0
    while True:
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - every client error is classified below
            if not is_client_fault(err):
                raise
            final = classify(err, what)
            if final is not None:
                raise final from err
            if attempt >= policy.retries:
                raise StoreUnavailableError(
                    f"{what} kept failing after {attempt + 1} tries over about "
                    f"{policy.budget():.0f} s: {type(err).__name__}: {err}. Check the server or "
                    "the network, then run again.") from err
            wait = policy.delay(attempt)
            log.info("retrying %s in %.2f s after %s: %s", what, wait, type(err).__name__, err)
            time.sleep(wait)
            attempt += 1
