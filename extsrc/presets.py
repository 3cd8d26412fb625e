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

>>> from extsrc.presets import train_loader, val_loader
>>> train = train_loader("train.csv", batch_size=256)           # doctest: +SKIP
>>> val = val_loader("val.csv", batch_size=256, size=256, crop=224)  # doctest: +SKIP
>>> batch = next(iter(train)); batch["image"].shape             # doctest: +SKIP
torch.Size([256, 3, 224, 224])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from augment_ops.registry import Op
from extsrc.loader import Loader
from extsrc.manifest import Manifest

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


def _check_common(crop: int, mean: Sequence[float], std: Sequence[float]) -> None:
    if isinstance(crop, bool) or not isinstance(crop, int) or crop < 1:
        raise ValueError(f"crop must be an int >= 1, got {crop!r}")
    if len(mean) != 3 or len(std) != 3:
        raise ValueError(f"mean and std need 3 values (R, G, B), got {mean!r} and {std!r}")
    if any(s <= 0 for s in std):
        raise ValueError(f"std values must be > 0, got {std!r}")


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
        _check_common(self.crop, self.mean, self.std)
        lo, hi = self.random_area
        if not 0 < lo <= hi:
            raise ValueError(f"random_area must be (lo, hi) with 0 < lo <= hi, got "
                             f"{self.random_area!r}")
        if not 0.0 <= self.mirror_p <= 1.0:
            raise ValueError(f"mirror_p must be in [0, 1], got {self.mirror_p!r}")

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
        _check_common(self.crop, self.mean, self.std)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"size must be an int >= 1, got {self.size!r}")
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


def _extra_resize(ops: Sequence[str | Op], crop: int, kwargs: dict[str, Any],
                  preset: TrainPreset | ValPreset) -> None:
    # Op outputs are stacked into tensors too: give them the crop size unless told otherwise.
    if ops and "resize" not in kwargs:
        kwargs["resize"] = (crop, crop)
    # ... and the preset's format (NCHW float32, its mean and std), so that every image output
    # of a batch follows one convention.
    kwargs.setdefault("layout", "NCHW")
    kwargs.setdefault("dtype", "float32")
    kwargs.setdefault("normalize", (preset.mean, preset.std))


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

    Defaults: ``shuffle=True`` and ``last_batch="drop"`` (every batch full, every shard the same
    number of batches); any :class:`~extsrc.Loader` argument can be passed to override them.
    ``ops`` outputs are resized to ``crop`` x ``crop`` unless ``resize=`` is given, in the
    preset's format (NCHW ``float32``, normalised) unless ``layout``/``dtype``/``normalize`` are
    given. Pass
    ``preset=TrainPreset(...)`` to change more than the crop size.
    """
    preset = preset if preset is not None else TrainPreset(crop=crop)
    loader_kwargs.setdefault("shuffle", True)
    loader_kwargs.setdefault("last_batch", "drop")
    _extra_resize(ops, preset.crop, loader_kwargs, preset)
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

    Defaults: ``shuffle=False`` and ``last_batch="partial"`` (every sample exactly once; the last
    batch may be short). ``ops`` outputs are resized to ``crop`` x ``crop`` unless ``resize=`` is
    given, in the preset's format (NCHW ``float32``, normalised) unless ``layout``/``dtype``/
    ``normalize`` are given.
    """
    preset = preset if preset is not None else ValPreset(size=size, crop=crop)
    loader_kwargs.setdefault("shuffle", False)
    loader_kwargs.setdefault("last_batch", "partial")
    _extra_resize(ops, preset.crop, loader_kwargs, preset)
    stages = (*loader_kwargs.pop("stages", ()), preset)
    return Loader(manifest, batch_size=batch_size, ops=ops, stages=stages, **loader_kwargs)
