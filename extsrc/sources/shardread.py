"""Reading a shard member's bytes: one positioned read (``os.pread``) of a local shard that each
process keeps open, one ranged read of a shard behind a URL through its
:class:`~extsrc.sources.storage.Storage`; and :class:`RemoteShard`, a URL shard as a seekable
file whose reads are such ranged reads, for indexing."""

from __future__ import annotations

import os
import stat
import threading

from extsrc.sources.fileread import DEFAULT_MAX_FILE_BYTES, FileReadProblem
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS, Finding, check_bytes, decode_check
from extsrc.sources.shardnames import is_remote_shard
from extsrc.sources.storage import Storage

__all__ = ["RemoteShard", "check_range", "check_size", "read_range"]

_REMOTE_BLOCK = 8 << 20  # the largest block read at once while indexing a remote shard
_REMOTE_MIN_BLOCK = 64 << 10  # the block read after skipping a large member
_NEAR = 1 << 20  # a skip this short is read through: cheaper than one more request


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
    if is_remote_shard(shard):
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


def check_size(size: int, max_bytes: int | None) -> None:
    """Refuse a member larger than ``max_bytes`` (``file_too_large``) before reading it."""
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
        check_size(size, max_file_bytes)
        data = read_range(shard, offset, size, storage, stamp)
    except FileReadProblem as e:
        return Finding(e.reason, e.message)
    finding = check_bytes(data, max_pixels=max_pixels)
    if finding is None and decode:
        finding = decode_check(data)
    return finding


class RemoteShard:
    """A shard behind a URL as a read-only, seekable file whose every read is a ranged read of
    :meth:`Storage.read_range <extsrc.sources.storage.Storage.read_range>`: retried on
    transient failures, counted in :attr:`Storage.stats`, never kept in its cache.

    Indexing seeks from header to header. A read that misses the block held fetches a new
    block from that position: ``min_block`` bytes after a jump of over 1 MiB (a member that
    large was skipped: only its next header is needed), doubling up to ``max_block`` while the
    reads stay near the block before (members up to about 1 MB: the shard is then read in
    large sequential blocks, as one whole read would, but each block retried on its own).
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
            # Near: within the block held, or a skip of at most _NEAR bytes past it, which
            # costs less to read through than a request of its own (members of a few hundred
            # kB, typical JPEGs, would otherwise take one ranged GET each).
            near = bool(self._data) and self._start <= self._pos < held_end + max(self._block,
                                                                                  _NEAR)
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
