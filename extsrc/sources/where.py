"""Where a sample or a dataset is, in the words every message uses, and which sources are refused.

A manifest file names a sample by its line (``train.csv line 17``); a folder dataset, which has
no lines, by its sample number (``folder train/, sample 17``): :func:`sample_where`. Advice on
how to fix a bad sample follows the same split (:func:`reworded_fix`). A manifest, folder or
``root`` given as a URL that no storage reads (``ftp://...`` without an fsspec filesystem,
``file://...``, ``s3:/bucket`` with one slash) is refused with what to do instead
(:func:`refuse_url`); where the caller reads object storage, a protocol fsspec knows is let
through (:mod:`extsrc.sources.storage`). While a manifest is parsed, ``_Loc`` words where a
cell is (``train.csv line 4``, ``<from_lists> item 4``).

Every module that words a message about a sample imports these, so they depend on nothing but
the error types, :func:`~extsrc._util.textsafe.shown` and the URL arithmetic of
:mod:`extsrc.sources.urls`.
"""

from __future__ import annotations

import os
import re

from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError
from extsrc.sources.urls import known_protocol, url_protocol

__all__ = ["is_folder_source", "is_shards_source", "refuse_url", "reworded_fix", "sample_where",
           "storage_url", "url_advice", "url_scheme"]


def is_folder_source(source: str) -> bool:
    """Whether a manifest's ``source`` names a folder dataset (it ends with a separator; a
    manifest file's name never does)."""
    return source.endswith(("/", os.sep))


def sample_where(source: str, line: int | str, *, plural: bool = False) -> str:
    """Where a sample comes from, for messages: ``train.csv line 17`` for a manifest file,
    ``folder train/, sample 17`` for a folder (``line`` is then the sample number).
    ``plural`` words a list (``lines 3, 4``)."""
    s = "s" if plural else ""
    if is_folder_source(source):
        return f"folder {shown(source)}, sample{s} {line}"
    if is_shards_source(source):
        return f"shards {shown(source)}, sample{s} {line}"
    return f"{shown(source)} line{s} {line}"


def is_shards_source(source: str) -> bool:
    """Whether a manifest's ``source`` names tar shards (:mod:`extsrc.sources.shards`: a shard,
    a pattern, or a ``{a.tar,b.tar}`` list); its ``lines`` are then sample numbers."""
    return source.lower().endswith((".tar", ".tar}"))


def reworded_fix(fix: str, source: str | None) -> str:
    """``fix`` (how to fix a bad sample) for a folder dataset or tar shards, which have no line
    to drop."""
    if source is not None and is_shards_source(source):
        return fix.replace("drop the line", "remove the sample from its shard").replace(
            "fix the path in the manifest", "fix the member's name in the shard")
    if source is None or not is_folder_source(source):
        return fix
    return fix.replace("drop the line", "delete the file").replace(
        "fix the path in the manifest", "rename the file")


#: The start of a URL: a scheme of two or more characters and ``://`` (one letter before the
#: colon is a Windows drive, ``C:\\data`` or ``C:/data``), or a storage or web scheme with one
#: slash, as ``pathlib.Path("s3://bucket")`` collapses it.
_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]+)://"
    r"|(?P<collapsed>s3|s3a|gs|gcs|az|abfss?|wasbs?|hdfs|https?|ftp|file):/(?!/)",
    re.IGNORECASE,
)
_LOCAL_ADVICE = (
    "download the files (aws s3 sync, gsutil -m rsync, wget) and list their local paths, or "
    "mount the bucket (s3fs, gcsfuse) and list the paths under the mount point"
)
_URL_ADVICE = (
    "no fsspec filesystem reads this protocol, so it would be read as a local path. Object "
    "storage is read at s3://, gs://, http(s):// and the other protocols fsspec knows (install "
    f"fsspec and the package for yours); or {_LOCAL_ADVICE}"
)


def storage_url(text: str) -> bool:
    """Whether ``text`` is a URL with ``://`` whose protocol a storage filesystem reads."""
    protocol = url_protocol(text)
    return protocol is not None and known_protocol(protocol)


def url_scheme(text: str) -> str | None:
    """The scheme (``"s3"``, ``"https"``...) when ``text`` starts with a URL, else ``None``."""
    m = _URL.match(text.strip())
    return None if m is None else (m["scheme"] or m["collapsed"]).lower()


def url_advice(scheme: str, text: str) -> str:
    """What to do about ``text``, a URL with ``scheme`` that cannot be read where it was given."""
    if scheme == "file":
        return ("file:// URLs are not supported: drop the file:// prefix and list the local "
                "path itself")
    if known_protocol(scheme) and not storage_url(text):  # "s3:/bucket", as pathlib writes it
        return (f"write it as {scheme}://... with two slashes to read it from object storage "
                "(pathlib.Path collapses them: pass a str)")
    if known_protocol(scheme):
        return f"only local files are read here: {_LOCAL_ADVICE}"
    return _URL_ADVICE


def refuse_url(value: object, what: str, *, allow_storage: bool = False) -> None:
    """Refuse a manifest, folder or ``root`` argument that is a URL (``s3://...``,
    ``https://...``, any ``scheme://``) with a :class:`~extsrc.errors.ManifestError` saying
    what to do, instead of a file-not-found error about a local path made of the URL.
    ``allow_storage``: let through the URLs :mod:`extsrc.sources.storage` reads (a protocol
    fsspec knows, written with ``://``)."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        return
    text = os.fsdecode(os.fspath(value))
    scheme = url_scheme(text)
    if scheme is not None and allow_storage and storage_url(text):
        return
    if scheme is not None:
        raise ManifestError(
            f"{what} {shown(text)} is a URL ({scheme}://) that cannot be read; "
            f"{url_advice(scheme, text)}",
            path=text, reason="url",
        )


class _Loc:
    """Formats "where" for messages: ``manifest.csv line 4`` or ``<from_lists> item 4``."""

    def __init__(self, source: str, unit: str = "line") -> None:
        self.source = shown(source)  # messages reach terminals: no control characters
        self.unit = unit

    def at(self, n: int) -> str:
        return f"{self.source} {self.unit} {n}"
