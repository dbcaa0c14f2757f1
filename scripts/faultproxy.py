#!/usr/bin/env python3
"""An HTTP reverse proxy that adds latency and injects faults, for remote-store benchmarks and tests.

Usage::

    python scripts/faultproxy.py --upstream http://127.0.0.1:9000 [--port 0] [--latency-ms 20]

It prints ``listening on http://127.0.0.1:PORT`` and serves until killed. Every request is forwarded
to ``--upstream`` unchanged (method, path, query, headers including ``Host``, so that SigV4 signatures
made against the proxy's address still validate), after sleeping ``--latency-ms`` (one round trip
to an object store). Request bodies sent chunked are de-chunked and forwarded with a
``Content-Length`` (an ``aws-chunked`` payload inside is left as it is). Responses are streamed back
over HTTP/1.1 keep-alive; one upstream connection is kept per client connection.

Imported (``scripts/`` on ``sys.path``), :class:`FaultProxy` also injects faults for the next
``count`` requests whose path contains ``match``:

* ``status``: answer ``params["status"]`` (default 503) with an S3-style XML error body
  (``SlowDown`` for 503, ``InternalError`` for 500; ``params["code"]`` overrides), upstream untouched;
* ``reset``: forward, send the status line, headers and half the body, then reset the connection;
* ``truncate``: forward, send headers with the full ``Content-Length`` but half the body, then close;
* ``corrupt``: forward, flip one byte in the middle of the body (same length);
* ``stall``: sleep ``params["seconds"]`` (default 1) before answering.

:meth:`FaultProxy.pause` models a server that is down: the listening socket is closed (new
connections are refused) and open client connections are shut down; :meth:`FaultProxy.resume`
listens again on the same port. Standard library only.
"""

from __future__ import annotations

import argparse
import fcntl
import http.client
import signal
import socket
import struct
import sys
import termios
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

FAULTS = ("status", "reset", "truncate", "corrupt", "stall")
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "trailers", "transfer-encoding", "upgrade"})
S3_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied", 404: "NoSuchKey",
            400: "InvalidRequest", 429: "SlowDown"}
BLOCK = 1 << 16


@dataclass
class Fault:
    """One injected fault: what, for how many more requests, on which paths, with what parameters."""

    kind: str
    count: int
    match: str | None
    params: dict[str, Any] = field(default_factory=dict)


def s3_error_body(status: int, code: str, resource: str) -> bytes:
    """An S3-style XML error document."""
    message = "Please reduce your request rate." if code == "SlowDown" else f"Injected fault ({status})."
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
            f"</Message><Resource>{resource}</Resource><RequestId>faultproxy</RequestId></Error>").encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], proxy: FaultProxy) -> None:
        self.proxy = proxy
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a finished or killed reader) is no error worth a traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Forwards each request on this client connection through one upstream connection."""

    protocol_version = "HTTP/1.1"
    server: _Server
    _upstream: http.client.HTTPConnection | None = None

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.proxy._track(self.connection, add=True)

    def finish(self) -> None:
        self.server.proxy._track(self.connection, add=False)
        if self._upstream is not None:
            self._upstream.close()
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a benchmark's proxy must not flood stderr."""

    def do_GET(self) -> None:
        self._proxy()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    # -- request side -------------------------------------------------------------------------------

    def _read_body(self) -> bytes | None:
        """The request body (de-chunked), or None when the client sent no framing at all."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537).strip():  # trailers, dropped
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(16)
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length is not None else None

    def _proxy(self) -> None:
        proxy = self.server.proxy
        try:
            body = self._read_body()
            fault = proxy._take_fault(self.path)
            proxy._count_request()
            if proxy.latency_ms > 0:
                time.sleep(proxy.latency_ms / 1000)
            if fault is not None and fault.kind == "stall":
                time.sleep(float(fault.params.get("seconds", 1.0)))
            if fault is not None and fault.kind == "status":
                self._answer_status(fault)
                return
            try:
                response = self._roundtrip(body)
            except OSError as error:
                self._answer(502, "Bad Gateway", [("Content-Type", "text/plain")],
                             f"faultproxy: upstream unreachable: {error}\n".encode())
                return
            self._relay(response, fault.kind if fault is not None else None)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout):
            self.close_connection = True

    def _upstream_conn(self) -> http.client.HTTPConnection:
        if self._upstream is None:
            proxy = self.server.proxy
            host, port = proxy._upstream_address
            self._upstream = http.client.HTTPConnection(host, port, timeout=proxy.upstream_timeout)
        return self._upstream

    def _roundtrip(self, body: bytes | None) -> http.client.HTTPResponse:
        """Send this request upstream; retry once on a fresh connection if a kept-alive one went stale."""
        for attempt in (0, 1):
            conn = self._upstream_conn()
            reused = conn.sock is not None
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in HOP_BY_HOP and name.lower() not in ("content-length", "expect"):
                        conn.putheader(name, value)
                if body is not None:
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self._upstream = None
                if not reused or attempt:
                    raise
        raise AssertionError("unreachable")

    # -- response side ------------------------------------------------------------------------------

    def _head(self, status: int, reason: str, headers: Iterable[tuple[str, str]]) -> None:
        self.send_response_only(status, reason)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.server.proxy._count_bytes(len(data))

    def _answer(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self._head(status, reason, [*headers, ("Content-Length", str(len(body)))])
        if self.command != "HEAD":
            self._write(body)

    def _answer_status(self, fault: Fault) -> None:
        status = int(fault.params.get("status", 503))
        code = str(fault.params.get("code", S3_CODES.get(status, "InternalError")))
        reason = http.client.responses.get(status, "Error")
        body = s3_error_body(status, code, self.path.split("?")[0])
        self._answer(status, reason, [("Content-Type", "application/xml"),
                                      ("x-amz-request-id", "faultproxy")], body)

    def _relay(self, response: http.client.HTTPResponse, fault: str | None) -> None:
        """Send ``response`` to the client, damaged as ``fault`` says."""
        headers = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
        bodyless = self.command == "HEAD" or response.status in (204, 304) or response.status < 200
        length = response.getheader("Content-Length")
        if fault is None and (bodyless or length is not None):
            self._head(response.status, response.reason, headers)
            if not bodyless:
                self._stream(response)
        else:  # a fault needs the whole body; so does a response with no Content-Length
            data = b"" if bodyless else response.read()
            if fault == "corrupt" and data:
                middle = len(data) // 2
                data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
            if not bodyless:
                headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                headers.append(("Content-Length", str(len(data))))
            self._head(response.status, response.reason, headers)
            if fault in ("reset", "truncate"):
                self._write(data[:len(data) // 2])
                self._hang_up(reset=fault == "reset")
            elif not bodyless:
                self._write(data)
        response.close()
        if response.will_close and self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    def _stream(self, response: http.client.HTTPResponse) -> None:
        while block := response.read(BLOCK):
            self._write(block)

    def _hang_up(self, *, reset: bool) -> None:
        """Close the client connection: cleanly (FIN), or with a reset (RST) once sent data has left."""
        self.close_connection = True
        if self._upstream is not None:  # its response was not read to the end
            self._upstream.close()
            self._upstream = None
        if not reset:
            return
        sock = self.connection
        deadline = time.monotonic() + 1.0
        try:
            while time.monotonic() < deadline:  # Linux: bytes not yet acknowledged (SIOCOUTQ)
                pending = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
                if pending == 0:
                    break
                time.sleep(0.001)
        except OSError:
            pass
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # drops the makefile reference, so that close() really closes
        sock.close()


class FaultProxy:
    """A reverse proxy to ``upstream`` on ``host:port`` (0: a free port) with latency and faults.

    ``requests`` counts the requests clients sent (faulted ones included: a retry shows as one
    more); ``bytes_out`` the response body bytes written to clients. ``latency_ms`` may be changed
    while running; it applies to every request, faulted or not.
    """

    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0, latency_ms: float = 0.0,
                 upstream_timeout: float = 60.0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be an http:// URL, not {upstream!r}")
        self.upstream = upstream
        self._upstream_address = (parts.hostname, parts.port or 80)
        self.host = host
        self.port = port
        self.latency_ms = latency_ms
        self.upstream_timeout = upstream_timeout
        self.requests = 0
        self.bytes_out = 0
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._conns: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (the port is known once started)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> FaultProxy:
        """Listen and serve in a daemon thread."""
        if self._server is None:
            self._server = _Server((self.host, self.port), self)
            self.port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                             name=f"faultproxy:{self.port}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and shut down every client connection."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def pause(self) -> None:
        """Go down: refuse new connections (the listening socket is closed) and drop open ones."""
        self.stop()

    def resume(self) -> None:
        """Come back on the same port."""
        self.start()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def inject(self, fault: str, *, count: int = 1, match: str | None = None, **params: Any) -> None:
        """Apply ``fault`` to the next ``count`` requests whose path (with query) contains ``match``."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
        if count < 1:
            raise ValueError(f"count must be >= 1, not {count}")
        with self._lock:
            self._faults.append(Fault(fault, count, match, params))

    def clear(self) -> None:
        """Forget every pending fault."""
        with self._lock:
            self._faults.clear()

    def _take_fault(self, path: str) -> Fault | None:
        """The first pending fault that matches ``path``, one use of it consumed."""
        with self._lock:
            for fault in self._faults:
                if fault.match is None or fault.match in path:
                    fault.count -= 1
                    if fault.count == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _count_request(self) -> None:
        with self._lock:
            self.requests += 1

    def _count_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_out += n

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="HTTP reverse proxy with per-request latency (for faults, import FaultProxy).")
    parser.add_argument("--upstream", required=True, help="http://HOST:PORT to forward to")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free one)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="sleep before forwarding each request")
    args = parser.parse_args(argv)
    proxy = FaultProxy(args.upstream, host=args.host, port=args.port, latency_ms=args.latency_ms).start()
    print(f"listening on {proxy.url}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
