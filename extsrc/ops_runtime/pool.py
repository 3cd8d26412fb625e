"""Run the numpy path's ops for the samples of a batch in parallel.

The numpy path calls the user's function once per sample inside one DALI ``python_function``
per batch (:class:`extsrc.ops_runtime.runners.BatchOpRunner`). Called in that thread, every op
of every sample runs on one core. An :class:`OpPool` spreads a batch's samples over ``workers``:

- ``"process"`` (the default): worker processes (:mod:`extsrc.ops_runtime.worker`,
  :mod:`extsrc.ops_runtime.procs`). Each is a fresh
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
- ``"thread"``: a thread pool in this process (:mod:`extsrc.ops_runtime.threads`). No copies
  and no processes; it scales when the op spends its time where the GIL is released (numpy's
  array loops, OpenCV), and not at all for Python loops.

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
import select
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from extsrc.errors import RAISED, OpError, OpTimeoutError, PipelineError, WorkerDiedError
from extsrc.ops_runtime.procs import Mapped, WorkerProcess
from extsrc.ops_runtime.threads import Task, Threads, abandoned_error, wait_tasks
from extsrc.ops_runtime.worker import aligned, grown, recv_message, send_message

__all__ = ["POOL_KINDS", "STARTUP_SECONDS", "OpPool", "PoolRunner", "check_op_timeout",
           "check_picklable", "chunks", "picklable"]

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


class _Samples(Protocol):
    """What the pool reads of a manifest to name samples in its errors."""

    source: str
    lines: Sequence[int]
    paths: Sequence[str]


class PoolRunner(Protocol):
    """What :meth:`OpPool.run` needs of the runner that hands it a batch (the numpy path's
    runners satisfy it): the op with its seed and salt (sent to the workers), the one-sample
    call (run in threads), how a sample is named, and the error of a sample that failed."""

    op: Any
    seed: int
    salt: int
    manifest: _Samples

    def where(self, index: int) -> str: ...

    def run_one(self, img: Any, index: int, epoch: int) -> tuple[Any, ...]: ...

    def failure(self, index: int, info: dict[str, Any]) -> Exception: ...


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
    from extsrc.ops_runtime.oppickle import dumps

    return dumps(obj)


def picklable(op: Any) -> bool:
    """Whether ``op`` can be sent to worker processes (:func:`check_picklable` does not raise)."""
    try:
        check_picklable(op)
    except ValueError:
        return False
    return True


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


def _wait_quietly(copied: Callable[[], None] | None) -> None:
    """Wait for asynchronous copies from or into the pool's memory before it is unmapped, on a
    path that is raising already (its own failure would hide the first)."""
    if copied is not None:
        try:
            copied()
        except Exception:
            pass


def _late_error(runner: PoolRunner, timeout: float, kind: str, indices: list[int],
                samples: int, who: str, then: str) -> OpTimeoutError:
    """An :class:`OpTimeoutError` for op ``runner`` late on manifest ``indices`` (``samples``:
    how many samples the late worker was given at once)."""
    m = runner.manifest
    where = ", ".join(runner.where(i) for i in indices[:3])
    more = f" and {len(indices) - 3} more" if len(indices) > 3 else ""
    each = (f" (a chunk of {samples} samples gets {samples * timeout:g} s)"
            if samples > 1 and kind == "process" else "")
    return OpTimeoutError(
        f"op '{runner.op.name}' did not finish within op_timeout={timeout:g} s per "
        f"sample{each}: {who} {where}{more}. The op did not return: an endless loop or a "
        "deadlock (in a C extension, a lock), or it is slower than the limit. "
        f"{then}. Fix the op, or raise the limit with op_timeout=... (None: no limit)",
        op=runner.op.name, timeout=timeout,
        samples=[(m.lines[i], m.paths[i]) for i in indices],
        source=m.source, line=m.lines[indices[0]], path=m.paths[indices[0]],
    )


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
        self._procs: list[WorkerProcess] = []
        self._inputs: Mapped | None = None  # the batch's images, mapped by every worker
        self._threads: Threads | None = None
        # (op, seed, salt) -> key, number and pickled op, until close().
        self._keys: dict[tuple[int, int, int], tuple[Any, int, bytes]] = {}
        #: Called with every new map of the workers' memory (to page-lock it for the GPU); it
        #: returns what undoes that, called before the map is dropped.
        self.on_map: Callable[[mmap.mmap], Callable[[], None] | None] | None = None

    def _mapped(self, m: Mapped) -> None:
        if self.on_map is not None and m.map is not None:
            m.undo = self.on_map(m.map)

    def _ensure(self, m: Mapped, size: int, *, grow: bool,
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
    def run(self, runner: PoolRunner, images: Sequence[Any], infos: Sequence[Any], *,
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

    def _processes_ready(self, runner: PoolRunner) -> bool:
        """Whether every worker process has loaded ``runner``'s op, for an op that may run in
        threads of this process meanwhile (``in_threads``: extsrc's own host resize, see
        :class:`extsrc.ops_runtime.hostresize.ResizeOnly`); starts the workers and sends them
        the op without waiting for them. The first batches of a loader then take no
        interpreter's start (0.2 s on a 2-core machine, more with more workers starting at
        once), and the later ones run in processes, which scale past the GIL-held parts of a
        resize. The workers start after the first such batch, which keeps the cores for
        itself."""
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

    def _run_threads(self, runner: PoolRunner, images: Sequence[Any],
                     ids: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
        self._abandoned = [(t, e) for t, e in self._abandoned if t.is_alive()]
        if self._abandoned:
            err = abandoned_error(self._abandoned[0][1])
            RAISED.append(err)
            raise err
        if self._threads is None:
            self._threads = Threads(self.workers, "extsrc-op")
            _OPEN.add(self)
        tasks = [self._threads.submit(runner.run_one, img, *i)
                 for img, i in zip(images, ids, strict=True)]
        late = wait_tasks(tasks, self.timeout)
        if late:
            raise self._threads_late(runner, late, ids, tasks)
        return [t.future.result() for t in tasks]

    def _threads_late(self, runner: PoolRunner, late: list[Task], ids: list[tuple[int, int]],
                      tasks: list[Task]) -> OpTimeoutError:
        """The error for threads that ran past the limit; they are abandoned and the pool's
        other threads end after their current sample (the next batch starts new ones)."""
        assert self._threads is not None and self.timeout is not None
        positions = [tasks.index(t) for t in late]
        stuck = [t.thread for t in late if t.thread is not None]
        err = _late_error(
            runner, self.timeout, self.kind, [ids[p][0] for p in positions], len(positions),
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

    def _key(self, runner: PoolRunner) -> tuple[int, bytes]:
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
                self._inputs = Mapped("extsrc-op-in")
                self._inputs.ensure(1 << 20, grow=True)
                self._mapped(self._inputs)
                for rank in range(self.workers):
                    self._procs.append(WorkerProcess(rank, self._inputs))
            except BaseException:
                self.close()
                raise
            _OPEN.add(self)

    def _run_processes(self, runner: PoolRunner, images: Sequence[Any],
                       ids: list[tuple[int, int]], copy_in: Callable[[np.ndarray, Any], None],
                       copied: Callable[[], None] | None, on_outputs: OnOutputs | None,
                       ) -> list[tuple[Any, ...]]:
        self._start()
        batch = _ProcessBatch(self, runner, images, ids, copy_in, copied, on_outputs)
        try:
            batch.run()
        except (EOFError, OSError) as e:
            if self.closing:  # close() from another thread (Ctrl-C, loader.close()): no crash
                raise PipelineError(
                    f"the op pool was closed while op '{runner.op.name}' ran") from None
            if not isinstance(e, (EOFError, ConnectionError)):  # not the worker's end
                _wait_quietly(copied)
                self.close()
                raise
            err = batch.died()
            _wait_quietly(copied)
            self.close()
            raise err from None
        except BaseException:
            # Replies still owed would be read by the next batch as its own: start afresh.
            _wait_quietly(copied)
            self.close()
            raise
        return batch.outcome()

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


#: A chunk sent to a worker: the worker, samples [lo, hi), where its outputs start in the
#: worker's memory, and when it is late (``time.monotonic``).
_Sent = tuple[WorkerProcess, int, int, int, float]


class _ProcessBatch:
    """One batch of one op over the pool's worker processes: every image copied into the shared
    input memory, in batch order, chunks (:func:`chunks`) given to the first worker that is
    free, and every reply read, so each socket stays in step. Chunks past a failing sample are
    not run: the serial path stops there."""

    def __init__(self, pool: OpPool, runner: PoolRunner, images: Sequence[Any],
                 ids: list[tuple[int, int]], copy_in: Callable[[np.ndarray, Any], None],
                 copied: Callable[[], None] | None, on_outputs: OnOutputs | None) -> None:
        self.pool, self.runner, self.images, self.ids = pool, runner, images, ids
        self.copy_in, self.copied, self.on_outputs = copy_in, copied, on_outputs
        self.key, self.payload = pool._key(runner)
        inputs = pool._inputs
        assert inputs is not None
        self.inputs = inputs
        self.offsets: list[int] = []
        total = 0
        for img in images:
            self.offsets.append(total)
            total += aligned(img.nbytes)
        pool._ensure(inputs, grown(total, inputs.size), grow=True, copied=copied)
        self.todo = chunks(len(images), len(pool._procs))
        self.nxt = 0  # the next chunk of todo to send
        self.copied_up_to = 0  # images[:copied_up_to] are in the input memory
        self.results: list[tuple[Any, ...] | None] = [None] * len(images)
        self.busy: dict[int, _Sent] = {}  # socket fd -> the chunk sent to it
        self.poller = select.poll()
        self.ends: dict[WorkerProcess, int] = {}  # where each worker's next outputs start
        self.failure: tuple[int, dict[str, Any]] | None = None
        self.at: tuple[WorkerProcess, int, int] = (pool._procs[0], 0, 0)  # talked to now

    def copy_until(self, hi: int) -> None:
        for i in range(self.copied_up_to, hi):
            img = self.images[i]
            self.copy_in(np.ndarray(tuple(img.shape), dtype=img.dtype, buffer=self.inputs.map,
                                    offset=self.offsets[i]), img)
        if hi > self.copied_up_to and self.copied is not None:
            self.copied()
        self.copied_up_to = max(self.copied_up_to, hi)

    def deadline(self, w: WorkerProcess, lo: int, hi: int) -> float:
        """When the chunk sent to ``w`` now is late: ``hi - lo`` times the limit, after the
        worker has loaded its ops (it says so with a "ready" reply)."""
        timeout = self.pool.timeout
        if timeout is None:
            return math.inf
        wait_load = STARTUP_SECONDS if w.loading else 0.0
        return time.monotonic() + wait_load + timeout * (hi - lo)

    def send_next(self, w: WorkerProcess) -> None:
        lo, hi = self.todo[self.nxt]
        self.nxt += 1
        self.at = (w, lo, hi)
        items = [(self.offsets[i], tuple(self.images[i].shape), self.images[i].dtype.str,
                  *self.ids[i]) for i in range(lo, hi)]
        start = self.ends.get(w, 0)
        send_message(w.sock, ("run", self.key, self.inputs.size, items, start))
        self.busy[w.sock.fileno()] = (w, lo, hi, start, self.deadline(w, lo, hi))
        # poll, not select: select takes no descriptor numbers from 1024 on
        self.poller.register(w.sock, select.POLLIN)

    def run(self) -> None:
        """Send the op, then the chunks, and read every reply (the caller closes the pool when
        this raises: replies still owed would be read by the next batch as its own)."""
        procs = self.pool._procs
        for w in procs:
            self.at = (w, 0, 0)
            if w.register(self.key, self.payload):
                self.pool._mapped(w.outputs[self.key])
        # One chunk per worker as soon as its images are there, then the rest of the copies
        # while those run.
        for w in procs[:len(self.todo)]:
            self.at = (w, *self.todo[self.nxt])
            self.copy_until(self.todo[self.nxt][1])
            self.send_next(w)
        self.copy_until(len(self.images))
        while self.busy:
            first_end = min(b[4] for b in self.busy.values())
            events = self.poller.poll(None if first_end == math.inf else
                                      math.ceil(max(0.0, first_end - time.monotonic()) * 1000))
            now, answered = time.monotonic(), {fd for fd, _ in events}
            late = [b for fd, b in self.busy.items() if b[4] <= now and fd not in answered]
            if late:
                raise self.late(late)
            for fd, _event in events:
                self.reply(fd)

    def reply(self, fd: int) -> None:
        """Read the reply of the worker on socket ``fd``; give it the next chunk when it is
        done with one."""
        w, lo, hi, start, _ = self.busy[fd]
        self.at = (w, lo, hi)
        reply, _ = recv_message(w.sock)
        if reply[0] == "ready":  # an op loaded: the chunk's time starts now
            w.loading -= 1
            self.busy[fd] = (w, lo, hi, start, self.deadline(w, lo, hi))
            return
        del self.busy[fd]
        self.poller.unregister(fd)
        if reply[0] == "error":
            pos = lo + reply[1] if reply[1] >= 0 else -1
            if self.failure is None or pos < self.failure[0]:
                self.failure = (pos, reply[2])
        else:
            _, placed, size, end = reply
            self.take_outputs(w, lo, hi, (start, end), placed, size)
            self.ends[w] = end
        if self.nxt < len(self.todo) and (self.failure is None
                                          or self.todo[self.nxt][0] < self.failure[0]):
            self.send_next(w)

    def take_outputs(self, w: WorkerProcess, lo: int, hi: int, span: tuple[int, int],
                     placed: list[list[tuple[int, tuple[int, ...], str]]], size: int) -> None:
        """Samples [lo, hi)'s outputs, which worker ``w`` placed in the ``span`` of bytes
        ``[start, end)`` of its memory."""
        out = w.outputs[self.key]
        self.pool._ensure(out, size, grow=False, copied=self.copied)
        if self.on_outputs is not None:
            got = self.on_outputs(out.map, *span, placed)
            if len(got) != hi - lo:
                raise RuntimeError(f"on_outputs gave {len(got)} results for {hi - lo} samples")
            self.results[lo:hi] = got
        else:
            self.results[lo:hi] = [tuple(
                np.ndarray(shape, dtype=np.dtype(dt), buffer=out.map, offset=o)
                for o, shape, dt in sample) for sample in placed]

    def outcome(self) -> list[tuple[Any, ...]]:
        """The results, once every chunk ran; else the first failing sample's error (the pool
        stays open: every reply was read)."""
        if self.failure is None:
            return self.results  # type: ignore[return-value]  (every chunk ran)
        pos, info = self.failure
        op = self.runner.op.name
        if pos < 0:
            raise OpError(
                f"op '{op}' could not be loaded in an op worker process: "
                f"{info['type']}: {info['message']}. Workers are fresh interpreters: what "
                "the op uses must be importable there, or defined in __main__ (sent by "
                "value); or run the op with OpRuntime(op_pool='thread') or "
                "OpRuntime(op_workers=0)",
                op=op, detail=f"Traceback in the op worker:\n{info['traceback']}",
            )
        raise self.runner.failure(self.ids[pos][0], info)

    def late(self, late: list[_Sent]) -> OpTimeoutError:
        """Kill the workers that ran past the limit; the error naming their samples (the
        caller closes the pool, which stops the others)."""
        assert self.pool.timeout is not None
        for w, *_ in late:
            w.proc.kill()
        indices = [self.ids[i][0] for _, lo, hi, _, _ in late for i in range(lo, hi)]
        pids = ", ".join(str(w.proc.pid) for w, *_ in late)
        err = _late_error(
            self.runner, self.pool.timeout, self.pool.kind, indices,
            max(hi - lo for _, lo, hi, _, _ in late),
            (f"op worker processes {pids} were running it on" if len(late) > 1 else
             f"op worker process {pids} was running it on"),
            f"{'They were' if len(late) > 1 else 'It was'} killed and the other op workers "
            "stopped; iterating again starts new ones",
        )
        RAISED.append(err)
        return err

    def died(self) -> WorkerDiedError:
        """The error of the worker being talked to having ended, naming its samples."""
        w, lo, hi = self.at
        runner = self.runner
        where = ", ".join(runner.where(self.ids[i][0]) for i in range(lo, min(hi, lo + 3)))
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
