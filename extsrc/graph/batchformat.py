"""``BatchFormat``: how the image outputs of a batch are laid out, typed and normalised, and how
they are resized to a common size; the DALI operators that do it inside the pipeline.

Every image output (the main image and each op output) goes through the same steps, in this
order, on the GPU when the loader runs there:

1. resize to ``(h, w)``: ``resize_mode="shorter_side"`` scales the image, keeping its aspect
   ratio, until it covers ``(h, w)`` (the shorter side becomes the requested size for a square
   request), then crops the centre ``(h, w)``, like torchvision's ``Resize(s)`` +
   ``CenterCrop(s)``; ``"stretch"`` scales each side to the requested size (circles become
   ellipses when the aspect ratio changes);
2. normalise: ``None`` keeps pixel values (0-255); ``"scale"`` divides by 255 (values in [0, 1]);
   ``(mean, std)`` computes ``(x - mean) / std`` per channel, ``mean`` and ``std`` in pixel units
   0-255 (torchvision's ImageNet constants times 255: :data:`extsrc.IMAGENET_MEAN` and
   :data:`extsrc.IMAGENET_STD`); see :func:`check_mean_std` for what is refused;
3. convert to ``dtype`` (``"uint8"``, ``"float32"``, ``"float16"``, ``"bfloat16"``) and
   ``layout`` (``"NHWC"`` or ``"NCHW"``).

DALI 2.4 has no bfloat16 type: ``"bfloat16"`` outputs are made as float32 by DALI and converted
by torch on the same device as the batch (:meth:`BatchFormat.torch_dtype`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["BatchFormat", "Dtype", "Layout", "Normalize", "ResizeMode", "check_mean_std"]

Layout = Literal["NHWC", "NCHW"]
Dtype = Literal["uint8", "float32", "float16", "bfloat16"]
ResizeMode = Literal["shorter_side", "stretch"]
#: ``None``, ``"scale"`` or ``(mean, std)``: one number or one per channel each, in 0-255 units.
Normalize = Literal["scale"] | tuple[Sequence[float], Sequence[float]] | None


def _per_channel(name: str, value: Any, who: str) -> tuple[float, ...]:
    """One number or a sequence of 1 or 3 finite real numbers (not bools, not strings): the
    images are RGB, and one value applies to every channel."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = (value,)
    elif hasattr(value, "tolist") and getattr(value, "ndim", None) == 1:  # numpy, torch
        value = value.tolist()
    ok = not isinstance(value, (str, bytes)) and isinstance(value, Sequence)
    if ok:
        value = tuple(value)
        ok = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
    if not ok:
        raise ValueError(
            f"{who} {name} must be a number or a sequence of numbers (one per channel, in "
            f"pixel units 0-255), got {value!r}"
        )
    values = tuple(float(v) for v in value)
    if len(values) not in (1, 3):
        raise ValueError(
            f"{who} {name} needs 1 value (every channel) or 3 (R, G, B), got {len(values)}: "
            f"{value!r}"
        )
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{who} {name} must hold finite numbers, got {value!r}")
    return values


def check_mean_std(
    mean: Any, std: Any, who: str = "normalize"
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(mean, std)`` of a normalisation, checked and returned as tuples of floats.

    The one rule for every place that takes them (the loaders' ``normalize``, the presets,
    :func:`extsrc.render_batch`): 1 or 3 finite numbers each, every ``std`` > 0, and in pixel
    units 0-255. Values in 0-1 units (torchvision's ``(0.485, ...)``, ``(0.229, ...)``, or
    ``(0.5, 0.5)``) are refused rather than converted, whether both are or one of them: a
    ``std`` below 1 (one pixel level) or ``mean`` values all strictly between 0 and 1 are
    never statistics of 0-255 images, the numbers alone do not always say which units were
    meant, and a silent conversion would hide the mix-up from a reader comparing the code with
    torchvision's. The error gives the 0-255 equivalents (values within [-1, 1] times 255) and
    names :data:`extsrc.IMAGENET_MEAN` / :data:`extsrc.IMAGENET_STD`. ``mean=0, std=1`` keeps
    pixel values and passes.
    """
    m, s = _per_channel("mean", mean, who), _per_channel("std", std, who)
    if any(v <= 0 for v in s):
        raise ValueError(
            f"{who} std values must be > 0 (each divides a channel), got {s}"
        )
    std_01 = min(s) < 1
    mean_01 = all(0 < v < 1 for v in m)
    if std_01 or mean_01:
        def to255(values: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(round(v * 255, 3) if abs(v) <= 1 else v for v in values)

        pairs = [(m[k % len(m)], s[k % len(s)]) for k in range(max(len(m), len(s)))]
        reach = max(max(abs(mv), abs(255 - mv)) / sv for mv, sv in pairs)
        what = "mean and std look" if mean_01 and std_01 else \
            ("mean looks" if mean_01 else "std looks")
        raise ValueError(
            f"{who} mean={m} std={s}: {what} like 0-1 units (torchvision's), but the loader "
            "normalises pixel values 0-255 (the inputs would reach about "
            f"{reach:,.0f}). In 0-255 units: mean={to255(m)}, std={to255(s)}; for ImageNet "
            "use extsrc.IMAGENET_MEAN and extsrc.IMAGENET_STD (0-255 units), or pass "
            "normalize='scale' for values in [0, 1]"
        )
    return m, s


@dataclass(frozen=True)
class BatchFormat:
    """Layout, dtype, normalisation and resize mode of the image outputs; checked at construction.

    ``normalize`` is held as ``None``, ``"scale"`` or ``(mean_tuple, std_tuple)``.
    """

    layout: Layout = "NHWC"
    dtype: Dtype = "uint8"
    normalize: Any = None
    resize_mode: ResizeMode = "shorter_side"

    def __post_init__(self) -> None:
        if self.layout not in get_args(Layout):
            raise ValueError(f"layout must be 'NHWC' or 'NCHW', got {self.layout!r}")
        if self.dtype not in get_args(Dtype):
            raise ValueError(
                f"dtype must be one of {list(get_args(Dtype))} (a string), got {self.dtype!r}"
            )
        if self.resize_mode not in get_args(ResizeMode):
            raise ValueError(
                f"resize_mode must be 'shorter_side' (keep the aspect ratio, centre crop) or "
                f"'stretch', got {self.resize_mode!r}"
            )
        norm = self.normalize
        if norm is not None and norm != "scale":
            if isinstance(norm, str) or not isinstance(norm, Sequence) or len(norm) != 2:
                raise ValueError(
                    "normalize must be None, 'scale' (divide by 255) or (mean, std) in pixel "
                    f"units 0-255, e.g. (extsrc.IMAGENET_MEAN, extsrc.IMAGENET_STD); got {norm!r}"
                )
            mean, std = check_mean_std(norm[0], norm[1])
            object.__setattr__(self, "normalize", (mean, std))
        if self.normalize is not None and self.dtype == "uint8":
            raise ValueError(
                "normalize gives fractional values, which dtype='uint8' cannot hold; choose "
                "dtype='float32' (or 'float16', 'bfloat16'), or normalize=None"
            )

    @property
    def is_identity(self) -> bool:
        """Whether the images leave DALI as decoded: HWC ``uint8``, pixel values kept."""
        return self.layout == "NHWC" and self.dtype == "uint8" and self.normalize is None

    def mean_std(self) -> tuple[list[float], list[float]]:
        """``(mean, std)`` as DALI's ``crop_mirror_normalize`` takes them."""
        if self.normalize is None:
            return [0.0], [1.0]
        if self.normalize == "scale":
            return [0.0], [255.0]
        mean, std = self.normalize
        return list(mean), list(std)

    def torch_dtype(self) -> Any:
        """The torch dtype of the image outputs in a batch."""
        import torch

        return getattr(torch, self.dtype)

    def finish(self, image: Any, size: tuple[int, int] | None,
               output_layout: str | None = None) -> Any:
        """Add the DALI operators that resize ``image`` to ``size`` (``None``: keep its size) and
        give it this format (bfloat16: float32 here, torch converts). ``output_layout``
        replaces the per-sample layout ``layout`` gives (``"HWC"``/``"CHW"``), for inputs of
        another layout: a video clip ``"FHWC"`` becomes ``"FHWC"``, ``"FCHW"`` or ``"CFHW"``,
        each frame resized alike."""
        from nvidia.dali import fn, types

        crop = None
        if size is not None:
            h, w = size
            if self.resize_mode == "stretch":
                image = fn.resize(image, resize_x=w, resize_y=h)
            else:
                # not_smaller: the scale that makes both sides at least (h, w), one of them equal
                # (aspect ratio kept); the centre crop below cuts the other one down.
                image = fn.resize(image, resize_x=w, resize_y=h, mode="not_smaller")
                crop = (h, w)
        natural = output_layout is None or output_layout in ("HWC", "FHWC")
        if self.is_identity and natural:
            # Images leave as decoded (an op's declared dtype, float32 say, is kept): only the
            # centre crop of "shorter_side", which fn.crop does without converting.
            return image if crop is None else fn.crop(image, crop=crop)
        dali_dtype = {
            "uint8": types.UINT8, "float32": types.FLOAT, "float16": types.FLOAT16,
            "bfloat16": types.FLOAT,
        }[self.dtype]
        mean, std = self.mean_std()
        kw: dict[str, Any] = {}
        if crop is not None:
            kw["crop"] = crop  # centred: crop_pos_x/y default to 0.5
        return fn.crop_mirror_normalize(
            image, dtype=dali_dtype, output_layout=output_layout or self.layout[1:], mean=mean,
            std=std, **kw,
        )
