"""Exception types shared across extsrc.

Every error extsrc raises on purpose derives from :class:`ExtsrcError`, so callers can catch
the whole family at once, while the more specific classes also derive from the matching
built-in (``ValueError``, ``FileNotFoundError``) so generic handlers keep working.

Errors carry fields, set at construction, so that callers (the command line, a training script)
read them instead of parsing the message: ``source`` (the manifest file), ``line`` (1-based
manifest line; for a folder dataset, whose ``source`` ends with ``/``, the 1-based sample
number), ``path`` (the file), ``reason`` (a code of :data:`extsrc.sources.imagecheck.REASONS`),
``op`` (the op's name) and ``detail`` (a traceback from a DALI worker process, shown after the
message). Each is ``None`` where it does not apply.

An error the loader raises in place of DALI's exception keeps that exception as ``dali_error``
(``None`` when the error was raised in this process) and is shown on its own: no DALI traceback
before it, no frames of DALI or of the loader's helper thread, just the error and the few lines
of the caller's code that led to it. Set the environment variable ``EXTSRC_DEBUG=1`` to raise
it chained to DALI's exception (``__cause__``) with every frame, as DALI raised it.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence

#: The environment variable that makes the loader raise its errors chained to DALI's
#: exception, with every frame, and the command line show tracebacks (any value but empty or
#: ``0``).
DEBUG_ENV = "EXTSRC_DEBUG"


def debug() -> bool:
    """Whether :data:`DEBUG_ENV` asks for DALI's exception and every frame."""
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


class ExtsrcError(Exception):
    """Base class of every error raised deliberately by extsrc."""

    def __init__(
        self,
        message: str = "",
        *,
        source: str | None = None,
        line: int | None = None,
        path: str | None = None,
        reason: str | None = None,
        op: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line
        self.path = path
        self.reason = reason
        self.op = op
        self.detail = detail
        #: The exception DALI raised for this failure, when the loader raised this error in its
        #: place (see the module's docstring); ``None`` otherwise.
        self.dali_error: BaseException | None = None

    def __str__(self) -> str:
        return self.message if not self.detail else f"{self.message}\n\n{self.detail}"


#: The last errors the op runners and the op pool raised in this process. DALI re-raises an
#: op's error as text; the loader finds the error object here again, with its fields (op, line,
#: path).
RAISED: deque[ExtsrcError] = deque(maxlen=8)


class ManifestError(ExtsrcError, ValueError):
    """A manifest (labelled file list) is malformed.

    Messages name the manifest file and the 1-based line, what was expected, what was found,
    and how to fix it.
    """


class ManifestFileNotFoundError(ManifestError, FileNotFoundError):
    """The manifest itself, or a file it lists (with ``check_files=True``), does not exist."""


class SampleReadError(ExtsrcError, OSError):
    """A file listed in the manifest could not be read (missing, a directory, empty, unreadable).

    Messages name the manifest line and the file path.
    """


class OutputOverwritesInputError(ExtsrcError, ValueError):
    """An output file would be written over an input (``path``: the output; ``source``: the
    input it is, e.g. ``--write-clean`` naming the manifest being cleaned); nothing is written.
    """


class OpError(ExtsrcError, RuntimeError):
    """A registered op raised while processing a sample; the message names the op and the line."""


class OpTimeoutError(OpError):
    """A numpy-path op ran past the loader's ``op_timeout`` (seconds per sample). ``op`` names
    the op, ``timeout`` is the limit, ``samples`` the ``(line, path)`` of every sample in flight
    when it passed (``source``, ``line`` and ``path``: the first of them)."""

    def __init__(
        self,
        message: str = "",
        *,
        timeout: float | None = None,
        samples: Sequence[tuple[int, str]] = (),
        **fields: object,
    ) -> None:
        super().__init__(message, **fields)  # type: ignore[arg-type]
        self.timeout = timeout
        self.samples = tuple(samples)


# -- reliability: bad files, paths, workers, resume ------------------------------------------------
# (OpContractError lives in augment_ops, which imports nothing from extsrc: no import cycle.)
from augment_ops.registry import OpContractError as _OpContractError  # noqa: E402


class BadImageError(SampleReadError):
    """A listed file exists but is not an image DALI can decode: not an image, an unsupported
    format, truncated, corrupt, or declaring more pixels than ``max_pixels``.

    The message names the manifest file and line, the path, the reason and how to fix it;
    :func:`extsrc.validate` finds every such file up front.
    """


class BadVideoError(SampleReadError):
    """A listed file exists but is not a video the loader can read: not a video container, cut
    short, without a video track or frames, in a codec DALI cannot decode on the loader's device
    (``codec`` names it), or shorter than one clip (``short_videos="error"``).

    The message names the manifest file and line, the path, the reason and how to fix it.
    """

    def __init__(self, message: str = "", *, codec: str | None = None, **fields: object) -> None:
        super().__init__(message, **fields)  # type: ignore[arg-type]
        self.codec = codec


class PathOutsideRootError(ManifestError):
    """A manifest path resolves outside the ``root`` given to ``read_manifest`` (``..``, an
    absolute path elsewhere, or a symlink pointing out). Opt out with ``allow_outside_root=True``.
    """


class OpOutputError(OpError, _OpContractError):
    """A registered op returned the wrong number of outputs, or outputs of the wrong type, dtype
    or rank. Also an ``augment_ops.OpContractError``, so handlers of either catch it."""


class WorkerDiedError(ExtsrcError, RuntimeError):
    """A DALI worker process died (killed by a signal, e.g. the out-of-memory killer, or crashed
    in native code). The message names the process, the signal and the batch in flight."""


class WorkerStartError(WorkerDiedError):
    """DALI's worker processes did not all report ready within ``timeout`` seconds of
    ``pipe.build()``; they were stopped. ``pids`` lists them. A :class:`WorkerDiedError` too:
    handlers of failed workers catch it, and iterating again builds the pipeline again."""

    def __init__(
        self, message: str | None = None, *, pids: Sequence[int] = (), timeout: float = 0.0
    ) -> None:
        self.pids, self.timeout = tuple(pids), timeout
        if message is None:
            listed = ", ".join(str(p) for p in self.pids) or "none found"
            message = (
                f"DALI's worker processes (pids: {listed}) did not report ready within "
                f"{timeout:g} s of building the pipeline, so they were stopped. A worker blocked "
                "at start-up (a fork handler or an import of the main module that waits on "
                "something) causes this; a machine too loaded to start them in time too: raise "
                "extsrc._dali.run.BUILD_TIMEOUT, or lower num_workers. Iterating again builds "
                "the pipeline again"
            )
        super().__init__(message)


class PipelineError(ExtsrcError, RuntimeError):
    """DALI failed for a reason that could not be pinned on one sample; the message names the
    batch and its manifest lines, and DALI's own exception is kept as ``dali_error``."""


class DaliVersionError(ExtsrcError, RuntimeError):
    """The installed DALI is not a version whose internals extsrc knows (``found``; ``known``
    lists the major.minor versions it was checked against)."""

    def __init__(
        self, message: str | None = None, *, found: str = "?", known: Sequence[str] = ()
    ) -> None:
        self.found, self.known = found, tuple(known)
        if message is None:
            versions = ", ".join(f"{v}.x" for v in self.known) or "none"
            message = (
                f"DALI {found} is not a version extsrc knows (known: {versions}): the loader's "
                "dead-worker watchdog reads private parts of DALI's worker pool, which may have "
                "moved. Install a known DALI version, or pass watchdog=False to Loader (a "
                "killed worker process can then hang the loop, as it does in plain DALI)"
            )
        super().__init__(message)


class StateMismatchError(ExtsrcError, ValueError):
    """``Loader.load_state_dict`` got a state saved under another configuration (batch size,
    shards, seed, manifest content, ops...), or a malformed state; the message lists what differs.
    """


class MainGuardError(ExtsrcError, RuntimeError):
    """A Loader is built by a script's top-level code while DALI starts its reader processes
    with ``spawn``, which runs that code again in each of them: the script needs an
    ``if __name__ == "__main__":`` guard (see :mod:`extsrc._util.mainguard`)."""
