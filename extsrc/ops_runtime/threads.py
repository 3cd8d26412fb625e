"""The thread side of the op pool (``op_pool="thread"``, and extsrc's own host resize until the
worker processes are up): daemon threads that run one sample's call each, and the wait for a
batch's calls that notices a call past the time limit."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from extsrc.errors import OpTimeoutError

__all__ = ["Task", "Threads", "abandoned_error", "wait_tasks"]


class Task:
    """One sample's call in a :class:`Threads` pool: when it started and in which thread."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.future: Future[Any] = Future()
        self.started: float | None = None  # time.monotonic() when a thread took it
        self.thread: threading.Thread | None = None


class Threads:
    """Daemon threads running :class:`Task` s from a queue. Not a ThreadPoolExecutor: its
    threads are joined at interpreter exit, and a thread stuck in an op past the time limit
    (which nothing can stop) would then keep the process from ever exiting."""

    def __init__(self, n: int, name: str) -> None:
        self._queue: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def _work(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                return
            if not task.future.set_running_or_notify_cancel():
                continue  # cancelled before it started
            task.thread, task.started = threading.current_thread(), time.monotonic()
            try:
                task.future.set_result(task.fn(*task.args))
            except BaseException as e:
                task.future.set_exception(e)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Task:
        task = Task(fn, args)
        self._queue.put(task)
        return task

    def shutdown(self, wait: bool = True, skip: Sequence[threading.Thread] = ()) -> None:
        """End the threads after their current task (``wait``: wait for them, except those in
        ``skip``, which are left to end on their own)."""
        for _ in self.threads:
            self._queue.put(None)
        if wait:
            for t in self.threads:
                if t not in skip:
                    t.join()


def wait_tasks(tasks: list[Task], timeout: float | None) -> list[Task]:
    """Wait for every task of a batch, so none runs on after a failure is raised; the tasks
    running past ``timeout`` seconds (the tasks not started yet are cancelled then), else
    ``[]`` once all are done."""
    pending = {t.future for t in tasks}
    while pending:
        limit = None
        if timeout is not None:
            now = time.monotonic()
            running = [t for t in tasks if t.started is not None and not t.future.done()]
            late = [t for t in running if now - t.started >= timeout]  # type: ignore[operator]
            if late:
                for t in tasks:
                    t.future.cancel()  # those not started yet
                return late
            ends = [t.started + timeout for t in running]  # type: ignore[operator]
            limit = max(0.0, min(ends, default=now + timeout) - now) + 0.01
        _, pending = wait(pending, timeout=limit, return_when=FIRST_COMPLETED)
    return []


def abandoned_error(first: OpTimeoutError) -> OpTimeoutError:
    """The error of every batch while a thread left past the time limit (``first`` reported it)
    still runs: the op's state, or a lock it holds, may be left broken."""
    from extsrc.sources.where import sample_where

    line, path = first.samples[0]
    return OpTimeoutError(
        f"op '{first.op}' ran past op_timeout={first.timeout:g} s per sample on "
        f"{sample_where(first.source or '', line)} ({path}) and its thread still runs: "
        "threads cannot be stopped, so this loader runs no more ops in this process "
        "while it does. "
        "Restart the process; op_pool='process' runs ops in worker processes, which "
        "are killed instead",
        op=first.op, timeout=first.timeout, samples=first.samples, source=first.source,
        line=first.line, path=first.path,
    )
