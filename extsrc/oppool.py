"""Run the numpy path's ops for the samples of a batch in parallel.

The numpy path calls the user's function once per sample inside one DALI ``python_function``
per batch (:class:`extsrc.oppaths.BatchOpRunner`). Called in that thread, every op of every
sample runs on one core. An :class:`OpPool` spreads a batch's samples over ``workers``:

- ``"process"`` (the default): worker processes (:mod:`extsrc.opworker`). Each is a fresh
  interpreter started with fork and exec, so it works from notebooks and from scripts without
  an ``if __name__ == "__main__":`` guard, and it receives the ops by value where they live in
  ``__main__`` (cloudpickle). Images travel through shared memory: one
  anonymous memory file (``memfd``) per worker for its inputs and one per (worker, op) for its
  outputs, mapped by both processes. These files have no name in ``/dev/shm``: the memory goes
  when the last process holding it ends, however it ends. The outputs are handed to DALI as
  views of that memory; DALI copies them into its own buffers before the ``python_function``
  call returns, and the next call of the same op is the first to write there again (a batch
  that fails part-way closes the pool, so no worker is left writing). A worker sees an op as
  it was pickled when the pool started: state an op changes later reaches the workers only
  after :meth:`OpPool.close` (the loader's ``close()``).
- ``"thread"``: a thread pool in this process. No copies and no processes; it scales when the
  op spends its time where the GIL is released (numpy's array loops, OpenCV), and not at all for
  Python loops.

Each worker takes one contiguous share of the batch. The samples' generators come from
(seed, epoch, manifest index, op), as on the serial path, so the batches are the same whatever
the number of workers.
"""

from __future__ import annotations

import atexit
import mmap
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import numpy as np

from extsrc.errors import OpError, PipelineError, WorkerDiedError
from extsrc.opworker import MappedFile, aligned, grown, recv_message, send_message

if TYPE_CHECKING:
    from extsrc.oppaths import BatchOpRunner

__all__ = ["POOL_KINDS", "OpPool", "check_picklable", "split"]

#: The kinds of pool: worker processes, or threads of this process.
POOL_KINDS = ("process", "thread")
#: Seconds :meth:`OpPool.close` gives workers still running a sample, all together.
EXIT_SECONDS = 2.0

# Pools not yet closed, closed at interpreter exit (before the socket objects go).
_OPEN: weakref.WeakSet[OpPool] = weakref.WeakSet()


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges cutting ``range(n)`` into at most ``parts`` contiguous shares whose
    sizes differ by at most one (no empty share)."""
    if n <= 0:
        return []
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for k in range(parts):
        hi = lo + base + (k < extra)
        out.append((lo, hi))
        lo = hi
    return out


def _dumps(obj: Any) -> bytes:
    import cloudpickle

    return cloudpickle.dumps(obj)


def check_picklable(op: Any) -> None:
    """Refuse, at construction, an op that cannot be sent to worker processes."""
    try:
        _dumps(op)
    except Exception as e:
        raise ValueError(
            f"op '{op.name}' cannot be sent to op worker processes ({type(e).__name__}: {e}); "
            "run it in threads with op_pool='thread', or in the DALI thread with op_workers=0"
        ) from None


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

    def __init__(self, rank: int) -> None:
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
        self.inputs = _Mapped(f"extsrc-op-in-{rank}")
        self.outputs: dict[int, _Mapped] = {}
        self.ops: set[int] = set()
        self.inputs.ensure(1 << 20, grow=True)
        send_message(self.sock, ("in", self.inputs.size), (self.inputs.fd,))

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
        self.inputs.close()
        for m in self.outputs.values():
            m.close()


class OpPool:
    """Runs an op's numpy path over the samples of a batch with ``workers`` processes or threads
    (``kind``, one of :data:`POOL_KINDS`). Started at its first batch; :meth:`close` ends the
    workers and frees their memory, and a later batch starts them again."""

    def __init__(self, workers: int, kind: str = "process") -> None:
        if kind not in POOL_KINDS:
            raise ValueError(f"op_pool must be one of {list(POOL_KINDS)}, got {kind!r}")
        if workers < 1:
            raise ValueError(f"an op pool needs at least one worker, got {workers}")
        self.workers = workers
        self.kind = kind
        self._lock = threading.Lock()  # one batch at a time: DALI may run two ops at once
        self.closing = False  # set by close(): a batch cut short by it is not a crash
        self._procs: list[_Worker] = []
        self._threads: ThreadPoolExecutor | None = None
        # (op, seed, salt) -> key, number and pickled op, until close().
        self._keys: dict[tuple[int, int, int], tuple[Any, int, bytes]] = {}
        #: Called with every new map of the workers' memory (to page-lock it for the GPU); it
        #: returns what undoes that, called before the map is dropped.
        self.on_map: Callable[[mmap.mmap], Callable[[], None] | None] | None = None

    def _mapped(self, m: _Mapped) -> None:
        if self.on_map is not None and m.map is not None:
            m.undo = self.on_map(m.map)

    def _ensure(self, m: _Mapped, size: int, *, grow: bool) -> None:
        if m.map is None or size > m.size:
            m.release()
            m.ensure(size, grow=grow)
            self._mapped(m)

    # -- running ----------------------------------------------------------------------------------
    def run(self, runner: BatchOpRunner, images: Sequence[Any], infos: Sequence[Any], *,
            copy_in: Callable[[np.ndarray, Any], None] = np.copyto,
            copied: Callable[[], None] | None = None,
            spans: list[tuple[mmap.mmap, int, list[Any]]] | None = None,
            ) -> list[tuple[np.ndarray, ...]]:
        """``runner``'s op on every sample (info rows: manifest index, epoch, pad flag), in the
        batch's order; the first failing sample's error, worded as the serial path words it.

        ``images`` are numpy arrays, or (worker processes only) objects with ``shape``, numpy
        ``dtype`` and ``nbytes`` that ``copy_in(destination_array, image)`` copies into the
        workers' memory (GPU tensors: one device-to-host copy each, no host buffer between);
        ``copied()`` is called before a worker is given the images copied for it (to wait for
        asynchronous copies). The outputs of worker processes are views of their memory, valid
        until this op's next batch; ``spans``, if given, receives per worker the map, the bytes
        its outputs take from the start, and their (offset, shape, dtype) per sample, in batch
        order (to move them elsewhere with one copy per worker)."""
        ids = [(int(info[0]), int(info[1])) for info in infos]
        with self._lock:
            if self.kind == "thread":
                if self._threads is None:
                    self._threads = ThreadPoolExecutor(self.workers, "extsrc-op")
                    _OPEN.add(self)
                futures = [self._threads.submit(runner.run_one, img, *i)
                           for img, i in zip(images, ids, strict=True)]
                wait(futures)  # all of them, so none runs on after a failure is raised
                return [f.result() for f in futures]
            return self._run_processes(runner, images, ids, copy_in, copied, spans)

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

    def _start(self) -> None:
        self.closing = False
        if not self._procs:
            try:
                for rank in range(self.workers):
                    self._procs.append(_Worker(rank))
                    self._mapped(self._procs[-1].inputs)
            except BaseException:
                self.close()
                raise
            _OPEN.add(self)

    def _run_processes(self, runner: BatchOpRunner, images: Sequence[Any],
                       ids: list[tuple[int, int]], copy_in: Callable[[np.ndarray, Any], None],
                       copied: Callable[[], None] | None,
                       spans: list[tuple[mmap.mmap, int, list[Any]]] | None,
                       ) -> list[tuple[np.ndarray, ...]]:
        self._start()
        key, payload = self._key(runner)
        shares = split(len(images), len(self._procs))
        busy: list[tuple[_Worker, int, int]] = []
        at: tuple[_Worker, int, int] = (self._procs[0], 0, 0)  # the worker being talked to
        try:
            for w, (lo, hi) in zip(self._procs, shares, strict=False):
                at = (w, lo, hi)
                if w.register(key, payload):
                    self._mapped(w.outputs[key])
                needed = sum(aligned(img.nbytes) for img in images[lo:hi])
                self._ensure(w.inputs, grown(needed, w.inputs.size), grow=True)
                items, offset = [], 0
                for i, img in enumerate(images[lo:hi], lo):
                    shape = tuple(img.shape)
                    view = np.ndarray(shape, dtype=img.dtype, buffer=w.inputs.map, offset=offset)
                    copy_in(view, img)
                    items.append((offset, shape, img.dtype.str, *ids[i]))
                    offset += aligned(img.nbytes)
                if copied is not None:
                    copied()
                send_message(w.sock, ("run", key, offset, items))
                busy.append((w, lo, hi))
            results: list[tuple[np.ndarray, ...]] = []
            failure: tuple[int, dict[str, Any]] | None = None
            for at in busy:  # every reply is read, so each socket stays in step
                w, lo, _hi = at
                reply, _ = recv_message(w.sock)
                if reply[0] == "error":
                    if failure is None:
                        failure = (lo + reply[1] if reply[1] >= 0 else -1, reply[2])
                    continue
                _, placed, size = reply
                out = w.outputs[key]
                self._ensure(out, size, grow=False)
                for sample in placed:
                    results.append(tuple(
                        np.ndarray(shape, dtype=np.dtype(dt), buffer=out.map, offset=off)
                        for off, shape, dt in sample))
                if spans is not None and out.map is not None:
                    used = max((off + int(np.prod(shape)) * np.dtype(dt).itemsize
                                for sample in placed for off, shape, dt in sample), default=0)
                    spans.append((out.map, used, placed))
        except (EOFError, ConnectionError, BrokenPipeError):
            if self.closing:  # close() from another thread (Ctrl-C, loader.close()): no crash
                raise PipelineError(
                    f"the op pool was closed while op '{runner.op.name}' ran") from None
            err = self._died(runner, at, ids)
            self.close()
            raise err from None
        except BaseException:
            # Replies still owed would be read by the next batch as its own: start afresh.
            self.close()
            raise
        if failure is not None:
            pos, info = failure
            if pos < 0:
                raise OpError(
                    f"op '{runner.op.name}' could not be loaded in an op worker process: "
                    f"{info['type']}: {info['message']}. Workers are fresh interpreters: what "
                    "the op uses must be importable there, or defined in __main__ (sent by "
                    "value); or run the op with op_pool='thread' or op_workers=0",
                    op=runner.op.name, detail=f"Traceback in the op worker:\n{info['traceback']}",
                )
            raise runner.failure(ids[pos][0], info)
        return results

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
        if threads is not None:
            threads.shutdown(wait=True)
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
        for w in pool._procs:
            w.sock.close()
            for m in (w.inputs, *w.outputs.values()):
                m.undo = None  # the page-locking belongs to the parent's CUDA context
                if m.map is not None:
                    try:
                        m.map.close()  # its own duplicate of the descriptor goes too
                    except BufferError:  # arrays still view it: it goes with them
                        pass
                m.close()
        pool._procs, pool._threads = [], None
        pool._lock = threading.Lock()
    _OPEN.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
