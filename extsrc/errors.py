"""Exception types shared across extsrc.

Every error extsrc raises on purpose derives from :class:`ExtsrcError`, so callers can catch
the whole family at once, while the more specific classes also derive from the matching
built-in (``ValueError``, ``FileNotFoundError``) so generic handlers keep working.
"""

from __future__ import annotations


class ExtsrcError(Exception):
    """Base class of every error raised deliberately by extsrc."""


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


class OpError(ExtsrcError, RuntimeError):
    """A registered op raised while processing a sample; the message names the op and the line."""


# -- reliability: bad files, paths, workers, resume ------------------------------------------------
# (OpContractError lives in augment_ops, which imports nothing from extsrc: no import cycle.)
from augment_ops.registry import OpContractError as _OpContractError  # noqa: E402


class BadImageError(SampleReadError):
    """A listed file exists but is not an image DALI can decode: not an image, an unsupported
    format, truncated, corrupt, or declaring more pixels than ``max_pixels``.

    The message names the manifest file and line, the path, the reason and how to fix it;
    :func:`extsrc.validate` finds every such file up front.
    """


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


class PipelineError(ExtsrcError, RuntimeError):
    """DALI failed for a reason that could not be pinned on one sample; the message names the
    batch and its manifest lines, and the original DALI error is chained."""


class StateMismatchError(ExtsrcError, ValueError):
    """``Loader.load_state_dict`` got a state saved under another configuration (batch size,
    shards, seed, manifest content, ops...), or a malformed state; the message lists what differs.
    """


class MainGuardError(ExtsrcError, RuntimeError):
    """A Loader is built by a script's top-level code while DALI starts its reader processes
    with ``spawn``, which runs that code again in each of them: the script needs an
    ``if __name__ == "__main__":`` guard (see :mod:`extsrc.mainguard`)."""
