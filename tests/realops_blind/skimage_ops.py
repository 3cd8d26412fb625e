"""Augmentations of scikit-image 0.25.2 (scikit-image/scikit-image, tag v0.25.2, commit
e8a42ba85aaf5fd9322ef9ca51bc21063b22fcae): ``skimage.exposure`` (rescale_intensity,
adjust_gamma, adjust_log, adjust_sigmoid) and ``skimage.util`` (invert, crop, random_noise).
scikit-image is not installed here: the functions' bodies and the helpers they call
(skimage/util/dtype.py, skimage/_shared/utils.py) are copied below as written, but for the
branches of ``_convert`` that an integer image never reaches. ``random_noise`` takes the
op's generator as its ``rng`` argument, as scikit-image's own API does."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: E721

from __future__ import annotations

import warnings
from numbers import Integral

import numpy as np
from realops import realop

LIB = "scikit-image"
SRC = "scikit-image/scikit-image@v0.25.2"

# skimage/util/dtype.py @v0.25.2: _integer_types, _integer_ranges, dtype_range, _supported_types
# Some of these may or may not be aliases depending on architecture & platform
_integer_types = (
    np.int8,
    np.byte,
    np.int16,
    np.short,
    np.int32,
    np.int64,
    np.longlong,
    np.int_,
    np.intp,
    np.intc,
    int,
    np.uint8,
    np.ubyte,
    np.uint16,
    np.ushort,
    np.uint32,
    np.uint64,
    np.ulonglong,
    np.uint,
    np.uintp,
    np.uintc,
)
_integer_ranges = {t: (np.iinfo(t).min, np.iinfo(t).max) for t in _integer_types}
dtype_range = {
    bool: (False, True),
    np.bool_: (False, True),
    float: (-1, 1),
    np.float16: (-1, 1),
    np.float32: (-1, 1),
    np.float64: (-1, 1),
}
dtype_range.update(_integer_ranges)

_supported_types = list(dtype_range.keys())


def dtype_limits(image, clip_negative=False):
    # skimage/util/dtype.py @v0.25.2: dtype_limits
    imin, imax = dtype_range[image.dtype.type]
    if clip_negative:
        imin = 0
    return imin, imax


def _dtype_itemsize(itemsize, *dtypes):
    # skimage/util/dtype.py @v0.25.2: _dtype_itemsize
    return next(dt for dt in dtypes if np.dtype(dt).itemsize >= itemsize)


def _convert(image, dtype, force_copy=False, uniform=False):
    # skimage/util/dtype.py @v0.25.2: _convert (its branches for integer input converted to
    # float; the float, binary and integer-to-integer branches are left out)
    image = np.asarray(image)
    dtypeobj_in = image.dtype
    if dtype is np.floating:
        dtypeobj_out = np.dtype('float64')
    else:
        dtypeobj_out = np.dtype(dtype)
    dtype_in = dtypeobj_in.type
    dtype_out = dtypeobj_out.type
    kind_in = dtypeobj_in.kind
    kind_out = dtypeobj_out.kind
    itemsize_in = dtypeobj_in.itemsize

    if np.issubdtype(dtype_in, dtype):
        if force_copy:
            image = image.copy()
        return image

    if not (dtype_in in _supported_types and dtype_out in _supported_types):
        raise ValueError(f'Cannot convert from {dtypeobj_in} to ' f'{dtypeobj_out}.')

    if kind_in in 'ui':
        imin_in = np.iinfo(dtype_in).min
        imax_in = np.iinfo(dtype_in).max

    # signed/unsigned int -> float
    if kind_out == 'f':
        # use float type that can exactly represent input integers
        computation_type = _dtype_itemsize(
            itemsize_in, dtype_out, np.float32, np.float64
        )

        if kind_in == 'u':
            # using np.divide or np.multiply doesn't copy the data
            # until the computation time
            image = np.multiply(image, 1.0 / imax_in, dtype=computation_type)
            # DirectX uses this conversion also for signed ints
            # if imin_in:
            #     np.maximum(image, -1.0, out=image)
        elif kind_in == 'i':
            # From DirectX conversions:
            # The most negative value maps to -1.0f
            # Every other value is converted to a float (call it c)
            # and then result = c * (1.0f / (2⁽ⁿ⁻¹⁾-1)).

            image = np.multiply(image, 1.0 / imax_in, dtype=computation_type)
            np.maximum(image, -1.0, out=image)

        else:
            image = np.add(image, 0.5, dtype=computation_type)
            image *= 2 / (imax_in - imin_in)

        return np.asarray(image, dtype_out)
    raise NotImplementedError(f'{dtypeobj_in} to {dtypeobj_out}: a branch not copied')


def img_as_float(image, force_copy=False):
    # skimage/util/dtype.py @v0.25.2: img_as_float
    return _convert(image, np.floating, force_copy)


# skimage/_shared/utils.py @v0.25.2: new_float_type
new_float_type = {
    # preserved types
    np.float32().dtype.char: np.float32,
    np.float64().dtype.char: np.float64,
    np.complex64().dtype.char: np.complex64,
    np.complex128().dtype.char: np.complex128,
    # altered types
    np.float16().dtype.char: np.float32,
    'g': np.float64,  # np.float128 ; doesn't exist on windows
    'G': np.complex128,  # np.complex256 ; doesn't exist on windows
}


def _supported_float_type(input_dtype, allow_complex=False):
    # skimage/_shared/utils.py @v0.25.2: _supported_float_type
    if isinstance(input_dtype, tuple):
        return np.result_type(*(_supported_float_type(d) for d in input_dtype))
    input_dtype = np.dtype(input_dtype)
    if not allow_complex and input_dtype.kind == 'c':
        raise ValueError("complex valued input is not supported")
    return new_float_type.get(input_dtype.char, np.float64)


# skimage/exposure/exposure.py @v0.25.2: DTYPE_RANGE
DTYPE_RANGE = dtype_range.copy()
DTYPE_RANGE.update((d.__name__, limits) for d, limits in dtype_range.items())
DTYPE_RANGE.update(
    {
        'uint10': (0, 2**10 - 1),
        'uint12': (0, 2**12 - 1),
        'uint14': (0, 2**14 - 1),
        'bool': dtype_range[bool],
        'float': dtype_range[np.float64],
    }
)


def intensity_range(image, range_values='image', clip_negative=False):
    # skimage/exposure/exposure.py @v0.25.2: intensity_range
    if range_values == 'dtype':
        range_values = image.dtype.type

    if range_values == 'image':
        i_min = np.min(image)
        i_max = np.max(image)
    elif range_values in DTYPE_RANGE:
        i_min, i_max = DTYPE_RANGE[range_values]
        if clip_negative:
            i_min = 0
    else:
        i_min, i_max = range_values
    return i_min, i_max


def _output_dtype(dtype_or_range, image_dtype):
    # skimage/exposure/exposure.py @v0.25.2: _output_dtype
    if type(dtype_or_range) in [list, tuple, np.ndarray]:
        # pair of values: always return float.
        return _supported_float_type(image_dtype)
    if type(dtype_or_range) == type:
        # already a type: return it
        return dtype_or_range
    if dtype_or_range in DTYPE_RANGE:
        # string key in DTYPE_RANGE dictionary
        try:
            # if it's a canonical numpy dtype, convert
            return np.dtype(dtype_or_range).type
        except TypeError:  # uint10, uint12, uint14
            # otherwise, return uint16
            return np.uint16
    else:
        raise ValueError(
            'Incorrect value for out_range, should be a valid image data '
            f'type or a pair of values, got {dtype_or_range}.'
        )


def rescale_intensity(image, in_range='image', out_range='dtype'):
    # skimage/exposure/exposure.py @v0.25.2: rescale_intensity (utils.warn is
    # skimage/_shared/utils.py's alias of warnings.warn)
    if out_range in ['dtype', 'image']:
        out_dtype = _output_dtype(image.dtype.type, image.dtype)
    else:
        out_dtype = _output_dtype(out_range, image.dtype)

    imin, imax = map(float, intensity_range(image, in_range))
    omin, omax = map(
        float, intensity_range(image, out_range, clip_negative=(imin >= 0))
    )

    if np.any(np.isnan([imin, imax, omin, omax])):
        warnings.warn(
            "One or more intensity levels are NaN. Rescaling will broadcast "
            "NaN to the full image. Provide intensity levels yourself to "
            "avoid this. E.g. with np.nanmin(image), np.nanmax(image).",
            stacklevel=2,
        )

    image = np.clip(image, imin, imax)

    if imin != imax:
        image = (image - imin) / (imax - imin)
        return (image * (omax - omin) + omin).astype(out_dtype)
    else:
        return np.clip(image, omin, omax).astype(out_dtype)


def _assert_non_negative(image):
    # skimage/exposure/exposure.py @v0.25.2: _assert_non_negative
    if np.any(image < 0):
        raise ValueError(
            'Image Correction methods work correctly only on '
            'images with non-negative values. Use '
            'skimage.exposure.rescale_intensity.'
        )


def _adjust_gamma_u8(image, gamma, gain):
    # skimage/exposure/exposure.py @v0.25.2: _adjust_gamma_u8
    lut = 255 * gain * (np.linspace(0, 1, 256) ** gamma)
    lut = np.minimum(np.rint(lut), 255).astype('uint8')
    return lut[image]


def adjust_gamma(image, gamma=1, gain=1):
    # skimage/exposure/exposure.py @v0.25.2: adjust_gamma
    if gamma < 0:
        raise ValueError("Gamma should be a non-negative real number.")

    dtype = image.dtype.type

    if dtype is np.uint8:
        out = _adjust_gamma_u8(image, gamma, gain)
    else:
        _assert_non_negative(image)

        scale = float(dtype_limits(image, True)[1] - dtype_limits(image, True)[0])

        out = (((image / scale) ** gamma) * scale * gain).astype(dtype)

    return out


def adjust_log(image, gain=1, inv=False):
    # skimage/exposure/exposure.py @v0.25.2: adjust_log
    _assert_non_negative(image)

    dtype = image.dtype.type
    scale = float(dtype_limits(image, True)[1] - dtype_limits(image, True)[0])

    if inv:
        out = (2 ** (image / scale) - 1) * scale * gain
        return dtype(out)

    out = np.log2(1 + image / scale) * scale * gain
    return out.astype(dtype)


def adjust_sigmoid(image, cutoff=0.5, gain=10, inv=False):
    # skimage/exposure/exposure.py @v0.25.2: adjust_sigmoid
    _assert_non_negative(image)

    dtype = image.dtype.type
    scale = float(dtype_limits(image, True)[1] - dtype_limits(image, True)[0])

    if inv:
        out = (1 - 1 / (1 + np.exp(gain * (cutoff - image / scale)))) * scale
        return dtype(out)

    out = (1 / (1 + np.exp(gain * (cutoff - image / scale)))) * scale
    return out.astype(dtype)


def invert(image, signed_float=False):
    # skimage/util/_invert.py @v0.25.2: invert
    if image.dtype == 'bool':
        inverted = ~image
    elif np.issubdtype(image.dtype, np.unsignedinteger):
        max_val = dtype_limits(image, clip_negative=False)[1]
        inverted = np.subtract(max_val, image, dtype=image.dtype)
    elif np.issubdtype(image.dtype, np.signedinteger):
        inverted = np.subtract(-1, image, dtype=image.dtype)
    else:  # float dtype
        if signed_float:
            inverted = -image
        else:
            inverted = np.subtract(1, image, dtype=image.dtype)
    return inverted


def crop(ar, crop_width, copy=False, order='K'):
    # skimage/util/arraycrop.py @v0.25.2: crop
    ar = np.array(ar, copy=False)

    if isinstance(crop_width, Integral):
        crops = [[crop_width, crop_width]] * ar.ndim
    elif isinstance(crop_width[0], Integral):
        if len(crop_width) == 1:
            crops = [[crop_width[0], crop_width[0]]] * ar.ndim
        elif len(crop_width) == 2:
            crops = [crop_width] * ar.ndim
        else:
            raise ValueError(
                f'crop_width has an invalid length: {len(crop_width)}\n'
                f'crop_width should be a sequence of N pairs, '
                f'a single pair, or a single integer'
            )
    elif len(crop_width) == 1:
        crops = [crop_width[0]] * ar.ndim
    elif len(crop_width) == ar.ndim:
        crops = crop_width
    else:
        raise ValueError(
            f'crop_width has an invalid length: {len(crop_width)}\n'
            f'crop_width should be a sequence of N pairs, '
            f'a single pair, or a single integer'
        )

    slices = tuple(slice(a, ar.shape[i] - b) for i, (a, b) in enumerate(crops))
    if copy:
        cropped = np.array(ar[slices], order=order, copy=True)
    else:
        cropped = ar[slices]
    return cropped


def _bernoulli(p, shape, *, rng):
    # skimage/util/noise.py @v0.25.2: _bernoulli
    if p == 0:
        return np.zeros(shape, dtype=bool)
    if p == 1:
        return np.ones(shape, dtype=bool)
    return rng.random(shape) <= p


def random_noise(image, mode='gaussian', rng=None, clip=True, **kwargs):
    # skimage/util/noise.py @v0.25.2: random_noise
    mode = mode.lower()

    # Detect if a signed image was input
    if image.min() < 0:
        low_clip = -1.0
    else:
        low_clip = 0.0

    image = img_as_float(image)

    rng = np.random.default_rng(rng)

    allowedtypes = {
        'gaussian': 'gaussian_values',
        'localvar': 'localvar_values',
        'poisson': 'poisson_values',
        'salt': 'sp_values',
        'pepper': 'sp_values',
        's&p': 's&p_values',
        'speckle': 'gaussian_values',
    }

    kwdefaults = {
        'mean': 0.0,
        'var': 0.01,
        'amount': 0.05,
        'salt_vs_pepper': 0.5,
        'local_vars': np.zeros_like(image) + 0.01,
    }

    allowedkwargs = {
        'gaussian_values': ['mean', 'var'],
        'localvar_values': ['local_vars'],
        'sp_values': ['amount'],
        's&p_values': ['amount', 'salt_vs_pepper'],
        'poisson_values': [],
    }

    for key in kwargs:
        if key not in allowedkwargs[allowedtypes[mode]]:
            raise ValueError(
                f"{key} keyword not in allowed keywords "
                f"{allowedkwargs[allowedtypes[mode]]}"
            )

    # Set kwarg defaults
    for kw in allowedkwargs[allowedtypes[mode]]:
        kwargs.setdefault(kw, kwdefaults[kw])

    if mode == 'gaussian':
        noise = rng.normal(kwargs['mean'], kwargs['var'] ** 0.5, image.shape)
        out = image + noise

    elif mode == 'localvar':
        # Ensure local variance input is correct
        if (kwargs['local_vars'] <= 0).any():
            raise ValueError('All values of `local_vars` must be > 0.')

        # Safe shortcut usage broadcasts kwargs['local_vars'] as a ufunc
        out = image + rng.normal(0, kwargs['local_vars'] ** 0.5)

    elif mode == 'poisson':
        # Determine unique values in image & calculate the next power of two
        vals = len(np.unique(image))
        vals = 2 ** np.ceil(np.log2(vals))

        # Ensure image is exclusively positive
        if low_clip == -1.0:
            old_max = image.max()
            image = (image + 1.0) / (old_max + 1.0)

        # Generating noise for each unique value in image.
        out = rng.poisson(image * vals) / float(vals)

        # Return image to original range if input was signed
        if low_clip == -1.0:
            out = out * (old_max + 1.0) - 1.0

    elif mode == 'salt':
        # Re-call function with mode='s&p' and p=1 (all salt noise)
        out = random_noise(
            image, mode='s&p', rng=rng, amount=kwargs['amount'], salt_vs_pepper=1.0
        )

    elif mode == 'pepper':
        # Re-call function with mode='s&p' and p=1 (all pepper noise)
        out = random_noise(
            image, mode='s&p', rng=rng, amount=kwargs['amount'], salt_vs_pepper=0.0
        )

    elif mode == 's&p':
        out = image.copy()
        p = kwargs['amount']
        q = kwargs['salt_vs_pepper']
        flipped = _bernoulli(p, image.shape, rng=rng)
        salted = _bernoulli(q, image.shape, rng=rng)
        peppered = ~salted
        out[flipped & salted] = 1
        out[flipped & peppered] = low_clip

    elif mode == 'speckle':
        noise = rng.normal(kwargs['mean'], kwargs['var'] ** 0.5, image.shape)
        out = image + image * noise

    # Clip back to original range, if necessary
    if clip:
        out = np.clip(out, low_clip, 1.0)

    return out


# skimage/exposure/exposure.py @v0.25.2: rescale_intensity (stretch the image's range to
# the dtype's)
@realop(LIB, f"{SRC} skimage/exposure/exposure.py: rescale_intensity")
def sk_rescale_intensity(image: np.ndarray) -> np.ndarray:
    return rescale_intensity(image)


# skimage/exposure/exposure.py @v0.25.2: adjust_gamma (gamma=0.8)
@realop(LIB, f"{SRC} skimage/exposure/exposure.py: adjust_gamma")
def sk_adjust_gamma(image: np.ndarray, gamma: float = 0.8, gain: float = 1) -> np.ndarray:
    return adjust_gamma(image, gamma=gamma, gain=gain)


# skimage/exposure/exposure.py @v0.25.2: adjust_log
@realop(LIB, f"{SRC} skimage/exposure/exposure.py: adjust_log")
def sk_adjust_log(image: np.ndarray, gain: float = 1, inv: bool = False) -> np.ndarray:
    return adjust_log(image, gain=gain, inv=inv)


# skimage/exposure/exposure.py @v0.25.2: adjust_sigmoid
@realop(LIB, f"{SRC} skimage/exposure/exposure.py: adjust_sigmoid")
def sk_adjust_sigmoid(image: np.ndarray, cutoff: float = 0.5, gain: float = 10,
                      inv: bool = False) -> np.ndarray:
    return adjust_sigmoid(image, cutoff=cutoff, gain=gain, inv=inv)


# skimage/util/_invert.py @v0.25.2: invert
@realop(LIB, f"{SRC} skimage/util/_invert.py: invert")
def sk_invert(image: np.ndarray) -> np.ndarray:
    return invert(image)


# skimage/util/arraycrop.py @v0.25.2: crop (one row off the top and bottom, one column off the
# left and two off the right, no channel cropped)
@realop(LIB, f"{SRC} skimage/util/arraycrop.py: crop", min_size=4)
def sk_crop(image: np.ndarray,
            crop_width: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (0, 0))) -> np.ndarray:
    return crop(image, crop_width)


# skimage/util/noise.py @v0.25.2: random_noise (mode='gaussian', var=0.01; float64 in [0, 1])
@realop(LIB, f"{SRC} skimage/util/noise.py: random_noise (gaussian)", dtype=np.float64)
def sk_random_noise_gaussian(image: np.ndarray, rng: np.random.Generator,
                             var: float = 0.01) -> np.ndarray:
    return random_noise(image, mode='gaussian', rng=rng, var=var)


# skimage/util/noise.py @v0.25.2: random_noise (mode='s&p', amount=0.05; float64 in [0, 1])
@realop(LIB, f"{SRC} skimage/util/noise.py: random_noise (s&p)", dtype=np.float64)
def sk_random_noise_salt_pepper(image: np.ndarray, rng: np.random.Generator,
                                amount: float = 0.05) -> np.ndarray:
    return random_noise(image, mode='s&p', rng=rng, amount=amount)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "sk_rescale_intensity": "lowers",
    "sk_adjust_gamma": "lowers",
    "sk_adjust_log": "lowers",
    "sk_adjust_sigmoid": "lowers",
    "sk_invert": "lowers",
    "sk_crop": "lowers",
    "sk_random_noise_gaussian": "lowers",
    "sk_random_noise_salt_pepper": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
