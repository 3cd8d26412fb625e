"""``ShardedSource``: the callable that DALI's ``external_source`` calls for every batch.

It reads raw file bytes (no decoding: DALI decodes) for the samples that :mod:`extsrc.sharding`
assigns to this shard, and returns them with their labels and their identity (manifest index,
epoch, pad flag), so every output can be traced back to its manifest line. It is a small picklable
class rather than a closure so that DALI can ship it to worker processes (``parallel=True``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from extsrc.errors import SampleReadError
from extsrc.manifest import Manifest
from extsrc.sharding import LastBatch, ShardPlan, _check_args, num_batches_per_shard, shard_plan

__all__ = ["SOURCE_OUTPUTS", "ShardedSource"]

#: What one call returns, in order: encoded bytes, label, manifest index, epoch, pad flag.
SOURCE_OUTPUTS: tuple[str, ...] = ("encoded", "label", "index", "epoch", "is_pad")


class ShardedSource:
    """Raw-byte batches of one shard, for ``fn.external_source(batch=True, batch_info=True)``.

    Given DALI's batch info (``iteration``, ``epoch_idx``) it returns five lists, one entry per
    sample: the file's bytes (``np.uint8``, 1-D), the label (``np.int64``, shape ``()`` or
    ``(k,)``), the manifest index (``np.int64``), the epoch (``np.int64``) and whether the sample is
    a pad repeat (``np.uint8``). It raises ``StopIteration`` after the shard's last batch of an
    epoch. ``len(source)`` is the number of batches per epoch, the same on every shard.

    ``start_epoch`` and ``start_batch`` shift where DALI's counters begin, so a resumed run reads
    exactly the batches that were still due.
    """

    num_outputs = len(SOURCE_OUTPUTS)

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
        # Validates every argument once, at construction (num_batches_per_shard skips shard_id).
        _check_args(len(manifest), batch_size, shard_id, num_shards, 0, last_batch)
        self._num_batches = num_batches_per_shard(
            len(manifest), batch_size=batch_size, num_shards=num_shards, last_batch=last_batch
        )
        if self._num_batches == 0:
            raise ValueError(
                f"last_batch='drop' leaves no batch: {len(manifest)} samples is fewer than "
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
        self._cached: tuple[int, ShardPlan] | None = None

    def __len__(self) -> int:
        return self._num_batches

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cached"] = None  # cheap to recompute; keeps the pickle small
        return state

    def plan(self, epoch: int) -> ShardPlan:
        """This shard's plan for ``epoch`` (cached for the current epoch)."""
        if self._cached is None or self._cached[0] != epoch:
            p = shard_plan(
                len(self.manifest), batch_size=self.batch_size, shard_id=self.shard_id,
                num_shards=self.num_shards, epoch=epoch, shuffle=self.shuffle, seed=self.seed,
                last_batch=self.last_batch,
            )
            self._cached = (epoch, p)
        return self._cached[1]

    def position(self, iteration: int, epoch_idx: int) -> tuple[int, int]:
        """Map DALI's (iteration, epoch_idx) to our (epoch, batch number)."""
        epoch = self.start_epoch + epoch_idx
        batch = iteration + (self.start_batch if epoch_idx == 0 else 0)
        return epoch, batch

    def read(self, index: int) -> np.ndarray:
        """The raw bytes of manifest sample ``index``, or an error naming its line and path."""
        path = self.manifest.paths[index]
        where = f"{self.manifest.source} line {self.manifest.lines[index]}"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise SampleReadError(
                f"{where}: file not found: {path}; fix the path or run extsrc.validate() to find "
                "and drop missing files"
            ) from None
        except IsADirectoryError:
            raise SampleReadError(
                f"{where}: {path} is a directory, expected an image file"
            ) from None
        except OSError as e:
            raise SampleReadError(f"{where}: cannot read {path}: {e.strerror or e}") from None
        if not data:
            raise SampleReadError(
                f"{where}: {path} is empty (0 bytes); re-export the image or drop the line"
            )
        return np.frombuffer(data, dtype=np.uint8)

    def __call__(self, info: Any) -> tuple[list[np.ndarray], ...]:
        epoch, b = self.position(int(info.iteration), int(info.epoch_idx))
        if b >= self._num_batches:
            raise StopIteration
        indices, is_pad = self.plan(epoch).batch(b)
        labels = self.manifest.labels
        encoded = [self.read(int(i)) for i in indices]
        label = [np.asarray(labels[i], dtype=np.int64) for i in indices]
        index = [np.asarray(i, dtype=np.int64) for i in indices]
        ep = [np.asarray(epoch, dtype=np.int64)] * len(indices)
        pad = [np.asarray(p, dtype=np.uint8) for p in is_pad]
        return encoded, label, index, ep, pad

    def __repr__(self) -> str:
        return (
            f"ShardedSource({len(self.manifest)} samples, batch_size={self.batch_size}, "
            f"shard {self.shard_id}/{self.num_shards}, last_batch={self.last_batch!r}, "
            f"{self._num_batches} batches/epoch)"
        )
