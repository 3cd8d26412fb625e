"""A reader's large state handed over by file while DALI starts its reader processes.

With ``spawn``, DALI pickles each reader's source into the arguments of the
``multiprocessing.Process`` that runs it, and Python writes those arguments through a pipe to the
new interpreter. A write larger than the pipe's buffer (64 KiB on Linux) returns only once the
child has started, imported DALI and read it, so the readers start one after another instead of
together. On a 16-core H100 that was about 0.7 s per reader: a manifest of 1,024 samples in tar
shards (2,048 members, over 64 KiB pickled) waited 8.0 s for its first batch with 8 readers,
against 2.2 s for the same images as loose files, whose manifest stayed under the buffer. A
manifest of a few thousand samples or more crosses it.

While :func:`handing_over` is active on a thread, :func:`outgoing` writes a large object into a
file of a private directory and pickles only that file's name: the reader loads the object when
it unpickles its source, before it reports ready to DALI (``WorkerContext`` loads the callbacks
first), so the directory is removed as soon as the readers have started. Small objects, objects
standard ``pickle`` cannot write (DALI's callback pickler takes them as before) and pickling
outside a start (``fork``, a user's own ``pickle.dumps``) are left as they are.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import pickle
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["MIN_BYTES", "handing_over", "outgoing"]

#: Pickled objects from this size on travel by file (the pipe holds 64 KiB for all of a
#: reader's arguments).
MIN_BYTES = 16 * 1024

_local = threading.local()


@contextlib.contextmanager
def handing_over() -> Iterator[None]:
    """Within the block, on this thread, :func:`outgoing` hands large objects over by file; the
    files are removed when the block ends (the readers started then have loaded them)."""
    if _active():  # nested: the outer block cleans up
        yield
        return
    _local.directory = None
    _local.active = os.getpid()
    try:
        yield
    finally:
        directory = _local.directory
        _local.active, _local.directory = None, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _active() -> bool:
    """Whether this thread is inside :func:`handing_over` in this process (a process forked
    inside the block inherits the thread's state, not the block)."""
    return getattr(_local, "active", None) == os.getpid()


def outgoing(obj: Any) -> Any:
    """``obj`` itself, or, inside :func:`handing_over` when it pickles to at least
    :data:`MIN_BYTES`, a stand-in that unpickles to a copy of it read from a file."""
    if not _active():
        return obj
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # left to the caller's pickler (cloudpickle, DALI's)
        return obj
    if len(data) < MIN_BYTES:
        return obj
    if _local.directory is None:
        _local.directory = tempfile.mkdtemp(prefix="extsrc-handoff-")
        # Removed when the start ends; and at exit for a start that never ends (a build the
        # watchdog gave up on): the state may hold storage options.
        atexit.register(shutil.rmtree, _local.directory, ignore_errors=True)
    fd, path = tempfile.mkstemp(suffix=".pickle", dir=_local.directory)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return _ByFile(path, hashlib.sha256(data).hexdigest())


class _ByFile:
    """Pickles as a call of :func:`_load` on its file, with the digest of what was written."""

    def __init__(self, path: str, digest: str) -> None:
        self.path = path
        self.digest = digest

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return _load, (self.path, self.digest)


def _load(path: str, digest: str) -> Any:
    """The object written to ``path`` (in a starting reader). Only bytes whose SHA-256 is the
    one that travelled through the spawn pipe are unpickled: the file lies in a directory only
    this user can write (``mkdtemp``), and even so no other content is ever loaded from it."""
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != digest:
        raise RuntimeError(f"extsrc: the reader's state in {path} is not what its loader wrote "
                           "there; refusing to load it")
    return pickle.loads(data)
