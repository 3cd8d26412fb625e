"""Reading samples and manifests from object storage (S3, GCS, HTTP(S), any fsspec protocol).

A manifest, its ``root`` and its rows may be URLs (``s3://bucket/train/cat/1.jpg``,
``gs://...``, ``https://...``, or any protocol fsspec knows, such as ``az://`` or ``hf://``).
:class:`Storage` reads them through `fsspec <https://filesystem-spec.readthedocs.io>`_:

* one filesystem per protocol, created lazily in the process that reads (each DALI reader
  process makes its own: open connections, event loops and thread pools are never pickled);
* :meth:`Storage.read_many` reads a batch with up to ``concurrency`` requests in flight (a
  thread pool per process), so throughput holds as the latency per request grows, and returns
  the bytes in the order asked;
* :meth:`Storage.read_ranges` reads byte ranges (the members of tar shards) the same way, and
  reads the ranges of one object that lie close together (gaps up to ``coalesce_gap``) with one
  ranged GET of at most ``coalesce_span`` bytes, split back per range: a request per span, not
  per member;
* transient failures (HTTP 5xx, 429, ``SlowDown``/throttling, a reset or refused connection, a
  timeout) are retried ``retries`` times with exponential backoff and full jitter; the retries
  are counted (:attr:`Storage.stats`);
* permanent failures (no such object or bucket, access denied, bad credentials) are not retried:
  they come back as a :class:`~extsrc.sources.fileread.FileReadProblem` with reason ``missing`` or
  ``access_denied`` (``unreachable`` when the retries ran out), which the caller turns into an
  error naming the manifest line and the URL.

fsspec and the filesystem for a protocol are optional (``pip install 'extsrc[s3]'``, ``[gcs]``
or ``[http]``); a URL without them raises :class:`~extsrc._util.extras.MissingExtraError` naming the
extra. The default install carries no cloud SDK.

``cache_dir`` keeps a local copy of every object read, so later epochs read the disk instead of
the network; ``cache_bytes`` bounds it (least recently used objects are evicted first).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from extsrc.sources.fileread import FileReadProblem
from extsrc.sources.rangemerge import Span, merge_ranges
from extsrc.sources.storagecache import DiskCache
from extsrc.sources.storagefailures import (
    backoff_delay,
    classify,
    describe,
    problem,
    range_refused,
)
from extsrc.sources.urls import (
    PROTOCOL_EXTRAS,
    is_url,
    join_url,
    known_protocol,
    url_protocol,
)

__all__ = [
    "DEFAULT_CONCURRENCY",
    "PROTOCOL_EXTRAS",
    "StatsDir",
    "Storage",
    "StorageStats",
    "classify",
    "is_url",
    "join_url",
    "known_protocol",
    "url_protocol",
]

log = logging.getLogger("extsrc")

#: Requests in flight per reading process by default. On a 16-core GPU machine (8 readers,
#: 82 KB images, a local S3 endpoint adding 20 or 50 ms a request) 32 gave 5.5k and 3.3k
#: images/s, 64 gave 6.9k and 4.8k, 128 6.9k and 6.1k: 64 hides ~20 ms, the common latency
#: within a region, with half the connections of 128.
DEFAULT_CONCURRENCY = 64

# Filesystems and pools a forked process inherited from its parent (Storage._forget_parent),
# and every Storage of this process, whose inherited ones a forked child sets aside at once.
_INHERITED: list[Any] = []
_LIVE: weakref.WeakSet[Storage] = weakref.WeakSet()


_MADE_FILESYSTEM = [False]


def _before_fork() -> None:
    # A filesystem no longer used but not yet collected (in a reference cycle) would otherwise be
    # collected in the child, where its finalizer closes the parent's connections from the
    # child's event loop (asyncio errors printed by reader processes): collect it here first.
    if _MADE_FILESYSTEM[0]:
        gc.collect()


def _after_fork_in_child() -> None:
    for storage in list(_LIVE):
        storage._forget_parent()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)

def require_protocol(protocol: str, needed_by: str) -> None:
    """Raise :class:`~extsrc._util.extras.MissingExtraError` unless fsspec and the filesystem for
    ``protocol`` can be imported."""
    from extsrc._util.extras import require

    extra, module = PROTOCOL_EXTRAS.get(protocol, ("s3", "fsspec"))
    require("fsspec", extra, needed_by)
    if protocol in PROTOCOL_EXTRAS:
        require(module, extra, needed_by)


@dataclass
class StorageStats:
    """Counts of one process's requests: reads (GETs answered), bytes (their bytes), retries
    (transient failures retried), failures (reads given up on), cache hits, and
    ``bytes_used``: the bytes of the objects and ranges those reads were made for, so that
    ``bytes / bytes_used`` is the read amplification of merged range reads (1.0 without)."""

    reads: int = 0
    bytes: int = 0
    bytes_used: int = 0
    retries: int = 0
    failures: int = 0
    cache_hits: int = 0
    retried_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"reads": self.reads, "bytes": self.bytes, "bytes_used": self.bytes_used,
                "retries": self.retries,
                "failures": self.failures, "cache_hits": self.cache_hits,
                "retried_reasons": dict(self.retried_reasons)}


# Options extsrc sets for a protocol unless the user sets them: extsrc retries itself (counted,
# with backoff), so the filesystem's own retries are off; timeouts keep a silent server from
# hanging a reader; one GET per object (s3fs would first ask for the size of each); as many
# connections as requests in flight (botocore keeps 10, which capped a reader's requests at
# 10 per round trip whatever ``concurrency`` said).
def _defaults(protocol: str, timeout: float, concurrency: int) -> dict[str, Any]:
    if protocol in ("s3", "s3a"):
        return {
            "config_kwargs": {"connect_timeout": timeout, "read_timeout": timeout,
                              "retries": {"total_max_attempts": 1},
                              "max_pool_connections": concurrency},
            "max_concurrency": 1,
        }
    if protocol in ("http", "https"):
        try:
            import aiohttp

            return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(
                total=None, sock_connect=timeout, sock_read=timeout)}}
        except ImportError:
            return {}
    if protocol in ("gs", "gcs"):
        return {"timeout": timeout}
    return {}


def _merge(defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for k, v in given.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


class _Resources:
    """What a :class:`Storage` uses in one process, each made on first use: its fsspec
    filesystems by protocol, its thread pool, its disk cache, a lock over them and its stats, and
    the backoff jitter's RNG. A forked child makes its own (the parent's are kept referenced but
    never used: see ``Storage._forget_parent``)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.fs: dict[str, Any] = {}
        # protocol -> S3Direct, or None where the options need s3fs (extsrc.sources.s3direct)
        self.direct: dict[str, Any] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.cache: DiskCache | None = None
        self.lock = threading.Lock()
        # Seeded from the OS on purpose: backoff jitter must differ between processes, so that
        # readers throttled together do not retry together.
        self.rng = random.Random()

    def executor(self, concurrency: int) -> ThreadPoolExecutor:
        if self.pool is None:
            with self.lock:
                if self.pool is None:
                    self.pool = ThreadPoolExecutor(concurrency,
                                                   thread_name_prefix="extsrc-storage")
        return self.pool

    def disk_cache(self, cache_dir: str, cache_bytes: int | None) -> DiskCache:
        if self.cache is None:
            # Once per process: the pool's threads ask at once, and two caches would each count
            # half of what is written and let the folder grow past cache_bytes.
            with self.lock:
                if self.cache is None:
                    self.cache = DiskCache(cache_dir, cache_bytes)
        return self.cache

    def close(self) -> None:
        for client in self.direct.values():
            if client is not None:
                client.close()
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class Storage:
    """How to read URLs: fsspec options, concurrency, retries, timeouts and an optional cache.

    Args:
        options: fsspec ``storage_options`` of the filesystem the URLs use (s3fs:
            ``{"key": ..., "secret": ..., "endpoint_url": ...}``, ``{"anon": True}``...), or,
            for URLs of several protocols, a dict of them by protocol
            (``{"s3": {...}, "https": {...}}``). ``None``: each filesystem's defaults
            (credentials from the environment).
        concurrency: requests in flight per reading process (threads of its pool).
        retries: how many times a transient failure is retried before the read fails.
        backoff: seconds of the first retry's backoff ceiling (doubled each retry, jittered).
        max_backoff: largest backoff ceiling in seconds.
        timeout: seconds to connect, and seconds without data while reading, before a request
            counts as failed (transient): a server that stops answering fails the read after at
            most about ``(retries + 1) * 2 * timeout + max_backoff * retries`` seconds.
        cache_dir: a local folder keeping a copy of every object read (later epochs read it
            instead of the network); ``None``: no cache.
        cache_bytes: the cache's size bound in bytes; least recently used objects are evicted.
        coalesce_gap: :meth:`read_ranges` reads ranges of one object whose gap is at most this
            many bytes with one GET (the gap's bytes are read and dropped); ``None``: one GET
            per range. Default 1 MiB, about what one more request costs in time on one
            connection to S3.
        coalesce_span: the most bytes one such merged GET reads (a range larger than this is
            read on its own): what it holds in memory, at most ``concurrency`` of them at once.
        s3_requests: ``"direct"``: ``s3://`` objects and ranges are read with GETs extsrc signs
            and sends itself (:mod:`extsrc.sources.s3direct`, a sixth (batch reads) to a third
            (single reads) of the CPU per request of s3fs's botocore) wherever it understands
            the options, through s3fs otherwise; ``"s3fs"``: always through s3fs. Listings,
            sizes and manifests are read through s3fs either way.

    A Storage is picklable: it carries its settings, never an open filesystem, pool or
    connection; each process creates its own on first use. :attr:`stats` counts that process's
    reads and retries.
    """

    def __init__(
        self,
        options: Mapping[str, Any] | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        timeout: float = 20.0,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        coalesce_gap: int | None = 1 << 20,
        coalesce_span: int = 16 << 20,
        s3_requests: str = "direct",
    ) -> None:
        from extsrc._util.argcheck import check_int

        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"storage_options must be a dict of fsspec options or None, got "
                            f"{type(options).__name__}")
        self.options = {} if options is None else dict(options)
        self.concurrency = check_int(concurrency, "storage concurrency", minimum=1)
        self.retries = check_int(retries, "storage retries", minimum=0)
        for name, v in (("backoff", backoff), ("max_backoff", max_backoff),
                        ("timeout", timeout)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"storage {name} must be a number of seconds > 0, got {v!r}")
        self.backoff, self.max_backoff, self.timeout = float(backoff), float(max_backoff), \
            float(timeout)
        if cache_bytes is not None and cache_dir is None:
            raise ValueError("storage cache_bytes bounds the cache in cache_dir: pass cache_dir "
                             "too")
        self.cache_dir = None if cache_dir is None else os.path.abspath(os.fspath(cache_dir))
        self.cache_bytes = (None if cache_bytes is None
                            else check_int(cache_bytes, "storage cache_bytes", minimum=1))
        self.coalesce_gap = (None if coalesce_gap is None
                             else check_int(coalesce_gap, "storage coalesce_gap", minimum=0))
        self.coalesce_span = check_int(coalesce_span, "storage coalesce_span", minimum=1)
        if s3_requests not in ("direct", "s3fs"):
            raise ValueError(f"storage s3_requests must be 'direct' or 's3fs', got "
                             f"{s3_requests!r}")
        self.s3_requests = s3_requests
        self.stats = StorageStats()
        self._init_local()

    def _init_local(self) -> None:
        _LIVE.add(self)
        self._res = _Resources()

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k != "_res"}
        state["stats"] = StorageStats()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_local()

    def __repr__(self) -> str:  # never shows the options: they may hold credentials
        return (f"Storage({len(self.options)} fsspec option(s), "
                f"concurrency={self.concurrency}, retries={self.retries}, "
                f"cache_dir={self.cache_dir!r}, coalesce_gap={self.coalesce_gap}, "
                f"coalesce_span={self.coalesce_span})")

    # -- per-process resources --------------------------------------------------------------

    def _check_pid(self) -> None:
        if self._res.pid != os.getpid():  # forked: the parent's pool and loops are not ours
            self._forget_parent()

    def _forget_parent(self) -> None:
        # The parent's filesystems are kept, never collected: collecting one runs its finalizer,
        # which would close the parent's connections from this process's event loop (asyncio
        # errors printed by a reader process).
        res = self._res
        if res.fs or res.pool is not None:
            _INHERITED.append((res.fs, res.pool, res.cache))
        self.stats = StorageStats()
        self._init_local()

    def options_for(self, protocol: str) -> dict[str, Any]:
        """The fsspec options used for ``protocol`` (the user's over extsrc's defaults)."""
        opts = self.options
        if opts and all(isinstance(v, Mapping) and known_protocol(k) for k, v in opts.items()):
            given = opts.get(protocol) or {}
        else:
            given = opts
        return _merge(_defaults(protocol, self.timeout, self.concurrency), given)

    def _filesystem_of(self, url: str) -> Any:
        """:meth:`filesystem` of ``url``'s protocol; a ``ValueError`` for a path that is not a
        storage URL (a caller's bug: local paths never reach this class)."""
        protocol = url_protocol(url)
        if protocol is None:
            raise ValueError(f"not a storage URL: {url!r}")
        return self.filesystem(protocol)

    def filesystem(self, protocol: str) -> Any:
        """This process's fsspec filesystem for ``protocol`` (created on first use)."""
        self._check_pid()
        res = self._res
        fs = res.fs.get(protocol)
        if fs is None:
            with res.lock:
                fs = res.fs.get(protocol)
                if fs is None:
                    require_protocol(protocol, f"reading {protocol}:// URLs")
                    import fsspec

                    # Always a filesystem of this Storage's own (not fsspec's shared one),
                    # whatever the options say: its connections belong to this process.
                    fs = fsspec.filesystem(protocol, **{**self.options_for(protocol),
                                                        "skip_instance_cache": True})
                    _MADE_FILESYSTEM[0] = True
                    if hasattr(fs, "retries"):
                        fs.retries = 1  # s3fs's own retry loop: extsrc retries instead
                    res.fs[protocol] = fs
        return fs

    def _getter(self, protocol: str, url: str) -> Callable[..., bytes]:
        """``get(url, start=None, end=None)`` reading the bytes of ``url`` (or ``[start,
        end)`` of it) for ``protocol``: the direct S3 client where it applies (to the options
        and to ``url``'s bucket), else the filesystem's ``cat_file``."""
        client = self._direct_for(protocol)
        if client is not None and client.addresses(url):
            return client.get
        fs = self.filesystem(protocol)

        def cat(url: str, start: int | None = None, end: int | None = None) -> bytes:
            if start is None and end is None:
                return fs.cat_file(url)
            return fs.cat_file(url, start=start, end=end)

        return cat

    def _direct_for(self, protocol: str) -> Any:
        """This process's direct S3 client (:mod:`extsrc.sources.s3direct`) for ``protocol``,
        made on first use; ``None`` where s3fs reads (another protocol, ``s3_requests="s3fs"``,
        options the client does not handle)."""
        if protocol not in ("s3", "s3a") or self.s3_requests != "direct":
            return None
        res = self._res
        if protocol not in res.direct:
            from extsrc.sources.s3direct import direct_client

            require_protocol(protocol, f"reading {protocol}:// URLs")
            # made outside the lock, which the stats share: finding credentials may ask the
            # network (an instance role, SSO); two threads may both make one, and the first
            # kept is used
            made = direct_client(self.options_for(protocol), self.concurrency)
            with res.lock:
                res.direct.setdefault(protocol, made)
        return res.direct[protocol]

    def _executor(self) -> ThreadPoolExecutor:
        self._check_pid()
        return self._res.executor(self.concurrency)

    def _cache_or_none(self) -> DiskCache | None:
        if self.cache_dir is None:
            return None
        self._check_pid()
        return self._res.disk_cache(self.cache_dir, self.cache_bytes)

    def write_stats(self, folder: str) -> None:
        """Write this process's :attr:`stats` to ``folder/<pid>.json`` (see :class:`StatsDir`)."""
        path = os.path.join(folder, f"{os.getpid()}.json")
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with self._res.lock:
            text = json.dumps(self.stats.as_dict())
        with contextlib.suppress(OSError):
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)

    def close(self) -> None:
        """Stop this process's thread pool (it is re-created on the next read)."""
        self._res.close()

    # -- reading ------------------------------------------------------------------------------

    def _with_retries(self, url: str, call: Callable[[], Any],
                      first: Exception | None = None) -> Any:
        """``call()`` with the retries; ``first``: the failure of an attempt already made
        (a batch's first GETs, sent together), handled as if ``call`` had raised it."""
        attempt = 0
        while True:
            try:
                if first is not None:
                    failed, first = first, None
                    raise failed
                return call()
            except FileReadProblem:
                raise
            except Exception as e:
                kind = classify(e)
                if kind != "transient":
                    with self._res.lock:
                        self.stats.failures += 1
                    raise problem(kind, url, e) from None
                if attempt >= self.retries:
                    with self._res.lock:
                        self.stats.failures += 1
                    raise FileReadProblem(
                        "unreachable",
                        f"the storage did not answer usably after {attempt + 1} attempts "
                        f"(last: {describe(e)})",
                    ) from None
                attempt += 1
                with self._res.lock:
                    self.stats.retries += 1
                    name = type(e).__name__
                    self.stats.retried_reasons[name] = self.stats.retried_reasons.get(name, 0) + 1
                    delay = backoff_delay(attempt, self.backoff, self.max_backoff, self._res.rng)
                log.debug("extsrc storage: retry %d of %s in %.2f s after %s", attempt, url,
                          delay, describe(e))
                time.sleep(delay)

    def read(self, url: str, *, max_bytes: int | None = None) -> bytes:
        """The whole object at ``url``, retrying transient failures; raises
        :class:`~extsrc.sources.fileread.FileReadProblem` (``missing``, ``access_denied``,
        ``unreachable``, ``file_too_large``, ``unreadable``) when it cannot."""
        protocol = url_protocol(url)
        if protocol is None:
            raise ValueError(f"not a storage URL: {url!r}")
        cache = self._cache_or_none()
        data = self._cache_hit(cache, url)
        if data is not None:
            return data
        return self._fetch(url, protocol, max_bytes, cache)

    def _fetch(self, url: str, protocol: str, max_bytes: int | None, cache: DiskCache | None,
               first: Exception | None = None) -> bytes:
        """:meth:`read` past its cache: the GET with retries (``first``: the failure of one
        already made), then :meth:`_fetched`."""
        self._check_pid()
        cat = self._getter(protocol, url)  # after the cache: a cached object needs no filesystem

        def get() -> bytes:
            if max_bytes is None:
                return cat(url)
            # One ranged GET, no size request first: at most max_bytes + 1 bytes come back,
            # enough to tell a too-large object (a server ignoring ranges sends it whole).
            try:
                return cat(url, 0, max_bytes + 1)
            except Exception as e:
                if not range_refused(e):
                    raise
                return cat(url)  # an empty object has no byte 0 to range over

        if first is not None and max_bytes is not None and range_refused(first):
            first = None  # an empty object: get() reads it whole
        return self._fetched(url, self._with_retries(url, get, first), max_bytes, cache)

    def _fetched(self, url: str, data: bytes, max_bytes: int | None,
                 cache: DiskCache | None) -> bytes:
        """The checks, counts and cache of an object's bytes just read."""
        if max_bytes is not None and len(data) > max_bytes:
            raise FileReadProblem("file_too_large", f"the object is more than max_file_bytes="
                                                    f"{max_bytes:,} bytes")
        self._count_read(len(data), len(data))
        if cache is not None:
            cache.put(url, data)
        return data

    def read_many(self, urls: Sequence[str], *, max_bytes: int | None = None
                  ) -> list[bytes | FileReadProblem]:
        """Every object of ``urls``, read with up to ``concurrency`` requests in flight, in the
        order given; a failed read's place holds its
        :class:`~extsrc.sources.fileread.FileReadProblem`."""
        def one(url: str) -> bytes | FileReadProblem:
            try:
                return self.read(url, max_bytes=max_bytes)
            except FileReadProblem as e:
                return e

        protocol = url_protocol(urls[0]) if urls else None
        client = self._direct_client(urls, protocol)
        if client is None or protocol is None:
            return self._map(one, urls)
        # S3 read directly: the batch's first GETs go out together from the client's event loop
        # (no thread per request: about a third less CPU per GET); only the failed ones take
        # the pool, each with its retries, the failed GET counted as its first attempt.
        cache = self._cache_or_none()
        out: list[bytes | FileReadProblem | None] = [self._cache_hit(cache, u) for u in urls]
        todo = [k for k, got in enumerate(out) if got is None]
        span = (None, None) if max_bytes is None else (0, max_bytes + 1)
        first = client.get_many([(urls[k], *span) for k in todo])

        def finish(item: tuple[int, bytes | BaseException]) -> bytes | FileReadProblem:
            k, got = item
            try:
                if isinstance(got, Exception):
                    return self._fetch(urls[k], protocol, max_bytes, cache, first=got)
                if isinstance(got, BaseException):  # cancelled, interrupted: not a read's fate
                    raise got
                return self._fetched(urls[k], got, max_bytes, cache)
            except FileReadProblem as e:
                return e

        failed = [(k, got) for k, got in zip(todo, first, strict=True)
                  if isinstance(got, BaseException)]
        for k, got in zip(todo, first, strict=True):
            if not isinstance(got, BaseException):
                out[k] = finish((k, got))
        for (k, _), result in zip(failed, self._map(finish, failed), strict=True):
            out[k] = result
        return out  # type: ignore[return-value]

    def _direct_client(self, urls: Sequence[str], protocol: str | None) -> Any:
        """The direct S3 client that reads all of ``urls`` (several, every one of ``protocol``,
        every bucket one it addresses), or ``None``: then each is read on its own."""
        if len(urls) <= 1 or protocol is None or any(url_protocol(u) != protocol for u in urls):
            return None
        self._check_pid()
        client = self._direct_for(protocol)
        if client is None or not all(client.addresses(u) for u in urls):
            return None
        return client

    def read_range(self, url: str, offset: int, size: int, *, cache: bool = True) -> bytes:
        """``size`` bytes at ``offset`` of the object at ``url`` in one ranged GET (a member of
        a tar shard), with :meth:`read`'s retries, counts and cache (``cache=False``: not kept
        in it, as for the blocks read to index a shard); fewer bytes than asked (the object is
        shorter) raise :class:`~extsrc.sources.fileread.FileReadProblem` ``unreadable``."""
        key = _range_key(url, offset, size)
        store = self._cache_or_none() if cache else None
        data = self._cache_hit(store, key)
        if data is not None:
            return data
        data = self._get_range(url, offset, offset + size)
        self._count_read(len(data), len(data))
        if store is not None:
            store.put(key, data)
        return data

    def _get_range(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``url`` in one ranged GET with retries (not counted as a
        read: the caller counts the bytes it uses)."""
        protocol = url_protocol(url)
        if protocol is None:
            raise ValueError(f"not a storage URL: {url!r}")
        self._check_pid()
        cat = self._getter(protocol, url)
        data = bytes(self._with_retries(url, lambda: cat(url, start, end)))
        if len(data) != end - start:
            with self._res.lock:
                self.stats.failures += 1
            raise FileReadProblem(
                "unreadable",
                f"the object ends {end - start - len(data):,} bytes before the range "
                f"{start:,}+{end - start:,} does: it changed since it was indexed (read it again)")
        return data

    def info(self, url: str) -> dict[str, Any]:
        """fsspec's ``info`` of the object at ``url`` (``size``, and an ``ETag`` or modification
        time where the storage gives one), with :meth:`read`'s retries; raises
        :class:`~extsrc.sources.fileread.FileReadProblem` (``missing``, ``access_denied``,
        ``unreachable``...) when it cannot."""
        fs = self._filesystem_of(url)
        return dict(self._with_retries(url, lambda: fs.info(url)))

    def _cache_hit(self, cache: DiskCache | None, key: str) -> bytes | None:
        """The cached copy of ``key`` (counted as a cache hit), or ``None``."""
        data = None if cache is None else cache.get(key)
        if data is not None:
            with self._res.lock:
                self.stats.cache_hits += 1
        return data

    def _count_read(self, nbytes: int, used: int) -> None:
        with self._res.lock:
            self.stats.reads += 1
            self.stats.bytes += nbytes
            self.stats.bytes_used += used

    def read_ranges(self, ranges: Sequence[tuple[str, int, int]]
                    ) -> list[bytes | FileReadProblem]:
        """:meth:`read_range` of every ``(url, offset, size)``, with up to ``concurrency``
        requests in flight, in the order given; a failed read's place holds its
        :class:`~extsrc.sources.fileread.FileReadProblem`.

        Ranges of one object are merged (:func:`~extsrc.sources.rangemerge.merge_ranges`):
        those with gaps of at most :attr:`coalesce_gap` bytes are read with one GET of at most
        :attr:`coalesce_span` bytes, retried as one, and split back into each range's bytes
        (each kept in the cache on its own, as :meth:`read_range` keeps it). A merged GET that
        still fails because the object came out short (``unreadable``: it changed since it was
        indexed) is not the verdict on its ranges: each is then read on its own, so a failure is
        the one of its own range (and a range that can be read is). A missing object, denied
        access or a storage that did not answer through the retries fails each of its ranges
        with that problem, without a request per range: under throttling those would multiply
        the requests that are being refused."""
        out: list[bytes | FileReadProblem | None] = [None] * len(ranges)
        store = self._cache_or_none()
        by_url: dict[str, list[int]] = {}
        for k, (url, offset, size) in enumerate(ranges):
            if url_protocol(url) is None:
                raise ValueError(f"not a storage URL: {url!r}")
            out[k] = self._cache_hit(store, _range_key(url, offset, size))
            if out[k] is None:
                by_url.setdefault(url, []).append(k)
        spans: list[tuple[str, Span]] = []
        for url, ks in by_url.items():
            if self.coalesce_gap is None:
                spans += [(url, Span(ranges[k][1], ranges[k][1] + ranges[k][2], (k,)))
                          for k in ks]
                continue
            merged = merge_ranges([(ranges[k][1], ranges[k][2]) for k in ks],
                                  max_gap=self.coalesce_gap, max_span=self.coalesce_span)
            spans += [(url, Span(m.start, m.end, tuple(ks[j] for j in m.members)))
                      for m in merged]

        def one(k: int) -> tuple[int, bytes | FileReadProblem]:
            try:
                return k, self.read_range(*ranges[k])
            except FileReadProblem as e:
                return k, e

        def span(item: tuple[str, Span]) -> list[tuple[int, bytes | FileReadProblem]] | None:
            url, sp = item
            if len(sp.members) == 1:
                return [one(sp.members[0])]
            try:
                data = self._get_range(url, sp.start, sp.end)
            except FileReadProblem as e:
                if e.reason == "unreadable":
                    return None  # read range by range below, for each range's own verdict
                return [(k, FileReadProblem(e.reason, e.message)) for k in sp.members]
            view = memoryview(data)
            got = []
            for k in sp.members:
                _, offset, size = ranges[k]
                piece = bytes(view[offset - sp.start:offset - sp.start + size])
                if store is not None:
                    store.put(_range_key(url, offset, size), piece)
                got.append((k, piece))
            self._count_read(len(data), sum(len(p) for _, p in got))
            return got

        results = self._map(span, spans)
        for got in results:
            for k, g in got or ():
                out[k] = g
        again = [k for (_, sp), got in zip(spans, results, strict=True) if got is None
                 for k in sp.members]
        for k, g in self._map(one, again):
            out[k] = g
        return out  # type: ignore[return-value]

    def _map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``fn`` of every item, in order, on this process's pool when there are several."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        return list(self._executor().map(fn, items))

    def list_files(self, url: str) -> list[str]:
        """Every object under the folder URL ``url`` (recursively), as full URLs, sorted."""
        protocol = url_protocol(url)
        assert protocol is not None
        fs = self.filesystem(protocol)
        found = self._with_retries(url, lambda: fs.find(url.rstrip("/") + "/"))
        scheme = protocol + "://"
        return sorted(p if is_url(p) else scheme + p.lstrip("/") for p in found)

    def exists(self, urls: Sequence[str]) -> list[bool]:
        """Whether each object of ``urls`` exists (transient failures retried)."""
        def one(url: str) -> bool:
            fs = self.filesystem(url_protocol(url) or "")
            try:
                return bool(self._with_retries(url, lambda: fs.isfile(url)))
            except FileReadProblem:
                return False

        return list(self._executor().map(one, urls)) if urls else []


def _range_key(url: str, offset: int, size: int) -> str:
    """The cache's name for a range of an object: one entry per range."""
    return f"{url}#bytes={offset}-{offset + size}"


def _remove_folder(path: str, owner: int) -> None:
    # Only in the process that made it: a forked reader process exiting runs its copy of the
    # finalizer too, and must leave the folder to its parent.
    if os.getpid() == owner:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


class StatsDir:
    """A temporary folder where every reading process of one loader writes its
    :class:`StorageStats` (:meth:`Storage.write_stats`), so that the loader can add up the
    requests, retries and failures of reader processes it cannot otherwise see. Removed with
    :meth:`close` or when the object is collected."""

    def __init__(self) -> None:
        import tempfile

        self.path = tempfile.mkdtemp(prefix="extsrc-storage-stats-")
        self._finalizer = weakref.finalize(self, _remove_folder, self.path, os.getpid())

    def total(self) -> dict[str, Any]:
        """The stats of every process that wrote some, added up."""
        out: dict[str, Any] = StorageStats().as_dict()
        out["processes"] = 0
        with contextlib.suppress(OSError), os.scandir(self.path) as it:
            for e in it:
                if not e.name.endswith(".json"):
                    continue
                try:
                    with open(e.path) as f:
                        one = json.load(f)
                except (OSError, ValueError):
                    continue
                out["processes"] += 1
                for k, v in one.items():
                    if isinstance(v, dict):
                        for name, n in v.items():
                            out[k][name] = out[k].get(name, 0) + n
                    else:
                        out[k] += v
        return out

    def close(self) -> None:
        self._finalizer()
