"""The local copy of objects read from storage (``Storage(cache_dir=..., cache_bytes=...)``):
later epochs read the disk instead of the network."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading

__all__ = ["DiskCache"]


class DiskCache:
    """Objects kept as files in ``folder``, named by a hash of their URL; at most ``limit``
    bytes, least recently used evicted first (down to 90% of the limit, so that eviction runs
    once per many writes). Safe across processes: files are written to a temporary name and
    renamed, and a file another process evicted is just a miss."""

    def __init__(self, folder: str, limit: int | None) -> None:
        self.folder = folder
        self.limit = limit
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()
        self._total = self._scan()[1] if limit is not None else 0

    def _file(self, url: str) -> str:
        return os.path.join(self.folder, hashlib.sha256(url.encode()).hexdigest())

    def get(self, url: str) -> bytes | None:
        path = self._file(url)
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.utime(path)  # recently used: evicted last
            return data
        except OSError:
            return None

    def put(self, url: str, data: bytes) -> None:
        if self.limit is not None and len(data) > self.limit:
            return
        path = self._file(url)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return
        if self.limit is not None:
            with self._lock:
                self._total += len(data)
                if self._total > self.limit:
                    self._evict()

    def _scan(self) -> tuple[list[tuple[float, str, int]], int]:
        entries, total = [], 0
        with os.scandir(self.folder) as it:
            for e in it:
                if e.name.endswith(".tmp"):
                    continue
                with contextlib.suppress(OSError):
                    st = e.stat()
                    entries.append((st.st_mtime, e.path, st.st_size))
                    total += st.st_size
        return entries, total

    def _evict(self) -> None:
        assert self.limit is not None
        entries, total = self._scan()  # other processes write here too: count from the disk
        target = int(self.limit * 0.9)
        for _, path, size in sorted(entries):
            if total <= target:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
            total -= size
        self._total = total
