"""Run the numpy path's ops for the samples of a batch in parallel.

The numpy path calls the user's function once per sample inside one DALI ``python_function``
per batch (:class:`extsrc.oppaths.BatchOpRunner`). Called in that thread, every op of every
sample runs on one core. An :class:`OpPool` spreads a batch's samples over ``workers``:

- ``"process"`` (the default): worker processes (:mod:`extsrc.opworker`). Each is a fresh
  interpreter started with fork and exec, so it works from notebooks and from scripts without
  an ``if __name__ == "__main__":`` guard, and it receives the ops by value where they live in
  ``__main__`` (cloudpickle). Images travel through shared memory: one anonymous memory file
  (``memfd``) for the batch's inputs, mapped by every worker, and one per (worker, op) for its
  outputs, mapped by the pool and that worker. These files have no name in ``/dev/shm``: the
  memory goes when the last process holding it ends, however it ends. The outputs are handed
  to DALI as views of that memory (or copied to the GPU as each chunk's reply arrives); DALI
  copies them into its own buffers before the ``python_function`` call returns, and the next
  call of the same op is the first to write there again (a batch that fails part-way closes
  the pool, so no worker is left writing). A worker sees an op as it was pickled when the pool
  started: state an op changes later reaches the workers only after :meth:`OpPool.close` (the
  loader's ``close()``).
- ``"thread"``: a thread pool in this process. No copies and no processes; it scales when the
  op spends its time where the GIL is released (numpy's array loops, OpenCV), and not at all for
  Python loops.

Worker processes take the batch in chunks (:func:`chunks`): large ones first, smaller ones as
the batch runs out, each given to the first worker that is free. A worker slowed down by the
rest of the machine then takes fewer samples instead of holding the batch up (with equal
shares, the slowest of 16 workers finished about 14 ms after the first, for 128 images of
500x375 on an H100 machine; ``benchmarks/op_pool_timeline.py``). The samples' generators come
from (seed, epoch, manifest index, op), as on the serial path, so the batches are the same
whatever the number of workers and whichever worker ran a sample.
"""

from __future__ import annotations

import atexit
import math
import mmap
import os
import queue
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any

import numpy as np

from extsrc.errors import OpError, OpTimeoutError, PipelineError, WorkerDiedError
from extsrc.opworker import MappedFile, aligned, grown, recv_message, send_message

if TYPE_CHECKING:
    from extsrc.oppaths import BatchOpRunner

__all__ = ["POOL_KINDS", "STARTUP_SECONDS", "OpPool", "check_op_timeout", "check_picklable",
           "chunks"]

#: The kinds of pool: worker processes, or threads of this process.
POOL_KINDS = ("process", "thread")
#: ``on_outputs(map, start, end, placed)`` of :meth:`OpPool.run`: one chunk's results.
OnOutputs = Callable[[mmap.mmap, int, int, list[list[tuple[int, tuple[int, ...], str]]]],
                     list[tuple[Any, ...]]]
#: Seconds :meth:`OpPool.close` gives workers still running a sample, all together.
EXIT_SECONDS = 2.0
#: Seconds a worker process may take to start and load an op (imports included) before its
#: first chunk's time limit starts; only with a time limit (``timeout``).
STARTUP_SECONDS = 120.0

# Pools not yet closed, closed at interpreter exit (before the socket objects go).
_OPEN: weakref.WeakSet[OpPool] = weakref.WeakSet()


def chunks(n: int, workers: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges cutting ``range(n)`` in order, for ``workers`` that each take the next
    chunk when they are free (guided self-scheduling): each chunk is a ``2 * workers``-th of what
    is left, rounded up, but no smaller than a ``4 * workers``-th of the batch (each chunk costs
    a message both ways). The first chunks keep every worker busy; the last ones are small, so
    the workers finish close together."""
    if n <= 0:
        return []
    workers = max(1, workers)
    smallest = max(1, -(-n // (4 * workers)))
    out, lo = [], 0
    while lo < n:
        size = max(smallest, -(-(n - lo) // (2 * workers)))
        out.append((lo, min(n, lo + size)))
        lo = out[-1][1]
    return out


def _dumps(obj: Any) -> bytes:
    from extsrc.oppickle import dumps

    return dumps(obj)


def check_picklable(op: Any) -> None:
    """Refuse, at construction, an op that cannot be sent to worker processes."""
    try:
        _dumps(op)
    except Exception as e:
        raise ValueError(
            f"op '{op.name}' cannot be sent to op worker processes ({type(e).__name__}: {e}); "
            "run it in threads with OpRuntime(op_pool='thread'), or in the DALI thread with "
            "OpRuntime(op_workers=0)"
        ) from None


def check_op_timeout(value: object, name: str = "op_timeout") -> float | None:
    """A time limit in seconds per sample: a positive finite number, or ``None`` (no limit)."""
    import numbers

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number of seconds per sample or None for no limit, got "
            f"{type(value).__name__} {value!r}"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{name} must be > 0 seconds and finite (or None for no limit), got {value!r}"
        )
    return float(value)


class _Task:
    """One sample's call in a :class:`_Threads` pool: when it started and in which thread."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.future: Future[Any] = Future()
        self.started: float | None = None  # time.monotonic() when a thread took it
        self.thread: threading.Thread | None = None


class _Threads:
    """Daemon threads running :class:`_Task` s from a queue. Not a ThreadPoolExecutor: its
    threads are joined at interpreter exit, and a thread stuck in an op past the time limit
    (which nothing can stop) would then keep the process from ever exiting."""

    def __init__(self, n: int, name: str) -> None:
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
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

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Task:
        task = _Task(fn, args)
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


def _wait_quietly(copied: Callable[[], None] | None) -> None:
    """Wait for asynchronous copies from or into the pool's memory before it is unmapped, on a
    path that is raising already (its own failure would hide the first)."""
    if copied is not None:
        try:
            copied()
        except Exception:
            pass


def _memory_file(name: str) -> int:
    """A file descriptor of anonymous shared memory (memfd; an unlinked temporary file where
    memfd does not exist)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name, os.MFD_CLOEXEC)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix=name, dir=shm)
    os.unlink(path)
    return fd


class _Mapped(MappedFile):
    """A new memory file and this process's map of it, with what undoes the pool's on_map."""

    def __init__(self, name: str) -> None:
        super().__init__(_memory_file(name))
        self.undo: Callable[[], None] | None = None  # of the pool's on_map

    def release(self) -> None:
        """Undo the pool's on_map for the current map (before it is replaced or dropped)."""
        undo, self.undo = self.undo, None
        if undo is not None:
            undo()

    def close(self) -> None:
        self.release()
        self.map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _worker_env() -> dict[str, str]:
    """The workers' environment: this process's, with its import path (``sys.path``, which a
    notebook may have changed at run time) as ``PYTHONPATH``, so the worker finds extsrc and
    the ops' modules from its first import; and glibc's malloc told to keep freed memory: ops
    make image-sized temporaries, by default each a fresh mmap whose pages fault in and are
    zeroed again for every sample, which costs more than many ops' arithmetic."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 << 20))
    env.setdefault("MALLOC_TRIM_THRESHOLD_", str(256 << 20))
    return env


class _Worker:
    """One worker process, its socket and its shared memory."""

    def __init__(self, rank: int, inputs: _Mapped) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from extsrc.opworker import main; main()",
                 str(child.fileno()), str(os.getpid())],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=_worker_env(),
            )
        finally:
            child.close()
        self.rank = rank
        self.sock = parent
        self.outputs: dict[int, _Mapped] = {}
        self.ops: set[int] = set()
        self.loading = 0  # ("ready", key) replies this worker still owes (ops not yet loaded)
        send_message(self.sock, ("in", inputs.size), (inputs.fd,))

    def register(self, key: int, payload: bytes) -> bool:
        """Send op ``key`` and its output memory (True), unless this worker has them (False)."""
        if key in self.ops:
            return False
        out = _Mapped(f"extsrc-op-out-{self.rank}-{key}")
        out.ensure(1 << 20, grow=True)
        self.outputs[key] = out
        send_message(self.sock, ("op", key, payload))
        send_message(self.sock, ("out", key, out.size), (out.fd,))
        self.ops.add(key)
        self.loading += 1
        return True

    def died(self) -> str:
        """How the process ended, in words (it is waited for briefly)."""
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if code < 0:
            import signal

            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (the out-of-memory killer sends it)" if name == "SIGKILL" else ""
            return f"was killed by {name}{hint}"
        return f"exited with code {code}"

    def ask_to_exit(self) -> None:
        """Tell the worker to exit (it does after the sample it is on) and close the socket."""
        try:
            send_message(self.sock, ("exit",))
        except OSError:
            pass
        self.sock.close()

    def end(self, deadline: float) -> None:
        """Wait for the process until ``deadline`` (``time.monotonic``), then kill it; free the
        memory."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for m in self.outputs.values():
            m.close()


class OpPool:
    """Runs an op's numpy path over the samples of a batch with ``workers`` processes or threads
    (``kind``, one of :data:`POOL_KINDS`). Started at its first batch; :meth:`close` ends the
    workers and frees their memory, and a later batch starts them again.

    ``timeout`` (seconds per sample, ``None``: no limit) stops an op that never returns (an
    endless loop, a deadlock in native code) with an :class:`~extsrc.errors.OpTimeoutError`
    naming the op and the samples in flight. A worker process given ``k`` samples at once has
    ``k`` times the limit, counted from when it has loaded the op (at most
    :data:`STARTUP_SECONDS` for that); the late worker is killed, the others are stopped, and
    the next batch starts new ones. A thread cannot be stopped: a late thread is abandoned (a
    daemon thread: it does not keep the process from exiting), and every later batch raises
    :class:`~extsrc.errors.OpTimeoutError` at once while it still runs, since the op's state
    or a lock it holds may be left broken; a new process (or ``op_pool="process"``) is the way
    on."""

    def __init__(self, workers: int, kind: str = "process", timeout: float | None = None) -> None:
        if kind not in POOL_KINDS:
            raise ValueError(f"op_pool must be one of {list(POOL_KINDS)}, got {kind!r}")
        if workers < 1:
            raise ValueError(f"an op pool needs at least one worker, got {workers}")
        self.workers = workers
        self.kind = kind
        self.timeout = check_op_timeout(timeout)
        # Threads that ran past the limit, left running: (thread, the error that reported it).
        self._abandoned: list[tuple[threading.Thread, OpTimeoutError]] = []
        self._lock = threading.Lock()  # one batch at a time: DALI may run two ops at once
        self.closing = False  # set by close(): a batch cut short by it is not a crash
        self._procs: list[_Worker] = []
        self._inputs: _Mapped | None = None  # the batch's images, mapped by every worker
        self._threads: _Threads | None = None
        # (op, seed, salt) -> key, number and pickled op, until close().
        self._keys: dict[tuple[int, int, int], tuple[Any, int, bytes]] = {}
        #: Called with every new map of the workers' memory (to page-lock it for the GPU); it
        #: returns what undoes that, called before the map is dropped.
        self.on_map: Callable[[mmap.mmap], Callable[[], None] | None] | None = None

    def _mapped(self, m: _Mapped) -> None:
        if self.on_map is not None and m.map is not None:
            m.undo = self.on_map(m.map)

    def _ensure(self, m: _Mapped, size: int, *, grow: bool,
                copied: Callable[[], None] | None = None) -> None:
        """Map at least ``size`` bytes of ``m``; a new map is made only after ``copied()`` (no
        asynchronous copy may still read or write the map being replaced)."""
        if m.map is None or size > m.size:
            if copied is not None and m.map is not None:
                copied()
            m.release()
            m.ensure(size, grow=grow)
            self._mapped(m)

    # -- running ----------------------------------------------------------------------------------
    def run(self, runner: BatchOpRunner, images: Sequence[Any], infos: Sequence[Any], *,
            copy_in: Callable[[np.ndarray, Any], None] = np.copyto,
            copied: Callable[[], None] | None = None,
            on_outputs: OnOutputs | None = None,
            ) -> list[tuple[Any, ...]]:
        """``runner``'s op on every sample (info rows: manifest index, epoch, pad flag), in the
        batch's order; the first failing sample's error, worded as the serial path words it.

        ``images`` are numpy arrays, or (worker processes only) objects with ``shape``, numpy
        ``dtype`` and ``nbytes`` that ``copy_in(destination_array, image)`` copies into the
        workers' memory (GPU tensors: one device-to-host copy each, no host buffer between);
        ``copied()`` is called before a worker is given images copied for it, and before a map
        of the workers' memory is replaced (to wait for asynchronous copies). The outputs of
        worker processes are views of their memory, valid until this op's next batch; or, with
        ``on_outputs``, what it returns for each chunk as the chunk's reply arrives: it gets the
        worker's map, the byte range ``[start, end)`` the chunk's outputs take there, and their
        (offset, shape, dtype) per sample, in batch order (to move them elsewhere with one copy
        per chunk, while the other chunks still run)."""
        ids = [(int(info[0]), int(info[1])) for info in infos]
        with self._lock:
            if self.kind == "thread" or (getattr(runner.op, "in_threads", False)
                                         and not self._processes_ready(runner)):
                return self._run_threads(runner, images, ids)
            return self._run_processes(runner, images, ids, copy_in, copied, on_outputs)

    def _processes_ready(self, runner: BatchOpRunner) -> bool:
        """Whether every worker process has loaded ``runner``'s op, for an op that may run in
        threads of this process meanwhile (``in_threads``: extsrc's own host resize, see
        :class:`extsrc.hostresize.ResizeOnly`); starts the workers and sends them the op
        without waiting for them. The first batches of a loader then take no interpreter's
        start (0.2 s on a 2-core machine, more with more workers starting at once), and the
        later ones run in processes, which scale past the GIL-held parts of a resize. The
        workers start after the first such batch, which keeps the cores for itself."""
        if not self._procs and not self._threads:
            return False
        self._start()
        key, payload = self._key(runner)
        try:
            for w in self._procs:
                if w.register(key, payload):
                    self._mapped(w.outputs[key])
            waiting = {w.sock.fileno(): w for w in self._procs if w.loading}
            if not waiting:
                return True
            poller = select.poll()
            for fd in waiting:
                poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll(0):  # between batches, only "ready" replies can be due
                reply, _ = recv_message(waiting[fd].sock)
                if reply[0] == "ready":
                    waiting[fd].loading -= 1
        except (EOFError, OSError):
            return True  # a worker ended: the process path reports how, naming the samples
        return not any(w.loading for w in self._procs)

    def _run_threads(self, runner: BatchOpRunner, images: Sequence[Any],
                     ids: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
        self._abandoned = [(t, e) for t, e in self._abandoned if t.is_alive()]
        if self._abandoned:
            from extsrc.folders import sample_where
            from extsrc.oppaths import RAISED

            first = self._abandoned[0][1]
            line, path = first.samples[0]
            err = OpTimeoutError(
                f"op '{first.op}' ran past op_timeout={first.timeout:g} s per sample on "
                f"{sample_where(first.source or '', line)} ({path}) and its thread still runs: "
                "threads cannot be stopped, so this loader runs no more ops in this process "
                "while it does. "
                "Restart the process; op_pool='process' runs ops in worker processes, which "
                "are killed instead",
                op=first.op, timeout=first.timeout, samples=first.samples, source=first.source,
                line=first.line, path=first.path,
            )
            RAISED.append(err)
            raise err
        if self._threads is None:
            self._threads = _Threads(self.workers, "extsrc-op")
            _OPEN.add(self)
        tasks = [self._threads.submit(runner.run_one, img, *i)
                 for img, i in zip(images, ids, strict=True)]
        pending = {t.future for t in tasks}
        while pending:  # all of them, so none runs on after a failure is raised
            limit = None
            if self.timeout is not None:
                now = time.monotonic()
                running = [t for t in tasks if t.started is not None and not t.future.done()]
                late = [t for t in running if now - t.started >= self.timeout]  # type: ignore
                if late:
                    for t in tasks:
                        t.future.cancel()  # those not started yet
                    raise self._threads_late(runner, late, ids, tasks)
                ends = [t.started + self.timeout for t in running]  # type: ignore[operator]
                limit = max(0.0, min(ends, default=now + self.timeout) - now) + 0.01
            _, pending = wait(pending, timeout=limit, return_when=FIRST_COMPLETED)
        return [t.future.result() for t in tasks]

    def _threads_late(self, runner: BatchOpRunner, late: list[_Task], ids: list[tuple[int, int]],
                      tasks: list[_Task]) -> OpTimeoutError:
        """The error for threads that ran past the limit; they are abandoned and the pool's
        other threads end after their current sample (the next batch starts new ones)."""
        from extsrc.oppaths import RAISED

        assert self._threads is not None and self.timeout is not None
        positions = [tasks.index(t) for t in late]
        stuck = [t.thread for t in late if t.thread is not None]
        err = self._late_error(
            runner, [ids[p][0] for p in positions], len(positions),
            f"{'threads' if len(stuck) > 1 else 'thread'} {', '.join(t.name for t in stuck)} "
            f"{'were' if len(stuck) > 1 else 'was'} running it on",
            "Threads cannot be stopped: each is left running as a daemon thread (it does not "
            "keep the process from exiting), and this loader runs no more ops in this process "
            "while one does. Restart the process; op_pool='process' runs ops in worker "
            "processes, which are killed instead",
        )
        threads, self._threads = self._threads, None
        threads.shutdown(wait=False)
        self._abandoned += [(t, err) for t in stuck]
        RAISED.append(err)
        return err

    def _late_error(self, runner: BatchOpRunner, indices: list[int], samples: int, who: str,
                    then: str) -> OpTimeoutError:
        """An :class:`OpTimeoutError` for op ``runner`` late on manifest ``indices``."""
        assert self.timeout is not None
        m = runner.manifest
        where = ", ".join(runner.where(i) for i in indices[:3])
        more = f" and {len(indices) - 3} more" if len(indices) > 3 else ""
        each = (f" (a chunk of {samples} samples gets {samples * self.timeout:g} s)"
                if samples > 1 and self.kind == "process" else "")
        return OpTimeoutError(
            f"op '{runner.op.name}' did not finish within op_timeout={self.timeout:g} s per "
            f"sample{each}: {who} {where}{more}. The op did not return: an endless loop or a "
            "deadlock (in a C extension, a lock), or it is slower than the limit. "
            f"{then}. Fix the op, or raise the limit with op_timeout=... (None: no limit)",
            op=runner.op.name, timeout=self.timeout,
            samples=[(m.lines[i], m.paths[i]) for i in indices],
            source=m.source, line=m.lines[indices[0]], path=m.paths[indices[0]],
        )

    def _key(self, runner: BatchOpRunner) -> tuple[int, bytes]:
        """The op's number in the workers, and its pickled (op, seed, salt). Two runners of one
        pipeline never share a key (their salts differ), so never their output memory."""
        k = (id(runner.op), runner.seed, runner.salt)
        known = self._keys.get(k)
        if known is None or known[0] is not runner.op:
            payload = _dumps((runner.op, runner.seed, runner.salt))
            known = (runner.op, len(self._keys), payload)
            self._keys[k] = known
        return known[1], known[2]

    def start(self) -> None:
        """Start the worker processes now, without waiting for them (a loader calls it before
        DALI builds its pipeline, so that the interpreters start meanwhile); the first batch
        otherwise starts them."""
        if self.kind == "process":
            with self._lock:
                self._start()

    def _start(self) -> None:
        self.closing = False
        if not self._procs:
            try:
                self._inputs = _Mapped("extsrc-op-in")
                self._inputs.ensure(1 << 20, grow=True)
                self._mapped(self._inputs)
                for rank in range(self.workers):
                    self._procs.append(_Worker(rank, self._inputs))
            except BaseException:
                self.close()
                raise
            _OPEN.add(self)

    def _run_processes(self, runner: BatchOpRunner, images: Sequence[Any],
                       ids: list[tuple[int, int]], copy_in: Callable[[np.ndarray, Any], None],
                       copied: Callable[[], None] | None, on_outputs: OnOutputs | None,
                       ) -> list[tuple[Any, ...]]:
        self._start()
        key, payload = self._key(runner)
        inputs = self._inputs
        assert inputs is not None
        # Every image in the shared input memory, in batch order.
        offsets, total = [], 0
        for img in images:
            offsets.append(total)
            total += aligned(img.nbytes)
        self._ensure(inputs, grown(total, inputs.size), grow=True, copied=copied)
        todo = chunks(len(images), len(self._procs))
        copied_up_to = 0  # images[:copied_up_to] are in the input memory

        def copy_until(hi: int) -> None:
            nonlocal copied_up_to
            for i in range(copied_up_to, hi):
                img = images[i]
                copy_in(np.ndarray(tuple(img.shape), dtype=img.dtype, buffer=inputs.map,
                                   offset=offsets[i]), img)
            if hi > copied_up_to and copied is not None:
                copied()
            copied_up_to = max(copied_up_to, hi)

        def deadline(w: _Worker, lo: int, hi: int) -> float:
            """When the chunk sent to ``w`` now is late: ``hi - lo`` times the limit, after
            the worker has loaded its ops (it says so with a "ready" reply)."""
            if self.timeout is None:
                return math.inf
            wait_load = STARTUP_SECONDS if w.loading else 0.0
            return time.monotonic() + wait_load + self.timeout * (hi - lo)

        def send(w: _Worker, lo: int, hi: int) -> None:
            items = [(offsets[i], tuple(images[i].shape), images[i].dtype.str, *ids[i])
                     for i in range(lo, hi)]
            start = ends.get(w, 0)
            send_message(w.sock, ("run", key, inputs.size, items, start))
            busy[w.sock.fileno()] = (w, lo, hi, start, deadline(w, lo, hi))
            # poll, not select: select takes no descriptor numbers from 1024 on
            poller.register(w.sock, select.POLLIN)

        results: list[tuple[Any, ...] | None] = [None] * len(images)
        # socket fd -> the chunk sent to it: worker, [lo, hi), output start, deadline
        busy: dict[int, tuple[_Worker, int, int, int, float]] = {}
        poller = select.poll()
        ends: dict[_Worker, int] = {}  # where each worker's next outputs start in its memory
        failure: tuple[int, dict[str, Any]] | None = None
        at: tuple[_Worker, int, int] = (self._procs[0], 0, 0)  # the worker being talked to
        nxt = 0
        try:
            for w in self._procs:
                at = (w, 0, 0)
                if w.register(key, payload):
                    self._mapped(w.outputs[key])
            # One chunk per worker as soon as its images are there, then the rest of the copies
            # while those run.
            for w in self._procs[:len(todo)]:
                at = (w, *todo[nxt])
                copy_until(todo[nxt][1])
                send(w, *todo[nxt])
                nxt += 1
            copy_until(len(images))
            while busy:  # every reply is read, so each socket stays in step
                first_end = min(b[4] for b in busy.values())
                events = poller.poll(None if first_end == math.inf else
                                     math.ceil(max(0.0, first_end - time.monotonic()) * 1000))
                now, answered = time.monotonic(), {fd for fd, _ in events}
                late = [b for fd, b in busy.items() if b[4] <= now and fd not in answered]
                if late:
                    raise self._processes_late(runner, late, ids)
                for fd, _event in events:
                    w, lo, hi, start, _ = busy[fd]
                    at = (w, lo, hi)
                    reply, _ = recv_message(w.sock)
                    if reply[0] == "ready":  # an op loaded: the chunk's time starts now
                        w.loading -= 1
                        busy[fd] = (w, lo, hi, start, deadline(w, lo, hi))
                        continue
                    del busy[fd]
                    poller.unregister(fd)
                    if reply[0] == "error":
                        pos = lo + reply[1] if reply[1] >= 0 else -1
                        if failure is None or pos < failure[0]:
                            failure = (pos, reply[2])
                    else:
                        _, placed, size, end = reply
                        out = w.outputs[key]
                        self._ensure(out, size, grow=False, copied=copied)
                        if on_outputs is not None:
                            got = on_outputs(out.map, start, end, placed)
                            if len(got) != hi - lo:
                                raise RuntimeError(f"on_outputs gave {len(got)} results for "
                                                   f"{hi - lo} samples")
                            results[lo:hi] = got
                        else:
                            results[lo:hi] = [tuple(
                                np.ndarray(shape, dtype=np.dtype(dt), buffer=out.map, offset=o)
                                for o, shape, dt in sample) for sample in placed]
                        ends[w] = end
                    # Chunks past a failing sample are not run: the serial path stops there.
                    if nxt < len(todo) and (failure is None or todo[nxt][0] < failure[0]):
                        at = (w, *todo[nxt])
                        send(w, *todo[nxt])
                        nxt += 1
        except (EOFError, OSError) as e:
            if self.closing:  # close() from another thread (Ctrl-C, loader.close()): no crash
                raise PipelineError(
                    f"the op pool was closed while op '{runner.op.name}' ran") from None
            if not isinstance(e, (EOFError, ConnectionError)):  # not the worker's end
                _wait_quietly(copied)
                self.close()
                raise
            err = self._died(runner, at, ids)
            _wait_quietly(copied)
            self.close()
            raise err from None
        except BaseException:
            # Replies still owed would be read by the next batch as its own: start afresh.
            _wait_quietly(copied)
            self.close()
            raise
        if failure is not None:
            pos, info = failure
            if pos < 0:
                raise OpError(
                    f"op '{runner.op.name}' could not be loaded in an op worker process: "
                    f"{info['type']}: {info['message']}. Workers are fresh interpreters: what "
                    "the op uses must be importable there, or defined in __main__ (sent by "
                    "value); or run the op with OpRuntime(op_pool='thread') or "
                    "OpRuntime(op_workers=0)",
                    op=runner.op.name, detail=f"Traceback in the op worker:\n{info['traceback']}",
                )
            raise runner.failure(ids[pos][0], info)
        return results  # type: ignore[return-value]  (every chunk ran: no failure)

    def _processes_late(self, runner: BatchOpRunner,
                        late: list[tuple[_Worker, int, int, int, float]],
                        ids: list[tuple[int, int]]) -> OpTimeoutError:
        """Kill the workers that ran past the limit; the error naming their samples (the
        caller closes the pool, which stops the others)."""
        from extsrc.oppaths import RAISED

        for w, *_ in late:
            w.proc.kill()
        indices = [ids[i][0] for _, lo, hi, _, _ in late for i in range(lo, hi)]
        pids = ", ".join(str(w.proc.pid) for w, *_ in late)
        err = self._late_error(
            runner, indices, max(hi - lo for _, lo, hi, _, _ in late),
            (f"op worker processes {pids} were running it on" if len(late) > 1 else
             f"op worker process {pids} was running it on"),
            f"{'They were' if len(late) > 1 else 'It was'} killed and the other op workers "
            "stopped; iterating again starts new ones",
        )
        RAISED.append(err)
        return err

    def _died(self, runner: BatchOpRunner, at: tuple[_Worker, int, int],
              ids: list[tuple[int, int]]) -> WorkerDiedError:
        from extsrc.oppaths import RAISED

        w, lo, hi = at
        where = ", ".join(runner.where(ids[i][0]) for i in range(lo, min(hi, lo + 3)))
        more = f" and {hi - lo - 3} more" if hi - lo > 3 else ""
        err = WorkerDiedError(
            f"op worker process {w.proc.pid} {w.died()} while running op '{runner.op.name}' on "
            f"samples {where}{more}. The op ran in a separate process (op_pool='process'); "
            "a crash in native code or too little memory ends it. The other op workers were "
            "stopped; iterating again starts new ones",
            op=runner.op.name,
        )
        RAISED.append(err)
        return err

    # -- lifetime ---------------------------------------------------------------------------------
    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (empty before the first batch and after :meth:`close`)."""
        return [w.proc.pid for w in self._procs]

    def close(self) -> None:
        """End the workers and free their shared memory. A worker still running a sample gets
        :data:`EXIT_SECONDS` (one deadline for all) before it is killed. The ops are pickled
        again when the pool starts again, so workers see their state as it is then."""
        self.closing = True
        procs, self._procs = self._procs, []
        threads, self._threads = self._threads, None
        for w in procs:
            w.ask_to_exit()
        deadline = time.monotonic() + EXIT_SECONDS
        for w in procs:
            w.end(deadline)
        inputs, self._inputs = self._inputs, None
        if inputs is not None:
            inputs.close()
        if threads is not None:
            threads.shutdown(wait=True, skip=[t for t, _ in self._abandoned])
        self._keys.clear()
        _OPEN.discard(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


@atexit.register
def _close_all() -> None:
    for pool in list(_OPEN):
        pool.close()


def _forget_in_child() -> None:
    """In a process forked from one with open pools (DALI's fork-started readers, a DataLoader
    worker): drop the inherited sockets (a worker would not see its pool end while a child
    holds one) and memory files, and unmap the memory where no array of the child views it.
    The workers are the parent's."""
    for pool in list(_OPEN):
        mems = [m for w in pool._procs for m in w.outputs.values()]
        if pool._inputs is not None:
            mems.append(pool._inputs)
        for w in pool._procs:
            w.sock.close()
        for m in mems:
            m.undo = None  # the page-locking belongs to the parent's CUDA context
            if m.map is not None:
                try:
                    m.map.close()  # its own duplicate of the descriptor goes too
                except BufferError:  # arrays still view it: it goes with them
                    pass
            m.close()
        pool._procs, pool._threads, pool._inputs = [], None, None
        pool._lock = threading.Lock()
    _OPEN.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
