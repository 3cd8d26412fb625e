"""Turn a failure inside DALI into an extsrc error that names the op, the file and the line first.

DALI's text is read into fields by :mod:`extsrc._dali.messages`; this module decides what the
user is told: which batch was in flight (its manifest lines), which worker died and why, which
file the image decoder rejected (found again by decoding the batch with Pillow), and how the
error is shown (:func:`shown_alone`: without DALI's traceback, unless :func:`debug` is on).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

import numpy as np

from extsrc import errors as _errors
from extsrc._dali.messages import DaliFailure, read_failure
from extsrc._util.textsafe import shown
from extsrc.errors import (
    DEBUG_ENV,
    RAISED,
    ExtsrcError,
    OpError,
    OpOutputError,
    PipelineError,
    WorkerDiedError,
    debug,
)
from extsrc.sources.imagecheck import Finding, check_file
from extsrc.sources.images import ShardedSource, bad_image_error
from extsrc.sources.shards import ShardManifest
from extsrc.sources.where import sample_where

__all__ = ["DEBUG_ENV", "InFlight", "debug", "explain", "shown_alone", "worker_died"]

@dataclass(frozen=True)
class InFlight:
    """The batch a failure happened on: batch ``batch`` of epoch ``epoch`` of ``source``."""

    source: ShardedSource
    epoch: int
    batch: int

    def indices(self, b: int) -> list[int]:
        return [int(i) for i in self.source.plan(self.epoch).batch(b)[0]]

    def where(self) -> str:
        """``epoch E batch B (manifest lines ...)``, or ``epoch E`` past its last batch."""
        if self.batch >= len(self.source):
            return f"epoch {self.epoch}"
        idx = self.indices(self.batch)
        m = self.source.manifest
        lines = ", ".join(str(m.lines[i]) for i in idx[:8]) + (", ..." if len(idx) > 8 else "")
        where = sample_where(m.source, lines, plural=True)
        return f"epoch {self.epoch} batch {self.batch} ({where})"


def shown_alone(err: BaseException, dali: BaseException) -> BaseException:
    """``err``, the error to raise in place of DALI's exception ``dali``, made ready to be raised
    so that it reads on one screen.

    ``dali`` stays on it as ``dali_error`` (unless ``err`` is ``dali``: an extsrc error raised in
    this process by the source). The frames ``err`` was raised through (DALI's pipeline, the
    iterator's helper thread, the op pool) are dropped, and ``dali`` is not chained: the
    traceback shows where the caller's loop asked for the batch, the message what failed and
    where. Its own cause stays only when it says more than the message: an op's exception on
    the gpu path, whose traceback is nowhere else (the numpy path's is in ``detail``).
    With :func:`debug` on, ``err`` keeps every frame and is chained to ``dali``.
    """
    if err is not dali:
        try:
            err.dali_error = dali  # type: ignore[attr-defined]
        except AttributeError:  # an exception type without a __dict__
            pass
    if debug():
        if err is not dali:
            err.__cause__ = dali
        return err
    cause = err.__cause__
    keep = None if cause is dali or getattr(err, "detail", None) else cause
    err = err.with_traceback(None)
    err.__cause__ = keep
    err.__suppress_context__ = True  # DALI's exception, being handled where err is raised
    return err


def worker_died(dead: list[tuple[int, int]], at: InFlight) -> WorkerDiedError:
    """The error for DALI worker processes that exited: (pid, exit code) each."""
    # DALI stops the other workers with SIGTERM once one dies: report the first cause.
    culprits = [(p, c) for p, c in dead if c != -signal.SIGTERM] or dead
    parts = []
    for pid, code in culprits:
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            parts.append(f"pid {pid} was killed by {name}")
        else:
            parts.append(f"pid {pid} exited with code {code}")
    oom = any(c == -signal.SIGKILL for _, c in culprits)
    hint = (
        " SIGKILL usually comes from the out-of-memory killer (see `dmesg`): lower "
        "num_workers, prefetch_queue_depth or batch_size." if oom else
        " A crash in native code (a decoder or a C extension in an op) can cause this."
    )
    return WorkerDiedError(
        f"a DALI worker process died while the loader was producing {at.where()}: "
        f"{'; '.join(parts)}.{hint} All worker processes were stopped. Iterating again "
        "rebuilds the pipeline and resumes at this batch; a new Loader resumes from "
        "loader.state_dict()"
    )


def explain(
    e: Exception, at: InFlight, *, run: Any, resize: Any, lookahead: int, max_pixels: int | None
) -> Exception:
    """The extsrc error for DALI's exception ``e`` (``e`` itself when it already is one).

    ``run``: the :class:`~extsrc._dali.run.PipelineRun` (for its workers' exit codes);
    ``lookahead``: batches after the failed one that DALI may have been working on.
    """
    f = read_failure(str(e))
    if f.uneven_shapes and resize is None:
        return ValueError(
            "images in a batch have different sizes, so they cannot be stacked into one "
            "tensor; pass resize=(height, width) (or an int) to Loader"
        )
    if isinstance(e, ExtsrcError):  # raised in this process (num_workers=0): already clear
        return e
    # When DALI lost its worker pool, wait briefly for the exit codes.
    dead = run.dead_workers(2.0 if f.pool_lost else 0.0)
    if dead:
        return worker_died(dead, at)
    if f.unlike_header:
        return _unlike_header(f, at)
    if f.kind == "worker":
        return _worker_exception(f, at, lookahead)
    if f.kind == "op":
        return _header_first(_op_exception(f), at)
    if f.kind == "decode":
        return _decode_failure(f, at, lookahead, max_pixels)
    return PipelineError(f"DALI failed while producing {at.where()}: {shown(f.text)}")


def _unlike_header(f: DaliFailure, at: InFlight) -> Exception:
    """A decoded image whose shape is not its header's: the file, found by decoding the batch
    again on the CPU (:mod:`extsrc.validation.header_sizes`), else the batch."""
    found = _unlike_header_file(at, at.indices(at.batch) if at.batch < len(at.source) else [])
    if found is not None:
        return found
    return PipelineError(
        f"an image of {at.where()} decoded to another shape than its header gives, which a "
        "native op reads as its size; decoding those files again on the CPU did not find it "
        "(the GPU's decoder may differ). Re-encode the batch's images as plain JPEG/PNG, or "
        f"pass op_runtime=OpRuntime(op_path='numpy'). DALI said: {shown(f.text)}")


def _header_first(err: Exception, at: InFlight) -> Exception:
    """``err``, a native op's error naming a sample, unless that sample's file decodes to
    another shape than its header gives: the op's check read the header's sizes (so that it
    need not wait for the decoder) and may have failed on them before the pipeline compared
    them with the decoded image's; then that is the error."""
    line = getattr(err, "line", None)
    if not isinstance(err, OpError) or line is None or "[native path]" not in str(err) or \
            at.batch >= len(at.source):
        return err
    m = at.source.manifest
    named = [i for i in at.indices(at.batch) if m.lines[i] == line]
    return _unlike_header_file(at, named) or err


def _unlike_header_file(at: InFlight, indices: list[int]) -> Exception | None:
    """The BadImageError (reason ``header_mismatch``) of the first of the manifest samples
    ``indices`` whose file decodes on the CPU to another shape than its header gives, else
    None."""
    from extsrc.validation.header_sizes import sizes_unlike_headers

    blobs = []
    for i in indices:
        try:
            blobs.append(at.source.read(i))
        except Exception:  # unreadable now: not the file looked for
            blobs.append(np.zeros(0, np.uint8))
    try:
        found = sizes_unlike_headers(blobs)
    except Exception:  # the look failed; the caller reports what it has
        return None
    m = at.source.manifest
    for k, decoded, header in found:
        i = indices[k]
        finding = Finding("header_mismatch", (
            f"DALI decodes it to {'x'.join(map(str, decoded))} but reads "
            f"{'x'.join(map(str, header))} from its header; a native op reads an image's size "
            "from its header, so the loader stops rather than misread the image"))
        return bad_image_error(finding, source=m.source, line=m.lines[i], path=m.paths[i])
    return None


def _worker_exception(f: DaliFailure, at: InFlight, lookahead: int = 0) -> Exception:
    """The source's exception in a worker process, as its extsrc type: the worker's message
    first, its traceback as ``detail``. Reading the batch again in this process gives the same
    error as an object, with its fields (line, path, reason); the ``lookahead`` batches after it
    too, since a worker may have failed on a batch it was reading ahead."""
    name, text = f.exc_type or "", f.exc_message or ""
    detail = f"Traceback in the DALI worker process:\n{f.traceback}"
    for b in range(at.batch, min(len(at.source), at.batch + 1 + lookahead)):
        for i in at.indices(b):
            try:
                at.source.read(i)
            except ExtsrcError as err:
                if err.message == text:
                    err.detail = detail
                    return err
                break
    cls = getattr(_errors, name.rsplit(".", 1)[-1], None) if name.startswith("extsrc.") else None
    if not (isinstance(cls, type) and issubclass(cls, ExtsrcError)):
        cls, text = PipelineError, f"the data source raised {name} in a DALI worker: {text}"
    return cls(text, detail=detail)


def _op_exception(f: DaliFailure) -> Exception:
    """An op's exception in ``python_function``: OpError, or OpOutputError for a broken
    output contract, its message (with the op's traceback) first."""
    name, text = f.exc_type or "", f.exc_message or ""
    for err in reversed(RAISED):  # the error object itself, raised in this process
        if text.startswith(err.message):
            return err
    if name.endswith("OpContractError"):
        return OpOutputError(text)
    if name.endswith("OpError"):
        return OpError(text)
    return OpError(f"an op raised {name}: {text}")


def _decode_failure(
    f: DaliFailure, at: InFlight, lookahead: int, max_pixels: int | None
) -> Exception:
    found = _find_culprit(at, f.sample, lookahead, max_pixels)
    if found is None:
        found = _named_by_dali(f, at)
    if found is None:
        return PipelineError(
            f"DALI's image decoder failed on {at.where()}, but Pillow decodes every file of that "
            f"batch; DALI said: {shown(f.text)}. Check these files (for example with "
            "extsrc.validate(manifest)) or re-encode them as plain JPEG/PNG"
        )
    i, finding = found
    m = at.source.manifest
    return bad_image_error(
        finding, source=m.source, line=m.lines[i], path=m.paths[i],
        prefix="DALI could not decode this file: ",
    )


def _named_by_dali(f: DaliFailure, at: InFlight) -> tuple[int, Finding] | None:
    """The sample DALI's decoder named (``Failed to decode sample #k``: position ``k`` of the
    failed batch), when no check of ours finds anything wrong with the batch's files. DALI
    reports a failure with the iteration it happened in, so ``k`` indexes ``at``'s batch."""
    if f.sample is None or at.batch >= len(at.source):
        return None
    idx = at.indices(at.batch)
    if not 0 <= f.sample < len(idx):
        return None
    return idx[f.sample], Finding(
        "corrupt",
        f"the decoder refused it (sample #{f.sample} of the batch; DALI said: "
        f"{shown(f.text)}), although Pillow decodes it",
    )


def _find_culprit(
    at: InFlight, hint: int | None, lookahead: int, max_pixels: int | None
) -> tuple[int, Any] | None:
    """Decode the samples of the failed batch (and the prefetched ones) with Pillow."""
    stop = min(len(at.source), at.batch + lookahead)
    seen: set[int] = set()
    for b in range(at.batch, stop):
        idx = at.indices(b)
        if b == at.batch and hint is not None and hint < len(idx):
            idx.insert(0, idx[hint])
        for i in idx:
            if i in seen:
                continue
            seen.add(i)
            m = at.source.manifest
            finding = (m.check(i, max_pixels=max_pixels) if isinstance(m, ShardManifest)
                       else check_file(m.paths[i], decode=True, max_pixels=max_pixels,
                                       storage=m.storage))
            if finding is not None:
                return i, finding
    return None
