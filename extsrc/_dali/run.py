"""``PipelineRun``: a built DALI pipeline, its PyTorch iterator and the watchdog that calls it.

DALI itself reports most deaths of its worker processes, but when a worker dies while DALI's
shared queue waits for its acknowledgement, DALI blocks forever. So with worker processes each
``next()`` runs on one helper thread (a ``ThreadPoolExecutor`` of one worker) while the calling
thread checks that the workers live; when one has been dead for :data:`DEAD_WORKER_GRACE`
seconds the watchdog stops the others, wakes the blocked call and raises :class:`WorkersDied`.

``pipe.build()`` starts the worker processes and waits until each reports ready
(:func:`extsrc._dali.build.build` starts them while DALI builds its operators); it runs on the
same helper thread, watched the same way, and gives up after :data:`BUILD_TIMEOUT` seconds with
:class:`~extsrc.errors.WorkerStartError`. When the run is closed, or the loader holding it is
collected (:mod:`extsrc._dali.lifecycle`), the pipeline is shut down explicitly; a pipeline whose
call was abandoned is kept referenced instead, so that no garbage collection shuts it down.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from extsrc._dali.build import build
from extsrc._dali.lifecycle import keep_forever
from extsrc._dali.workers import (
    exited,
    shutdown_pipeline,
    stop_processes,
    wake_queues,
    worker_processes,
)
from extsrc.errors import DaliVersionError, WorkerDiedError, WorkerStartError

__all__ = ["BUILD_TIMEOUT", "DEAD_WORKER_GRACE", "PipelineRun", "WorkersDied"]

#: Seconds DALI gets to report a dead worker itself before the watchdog steps in.
DEAD_WORKER_GRACE = 2.0
#: Seconds ``pipe.build()`` may take with worker processes (they start and each reports ready)
#: before they are stopped. Starting takes well under a second with ``fork``; ``spawn`` imports
#: the main module in each worker, which on a loaded machine can take tens of seconds.
BUILD_TIMEOUT = 120.0


class WorkersDied(Exception):
    """Worker processes of the pipeline exited; ``dead`` holds their (pid, exit code)."""

    def __init__(self, dead: list[tuple[int, int]]) -> None:
        super().__init__(dead)
        self.dead = dead


def _not_started(dead: list[tuple[int, int]]) -> WorkerDiedError:
    codes = "; ".join(f"pid {pid} exited with code {code}" for pid, code in dead)
    return WorkerDiedError(
        f"DALI's worker processes did not start{': ' + codes if codes else ''}. All of them were "
        "stopped; iterating again builds the pipeline again"
    )


class PipelineRun:
    """Build ``pipe`` and iterate it as dicts of torch tensors named ``output_names``.

    ``workers``: the pipeline's worker processes (0: the source runs in this process);
    ``watchdog``: call DALI through the watchdog thread when there are workers.
    """

    def __init__(
        self, pipe: Any, output_names: Sequence[str], *, workers: int, device_id: int | None,
        watchdog: bool,
    ) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self.pipe = pipe
        self._workers = workers
        self._device_id = device_id
        self._watchdog = watchdog
        self._executor: ThreadPoolExecutor | None = None
        #: A call the watchdog abandoned still runs: shutting the pipeline down could block.
        self.stuck = False
        self._iter: Any = None
        self._owner_pid = os.getpid()  # a forked child's copy must not stop the parent's workers
        try:
            if watchdog and workers > 0:
                self._build_watched()
            else:
                build(pipe)
            # PARTIAL: the source decides batch sizes; DALI must pass short batches through.
            self._iter = DALIGenericIterator(
                pipe, list(output_names), last_batch_policy=LastBatchPolicy.PARTIAL,
                auto_reset=False, prepare_first_batch=False,
            )
        except BaseException:
            self.close()  # a half-built pipeline's threads and workers stop now, not at a GC
            raise

    def _build_watched(self) -> None:
        """``pipe.build()`` on the helper thread while this one watches the worker processes it
        starts (the children this process gained meanwhile: DALI keeps the pool's processes out
        of reach until every worker has reported ready)."""
        before = set(multiprocessing.active_children())
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extsrc-dali")
        future = self._executor.submit(build, self.pipe)
        deadline = time.monotonic() + BUILD_TIMEOUT
        dead_since = None
        procs: list[Any] = []
        try:
            while not wait([future], 0.2).done:
                # Kept from poll to poll: active_children() reaps a child that has exited and
                # leaves it out, so a reader that died would never be seen as dead.
                procs += [p for p in multiprocessing.active_children()
                          if p not in before and p not in procs]
                dead = exited(procs)
                now = time.monotonic()
                if dead:
                    dead_since = dead_since or now
                if dead and now - dead_since >= DEAD_WORKER_GRACE:
                    self._abandon_build(future, procs)
                    raise _not_started(dead)
                if now >= deadline:
                    self._abandon_build(future, procs)
                    raise WorkerStartError(pids=[p.pid for p in procs], timeout=BUILD_TIMEOUT)
        except KeyboardInterrupt:
            self._abandon_build(future, procs)
            raise
        try:
            future.result()
        except Exception as e:
            # DALI noticed first ("Workers initialization failed"): the same error, with the
            # exit codes of the readers seen exit.
            if not ("initialization failed" in str(e) or exited(procs)):
                raise
            stop_processes(procs)
            raise _not_started(exited(procs)) from e


    def _abandon_build(self, future: Future[Any], procs: list[Any]) -> None:
        """Stop the workers a build waits for (DALI's observer then ends the wait) and give the
        build a moment to return; a build that does not is abandoned."""
        stop_processes(procs)
        if not wait([future], 5.0).done:
            self.stuck = True

    def processes(self, strict: bool = True) -> list[Any]:
        """The pipeline's worker processes (none without workers). ``strict=False``: none
        either where this DALI keeps them elsewhere (for clean-up and diagnosis, which must
        not raise), instead of :class:`~extsrc.errors.DaliVersionError`."""
        if self._workers == 0 or self.pipe is None:
            return []
        try:
            return worker_processes(self.pipe)
        except DaliVersionError:
            if strict:
                raise
            return []

    def next(self) -> Any:
        """The next batch (DALI's list of one dict); ``StopIteration`` at the epoch's end."""
        procs = self.processes() if self._watchdog else []
        if not procs:
            return next(self._iter)
        dead = exited(procs)
        if dead:  # died since the last batch, DALI has not noticed (yet): never go on without it
            stop_processes(procs)
            raise WorkersDied(dead)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extsrc-dali")
        future = self._executor.submit(self._call())
        try:
            return self._watch(future, procs)
        except KeyboardInterrupt:
            # Never leave DALI's call running while another thread touches the iterator.
            if not wait([future], 5.0).done:
                self.stuck = True
            raise

    def _call(self) -> Any:
        """``next()`` for the helper thread, on the caller's CUDA stream: torch's current
        stream is per thread, and DALI copies batches on the current one."""
        it = self._iter
        if self._device_id is None:
            return lambda: next(it)
        import torch

        stream = torch.cuda.current_stream(self._device_id)

        def call() -> Any:
            with torch.cuda.stream(stream):
                return next(it)

        return call

    def _watch(self, future: Future[Any], procs: list[Any]) -> Any:
        dead_since = None
        while not wait([future], 0.2).done:
            dead = exited(procs)
            if not dead:
                continue
            now = time.monotonic()
            dead_since = dead_since or now
            if now - dead_since < DEAD_WORKER_GRACE:
                continue
            stop_processes(procs)
            wake_queues(self.pipe, len(procs))
            if not wait([future], 2.0).done:
                self.stuck = True  # abandoned: close() will not wait on that pipeline
            raise WorkersDied(dead)
        return future.result()

    def reset(self) -> None:
        """Rewind DALI's iterator after an epoch's end."""
        self._iter.reset()

    def dead_workers(self, wait_s: float = 0.0) -> list[tuple[int, int]]:
        """(pid, exit code) of the workers that exited, waiting up to ``wait_s`` for one."""
        procs = self.processes(strict=False)
        deadline = time.monotonic() + (wait_s if procs else 0.0)
        while True:
            dead = exited(procs)
            if dead or time.monotonic() >= deadline:
                return dead
            time.sleep(0.02)

    def close(self) -> None:
        """Stop DALI's threads and worker processes now."""
        if self.pipe is None:
            return
        if os.getpid() != self._owner_pid:
            # A forked child's copy (lifecycle made its pipeline inert): the threads, workers
            # and queues are the parent's.
            keep_forever(self.pipe, self._iter)
            self._iter = self.pipe = None
            return
        procs = self.processes(strict=False)
        if self.stuck:
            # A call into it still runs: shutting it down could block, and so could its
            # __del__ inside some later garbage collection. It stays referenced instead.
            keep_forever(self.pipe, self._iter)
        else:
            shutdown_pipeline(self.pipe)
        stop_processes(procs)  # whatever DALI left running: never an orphan
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._iter = None
        self.pipe = None
