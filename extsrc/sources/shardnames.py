"""Shard names: brace patterns expanded as webdataset expands them, globs matched (locally or
through the storage), local paths made absolute, and the shards one :func:`read_shards
<extsrc.sources.shards.read_shards>` call reads, each named once."""

from __future__ import annotations

import glob
import os
import re

from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError, ManifestFileNotFoundError
from extsrc.sources.storage import Storage, url_protocol
from extsrc.sources.where import url_scheme

__all__ = ["expand_shards", "is_remote_shard", "is_shard_source", "local_shard_path",
           "shard_list"]

_BRACE_RE = re.compile(r"\{([^{}]*)\}")
_RANGE_RE = re.compile(r"([0-9]+)\.\.([0-9]+)\Z")
_TAR_RE = re.compile(r"\.tar\Z", re.IGNORECASE)
_COMPRESSED_RE = re.compile(r"\.(tar\.(gz|bz2|xz|zst|lz4)|tgz|tbz2?|txz)\Z", re.IGNORECASE)


def expand_shards(pattern: str) -> list[str]:
    """Expand brace patterns as webdataset does: ``train-{000000..000127}.tar`` (a range,
    zero-padded to the width of its bounds when one is written with a leading zero),
    ``{train,val}-0.tar`` (a list), several braces in one name (every combination, in order).
    A name without braces is returned as is."""
    m = _BRACE_RE.search(pattern)
    if m is None:
        return [pattern]
    head, body, tail = pattern[:m.start()], m.group(1), pattern[m.end():]
    r = _RANGE_RE.match(body)
    if r is not None:
        a, b = r.groups()
        lo, hi = int(a), int(b)
        if hi < lo:
            raise ManifestError(
                f"{shown(pattern)}: the range {{{body}}} runs backwards; write it low..high "
                f"({{{b}..{a}}})", source=pattern, reason="bad_pattern")
        width = max(len(a), len(b)) if (a[0] == "0" or b[0] == "0") else 0
        items = [str(i).zfill(width) for i in range(lo, hi + 1)]
    elif "," in body:
        items = body.split(",")
    else:
        raise ManifestError(
            f"{shown(pattern)}: {{{shown(body)}}} is neither a range such as {{000000..000127}} "
            "nor a list such as {train,val}", source=pattern, reason="bad_pattern")
    return [head + item + rest for item in items for rest in expand_shards(tail)]


def is_shard_source(value: object) -> bool:
    """Whether ``value`` names tar shards: a path, URL or brace pattern ending in ``.tar``
    (or a compressed tar, which :func:`read_shards` refuses with advice), or a non-empty list of
    those."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return bool(_TAR_RE.search(value) or _COMPRESSED_RE.search(value))
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, (str, os.PathLike)) and is_shard_source(v) for v in value)
    return False


def is_remote_shard(name: str) -> bool:
    scheme = url_scheme(name)
    return scheme is not None and scheme != "file"


def local_shard_path(name: str) -> str:
    if name.lower().startswith("file://"):
        name = name[len("file://"):]
    return os.path.abspath(os.path.expanduser(name))


def shard_list(shards: object, storage: Storage | None,
                ) -> tuple[list[str], str]:
    """The shards named (patterns expanded, local paths made absolute), and ``source``."""
    if isinstance(shards, (str, os.PathLike)):
        given = [os.fspath(shards)]
        source = given[0]
    elif isinstance(shards, (list, tuple)) and shards:
        given = [os.fspath(s) for s in shards]
        shown_list = given if len(given) <= 4 else [*given[:2], "...", given[-1]]
        source = "{" + ",".join(shown_list) + "}"
    else:
        raise TypeError(
            "read_shards: shards must be a shard path, URL or brace pattern "
            "('train-{000000..000127}.tar') or a non-empty list of them, got "
            f"{type(shards).__name__} {shards!r}")
    out: list[str] = []
    for g in given:
        if not isinstance(g, str):
            raise TypeError(f"read_shards: shard names must be str, got {type(g).__name__}")
        if _COMPRESSED_RE.search(g):
            raise ManifestError(
                f"{shown(g)}: compressed tar shards cannot be read by byte range; store them as "
                "plain .tar (images are compressed already, so little is lost): "
                "gunzip / zstd -d the shards", source=source, path=g, reason="compressed_shard")
        for name in expand_shards(g):
            if not _TAR_RE.search(name):
                raise ManifestError(
                    f"{shown(name)}: a shard must be a .tar file", source=source, path=name,
                    reason="bad_pattern")
            if is_remote_shard(name):
                if glob.has_magic(name):
                    proto = url_protocol(name) or ""
                    fs = (storage or Storage()).filesystem(proto)
                    matched = sorted(p.split("://", 1)[-1] for p in fs.glob(name))
                    out += [f"{proto}://{p}" for p in matched]
                    if not matched:
                        raise ManifestFileNotFoundError(
                            f"{shown(name)}: no shard matches", source=source, path=name,
                            reason="missing_shard")
                else:
                    out.append(name)
            elif glob.has_magic(name):
                matched = sorted(glob.glob(local_shard_path(name)))
                if not matched:
                    raise ManifestFileNotFoundError(
                        f"{shown(name)}: no shard matches", source=source, path=name,
                        reason="missing_shard")
                out += matched
            else:
                out.append(local_shard_path(name))
    seen: dict[str, int] = {}
    for s in out:
        seen[s] = seen.get(s, 0) + 1
    twice = [s for s, n in seen.items() if n > 1]
    if twice:
        raise ManifestError(
            f"{shown(source)}: shard {shown(twice[0])} is named {seen[twice[0]]} times; every "
            "sample would be read that many times an epoch. Name each shard once",
            source=source, path=twice[0], reason="duplicate_shard")
    files: dict[tuple[int, int], str] = {}  # the same file under two names (a link, a mount)
    for name in out:
        if is_remote_shard(name):
            continue
        try:
            st = os.stat(name)
        except OSError:
            continue  # reported when the shard is indexed
        other = files.setdefault((st.st_dev, st.st_ino), name)
        if other != name:
            raise ManifestError(
                f"{shown(source)}: shards {shown(other)} and {shown(name)} are the same file (a "
                "link); every sample would be read twice an epoch. Name each shard once",
                source=source, path=name, reason="duplicate_shard")
    return out, source
