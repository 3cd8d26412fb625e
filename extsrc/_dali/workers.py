"""DALI's worker processes, seen through its private worker pool: list, stop, unblock, shut down.

DALI (2.4) keeps the processes that run a parallel ``external_source`` in
``Pipeline._py_pool.pool._processes`` (``multiprocessing.Process`` objects) and its shared
queues in ``_general_task_queue``, ``_result_queue`` and each worker context's
``dedicated_task_queue``. None of this is public; :func:`worker_processes` raises
:class:`~extsrc.errors.DaliVersionError` when it is not where it was, rather than letting the
watchdog watch nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from extsrc._dali import KNOWN_VERSIONS, dali_version
from extsrc.errors import DaliVersionError

__all__ = ["exited", "shutdown_pipeline", "stop_processes", "wake_queues", "worker_processes"]


def worker_processes(pipe: Any) -> list[Any]:
    """The worker processes (``multiprocessing.Process``) of a built pipeline with workers."""
    pool = getattr(getattr(pipe, "_py_pool", None), "pool", None)
    procs = getattr(pool, "_processes", None)
    if procs is None:
        raise DaliVersionError(
            f"DALI {dali_version()}'s pipeline has no worker pool where extsrc looks for it "
            "(Pipeline._py_pool.pool._processes), so the dead-worker watchdog cannot watch its "
            f"worker processes (extsrc knows DALI {', '.join(v + '.x' for v in KNOWN_VERSIONS)}). "
            "Pass watchdog=False to Loader, or install a known DALI version",
            found=dali_version(), known=KNOWN_VERSIONS,
        )
    return list(procs)


def exited(procs: Any) -> list[tuple[int, int]]:
    """(pid, exit code) of each process that has exited."""
    return [(p.pid, p.exitcode) for p in procs if p.exitcode is not None]


def stop_processes(procs: list[Any]) -> None:
    """Terminate (then kill) the processes still running, and reap them."""
    live = [p for p in procs if p.exitcode is None]
    for p in live:
        try:
            p.terminate()
        except Exception:
            pass
    for p in live:
        p.join(2.0)
        if p.exitcode is None:
            try:
                p.kill()
            except Exception:
                pass
            p.join(2.0)


def wake_queues(pipe: Any, n: int) -> None:
    """Release the semaphores DALI's shared queues wait on for a dead worker's acknowledgement
    (``multiprocessing.Condition.notify`` waits for each woken sleeper), so a call blocked there
    returns; the pipeline is abandoned afterwards."""
    pool = getattr(getattr(pipe, "_py_pool", None), "pool", None)
    queues = [getattr(pool, "_general_task_queue", None), getattr(pool, "_result_queue", None)]
    queues += [getattr(c, "dedicated_task_queue", None)
               for c in getattr(pool, "_workers_contexts", None) or ()]
    for q in queues:
        woken = getattr(getattr(q, "cv_not_empty", None), "_woken_count", None)
        for _ in range(n if woken is not None else 0):
            try:
                woken.release()
            except Exception:
                break


def shutdown_pipeline(pipe: Any, timeout: float = 10.0) -> None:
    """Stop a DALI pipeline's executor and its worker processes now, not at garbage collection
    (a traceback can keep the pipeline alive, and its workers with it). Runs on a helper thread
    so that a pool wedged by a dead worker cannot hang the caller."""
    pool = getattr(pipe, "_py_pool", None)

    def shutdown() -> None:
        try:
            pipe._shutdown()
        except Exception:  # already shut down, or half built
            pass
        if pool is not None:
            try:
                pool.close()
            except Exception:
                pass

    t = threading.Thread(target=shutdown, name="extsrc-dali-shutdown", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive() or getattr(pipe, "_pipe", None) is not None:
        # Not shut down (still shutting down, or Shutdown() failed): a garbage collection must
        # never be the one to call Shutdown() again through Pipeline.__del__.
        from extsrc._dali.lifecycle import keep_forever

        keep_forever(pipe)
