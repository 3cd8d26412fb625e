"""S3 GETs that extsrc signs and sends itself, for the reads that dominate a training epoch.

Each GET through s3fs passes botocore's generic request machinery (event hooks, model-driven
serialisation and response parsing): about 1 ms of CPU per request on a fast core, so a reader
process that needs a few thousand small images a second spends its core there and not on the
network. :class:`S3Direct` does only what a GET of an object or a byte range needs:

* Signature Version 4 with ``UNSIGNED-PAYLOAD``, the credentials resolved by botocore (given
  keys, the environment, a profile, an instance role; refreshed by botocore when they expire),
  or unsigned requests for ``anon=True``;
* one aiohttp session per client and process, with as many connections as the
  :class:`~extsrc.sources.storage.Storage` has requests in flight, on one event loop thread
  per process that every client shares (as fsspec shares its own): a program that makes many
  Storages does not collect a thread for each;
* S3's answers mapped to what :func:`extsrc.sources.storage.classify` reads (``NoSuchKey``,
  ``AccessDenied``, ``SlowDown``, 5xx, ``InvalidRange``), so retries, skips and messages are the
  same as through s3fs.

:func:`direct_client` builds one only from options it fully understands (keys or a profile, a
region, ``endpoint_url``, timeouts, pool size) and returns ``None`` for anything else
(requester-pays, SSE-C keys, an addressing style, accelerate or FIPS endpoints, a region it
cannot know without asking the bucket, ...): those read through s3fs. Listing,
``info`` and manifests always go through s3fs. ``Storage(s3_requests="s3fs")`` turns this path
off.

Addressing: with ``endpoint_url`` (MinIO, R2, Ceph, a local server) path-style
``<endpoint>/<bucket>/<key>``; on AWS virtual-hosted ``https://<bucket>.s3.<region>.amazonaws.com``
(path-style for bucket names with dots). A bucket in another region than the one configured
answers with its region (``x-amz-bucket-region``), which is remembered and the request resent
once, as botocore does. Buckets named by an ARN (access points, Outposts) and, on AWS, S3 Express
directory buckets are not addressed here: their URLs read through s3fs
(:meth:`S3Direct.addresses`).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import hmac
import os
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

__all__ = ["S3Direct", "S3ResponseError", "direct_client", "sigv4_headers"]

# fsspec/s3fs options that change nothing a GET sends (caching of listings, block sizes of
# file objects this path never opens, the instance cache extsrc always skips).
_HARMLESS = frozenset({
    "skip_instance_cache", "use_listings_cache", "listings_expiry_time", "default_block_size",
    "default_fill_cache", "default_cache_type", "max_concurrency", "cache_regions", "use_ssl",
    "asynchronous", "loop",
})
_CREDENTIALS = frozenset({"key", "secret", "token", "anon", "profile"})
_CLIENT_KWARGS = frozenset({"region_name", "endpoint_url"})
_CONFIG_KWARGS = frozenset({"connect_timeout", "read_timeout", "retries",
                            "max_pool_connections"})
# Environment variables that make botocore address or sign S3 otherwise than this module does.
_OTHER_ENDPOINT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_USE_FIPS_ENDPOINT",
                       "AWS_USE_DUALSTACK_ENDPOINT", "AWS_S3_USE_ARN_REGION",
                       "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS")
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_ERROR_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")
_ERROR_MESSAGE = re.compile(rb"<Message>([^<]{0,300})</Message>")
_ERROR_REGION = re.compile(rb"<Region>([a-z0-9-]{1,40})</Region>")


# The event loop thread of this process (pid -> loop), made on first use. A forked child makes its
# own: the parent's thread does not exist there, and the parent's loop and sessions are kept
# referenced in the child, never closed or collected there (collecting an open aiohttp session
# prints "Unclosed client session" from a reader process).
_LOOPS: dict[int, asyncio.AbstractEventLoop] = {}
_FORKED_AWAY: list[Any] = []
_LOCK = threading.Lock()


def _new_lock_in_child() -> None:
    # A lock held by another thread of the parent at fork time stays held in the child forever.
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def _process_loop() -> asyncio.AbstractEventLoop:
    pid = os.getpid()
    loop = _LOOPS.get(pid)
    if loop is None:
        with _LOCK:
            loop = _LOOPS.get(pid)
            if loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="extsrc-s3", daemon=True).start()
                _LOOPS[pid] = loop
    return loop


def _release(session: Any, pid: int) -> None:
    """Close ``session`` (made in process ``pid``): at :meth:`S3Direct.close`, when its client
    is collected, or at interpreter exit (a ``weakref.finalize``, so no client is kept alive)."""
    if pid != os.getpid():
        _FORKED_AWAY.append(session)
        return
    loop = _LOOPS.get(pid)
    if loop is None or session.closed:
        return
    done = asyncio.run_coroutine_threadsafe(session.close(), loop)
    if threading.current_thread().name != "extsrc-s3":  # waiting on the loop's own thread
        try:                                             # would wait for ever
            done.result(timeout=5)
        except Exception:  # a close at exit or in a collection: nothing to report to
            pass


class S3ResponseError(OSError):
    """An S3 answer other than the object's bytes: ``status``, S3's error ``code``
    (``NoSuchKey``, ``AccessDenied``, ``SlowDown``...) and its message. ``response`` has the
    shape botocore gives a ``ClientError``, which :func:`extsrc.sources.storage.classify`
    reads."""

    def __init__(self, status: int, code: str, message: str, url: str) -> None:
        super().__init__(f"{code or 'HTTP ' + str(status)} ({status}) for {url}"
                         + (f": {message}" if message else ""))
        self.status = status
        self.s3_code = code
        self.response = {"Error": {"Code": code or str(status), "Message": message},
                         "ResponseMetadata": {"HTTPStatusCode": status}}


def sigv4_headers(method: str, host: str, path: str, region: str, access_key: str,
                  secret_key: str, token: str | None, now: datetime.datetime,
                  headers: Mapping[str, str] = ()) -> dict[str, str]:
    """The headers that sign request ``method host path`` (``path`` already URI-encoded, no
    query) for S3 with Signature Version 4 at time ``now`` (UTC): ``x-amz-date``,
    ``x-amz-content-sha256: UNSIGNED-PAYLOAD``, ``x-amz-security-token`` with a session token,
    and ``Authorization``; ``headers`` (e.g. ``Range``) are signed too and returned with them."""
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    out = dict(headers)
    out["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
    out["x-amz-date"] = amz_date
    if token:
        out["x-amz-security-token"] = token
    signed = {k.lower(): " ".join(str(v).split()) for k, v in out.items()}
    signed["host"] = host
    names = sorted(signed)
    canonical = "\n".join([
        method, path, "", "".join(f"{k}:{signed[k]}\n" for k in names), ";".join(names),
        "UNSIGNED-PAYLOAD"])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _signing_key(secret_key, day, region)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                            f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return out


_KEYS: dict[tuple[str, str, str], bytes] = {}


def _signing_key(secret_key: str, day: str, region: str) -> bytes:
    # Four HMACs that change once a day per region: kept, a handful of entries at most.
    cached = _KEYS.get((secret_key, day, region))
    if cached is None:
        k = ("AWS4" + secret_key).encode()
        for part in (day, region, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        if len(_KEYS) > 64:
            _KEYS.clear()
        cached = _KEYS[(secret_key, day, region)] = k
    return cached


def direct_client(options: Mapping[str, Any], concurrency: int) -> S3Direct | None:
    """An :class:`S3Direct` for s3fs options ``options`` (extsrc's defaults merged in), or
    ``None`` where they ask for anything it does not do (then s3fs reads)."""
    if not set(options) <= _HARMLESS | _CREDENTIALS | {"endpoint_url", "client_kwargs",
                                                       "config_kwargs"}:
        return None
    client = options.get("client_kwargs") or {}
    config = options.get("config_kwargs") or {}
    if not (isinstance(client, Mapping) and isinstance(config, Mapping)
            and set(client) <= _CLIENT_KWARGS and set(config) <= _CONFIG_KWARGS):
        return None
    if options.get("use_ssl", True) is not True or any(os.environ.get(v)
                                                         for v in _OTHER_ENDPOINT_ENV):
        return None
    try:
        import aiohttp  # noqa: F401 (s3fs needs it too: present wherever s3fs is)
        import botocore.credentials
        import botocore.session
    except ImportError:
        return None
    session = botocore.session.Session(profile=options.get("profile"))
    try:
        scoped = session.get_scoped_config()
    except Exception:  # an unknown profile: s3fs gives botocore's error for it
        return None
    if any(k in scoped for k in ("s3", "endpoint_url", "services", "use_fips_endpoint",
                                 "use_dualstack_endpoint")):
        return None
    anon = bool(options.get("anon", False))
    credentials = None
    if not anon:
        if options.get("key") or options.get("secret"):
            if not (options.get("key") and options.get("secret")):
                return None
            credentials = botocore.credentials.Credentials(
                options["key"], options["secret"], options.get("token"))
        else:
            credentials = session.get_credentials()
            if credentials is None:  # s3fs's own error (or its anonymous fallback) applies
                return None
    endpoint = options.get("endpoint_url") or client.get("endpoint_url")
    region = client.get("region_name") or session.get_config_variable("region")
    if endpoint is None:
        # unknown, or a partition whose endpoints are not under amazonaws.com (China, the
        # isolated us-iso-*, us-isob-*, eu-isoe-* regions)
        if region is None or region.startswith("cn-") or "-iso" in region:
            return None
    elif not re.match(r"^https?://[^/?#]+/?$", str(endpoint)):
        return None
    timeouts = (config.get("connect_timeout", 60), config.get("read_timeout", 60))
    connections = config.get("max_pool_connections", concurrency)
    # Timeouts of None (no timeout in botocore), strings, a pool of 0...: what botocore makes of
    # them is botocore's, so s3fs reads (this path would fail on them, or read otherwise).
    if not (all(isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0
                for t in timeouts)
            and isinstance(connections, int) and not isinstance(connections, bool)
            and connections >= 1):
        return None
    return S3Direct(
        endpoint=None if endpoint is None else str(endpoint).rstrip("/"),
        region=region or "us-east-1",
        credentials=credentials,
        connect_timeout=float(timeouts[0]),
        read_timeout=float(timeouts[1]),
        connections=connections,
        ca_bundle=session.get_config_variable("ca_bundle"),
    )


class S3Direct:
    """Signed GETs of S3 objects and byte ranges from one process (see the module docstring).

    :meth:`get` is called from any thread, signs the request there and blocks until the bytes
    are there; the requests run on the process's event loop thread (shared by every client),
    through this client's session, made on first use in the process that uses it and closed by
    :meth:`close`, when the client is collected, or at exit."""

    def __init__(self, *, endpoint: str | None, region: str, credentials: Any,
                 connect_timeout: float, read_timeout: float, connections: int,
                 ca_bundle: str | None) -> None:
        self.endpoint, self.region, self.credentials = endpoint, region, credentials
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.connections, self.ca_bundle = connections, ca_bundle
        self.bucket_regions: dict[str, str] = {}
        self._proxies: dict[str, Any] = {}
        self._session: Any = None
        self._closer: weakref.finalize | None = None
        self._pid = os.getpid()

    # -- addressing and signing ---------------------------------------------------------------

    def addresses(self, url: str) -> bool:
        """Whether this client can address ``url``'s bucket itself: not an access point or
        Outposts ARN (``s3://arn:aws:s3:...``), nor on AWS an S3 Express directory bucket
        (``...--x-s3``: zonal endpoints and session credentials). Those read through s3fs,
        whose botocore resolves them."""
        bucket = _bucket_and_key(url)[0]
        return ":" not in bucket and not (self.endpoint is None and bucket.endswith("--x-s3"))

    def _address(self, bucket: str, key: str, region: str) -> tuple[str, str, str]:
        """``(url, host, encoded path)`` of ``key`` in ``bucket``, on AWS in ``region``."""
        key_path = quote(key, safe="/~")
        if self.endpoint is not None:
            base, host = self.endpoint, self.endpoint.split("://", 1)[1]
            path = f"/{quote(bucket, safe='~')}/{key_path}"
            return base + path, host, path
        if _DNS_BUCKET.match(bucket):
            host, path = f"{bucket}.s3.{region}.amazonaws.com", f"/{key_path}"
        else:
            host, path = f"s3.{region}.amazonaws.com", f"/{bucket}/{key_path}"
        return f"https://{host}{path}", host, path

    def _headers(self, region: str, host: str, path: str,
                 extra: Mapping[str, str]) -> dict[str, str]:
        headers = dict(extra)
        if self.credentials is not None:
            frozen = self.credentials.get_frozen_credentials()
            headers = sigv4_headers("GET", host, path, region, frozen.access_key,
                                    frozen.secret_key, frozen.token,
                                    datetime.datetime.now(datetime.timezone.utc), headers)
        # The host as signed: aiohttp's own Host header drops a default port
        # (https://minio:443) and a trailing dot, and the signature would not match.
        headers["Host"] = host
        # Unsigned, as botocore leaves it (http.client adds it after signing): front ends
        # rewrite Accept-Encoding (Google's appends "gzip(gfe)"), and a signed one would then
        # fail with SignatureDoesNotMatch. Identity: the object's bytes as stored.
        headers["Accept-Encoding"] = "identity"
        return headers

    # -- the event loop and the session ------------------------------------------------------

    def _session_here(self) -> Any:
        """This client's session in this process, made on first use (again after a fork or
        :meth:`close`)."""
        if self._session is None or self._pid != os.getpid():
            loop = _process_loop()  # before the lock: it takes the lock itself to make one
            with _LOCK:
                if self._pid != os.getpid():  # forked: the parent's session is not ours
                    if self._closer is not None:
                        self._closer.detach()
                    if self._session is not None:
                        _FORKED_AWAY.append(self._session)
                    self._pid, self._session, self._closer = os.getpid(), None, None
                if self._session is None:
                    session = asyncio.run_coroutine_threadsafe(
                        self._make_session(), loop).result()
                    self._closer = weakref.finalize(self, _release, session, self._pid)
                    self._session = session
        return self._session

    async def _make_session(self) -> Any:
        import ssl

        import aiohttp

        context = ssl.create_default_context(cafile=self.ca_bundle)
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.connections, ssl=context),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout,
                                          sock_read=self.read_timeout),
            auto_decompress=False,  # the object's bytes as stored, as botocore returns them
            # HTTP(S)_PROXY and NO_PROXY are honoured as botocore does, but looked up once a
            # host (_proxy): aiohttp's trust_env reads the environment again for every request,
            # which cost more CPU than the request itself.
            trust_env=False,
        )
        # aiohttp resends a GET once, at once and uncounted, when its connection is reset or
        # closed; extsrc retries itself (counted in Storage.stats, with backoff, at most
        # Storage.retries times), as botocore's own retries are turned off for s3fs.
        if hasattr(session, "_retry_connection"):
            session._retry_connection = False
        return session

    def _proxy(self, scheme: str, host: str) -> str | None:
        found = self._proxies.get(host, False)
        if found is False:
            import urllib.request

            proxies = urllib.request.getproxies_environment()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            found = None if urllib.request.proxy_bypass_environment(name, proxies) \
                else proxies.get(scheme)
            self._proxies[host] = found
        return found

    def close(self) -> None:
        """Close this client's session (a later :meth:`get` makes a new one); the process's
        loop thread stays, for the other clients and later reads."""
        with _LOCK:
            closer, self._closer, self._session = self._closer, None, None
        if closer is not None:
            closer()

    def __getstate__(self) -> dict[str, Any]:
        # Picklable as its settings: the session belongs to one process.
        state = dict(self.__dict__)
        state.update(_session=None, _closer=None, bucket_regions={}, _proxies={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    # -- reading ------------------------------------------------------------------------------

    def get(self, url: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes of ``s3://bucket/key`` ``url``, or of ``[start, end)`` of it (fewer where
        the object is shorter, as S3 answers); raises :class:`S3ResponseError` for S3's errors,
        aiohttp's exceptions for network failures and ``ValueError`` for a URL that names no
        object."""
        session = self._session_here()
        return asyncio.run_coroutine_threadsafe(
            self._get(session, *self._prepare(url, start, end)), _process_loop()).result()

    def get_many(self, requests: Sequence[tuple[str, int | None, int | None]]
                 ) -> list[bytes | BaseException]:
        """:meth:`get` of every ``(url, start, end)``, all sent at once from the event loop (as
        many in flight as the session has connections), in order; a failed one's place holds
        its exception. The requests are signed here, in the calling thread, as :meth:`get`
        signs them."""
        session = self._session_here()
        prepared: list[Any] = []
        for r in requests:
            try:
                prepared.append(self._prepare(*r))
            except ValueError as e:
                prepared.append(e)

        async def one(p: Any) -> bytes:
            if isinstance(p, BaseException):
                raise p
            return await self._get(session, *p)

        async def every() -> list[bytes | BaseException]:
            return await asyncio.gather(*(one(p) for p in prepared), return_exceptions=True)

        return asyncio.run_coroutine_threadsafe(every(), _process_loop()).result()

    def _prepare(self, url: str, start: int | None = None, end: int | None = None
                 ) -> tuple[Any, ...]:
        """The arguments of :meth:`_get` after its session: a GET of ``url`` or of ``[start,
        end)`` of it, signed."""
        bucket, key = _bucket_and_key(url)
        if not bucket or not key:
            # A GET of a bucket is a listing: its XML must never come back as an object's bytes.
            raise ValueError(f"{url!r} names no S3 object: an object's URL is "
                             f"s3://<bucket>/<key>")
        extra = {}
        first = None
        if start is not None or end is not None:
            first = 0 if start is None else start
            extra["Range"] = f"bytes={first}-" if end is None else f"bytes={first}-{end - 1}"
        return url, bucket, key, extra, first, end, self._request(bucket, key, extra)

    def _request(self, bucket: str, key: str, extra: Mapping[str, str]
                 ) -> tuple[str, dict[str, str], str | None, str]:
        """The URL, signed headers, proxy and region of a GET of ``key`` in ``bucket``: one
        region for the host and the signature, read once (another thread may learn the
        bucket's region meanwhile). Made outside the loop thread: refreshing credentials that
        expire (an instance role, SSO, an assumed role) may wait on the network, and the loop
        thread serves every client of the process."""
        region = self.region if self.endpoint is not None else \
            self.bucket_regions.get(bucket, self.region)
        address, host, path = self._address(bucket, key, region)
        return (address, self._headers(region, host, path, extra),
                self._proxy(address.split("://", 1)[0], host), region)

    async def _get(self, session: Any, url: str, bucket: str, key: str, extra: dict[str, str],
                   first: int | None, end: int | None,
                   request: tuple[str, dict[str, str], str | None, str]) -> bytes:
        for attempt in range(2):
            address, headers, proxy, signed_for = request
            async with session.get(_encoded(address), headers=headers, proxy=proxy,
                                   allow_redirects=False,
                                   skip_auto_headers=("Content-Type",)) as r:
                if r.status == 200 and first is not None:
                    # A server (or a proxy) that ignores Range sends the whole object: the
                    # range is cut from it, never the object's first bytes returned instead,
                    # and no more of it is read than the range needs (a range of a shard of
                    # gigabytes must not read the shard).
                    return (await _first_bytes(r, end))[first:end]
                body = await r.read()
                if r.status == 200:
                    return body
                if r.status == 206:
                    if first is not None and not r.headers.get(
                            "Content-Range", f"bytes {first}-").startswith(f"bytes {first}-"):
                        raise S3ResponseError(  # not InvalidRange: that means an empty object
                            206, "", f"asked for {extra['Range']}, the answer has "
                            f"Content-Range {r.headers['Content-Range']}", url)
                    return body
                moved = r.headers.get("x-amz-bucket-region") or _match(_ERROR_REGION, body)
                if (attempt == 0 and self.endpoint is None and r.status in (301, 302, 307, 400)
                        and moved and moved != signed_for):
                    # resent once to the bucket's region; every GET of a batch signed before
                    # the first answer came back is resent too, each compared with its own
                    self.bucket_regions[bucket] = moved
                    request = await asyncio.get_running_loop().run_in_executor(
                        None, self._request, bucket, key, extra)
                    continue
                raise S3ResponseError(r.status, _match(_ERROR_CODE, body) or _code_of(r.status),
                                      _match(_ERROR_MESSAGE, body) or "", url)
        raise AssertionError("unreachable")  # the loop returns or raises


async def _first_bytes(r: Any, n: int | None) -> bytes:
    """The first ``n`` bytes of response ``r``'s body (all of it for ``None``); the connection
    is closed, not reused, when the rest is left unread."""
    if n is None:
        return await r.read()
    parts, got = [], 0
    while got < n:
        chunk = await r.content.read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    if not r.content.at_eof():
        r.close()
    return b"".join(parts)


def _bucket_and_key(url: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key``, leading slashes dropped as s3fs drops them
    (``s3:///bucket/key``)."""
    bucket, _, key = url.split("://", 1)[-1].lstrip("/").partition("/")
    return bucket, key


def _match(pattern: re.Pattern[bytes], body: bytes) -> str | None:
    m = pattern.search(body[:4096])
    return None if m is None else m.group(1).decode("utf-8", "replace")


def _code_of(status: int) -> str:
    # An answer without an XML body (a proxy's, a HEAD-like reply): S3's code for the status.
    return {404: "NoSuchKey", 403: "AccessDenied", 416: "InvalidRange",
            503: "SlowDown"}.get(status, "")


def _encoded(url: str) -> Any:
    # The URL as signed: aiohttp would otherwise re-quote the path, and a key with '%' or '+'
    # would be sent otherwise than its signature says.
    import yarl

    return yarl.URL(url, encoded=True)
