"""What a storage URL is, as plain string arithmetic: its protocol (:func:`url_protocol`),
whether a path is one (:func:`is_url`), a relative row joined under a folder URL
(:func:`join_url`), and whether fsspec has a filesystem for a protocol (:func:`known_protocol`).

Kept apart from :mod:`extsrc.sources.storage`, which reads the objects, so that the modules that
word messages about paths (:mod:`extsrc.sources.where`) can tell a URL extsrc reads from one it
refuses without importing the reader; nothing here imports fsspec at import time.
"""

from __future__ import annotations

import re

__all__ = ["PROTOCOL_EXTRAS", "is_url", "join_url", "known_protocol", "url_protocol"]

#: protocol -> (the extra that installs its filesystem, the module it needs).
PROTOCOL_EXTRAS: dict[str, tuple[str, str]] = {
    "s3": ("s3", "s3fs"), "s3a": ("s3", "s3fs"),
    "gs": ("gcs", "gcsfs"), "gcs": ("gcs", "gcsfs"),
    "http": ("http", "aiohttp"), "https": ("http", "aiohttp"),
}

_URL_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]+)://")


def url_protocol(text: str) -> str | None:
    """The lower-case protocol of a URL (``"s3"`` for ``s3://b/k``), ``None`` for a local path.

    ``file://`` is not a storage URL (extsrc reads local files itself) and gives ``None``; so does
    a one-letter scheme (a Windows drive).
    """
    m = _URL_RE.match(text)
    if m is None:
        return None
    scheme = m["scheme"].lower()
    return None if scheme in ("file", "local") else scheme


def is_url(text: str) -> bool:
    """Whether ``text`` is a storage URL that :class:`~extsrc.sources.storage.Storage` reads
    (see :func:`url_protocol`)."""
    return url_protocol(text) is not None


def _split(url: str) -> tuple[str, str]:
    """``("s3://", "bucket/key")``."""
    head, _, rest = url.partition("://")
    return head + "://", rest


def join_url(base: str, rel: str) -> str | None:
    """``rel`` resolved against the folder URL ``base`` (``..`` and ``.`` collapsed), or ``None``
    when ``..`` climbs above the bucket (or host)."""
    import posixpath

    if is_url(rel):
        scheme, rest = _split(rel)
    else:
        scheme, rest = _split(base.rstrip("/") + "/" + rel)
    trailing = rest.endswith("/")
    parts: list[str] = []
    for p in rest.split("/"):
        if p == "..":
            if len(parts) <= 1:  # the bucket or host itself
                return None
            parts.pop()
        elif p not in ("", "."):
            parts.append(p)
    if not parts:
        return None
    out = scheme + posixpath.join(*parts)
    return out + "/" if trailing else out


def known_protocol(protocol: str) -> bool:
    """Whether fsspec (if installed) has a filesystem for ``protocol``."""
    if protocol in PROTOCOL_EXTRAS:
        return True
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return False
    return protocol in known_implementations or protocol in registry
