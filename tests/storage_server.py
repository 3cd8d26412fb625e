"""A local S3 server for tests, and a fault-injecting HTTP proxy in front of it.

:class:`S3Server` runs moto's standalone server (``moto.server.ThreadedMotoServer``) in a thread
on 127.0.0.1, on a free port, with made-up credentials that only the test sees (the environment
variables are set while the server runs and restored after, and the AWS config files point at
nothing, so a developer's real credentials are never read or sent).

:class:`FaultProxy` is a small threaded HTTP server on 127.0.0.1 that forwards every request to a
target (the moto server) and, as configured, delays each request, answers ``503 SlowDown`` or
drops the connection (a TCP reset) for a deterministic set of objects, or stops answering
altogether; it counts the requests it saw and the faults it injected. Faults are chosen per object
key, not at random: a key is faulty when ``crc32(key) % 1000 < fraction * 1000``, and a faulty key
fails its first ``times`` requests, so a test knows exactly which reads must be retried.

Pytest fixtures ``s3_server`` and ``fault_proxy`` wrap them; a test module imports them
(``from storage_server import s3_server, fault_proxy  # noqa: F401``).

Both need the ``test`` extra (``moto[server]``, ``s3fs``); tests skip cleanly without them.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

#: Credentials moto accepts (it checks none); real ones are never used by the tests.
TEST_KEY = "extsrc-test-key"
TEST_SECRET = "extsrc-test-secret"
TEST_REGION = "us-east-1"

_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": TEST_KEY,
    "AWS_SECRET_ACCESS_KEY": TEST_SECRET,
    "AWS_DEFAULT_REGION": TEST_REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
_CLEARED_ENV = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
                "AWS_ENDPOINT_URL_S3")


@contextlib.contextmanager
def fake_credentials() -> Iterator[None]:
    """Set the made-up credentials in ``os.environ`` for the ``with`` block only."""
    saved = {k: os.environ.get(k) for k in (*_TEST_ENV, *_CLEARED_ENV)}
    os.environ.update(_TEST_ENV)
    for k in _CLEARED_ENV:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def storage_options(endpoint: str, **extra: Any) -> dict[str, Any]:
    """s3fs options with the made-up credentials, reaching the S3 endpoint at ``endpoint``."""
    return {"key": TEST_KEY, "secret": TEST_SECRET, "endpoint_url": endpoint,
            "client_kwargs": {"region_name": TEST_REGION}, **extra}


class S3Server:
    """moto's S3 server on ``127.0.0.1:<free port>``; use as a context manager."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        # werkzeug logs every request at INFO; the tests' output stays readable without it.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._env = fake_credentials()
        self.endpoint = ""

    def __enter__(self) -> S3Server:
        self._env.__enter__()
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._server.stop()
        finally:
            self._env.__exit__(None, None, None)

    def storage_options(self, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
        """s3fs options reaching this server (or ``endpoint``, e.g. a :class:`FaultProxy`)."""
        return storage_options(endpoint or self.endpoint, **extra)

    def client(self) -> Any:
        """A boto3 S3 client talking to the server directly (not through a proxy)."""
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=TEST_REGION,
            aws_access_key_id=TEST_KEY, aws_secret_access_key=TEST_SECRET,
        )

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (moto keeps buckets for the whole test process)."""
        self.client().create_bucket(Bucket=name)
        return name

    def upload_tree(self, local: Path, bucket: str, prefix: str = "") -> list[str]:
        """Upload every file under ``local`` to ``s3://bucket/prefix/<relative path>``;
        returns the keys, sorted."""
        client, keys = self.client(), []
        for path in sorted(Path(local).rglob("*")):
            if path.is_file():
                key = "/".join(p for p in (prefix.strip("/"), path.relative_to(local).as_posix())
                               if p)
                client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
                keys.append(key)
        return keys


@dataclass
class Faults:
    """What :class:`FaultProxy` does to the requests it forwards.

    ``delay``: seconds added before forwarding every request (latency). ``slowdown``, ``drop``
    and ``deny``: fractions of object keys whose first ``times`` requests get ``503 SlowDown``, a
    dropped connection, or ``403 AccessDenied``. ``stall``: answer nothing, hold every
    connection open until the proxy stops. ``methods``: the HTTP methods faults apply to (delay
    applies to all).
    """

    delay: float = 0.0
    slowdown: float = 0.0
    drop: float = 0.0
    deny: float = 0.0
    times: int = 1
    stall: bool = False
    methods: tuple[str, ...] = ("GET",)


@dataclass
class Counts:
    """What :class:`FaultProxy` saw: requests forwarded or failed, by kind, and per
    ``"<METHOD> <path>"``; ``max_in_flight``: the most requests it was answering at once (with a
    ``delay``, how many a client had sent before the first answer came back)."""

    requests: int = 0
    slowdown: int = 0
    drop: int = 0
    deny: int = 0
    stall: int = 0
    per_key: dict[str, int] = field(default_factory=dict)
    max_in_flight: int = 0


def key_selected(key: str, fraction: float) -> bool:
    """Whether ``key`` is one of the ``fraction`` of keys that get a fault (deterministic)."""
    return fraction > 0 and zlib.crc32(key.encode()) % 1000 < fraction * 1000


_SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>extsrc-test</RequestId>"
    b"</Error>"
)
_DENIED_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message><RequestId>extsrc-test</RequestId></Error>"
)
# How often a test server looks for shutdown: socketserver's 0.5 s made each teardown wait
# that long.
_POLL = 0.05
_HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                          "te", "trailer", "upgrade"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _handle(self) -> None:
        proxy = self.server.proxy
        proxy.in_flight(+1)
        try:
            self._answer(proxy)
        finally:
            proxy.in_flight(-1)

    def _answer(self, proxy: FaultProxy) -> None:
        body = self._body()
        key = self.path.split("?", 1)[0]
        fault = proxy.decide(self.command, key)
        if fault == "stall":
            proxy.stopping.wait()
            self.close_connection = True
            return
        if proxy.faults.delay:
            time.sleep(proxy.faults.delay)
        if fault == "drop":
            # SO_LINGER 0: close() sends a TCP reset, as a failing load balancer does.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if fault in ("slowdown", "deny"):
            status, reason, body = ((503, "Slow Down", _SLOWDOWN_BODY) if fault == "slowdown"
                                    else (403, "Forbidden", _DENIED_BODY))
            self.send_response(status, reason)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        conn = proxy.connection()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
        headers["Content-Length"] = str(len(body))
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError:
            conn.close()
            proxy.forget_connection()
            raise
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP_HEADERS and k.lower() != "content-length":
                self.send_header(k, v)
        # A HEAD answer has no body, but its Content-Length is the size of the object (what a
        # GET would send): clients read object sizes from it. Otherwise the length of the body
        # sent, which read() has de-chunked.
        upstream = resp.getheader("Content-Length")
        length = upstream if self.command == "HEAD" and upstream is not None else len(data)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy


class FaultProxy:
    """An HTTP proxy on ``127.0.0.1:<free port>`` forwarding to ``target`` with
    :class:`Faults`; use as a context manager. ``faults`` may be replaced at any time;
    ``counts`` (a :class:`Counts`) and :meth:`reset` report and clear what it saw."""

    def __init__(self, target: str, faults: Faults | None = None) -> None:
        host_port = target.split("://", 1)[-1].rstrip("/")
        host, _, port = host_port.partition(":")
        self.target = (host, int(port or 80))
        self.faults = faults or Faults()
        self.counts = Counts()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._busy = 0  # requests being answered now
        self._local = threading.local()
        self._server = _ProxyServer(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": _POLL}, daemon=True,
                                        name="fault-proxy")

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def in_flight(self, change: int) -> None:
        """A request begins (+1) or ends (-1); :attr:`Counts.max_in_flight` keeps the peak."""
        with self._lock:
            self._busy += change
            self.counts.max_in_flight = max(self.counts.max_in_flight, self._busy)

    def reset(self, faults: Faults | None = None) -> None:
        """Clear the counts (and the per-key fault history); set new ``faults`` if given."""
        with self._lock:
            self.counts = Counts()
            if faults is not None:
                self.faults = faults

    def decide(self, method: str, key: str) -> str | None:
        """Count a request and pick its fault: ``"stall"``, ``"drop"``, ``"slowdown"``,
        ``"deny"`` or None."""
        f = self.faults
        with self._lock:
            c = self.counts
            c.requests += 1
            # Per method and key: the HEAD that may precede a GET does not use up its faults.
            seen = c.per_key.get(f"{method} {key}", 0)
            c.per_key[f"{method} {key}"] = seen + 1
            fault = None
            if f.stall:
                fault = "stall"
            elif method in f.methods and seen < f.times:
                if key_selected(key, f.drop):
                    fault = "drop"
                elif key_selected(key, f.slowdown):
                    fault = "slowdown"
                elif key_selected(key, f.deny):
                    fault = "deny"
            if fault is not None:
                setattr(c, fault, getattr(c, fault) + 1)
            return fault

    def connection(self) -> http.client.HTTPConnection:
        """This handler thread's keep-alive connection to the target."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(*self.target, timeout=30)
            self._local.conn = conn
        return conn

    def forget_connection(self) -> None:
        self._local.conn = None


@contextlib.contextmanager
def local_http_server(handler: type[BaseHTTPRequestHandler], name: str = "http-fixture",
                      tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """A threaded HTTP server on ``127.0.0.1:<free port>`` answering with ``handler`` for the
    ``with`` block (HTTPS with server context ``tls``); yields its URL, without a trailing
    slash."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": _POLL},
                              daemon=True, name=name)
    thread.start()
    try:
        yield f"{'http' if tls is None else 'https'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server for the test module (skipped without the ``test`` extra)."""
    pytest.importorskip("moto.server", reason="needs moto[server] (pip install extsrc[test])")
    pytest.importorskip("s3fs", reason="needs s3fs (pip install extsrc[test])")
    with S3Server() as server:
        yield server


@pytest.fixture
def fault_proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` in front of ``s3_server``, without faults until a test sets them."""
    with FaultProxy(s3_server.endpoint) as proxy:
        yield proxy
