"""Held-out ops of timm's RandAugment (huggingface/pytorch-image-models at commit
066e490605ba1d3666861096163246c885603469, timm/data/auto_augment.py), as
``rand_augment_transform('rand-m9-mstd0.5-inc1', hparams)`` builds them for a 224-pixel
ImageNet training transform (``translate_const=100``, ``img_mean=(124, 116, 104)``, random
bilinear/bicubic resampling): one ``AugmentOp`` each, on a numpy HWC image converted to PIL and
back at the edges. ``random.random()`` / ``random.gauss`` / ``random.choice`` -> ``rng``."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: E501

from __future__ import annotations

import numpy as np
from PIL import Image, ImageEnhance, ImageOps
from realops import realop

SRC = "huggingface/pytorch-image-models@066e490605ba1d3666861096163246c885603469"
AA = f"{SRC} timm/data/auto_augment.py"

_LEVEL_DENOM = 10.  # denominator for conversion from 'Mx' magnitude scale to fractional aug level for op arguments

_RANDOM_INTERPOLATION = (Image.BILINEAR, Image.BICUBIC)

# create_transform's hparams for RandAugment at 224 pixels, ImageNet mean
_HPARAMS = dict(translate_const=100, img_mean=(124, 116, 104), magnitude_std=0.5)

_FILL = (128, 128, 128)


def _pil_interp(method):
    # timm/data/auto_augment.py @066e490: _pil_interp
    def _convert(m):
        if method == 'bicubic':
            return Image.BICUBIC
        elif method == 'lanczos':
            return Image.LANCZOS
        elif method == 'hamming':
            return Image.HAMMING
        else:
            return Image.BILINEAR
    if isinstance(method, (list, tuple)):
        return [_convert(m) if isinstance(m, str) else m for m in method]
    else:
        return _convert(method) if isinstance(method, str) else method


def _interpolation(kwargs, rng):
    # timm/data/auto_augment.py @066e490: _interpolation
    interpolation = kwargs.pop('resample', Image.BILINEAR)
    if isinstance(interpolation, (list, tuple)):
        return rng.choice(interpolation)
    else:
        return interpolation


def _check_args_tf(kwargs, rng):
    # timm/data/auto_augment.py @066e490: _check_args_tf (Pillow is newer than 5.0)
    kwargs['resample'] = _interpolation(kwargs, rng)


def translate_x_rel(img, pct, rng, **kwargs):
    # timm/data/auto_augment.py @066e490: translate_x_rel
    pixels = pct * img.size[0]
    _check_args_tf(kwargs, rng)
    return img.transform(img.size, Image.AFFINE, (1, 0, pixels, 0, 1, 0), **kwargs)


def rotate(img, degrees, rng, **kwargs):
    # timm/data/auto_augment.py @066e490: rotate (its branch for Pillow >= 5.2)
    _check_args_tf(kwargs, rng)
    return img.rotate(degrees, **kwargs)


def equalize(img, rng, **__):
    # timm/data/auto_augment.py @066e490: equalize
    return ImageOps.equalize(img)


def contrast(img, factor, rng, **__):
    # timm/data/auto_augment.py @066e490: contrast
    return ImageEnhance.Contrast(img).enhance(factor)


def _randomly_negate(v, rng):
    # timm/data/auto_augment.py @066e490: _randomly_negate
    """With 50% prob, negate the value"""
    return -v if rng.random() > 0.5 else v


def _rotate_level_to_arg(level, _hparams, rng):
    # timm/data/auto_augment.py @066e490: _rotate_level_to_arg
    # range [-30, 30]
    level = (level / _LEVEL_DENOM) * 30.
    level = _randomly_negate(level, rng)
    return level,


def _enhance_increasing_level_to_arg(level, _hparams, rng):
    # timm/data/auto_augment.py @066e490: _enhance_increasing_level_to_arg
    # the 'no change' level is 1.0, moving away from that towards 0. or 2.0 increases the enhancement blend
    # range [0.1, 1.9] if level <= _LEVEL_DENOM
    level = (level / _LEVEL_DENOM) * .9
    level = max(0.1, 1.0 + _randomly_negate(level, rng))  # keep it >= 0.1
    return level,


def _translate_rel_level_to_arg(level, hparams, rng):
    # timm/data/auto_augment.py @066e490: _translate_rel_level_to_arg
    # default range [-0.45, 0.45]
    translate_pct = hparams.get('translate_pct', 0.45)
    level = (level / _LEVEL_DENOM) * translate_pct
    level = _randomly_negate(level, rng)
    return level,


LEVEL_TO_ARG = {
    'Equalize': None,
    'Rotate': _rotate_level_to_arg,
    'ContrastIncreasing': _enhance_increasing_level_to_arg,
    'TranslateXRel': _translate_rel_level_to_arg,
}

NAME_TO_OP = {
    'Equalize': equalize,
    'Rotate': rotate,
    'ContrastIncreasing': contrast,
    'TranslateXRel': translate_x_rel,
}


class AugmentOp:
    # timm/data/auto_augment.py @066e490: AugmentOp (magnitude_std=0.5 as 'mstd0.5' sets it;
    # __call__ takes the rng)

    def __init__(self, name, prob=0.5, magnitude=10, hparams=None):
        hparams = hparams or _HPARAMS
        self.name = name
        self.aug_fn = NAME_TO_OP[name]
        self.level_fn = LEVEL_TO_ARG[name]
        self.prob = prob
        self.magnitude = magnitude
        self.hparams = hparams.copy()
        self.kwargs = dict(
            fillcolor=hparams['img_mean'] if 'img_mean' in hparams else _FILL,
            resample=_pil_interp(hparams['interpolation']) if 'interpolation' in hparams else _RANDOM_INTERPOLATION,
        )

        # If magnitude_std is > 0, we introduce some randomness
        # in the usually fixed policy and sample magnitude from a normal distribution
        # with mean `magnitude` and std-dev of `magnitude_std`.
        # NOTE This is my own hack, being tested, not in papers or reference impls.
        # If magnitude_std is inf, we sample magnitude from a uniform distribution
        self.magnitude_std = self.hparams.get('magnitude_std', 0)
        self.magnitude_max = self.hparams.get('magnitude_max', None)

    def __call__(self, img, rng):
        if self.prob < 1.0 and rng.random() > self.prob:
            return img
        magnitude = self.magnitude
        if self.magnitude_std > 0:
            # magnitude randomization enabled
            if self.magnitude_std == float('inf'):
                magnitude = rng.uniform(0, magnitude)
            elif self.magnitude_std > 0:
                magnitude = rng.normal(magnitude, self.magnitude_std)
        # default upper_bound for the timm RA impl is _LEVEL_DENOM (10)
        # setting magnitude_max overrides this to allow M > 10 (behaviour closer to Google TF RA impl)
        upper_bound = self.magnitude_max or _LEVEL_DENOM
        magnitude = max(0., min(magnitude, upper_bound))
        level_args = self.level_fn(magnitude, self.hparams, rng) if self.level_fn is not None else tuple()
        return self.aug_fn(img, *level_args, rng, **dict(self.kwargs))


# rand_augment_ops(magnitude=9, hparams) for 'rand-m9-mstd0.5-inc1': the four ops used here
_RA_OPS = {name: AugmentOp(name, prob=0.5, magnitude=9, hparams=_HPARAMS)
           for name in ('ContrastIncreasing', 'Equalize', 'Rotate', 'TranslateXRel')}


# timm/data/auto_augment.py @066e490: AugmentOp('ContrastIncreasing') of RandAugment
@realop("timm", f"{AA}: AugmentOp('ContrastIncreasing'), contrast")
def timm_ra_contrast(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(_RA_OPS['ContrastIncreasing'](Image.fromarray(image), rng))


# timm/data/auto_augment.py @066e490: AugmentOp('Equalize') of RandAugment
@realop("timm", f"{AA}: AugmentOp('Equalize'), equalize")
def timm_ra_equalize(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(_RA_OPS['Equalize'](Image.fromarray(image), rng))


# timm/data/auto_augment.py @066e490: AugmentOp('Rotate') of RandAugment
@realop("timm", f"{AA}: AugmentOp('Rotate'), rotate")
def timm_ra_rotate(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(_RA_OPS['Rotate'](Image.fromarray(image), rng))


# timm/data/auto_augment.py @066e490: AugmentOp('TranslateXRel') of RandAugment
@realop("timm", f"{AA}: AugmentOp('TranslateXRel'), translate_x_rel")
def timm_ra_translate_x_rel(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(_RA_OPS['TranslateXRel'](Image.fromarray(image), rng))


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    # AugmentOp objects made at import: their methods (and so Contrast's int() of the mean)
    # run as they are
    "timm_ra_contrast": r"refuses: int\(\) of a per-sample value in Contrast\.__init__\(\)",
    "timm_ra_equalize": "lowers",
    "timm_ra_rotate": r"refuses: PIL Image\.rotate on a traced image \(PIL's",
    "timm_ra_translate_x_rel": r"refuses: PIL Image\.transform on a traced image",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
