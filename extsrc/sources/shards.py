"""Webdataset-style tar shards (``train-{000000..000127}.tar``) read as a manifest of byte ranges.

A shard holds samples as groups of members that share a key, webdataset's rule: the key is the
member's path up to the first dot of its file name, the rest is the member's extension
(``0001.jpg``, ``0001.cls`` and ``0001.json`` are the sample ``0001``; ``a/0001.seg.png`` is the
sample ``a/0001`` with extension ``seg.png``). Each sample needs exactly one image member (by
extension, :data:`IMAGE_EXTENSIONS` unless given) and, unless ``label=None``, one label member:
``cls`` (an integer in text) or a ``json`` object and the field that holds the label.

Design: index the shards, then read byte ranges
    :func:`read_shards` reads every shard's tar headers once and returns a
    :class:`ShardManifest`: a :class:`~extsrc.sources.manifest.Manifest` whose samples are byte
    ranges ``(shard, offset, size)`` of the image members, with their labels. So everything a
    manifest gets holds for shards unchanged: the Loader's global shuffle (one permutation of all
    samples, different for each epoch and seed, the same on a rerun), sharding across ranks by
    sample (every sample exactly once per epoch, the ranks' samples disjoint), ``last_batch``,
    ``state_dict()`` and an exact mid-epoch resume, ``on_error="skip"`` and
    :func:`extsrc.validate`. A sample read is one
    positioned read (``os.pread``) of a shard file that each reader process keeps open, or a
    ranged request for a shard behind a URL (any fsspec protocol: ``s3://``, ``gs://``,
    ``https://``), shared by the members of that shard one batch needs that lie within
    ``coalesce_gap`` of each other (:class:`~extsrc.sources.storage.Storage`): nothing decodes
    the tar stream while training, and a read costs fewer system calls than opening a loose
    file.

    A webdataset-style stream (shards split across ranks and workers, a bounded shuffle buffer,
    position = shard + offset) needs no index, but splits work in shard-sized blocks (ranks and
    workers get unequal sample counts unless shards divide evenly), shuffles only within its
    buffer, and resumes by replaying a shard. The index costs one pass over the headers: local
    shards are read header by header (the member data is skipped by seeking), remote ones
    by ranged reads through the storage (:class:`RemoteShard`: retried and counted as sample
    reads are; large blocks where members are small, a small block per header where they are
    large), several shards at a time.

Shards are checked while they are indexed: a file that is not a tar, a damaged header, a shard
cut short (a member's data past the end, or no end-of-archive blocks), a key without an image or
with two, a missing or bad label, a key that appears twice in a shard. ``on_error="raise"``
raises :class:`~extsrc.errors.ManifestError` naming the shard, the member and how to fix it;
``on_error="skip"`` leaves those samples out, warns with a count per reason and the first few, and
keeps every :class:`ShardProblem` in :attr:`ShardManifest.skipped`. Members without an extension
(no dot in the name) and directories belong to no sample and are passed over, as webdataset does.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from extsrc._util.textsafe import shown
from extsrc.errors import ManifestError, ManifestFileNotFoundError
from extsrc.sources.fileread import DEFAULT_MAX_FILE_BYTES, FileReadProblem
from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS, Finding
from extsrc.sources.manifest import (
    Manifest,
    _validate_classes,
    _validated_label_array,
    storage_arg,
)
from extsrc.sources.shardindex import SHARD_REASONS, IndexedShard, ShardProblem, index_shard
from extsrc.sources.shardnames import expand_shards, is_remote_shard, is_shard_source, shard_list
from extsrc.sources.shardread import RemoteShard, check_range, check_size, read_range
from extsrc.sources.storage import Storage

__all__ = [
    "IMAGE_EXTENSIONS",
    "SHARD_REASONS",
    "RemoteShard",
    "ShardManifest",
    "ShardProblem",
    "check_range",
    "expand_shards",
    "is_shard_source",
    "read_range",
    "read_shards",
]

#: Extensions (lower case, no dot) of the member taken as a sample's image by default: the
#: image formats DALI's decoder reads.
IMAGE_EXTENSIONS: tuple[str, ...] = (
    "jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "pnm", "ppm", "pgm", "pbm", "jp2",
)

_MAX_NAMED = 3  # problems named in a skip warning
_NONE = np.zeros(0, dtype=np.int64)
_NONE.flags.writeable = False


@dataclass(frozen=True, eq=False)
class ShardManifest(Manifest):
    """A :class:`~extsrc.sources.manifest.Manifest` whose samples are image members of tar shards.

    Besides the manifest's fields (``paths`` are ``<shard>/<member>``, ``lines`` the 1-based
    sample numbers in shard order, ``source`` the pattern or list as given):

    Attributes:
        shards: the shards, local absolute paths or URLs, in order.
        shard_of: read-only ``int64`` array: the index in :attr:`shards` of every sample.
        offsets, sizes: read-only ``int64`` arrays: where every image member's data starts in
            its shard, and its length in bytes.
        storage: how URL shards are read (:class:`~extsrc.sources.storage.Storage`: fsspec
            options, requests in flight, retries, cache); ``None`` for local shards only.
        skipped: what ``on_error="skip"`` left out while indexing.
        stamps: every local shard's ``(size, mtime_ns)`` when it was indexed (``None`` for a
            URL shard, or to check nothing): a read from a shard that has changed since is
            refused, since its offsets would point into other data.
    """

    shards: tuple[str, ...] = ()
    shard_of: np.ndarray = field(default_factory=lambda: _NONE)
    offsets: np.ndarray = field(default_factory=lambda: _NONE)
    sizes: np.ndarray = field(default_factory=lambda: _NONE)
    skipped: tuple[ShardProblem, ...] = ()
    stamps: tuple[tuple[int, int] | None, ...] = ()

    def __post_init__(self) -> None:
        # The manifest's own checks, less "paths are absolute": a URL shard's samples are not.
        source = str(self.source)
        where = shown(source)
        paths = tuple(self.paths)
        if not all(isinstance(p, str) for p in paths):
            raise ManifestError(f"{where}: ShardManifest.paths must be str")
        n = len(paths)
        labels = _validated_label_array(self.labels, n, where)
        lines = tuple(int(x) for x in self.lines)
        classes = None if self.classes is None else list(self.classes)
        if classes is not None:
            _validate_classes(classes, labels, where)
        if self.root is not None:
            raise ManifestError(f"{where}: a ShardManifest has no root")
        shards = tuple(self.shards)
        arrays = {}
        for name in ("shard_of", "offsets", "sizes"):
            a = np.array(getattr(self, name), dtype=np.int64)
            if a.shape != (n,) or len(lines) != n or (n and a.min() < 0):
                raise ManifestError(
                    f"{where}: ShardManifest.{name} and lines need one value >= 0 per sample ({n})")
            a.flags.writeable = False
            arrays[name] = a
        if n and arrays["shard_of"].max() >= len(shards):
            raise ManifestError(f"{where}: ShardManifest.shard_of names a shard not in shards")
        storage = self.storage
        if storage is not None and not isinstance(storage, Storage):
            raise TypeError(f"{where}: ShardManifest.storage must be an extsrc Storage or None, "
                            f"got {type(storage).__name__}")
        if storage is None and any(is_remote_shard(x) for x in shards):
            storage = Storage()
        stamps = tuple(None if t is None else (int(t[0]), int(t[1])) for t in self.stamps) \
            or (None,) * len(shards)
        if len(stamps) != len(shards):
            raise ManifestError(f"{where}: ShardManifest.stamps needs one entry per shard")
        for name, value in (("source", source), ("paths", paths), ("labels", labels),
                            ("lines", lines), ("classes", classes), ("shards", shards),
                            ("storage", storage), ("skipped", tuple(self.skipped)),
                            ("stamps", stamps), *arrays.items()):
            object.__setattr__(self, name, value)

    def select(self, keep: Sequence[int] | np.ndarray) -> ShardManifest:
        """The samples at indices ``keep``, in that order; lines and ``source`` stay those of
        this manifest, so messages still name the same samples."""
        keep = np.asarray(keep, dtype=np.int64)
        return ShardManifest(
            paths=tuple(self.paths[i] for i in keep), labels=self.labels[keep],
            classes=self.classes, lines=tuple(self.lines[i] for i in keep), source=self.source,
            shards=self.shards, shard_of=self.shard_of[keep], offsets=self.offsets[keep],
            sizes=self.sizes[keep], storage=self.storage, skipped=self.skipped,
            stamps=self.stamps,
        )

    def range(self, index: int) -> tuple[str, int, int, Storage | None,
                                         tuple[int, int] | None]:
        """Where sample ``index``'s image member lies: ``(shard, offset, size, storage,
        stamp)``, the arguments of :func:`read_range` and :func:`check_range`."""
        s = int(self.shard_of[index])
        return (self.shards[s], int(self.offsets[index]), int(self.sizes[index]),
                self.storage, self.stamps[s])

    def is_remote(self, index: int) -> bool:
        """Whether sample ``index`` lies in a shard behind a URL (read through :attr:`storage`)."""
        return self.remote[int(self.shard_of[index])]

    @functools.cached_property
    def remote(self) -> tuple[bool, ...]:
        """Whether each shard of :attr:`shards` is behind a URL."""
        return tuple(is_remote_shard(x) for x in self.shards)

    def read(self, index: int, *, max_bytes: int | None = DEFAULT_MAX_FILE_BYTES) -> bytes:
        """The image member of sample ``index``, or
        :class:`~extsrc.sources.fileread.FileReadProblem`."""
        shard, offset, size, storage, stamp = self.range(index)
        check_size(size, max_bytes)
        return read_range(shard, offset, size, storage, stamp)

    def read_many(self, indices: Sequence[int] | np.ndarray, *,
                  max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
                  ) -> list[bytes | FileReadProblem]:
        """The image members of samples ``indices``, in that order, a failed read's place
        holding its :class:`~extsrc.sources.fileread.FileReadProblem`. Members of URL shards
        are read together through :attr:`storage` (:meth:`Storage.read_ranges
        <extsrc.sources.storage.Storage.read_ranges>`): the members of one shard that lie
        close together in one ranged GET, up to its ``concurrency`` GETs in flight; members of
        local shards by one ``pread`` each."""
        out: list[bytes | FileReadProblem | None] = [None] * len(indices)
        remote: list[tuple[int, tuple[str, int, int]]] = []
        for k, i in enumerate(indices):
            shard, offset, size, storage, stamp = self.range(int(i))
            try:
                check_size(size, max_bytes)
                if not self.is_remote(int(i)):  # one pread, here
                    out[k] = read_range(shard, offset, size, storage, stamp)
                    continue
            except FileReadProblem as e:
                out[k] = e
                continue
            remote.append((k, (shard, offset, size)))
        if remote:
            assert self.storage is not None  # set for every manifest with a URL shard
            got = self.storage.read_ranges([r for _, r in remote])
            for (k, _), g in zip(remote, got, strict=True):
                out[k] = g
        return out  # type: ignore[return-value]

    def check(self, index: int, *, decode: bool = True,
              max_pixels: int | None = DEFAULT_MAX_PIXELS,
              max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES) -> Finding | None:
        """:func:`extsrc.validate`'s checks of sample ``index``'s image member (``None``: good)."""
        return check_range(*self.range(index), decode=decode, max_pixels=max_pixels,
                           max_file_bytes=max_file_bytes)

    def __repr__(self) -> str:
        return (f"ShardManifest(source={self.source!r}, shards={len(self.shards)}, "
                f"samples={len(self)}, labels_shape={self.labels.shape}, "
                f"skipped={len(self.skipped)})")


def read_shards(
    shards: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    label: str | None = "cls",
    label_field: str | None = None,
    image_extensions: Sequence[str] | None = None,
    on_error: str = "raise",
    storage_options: Mapping[str, Any] | Storage | None = None,
    max_workers: int = 16,
    index_cache: str | os.PathLike[str] | None = None,
) -> ShardManifest:
    """Index webdataset-style tar shards into a :class:`ShardManifest` (see the module's
    docstring for the design and the checks).

    Args:
        shards: a shard (``data/train-000000.tar``), a brace pattern
            (``data/train-{000000..000127}.tar``, ``s3://bucket/train-{0..9}.tar``), a glob
            (``data/train-*.tar``, sorted), or a list of those. Local paths or URLs of any fsspec
            protocol (``s3://``, ``gs://``, ``https://``...; ``pip install fsspec s3fs``).
        label: the extension of the label member: ``"cls"`` (an integer in text, the default),
            any other extension holding an integer in text, ``"json"`` (with ``label_field``),
            or ``None``: no labels (every sample's label is 0).
        label_field: for ``label="json"``, the field holding the label: an integer >= 0, or a
            class name (every sample's one a str): ``classes`` is then the sorted names and the
            labels index into it.
        image_extensions: extensions (case-insensitive, with or without the dot) that mark the
            image member; default :data:`IMAGE_EXTENSIONS`.
        on_error: ``"raise"``: raise :class:`~extsrc.errors.ManifestError` for the first
            problem found; ``"skip"``: leave the bad samples (or shards) out, warn, and keep the
            problems in :attr:`ShardManifest.skipped`.
        storage_options: for URL shards, as for :func:`extsrc.read_manifest`: a dict of fsspec
            options (credentials, ``endpoint_url``...) or a
            :class:`~extsrc.sources.storage.Storage` (requests in flight, retries, timeouts,
            cache too). Samples are read through it: ranged GETs with its retries, counted in
            ``loader.storage_stats()``.
        max_workers: shards indexed at once (threads; remote shards wait on the network).
        index_cache: a folder where each shard's member table is kept (one JSON file per
            shard content: a local shard's size and modification time, an object's size and
            ETag), so that reading the same shards again reads no tar headers (a remote shard
            then costs one metadata request). ``None`` (the default): no cache.
    """
    label, exts = _options(label, label_field, image_extensions, on_error, max_workers)
    storage = storage_arg(storage_options, "read_shards")
    names, source = shard_list(shards, storage)
    if storage is None and any(is_remote_shard(s) for s in names):
        storage = Storage()
    cache = None if index_cache is None else os.path.abspath(os.fspath(index_cache))

    def one(shard: str) -> IndexedShard:
        return index_shard(shard, label=label, label_field=label_field, image_extensions=exts,
                           storage=storage, index_cache=cache)

    remote = any(is_remote_shard(s) for s in names)
    workers = min(max_workers, len(names)) if remote else 1
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            indexed = list(pool.map(one, names))
    else:
        indexed = [one(s) for s in names]
    problems = [p for ix in indexed for p in ix.problems]
    values = [s[4] for ix in indexed for s in ix.samples]
    _report(problems, values, on_error, source, len(names))
    labels, classes = _label_array(values, source)
    samples = [(i, s) for i, ix in enumerate(indexed) for s in ix.samples]
    return ShardManifest(
        paths=tuple(f"{names[i]}/{s[1]}" for i, s in samples),
        labels=labels, classes=classes, lines=tuple(range(1, len(values) + 1)), source=source,
        shards=tuple(names), shard_of=np.array([i for i, _ in samples], dtype=np.int64),
        offsets=np.array([s[2] for _, s in samples], dtype=np.int64),
        sizes=np.array([s[3] for _, s in samples], dtype=np.int64),
        storage=storage, skipped=tuple(problems),
        stamps=tuple(ix.stamp for ix in indexed),
    )


def _options(label: str | None, label_field: str | None,
             image_extensions: Sequence[str] | None, on_error: str, max_workers: int,
             ) -> tuple[str | None, frozenset[str]]:
    """:func:`read_shards`'s options checked: the label extension (lower case, no dot) and the
    image extensions."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"read_shards: on_error must be 'raise' or 'skip', got {on_error!r}")
    if label is not None and (not isinstance(label, str) or not label.strip(".")):
        raise TypeError(f"read_shards: label must be a member extension such as 'cls' or "
                        f"'json', or None, got {label!r}")
    label = None if label is None else label.strip(".").lower()
    if label == "json" and not isinstance(label_field, str):
        raise ValueError("read_shards: label='json' needs label_field=, the name of the JSON "
                         "field that holds the label (e.g. label_field='label')")
    if label != "json" and label_field is not None:
        raise ValueError("read_shards: label_field is read from JSON label members only; pass "
                         "label='json' with it")
    if image_extensions is None:
        exts = frozenset(IMAGE_EXTENSIONS)
    else:
        if isinstance(image_extensions, str) or not all(
                isinstance(e, str) and e.strip(".") for e in image_extensions):
            raise TypeError("read_shards: image_extensions must be a list of extensions such "
                            f"as ['jpg', 'png'], got {image_extensions!r}")
        exts = frozenset(e.strip(".").lower() for e in image_extensions)
    if label is not None and label in exts:
        raise ValueError(f"read_shards: label={label!r} is also an image extension")
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"read_shards: max_workers must be an int >= 1, got {max_workers!r}")
    return label, exts


def _report(problems: list[ShardProblem], values: list[int | str], on_error: str, source: str,
            shards: int) -> None:
    """Raise for the first problem (``on_error="raise"``) or for no samples at all; else warn
    of the problems left out."""
    if problems and on_error == "raise":
        p = problems[0]
        cls = ManifestFileNotFoundError if p.reason == "missing_shard" else ManifestError
        more = f" ({len(problems) - 1} more problem(s) in the shards)" if len(problems) > 1 else ""
        raise cls(f"{p}.{more} Pass on_error='skip' to leave the bad samples out and report "
                  "them", source=source, path=p.path, reason=p.reason)
    if not values:
        raise ManifestError(
            f"{shown(source)}: no samples in {shards} shard(s)"
            + (f" ({len(problems)} problem(s), e.g. {problems[0]})" if problems else
               "; a sample is a group of members with one key, one of them an image"),
            source=source, reason="no_samples")
    if problems:
        counts = Counter(p.reason for p in problems)
        named = "; ".join(str(p) for p in problems[:_MAX_NAMED])
        warnings.warn(
            f"read_shards(on_error='skip'): {shown(source)}: left out {len(problems)} "
            f"problem(s) ({dict(counts)}), e.g. {named}; all of them: manifest.skipped",
            stacklevel=3)


def _label_array(values: list[int | str], source: str) -> tuple[np.ndarray, list[str] | None]:
    """The samples' labels as ``int64``, and the sorted class names when the labels are names
    (JSON labels: every one a name, or every one an integer)."""
    if not any(isinstance(v, str) for v in values):
        return np.array(values, dtype=np.int64), None
    ints = [i for i, v in enumerate(values) if not isinstance(v, str)]
    if ints:
        raise ManifestError(
            f"{shown(source)}: some JSON labels are class names and some integers (sample "
            f"{ints[0] + 1} has {values[ints[0]]!r}); use one kind", source=source,
            reason="bad_label")
    classes = sorted(set(values))  # type: ignore[type-var]
    lookup = {c: i for i, c in enumerate(classes)}
    return np.array([lookup[v] for v in values], dtype=np.int64), classes  # type: ignore[index]
