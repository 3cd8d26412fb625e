"""The process side of the op pool: one worker process (:mod:`extsrc.ops_runtime.worker`, a
fresh interpreter started with fork and exec), its socket and the anonymous shared memory it
maps (memfd: no name in ``/dev/shm``, gone when the last process holding it ends)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from extsrc._util.forks import STARTING
from extsrc.ops_runtime.worker import MappedFile, send_message

__all__ = ["Mapped", "WorkerProcess", "memory_file", "worker_env"]


def memory_file(name: str) -> int:
    """A file descriptor of anonymous shared memory (memfd; an unlinked temporary file where
    memfd does not exist)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name, os.MFD_CLOEXEC)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix=name, dir=shm)
    os.unlink(path)
    return fd


class Mapped(MappedFile):
    """A new memory file and this process's map of it, with what undoes the pool's on_map."""

    def __init__(self, name: str) -> None:
        super().__init__(memory_file(name))
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


def worker_env() -> dict[str, str]:
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


class WorkerProcess:
    """One worker process, its socket and its shared memory."""

    def __init__(self, rank: int, inputs: Mapped) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with STARTING:  # no reader forked meanwhile may keep Popen's exec pipe open
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", "from extsrc.ops_runtime.worker import main; main()",
                     str(child.fileno()), str(os.getpid())],
                    pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=worker_env(),
                )
        finally:
            child.close()
        self.rank = rank
        self.sock = parent
        self.outputs: dict[int, Mapped] = {}
        self.ops: set[int] = set()
        self.loading = 0  # ("ready", key) replies this worker still owes (ops not yet loaded)
        send_message(self.sock, ("in", inputs.size), (inputs.fd,))

    def register(self, key: int, payload: bytes) -> bool:
        """Send op ``key`` and its output memory (True), unless this worker has them (False)."""
        if key in self.ops:
            return False
        out = Mapped(f"extsrc-op-out-{self.rank}-{key}")
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
