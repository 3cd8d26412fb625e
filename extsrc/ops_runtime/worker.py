"""One worker process of :class:`extsrc.ops_runtime.pool.OpPool`: runs the numpy path's ops on
samples.

Started as ``python -c "from extsrc.ops_runtime.worker import main; main()" FD PARENT_PID`` (fork
and exec: a fresh interpreter that imports numpy and the ops it is sent, never the user's
``__main__``). ``FD`` is its end of a
Unix socket pair to the parent; everything else arrives on it:

- ``("op", key, payload)``: an op, its seed and generator salt, pickled by value where needed
  (cloudpickle), so ops defined in a notebook cell or a script's ``__main__`` work; answered
  with ``("ready", key)`` once it is loaded (or failed to load), so the parent's time limit
  counts the op's time, not the interpreter's start;
- ``("in", size)`` / ``("out", key, size)`` followed by a file descriptor: the shared memory the
  parent copies inputs into, and the memory this worker writes one op's outputs into;
- ``("run", key, in_size, items, start)``: apply op ``key`` to the samples ``items`` (offset,
  shape, dtype, manifest index, epoch) in the input memory, writing the outputs one after
  another from byte ``start`` of the output memory; the reply lists each output's offset,
  shape and dtype there, the memory's size and where the outputs end, or the first sample's
  failure (position -1: the op itself could not be unpickled here).

The import path is the parent's, passed as ``PYTHONPATH``.

The process ignores SIGINT (Ctrl-C in a terminal reaches the whole process group; the parent
decides what stops) and exits when the socket closes or its parent dies.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import socket
import struct
import sys
import traceback
from typing import Any

import numpy as np

__all__ = [
    "ALIGN", "MappedFile", "aligned", "apply_sample", "failure_info", "grown", "main",
    "recv_message", "send_message",
]

#: Byte alignment of every array placed in shared memory (cache lines, and SIMD loads).
ALIGN = 64
_HEADER = struct.Struct("<QI")  # payload bytes, file descriptors attached


def send_message(sock: socket.socket, obj: Any, fds: tuple[int, ...] = ()) -> None:
    """One framed message: a header (carrying ``fds`` as SCM_RIGHTS) then the pickled object."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    header = _HEADER.pack(len(payload), len(fds))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int, into: bytearray) -> None:
    view = memoryview(into)
    got = len(into) - n
    while got < len(into):
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError("the other end of the op worker's socket closed")
        got += k


def recv_message(sock: socket.socket) -> tuple[Any, list[int]]:
    """The next message of :func:`send_message` and the file descriptors it carried."""
    data, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, 8)
    if not data:
        raise EOFError("the other end of the op worker's socket closed")
    header = bytearray(data) + bytearray(_HEADER.size - len(data))
    if len(data) < _HEADER.size:
        _recv_exact(sock, _HEADER.size - len(data), header)
    size, _nfds = _HEADER.unpack(header)
    payload = bytearray(size)
    _recv_exact(sock, size, payload)
    return pickle.loads(payload), fds


def failure_info(e: BaseException) -> dict[str, Any]:
    """What the parent needs to word an op's failure as the serial numpy path does."""
    from augment_ops.registry import OpContractError

    return {
        "contract": isinstance(e, OpContractError),
        "type": type(e).__name__,
        "message": str(e),
        "readonly": isinstance(e, ValueError) and "read-only" in str(e),
        "traceback": "".join(traceback.format_exception(type(e), e, _from_op(e))).rstrip(),
    }


#: Files that call an op: the frames from them on, before the op's own, say nothing to its
#: author (its error names the op and the sample).
_CALLERS_DIR = os.path.dirname(os.path.abspath(__file__))


def _from_op(e: BaseException) -> Any:
    """``e``'s traceback from the first frame outside extsrc and ``Op.apply`` on (the op's own
    code); the last frame at least."""
    from augment_ops import registry

    calls = os.path.abspath(registry.__file__)
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        name = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if os.path.dirname(name) != _CALLERS_DIR and name != calls:
            break
        tb = tb.tb_next
    return tb


def apply_sample(op: Any, img: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
    """The numpy path's call of one op on one sample: a read-only view in (an op writing into its
    input would change the other outputs' input), the checked outputs out."""
    img = img.view()
    img.flags.writeable = False
    return op.apply(img, rng)


class MappedFile:
    """A shared memory file (a file descriptor) and this process's map of it at its current
    size, mapped again when it has grown. Both the pool and its workers hold one per memory."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.map: mmap.mmap | None = None
        self.size = 0

    def ensure(self, size: int, *, grow: bool = True) -> None:
        """Map at least ``size`` bytes, first growing the file to them if ``grow``."""
        size = max(size, 1)
        if grow and size > os.fstat(self.fd).st_size:
            os.ftruncate(self.fd, size)
        if self.map is None or size > self.size:
            # The old map stays valid for arrays still viewing it; it is freed with them.
            self.size = os.fstat(self.fd).st_size
            self.map = mmap.mmap(self.fd, self.size)


def grown(needed: int, size: int) -> int:
    """A new size for memory of ``size`` bytes that must hold ``needed``: at least double, so
    a batch of growing images remaps (and the parent re-pins) a few times, not per sample."""
    return needed if needed <= size else max(needed, 2 * size)


def aligned(n: int) -> int:
    """``n`` bytes rounded up to :data:`ALIGN`."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _run(op: Any, seed: int, salt: int, inputs: MappedFile, out: MappedFile,
         items: list[tuple[int, tuple[int, ...], str, int, int]], start: int) -> tuple[Any, ...]:
    from extsrc.ops_runtime.seeding import sample_rng

    results: list[list[tuple[int, tuple[int, ...], str]]] = []
    offset = start
    for pos, (in_off, shape, dtype, index, epoch) in enumerate(items):
        img = np.ndarray(shape, dtype=np.dtype(dtype), buffer=inputs.map, offset=in_off)
        try:
            rng = sample_rng(seed, epoch, index, salt) if op.random else None
            outs = apply_sample(op, img, rng)
        except Exception as e:
            return ("error", pos, failure_info(e))
        try:  # a failure here is the worker's, not the op's, but it ends the batch the same
            placed = []
            for o in outs:
                n = aligned(o.nbytes)
                out.ensure(grown(offset + n, out.size))
                view = np.ndarray(o.shape, dtype=o.dtype, buffer=out.map, offset=offset)
                np.copyto(view, o)
                placed.append((offset, o.shape, o.dtype.str))
                offset += n
        except Exception as e:
            return ("error", pos, failure_info(e))
        results.append(placed)
    return ("ok", results, out.size, offset)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    fd, parent = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from extsrc._util.orphan import exit_with_parent

    exit_with_parent(owner_pid=parent)
    sock = socket.socket(fileno=fd)
    ops: dict[int, tuple[Any, int, int] | Exception] = {}
    inputs: MappedFile | None = None
    outputs: dict[int, MappedFile] = {}
    while True:
        try:
            msg, fds = recv_message(sock)
        except (EOFError, ConnectionError):
            return
        kind = msg[0]
        if kind == "op":
            try:
                ops[msg[1]] = pickle.loads(msg[2])
            except Exception as e:  # reported when the op is first run
                ops[msg[1]] = e
            try:  # the parent's clock for the op's time limit starts now, not at our start
                send_message(sock, ("ready", msg[1]))
            except OSError:
                return
        elif kind == "in":
            inputs = MappedFile(fds[0])
            inputs.ensure(msg[1])
        elif kind == "out":
            outputs[msg[1]] = MappedFile(fds[0])
            outputs[msg[1]].ensure(msg[2])
        elif kind == "run":
            _, key, in_size, items, start = msg
            assert inputs is not None
            inputs.ensure(in_size)
            loaded = ops[key]
            if isinstance(loaded, Exception):
                reply: tuple[Any, ...] = ("error", -1, failure_info(loaded))
            else:
                op, seed, salt = loaded
                reply = _run(op, seed, salt, inputs, outputs[key], items, start)
            try:
                send_message(sock, reply)
            except OSError:  # the parent closed the pool while this batch ran
                return
        elif kind == "exit":
            return


if __name__ == "__main__":
    main()
