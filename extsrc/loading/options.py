"""The loaders' option groups: frozen values, each checked once at construction.

``Loader(manifest, batch_size=..., ops=..., resize=...)`` covers the common call; everything else
comes in groups, one per concern, shared by :class:`~extsrc.Loader` and
:class:`~extsrc.VideoLoader`:

* :class:`Sampling`: which samples this process reads and how an epoch ends (``shard_id``,
  ``num_shards``, ``last_batch``);
* :class:`Workers`: DALI's reader processes, threads, queue and decoder;
* :class:`OpRuntime`: how the registered ops run (path, pool, time limit);
* :class:`BadFiles`: what a bad or oversized file does;
* :class:`~extsrc.graph.batchformat.BatchFormat` (``format=``): layout, dtype, normalisation, resize
  mode of the image outputs.

A wrong value is refused when the group is built, with a message naming the group and the field
(``Workers: num_workers must be >= 0 ...``). The flat keywords of earlier releases
(``Loader(..., num_workers=4)``) still work for one release: :func:`from_flat` maps them onto the
groups with a :class:`DeprecationWarning` naming the group to use.
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from augment_ops.registry import IMPLEMENTATIONS
from extsrc._util import argcheck
from extsrc._util.caller import user_stacklevel
from extsrc.graph.batchformat import BatchFormat
from extsrc.ops_runtime.pool import POOL_KINDS, check_op_timeout
from extsrc.sources.fileread import DEFAULT_MAX_FILE_BYTES, check_max_file_bytes
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS
from extsrc.sources.sharding import LastBatch

__all__ = [
    "DEFAULT_HW_DECODER_LOAD", "GROUPS", "BadFiles", "OpRuntime", "Sampling", "Workers",
    "from_flat",
]

#: Share of JPEGs that mixed decoding gives to the GPU's hardware decoder. DALI's own default is
#: 0.65; on an H100 with 16 cores (2026-11-21, benchmarks/README.md) 0.85 ran extsrc 1.15x faster
#: (13.1k vs 11.4k images/s, medians of 3) and left training 0.92 instead of 0.90 of its
#: synthetic-data speed, because the rest is Huffman-decoded on DALI's CPU threads.
DEFAULT_HW_DECODER_LOAD = 0.85

#: Largest ``num_shards`` (world size) accepted.
MAX_SHARDS = 1 << 20
#: Largest ``num_workers`` and ``op_workers`` (each worker is a process holding a copy of the
#: source, about 200 MB) and ``num_threads`` (DALI CPU threads).
MAX_WORKERS = 256
MAX_THREADS = 1024
#: Largest ``prefetch_queue_depth``: each level holds a whole batch, decoded, in memory.
MAX_PREFETCH = 64

START_METHODS = ("fork", "spawn")
DECODERS = ("auto", "cpu", "mixed")
LAST_BATCH: tuple[str, ...] = get_args(LastBatch)

#: ``validate`` options that ``BadFiles(validate_kwargs=...)`` may set (``manifest`` is the
#: loader's).
VALIDATE_OPTIONS: tuple[str, ...] = (
    "decode", "n_jobs", "max_pixels", "progress", "chunk_size", "max_file_bytes",
)


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


def _choice(group: str, name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    """``value`` is one of ``allowed`` (strings, or ``None``); a wrong type is a TypeError."""
    if isinstance(value, (str, type(None))) and value in allowed:
        return
    wrong_type = not isinstance(value, (str, type(None)))
    raise (TypeError if wrong_type else ValueError)(
        f"{group}: {name} must be one of {list(allowed)}, got {type(value).__name__} {value!r}"
    )


@dataclass(frozen=True)
class Sampling:
    """Which samples this process reads, and how an epoch ends.

    ``shard_id`` / ``num_shards``: this process's shard (the global rank) and the number of
    shards (the world size); both ``None`` (default) takes them from ``torch.distributed`` or
    the ``torchrun`` environment, else one shard. ``last_batch``: ``"partial"`` (every sample
    once, the last batch may be short), ``"pad"`` (repeats marked ``is_pad`` fill it) or
    ``"drop"`` (the remainder is left out); see :mod:`extsrc.sources.sharding`.

    ``run_length``: the shuffle moves runs of up to this many neighbouring samples (manifest
    order; within one tar shard for :func:`~extsrc.read_shards`; cut at a random place each
    epoch) rather than single samples, so a batch holds mostly whole runs: for tar shards in
    object storage, a batch's members of one shard come in one ranged request
    (``Storage(coalesce_gap=...)``) instead of many. Batches are then less mixed: samples that
    sit together in the manifest come together, which matters when the manifest or the shards
    are sorted (by class, say); keep it at a fraction of the batch size (a run longer than a
    batch warns). 1 (default): every sample on its own.
    """

    shard_id: int | None = None
    num_shards: int | None = None
    last_batch: LastBatch = "partial"
    run_length: int = 1

    def __post_init__(self) -> None:
        _set(self, "shard_id", argcheck.check_int(
            self.shard_id, "Sampling: shard_id", minimum=0, allow_none=True,
            what="this process's shard, the global rank"))
        _set(self, "num_shards", argcheck.check_int(
            self.num_shards, "Sampling: num_shards", minimum=1, maximum=MAX_SHARDS,
            allow_none=True, what="shards, the world size"))
        _choice("Sampling", "last_batch", self.last_batch, LAST_BATCH)
        _set(self, "run_length", argcheck.check_int(
            self.run_length, "Sampling: run_length", minimum=1,
            what="neighbouring samples the shuffle keeps together"))
        if self.shard_id is not None and self.num_shards is not None \
                and self.shard_id >= self.num_shards:
            raise ValueError(
                f"Sampling: shard_id must be in [0, num_shards={self.num_shards}), got "
                f"{self.shard_id}; shard_id is the global rank, num_shards the world size"
            )


@dataclass(frozen=True)
class Workers:
    """DALI's side of a loader: reader processes, threads, the queue of batches and the decoder.

    ``num_workers``: processes reading files (0: in the main thread; ``None``: from the cores,
    see :attr:`~extsrc.loading.config.RunPlan.workers`). ``num_threads``: DALI CPU threads
    (``None``: from the cores). ``start_method``: ``"fork"`` or ``"spawn"`` for the readers
    (``None``: ``"spawn"`` on a GPU or once CUDA is up, else ``"fork"``). ``prefetch_queue_depth``:
    batches DALI prepares ahead. ``decoder``: ``"auto"`` (nvJPEG on a GPU, else the CPU),
    ``"cpu"`` or ``"mixed"``. ``hw_decoder_load``: share of JPEGs that mixed decoding gives to
    the GPU's hardware decoder (``None``: DALI's default). ``watchdog=False`` calls DALI
    directly instead of through the thread that notices a dead reader (a killed reader can
    then hang the loop, as in plain DALI).
    """

    num_workers: int | None = None
    num_threads: int | None = None
    start_method: str | None = None
    prefetch_queue_depth: int = 2
    decoder: str = "auto"
    hw_decoder_load: float | None = DEFAULT_HW_DECODER_LOAD
    watchdog: bool = True

    def __post_init__(self) -> None:
        ints = {
            "num_workers": dict(minimum=0, maximum=MAX_WORKERS, allow_none=True,
                                what="DALI worker processes reading files"),
            "num_threads": dict(minimum=1, maximum=MAX_THREADS, allow_none=True,
                                what="DALI CPU threads"),
            "prefetch_queue_depth": dict(minimum=1, maximum=MAX_PREFETCH,
                                         what="batches DALI prepares ahead"),
        }
        for name, rule in ints.items():
            _set(self, name, argcheck.check_int(getattr(self, name), f"Workers: {name}",
                                                **rule))  # type: ignore[arg-type]
        _choice("Workers", "start_method", self.start_method, (None, *START_METHODS))
        _choice("Workers", "decoder", self.decoder, DECODERS)
        load = self.hw_decoder_load
        if load is not None:
            if isinstance(load, bool) or not isinstance(load, numbers.Real):
                raise TypeError(
                    f"Workers: hw_decoder_load must be None or a number in [0, 1], got "
                    f"{type(load).__name__} {load!r}"
                )
            if not 0.0 <= load <= 1.0:
                raise ValueError(
                    f"Workers: hw_decoder_load must be None (DALI's default) or a number in "
                    f"[0, 1], got {load!r}; it is the share of JPEGs sent to the GPU's hardware "
                    "decoder"
                )
            _set(self, "hw_decoder_load", float(load))
        _set(self, "watchdog", argcheck.check_bool(self.watchdog, "Workers: watchdog"))


def _op_path(value: Any) -> str | tuple[tuple[str, str], ...] | None:
    """``op_path`` as the group holds it: a dict becomes sorted ``(name, path)`` pairs."""
    forms = f"None, one of {list(IMPLEMENTATIONS)}, or a dict {{op name: path}}"
    if value is None:
        return None
    if isinstance(value, str):
        if value not in IMPLEMENTATIONS:
            raise ValueError(f"OpRuntime: op_path must be {forms}, got {value!r}")
        return value
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # the held form, given back (dataclasses.replace)
    if not isinstance(value, Mapping):
        raise TypeError(f"OpRuntime: op_path must be {forms}, got {type(value).__name__} "
                        f"{value!r}")
    for name, path in value.items():
        if not isinstance(name, str) or not isinstance(path, str):
            raise TypeError(f"OpRuntime: op_path must be {forms}; got the entry {name!r}: "
                            f"{path!r}")
        if path not in IMPLEMENTATIONS:
            raise ValueError(
                f"OpRuntime: op_path for '{name}' must be one of {list(IMPLEMENTATIONS)}, got "
                f"{path!r}"
            )
    return tuple(sorted(value.items()))


@dataclass(frozen=True)
class OpRuntime:
    """How the registered ops run.

    ``op_path``: ``None`` picks per op the fastest path it declares that the device supports
    (``"native"`` DALI operators, then ``"gpu"`` CuPy on a GPU, then ``"numpy"``); a string
    forces one path for every op; a dict forces it per op name (held as sorted pairs).
    ``op_workers``: workers running the numpy path's ops over a batch's samples in parallel
    (``None``: the cores this process may use; ``0``: one after another in DALI's thread), as
    processes (``op_pool="process"``) or threads (``"thread"``). ``op_timeout``: seconds per
    sample an op may take before :class:`~extsrc.errors.OpTimeoutError` (``None``: no limit).
    """

    op_path: str | tuple[tuple[str, str], ...] | None = None
    op_workers: int | None = None
    op_pool: str = "process"
    op_timeout: float | None = None

    def __post_init__(self) -> None:
        _set(self, "op_path", _op_path(self.op_path))
        _set(self, "op_workers", argcheck.check_int(
            self.op_workers, "OpRuntime: op_workers", minimum=0, maximum=MAX_WORKERS,
            allow_none=True, what="workers running the numpy path's ops"))
        _choice("OpRuntime", "op_pool", self.op_pool, POOL_KINDS)
        _set(self, "op_timeout", check_op_timeout(self.op_timeout, "OpRuntime: op_timeout"))

    @property
    def op_path_override(self) -> str | dict[str, str] | None:
        """``op_path`` as :func:`~extsrc.ops_runtime.paths.choose_paths` takes it."""
        return dict(self.op_path) if isinstance(self.op_path, tuple) else self.op_path


@dataclass(frozen=True)
class BadFiles:
    """What a bad or oversized file does.

    ``on_error``: ``"raise"`` (the first bad file stops iteration naming its line, path and
    reason) or ``"skip"`` (validate up front, train on the good samples, list the rest in
    ``loader.skipped``). ``max_pixels``: largest pixel count an image header may declare
    (``None``: no limit). ``max_file_bytes``: largest file read (``None``: no limit).
    ``validate_kwargs``: options of :func:`extsrc.validate` for ``on_error="skip"``
    (:data:`VALIDATE_OPTIONS`), held as a read-only copy.
    """

    on_error: str = "raise"
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES
    validate_kwargs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.on_error, str):
            raise TypeError(
                f"BadFiles: on_error must be 'raise' or 'skip', got "
                f"{type(self.on_error).__name__} {self.on_error!r}"
            )
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"BadFiles: on_error must be 'raise' or 'skip', got "
                             f"{self.on_error!r}")
        _set(self, "max_pixels", argcheck.check_int(
            self.max_pixels, "BadFiles: max_pixels", minimum=1, allow_none=True,
            what="largest pixel count an image header may declare"))
        _set(self, "max_file_bytes",
             check_max_file_bytes(self.max_file_bytes, "BadFiles: max_file_bytes"))
        kw = self.validate_kwargs
        if kw is None:
            return
        if not isinstance(kw, Mapping):
            raise TypeError(
                f"BadFiles: validate_kwargs must be a dict of extsrc.validate options or None, "
                f"got {type(kw).__name__}"
            )
        unknown = sorted(str(k) for k in kw if k not in VALIDATE_OPTIONS)
        if unknown:
            raise TypeError(
                f"BadFiles: validate_kwargs has unknown option(s) {unknown}; extsrc.validate "
                f"takes {list(VALIDATE_OPTIONS)}"
            )
        if self.on_error != "skip":
            raise ValueError(
                "BadFiles: validate_kwargs is used by on_error='skip' only (it runs "
                "extsrc.validate up front); pass on_error='skip' or drop validate_kwargs"
            )
        _set(self, "validate_kwargs", _Frozen(kw))


class _Frozen(dict):  # type: ignore[type-arg]
    """A dict that cannot change after the group holding it was checked (and can be hashed)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("BadFiles.validate_kwargs cannot be changed; build a new BadFiles")

    __setitem__ = __delitem__ = update = _refuse  # type: ignore[assignment]
    pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=repr)))

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles build it whole
        return (_Frozen, (dict(self),))


#: Each group's keyword in the loaders' signature, its class, and the flat keywords it holds.
GROUPS: dict[str, tuple[type, tuple[str, ...]]] = {
    "sampling": (Sampling, ("shard_id", "num_shards", "last_batch")),
    "workers": (Workers, tuple(f.name for f in dataclasses.fields(Workers))),
    "op_runtime": (OpRuntime, tuple(f.name for f in dataclasses.fields(OpRuntime))),
    "bad_files": (BadFiles, tuple(f.name for f in dataclasses.fields(BadFiles))),
    "format": (BatchFormat, ("layout", "dtype", "normalize", "resize_mode")),
}
#: The group keyword of each flat keyword.
FLAT: dict[str, str] = {name: group for group, (_, names) in GROUPS.items() for name in names}


def from_flat(who: str, groups: Mapping[str, Any], flat: Mapping[str, Any], *,
              base: Mapping[str, Mapping[str, Any]] | None = None,
              stacklevel: int | None = None) -> dict[str, Any]:
    """The groups a loader runs with, given its group keywords (``None``: not given) and the flat
    keywords of earlier releases.

    Each flat keyword goes into its group, with one :class:`DeprecationWarning` naming the group
    to pass instead (``pass workers=Workers(num_workers=4)``). A flat keyword given together
    with its group is a :class:`TypeError`, as is a keyword no group holds. A group not given
    is built from ``base[group]`` (a caller's own defaults, the presets'), with the flat
    keywords over them. Returns ``{group keyword: group}`` for every group in ``groups``.
    The warning points at ``stacklevel`` (``None``: the first line outside extsrc).
    """
    unknown = sorted(k for k in flat if k not in FLAT or FLAT[k] not in groups)
    if unknown:
        raise TypeError(f"{who}() got unexpected keyword argument(s) {unknown}")
    out: dict[str, Any] = {}
    advice = []
    for key, given in groups.items():
        cls, names = GROUPS[key]
        mine = {k: v for k, v in flat.items() if k in names}
        if given is not None and not isinstance(given, cls):
            raise TypeError(f"{who}: {key} must be an extsrc.{cls.__name__}, got "
                            f"{type(given).__name__} {given!r}")
        if mine and given is not None:
            raise TypeError(
                f"{who}: {', '.join(sorted(mine))} given both on its own and in {key}="
                f"{cls.__name__}(...); pass it in {key} only"
            )
        if given is None:
            fields = {**(base or {}).get(key, {}), **mine}
            given = cls(**fields)
            if mine:
                args = ", ".join(f"{k}={v!r}" for k, v in fields.items())
                advice.append(f"{key}={cls.__name__}({args})")
        out[key] = given
    if advice:
        warnings.warn(
            f"{who}: flat keyword arguments {sorted(flat)} are deprecated and will be removed "
            f"in the next release; pass {', '.join(advice)} (from extsrc)",
            DeprecationWarning,
            stacklevel=user_stacklevel() if stacklevel is None else stacklevel,
        )
    return out
