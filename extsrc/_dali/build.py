"""``build(pipe)``: DALI's ``Pipeline.build()``, with the reader processes started while the
operators are built.

``Pipeline.build()`` (DALI 2.4) does two slow things one after the other: it starts the worker
processes of a parallel ``external_source`` and waits until each reports ready (with ``spawn``
each one starts an interpreter and imports the main module: about 1.2 s on a 16-core H100), then
builds the C++ operators (the mixed JPEG decoder alone: about 1.6 s there, every time). The two
do not depend on each other: the backend only has to hold a reference to the worker pool so that
the pool's shared memory outlives it (``SetPyObjDependency``), which can be set after the build.
:func:`build` runs them at once: the workers are started on another thread, and the operators are
built once that thread waits for the workers to report ready. Not sooner: DALI's C++ build holds
the GIL throughout (1.8 s measured on an H100), so a thread that still has Python work to do
(starting the processes, sending them their queues) would make no progress until it ends.

Only with ``spawn``: forking while another thread is inside DALI's C++ build could copy a lock
that thread holds into the child. Any other case, and a DALI whose ``build`` this module was not
checked against, takes the plain ``pipe.build()``.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from extsrc._dali import KNOWN_VERSIONS, dali_version
from extsrc._dali.handoff import handing_over
from extsrc._util.forks import STARTING

__all__ = ["build", "overlaps"]

#: The function of DALI's worker pool that waits for the started workers to report ready.
_WAITS_FOR_WORKERS = "_sync_initialized_workers"
#: Seconds to wait for the starting thread to reach that wait before building anyway.
START_WAIT = 10.0

#: The private steps of ``Pipeline.build`` that :func:`build` calls, checked before use.
_STEPS = ("_build_graph", "start_py_workers", "_init_pipeline_backend",
          "_setup_pipe_pool_dependency", "_generate_build_args", "_restore_state_from_checkpoint")


def overlaps(pipe: Any) -> bool:
    """Whether :func:`build` starts ``pipe``'s workers while its operators are built. Defines
    the pipeline's Python graph if that was not done yet, as ``build`` does first."""
    from nvidia.dali._multiproc.pool import ProcPool

    known = (".".join(dali_version().split(".")[:2]) in KNOWN_VERSIONS
             and all(hasattr(pipe, step) for step in _STEPS)
             and hasattr(ProcPool, _WAITS_FOR_WORKERS))
    if known and not getattr(pipe, "_py_graph_built", True):
        pipe._build_graph()
    return (
        known
        and getattr(pipe, "_py_start_method", None) == "spawn"
        and bool(getattr(pipe, "_parallel_input_callbacks", None))
        and not getattr(pipe, "_built", True)
        and not getattr(pipe, "_py_pool_started", True)
        and not getattr(pipe, "_backend_prepared", True)
        and getattr(pipe, "_checkpoint", None) is None
    )


def build(pipe: Any) -> None:
    """Build ``pipe`` as ``pipe.build()`` does, starting its workers on another thread. The
    workers start under :data:`extsrc._util.forks.STARTING`, as extsrc's op workers do, and
    receive their sources' large state by file (:mod:`extsrc._dali.handoff`)."""
    if not overlaps(pipe):
        with STARTING, handing_over():
            pipe.build()
        return
    failed: list[BaseException] = []

    def start_workers() -> None:
        try:
            with STARTING, handing_over():
                pipe.start_py_workers()
        except BaseException as e:  # raised again on the building thread
            failed.append(e)

    starter = threading.Thread(target=start_workers, name="extsrc-readers-start", daemon=True)
    starter.start()
    try:
        deadline = time.monotonic() + START_WAIT
        while (starter.is_alive() and not _waits_for_workers(starter)
               and time.monotonic() < deadline):
            time.sleep(0.002)
        pipe._init_pipeline_backend()
        pipe._pipe.Build(pipe._generate_build_args())
    finally:
        # The pool must exist before the backend can depend on it, and a failed build must
        # not leave its start running on its own.
        starter.join()
    if failed:
        raise failed[0]
    # What Pipeline.build does after Build: the same steps, in the same order.
    pipe._setup_pipe_pool_dependency()
    pipe._device_id = pipe._pipe.device_id()
    from nvidia.dali import types

    if pipe._device_id == types.CPU_ONLY_DEVICE_ID:
        pipe._device_id = None
    pipe._restore_state_from_checkpoint()
    pipe._built = True


def _waits_for_workers(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside DALI's wait for its started workers (its Python work done)."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    while frame is not None:
        if frame.f_code.co_name == _WAITS_FOR_WORKERS:
            return True
        frame = frame.f_back
    return False
