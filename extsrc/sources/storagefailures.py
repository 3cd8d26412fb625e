r"""What a failed storage request means: retry it (``transient``), or report it as ``missing``,
``access_denied`` or ``unreadable``, whichever library raised it (botocore's ``ClientError``,
s3fs's and fsspec's ``OSError``\s, aiohttp's and urllib3's network errors, extsrc's own
:class:`~extsrc.sources.s3direct.S3ResponseError`), and the backoff between retries. Pure
functions of the exception: :class:`~extsrc.sources.storage.Storage` asks them for every failed
read."""

from __future__ import annotations

import errno
import random
import re
from collections.abc import Mapping

from extsrc.sources.fileread import FileReadProblem

__all__ = ["backoff_delay", "classify", "describe", "problem", "range_refused"]

_TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
    "TooManyRequestsException", "ServiceUnavailable", "InternalError", "RequestTimeout",
    "RequestTimeoutException", "PriorRequestNotComplete", "BandwidthLimitExceeded",
})
_DENIED_CODES = frozenset({
    "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "AllAccessDisabled", "AccountProblem", "NotSignedUp",
})
_TRANSIENT_ERRNOS = frozenset({
    errno.EBUSY, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED,
    errno.EPIPE, errno.EAGAIN, getattr(errno, "EREMOTEIO", errno.EIO), errno.EHOSTUNREACH,
    errno.ENETUNREACH, errno.ENETRESET,
})
# Exception class names (anywhere in the class hierarchy) of network failures in botocore,
# aiohttp, urllib3, requests and the standard library that a new request may not hit.
_TRANSIENT_NAMES = re.compile(
    r"Timeout|ConnectionError|ConnectionClosed|ServerDisconnected|ClientPayloadError|"
    r"IncompleteRead|ResponseParserError|ClientOSError|EndpointConnectionError|ProxyConnection|"
    r"ProtocolError|ChunkedEncodingError|RemoteDisconnected|HTTPClientError"
)


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(out) < 8:
        out.append(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return out


def _status(e: BaseException) -> int | None:
    for name in ("status", "status_code", "code"):
        v = getattr(e, name, None)
        if isinstance(v, int) and 100 <= v < 600:
            return v
    resp = getattr(e, "response", None)
    if isinstance(resp, Mapping):
        v = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(v, int):
            return v
    return None


def _error_code(e: BaseException) -> str | None:
    resp = getattr(e, "response", None)
    if isinstance(resp, Mapping):
        code = resp.get("Error", {}).get("Code")
        return None if code is None else str(code)
    return None


def classify(exc: BaseException) -> str:
    """What a failed request means: ``"transient"`` (retry it), ``"missing"``,
    ``"access_denied"`` or ``"unreadable"`` (permanent)."""
    chain = _chain(exc)
    for e in chain:
        code = _error_code(e)
        if code in _TRANSIENT_CODES:
            return "transient"
        if code in _DENIED_CODES:
            return "access_denied"
        if code in ("NoSuchKey", "NoSuchBucket", "404", "NotFound"):
            return "missing"
        status = _status(e)
        if status is not None and (status >= 500 or status in (408, 429)):
            return "transient"
        if "SlowDown" in str(e) or "reduce your request rate" in str(e):
            return "transient"
    first = chain[0]
    if isinstance(first, FileNotFoundError):
        return "missing"
    if isinstance(first, PermissionError):
        return "access_denied"
    for e in chain:
        names = " ".join(t.__name__ for t in type(e).__mro__)
        if isinstance(e, (TimeoutError, ConnectionError)) or _TRANSIENT_NAMES.search(names):
            return "transient"
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            return "transient"
        status = _status(e)
        if status in (401, 403):
            return "access_denied"
        if status in (404, 410):
            return "missing"
    return "unreadable"


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): "full jitter", uniform in
    ``[0, min(cap, base * 2**(attempt-1))]``, so that many readers retrying at once spread out."""
    return rng.uniform(0.0, min(cap, base * 2.0 ** (attempt - 1)))



def range_refused(exc: BaseException) -> bool:
    """Whether a ranged read failed because the range cannot be satisfied (HTTP 416, S3
    ``InvalidRange``: the object is empty)."""
    return any(_error_code(e) == "InvalidRange" or _status(e) == 416
               or "InvalidRange" in str(e) for e in _chain(exc))


def describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def problem(kind: str, url: str, e: BaseException) -> FileReadProblem:
    if kind == "missing":
        return FileReadProblem("missing", f"no such object (or bucket) ({describe(e)})")
    if kind == "access_denied":
        return FileReadProblem(
            "access_denied", f"access denied: the credentials in storage_options (or the "
            f"environment) may not read it ({describe(e)})")
    return FileReadProblem("unreadable", f"cannot read the object: {describe(e)}")
