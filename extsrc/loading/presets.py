"""Presets: the standard ImageNet-style train and validation image pipelines, over any manifest.

They do the job of the classic DALI recipe's ``HybridTrainPipe`` / ``HybridValPipe``:

* train: random resized crop -> random horizontal flip -> normalise -> CHW ``float32``;
* val: resize the shorter side (triangular filter) -> centre crop -> normalise -> CHW ``float32``.

A preset is a frozen dataclass whose ``__call__(image, *, gpu)`` adds DALI operators to the graph;
:class:`extsrc.Loader` applies it to the main image through ``stages=`` (on the GPU when the loader
runs there). Custom ops combine with it: they still see the decoded image, and their outputs are
resized by the loader's ``resize=`` and given the preset's format (``layout="NCHW"``,
``dtype="float32"``, ``normalize=(preset.mean, preset.std)``: pass other values to override),
while ``image`` becomes the preset's output.

>>> from extsrc.loading.presets import train_loader, val_loader
>>> train = train_loader("train.csv", batch_size=256)           # doctest: +SKIP
>>> val = val_loader("val.csv", batch_size=256, size=256, crop=224)  # doctest: +SKIP
>>> batch = next(iter(train)); batch["image"].shape             # doctest: +SKIP
torch.Size([256, 3, 224, 224])
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from augment_ops.registry import Op
from extsrc._util import argcheck
from extsrc.graph.batchformat import check_mean_std
from extsrc.loading.loader import Loader
from extsrc.loading.options import FLAT, GROUPS, from_flat
from extsrc.sources.manifest import Manifest

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "TrainPreset",
    "ValPreset",
    "train_loader",
    "val_loader",
]

#: ImageNet channel means and standard deviations in pixel units (0-255), as the recipe uses them.
IMAGENET_MEAN: tuple[float, float, float] = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD: tuple[float, float, float] = (0.229 * 255, 0.224 * 255, 0.225 * 255)


#: Largest ``crop`` / ``size`` accepted, as for the loader's ``resize``.
MAX_SIDE = 65_536


def _side(value: Any, name: str) -> int:
    """A crop or resize side: an int (numpy integers too) in ``[1, MAX_SIDE]``."""
    return cast(int, argcheck.check_int(value, name, minimum=1, maximum=MAX_SIDE, what="pixels"))


def _reals(value: Any, name: str, n: int) -> tuple[float, ...]:
    """``n`` finite real numbers (not bools, not strings), as floats."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence of {n} numbers, got {value!r}")
    if len(value) != n:
        raise ValueError(f"{name} needs {n} values, got {len(value)}: {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must hold numbers, got {type(v).__name__} {v!r} in {value!r}")
        if not math.isfinite(v):
            raise ValueError(f"{name} must hold finite numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _check_common(preset: Any) -> None:
    """``crop``, ``mean`` and ``std`` of a preset, checked and stored as plain numbers."""
    kind = type(preset).__name__
    object.__setattr__(preset, "crop", _side(preset.crop, f"{kind}: crop"))
    mean = _reals(preset.mean, f"{kind}: mean (R, G, B)", 3)
    std = _reals(preset.std, f"{kind}: std (R, G, B)", 3)
    mean, std = check_mean_std(mean, std, f"{kind}:")  # > 0, and in 0-255 units
    object.__setattr__(preset, "mean", mean)
    object.__setattr__(preset, "std", std)


@dataclass(frozen=True)
class TrainPreset:
    """Random resized crop to ``crop`` x ``crop``, mirror with probability ``mirror_p``, normalise.

    ``random_area`` is the range of the crop's area as a fraction of the image's (torchvision's
    default; the classic DALI recipe used ``(0.08, 1.25)``), ``random_aspect_ratio`` the range of
    its aspect ratio. ``mean`` / ``std`` are in pixel units (0-255). Output: CHW ``float32``.
    Randomness comes from DALI's generator, seeded by the loader's ``seed``.
    """

    crop: int = 224
    random_area: tuple[float, float] = (0.08, 1.0)
    random_aspect_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    mirror_p: float = 0.5

    def __post_init__(self) -> None:
        _check_common(self)
        for name in ("random_area", "random_aspect_ratio"):
            lo, hi = _reals(getattr(self, name), f"TrainPreset: {name} (lo, hi)", 2)
            if not 0 < lo <= hi:
                raise ValueError(f"TrainPreset: {name} must be (lo, hi) with 0 < lo <= hi, got "
                                 f"{getattr(self, name)!r}")
            object.__setattr__(self, name, (lo, hi))
        (p,) = _reals((self.mirror_p,), "TrainPreset: mirror_p", 1)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"TrainPreset: mirror_p must be in [0, 1], got {self.mirror_p!r}")
        object.__setattr__(self, "mirror_p", p)

    def __call__(self, image: Any, *, gpu: bool) -> Any:
        from nvidia.dali import fn, types

        image = fn.random_resized_crop(
            image, size=(self.crop, self.crop), random_area=list(self.random_area),
            random_aspect_ratio=list(self.random_aspect_ratio),
        )
        return fn.crop_mirror_normalize(
            image, dtype=types.FLOAT, output_layout="CHW",
            mean=list(self.mean), std=list(self.std),
            mirror=fn.random.coin_flip(probability=self.mirror_p),
        )


@dataclass(frozen=True)
class ValPreset:
    """Resize the shorter side to ``size`` (triangular filter), centre crop ``crop``, normalise.

    ``mean`` / ``std`` are in pixel units (0-255). Output: CHW ``float32``; deterministic.
    """

    size: int = 256
    crop: int = 224
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    def __post_init__(self) -> None:
        _check_common(self)
        object.__setattr__(self, "size", _side(self.size, "ValPreset: size"))
        if self.crop > self.size:
            raise ValueError(
                f"crop ({self.crop}) is larger than the resized shorter side ({self.size}); "
                "use size >= crop"
            )

    def __call__(self, image: Any, *, gpu: bool) -> Any:
        from nvidia.dali import fn, types

        image = fn.resize(image, resize_shorter=self.size, interp_type=types.INTERP_TRIANGULAR)
        return fn.crop_mirror_normalize(
            image, dtype=types.FLOAT, output_layout="CHW", crop=(self.crop, self.crop),
            mean=list(self.mean), std=list(self.std),
        )


def _loader_kwargs(who: str, ops: Sequence[str | Op], preset: TrainPreset | ValPreset,
                   kwargs: dict[str, Any], *, shuffle: bool, last_batch: str) -> dict[str, Any]:
    """The preset's defaults under the user's :class:`~extsrc.Loader` arguments: option groups
    as given, flat keywords of earlier releases mapped onto them (with their warning)."""
    kwargs.setdefault("shuffle", shuffle)
    # Op outputs are stacked into tensors too: give them the crop size unless told otherwise.
    if ops and "resize" not in kwargs:
        kwargs["resize"] = (preset.crop, preset.crop)
    # ... and the preset's format (NCHW float32, its mean and std), so that every image output
    # of a batch follows one convention.
    base = {"sampling": {"last_batch": last_batch},
            "format": {"layout": "NCHW", "dtype": "float32",
                       "normalize": (preset.mean, preset.std)}}
    flat = {k: kwargs.pop(k) for k in list(kwargs) if k in FLAT}
    groups = {k: kwargs.pop(k, None) for k in GROUPS}
    kwargs.update(from_flat(who, groups, flat, base=base))
    return kwargs


def train_loader(
    manifest: Manifest | str | os.PathLike[str],
    *,
    batch_size: int,
    crop: int = 224,
    ops: Sequence[str | Op] = (),
    preset: TrainPreset | None = None,
    **loader_kwargs: Any,
) -> Loader:
    """A :class:`~extsrc.Loader` whose ``image`` is ``TrainPreset(crop)``: (B, 3, crop, crop).

    Defaults: ``shuffle=True`` and ``Sampling(last_batch="drop")`` (every batch full, every
    shard the same number of batches); any :class:`~extsrc.Loader` argument can be passed to
    override them. ``ops`` outputs are resized to ``crop`` x ``crop`` unless ``resize=`` is
    given, in the preset's format (``BatchFormat`` NCHW ``float32``, normalised) unless
    ``format=`` is given. Pass
    ``preset=TrainPreset(...)`` to change more than the crop size.
    """
    if preset is not None and not isinstance(preset, TrainPreset):
        raise TypeError(f"train_loader: preset must be a TrainPreset or None, got "
                        f"{type(preset).__name__}")
    preset = preset if preset is not None else TrainPreset(crop=crop)
    _loader_kwargs("train_loader", ops, preset, loader_kwargs, shuffle=True, last_batch="drop")
    stages = (*loader_kwargs.pop("stages", ()), preset)
    return Loader(manifest, batch_size=batch_size, ops=ops, stages=stages, **loader_kwargs)


def val_loader(
    manifest: Manifest | str | os.PathLike[str],
    *,
    batch_size: int,
    size: int = 256,
    crop: int = 224,
    ops: Sequence[str | Op] = (),
    preset: ValPreset | None = None,
    **loader_kwargs: Any,
) -> Loader:
    """A :class:`~extsrc.Loader` whose ``image`` is ``ValPreset(size, crop)`` output.

    Defaults: ``shuffle=False`` and ``Sampling(last_batch="partial")`` (every sample exactly
    once; the last batch may be short). ``ops`` outputs are resized to ``crop`` x ``crop``
    unless ``resize=`` is given, in the preset's format (``BatchFormat`` NCHW ``float32``,
    normalised) unless ``format=`` is given.
    """
    if preset is not None and not isinstance(preset, ValPreset):
        raise TypeError(f"val_loader: preset must be a ValPreset or None, got "
                        f"{type(preset).__name__}")
    preset = preset if preset is not None else ValPreset(size=size, crop=crop)
    _loader_kwargs("val_loader", ops, preset, loader_kwargs, shuffle=False, last_batch="partial")
    stages = (*loader_kwargs.pop("stages", ()), preset)
    return Loader(manifest, batch_size=batch_size, ops=ops, stages=stages, **loader_kwargs)
