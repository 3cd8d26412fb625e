"""Where a sample or a dataset is, in the words every message uses, and which sources are refused.

A manifest file names a sample by its line (``train.csv line 17``); a folder dataset, which has
no lines, by its sample number (``folder train/, sample 17``): :func:`sample_where`. Advice on
how to fix a bad sample follows the same split (:func:`reworded_fix`). A manifest, folder or
``root`` given as a URL (``s3://bucket/train.csv``) is refused with what to do instead
(:func:`refuse_url`), since extsrc reads local files only.

Every module that words a message about a sample imports these, so they depend on nothing but
the error types and :func:`~extsrc._util.textsafe.shown`.
"""

from __future__ import annotations

import os
import re

from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError

__all__ = ["is_folder_source", "refuse_url", "reworded_fix", "sample_where", "url_advice",
           "url_scheme"]


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
    return f"{shown(source)} line{s} {line}"


def reworded_fix(fix: str, source: str | None) -> str:
    """``fix`` (how to fix a bad sample) for a folder dataset, which has no line to drop."""
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
_URL_ADVICE = (
    "URLs and object storage are not supported yet, so it would be read as a local path. "
    "Download the files (aws s3 sync, gsutil -m rsync, wget) and list their local paths, or "
    "mount the bucket (s3fs, gcsfuse) and list the paths under the mount point"
)


def url_scheme(text: str) -> str | None:
    """The scheme (``"s3"``, ``"https"``...) when ``text`` starts with a URL, else ``None``."""
    m = _URL.match(text.strip())
    return None if m is None else (m["scheme"] or m["collapsed"]).lower()


def url_advice(scheme: str) -> str:
    if scheme == "file":
        return ("file:// URLs are not supported: drop the file:// prefix and list the local "
                "path itself")
    return _URL_ADVICE


def refuse_url(value: object, what: str) -> None:
    """Refuse a manifest, folder or ``root`` argument that is a URL (``s3://...``,
    ``https://...``, any ``scheme://``) with a :class:`~extsrc.errors.ManifestError` saying
    what to do, instead of a file-not-found error about a local path made of the URL."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        return
    text = os.fsdecode(os.fspath(value))
    scheme = url_scheme(text)
    if scheme is not None:
        raise ManifestError(
            f"{what} {shown(text)} is a URL ({scheme}://), and extsrc reads local files only; "
            f"{url_advice(scheme)}",
            path=text, reason="url",
        )
