"""Augmentations of MONAI 0.6.0 (Project-MONAI/MONAI, tag 0.6.0, commit
0ad9e73639e30f4f1af5a1f4a45da9cb09930179): array transforms of
monai/transforms/intensity/array.py, spatial/array.py and croppad/array.py, with the helpers
they call (monai/transforms/utils.py, monai/utils/misc.py, monai/utils/enums.py). 0.6.0 is a
release whose array transforms work on numpy arrays (later releases convert to torch tensors
first). MONAI is not installed here: the classes' bodies are copied below as written, on a
minimal ``Transform`` / ``RandomizableTransform`` (monai/transforms/transform.py) whose ``R``
(a ``np.random.RandomState`` in MONAI) is the op's generator: ``self.R.rand()`` ->
``self.R.random()``, ``self.R.randint(n)`` -> ``self.R.integers(n)``.

Each op builds the transform with the arguments it is given and calls it on one image, as a
MONAI ``Compose`` does. MONAI's images are channel-first and, as ``LoadImage`` gives them,
float32: the intensity transforms get the image cast to float32 (they are elementwise, so the
layout does not matter to them); the spatial transforms index spatial axes after a leading
channel axis, so they get the image transposed to CHW and their output transposed back to HWC
(unavoidable: on an HWC image they would flip or pad the wrong axes)."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: UP006, UP007, UP035, UP045, E501, RUF005, B905, B028

from __future__ import annotations

import collections.abc
from enum import Enum
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union
from warnings import warn

import numpy as np
import torch
from realops import realop

LIB = "MONAI"
SRC = "Project-MONAI/MONAI@0.6.0"
INTENSITY = f"{SRC} monai/transforms/intensity/array.py"
SPATIAL = f"{SRC} monai/transforms/spatial/array.py"
CROPPAD = f"{SRC} monai/transforms/croppad/array.py"


class Transform:
    # monai/transforms/transform.py @0.6.0: Transform (its abstract __call__ left out)
    pass


class RandomizableTransform(Transform):
    # monai/transforms/transform.py @0.6.0: Randomizable.R and RandomizableTransform (R is the
    # op's generator, set by the op)
    R: np.random.Generator

    def __init__(self, prob: float = 1.0, do_transform: bool = True):
        self._do_transform = do_transform
        self.prob = min(max(prob, 0.0), 1.0)

    def randomize(self, data: Any) -> None:
        self._do_transform = self.R.random() < self.prob


def issequenceiterable(obj: Any) -> bool:
    # monai/utils/misc.py @0.6.0: issequenceiterable
    if isinstance(obj, torch.Tensor):
        return int(obj.dim()) > 0  # a 0-d tensor is not iterable
    return isinstance(obj, collections.abc.Iterable) and not isinstance(obj, (str, bytes))


def ensure_tuple(vals: Any) -> Tuple[Any, ...]:
    # monai/utils/misc.py @0.6.0: ensure_tuple
    if not issequenceiterable(vals):
        vals = (vals,)

    return tuple(vals)


def ensure_tuple_rep(tup: Any, dim: int) -> Tuple[Any, ...]:
    # monai/utils/misc.py @0.6.0: ensure_tuple_rep
    if not issequenceiterable(tup):
        return (tup,) * dim
    if len(tup) == dim:
        return tuple(tup)

    raise ValueError(f"Sequence must have length {dim}, got {len(tup)}.")


def fall_back_tuple(
    user_provided: Any, default: Union[Sequence, np.ndarray], func: Callable = lambda x: x and x > 0
) -> Tuple[Any, ...]:
    # monai/utils/misc.py @0.6.0: fall_back_tuple
    ndim = len(default)
    user = ensure_tuple_rep(user_provided, ndim)
    return tuple(  # use the default values if user provided is not valid
        user_c if func(user_c) else default_c for default_c, user_c in zip(default, user)
    )


def dtype_torch_to_numpy(dtype):
    # monai/utils/misc.py @0.6.0: dtype_torch_to_numpy (its table of torch dtypes, for the
    # dtypes an image has here)
    return {
        torch.uint8: np.uint8,
        torch.float32: np.float32,
        torch.float64: np.float64,
    }[dtype]


class NumpyPadMode(Enum):
    # monai/utils/enums.py @0.6.0: NumpyPadMode
    CONSTANT = "constant"
    EDGE = "edge"
    LINEAR_RAMP = "linear_ramp"
    MAXIMUM = "maximum"
    MEAN = "mean"
    MEDIAN = "median"
    MINIMUM = "minimum"
    REFLECT = "reflect"
    SYMMETRIC = "symmetric"
    WRAP = "wrap"


class Method(Enum):
    # monai/utils/enums.py @0.6.0: Method
    SYMMETRIC = "symmetric"
    END = "end"


def rescale_array(arr: np.ndarray, minv: float = 0.0, maxv: float = 1.0, dtype=np.float32):
    # monai/transforms/utils.py @0.6.0: rescale_array
    if dtype is not None:
        arr = arr.astype(dtype)

    mina = np.min(arr)
    maxa = np.max(arr)

    if mina == maxa:
        return arr * minv

    norm = (arr - mina) / (maxa - mina)  # normalize the array first
    return (norm * (maxv - minv)) + minv  # rescale by minv and maxv, which is the normalized array by default


def map_spatial_axes(
    img_ndim: int,
    spatial_axes: Optional[Union[Sequence[int], int]] = None,
    channel_first: bool = True,
) -> List[int]:
    # monai/transforms/utils.py @0.6.0: map_spatial_axes
    if spatial_axes is None:
        spatial_axes_ = list(range(1, img_ndim) if channel_first else range(0, img_ndim - 1))
    else:
        spatial_axes_ = []
        for a in ensure_tuple(spatial_axes):
            if channel_first:
                spatial_axes_.append(a if a < 0 else a + 1)
            else:
                spatial_axes_.append(a - 1 if a < 0 else a)

    return spatial_axes_


class RandGaussianNoise(RandomizableTransform):
    # monai/transforms/intensity/array.py @0.6.0: RandGaussianNoise
    def __init__(self, prob: float = 0.1, mean: Union[Sequence[float], float] = 0.0, std: float = 0.1) -> None:
        RandomizableTransform.__init__(self, prob)
        self.mean = mean
        self.std = std
        self._noise: np.ndarray

    def randomize(self, im_shape: Sequence[int]) -> None:
        super().randomize(None)
        self._noise = self.R.normal(self.mean, self.R.uniform(0, self.std), size=im_shape)

    def __call__(self, img: Union[torch.Tensor, np.ndarray]) -> Union[torch.Tensor, np.ndarray]:
        self.randomize(img.shape)
        if self._noise is None:
            raise AssertionError
        if not self._do_transform:
            return img
        dtype = dtype_torch_to_numpy(img.dtype) if isinstance(img, torch.Tensor) else img.dtype
        return img + self._noise.astype(dtype)


class ShiftIntensity(Transform):
    # monai/transforms/intensity/array.py @0.6.0: ShiftIntensity
    def __init__(self, offset: float) -> None:
        self.offset = offset

    def __call__(self, img: np.ndarray) -> np.ndarray:
        return np.asarray((img + self.offset), dtype=img.dtype)


class RandShiftIntensity(RandomizableTransform):
    # monai/transforms/intensity/array.py @0.6.0: RandShiftIntensity
    def __init__(self, offsets: Union[Tuple[float, float], float], prob: float = 0.1) -> None:
        RandomizableTransform.__init__(self, prob)
        if isinstance(offsets, (int, float)):
            self.offsets = (min(-offsets, offsets), max(-offsets, offsets))
        else:
            if len(offsets) != 2:
                raise AssertionError("offsets should be a number or pair of numbers.")
            self.offsets = (min(offsets), max(offsets))
        self._offset = self.offsets[0]

    def randomize(self, data: Optional[Any] = None) -> None:
        self._offset = self.R.uniform(low=self.offsets[0], high=self.offsets[1])
        super().randomize(None)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        self.randomize()
        if not self._do_transform:
            return img
        shifter = ShiftIntensity(self._offset)
        return shifter(img)


class ScaleIntensity(Transform):
    # monai/transforms/intensity/array.py @0.6.0: ScaleIntensity
    def __init__(
        self, minv: Optional[float] = 0.0, maxv: Optional[float] = 1.0, factor: Optional[float] = None
    ) -> None:
        self.minv = minv
        self.maxv = maxv
        self.factor = factor

    def __call__(self, img: np.ndarray) -> np.ndarray:
        if self.minv is not None and self.maxv is not None:
            return np.asarray(rescale_array(img, self.minv, self.maxv, img.dtype))
        if self.factor is not None:
            return np.asarray(img * (1 + self.factor), dtype=img.dtype)
        raise ValueError("Incompatible values: minv=None or maxv=None and factor=None.")


class RandScaleIntensity(RandomizableTransform):
    # monai/transforms/intensity/array.py @0.6.0: RandScaleIntensity
    def __init__(self, factors: Union[Tuple[float, float], float], prob: float = 0.1) -> None:
        RandomizableTransform.__init__(self, prob)
        if isinstance(factors, (int, float)):
            self.factors = (min(-factors, factors), max(-factors, factors))
        else:
            if len(factors) != 2:
                raise AssertionError("factors should be a number or pair of numbers.")
            self.factors = (min(factors), max(factors))
        self.factor = self.factors[0]

    def randomize(self, data: Optional[Any] = None) -> None:
        self.factor = self.R.uniform(low=self.factors[0], high=self.factors[1])
        super().randomize(None)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        self.randomize()
        if not self._do_transform:
            return img
        scaler = ScaleIntensity(minv=None, maxv=None, factor=self.factor)
        return scaler(img)


class NormalizeIntensity(Transform):
    # monai/transforms/intensity/array.py @0.6.0: NormalizeIntensity
    def __init__(
        self,
        subtrahend: Union[Sequence, np.ndarray, None] = None,
        divisor: Union[Sequence, np.ndarray, None] = None,
        nonzero: bool = False,
        channel_wise: bool = False,
        dtype=np.float32,
    ) -> None:
        self.subtrahend = subtrahend
        self.divisor = divisor
        self.nonzero = nonzero
        self.channel_wise = channel_wise
        self.dtype = dtype

    def _normalize(self, img: np.ndarray, sub=None, div=None) -> np.ndarray:
        slices = (img != 0) if self.nonzero else np.ones(img.shape, dtype=bool)
        if not np.any(slices):
            return img

        _sub = sub if sub is not None else np.mean(img[slices])
        if isinstance(_sub, np.ndarray):
            _sub = _sub[slices]

        _div = div if div is not None else np.std(img[slices])
        if np.isscalar(_div):
            if _div == 0.0:
                _div = 1.0
        elif isinstance(_div, np.ndarray):
            _div = _div[slices]
            _div[_div == 0.0] = 1.0
        img[slices] = (img[slices] - _sub) / _div
        return img

    def __call__(self, img: np.ndarray) -> np.ndarray:
        if self.channel_wise:
            if self.subtrahend is not None and len(self.subtrahend) != len(img):
                raise ValueError(f"img has {len(img)} channels, but subtrahend has {len(self.subtrahend)} components.")
            if self.divisor is not None and len(self.divisor) != len(img):
                raise ValueError(f"img has {len(img)} channels, but divisor has {len(self.divisor)} components.")

            for i, d in enumerate(img):
                img[i] = self._normalize(
                    d,
                    sub=self.subtrahend[i] if self.subtrahend is not None else None,
                    div=self.divisor[i] if self.divisor is not None else None,
                )
        else:
            img = self._normalize(img, self.subtrahend, self.divisor)

        return img.astype(self.dtype)


class ThresholdIntensity(Transform):
    # monai/transforms/intensity/array.py @0.6.0: ThresholdIntensity
    def __init__(self, threshold: float, above: bool = True, cval: float = 0.0) -> None:
        if not isinstance(threshold, (int, float)):
            raise AssertionError("threshold must be a float or int number.")
        self.threshold = threshold
        self.above = above
        self.cval = cval

    def __call__(self, img: np.ndarray) -> np.ndarray:
        return np.asarray(
            np.where(img > self.threshold if self.above else img < self.threshold, img, self.cval), dtype=img.dtype
        )


class ScaleIntensityRange(Transform):
    # monai/transforms/intensity/array.py @0.6.0: ScaleIntensityRange
    def __init__(self, a_min: float, a_max: float, b_min: float, b_max: float, clip: bool = False) -> None:
        self.a_min = a_min
        self.a_max = a_max
        self.b_min = b_min
        self.b_max = b_max
        self.clip = clip

    def __call__(self, img: np.ndarray):
        if self.a_max - self.a_min == 0.0:
            warn("Divide by zero (a_min == a_max)", Warning)
            return img - self.a_min + self.b_min

        img = (img - self.a_min) / (self.a_max - self.a_min)
        img = img * (self.b_max - self.b_min) + self.b_min
        if self.clip:
            img = np.asarray(np.clip(img, self.b_min, self.b_max))
        return img


class AdjustContrast(Transform):
    # monai/transforms/intensity/array.py @0.6.0: AdjustContrast
    def __init__(self, gamma: float) -> None:
        if not isinstance(gamma, (int, float)):
            raise AssertionError("gamma must be a float or int number.")
        self.gamma = gamma

    def __call__(self, img: np.ndarray):
        epsilon = 1e-7
        img_min = img.min()
        img_range = img.max() - img_min
        return np.power(((img - img_min) / float(img_range + epsilon)), self.gamma) * img_range + img_min


class RandAdjustContrast(RandomizableTransform):
    # monai/transforms/intensity/array.py @0.6.0: RandAdjustContrast
    def __init__(self, prob: float = 0.1, gamma: Union[Sequence[float], float] = (0.5, 4.5)) -> None:
        RandomizableTransform.__init__(self, prob)

        if isinstance(gamma, (int, float)):
            if gamma <= 0.5:
                raise AssertionError(
                    "if gamma is single number, must greater than 0.5 and value is picked from (0.5, gamma)"
                )
            self.gamma = (0.5, gamma)
        else:
            if len(gamma) != 2:
                raise AssertionError("gamma should be a number or pair of numbers.")
            self.gamma = (min(gamma), max(gamma))

        self.gamma_value: float

    def randomize(self, data: Optional[Any] = None) -> None:
        super().randomize(None)
        self.gamma_value = self.R.uniform(low=self.gamma[0], high=self.gamma[1])

    def __call__(self, img: np.ndarray):
        self.randomize()
        if self.gamma_value is None:
            raise AssertionError
        if not self._do_transform:
            return img
        adjuster = AdjustContrast(self.gamma_value)
        return adjuster(img)


class Flip(Transform):
    # monai/transforms/spatial/array.py @0.6.0: Flip
    def __init__(self, spatial_axis: Optional[Union[Sequence[int], int]] = None) -> None:
        self.spatial_axis = spatial_axis

    def __call__(self, img: np.ndarray) -> np.ndarray:
        result: np.ndarray = np.flip(img, map_spatial_axes(img.ndim, self.spatial_axis))
        return result.astype(img.dtype)


class RandFlip(RandomizableTransform):
    # monai/transforms/spatial/array.py @0.6.0: RandFlip
    def __init__(self, prob: float = 0.1, spatial_axis: Optional[Union[Sequence[int], int]] = None) -> None:
        RandomizableTransform.__init__(self, prob)
        self.flipper = Flip(spatial_axis=spatial_axis)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        self.randomize(None)
        if not self._do_transform:
            return img
        return self.flipper(img)


class Rotate90(Transform):
    # monai/transforms/spatial/array.py @0.6.0: Rotate90
    def __init__(self, k: int = 1, spatial_axes: Tuple[int, int] = (0, 1)) -> None:
        self.k = k
        spatial_axes_: Tuple[int, int] = ensure_tuple(spatial_axes)  # type: ignore
        if len(spatial_axes_) != 2:
            raise ValueError("spatial_axes must be 2 int numbers to indicate the axes to rotate 90 degrees.")
        self.spatial_axes = spatial_axes_

    def __call__(self, img: np.ndarray) -> np.ndarray:
        result: np.ndarray = np.rot90(img, self.k, map_spatial_axes(img.ndim, self.spatial_axes))
        return result.astype(img.dtype)


class RandRotate90(RandomizableTransform):
    # monai/transforms/spatial/array.py @0.6.0: RandRotate90
    def __init__(self, prob: float = 0.1, max_k: int = 3, spatial_axes: Tuple[int, int] = (0, 1)) -> None:
        RandomizableTransform.__init__(self, prob)
        self.max_k = max_k
        self.spatial_axes = spatial_axes

        self._rand_k = 0

    def randomize(self, data: Optional[Any] = None) -> None:
        self._rand_k = self.R.integers(self.max_k) + 1
        super().randomize(None)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        self.randomize()
        if not self._do_transform:
            return img
        rotator = Rotate90(self._rand_k, self.spatial_axes)
        return rotator(img)


class SpatialPad(Transform):
    # monai/transforms/croppad/array.py @0.6.0: SpatialPad
    def __init__(
        self,
        spatial_size: Union[Sequence[int], int],
        method: Union[Method, str] = Method.SYMMETRIC,
        mode: Union[NumpyPadMode, str] = NumpyPadMode.CONSTANT,
        **np_kwargs,
    ) -> None:
        self.spatial_size = spatial_size
        self.method: Method = Method(method)
        self.mode: NumpyPadMode = NumpyPadMode(mode)
        self.np_kwargs = np_kwargs

    def _determine_data_pad_width(self, data_shape: Sequence[int]) -> List[Tuple[int, int]]:
        spatial_size = fall_back_tuple(self.spatial_size, data_shape)
        if self.method == Method.SYMMETRIC:
            pad_width = []
            for i, sp_i in enumerate(spatial_size):
                width = max(sp_i - data_shape[i], 0)
                pad_width.append((width // 2, width - (width // 2)))
            return pad_width
        return [(0, max(sp_i - data_shape[i], 0)) for i, sp_i in enumerate(spatial_size)]

    def __call__(self, img: np.ndarray, mode: Optional[Union[NumpyPadMode, str]] = None) -> np.ndarray:
        data_pad_width = self._determine_data_pad_width(img.shape[1:])
        all_pad_width = [(0, 0)] + data_pad_width
        if not np.asarray(all_pad_width).any():
            # all zeros, skip padding
            return img

        mode = self.mode.value if mode is None else NumpyPadMode(mode).value
        img = np.pad(img, all_pad_width, mode=mode, **self.np_kwargs)
        return img


class SpatialCrop(Transform):
    # monai/transforms/croppad/array.py @0.6.0: SpatialCrop
    def __init__(
        self,
        roi_center: Union[Sequence[int], np.ndarray, None] = None,
        roi_size: Union[Sequence[int], np.ndarray, None] = None,
        roi_start: Union[Sequence[int], np.ndarray, None] = None,
        roi_end: Union[Sequence[int], np.ndarray, None] = None,
        roi_slices: Optional[Sequence[slice]] = None,
    ) -> None:
        if roi_slices:
            if not all(s.step is None or s.step == 1 for s in roi_slices):
                raise ValueError("Only slice steps of 1/None are currently supported")
            self.slices = list(roi_slices)
        else:
            if roi_center is not None and roi_size is not None:
                roi_center = np.asarray(roi_center, dtype=np.int16)
                roi_size = np.asarray(roi_size, dtype=np.int16)
                roi_start_np = np.maximum(roi_center - np.floor_divide(roi_size, 2), 0)
                roi_end_np = np.maximum(roi_start_np + roi_size, roi_start_np)
            else:
                if roi_start is None or roi_end is None:
                    raise ValueError("Please specify either roi_center, roi_size or roi_start, roi_end.")
                roi_start_np = np.maximum(np.asarray(roi_start, dtype=np.int16), 0)
                roi_end_np = np.maximum(np.asarray(roi_end, dtype=np.int16), roi_start_np)
            # Allow for 1D by converting back to np.array (since np.maximum will convert to int)
            roi_start_np = roi_start_np if isinstance(roi_start_np, np.ndarray) else np.array([roi_start_np])
            roi_end_np = roi_end_np if isinstance(roi_end_np, np.ndarray) else np.array([roi_end_np])
            # convert to slices
            self.slices = [slice(s, e) for s, e in zip(roi_start_np, roi_end_np)]

    def __call__(self, img: Union[np.ndarray, torch.Tensor]):
        sd = min(len(self.slices), len(img.shape[1:]))  # spatial dims
        slices = [slice(None)] + self.slices[:sd]
        return img[tuple(slices)]


class CenterSpatialCrop(Transform):
    # monai/transforms/croppad/array.py @0.6.0: CenterSpatialCrop
    def __init__(self, roi_size: Union[Sequence[int], int]) -> None:
        self.roi_size = roi_size

    def __call__(self, img: np.ndarray):
        roi_size = fall_back_tuple(self.roi_size, img.shape[1:])
        center = [i // 2 for i in img.shape[1:]]
        cropper = SpatialCrop(roi_center=center, roi_size=roi_size)
        return cropper(img)


# monai/transforms/intensity/array.py @0.6.0: ScaleIntensity (to [0, 1])
@realop(LIB, f"{INTENSITY}: ScaleIntensity", dtype=np.float32)
def monai_scale_intensity(img: np.ndarray, minv: float = 0.0, maxv: float = 1.0) -> np.ndarray:
    return ScaleIntensity(minv=minv, maxv=maxv)(img.astype(np.float32))


# monai/transforms/intensity/array.py @0.6.0: RandScaleIntensity (factors=0.1, prob=0.5)
@realop(LIB, f"{INTENSITY}: RandScaleIntensity", dtype=np.float32)
def monai_rand_scale_intensity(img: np.ndarray, rng: np.random.Generator, factors: float = 0.1,
                               prob: float = 0.5) -> np.ndarray:
    t = RandScaleIntensity(factors, prob=prob)
    t.R = rng
    return t(img.astype(np.float32))


# monai/transforms/intensity/array.py @0.6.0: RandShiftIntensity (offsets=10, prob=0.5)
@realop(LIB, f"{INTENSITY}: RandShiftIntensity", dtype=np.float32)
def monai_rand_shift_intensity(img: np.ndarray, rng: np.random.Generator, offsets: float = 10.0,
                               prob: float = 0.5) -> np.ndarray:
    t = RandShiftIntensity(offsets, prob=prob)
    t.R = rng
    return t(img.astype(np.float32))


# monai/transforms/intensity/array.py @0.6.0: NormalizeIntensity (the image's mean and std)
@realop(LIB, f"{INTENSITY}: NormalizeIntensity", dtype=np.float32)
def monai_normalize_intensity(img: np.ndarray, nonzero: bool = False) -> np.ndarray:
    return NormalizeIntensity(nonzero=nonzero)(img.astype(np.float32))


# monai/transforms/intensity/array.py @0.6.0: ThresholdIntensity (keep values above 100, 0
# elsewhere)
@realop(LIB, f"{INTENSITY}: ThresholdIntensity", dtype=np.float32)
def monai_threshold_intensity(img: np.ndarray, threshold: float = 100, above: bool = True,
                              cval: float = 0.0) -> np.ndarray:
    return ThresholdIntensity(threshold, above=above, cval=cval)(img.astype(np.float32))


# monai/transforms/intensity/array.py @0.6.0: ScaleIntensityRange ([0, 255] to [0, 1], clipped)
@realop(LIB, f"{INTENSITY}: ScaleIntensityRange", dtype=np.float32)
def monai_scale_intensity_range(img: np.ndarray, a_min: float = 0.0, a_max: float = 255.0,
                                b_min: float = 0.0, b_max: float = 1.0,
                                clip: bool = True) -> np.ndarray:
    return ScaleIntensityRange(a_min, a_max, b_min, b_max, clip=clip)(img.astype(np.float32))


# monai/transforms/intensity/array.py @0.6.0: RandAdjustContrast (prob=0.5, gamma=(0.5, 2))
@realop(LIB, f"{INTENSITY}: RandAdjustContrast", dtype=np.float32)
def monai_rand_adjust_contrast(img: np.ndarray, rng: np.random.Generator, prob: float = 0.5,
                               gamma: tuple[float, float] = (0.5, 2.0)) -> np.ndarray:
    t = RandAdjustContrast(prob=prob, gamma=gamma)
    t.R = rng
    return t(img.astype(np.float32))


# monai/transforms/intensity/array.py @0.6.0: RandGaussianNoise (prob=0.5, std=5 on a 0..255
# image)
@realop(LIB, f"{INTENSITY}: RandGaussianNoise", dtype=np.float32)
def monai_rand_gaussian_noise(img: np.ndarray, rng: np.random.Generator, prob: float = 0.5,
                              mean: float = 0.0, std: float = 5.0) -> np.ndarray:
    t = RandGaussianNoise(prob=prob, mean=mean, std=std)
    t.R = rng
    return t(img.astype(np.float32))


# monai/transforms/spatial/array.py @0.6.0: RandFlip (prob=0.5, spatial_axis=1: left to right);
# CHW around it
@realop(LIB, f"{SPATIAL}: RandFlip")
def monai_rand_flip(img: np.ndarray, rng: np.random.Generator, prob: float = 0.5,
                    spatial_axis: int = 1) -> np.ndarray:
    t = RandFlip(prob=prob, spatial_axis=spatial_axis)
    t.R = rng
    return t(img.transpose(2, 0, 1)).transpose(1, 2, 0)


# monai/transforms/spatial/array.py @0.6.0: RandRotate90 (prob=0.5, max_k=3); CHW around it
@realop(LIB, f"{SPATIAL}: RandRotate90")
def monai_rand_rotate90(img: np.ndarray, rng: np.random.Generator, prob: float = 0.5,
                        max_k: int = 3) -> np.ndarray:
    t = RandRotate90(prob=prob, max_k=max_k)
    t.R = rng
    return t(img.transpose(2, 0, 1)).transpose(1, 2, 0)


# monai/transforms/croppad/array.py @0.6.0: SpatialPad (to at least 16x16, symmetric, zeros);
# CHW around it
@realop(LIB, f"{CROPPAD}: SpatialPad")
def monai_spatial_pad(img: np.ndarray,
                      spatial_size: tuple[int, int] = (16, 16)) -> np.ndarray:
    return SpatialPad(spatial_size)(img.transpose(2, 0, 1)).transpose(1, 2, 0)


# monai/transforms/croppad/array.py @0.6.0: CenterSpatialCrop (4x4 at the centre, less where the
# image is smaller); CHW around it
@realop(LIB, f"{CROPPAD}: CenterSpatialCrop")
def monai_center_spatial_crop(img: np.ndarray,
                              roi_size: tuple[int, int] = (4, 4)) -> np.ndarray:
    return CenterSpatialCrop(roi_size)(img.transpose(2, 0, 1)).transpose(1, 2, 0)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "monai_scale_intensity": "lowers",
    "monai_rand_scale_intensity": "lowers",
    "monai_rand_shift_intensity": "lowers",
    "monai_normalize_intensity": r"refuses: boolean-mask indexing \(its result size depends on pixel values\)",
    "monai_threshold_intensity": "lowers",
    "monai_scale_intensity_range": "lowers",
    "monai_rand_adjust_contrast": r"refuses: np\.power \(\*\*\) with a per-sample exponent",
    "monai_rand_gaussian_noise": "lowers",
    "monai_rand_flip": "lowers",
    "monai_rand_rotate90": "lowers",
    "monai_spatial_pad": "lowers",
    "monai_center_spatial_crop": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
