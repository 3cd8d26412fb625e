"""Worker processes that outlive their parent exit on their own.

DALI runs the source in worker processes (``parallel=True``). When the main process is killed
(SIGKILL, the out-of-memory killer, a SIGTERM it does not handle), nothing tells those workers:
they are reparented to PID 1 (or a subreaper) and live on, each holding its memory, for minutes.

:func:`exit_with_parent` starts, once per process, a daemon thread that polls ``os.getppid()``
and ends the process with ``os._exit`` as soon as the parent changes, which on POSIX happens
only when the parent has died. Polling rather than ``prctl(PR_SET_PDEATHSIG)``: the death signal
fires when the *thread* that forked the child ends, not the process, so a worker forked from a
short-lived thread would be killed under a live parent; and it does not exist outside Linux.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["POLL_SECONDS", "exit_with_parent"]

#: How often the watcher looks at the parent pid; a worker exits within about this long of its
#: parent's death. ``getppid`` is a cheap system call, so polling costs nothing measurable.
POLL_SECONDS = 0.5

_lock = threading.Lock()
_watching_pid: int | None = None  # the process whose watcher runs (a forked child has none)


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_SECONDS)
        if os.getppid() != parent:
            # No one is left to read what this process produces; skip atexit handlers and
            # finalisers, which may wait on the dead parent's pipes or shared memory.
            os._exit(1)


def exit_with_parent(owner_pid: int) -> None:
    """In a process other than ``owner_pid`` (the process that built the caller), make sure a
    watcher thread ends this process when its parent dies. Cheap to call often: after the
    first call in a process it is one comparison. A no-op in ``owner_pid`` itself, whose
    parent (a shell, a job scheduler) may legitimately go away."""
    global _watching_pid
    pid = os.getpid()
    if pid == owner_pid or _watching_pid == pid:
        return
    with _lock:
        if _watching_pid == pid:
            return
        parent = os.getppid()
        if parent == 1 and owner_pid != 1:  # orphaned before the first call
            os._exit(1)
        threading.Thread(
            target=_watch, args=(parent,), name="extsrc-exit-with-parent", daemon=True
        ).start()
        _watching_pid = pid
