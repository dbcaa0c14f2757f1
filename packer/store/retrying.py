"""Retries for remote stores: what is transient, how long to back off, and the one error after.

Transient faults (5xx, throttling such as S3's ``SlowDown``, timeouts, refused or dropped
connections, a body shorter than asked) are retried with exponential backoff and full jitter;
a missing object or a refused credential is not (retrying cannot fix it). After the last try
the caller gets one :class:`~packer.errors.StoreUnavailableError` naming the URL and the cause.
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

__all__ = ["RetryPolicy", "ShortRead", "classify", "retry"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_ACCESS_WORDS = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden",
                 "ExpiredToken", "InvalidToken", "Unable to locate credentials", "NoCredentials",
                 "AuthorizationHeaderMalformed")


class ShortRead(OSError):
    """A response body ended before the bytes asked for (a dropped or truncated transfer)."""


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


#: Packages whose exceptions are a client's report of a fault (anything else is a bug: raised as is).
_CLIENT_PACKAGES = frozenset({"aiohttp", "botocore", "aiobotocore", "s3fs", "fsspec", "gcsfs", "adlfs",
                              "azure", "google", "urllib3", "requests", "asyncio"})


def _from_client(err: BaseException) -> bool:
    return (isinstance(err, OSError | TimeoutError | StoreError)
            or type(err).__module__.split(".")[0] in _CLIENT_PACKAGES)


def classify(err: BaseException, what: str) -> StoreError | None:
    """The final error for ``err`` (a missing object, refused access), or ``None`` when it is
    transient and worth another try. ``what`` names the URL for the message."""
    if isinstance(err, StoreError) and not isinstance(err, StoreUnavailableError):
        return err
    text = f"{type(err).__name__}: {err}"
    status = getattr(err, "status", None)  # aiohttp's ClientResponseError (HTTP stores)
    if isinstance(err, FileNotFoundError) or status == 404 or "NoSuchKey" in text or "NoSuchBucket" in text:
        if "bucket" in text.lower() and ("NoSuchBucket" in text or "does not exist" in text):
            return BucketNotFoundError(f"{what}: the bucket does not exist ({err}). Check the URL "
                                       "and the endpoint (AWS_ENDPOINT_URL).")
        return ObjectNotFoundError(f"{what} does not exist. Check the URL, or push the dataset "
                                   "there first (`packer push`).")
    if isinstance(err, PermissionError) or status in (401, 403) or any(w in text for w in _ACCESS_WORDS):
        return AccessDeniedError(f"{what}: access denied ({err}). Check the credentials "
                                 "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or storage_options=).")
    return None


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
            if not _from_client(err):
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
