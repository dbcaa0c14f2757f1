"""The remote-test servers (tests/servers.py) and the fault proxy (scripts/faultproxy.py), against
real moto and rclone processes on 127.0.0.1. Faults are observed with plain ``http.client`` (and
boto3 where that is what a reader sees)."""

from __future__ import annotations

import base64
import http.client
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from servers import HTTPServer, RcloneS3Server, S3Server, free_port, remote_env, s3_client

ROOT = Path(__file__).resolve().parent.parent
DATA = bytes((i * 7 + i // 251) % 256 for i in range(100_000))  # 100 KB, no two halves alike


def bucket_name(url: str) -> str:
    return url.removeprefix("s3://")


def get(port: int, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
        timeout: float = 10) -> tuple[http.client.HTTPResponse, bytes]:
    """One request on a fresh connection: the response and its body (read to the end)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, headers=headers or {})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response, body


@pytest.fixture
def obj(s3_server: S3Server, s3_bucket: str) -> str:
    """``/<bucket>/data.bin`` holding :data:`DATA`, public so that unsigned requests may read it."""
    s3_server.client().put_object(Bucket=bucket_name(s3_bucket), Key="data.bin", Body=DATA, ACL="public-read")
    return f"/{bucket_name(s3_bucket)}/data.bin"


# -- servers ----------------------------------------------------------------------------------------


def test_s3_server_answers_on_loopback(s3_server: S3Server, s3_bucket: str) -> None:
    assert s3_server.endpoint.startswith("http://127.0.0.1:")
    client = s3_server.client()
    assert bucket_name(s3_bucket) in {b["Name"] for b in client.list_buckets()["Buckets"]}
    client.put_object(Bucket=bucket_name(s3_bucket), Key="a/b.bin", Body=DATA)
    ranged = client.get_object(Bucket=bucket_name(s3_bucket), Key="a/b.bin", Range="bytes=10-99")
    assert ranged["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert ranged["ContentRange"] == f"bytes 10-99/{len(DATA)}"
    assert ranged["Body"].read() == DATA[10:100]


def test_s3_server_reset_and_stop() -> None:
    with S3Server() as server:  # its own server: a reset must not empty the session's buckets
        server.make_bucket("to-forget")
        server.reset()
        assert server.client().list_buckets()["Buckets"] == []
        process = server.process
        assert process is not None
    assert process.poll() is not None and server.process is None


def test_remote_env_is_all_a_client_needs(s3_env: dict[str, str], s3_server: S3Server,
                                          s3_bucket: str) -> None:
    import boto3

    assert s3_env == remote_env(s3_server.endpoint) and os.environ["AWS_ENDPOINT_URL"] == s3_server.endpoint
    client = boto3.session.Session().client("s3")  # nothing passed: the environment only
    client.put_object(Bucket=bucket_name(s3_bucket), Key="k", Body=b"from the environment")
    assert s3_server.client().get_object(Bucket=bucket_name(s3_bucket), Key="k")["Body"].read() == (
        b"from the environment")


def test_s3fs_reads_ranges_with_remote_env(s3_env: dict[str, str], obj: str) -> None:
    s3fs = pytest.importorskip("s3fs")
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.size(obj) == len(DATA)
    assert fs.cat_file(obj, start=1000, end=5000) == DATA[1000:5000]


def test_http_server_ranges(http_server: HTTPServer) -> None:
    (http_server.root / "sub").mkdir()
    (http_server.root / "sub" / "data.bin").write_bytes(DATA)  # written after the start: seen at once
    port, path, n = http_server.port, "/sub/data.bin", len(DATA)
    response, body = get(port, path)
    assert response.status == 200 and body == DATA
    response, body = get(port, path, method="HEAD")
    assert response.status == 200 and response.getheader("Content-Length") == str(n) and body == b""
    for spec, start, stop in [("0-0", 0, 1), ("12345-67889", 12345, 67890), (f"{n - 7}-", n - 7, n),
                              ("-10", n - 10, n), (f"5-{n + 100}", 5, n)]:
        response, body = get(port, path, headers={"Range": f"bytes={spec}"})
        assert response.status == 206, spec
        assert response.getheader("Content-Range") == f"bytes {start}-{stop - 1}/{n}", spec
        assert response.getheader("Content-Length") == str(stop - start), spec
        assert body == DATA[start:stop], spec
    response, _ = get(port, path, headers={"Range": f"bytes={n}-"})
    assert response.status == 416
    assert get(port, "/sub/missing.bin")[0].status == 404


def test_http_server_through_proxy_keeps_206(http_server: HTTPServer) -> None:
    (http_server.root / "data.bin").write_bytes(DATA)
    with FaultProxy(http_server.url) as proxy:
        response, body = get(proxy.port, "/data.bin", headers={"Range": "bytes=100-199"})
    assert response.status == 206 and body == DATA[100:200]
    assert response.getheader("Content-Range") == f"bytes 100-199/{len(DATA)}"
    assert proxy.requests == 1 and proxy.bytes_out == 100


# -- proxy: forwarding ------------------------------------------------------------------------------


def test_boto3_through_proxy_equals_direct(s3_server: S3Server, s3_bucket: str,
                                           fault_proxy: FaultProxy) -> None:
    bucket = bucket_name(s3_bucket)
    direct, proxied = s3_server.client(), s3_client(fault_proxy.url)
    direct.put_object(Bucket=bucket, Key="direct", Body=DATA)
    proxied.put_object(Bucket=bucket, Key="proxied", Body=DATA[::-1])
    for key in ("direct", "proxied"):
        assert proxied.get_object(Bucket=bucket, Key=key)["Body"].read() == (
            direct.get_object(Bucket=bucket, Key=key)["Body"].read())
        a = proxied.get_object(Bucket=bucket, Key=key, Range="bytes=777-9999")
        b = direct.get_object(Bucket=bucket, Key=key, Range="bytes=777-9999")
        assert (a["ContentRange"], a["Body"].read()) == (b["ContentRange"], b["Body"].read())
        assert proxied.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(DATA)
    listed = proxied.list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(o["Key"] for o in listed) == ["direct", "proxied"]
    assert fault_proxy.requests == 8  # 1 put, 2 x (2 gets, 1 head), 1 list
    assert fault_proxy.bytes_out >= 2 * len(DATA) + 2 * (9999 - 777 + 1)


def test_multipart_upload_through_proxy(s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxy) -> None:
    import io

    from boto3.s3.transfer import TransferConfig

    payload = DATA * 60  # 6 MB: two parts of 5 MB minimum
    config = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    proxied = s3_client(fault_proxy.url)
    proxied.upload_fileobj(io.BytesIO(payload), bucket_name(s3_bucket), "mp", Config=config)
    assert s3_server.client().get_object(Bucket=bucket_name(s3_bucket), Key="mp")["Body"].read() == payload
    assert fault_proxy.requests == 4  # create, 2 parts, complete


def test_chunked_and_aws_chunked_uploads_are_forwarded(s3_server: S3Server, s3_bucket: str,
                                                       fault_proxy: FaultProxy) -> None:
    bucket = bucket_name(s3_bucket)
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    conn.request("PUT", f"/{bucket}/chunked", body=iter([DATA[:1000], DATA[1000:]]), encode_chunked=True)
    response = conn.getresponse()
    response.read()
    assert response.status == 200
    # aws-chunked (a streaming upload with a trailing checksum) inside HTTP chunked framing
    crc = base64.b64encode(zlib.crc32(DATA).to_bytes(4, "big"))
    framed = b"%x\r\n%s\r\n0\r\nx-amz-checksum-crc32:%s\r\n\r\n" % (len(DATA), DATA, crc)
    headers = {"Content-Encoding": "aws-chunked",
               "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
               "x-amz-decoded-content-length": str(len(DATA)), "x-amz-trailer": "x-amz-checksum-crc32"}
    conn.request("PUT", f"/{bucket}/aws-chunked", body=iter([framed[:500], framed[500:]]), headers=headers,
                 encode_chunked=True)
    response = conn.getresponse()
    response.read()
    assert response.status == 200
    conn.close()
    direct = s3_server.client()
    for key in ("chunked", "aws-chunked"):
        assert direct.get_object(Bucket=bucket, Key=key)["Body"].read() == DATA, key


# -- proxy: faults ----------------------------------------------------------------------------------


def test_status_fault_answers_s3_errors_without_upstream(fault_proxy: FaultProxy, obj: str) -> None:
    fault_proxy.inject("status", count=2)
    fault_proxy.inject("status", status=500)
    for code, name in [(503, "SlowDown"), (503, "SlowDown"), (500, "InternalError")]:
        response, body = get(fault_proxy.port, obj)
        assert response.status == code
        assert response.getheader("Content-Type") == "application/xml"
        assert f"<Code>{name}</Code>".encode() in body and body.startswith(b"<?xml")
    response, body = get(fault_proxy.port, obj)
    assert response.status == 200 and body == DATA
    assert fault_proxy.requests == 4


def test_status_fault_as_boto3_sees_it(s3_bucket: str, fault_proxy: FaultProxy, obj: str) -> None:
    from botocore.exceptions import ClientError

    client = s3_client(fault_proxy.url, retries={"mode": "standard", "total_max_attempts": 1})
    fault_proxy.inject("status", match="data.bin")
    with pytest.raises(ClientError) as caught:
        client.get_object(Bucket=bucket_name(s3_bucket), Key="data.bin")
    assert caught.value.response["Error"]["Code"] == "SlowDown"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert client.get_object(Bucket=bucket_name(s3_bucket), Key="data.bin")["Body"].read() == DATA


def test_fault_match_and_clear(fault_proxy: FaultProxy, obj: str) -> None:
    fault_proxy.inject("status", match="other-key")
    assert get(fault_proxy.port, obj)[0].status == 200  # not matched: the fault waits
    assert get(fault_proxy.port, obj + "?other-key=1")[0].status == 503  # the query counts too
    fault_proxy.inject("status", count=5)
    fault_proxy.clear()
    assert get(fault_proxy.port, obj)[0].status == 200
    with pytest.raises(ValueError, match="unknown fault"):
        fault_proxy.inject("explode")


def test_reset_fault_sends_half_then_resets(fault_proxy: FaultProxy, obj: str) -> None:
    fault_proxy.inject("reset")
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    conn.request("GET", obj)
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Length") == str(len(DATA))
    received = b""
    with pytest.raises(ConnectionResetError):
        while block := response.read(4096):
            received += block
    assert len(received) <= len(DATA) // 2 and DATA.startswith(received)
    assert get(fault_proxy.port, obj)[1] == DATA  # the next connection is served


def test_reset_fault_as_boto3_sees_it(s3_bucket: str, fault_proxy: FaultProxy, obj: str) -> None:
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import ResponseStreamingError

    client = s3_client(fault_proxy.url, retries={"mode": "standard", "total_max_attempts": 1})
    fault_proxy.inject("reset")
    with pytest.raises((BotoConnectionError, ResponseStreamingError)):
        client.get_object(Bucket=bucket_name(s3_bucket), Key="data.bin")["Body"].read()


def test_truncate_fault_sends_fewer_bytes_than_content_length(fault_proxy: FaultProxy, obj: str) -> None:
    fault_proxy.inject("truncate")
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    conn.request("GET", obj)
    response = conn.getresponse()
    assert response.getheader("Content-Length") == str(len(DATA))
    with pytest.raises(http.client.IncompleteRead) as caught:
        response.read()
    assert caught.value.partial == DATA[:len(DATA) // 2]
    assert caught.value.expected == len(DATA) - len(DATA) // 2
    assert get(fault_proxy.port, obj)[1] == DATA


def test_corrupt_fault_flips_one_byte(fault_proxy: FaultProxy, obj: str) -> None:
    fault_proxy.inject("corrupt", count=1)
    response, body = get(fault_proxy.port, obj)
    assert response.status == 200 and len(body) == len(DATA)
    assert [i for i in range(len(DATA)) if body[i] != DATA[i]] == [len(DATA) // 2]
    assert get(fault_proxy.port, obj)[1] == DATA


def test_stall_fault_times_a_client_out(fault_proxy: FaultProxy, obj: str) -> None:
    fault_proxy.inject("stall", seconds=1.0)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        get(fault_proxy.port, obj, timeout=0.3)
    assert time.monotonic() - start >= 0.3
    assert get(fault_proxy.port, obj)[1] == DATA  # only that request stalled


def test_latency_is_added_to_every_request(fault_proxy: FaultProxy, obj: str) -> None:
    fault_proxy.latency_ms = 50
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    for _ in range(4):  # one kept-alive connection: each request pays the delay again
        start = time.monotonic()
        conn.request("GET", obj, headers={"Range": "bytes=0-9"})
        assert conn.getresponse().read() == DATA[:10]
        assert time.monotonic() - start >= 0.05
    conn.close()


def test_pause_refuses_connections_and_resume_reopens_the_same_port(fault_proxy: FaultProxy,
                                                                   obj: str) -> None:
    port = fault_proxy.port
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    kept.request("GET", obj)
    assert kept.getresponse().read() == DATA
    fault_proxy.pause()
    with pytest.raises(ConnectionRefusedError):
        get(port, obj)
    with pytest.raises((ConnectionError, http.client.HTTPException)):  # open connections are dropped too
        kept.request("GET", obj)
        kept.getresponse().read()
    kept.close()
    fault_proxy.resume()
    assert fault_proxy.port == port and fault_proxy.url == f"http://127.0.0.1:{port}"
    assert get(port, obj)[1] == DATA


def test_proxy_reports_a_dead_upstream_as_502() -> None:
    with FaultProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        response, body = get(proxy.port, "/anything")
    assert response.status == 502 and b"upstream unreachable" in body


def test_faultproxy_command_line(s3_server: S3Server) -> None:
    command = [sys.executable, str(ROOT / "scripts" / "faultproxy.py"), "--upstream", s3_server.endpoint,
               "--port", "0", "--latency-ms", "20"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        start = time.monotonic()
        response, body = get(port, "/")
        assert response.status == 200 and b"ListAllMyBucketsResult" in body
        assert time.monotonic() - start >= 0.02
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err


def test_signed_requests_through_the_proxy_validate(tmp_path: Path) -> None:
    from botocore.exceptions import ClientError

    (tmp_path / "s3").mkdir()
    with RcloneS3Server(tmp_path / "s3", etag_hash="") as server, FaultProxy(server.endpoint) as proxy:
        bucket = bucket_name(server.make_bucket("signed"))
        proxied = s3_client(proxy.url, response_checksum_validation="when_required")
        proxied.put_object(Bucket=bucket, Key="k", Body=DATA)  # SigV4 over the proxy's Host: accepted
        assert (server.root / bucket / "k").read_bytes() == DATA
        assert proxied.get_object(Bucket=bucket, Key="k", Range="bytes=5-9")["Body"].read() == DATA[5:10]
        forged = s3_client(proxy.url, secret_key="wrong")
        with pytest.raises(ClientError) as caught:  # and signatures really are checked
            forged.get_object(Bucket=bucket, Key="k")
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
