"""When a DALI pipeline is shut down: by the process that built it, at a known point, never by a
garbage collection.

``Pipeline.__del__`` calls the backend's ``Shutdown()``, which joins DALI's executor threads, and
``Pipeline.build`` registers a ``weakref.finalize`` that closes the pipeline's worker pool. Run
by a garbage collection, either can block or abort the process:

* in a forked child (DALI's fork-started reader processes, the op pool's, a user's DataLoader
  workers) every pipeline of the parent is copied, its threads are not. A collection there (any
  allocation, e.g. starting a thread, can trigger one) that reaches a pipeline which was garbage
  in the parent calls ``Shutdown()`` on threads that do not exist: it deadlocks ("Resource
  deadlock avoided") or aborts, and the parent waits for that child forever. Closing the copied
  worker pool would even write to the parent's observer pipe and stop the parent's readers.
* in the building process a collection runs wherever an allocation happens to trigger it (inside
  another finaliser, pytest's unraisable-exception hook, DALI's own calls), with locks held.

So:

* :func:`_neutralise_inherited` runs in every forked child, before any collection can: each live
  pipeline of the parent (DALI keeps weak references in ``Pipeline._pipes``) loses its backend
  handle without ``Shutdown()``, its worker pool forgets its observer (so closing it does
  nothing), and both are kept referenced until the child ends, so neither ``__del__`` nor the
  pool's finaliser ever does work there. This targets DALI's objects rather than freezing the
  whole heap with ``gc.freeze()`` around ``fork``: freezing is global state that users set
  themselves (before forking DataLoader workers), and undoing ours in the parent would undo theirs.
  The garbage collector is disabled from just before ``fork`` until this has run, since the other
  fork hooks allocate.
* a loader's :class:`Keeper` holds its :class:`~extsrc._dali.run.PipelineRun` (and op pool)
  strongly. ``Loader.close()`` closes them; a loader dropped without ``close()`` has a
  ``weakref.finalize`` whose callback only hands them to one reaper thread, which closes them
  outside any collection. The pipeline is never garbage while it runs; once shut down, its
  ``__del__`` has nothing left to do. At interpreter exit, whatever is still open is closed
  before DALI's own exit hook runs.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import os
import queue
import sys
import threading
import weakref
from typing import Any

__all__ = ["Keeper", "keep_forever", "reap_pending", "watch"]

# Objects that must never be finalised in this process (inherited pipelines, pipelines whose
# shutdown did not finish); kept until the process ends.
_FOREVER: list[Any] = []


def keep_forever(*objs: Any) -> None:
    """Keep ``objs`` referenced until the process ends, so that no collection finalises them.

    The extra reference is never released: the interpreter's own teardown clears module globals
    (this list with them), and destroying a copied DALI backend there crashes the process."""
    for obj in objs:
        if obj is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    _FOREVER.extend(objs)


class Keeper:
    """The DALI run and op pool of one loader, closed by the loader or, once the loader is
    garbage, by the reaper thread; never by a collection."""

    __slots__ = ("pool", "run")

    def __init__(self, pool: Any = None) -> None:
        self.run: Any = None
        self.pool = pool

    def take(self) -> tuple[Any, Any]:
        run, pool, self.run, self.pool = self.run, self.pool, None, None
        return run, pool


def watch(owner: object, pool: Any = None) -> Keeper:
    """A :class:`Keeper` for ``owner`` (a loader); when ``owner`` is collected without having
    been closed, its run and pool are closed by the reaper thread."""
    keeper = Keeper(pool)
    with _lock:
        _start_reaper()
        _keepers.add(keeper)
    fin = weakref.finalize(owner, _dropped, keeper, os.getpid())
    fin.atexit = False  # the exit hook below closes what is left, in order
    return keeper


_lock = threading.Lock()
_keepers: set[Keeper] = set()  # of the live loaders of this process
# SimpleQueue.put is safe inside a garbage collection and in finalisers (it takes no lock that a
# running put could hold).
_queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
_reaper: threading.Thread | None = None


def _dropped(keeper: Keeper, pid: int) -> None:
    """The owner was collected: hand its run and pool to the reaper. May run inside a garbage
    collection, so it only moves references."""
    if os.getpid() != pid:  # a forked child's copy: the parent's pipeline is not ours to close
        return
    _keepers.discard(keeper)
    run, pool = keeper.take()
    if run is not None or pool is not None:
        _queue.put((run, pool))


def _close(run: Any, pool: Any) -> None:
    for thing in (run, pool):
        if thing is None:
            continue
        try:
            thing.close()
        except Exception:  # nobody is left to tell: the loader was dropped
            pass


def _reap() -> None:
    while True:
        item = _queue.get()
        if item is None:
            return
        if isinstance(item, threading.Event):  # reap_pending's marker: all before it are closed
            item.set()
            continue
        _close(*item)
        del item


def _start_reaper() -> None:
    global _reaper
    if _reaper is None or not _reaper.is_alive():
        _reaper = threading.Thread(target=_reap, name="extsrc-dali-reaper", daemon=True)
        _reaper.start()


def reap_pending(timeout: float = 30.0) -> bool:
    """Wait (up to ``timeout`` seconds) until every dropped loader's pipeline is shut down;
    whether none is left."""
    done = threading.Event()
    with _lock:
        _start_reaper()
        _queue.put(done)
    return done.wait(timeout)


_owner_pid = os.getpid()


@atexit.register
def _close_all() -> None:
    """Interpreter exit: close the runs of loaders still alive, then what the reaper holds.
    Registered after DALI's own exit hook (this module imports DALI's pipeline module first), so
    it runs before it."""
    if os.getpid() != _owner_pid:
        return
    for keeper in list(_keepers):
        _close(*keeper.take())
    _keepers.clear()
    reaper = _reaper
    if reaper is not None and reaper.is_alive():
        _queue.put(None)
        reaper.join(30.0)


# -- forked children ------------------------------------------------------------------------------

_gc_was_enabled = False
_forking = 0  # forks under way in this process (threads may fork at once)
_fork_lock = threading.Lock()


def _before_fork() -> None:
    global _gc_was_enabled, _forking
    with _fork_lock:
        if _forking == 0:
            _gc_was_enabled = gc.isenabled()
        _forking += 1
        gc.disable()


def _after_fork_in_parent() -> None:
    global _forking
    with _fork_lock:
        _forking -= 1
        if _forking == 0 and _gc_was_enabled:
            gc.enable()


def _neutralise_inherited() -> None:
    """In a forked child: make the parent's pipelines inert (see the module's docstring) and
    forget the parent's loaders, reaper and exit work."""
    global _reaper, _queue, _owner_pid, _lock, _fork_lock, _forking
    try:
        dali = sys.modules.get("nvidia.dali.pipeline")
        pipes = getattr(getattr(dali, "Pipeline", None), "_pipes", None)
        for ref in list(pipes or ()):
            pipe = ref()
            if pipe is None:
                continue
            backend = getattr(pipe, "_pipe", None)
            pool = getattr(getattr(pipe, "_py_pool", None), "pool", None)
            keep_forever(pipe, backend, pool)
            pipe._pipe = None  # __del__ -> _shutdown() finds nothing to shut down
            if pool is not None and hasattr(pool, "_observer"):
                pool._observer = None  # ProcPool.close() returns at once
        if pipes is not None:
            pipes.clear()
        # The parent's loaders: their runs are the parent's; keep them too, so that nothing
        # reachable from them is finalised here either.
        keep_forever(*list(_keepers))
        _keepers.clear()
        _reaper, _queue, _lock = None, queue.SimpleQueue(), threading.Lock()
        _owner_pid = os.getpid()
    finally:
        # Another thread of the parent may have held these at the fork; it does not exist here.
        _fork_lock, _forking = threading.Lock(), 0
        if _gc_was_enabled:
            gc.enable()


def _register_fork_hooks() -> None:
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_neutralise_inherited)


try:  # so that DALI's exit hook is registered before ours (atexit runs the last one first)
    import nvidia.dali.pipeline  # noqa: F401
except ImportError:  # pragma: no cover - extsrc needs DALI; tests of pure parts may lack it
    pass
_register_fork_hooks()
