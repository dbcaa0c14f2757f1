"""What a cloud client's exception says, read from its structured fields, never its message.

The clients raise different things for one fault: s3fs turns botocore's ``ClientError`` into a
builtin (``FileNotFoundError``, ``PermissionError``, ``OSError`` with an errno) and keeps the
``ClientError``, with the service's error code and the HTTP status, as ``__cause__``; fsspec's
HTTP filesystem raises ``FileNotFoundError`` for a 404 and aiohttp's ``ClientResponseError``
(``.status``) for other statuses; connections that fail raise ``TimeoutError``,
``ConnectionError`` or a client's own connection errors. :func:`facts` collects the types,
statuses, error codes and errnos along the ``__cause__`` chain; :mod:`packer.store.retrying`
decides from them.

A client's exception types are looked up in ``sys.modules``: a client that was never imported
cannot have raised anything, so nothing here imports a client.
"""

from __future__ import annotations

import asyncio
import errno
import sys
from dataclasses import dataclass, field
from typing import Final

__all__ = ["BUCKET_CODES", "DENIED_CODES", "MISSING_CODES", "TRANSIENT_ERRNOS", "Facts", "ShortRead", "facts",
           "is_client_fault"]

#: Service error codes (S3 and S3-compatible, Azure) of a bucket or container that does not exist.
BUCKET_CODES: Final = frozenset({"NoSuchBucket", "ContainerNotFound"})
#: ... of an object that does not exist (S3 answers a HEAD with the bare status as its code).
MISSING_CODES: Final = frozenset({"NoSuchKey", "404", "NotFound", "BlobNotFound"})
#: ... of credentials that are missing, wrong, expired or refused.
DENIED_CODES: Final = frozenset({
    "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "403",
    "ExpiredToken", "InvalidToken", "AuthorizationHeaderMalformed", "AuthenticationFailed",
    "AuthorizationFailure", "AuthorizationPermissionMismatch", "InvalidAuthenticationInfo"})
#: errnos of a transfer that may work when tried again (a dropped, refused or stalled connection,
#: or what s3fs makes of SlowDown, ServiceUnavailable and InternalError: EBUSY, EREMOTEIO).
TRANSIENT_ERRNOS: Final = frozenset(getattr(errno, name) for name in (
    "ECONNREFUSED", "ECONNRESET", "ECONNABORTED", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH", "ENETUNREACH",
    "ENETDOWN", "ENETRESET", "EIO", "EAGAIN", "EBUSY", "EREMOTEIO") if hasattr(errno, name))

#: Base classes of each client's exceptions: (module, class name). Looked up, never imported.
_CLIENT_BASES: Final = (
    ("botocore.exceptions", "BotoCoreError"), ("botocore.exceptions", "ClientError"),
    ("aiohttp", "ClientError"), ("urllib3.exceptions", "HTTPError"), ("http.client", "HTTPException"),
    ("gcsfs.retry", "HttpError"), ("google.auth.exceptions", "GoogleAuthError"),
    ("azure.core.exceptions", "AzureError"), ("botocore.parsers", "ResponseParserError"))
#: Service error codes of throttling and of a server's passing trouble.
_TRANSIENT_CODES: Final = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                                     "ServiceUnavailable", "InternalError", "RequestLimitExceeded"})
#: Client exceptions of a dropped, cut or garbled transfer.
_TRANSIENT_TYPES: Final = (
    ("aiohttp", "ClientConnectionError"), ("aiohttp", "ClientPayloadError"),
    ("botocore.exceptions", "ConnectionError"), ("botocore.exceptions", "HTTPClientError"),
    ("botocore.exceptions", "IncompleteReadError"), ("botocore.parsers", "ResponseParserError"),
    ("urllib3.exceptions", "ProtocolError"), ("http.client", "IncompleteRead"),
    ("ssl", "SSLEOFError"), ("ssl", "SSLZeroReturnError"))
#: Exceptions that mean "no usable credentials" without any HTTP status.
_CREDENTIAL_ERRORS: Final = (
    ("botocore.exceptions", "NoCredentialsError"), ("botocore.exceptions", "PartialCredentialsError"),
    ("google.auth.exceptions", "DefaultCredentialsError"))


class ShortRead(OSError):
    """A response body ended before the bytes asked for (a dropped or truncated transfer)."""


@dataclass(frozen=True)
class Facts:
    """What the exceptions along one ``__cause__`` chain say, field by field."""

    kinds: frozenset[type[BaseException]] = field(default_factory=frozenset)
    statuses: frozenset[int] = field(default_factory=frozenset)
    codes: frozenset[str] = field(default_factory=frozenset)
    errnos: frozenset[int] = field(default_factory=frozenset)
    credentials: bool = False

    def transient(self) -> bool:
        """Whether these facts are of a fault that may pass: a 5xx, 408 or 429 status, a
        throttling code, a timeout, a refused, reset or dropped connection, a short body (by
        type or errno)."""
        return bool(any(s >= 500 or s in (408, 429) for s in self.statuses)
                    or self.codes & _TRANSIENT_CODES
                    or self.kinds & {TimeoutError, ConnectionError, ShortRead, asyncio.IncompleteReadError}
                    or self.errnos & TRANSIENT_ERRNOS
                    or not self.kinds.isdisjoint(_types(_TRANSIENT_TYPES)))


def _types(pairs: tuple[tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    """The classes named in ``pairs`` whose modules are loaded."""
    found = []
    for module_name, name in pairs:
        module = sys.modules.get(module_name)
        cls = getattr(module, name, None) if module is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and its explicit causes (``raise ... from``), outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and all(current is not e for e in seen) and len(seen) < 16:
        seen.append(current)
        current = current.__cause__
    return seen


def _status_and_code(err: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and service error code that ``err``'s own client put on it."""
    status: object = None
    code: object = None
    if isinstance(err, _types((("botocore.exceptions", "ClientError"),))):
        response = getattr(err, "response", None) or {}
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = response.get("Error", {}).get("Code")
    elif isinstance(err, _types((("aiohttp", "ClientResponseError"),))):
        status = getattr(err, "status", None)
    elif isinstance(err, _types((("azure.core.exceptions", "HttpResponseError"),))):
        status, code = getattr(err, "status_code", None), getattr(err, "error_code", None)
    elif isinstance(err, _types((("gcsfs.retry", "HttpError"),))):
        status = getattr(err, "code", None)
    return (status if isinstance(status, int) else None), (str(code) if code else None)


def facts(err: BaseException) -> Facts:
    """The types, HTTP statuses, error codes and errnos of ``err`` and its causes."""
    kinds: set[type[BaseException]] = set()
    statuses: set[int] = set()
    codes: set[str] = set()
    errnos: set[int] = set()
    credential_types = _types(_CREDENTIAL_ERRORS)
    credentials = False
    for each in _chain(err):
        kinds.update(type(each).__mro__[:-1])  # type: ignore[arg-type]  # all but object
        status, code = _status_and_code(each)
        if status is not None:
            statuses.add(status)
        if code is not None:
            codes.add(code)
        if isinstance(each, OSError) and isinstance(each.errno, int):
            errnos.add(each.errno)
        credentials = credentials or isinstance(each, credential_types)
    return Facts(frozenset(kinds), frozenset(statuses), frozenset(codes), frozenset(errnos), credentials)


def is_client_fault(err: BaseException) -> bool:
    """Whether ``err`` is a storage client's report of a fault (anything else is a bug in the
    caller, raised as it is): an ``OSError`` (timeouts and refused connections included), an
    ``asyncio`` short read, a packer store error, or any exception of a loaded client."""
    from packer.errors import StoreError

    return isinstance(err, (OSError, asyncio.IncompleteReadError, StoreError, *_types(_CLIENT_BASES)))
