"""DALI's error text, read back into fields once.

DALI re-raises a failure in a worker process, in a ``python_function`` or in its decoder as one
exception whose message is a report: DALI's own lines, and for Python code the original
exception's type, message and traceback as text. :func:`read_failure` turns that report into a
:class:`DaliFailure`; :mod:`extsrc.loading.failures` turns a ``DaliFailure`` into an extsrc error.

DALI's worker processes (2.4) print nothing themselves when the source raises: they format the
traceback (``traceback.format_exc()`` in ``nvidia/dali/_multiproc/worker.py``) and send it to
the main process, which puts it in the exception it raises. It is kept once, as the extsrc
error's ``detail``, without the frames of DALI's own worker loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["DaliFailure", "FailureKind", "read_failure", "without_dali_frames"]

FailureKind = Literal["worker", "op", "decode", "other"]

_NOISE = ("Critical error in pipeline:", "Current pipeline object is no longer valid.")
_OP_MARKER = "DLTensorPythonFunction error: "
_TRACEBACK = "Traceback (most recent call last):"
#: The frames of the operators that stop a pipeline where a decoded image's shape is not its
#: header's: extsrc's check of the shapes, and a native op's reshape of the image to them.
_UNLIKE_HEADER = ("in _decoded_as_read", "in _image_as_read")
#: A frame of DALI's own Python code in a formatted traceback.
_DALI_FRAME = re.compile(r'^  File "[^"]*[/\\]nvidia[/\\]dali[/\\][^"]*", line \d+')


@dataclass(frozen=True)
class DaliFailure:
    """One DALI failure, as fields.

    ``kind``: ``"worker"`` (the source raised in a worker process), ``"op"`` (an
    op raised in ``python_function``), ``"decode"`` (the image decoder failed) or ``"other"``.
    ``text``: DALI's informative lines, on one line. ``exc_type`` / ``exc_message``: the Python
    exception's qualified type name and message (``worker`` and ``op``); ``traceback``: the
    worker's traceback (``worker``), without the frames of DALI's worker loop; ``sample``: the
    position in the batch of the sample the decoder failed on, when DALI says. ``pool_lost``:
    DALI says it lost contact with its worker processes (one may have died: wait for its exit
    code). ``uneven_shapes``: the images of a batch have different shapes, so DALI could not
    stack them. ``unlike_header``: a decoded image's shape is not the one read from its header
    (``extsrc.graph.image._decoded_as_read``, or the reshape of a native op's image to it).
    """

    kind: FailureKind
    text: str
    exc_type: str | None = None
    exc_message: str | None = None
    traceback: str | None = None
    sample: int | None = None
    pool_lost: bool = False
    uneven_shapes: bool = False
    unlike_header: bool = False


def dali_text(msg: str) -> str:
    """The informative part of a DALI error message, on one line."""
    body = msg.split("encountered:", 1)[-1]
    lines = [ln.strip() for ln in body.splitlines() if ln.strip() and ln.strip() not in _NOISE]
    text = " | ".join(lines)
    return text if len(text) <= 600 else text[:597] + "..."


def read_failure(msg: str) -> DaliFailure:
    """Read DALI's error message ``msg`` into a :class:`DaliFailure`."""
    text, low = dali_text(msg), msg.lower()
    flags = {"pool_lost": "receiving interrupted" in low or "sending tasks" in low,
             "uneven_shapes": "uniform shape" in msg,
             "unlike_header": any(m in msg for m in _UNLIKE_HEADER)}
    start = msg.find(_TRACEBACK)
    k = msg.find(_OP_MARKER)
    # An op's error may carry its own traceback (and any path may contain "worker"): the op
    # marker before the traceback decides.
    if start >= 0 and "worker" in msg[:start].lower() and not 0 <= k < start:
        tb = without_dali_frames(msg[start:].rstrip())
        lines = tb.splitlines()
        last_frame = max((k for k, ln in enumerate(lines) if ln.startswith("  ")), default=0)
        exc_type, message = _split_exception("\n".join(lines[last_frame + 1:]).strip())
        return DaliFailure("worker", text, exc_type, message, traceback=tb, **flags)
    if k >= 0:
        body = msg[k + len(_OP_MARKER):]
        body = body.rpartition("\n\nAt:\n")[0] or body
        for noise in _NOISE:
            body = body.replace(noise, "")
        exc_type, message = _split_exception(body.strip())
        return DaliFailure("op", text, exc_type, message, **flags)
    if "decoders.image" in msg or "decode" in low or "nvimagecodec" in low:
        m = re.search(r"Failed to decode sample #(\d+)", msg)
        return DaliFailure("decode", text, sample=int(m.group(1)) if m else None,
                           **flags)
    return DaliFailure("other", text, **flags)


def without_dali_frames(tb: str) -> str:
    """A formatted traceback without the frames of DALI's own Python code (a frame is its
    ``  File ...`` line and the indented lines under it); unchanged when every frame is DALI's."""
    out: list[str] = []
    dropping = False
    kept_frame = False
    for ln in tb.splitlines():
        if ln.startswith("  File "):
            dropping = _DALI_FRAME.match(ln) is not None
            kept_frame = kept_frame or not dropping
        elif not ln.startswith("    "):
            dropping = False
        if not dropping:
            out.append(ln)
    return "\n".join(out) if kept_frame else tb


def _split_exception(text: str) -> tuple[str, str]:
    """``"pkg.SomeError: message"`` -> ``("pkg.SomeError", "message")``."""
    name, sep, message = text.partition(": ")
    return (name, message) if sep else (text, "")
