"""``ShardedSource``: the callable that DALI's ``external_source`` calls for every batch.

It reads raw file bytes (no decoding: DALI decodes) for the samples that
:mod:`extsrc.sources.sharding`
assigns to this shard, and returns them with their labels and their identity (manifest index,
epoch, pad flag), so every output can be traced back to its manifest line. It is a small picklable
class rather than a closure so that DALI can ship it to worker processes (``parallel=True``).
:class:`ReaderValues` adds per-sample values computed from that identity (the draws of traced
random ops), so the reader processes compute them instead of the pipeline.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from extsrc._dali.handoff import outgoing
from extsrc._util.argcheck import check_int
from extsrc._util.orphan import exit_with_parent
from extsrc._util.textsafe import shown
from extsrc.errors import BadImageError, SampleReadError
from extsrc.sources.fileread import (
    DEFAULT_MAX_FILE_BYTES,
    FileReadProblem,
    check_max_file_bytes,
    read_regular,
    sample_read_error,
)
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS, Finding, check_bytes, fix_for
from extsrc.sources.manifest import Manifest
from extsrc.sources.sharding import (
    LastBatch,
    ShardPlan,
    check_args,
    num_batches_per_shard,
    shard_plan,
)
from extsrc.sources.shards import ShardManifest
from extsrc.sources.storage import is_url
from extsrc.sources.where import reworded_fix

__all__ = ["INFO_COLUMNS", "SOURCE_OUTPUTS", "STAND_IN", "ReaderValues", "ShardedSource",
           "bad_image_error"]

#: What one call returns, in order: encoded bytes (one array per sample), labels (one int64
#: array for the batch) and info (one int64 array for the batch, columns ``INFO_COLUMNS``).
SOURCE_OUTPUTS: tuple[str, ...] = ("encoded", "label", "info")
#: Columns of the ``info`` output: manifest index, epoch, 1 for a pad repeat else 0.
INFO_COLUMNS: tuple[str, ...] = ("index", "epoch", "is_pad")
#: ``is_pad`` of a row that stands in for a sample that could not be read during the epoch
#: (``skip_unreadable``): the row holds another sample of the batch, ``index`` names the failed
#: one. ``1`` marks a pad repeat.
STAND_IN = 2


# Appended to every bad-file message: how to find them all at once instead of one per run.
UP_FRONT_HINT = (
    " To find every bad file up front run extsrc.validate(manifest) and train on "
    "report.clean_manifest(), or pass bad_files=extsrc.BadFiles(on_error='skip') to Loader"
)


def bad_image_error(
    finding: Finding, *, source: str, line: int, path: str, prefix: str = ""
) -> BadImageError:
    """The error for a file that imagecheck found bad, worded by :meth:`Finding.describe`."""
    return BadImageError(
        f"{finding.describe(source=source, line=line, path=path, prefix=prefix)}.{UP_FRONT_HINT}",
        source=source, line=line, path=path, reason=finding.reason,
    )


def _checked_indices(
    indices: Sequence[int] | np.ndarray | None, num_samples: int
) -> np.ndarray | None:
    """``indices`` as an int64 array, refused unless every one is a manifest index."""
    if indices is None:
        return None
    indices = np.asarray(indices, dtype=np.int64)
    if indices.ndim != 1 or (
        len(indices) and (indices.min() < 0 or indices.max() >= num_samples)
    ):
        raise ValueError(
            f"indices must be manifest indices in [0, {num_samples}), one per sample to read"
        )
    return indices


class ShardedSource:
    """Raw-byte batches of one shard, for ``fn.external_source(batch=True, batch_info=True)``.

    Given DALI's batch info (``iteration``, ``epoch_idx``) it returns three outputs: a list with
    each file's bytes (``np.uint8``, 1-D), the batch's labels as one ``np.int64`` array of shape
    ``(B,)`` or ``(B, k)``, and ``info``, one ``np.int64`` array of shape ``(B, 3)`` holding each
    sample's manifest index, epoch and pad flag (``INFO_COLUMNS``). Per-batch arrays rather than
    per-sample scalars because each per-sample output costs DALI's worker processes a
    serialisation per sample: five per-sample outputs ran at about a third of the speed of one
    (measured, see ``benchmarks/README.md``). It raises ``StopIteration`` after the shard's last
    batch of an epoch. ``len(source)`` is the number of batches per epoch, the same on every shard.

    ``start_epoch`` and ``start_batch`` shift where DALI's counters begin, so a resumed run reads
    exactly the batches that were still due.

    ``run_length`` > 1 shuffles runs of that many neighbouring samples instead of single
    samples (:meth:`run_groups`), so that a batch reads a tar shard's consecutive members
    together.

    ``indices`` selects the samples to read, as manifest indices (FFCV's ``Loader(indices=...)``;
    the good samples under ``Loader(on_error="skip")``): the epochs shuffle and shard this list,
    and ``info`` and every message still name the original manifest's indices and lines, so
    random ops draw from the original sample's generator.

    Every file is checked before DALI sees it (:func:`extsrc.sources.imagecheck.check_bytes`, no
    decoding): a file that is not an image, in a format DALI cannot decode, truncated, or whose
    header declares more than ``max_pixels`` pixels (``None``: no limit) raises
    :class:`~extsrc.errors.BadImageError` naming its manifest line; ``check_images=False`` turns
    this off. When the manifest has a ``root``, a file resolving outside it (a symlink pointing
    out) raises :class:`~extsrc.errors.PathOutsideRootError`. Files are opened by
    :func:`extsrc.sources.fileread.read_regular`: anything but a regular file, or a file over
    ``max_file_bytes`` (``None``: no limit), is refused before it is read. URL samples are read
    through the manifest's :attr:`~extsrc.Manifest.storage`, a batch's objects with many
    requests in flight (:meth:`extsrc.sources.storage.Storage.read_many`); the order of the
    samples in a batch is the same either way.
    """


    def __init__(
        self,
        manifest: Manifest,
        *,
        batch_size: int,
        shard_id: int = 0,
        num_shards: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        last_batch: LastBatch = "pad",
        start_epoch: int = 0,
        start_batch: int = 0,
        max_pixels: int | None = DEFAULT_MAX_PIXELS,
        check_images: bool = True,
        indices: Sequence[int] | np.ndarray | None = None,
        max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
        skip_unreadable: bool = False,
        stats_dir: str | None = None,
        run_length: int = 1,
    ) -> None:
        if not isinstance(manifest, Manifest):
            raise TypeError(
                f"ShardedSource needs an extsrc.Manifest (from extsrc.read_manifest), got "
                f"{type(manifest).__name__}"
            )
        self.manifest = manifest
        self.batch_size = batch_size
        self.shard_id = shard_id
        self.num_shards = num_shards
        self.shuffle = shuffle
        self.seed = seed
        self.last_batch = last_batch
        self.max_pixels = max_pixels
        self.check_images = check_images
        self.stats_dir = stats_dir
        self.indices = indices = _checked_indices(indices, len(manifest))
        n = len(manifest) if indices is None else len(indices)
        # Validates every argument once, at construction (num_batches_per_shard skips shard_id).
        check_args(n, batch_size, shard_id, num_shards, 0, last_batch)
        self._num_batches = num_batches_per_shard(
            n, batch_size=batch_size, num_shards=num_shards, last_batch=last_batch
        )
        if self._num_batches == 0:
            raise ValueError(
                f"last_batch='drop' leaves no batch: {n} samples is fewer than "
                f"num_shards * batch_size = {num_shards * batch_size}; use a smaller batch_size or "
                "last_batch='pad'"
            )
        if start_epoch < 0 or not 0 <= start_batch <= self._num_batches:
            raise ValueError(
                f"start_epoch must be >= 0 and start_batch in [0, {self._num_batches}], got "
                f"{start_epoch}, {start_batch}"
            )
        self.start_epoch = start_epoch
        self.start_batch = start_batch
        self.run_length = check_int(run_length, "run_length", minimum=1)
        self.max_file_bytes = check_max_file_bytes(max_file_bytes)
        self.skip_unreadable = bool(skip_unreadable)
        root = getattr(manifest, "root", None)
        self._root_real = None if root is None or is_url(root) else os.path.realpath(root)
        self._cached: tuple[int, ShardPlan] | None = None
        self._owner_pid = os.getpid()

    def __len__(self) -> int:
        return self._num_batches

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cached"] = None  # cheap to recompute; keeps the pickle small
        # Sent to a starting reader process by file when large (extsrc._dali.handoff): through
        # the spawn pipe, a large source makes the readers start one after another.
        for big in ("manifest", "indices"):
            state[big] = outgoing(state[big])
        return state

    def plan(self, epoch: int) -> ShardPlan:
        """This shard's plan for ``epoch``, in manifest indices (cached for the current epoch)."""
        if self._cached is None or self._cached[0] != epoch:
            sel = self.indices
            p = shard_plan(
                len(self.manifest) if sel is None else len(sel), batch_size=self.batch_size,
                shard_id=self.shard_id, num_shards=self.num_shards, epoch=epoch,
                shuffle=self.shuffle, seed=self.seed, last_batch=self.last_batch,
                run_length=self.run_length, groups=self.run_groups(),
            )
            if sel is not None:
                p = ShardPlan(sel[p.indices], p.is_pad, p.batch_offsets)
            self._cached = (epoch, p)
        return self._cached[1]

    def run_groups(self) -> np.ndarray | None:
        """What a run of neighbouring samples (``run_length``) may not cross, one value per
        sample read: the tar shard of each sample of a shard manifest; ``None`` (one group)
        for other manifests or ``run_length=1``."""
        m, sel = self.manifest, self.indices
        if self.run_length == 1 or not isinstance(m, ShardManifest):
            return None
        return m.shard_of if sel is None else m.shard_of[sel]

    def position(self, iteration: int, epoch_idx: int) -> tuple[int, int]:
        """Map DALI's (iteration, epoch_idx) to our (epoch, batch number)."""
        epoch = self.start_epoch + epoch_idx
        batch = iteration + (self.start_batch if epoch_idx == 0 else 0)
        return epoch, batch

    def read(self, index: int, fetched: bytes | FileReadProblem | None = None) -> np.ndarray:
        """The raw bytes of manifest sample ``index``, or an error naming its line and path.
        ``fetched``: its bytes, or the problem reading them, when they were read already."""
        m = self.manifest
        path, fields = m.paths[index], {"source": m.source, "line": m.lines[index]}
        where = m.where(index)
        try:
            if isinstance(fetched, FileReadProblem):
                raise fetched
            if fetched is not None:
                data = fetched
            elif isinstance(m, ShardManifest):  # a member of a tar shard: one ranged read
                data = m.read(index, max_bytes=self.max_file_bytes)
            elif m.storage is not None and is_url(path):
                data = m.storage.read(path, max_bytes=self.max_file_bytes)
            else:
                data = read_regular(path, max_bytes=self.max_file_bytes,
                                    root_real=self._root_real)
        except FileReadProblem as e:
            raise sample_read_error(e, where, path, UP_FRONT_HINT, **fields) from None
        if not data:
            fix = reworded_fix(fix_for("empty"), m.source)
            raise SampleReadError(
                f"{where}: {shown(path)} is empty (0 bytes); {fix}.{UP_FRONT_HINT}",
                path=path, reason="empty", **fields)
        if self.check_images:
            finding = check_bytes(data, max_pixels=self.max_pixels)
            if finding is not None:
                raise bad_image_error(finding, source=m.source, line=m.lines[index], path=path)
        return np.frombuffer(data, dtype=np.uint8)

    def __call__(self, info: Any) -> tuple[list[np.ndarray], ...]:
        exit_with_parent(self._owner_pid)  # in a DALI worker: exit when the main process dies
        epoch, b = self.position(int(info.iteration), int(info.epoch_idx))
        if b >= self._num_batches:
            raise StopIteration
        indices, is_pad = self.plan(epoch).batch(b)
        got = self._read_all(indices)
        bad = [k for k, g in enumerate(got) if isinstance(g, Exception)]
        stand_in = None
        if bad:
            if not self.skip_unreadable or len(bad) == len(got):
                raise got[bad[0]]  # type: ignore[misc]
            # on_error="skip": a sample that became unreadable during the epoch (deleted,
            # damaged, access revoked) is replaced by a good sample of the same batch, marked
            # STAND_IN, which the loader reports; the batch keeps its size and order.
            stand_in = next(k for k in range(len(got)) if not isinstance(got[k], Exception))
            is_pad = np.asarray(is_pad, dtype=np.int64).copy()
            for k in bad:
                got[k] = got[stand_in]
                is_pad[k] = STAND_IN
        labels, info = self.labels_and_info(indices, epoch, is_pad)
        if stand_in is not None:
            labels[bad] = labels[stand_in]
        return (got, labels, info)  # type: ignore[return-value]

    def _read_all(self, indices: np.ndarray) -> list[np.ndarray | SampleReadError]:
        """:meth:`read` of every sample of a batch, in order, a failed sample's place holding
        its error; URL samples are fetched together, with many requests in flight."""
        m = self.manifest
        fetched: dict[int, bytes | FileReadProblem] = {}
        # Tar shards first: their paths (<shard URL>/<member>) are no objects of their own.
        if isinstance(m, ShardManifest):
            fetched = dict(enumerate(m.read_many(indices, max_bytes=self.max_file_bytes)))
            if self.stats_dir is not None and m.storage is not None:
                m.storage.write_stats(self.stats_dir)  # for Loader.storage_stats()
        elif m.storage is not None:
            at = [k for k, i in enumerate(indices) if is_url(m.paths[int(i)])]
            got = m.storage.read_many([m.paths[int(indices[k])] for k in at],
                                      max_bytes=self.max_file_bytes)
            fetched = dict(zip(at, got, strict=True))
            if self.stats_dir is not None and at:
                m.storage.write_stats(self.stats_dir)  # for Loader.storage_stats()
        out: list[np.ndarray | SampleReadError] = []
        for k, i in enumerate(indices):
            try:
                out.append(self.read(int(i), fetched.get(k)))
            except SampleReadError as e:
                out.append(e)
        return out

    def read_batch(self, indices: np.ndarray) -> list[np.ndarray]:
        """:meth:`read` of every sample of a batch, in order; URL samples are fetched together,
        with many requests in flight. The first bad sample (in batch order) raises."""
        got = self._read_all(indices)
        for g in got:
            if isinstance(g, Exception):
                raise g
        return got  # type: ignore[return-value]

    def labels_and_info(self, indices: np.ndarray, epoch: int,
                        is_pad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A batch's ``label`` and ``info`` outputs (``INFO_COLUMNS``) for its samples."""
        labels = np.ascontiguousarray(self.manifest.labels[indices], dtype=np.int64)
        info = np.empty((len(indices), len(INFO_COLUMNS)), dtype=np.int64)
        info[:, 0] = indices
        info[:, 1] = epoch
        info[:, 2] = is_pad
        return labels, info

    def __repr__(self) -> str:
        n = len(self.manifest) if self.indices is None else len(self.indices)
        return (
            f"ShardedSource({n} samples, batch_size={self.batch_size}, "
            f"shard {self.shard_id}/{self.num_shards}, last_batch={self.last_batch!r}, "
            f"{self._num_batches} batches/epoch)"
        )


class ReaderValues:
    """A source's outputs followed by per-sample values that depend on each sample's identity
    only: ``program(index, epoch)`` returns one array of shape ``(B,)`` per value, for the
    batch's manifest indices and epochs (``info``'s first two columns). The traced native path's
    draws (:func:`extsrc.ops_runtime.native.native_sample_scalars`) come this way, computed in the
    reader processes in parallel with the file reading, so the pipeline spends no Python call on
    them. The values are a pure function of (seed, epoch, manifest index, op): the number of readers
    and a resume do not change them.
    """

    def __init__(self, source: ShardedSource,
                 programs: Sequence[Callable[[np.ndarray, np.ndarray], list[np.ndarray]]]) -> None:
        self.source = source
        self.programs = tuple(programs)

    def __call__(self, info: Any) -> tuple[Any, ...]:
        encoded, labels, rows = self.source(info)
        index, epoch = rows[:, 0], rows[:, 1]
        values = [v for program in self.programs for v in program(index, epoch)]
        return (encoded, labels, rows, *values)

    def __len__(self) -> int:
        return len(self.source)
