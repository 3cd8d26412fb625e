"""A read-only S3 endpoint over a local folder, fast enough not to be what a benchmark measures.

moto's server (``tests/storage_server.py``, what the tests use) implements S3 faithfully but
answers from one Python process and spends milliseconds of CPU on each GET, fewer GETs a
second than a GPU machine's readers ask for, so a loader reading from it measures moto. This server
answers the few requests a reader makes, from ``processes`` processes that share each listening
port (``SO_REUSEPORT``), each an asyncio (aiohttp) server:

- ``GET /<bucket>/<key>``, with or without ``Range: bytes=a-b`` (``206`` and ``Content-Range``);
- ``HEAD /<bucket>/<key>`` (size, ``ETag``, ``Last-Modified``), ``HEAD /<bucket>``;
- ``GET /<bucket>?list-type=2&prefix=..&delimiter=..`` (ListObjectsV2, unpaginated);
- a missing key is ``404 NoSuchKey``, another bucket ``404 NoSuchBucket``, a range past the end
  ``416 InvalidRange``, as S3 answers.

It checks no signature, writes nothing, and reads each file as it was when first asked for (its
size, ``ETag`` and an open descriptor are kept): a benchmark's dataset, not a changing folder.
Each port adds its own latency to every request before answering (``asyncio.sleep``: waiting
costs no CPU), as a remote bucket's network would, so one server gives the 0, 20 and 50 ms rows.
s3fs (aiobotocore) talks to it as to S3 with any credentials and ``endpoint_url`` (path-style
addressing, what botocore uses for an IP address).

    with StaticS3(folder, "bucket", latencies_ms=[0, 20], processes=4, prefix="ds") as s3:
        s3.endpoints[20]   # "http://127.0.0.1:<port>": s3://bucket/ds/<path> is folder/<path>
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import multiprocessing as mp
import os
import socket
import time
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _error(status: int, code: str, message: str, head: bool) -> Any:
    from aiohttp import web

    body = None if head else (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error>")
    return web.Response(status=status, text=body, content_type="application/xml")


def _etag(st: os.stat_result) -> str:
    # Not the MD5 of the content (hashing every object on every HEAD would cost what this server
    # exists to avoid): a value that changes when the file does, which is all a reader compares.
    return '"' + hashlib.md5(f"{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest() + '"'


def _range(header: str, size: int) -> tuple[int, int] | None:
    """``(start, end)`` inclusive of a ``bytes=`` range header, or None if it is not
    satisfiable; raises ValueError for a header this server does not parse."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        raise ValueError(header)
    first, _, last = spec.strip().partition("-")
    if first == "":
        n = int(last)
        return (max(size - n, 0), size - 1) if n > 0 and size > 0 else None
    start = int(first)
    end = size - 1 if last == "" else min(int(last), size - 1)
    return (start, end) if start <= end and start < size else None


def _listing(root: Path, bucket: str, under: str, prefix: str, delimiter: str) -> str:
    keys, prefixes = [], set()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = under + path.relative_to(root).as_posix()
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        if delimiter and delimiter in rest:
            prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
            continue
        st = path.stat()
        modified = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(st.st_mtime))
        keys.append(f"<Contents><Key>{escape(key)}</Key><LastModified>{modified}</LastModified>"
                    f"<ETag>{escape(_etag(st))}</ETag><Size>{st.st_size}</Size>"
                    "<StorageClass>STANDARD</StorageClass></Contents>")
    common = "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>"
                     for p in sorted(prefixes))
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{_XMLNS}">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount><MaxKeys>{len(keys) + 1000}</MaxKeys>"
            f"<Delimiter>{escape(delimiter)}</Delimiter><IsTruncated>false</IsTruncated>"
            f"{''.join(keys)}{common}</ListBucketResult>")


def _app(root: Path, bucket: str, under: str, delays: dict[int, float]) -> Any:
    from aiohttp import web

    root = root.resolve()
    # key -> (open descriptor, size, headers): the folder is read as it was when a key was first
    # asked for, which is what a benchmark's dataset is (written before, never changed).
    opened: dict[str, tuple[int, int, dict[str, str]]] = {}

    async def handle(request: web.Request) -> web.StreamResponse:
        port = request.transport.get_extra_info("sockname")[1] if request.transport else None
        if delays.get(port):
            await asyncio.sleep(delays[port])
        head = request.method == "HEAD"
        name, _, key = request.path.lstrip("/").partition("/")
        if name != bucket:
            return _error(404, "NoSuchBucket", f"no bucket {name!r}", head)
        if not key:
            if head:
                return web.Response(status=200)
            if request.query.get("list-type") == "2":
                return web.Response(text=_listing(root, bucket, under,
                                                  request.query.get("prefix", ""),
                                                  request.query.get("delimiter", "")),
                                    content_type="application/xml")
            return _error(400, "NotImplemented", "only ListObjectsV2 is served", head)
        found = opened.get(key)
        if found is None:
            path = (root / key[len(under):]).resolve()
            if not key.startswith(under) or root not in path.parents or not path.is_file():
                return _error(404, "NoSuchKey", f"no key {key!r}", head)
            st = path.stat()
            found = opened[key] = (os.open(path, os.O_RDONLY), st.st_size, {
                "ETag": _etag(st), "Accept-Ranges": "bytes",
                "Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True),
                "Content-Type": "application/octet-stream"})
        fd, size, fixed = found
        headers = dict(fixed)
        start, end, status = 0, size - 1, 200
        if "Range" in request.headers and not head:
            try:
                span = _range(request.headers["Range"], size)
            except ValueError:
                return _error(400, "InvalidArgument", "unparsed Range header", head)
            if span is None:
                return _error(416, "InvalidRange", "the range is not satisfiable", head)
            start, end, status = *span, 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        if head:
            headers["Content-Length"] = str(size)
            return web.Response(status=200, headers=headers)
        return web.Response(status=status, body=os.pread(fd, end - start + 1, start),
                            headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def _serve(root: str, bucket: str, under: str, delays: dict[int, float], ready: Any,
           cpus: frozenset[int] | None = None) -> None:
    """One server process: every port of ``delays`` opened with ``SO_REUSEPORT``; on ``cpus``
    only, when given."""
    from aiohttp import web

    if cpus:
        os.sched_setaffinity(0, cpus)

    async def main() -> None:
        runner = web.AppRunner(_app(Path(root), bucket, under, delays), access_log=None)
        await runner.setup()
        for port in delays:
            await web.TCPSite(runner, "127.0.0.1", port, reuse_port=True, backlog=1024).start()
        ready.put(os.getpid())
        await asyncio.Event().wait()  # until the process is terminated

    asyncio.run(main())


class StaticS3:
    """``processes`` server processes serving ``root``'s files as the objects of ``bucket``
    (under ``prefix``/ when given), one port per latency of ``latencies_ms``: :attr:`endpoints`
    maps a latency to its URL, :attr:`pids` are the processes (for their CPU time). ``cpus``:
    the cores the processes run on (``None``: any)."""

    def __init__(self, root: Path | str, bucket: str, latencies_ms: list[float],
                 processes: int = 4, prefix: str = "",
                 cpus: frozenset[int] | None = None) -> None:
        self.root, self.bucket, self.processes = str(root), bucket, processes
        self.cpus = cpus
        self.under = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.latencies_ms = list(dict.fromkeys(latencies_ms))
        self.endpoints: dict[float, str] = {}
        self.pids: list[int] = []
        self._procs: list[Any] = []

    def __enter__(self) -> StaticS3:
        # Each port is held by a bound, not listening, SO_REUSEPORT socket until the servers
        # listen on it: no other program takes it meanwhile, and a socket that does not listen
        # is given no connection.
        holders, delays = [], {}
        for ms in self.latencies_ms:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind(("127.0.0.1", 0))
            holders.append(s)
            delays[s.getsockname()[1]] = ms / 1000
            self.endpoints[ms] = f"http://127.0.0.1:{s.getsockname()[1]}"
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        try:
            for _ in range(self.processes):
                p = ctx.Process(target=_serve,
                                args=(self.root, self.bucket, self.under, delays, ready,
                                      self.cpus),
                                daemon=True)
                p.start()
                self._procs.append(p)
            self.pids = [ready.get(timeout=60) for _ in self._procs]
        except BaseException:
            self.__exit__(None, None, None)
            raise
        finally:
            for s in holders:
                s.close()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            p.terminate()
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        self._procs = []


def split_cpus(server_cpus: int) -> frozenset[int] | None:
    """Give the last ``server_cpus`` of this process's cores to the server, and keep this
    process (the loader, its reader processes and DALI's threads, which inherit it) on the
    others, as if the bucket were on another machine. Returns the server's cores (``None``
    for 0: everything shares every core)."""
    if not server_cpus:
        return None
    cores = sorted(os.sched_getaffinity(0))
    if not 0 < server_cpus < len(cores):
        raise SystemExit(f"--server-cpus must be in [0, {len(cores)}), got {server_cpus}")
    os.sched_setaffinity(0, cores[:-server_cpus])
    return frozenset(cores[-server_cpus:])
