"""``Loader``: the PyTorch-facing object. Builds the DALI pipeline and yields dicts of tensors.

This is the only module of the core that imports torch (through DALI's PyTorch plugin).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import augment_ops
from augment_ops.registry import Op
from extsrc.device import resolve_device
from extsrc.manifest import Manifest, read_manifest
from extsrc.pipeline import BuiltPipeline, build_pipeline, default_output_names
from extsrc.sharding import LastBatch
from extsrc.source import ShardedSource

__all__ = ["METADATA_KEYS", "Loader", "LoaderConfig"]

#: Keys every batch carries besides the named outputs: the manifest index of each sample and
#: whether it is a pad repeat (count it in no metric).
METADATA_KEYS: tuple[str, ...] = ("index", "is_pad")
_START_METHODS = ("fork", "spawn")


def _as_ops(value: Any, what: str) -> tuple[Op, ...]:
    if isinstance(value, (str, Op)):
        value = (value,)
    try:
        return tuple(augment_ops.get(v) for v in value)
    except TypeError:
        raise TypeError(
            f"{what} must be a sequence of op names or augment_ops.Op objects, got {value!r}"
        ) from None


def _as_size(resize: Any) -> tuple[int, int] | None:
    if resize is None:
        return None
    if isinstance(resize, int) and not isinstance(resize, bool):
        resize = (resize, resize)
    if (
        isinstance(resize, Sequence) and len(resize) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in resize)
    ):
        return int(resize[0]), int(resize[1])
    raise ValueError(f"resize must be None, a positive int or (height, width), got {resize!r}")


@dataclass(frozen=True)
class LoaderConfig:
    """Everything that shapes a loader's output, validated at construction.

    ``resize`` is ``None``, an int (square) or ``(height, width)``. ``num_workers`` is the number of
    DALI worker processes that read files (0: read in the main thread); ``None`` picks one from the
    core count. ``start_method`` ``None`` picks ``"spawn"`` on a GPU (safe after CUDA is
    initialised) and ``"fork"`` on the CPU.
    """

    batch_size: int
    ops: tuple[Op, ...] = ()
    transforms: tuple[Op, ...] = ()
    resize: tuple[int, int] | None = None
    output_map: tuple[str, ...] | None = None
    shard_id: int = 0
    num_shards: int = 1
    shuffle: bool = True
    seed: int = 0
    last_batch: LastBatch = "pad"
    device_id: int | None = None
    num_workers: int | None = None
    num_threads: int | None = None
    start_method: str | None = None
    prefetch_queue_depth: int = 2
    output_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) \
                or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if self.last_batch not in get_args(LastBatch):
            raise ValueError(
                f"last_batch must be one of {list(get_args(LastBatch))}, got {self.last_batch!r}"
            )
        for t in self.transforms:
            if t.num_outputs != 1:
                raise ValueError(
                    f"transform '{t.name}' has {t.num_outputs} outputs; transforms replace the "
                    "image and must have exactly one. Put it in ops= to get its outputs"
                )
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 or None, got {self.num_workers}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {self.num_threads}")
        if self.start_method not in (None, *_START_METHODS):
            raise ValueError(
                f"start_method must be None, 'fork' or 'spawn', got {self.start_method!r}"
            )
        if self.prefetch_queue_depth < 1:
            raise ValueError("prefetch_queue_depth must be >= 1")
        defaults = default_output_names(self.ops)
        dup = sorted({n for n in defaults if defaults.count(n) > 1})
        if dup and self.output_map is None:
            raise ValueError(
                f"ops produce duplicate output names {dup} (an op used twice?); pass output_map "
                f"with {len(defaults)} distinct names"
            )
        names = defaults
        if self.output_map is not None:
            om = tuple(self.output_map)
            if len(om) != len(defaults):
                raise ValueError(
                    f"output_map has {len(om)} names but the loader has {len(defaults)} outputs "
                    f"{list(defaults)} (image, each op output, label); give one name per output"
                )
            if len(set(om)) != len(om) or not all(isinstance(n, str) and n for n in om):
                raise ValueError(f"output_map names must be distinct non-empty strings, got {om}")
            names = om
        clash = sorted(set(names) & set(METADATA_KEYS))
        if clash:
            raise ValueError(
                f"output names {clash} are reserved for per-sample metadata; rename them"
            )
        object.__setattr__(self, "output_names", names)

    @property
    def workers(self) -> int:
        if self.num_workers is not None:
            return self.num_workers
        return min(4, max(1, (os.cpu_count() or 1) // 4))

    @property
    def threads(self) -> int:
        if self.num_threads is not None:
            return self.num_threads
        return max(2, min(12, (os.cpu_count() or 2) - self.workers))

    @property
    def method(self) -> str:
        if self.start_method is not None:
            return self.start_method
        return "spawn" if self.device_id is not None else "fork"


class Loader:
    """Iterate epochs of batches as ``dict[name, torch.Tensor]`` from a labelled manifest.

    The DALI graph: ``ShardedSource`` (raw bytes, read in worker processes) -> image decoding ->
    ``transforms`` (single-output ops that replace the image, in order) -> ``ops`` (each gets the
    image and adds its outputs) -> ``resize`` of every image output -> outputs. On a GPU the resize
    runs there and outputs are CUDA tensors; on the CPU everything runs in DALI's CPU-only mode.

    Each batch holds the outputs under their names (default ``image``, ``<op>_<k>``, ``label``;
    ``output_map`` renames them in that order) plus ``index`` (manifest index of each sample,
    ``int64``) and ``is_pad`` (``bool``: a repeat added by ``last_batch="pad"``). ``len(loader)``
    is the number of batches per epoch; each new ``iter(loader)`` starts the next epoch.

    ``device``: ``None`` (GPU 0 when one is visible, else CPU), ``"cpu"``, ``"cuda"``,
    ``"cuda:N"`` or a GPU index.
    """

    def __init__(
        self,
        manifest: Manifest | str | os.PathLike[str],
        *,
        batch_size: int,
        ops: Sequence[str | Op] = (),
        transforms: Sequence[str | Op] = (),
        resize: int | tuple[int, int] | None = None,
        output_map: Sequence[str] | None = None,
        shard_id: int = 0,
        num_shards: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        last_batch: LastBatch = "pad",
        device: Any = None,
        num_workers: int | None = None,
        num_threads: int | None = None,
        start_method: str | None = None,
        prefetch_queue_depth: int = 2,
    ) -> None:
        if isinstance(manifest, (str, Path)):
            manifest = read_manifest(manifest)
        if not isinstance(manifest, Manifest):
            raise TypeError(
                f"manifest must be an extsrc.Manifest or a manifest file path, got "
                f"{type(manifest).__name__}"
            )
        self.manifest = manifest
        self.config = LoaderConfig(
            batch_size=batch_size,
            ops=_as_ops(ops, "ops"),
            transforms=_as_ops(transforms, "transforms"),
            resize=_as_size(resize),
            output_map=None if output_map is None else tuple(output_map),
            shard_id=shard_id,
            num_shards=num_shards,
            shuffle=shuffle,
            seed=seed,
            last_batch=last_batch,
            device_id=resolve_device(device),
            num_workers=num_workers,
            num_threads=num_threads,
            start_method=start_method,
            prefetch_queue_depth=prefetch_queue_depth,
        )
        self.source = ShardedSource(
            manifest, batch_size=batch_size, shard_id=shard_id, num_shards=num_shards,
            shuffle=shuffle, seed=seed, last_batch=last_batch,
        )
        self.epoch = 0
        self._built: BuiltPipeline | None = None
        self._dali_iter: Any = None
        self._in_epoch = False

    # -- public surface ---------------------------------------------------------------------------
    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the tensor outputs in order (metadata keys excluded)."""
        return self.config.output_names

    @property
    def device(self) -> str:
        d = self.config.device_id
        return "cpu" if d is None else f"cuda:{d}"

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        it = self._ensure_built()
        if self._in_epoch:
            # The previous epoch was left part-way (a `break`): finish it so that DALI's epoch
            # counter and ours agree and no batch of the next epoch is skipped.
            for _ in it:
                pass
            it.reset()
            self._in_epoch = False
            self.epoch += 1
        return self._epoch_batches(it)

    def close(self) -> None:
        """Stop DALI's threads and worker processes."""
        self._dali_iter = None
        if self._built is not None:
            pipe = self._built.pipe
            self._built = None
            del pipe

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Loader({len(self.manifest)} samples, batch_size={c.batch_size}, "
            f"outputs={list(c.output_names)}, device={self.device!r}, "
            f"shard {c.shard_id}/{c.num_shards}, {len(self)} batches/epoch)"
        )

    # -- internals --------------------------------------------------------------------------------
    def _ensure_built(self) -> Any:
        if self._dali_iter is None:
            from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

            c = self.config
            self._built = build_pipeline(
                self.source, ops=c.ops, transforms=c.transforms, resize=c.resize,
                device_id=c.device_id, num_threads=c.threads, num_workers=c.workers,
                start_method=c.method, prefetch_queue_depth=c.prefetch_queue_depth, seed=c.seed,
                output_names=c.output_names,
            )
            self._built.pipe.build()
            # PARTIAL: the source decides batch sizes; DALI must pass short batches through.
            self._dali_iter = DALIGenericIterator(
                self._built.pipe,
                [*c.output_names, *(f"__{k}" for k in METADATA_KEYS)],
                last_batch_policy=LastBatchPolicy.PARTIAL,
                auto_reset=False,
                prepare_first_batch=False,
            )
        return self._dali_iter

    def _epoch_batches(self, it: Any) -> Iterator[dict[str, Any]]:
        self._in_epoch = True
        while True:
            try:
                batch = next(it)
            except StopIteration:
                break
            except RuntimeError as e:
                raise self._explain(e) from e
            d = batch[0]
            out = {name: d[name] for name in self.config.output_names}
            out["index"] = d["__index"]
            out["is_pad"] = d["__is_pad"].bool()
            yield out
        it.reset()
        self._in_epoch = False
        self.epoch += 1

    def _explain(self, e: RuntimeError) -> Exception:
        msg = str(e)
        if "uniform shape" in msg and self.config.resize is None:
            return ValueError(
                "images in a batch have different sizes, so they cannot be stacked into one "
                "tensor; pass resize=(height, width) (or an int) to Loader"
            )
        return e
