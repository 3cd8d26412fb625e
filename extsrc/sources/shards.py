"""Webdataset-style tar shards (``train-{000000..000127}.tar``) read as a manifest of byte ranges.

A shard holds samples as groups of members that share a key, webdataset's rule: the key is the
member's path up to the first dot of its file name, the rest is the member's extension
(``0001.jpg``, ``0001.cls`` and ``0001.json`` are the sample ``0001``; ``a/0001.seg.png`` is the
sample ``a/0001`` with extension ``seg.png``). Each sample needs exactly one image member (by
extension, :data:`IMAGE_EXTENSIONS` unless given) and, unless ``label=None``, one label member:
``cls`` (an integer in text) or a ``json`` object and the field that holds the label.

Design: index the shards, then read byte ranges
    :func:`read_shards` reads every shard's tar headers once and returns a
    :class:`ShardManifest`: a :class:`~extsrc.sources.manifest.Manifest` whose samples are byte
    ranges ``(shard, offset, size)`` of the image members, with their labels. So everything a
    manifest gets holds for shards unchanged: the Loader's global shuffle (one permutation of all
    samples, different for each epoch and seed, the same on a rerun), sharding across ranks by
    sample (every sample exactly once per epoch, the ranks' samples disjoint), ``last_batch``,
    ``state_dict()`` and an exact mid-epoch resume, ``on_error="skip"`` and
    :func:`extsrc.validate`. A sample read is one
    positioned read (``os.pread``) of a shard file that each reader process keeps open, or one
    ranged request for a shard behind a URL (any fsspec protocol: ``s3://``, ``gs://``,
    ``https://``): nothing decodes the tar stream while training, and a read costs fewer system
    calls than opening a loose file.

    A webdataset-style stream (shards split across ranks and workers, a bounded shuffle buffer,
    position = shard + offset) needs no index, but splits work in shard-sized blocks (ranks and
    workers get unequal sample counts unless shards divide evenly), shuffles only within its
    buffer, and resumes by replaying a shard. The index costs one pass over the headers: local
    shards are read header by header (the member data is skipped by seeking), remote ones
    by ranged reads through the storage (:class:`RemoteShard`: retried and counted as sample
    reads are; large blocks where members are small, a small block per header where they are
    large), several shards at a time.

Shards are checked while they are indexed: a file that is not a tar, a damaged header, a shard
cut short (a member's data past the end, or no end-of-archive blocks), a key without an image or
with two, a missing or bad label, a key that appears twice in a shard. ``on_error="raise"``
raises :class:`~extsrc.errors.ManifestError` naming the shard, the member and how to fix it;
``on_error="skip"`` leaves those samples out, warns with a count per reason and the first few, and
keeps every :class:`ShardProblem` in :attr:`ShardManifest.skipped`. Members without an extension
(no dot in the name) and directories belong to no sample and are passed over, as webdataset does.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import stat
import threading
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError, ManifestFileNotFoundError
from extsrc.sources.fileread import DEFAULT_MAX_FILE_BYTES, FileReadProblem
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS, Finding, check_bytes, decode_check
from extsrc.sources.manifest import (
    Manifest,
    _validate_classes,
    _validated_label_array,
    storage_arg,
)
from extsrc.sources.storage import Storage, url_protocol
from extsrc.sources.tarindex import Unsupported, read_members
from extsrc.sources.where import url_scheme

__all__ = [
    "IMAGE_EXTENSIONS",
    "ShardManifest",
    "ShardProblem",
    "check_range",
    "expand_shards",
    "is_shard_source",
    "read_range",
    "read_shards",
]

#: Extensions (lower case, no dot) of the member taken as a sample's image by default: the
#: image formats DALI's decoder reads.
IMAGE_EXTENSIONS: tuple[str, ...] = (
    "jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "pnm", "ppm", "pgm", "pbm", "jp2",
)

#: Reason codes of shard problems: what each means and how to fix it.
SHARD_REASONS: dict[str, tuple[str, str]] = {
    "missing_shard": ("the shard does not exist", "fix the shard pattern or list"),
    "unreadable_shard": ("the shard cannot be read (permissions, I/O error, not a file)",
                         "fix the shard's permissions or drop it from the list"),
    "bad_shard": ("the shard is not a readable tar archive (not a tar, or a damaged header)",
                  "re-create the shard with tar or webdataset's TarWriter"),
    "truncated_shard": ("the shard ends before its last member does (cut short)",
                        "copy or upload the shard again, or re-create it"),
    "no_image": ("the sample has no image member",
                 "add the image, or name its extension in image_extensions=[...]"),
    "two_images": ("the sample has more than one image member",
                   "keep one image per key, or name the one to use in image_extensions=[...]"),
    "no_label": ("the sample has no label member",
                 "add the label member, or pass label=None for samples without labels"),
    "bad_label": ("the label member does not hold a valid label",
                  "write a label integer >= 0 (or, in JSON, a class name)"),
    "duplicate_key": ("the same key appears twice in the shard",
                      "give every sample its own key (webdataset groups members by key)"),
    "not_a_file": ("the member is a link or a special file, not a regular file",
                   "store the file itself (tar --dereference --hard-dereference)"),
}

# webdataset's split of a member name into key and extension: the directory part and the file
# name up to its first dot, then the rest of the file name.
_KEY_RE = re.compile(r"((?:.*/|)[^.]+)[.]([^/]*)\Z", re.DOTALL)
_BRACE_RE = re.compile(r"\{([^{}]*)\}")
_RANGE_RE = re.compile(r"([0-9]+)\.\.([0-9]+)\Z")
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_INT64_MAX = int(np.iinfo(np.int64).max)
_TAR_RE = re.compile(r"\.tar\Z", re.IGNORECASE)
_COMPRESSED_RE = re.compile(r"\.(tar\.(gz|bz2|xz|zst|lz4)|tgz|tbz2?|txz)\Z", re.IGNORECASE)
_LABEL_MAX_BYTES = 1 << 20  # a cls/json member larger than this is not a label
_MAX_NAMED = 3  # problems named in a skip warning
_REMOTE_BLOCK = 8 << 20  # the largest block read at once while indexing a remote shard
_REMOTE_MIN_BLOCK = 64 << 10  # the block read after skipping a large member
_NONE = np.zeros(0, dtype=np.int64)
_NONE.flags.writeable = False


# --------------------------------------------------------------------------------------------
# Shard names


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


def _is_remote(name: str) -> bool:
    scheme = url_scheme(name)
    return scheme is not None and scheme != "file"


def _local(name: str) -> str:
    if name.lower().startswith("file://"):
        name = name[len("file://"):]
    return os.path.abspath(os.path.expanduser(name))


# --------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True)
class ShardProblem:
    """What is wrong with a shard or one of its samples: the ``shard``, the ``member`` (``None``
    for the shard as a whole), a ``reason`` code of :data:`SHARD_REASONS` and a ``message`` that
    says what was found; ``fix`` says what to do."""

    shard: str
    member: str | None
    reason: str
    message: str

    @property
    def fix(self) -> str:
        return SHARD_REASONS[self.reason][1]

    @property
    def path(self) -> str:
        return self.shard if self.member is None else f"{self.shard}/{self.member}"

    def __str__(self) -> str:
        where = shown(self.shard) + ("" if self.member is None else
                                     f" member {shown(self.member)}")
        return f"{where}: {self.message} [{self.reason}]; {self.fix}"


# --------------------------------------------------------------------------------------------
# The manifest


@dataclass(frozen=True, eq=False)
class ShardManifest(Manifest):
    """A :class:`~extsrc.sources.manifest.Manifest` whose samples are image members of tar shards.

    Besides the manifest's fields (``paths`` are ``<shard>/<member>``, ``lines`` the 1-based
    sample numbers in shard order, ``source`` the pattern or list as given):

    Attributes:
        shards: the shards, local absolute paths or URLs, in order.
        shard_of: read-only ``int64`` array: the index in :attr:`shards` of every sample.
        offsets, sizes: read-only ``int64`` arrays: where every image member's data starts in
            its shard, and its length in bytes.
        storage: how URL shards are read (:class:`~extsrc.sources.storage.Storage`: fsspec
            options, requests in flight, retries, cache); ``None`` for local shards only.
        skipped: what ``on_error="skip"`` left out while indexing.
        stamps: every local shard's ``(size, mtime_ns)`` when it was indexed (``None`` for a
            URL shard, or to check nothing): a read from a shard that has changed since is
            refused, since its offsets would point into other data.
    """

    shards: tuple[str, ...] = ()
    shard_of: np.ndarray = field(default_factory=lambda: _NONE)
    offsets: np.ndarray = field(default_factory=lambda: _NONE)
    sizes: np.ndarray = field(default_factory=lambda: _NONE)
    skipped: tuple[ShardProblem, ...] = ()
    stamps: tuple[tuple[int, int] | None, ...] = ()

    def __post_init__(self) -> None:
        # The manifest's own checks, less "paths are absolute": a URL shard's samples are not.
        source = str(self.source)
        where = shown(source)
        paths = tuple(self.paths)
        if not all(isinstance(p, str) for p in paths):
            raise ManifestError(f"{where}: ShardManifest.paths must be str")
        n = len(paths)
        labels = _validated_label_array(self.labels, n, where)
        lines = tuple(int(x) for x in self.lines)
        classes = None if self.classes is None else list(self.classes)
        if classes is not None:
            _validate_classes(classes, labels, where)
        if self.root is not None:
            raise ManifestError(f"{where}: a ShardManifest has no root")
        shards = tuple(self.shards)
        arrays = {}
        for name in ("shard_of", "offsets", "sizes"):
            a = np.array(getattr(self, name), dtype=np.int64)
            if a.shape != (n,) or len(lines) != n or (n and a.min() < 0):
                raise ManifestError(
                    f"{where}: ShardManifest.{name} and lines need one value >= 0 per sample ({n})")
            a.flags.writeable = False
            arrays[name] = a
        if n and arrays["shard_of"].max() >= len(shards):
            raise ManifestError(f"{where}: ShardManifest.shard_of names a shard not in shards")
        storage = self.storage
        if storage is not None and not isinstance(storage, Storage):
            raise TypeError(f"{where}: ShardManifest.storage must be an extsrc Storage or None, "
                            f"got {type(storage).__name__}")
        if storage is None and any(_is_remote(x) for x in shards):
            storage = Storage()
        stamps = tuple(None if t is None else (int(t[0]), int(t[1])) for t in self.stamps) \
            or (None,) * len(shards)
        if len(stamps) != len(shards):
            raise ManifestError(f"{where}: ShardManifest.stamps needs one entry per shard")
        for name, value in (("source", source), ("paths", paths), ("labels", labels),
                            ("lines", lines), ("classes", classes), ("shards", shards),
                            ("storage", storage), ("skipped", tuple(self.skipped)),
                            ("stamps", stamps), *arrays.items()):
            object.__setattr__(self, name, value)

    def select(self, keep: Sequence[int] | np.ndarray) -> ShardManifest:
        """The samples at indices ``keep``, in that order; lines and ``source`` stay those of
        this manifest, so messages still name the same samples."""
        keep = np.asarray(keep, dtype=np.int64)
        return ShardManifest(
            paths=tuple(self.paths[i] for i in keep), labels=self.labels[keep],
            classes=self.classes, lines=tuple(self.lines[i] for i in keep), source=self.source,
            shards=self.shards, shard_of=self.shard_of[keep], offsets=self.offsets[keep],
            sizes=self.sizes[keep], storage=self.storage, skipped=self.skipped,
            stamps=self.stamps,
        )

    def range(self, index: int) -> tuple[str, int, int, Storage | None,
                                         tuple[int, int] | None]:
        """Where sample ``index``'s image member lies: ``(shard, offset, size, storage,
        stamp)``, the arguments of :func:`read_range` and :func:`check_range`."""
        s = int(self.shard_of[index])
        return (self.shards[s], int(self.offsets[index]), int(self.sizes[index]),
                self.storage, self.stamps[s])

    def is_remote(self, index: int) -> bool:
        """Whether sample ``index`` lies in a shard behind a URL (read through :attr:`storage`)."""
        return self.remote[int(self.shard_of[index])]

    @functools.cached_property
    def remote(self) -> tuple[bool, ...]:
        """Whether each shard of :attr:`shards` is behind a URL."""
        return tuple(_is_remote(x) for x in self.shards)

    def read(self, index: int, *, max_bytes: int | None = DEFAULT_MAX_FILE_BYTES) -> bytes:
        """The image member of sample ``index``, or
        :class:`~extsrc.sources.fileread.FileReadProblem`."""
        shard, offset, size, storage, stamp = self.range(index)
        _check_size(size, max_bytes)
        return read_range(shard, offset, size, storage, stamp)

    def read_many(self, indices: Sequence[int] | np.ndarray, *,
                  max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
                  ) -> list[bytes | FileReadProblem]:
        """The image members of samples ``indices``, in that order, a failed read's place
        holding its :class:`~extsrc.sources.fileread.FileReadProblem`. Members of URL shards
        are read together through :attr:`storage`, up to its ``concurrency`` ranged GETs in
        flight; members of local shards by one ``pread`` each."""
        out: list[bytes | FileReadProblem | None] = [None] * len(indices)
        remote: list[tuple[int, tuple[str, int, int]]] = []
        for k, i in enumerate(indices):
            shard, offset, size, _, _ = self.range(int(i))
            if self.is_remote(int(i)):
                try:
                    _check_size(size, max_bytes)
                except FileReadProblem as e:
                    out[k] = e
                    continue
                remote.append((k, (shard, offset, size)))
            else:
                try:
                    out[k] = self.read(int(i), max_bytes=max_bytes)
                except FileReadProblem as e:
                    out[k] = e
        if remote:
            assert self.storage is not None  # set for every manifest with a URL shard
            got = self.storage.read_ranges([r for _, r in remote])
            for (k, _), g in zip(remote, got, strict=True):
                out[k] = g
        return out  # type: ignore[return-value]

    def check(self, index: int, *, decode: bool = True,
              max_pixels: int | None = DEFAULT_MAX_PIXELS,
              max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES) -> Finding | None:
        """:func:`extsrc.validate`'s checks of sample ``index``'s image member (``None``: good)."""
        return check_range(*self.range(index), decode=decode, max_pixels=max_pixels,
                           max_file_bytes=max_file_bytes)

    def __repr__(self) -> str:
        return (f"ShardManifest(source={self.source!r}, shards={len(self.shards)}, "
                f"samples={len(self)}, labels_shape={self.labels.shape}, "
                f"skipped={len(self.skipped)})")


# --------------------------------------------------------------------------------------------
# Reading byte ranges: one open file per local shard and process, fsspec for URLs


_LOCK = threading.Lock()
_OPEN: dict[str, int] = {}
_OPEN_PID = [os.getpid()]
_MAX_OPEN = 64


def _local_fd(path: str) -> int:
    """An open descriptor of the local shard ``path`` (the caller holds ``_LOCK``)."""
    if _OPEN_PID[0] != os.getpid():  # a forked reader: the parent's table is not ours to use
        _OPEN.clear()
        _OPEN_PID[0] = os.getpid()
    fd = _OPEN.get(path)
    if fd is not None:
        return fd
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise FileReadProblem("missing", "its shard no longer exists") from None
    except OSError as e:
        raise FileReadProblem("unreadable", f"cannot open its shard: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileReadProblem("not_a_file", "its shard is not a regular file")
    if len(_OPEN) >= _MAX_OPEN:  # the oldest goes: readers move through shards in any order
        os.close(_OPEN.pop(next(iter(_OPEN))))
    _OPEN[path] = fd
    return fd


def read_range(shard: str, offset: int, size: int, storage: Storage | None = None,
               stamp: tuple[int, int] | None = None) -> bytes:
    """``size`` bytes at ``offset`` of ``shard`` (a local path, or a URL read through
    ``storage``: one ranged GET with its retries and counts). A local shard whose
    ``(size, mtime_ns)`` is no longer ``stamp`` (rewritten, replaced, grown), or a short read,
    raises :class:`~extsrc.sources.fileread.FileReadProblem`: the index no longer fits the shard."""
    if _is_remote(shard):
        data = (storage or Storage()).read_range(shard, offset, size)
    else:
        with _LOCK:  # a descriptor is not closed by another thread while it is read
            fd = _local_fd(shard)
            if stamp is not None:  # one fstat: cheap beside silently reading other bytes
                st = os.fstat(fd)
                if (st.st_size, st.st_mtime_ns) != stamp:
                    try:  # replaced (a new file at the path) since it was opened? read that
                        now = os.stat(shard)
                    except OSError:
                        now = None
                    if now is not None and (now.st_size, now.st_mtime_ns) == stamp:
                        os.close(_OPEN.pop(shard))
                        fd = _local_fd(shard)
                    else:
                        raise FileReadProblem(
                            "unreadable",
                            "its shard changed since it was indexed (its size or modification "
                            "time differs), so the index no longer points at this member: read "
                            "the shards again")
            data = os.pread(fd, size, offset)
    if len(data) != size:
        raise FileReadProblem(
            "unreadable",
            f"its shard ends {size - len(data):,} bytes before the member does: the shard changed "
            "since it was indexed (read the shards again)")
    return data


def _check_size(size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise FileReadProblem(
            "file_too_large",
            f"the member is {size:,} bytes, more than max_file_bytes={max_bytes:,}")


def check_range(shard: str, offset: int, size: int,
                storage: Storage | None = None,
                stamp: tuple[int, int] | None = None, *, decode: bool = True,
                max_pixels: int | None = DEFAULT_MAX_PIXELS,
                max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES) -> Finding | None:
    """The checks :func:`extsrc.sources.imagecheck.check_file` makes of a file, made of a shard
    member (``None``: good); ``decode`` decodes it fully, as :func:`extsrc.validate` does."""
    try:
        _check_size(size, max_file_bytes)
        data = read_range(shard, offset, size, storage, stamp)
    except FileReadProblem as e:
        return Finding(e.reason, e.message)
    finding = check_bytes(data, max_pixels=max_pixels)
    if finding is None and decode:
        finding = decode_check(data)
    return finding


# --------------------------------------------------------------------------------------------
# Indexing one shard


@dataclass
class _Indexed:
    """One shard's samples (key, image member, offset, size, label) and problems."""

    samples: list[tuple[str, str, int, int, int | str]]
    problems: list[ShardProblem]
    stamp: tuple[int, int] | None = None


class RemoteShard:
    """A shard behind a URL as a read-only, seekable file whose every read is a ranged read of
    :meth:`Storage.read_range <extsrc.sources.storage.Storage.read_range>`: retried on
    transient failures, counted in :attr:`Storage.stats`, never kept in its cache.

    Indexing seeks from header to header. A read that misses the block held fetches a new
    block from that position: ``min_block`` bytes after a jump (a member larger than the block
    was skipped: only its next header is needed), doubling up to ``max_block`` while the reads
    stay near the block before (small members: the shard is then read in large sequential
    blocks, as one whole read would, but each block retried on its own).
    """

    def __init__(self, storage: Storage, url: str, *, min_block: int = _REMOTE_MIN_BLOCK,
                 max_block: int = _REMOTE_BLOCK) -> None:
        info = storage.info(url)
        if info.get("type", "file") != "file" or not isinstance(info.get("size"), int):
            raise FileReadProblem("unreadable", "it is not an object of known size (a folder?)")
        self.storage, self.url, self.size = storage, url, int(info["size"])
        #: The storage's ``info`` of the object: its ETag or modification time tells this
        #: content from a later one (the index cache's key).
        self.details = info
        self._min, self._max, self._block = min_block, max_block, min_block
        self._pos = 0
        self._start, self._data = 0, b""

    def seek(self, pos: int, whence: int = 0) -> int:
        base = (0, self._pos, self.size)[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self._pos + n)
        if end <= self._pos:
            return b""
        held_end = self._start + len(self._data)
        if not (self._start <= self._pos and end <= held_end):
            near = bool(self._data) and held_end <= self._pos < held_end + self._block
            self._block = min(self._max, self._block * 2) if near else self._min
            length = min(self.size, max(end, self._pos + self._block)) - self._pos
            self._data = self.storage.read_range(self.url, self._pos, length, cache=False)
            self._start = self._pos
        out = self._data[self._pos - self._start:end - self._start]
        self._pos = end
        return out

    def close(self) -> None:
        self._data = b""

    def __enter__(self) -> RemoteShard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_shard(shard: str, storage: Storage | None,
                ) -> tuple[Any, int, tuple[int, int] | None]:
    """The shard opened for reading, its size and (local shards) its ``(size, mtime_ns)``; a
    :class:`ShardProblem` if it cannot be opened."""
    if _is_remote(shard):
        try:
            f = RemoteShard(storage or Storage(), shard)
        except FileReadProblem as e:
            raise _Stop(_remote_problem(shard, e)) from None
        return f, f.size, None
    try:
        f = open(shard, "rb")  # the caller closes it
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            f.close()
            raise IsADirectoryError(shard)
        return f, st.st_size, (st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        raise _Stop(ShardProblem(shard, None, "missing_shard", "the shard does not exist")) \
            from None
    except (OSError, ValueError) as e:
        raise _Stop(ShardProblem(shard, None, "unreadable_shard",
                                 f"the shard cannot be read: {type(e).__name__}: {e}")) from None


def _remote_problem(shard: str, e: FileReadProblem) -> ShardProblem:
    """What a failed read of a shard behind a URL means for the shard."""
    if e.reason == "missing":
        return ShardProblem(shard, None, "missing_shard", "the shard does not exist")
    return ShardProblem(shard, None, "unreadable_shard",
                        f"the shard cannot be read ({e.reason}): {e.message}")


class _Stop(Exception):
    def __init__(self, problem: ShardProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _scan(f: Any, size: int, shard: str, label: str | None,
          ) -> tuple[list[tuple[str, int, int]], dict[str, bytes], list[ShardProblem]]:
    """The members of an open shard as ``(name, data offset, size)`` (offset -1: not a regular
    file), the data of the label members, and what is wrong with the archive itself.

    :func:`extsrc.sources.tarindex.read_members` reads the headers; an archive in a format it
    leaves to :mod:`tarfile` is read by :func:`_scan_tarfile`, with the same results."""
    if size == 0:
        return [], {}, [ShardProblem(shard, None, "bad_shard", "the shard is empty (0 bytes)")]

    def want(name: str) -> bool:
        m = _KEY_RE.match(name)
        return m is not None and m.group(2).lower() == label

    try:
        scan = read_members(f, size, None if label is None else want, _LABEL_MAX_BYTES)
    except Unsupported:
        f.seek(0)
        return _scan_tarfile(f, size, shard, label)
    members = [(m.name, m.offset if m.regular else -1, m.size) for m in scan.members]
    if scan.problem is None:
        problem = _check_end(f, scan.end, size, shard, members)
        return members, scan.data, [] if problem is None else [problem]
    kind, at, member = scan.problem
    last = None if member is None else member.name
    if kind == "not_tar":
        problem = ShardProblem(shard, None, "bad_shard",
                               "the shard is not a tar archive (its first header's checksum is "
                               "wrong)")
    elif kind == "damaged":
        problem = ShardProblem(
            shard, last, "bad_shard",
            f"the tar header at byte {at:,} is damaged (its checksum or size is wrong): the "
            f"{size - at:,} bytes after this member cannot be read")
    elif kind == "cut_member":
        assert member is not None
        problem = ShardProblem(
            shard, last, "truncated_shard",
            f"the shard ends {member.offset + member.size - size:,} bytes before this member's "
            f"data does ({size:,} bytes, the member's {member.size:,} start at byte "
            f"{member.offset:,})")
    elif kind == "cut_header":
        problem = ShardProblem(
            shard, last, "truncated_shard",
            f"the shard ends inside a tar header (byte {at:,}): it was cut short after this "
            "member, and the members after it are lost")
    else:  # no_end
        problem = ShardProblem(
            shard, last, "truncated_shard",
            "the shard ends without tar's end-of-archive blocks: it was cut short after this "
            "member, and the members after it are lost")
    return members, scan.data, [problem]


def _scan_tarfile(f: Any, size: int, shard: str, label: str | None,
                  ) -> tuple[list[tuple[str, int, int]], dict[str, bytes], list[ShardProblem]]:
    """:func:`_scan` through :mod:`tarfile`, for the formats ``read_members`` leaves to it."""
    import tarfile  # only here: read_manifest imports this module for every manifest

    members: list[tuple[str, int, int]] = []
    label_data: dict[str, bytes] = {}
    problems: list[ShardProblem] = []
    try:
        tf = tarfile.open(fileobj=f, mode="r:")
    except (tarfile.TarError, EOFError) as e:
        what = "empty (0 bytes)" if size == 0 else f"not a tar archive ({e})"
        return members, label_data, [ShardProblem(shard, None, "bad_shard", f"the shard is {what}")]
    cut = False
    while True:
        try:
            ti = tf.next()
        except (tarfile.TarError, EOFError, OSError) as e:
            last = members[-1][0] if members else None
            problems.append(ShardProblem(
                shard, last, "bad_shard",
                f"the tar header at byte {tf.offset:,} cannot be read ({e}): the members from "
                "there on are lost" + ("" if last is None else " (this is the last one read)")))
            cut = True
            break
        if ti is None:
            break
        if ti.isdir():
            continue
        if not ti.isreg():
            members.append((ti.name, -1, 0))
            continue
        if ti.offset_data + ti.size > size:
            problems.append(ShardProblem(
                shard, ti.name, "truncated_shard",
                f"the shard ends {ti.offset_data + ti.size - size:,} bytes before this member's "
                f"data does ({size:,} bytes, the member's {ti.size:,} start at byte "
                f"{ti.offset_data:,})"))
            cut = True
            break
        members.append((ti.name, ti.offset_data, ti.size))
        if label is not None and ti.size <= _LABEL_MAX_BYTES:
            m = _KEY_RE.match(ti.name)
            if m is not None and m.group(2).lower() == label:
                f.seek(ti.offset_data)
                label_data[ti.name] = f.read(ti.size)
    if not cut:
        problem = _check_end(f, tf.offset, size, shard, members)
        if problem is not None:
            problems.append(problem)
    return members, label_data, problems


def _check_end(f: Any, end: int, size: int, shard: str,
               members: list[tuple[str, int, int]]) -> ShardProblem | None:
    """A tar ends with zero blocks. None at all means it was cut at a member boundary; anything
    but zeros after them is a damaged header, where tarfile stops reading without a word."""
    last = members[-1][0] if members else None
    if end >= size:
        return ShardProblem(
            shard, last, "truncated_shard",
            "the shard ends without tar's end-of-archive blocks: it was cut short after this "
            "member, and the members after it are lost")
    f.seek(end)
    pos = end
    while pos < size:
        chunk = f.read(min(1 << 20, size - pos))
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            at = pos + next(i for i, b in enumerate(chunk) if b)
            return ShardProblem(
                shard, last, "bad_shard",
                f"the tar header at byte {end:,} is damaged (tar reading stops there, and "
                f"byte {at:,} after it is not zero): the {size - end:,} bytes after this member "
                "cannot be read")
        pos += len(chunk)
    return None


def _parse_label(data: bytes, ext: str, field: str | None) -> int | str:
    """The label a member holds; ValueError with what is wrong."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None
    if ext == "json":
        import json

        try:
            obj = json.loads(text)
        except ValueError as e:
            raise ValueError(f"it is not valid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"it holds a JSON {type(obj).__name__}, not an object")
        if field not in obj:
            keys = ", ".join(repr(k) for k in list(obj)[:8])
            raise ValueError(f"it has no field {field!r} (fields: {keys or 'none'}); "
                             "name the label's field in label_field=")
        value = obj[field]
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"its field {field!r} is {shown(repr(value)[:40])}, not an integer "
                             "label or a class name")
    else:
        if not _INT_RE.match(text):
            raise ValueError(f"it holds {shown(repr(text[:40]))}, not an integer")
        value = int(text)
    if not 0 <= value <= _INT64_MAX:
        raise ValueError(f"its label {value} is not an integer >= 0 that fits in int64")
    return value


_CACHE_VERSION = "extsrc-shard-index-v1"


def _identity(shard: str, f: Any, size: int, stamp: tuple[int, int] | None) -> list | None:
    """What tells this shard's content apart from any later one: the local file's size and
    modification time, or the object's size and ETag (or modification time); ``None`` when
    the storage says neither, and the index is then never cached."""
    if stamp is not None:
        return [shard, size, stamp[1]]
    details = getattr(f, "details", None) or {}
    for key in ("ETag", "etag", "LastModified", "mtime", "last_modified", "updated"):
        if details.get(key) is not None:
            return [shard, size, key, str(details[key])]
    return None


def _cache_file(cache: str, identity: list, label: str | None) -> str:
    import hashlib
    import json

    key = json.dumps([_CACHE_VERSION, identity, label]).encode("utf-8", "surrogateescape")
    return os.path.join(cache, hashlib.sha256(key).hexdigest() + ".json")


def _cache_load(path: str, shard: str,
                ) -> tuple[list[tuple[str, int, int]], dict[str, bytes], list[ShardProblem]] | None:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        members = [(str(n), int(o), int(z)) for n, o, z in doc["members"]]
        data = {str(n): bytes.fromhex(h) for n, h in doc["labels"].items()}
        problems = [ShardProblem(shard, m, str(r), str(t)) for m, r, t in doc["problems"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: index the shard again
    return members, data, problems


def _cache_store(path: str, members: list[tuple[str, int, int]], data: dict[str, bytes],
                 problems: list[ShardProblem]) -> None:
    import json
    import tempfile

    doc = {"members": members, "labels": {n: d.hex() for n, d in data.items()},
           "problems": [[p.member, p.reason, p.message] for p in problems]}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            json.dump(doc, f)
        os.replace(tmp, path)  # whole or not at all: readers never see half an index
    except OSError as e:
        warnings.warn(f"read_shards: the index cache {shown(path)} cannot be written ({e}); "
                      "the shards are indexed again next time", stacklevel=4)


def _index(shard: str, *, label: str | None, label_field: str | None,
           image_extensions: frozenset[str], storage: Storage | None,
           index_cache: str | None = None) -> _Indexed:
    """Read one shard's headers (and label members) into its samples and problems; with
    ``index_cache``, reuse (or keep) what an earlier read of the same content found."""
    try:
        f, size, stamp = _open_shard(shard, storage)
    except _Stop as stop:
        return _Indexed([], [stop.problem])
    with f:
        identity = None if index_cache is None else _identity(shard, f, size, stamp)
        cache = None if identity is None else _cache_file(index_cache, identity, label)
        found = None if cache is None else _cache_load(cache, shard)
        if found is not None:
            members, label_data, problems = found
        else:
            try:
                members, label_data, problems = _scan(f, size, shard, label)
            except FileReadProblem as e:  # a URL shard: its retries ran out, or it went away
                return _Indexed([], [_remote_problem(shard, e)])
            except OSError as e:
                return _Indexed([], [ShardProblem(shard, None, "unreadable_shard",
                                                  f"reading the shard failed: {e}")])
            if cache is not None:
                _cache_store(cache, members, label_data, problems)
    groups: dict[str, dict[str, tuple[str, int, int]]] = {}
    bad: set[str] = set()
    last_key = None
    for name, offset, length in members:
        m = _KEY_RE.match(name)
        if m is None:
            continue  # no extension: part of no sample (webdataset passes over it too)
        key, ext = m.group(1), m.group(2).lower()
        group = groups.get(key)
        if group is not None and (key != last_key or ext in group):
            if key not in bad:
                first = next(iter(group.values()))[0]
                problems.append(ShardProblem(
                    shard, name, "duplicate_key",
                    f"the key {shown(key)} appears twice (also member {shown(first)}); the "
                    "sample is left out rather than read twice or half"))
                bad.add(key)
        else:
            groups.setdefault(key, {})[ext] = (name, offset, length)
        last_key = key
    samples = []
    for key, group in groups.items():
        if key in bad:
            continue
        images = [e for e in group if e in image_extensions]
        some = next(iter(group.values()))[0]
        if not images:
            found = ", ".join(sorted(group))
            problems.append(ShardProblem(
                shard, some, "no_image",
                f"the sample {shown(key)} has no image member (members: {shown(found)}; image "
                f"extensions: {', '.join(sorted(image_extensions))})"))
            continue
        if len(images) > 1:
            problems.append(ShardProblem(
                shard, group[images[1]][0], "two_images",
                f"the sample {shown(key)} has {len(images)} image members "
                f"({', '.join(group[e][0] for e in images)})"))
            continue
        name, offset, length = group[images[0]]
        if offset < 0:
            problems.append(ShardProblem(shard, name, "not_a_file",
                                         "the image member is a link or a special file"))
            continue
        value: int | str = 0
        if label is not None:
            member = group.get(label)
            if member is None:
                problems.append(ShardProblem(
                    shard, name, "no_label",
                    f"the sample {shown(key)} has no .{label} member (members: "
                    f"{', '.join(sorted(group))})"))
                continue
            data = label_data.get(member[0])
            try:
                if data is None:
                    raise ValueError("it is a link, a special file or larger than 1 MiB")
                value = _parse_label(data, label, label_field)
            except ValueError as e:
                problems.append(ShardProblem(shard, member[0], "bad_label",
                                             f"the label member is bad: {e}"))
                continue
        samples.append((key, name, offset, length, value))
    return _Indexed(samples, problems, stamp)


# --------------------------------------------------------------------------------------------
# The entry point


def _shard_list(shards: object, storage: Storage | None,
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
            if _is_remote(name):
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
                matched = sorted(glob.glob(_local(name)))
                if not matched:
                    raise ManifestFileNotFoundError(
                        f"{shown(name)}: no shard matches", source=source, path=name,
                        reason="missing_shard")
                out += matched
            else:
                out.append(_local(name))
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
        if _is_remote(name):
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


def read_shards(
    shards: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    label: str | None = "cls",
    label_field: str | None = None,
    image_extensions: Sequence[str] | None = None,
    on_error: str = "raise",
    storage_options: Mapping[str, Any] | Storage | None = None,
    max_workers: int = 16,
    index_cache: str | os.PathLike[str] | None = None,
) -> ShardManifest:
    """Index webdataset-style tar shards into a :class:`ShardManifest` (see the module's
    docstring for the design and the checks).

    Args:
        shards: a shard (``data/train-000000.tar``), a brace pattern
            (``data/train-{000000..000127}.tar``, ``s3://bucket/train-{0..9}.tar``), a glob
            (``data/train-*.tar``, sorted), or a list of those. Local paths or URLs of any fsspec
            protocol (``s3://``, ``gs://``, ``https://``...; ``pip install fsspec s3fs``).
        label: the extension of the label member: ``"cls"`` (an integer in text, the default),
            any other extension holding an integer in text, ``"json"`` (with ``label_field``),
            or ``None``: no labels (every sample's label is 0).
        label_field: for ``label="json"``, the field holding the label: an integer >= 0, or a
            class name (every sample's one a str): ``classes`` is then the sorted names and the
            labels index into it.
        image_extensions: extensions (case-insensitive, with or without the dot) that mark the
            image member; default :data:`IMAGE_EXTENSIONS`.
        on_error: ``"raise"``: raise :class:`~extsrc.errors.ManifestError` for the first
            problem found; ``"skip"``: leave the bad samples (or shards) out, warn, and keep the
            problems in :attr:`ShardManifest.skipped`.
        storage_options: for URL shards, as for :func:`extsrc.read_manifest`: a dict of fsspec
            options (credentials, ``endpoint_url``...) or a
            :class:`~extsrc.sources.storage.Storage` (requests in flight, retries, timeouts,
            cache too). Samples are read through it: ranged GETs with its retries, counted in
            ``loader.storage_stats()``.
        max_workers: shards indexed at once (threads; remote shards wait on the network).
        index_cache: a folder where each shard's member table is kept (one JSON file per
            shard content: a local shard's size and modification time, an object's size and
            ETag), so that reading the same shards again reads no tar headers (a remote shard
            then costs one metadata request). ``None`` (the default): no cache.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"read_shards: on_error must be 'raise' or 'skip', got {on_error!r}")
    if label is not None and (not isinstance(label, str) or not label.strip(".")):
        raise TypeError(f"read_shards: label must be a member extension such as 'cls' or "
                        f"'json', or None, got {label!r}")
    label = None if label is None else label.strip(".").lower()
    if label == "json" and not isinstance(label_field, str):
        raise ValueError("read_shards: label='json' needs label_field=, the name of the JSON "
                         "field that holds the label (e.g. label_field='label')")
    if label != "json" and label_field is not None:
        raise ValueError("read_shards: label_field is read from JSON label members only; pass "
                         "label='json' with it")
    if image_extensions is None:
        exts = frozenset(IMAGE_EXTENSIONS)
    else:
        if isinstance(image_extensions, str) or not all(
                isinstance(e, str) and e.strip(".") for e in image_extensions):
            raise TypeError("read_shards: image_extensions must be a list of extensions such "
                            f"as ['jpg', 'png'], got {image_extensions!r}")
        exts = frozenset(e.strip(".").lower() for e in image_extensions)
    if label is not None and label in exts:
        raise ValueError(f"read_shards: label={label!r} is also an image extension")
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"read_shards: max_workers must be an int >= 1, got {max_workers!r}")
    storage = storage_arg(storage_options, "read_shards")
    names, source = _shard_list(shards, storage)
    if storage is None and any(_is_remote(s) for s in names):
        storage = Storage()

    cache = None if index_cache is None else os.path.abspath(os.fspath(index_cache))

    def one(shard: str) -> _Indexed:
        return _index(shard, label=label, label_field=label_field, image_extensions=exts,
                      storage=storage, index_cache=cache)

    remote = any(_is_remote(s) for s in names)
    workers = min(max_workers, len(names)) if remote else 1
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            indexed = list(pool.map(one, names))
    else:
        indexed = [one(s) for s in names]
    problems = [p for ix in indexed for p in ix.problems]
    if problems and on_error == "raise":
        p = problems[0]
        cls = ManifestFileNotFoundError if p.reason == "missing_shard" else ManifestError
        more = f" ({len(problems) - 1} more problem(s) in the shards)" if len(problems) > 1 else ""
        raise cls(f"{p}.{more} Pass on_error='skip' to leave the bad samples out and report "
                  "them", source=source, path=p.path, reason=p.reason)
    values = [s[4] for ix in indexed for s in ix.samples]
    if not values:
        raise ManifestError(
            f"{shown(source)}: no samples in {len(names)} shard(s)"
            + (f" ({len(problems)} problem(s), e.g. {problems[0]})" if problems else
               "; a sample is a group of members with one key, one of them an image"),
            source=source, reason="no_samples")
    classes = None
    if any(isinstance(v, str) for v in values):
        ints = [i for i, v in enumerate(values) if not isinstance(v, str)]
        if ints:
            raise ManifestError(
                f"{shown(source)}: some JSON labels are class names and some integers (sample "
                f"{ints[0] + 1} has {values[ints[0]]!r}); use one kind", source=source,
                reason="bad_label")
        classes = sorted(set(values))
        lookup = {c: i for i, c in enumerate(classes)}
        labels = np.array([lookup[v] for v in values], dtype=np.int64)
    else:
        labels = np.array(values, dtype=np.int64)
    if problems:
        counts = Counter(p.reason for p in problems)
        named = "; ".join(str(p) for p in problems[:_MAX_NAMED])
        warnings.warn(
            f"read_shards(on_error='skip'): {shown(source)}: left out {len(problems)} "
            f"problem(s) ({dict(counts)}), e.g. {named}; all of them: manifest.skipped",
            stacklevel=2)
    shard_of = [i for i, ix in enumerate(indexed) for _ in ix.samples]
    return ShardManifest(
        paths=tuple(f"{names[i]}/{s[1]}" for i, ix in enumerate(indexed) for s in ix.samples),
        labels=labels, classes=classes, lines=tuple(range(1, len(values) + 1)), source=source,
        shards=tuple(names), shard_of=np.array(shard_of, dtype=np.int64),
        offsets=np.array([s[2] for ix in indexed for s in ix.samples], dtype=np.int64),
        sizes=np.array([s[3] for ix in indexed for s in ix.samples], dtype=np.int64),
        storage=storage, skipped=tuple(problems),
        stamps=tuple(ix.stamp for ix in indexed),
    )
