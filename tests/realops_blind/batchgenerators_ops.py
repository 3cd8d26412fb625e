"""Augmentations of batchgenerators 0.25.3 (MIC-DKFZ/batchgenerators, tag v0.25.3, commit
9dc3d49b68ea11e0f37c14d5b75658d9eb364a5e), the augmentations nnU-Net trains with:
batchgenerators/augmentations/color_augmentations.py, noise_augmentations.py and
spatial_transformations.py. batchgenerators is not installed here: the functions are copied
below as written, with the op's generator passed in as ``rng`` in place of ``np.random`` and
``random`` (``np.random.random()`` / ``np.random.uniform()`` -> ``rng.random()`` /
``rng.uniform()``, ``np.random.normal`` -> ``rng.normal``, ``random.uniform`` ->
``rng.uniform``). Where nnU-Net's transform sets an argument, the op's default is nnU-Net's.

The functions take one channel-first sample ``(c, x, y)`` of floats and write into it: each op
gives them the image cast to float32 and transposed to CHW (a copy), and transposes the result
back to HWC (unavoidable: they loop over, or index, the leading channel axis)."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: UP006, UP007, UP035, E501

from __future__ import annotations

from typing import Callable, Tuple, Union

import numpy as np
from realops import realop

LIB = "batchgenerators"
SRC = "MIC-DKFZ/batchgenerators@v0.25.3 batchgenerators/augmentations"


def augment_contrast(data_sample: np.ndarray,
                     contrast_range: Union[Tuple[float, float], Callable[[], float]] = (0.75, 1.25),
                     preserve_range: bool = True,
                     per_channel: bool = True,
                     p_per_channel: float = 1, *, rng: np.random.Generator) -> np.ndarray:
    # batchgenerators/augmentations/color_augmentations.py @v0.25.3: augment_contrast
    if not per_channel:
        if callable(contrast_range):
            factor = contrast_range()
        else:
            if rng.random() < 0.5 and contrast_range[0] < 1:
                factor = rng.uniform(contrast_range[0], 1)
            else:
                factor = rng.uniform(max(contrast_range[0], 1), contrast_range[1])

        for c in range(data_sample.shape[0]):
            if rng.uniform() < p_per_channel:
                mn = data_sample[c].mean()
                if preserve_range:
                    minm = data_sample[c].min()
                    maxm = data_sample[c].max()

                data_sample[c] = (data_sample[c] - mn) * factor + mn

                if preserve_range:
                    data_sample[c][data_sample[c] < minm] = minm
                    data_sample[c][data_sample[c] > maxm] = maxm
    else:
        for c in range(data_sample.shape[0]):
            if rng.uniform() < p_per_channel:
                if callable(contrast_range):
                    factor = contrast_range()
                else:
                    if rng.random() < 0.5 and contrast_range[0] < 1:
                        factor = rng.uniform(contrast_range[0], 1)
                    else:
                        factor = rng.uniform(max(contrast_range[0], 1), contrast_range[1])

                mn = data_sample[c].mean()
                if preserve_range:
                    minm = data_sample[c].min()
                    maxm = data_sample[c].max()

                data_sample[c] = (data_sample[c] - mn) * factor + mn

                if preserve_range:
                    data_sample[c][data_sample[c] < minm] = minm
                    data_sample[c][data_sample[c] > maxm] = maxm
    return data_sample


def augment_brightness_additive(data_sample, mu:float, sigma:float , per_channel:bool=True, p_per_channel:float=1., *, rng):
    # batchgenerators/augmentations/color_augmentations.py @v0.25.3: augment_brightness_additive
    if not per_channel:
        rnd_nb = rng.normal(mu, sigma)
        for c in range(data_sample.shape[0]):
            if rng.uniform() <= p_per_channel:
                data_sample[c] += rnd_nb
    else:
        for c in range(data_sample.shape[0]):
            if rng.uniform() <= p_per_channel:
                rnd_nb = rng.normal(mu, sigma)
                data_sample[c] += rnd_nb
    return data_sample


def augment_brightness_multiplicative(data_sample, multiplier_range=(0.5, 2), per_channel=True, *, rng):
    # batchgenerators/augmentations/color_augmentations.py @v0.25.3:
    # augment_brightness_multiplicative
    multiplier = rng.uniform(multiplier_range[0], multiplier_range[1])
    if not per_channel:
        data_sample *= multiplier
    else:
        for c in range(data_sample.shape[0]):
            multiplier = rng.uniform(multiplier_range[0], multiplier_range[1])
            data_sample[c] *= multiplier
    return data_sample


def augment_gamma(data_sample, gamma_range=(0.5, 2), invert_image=False, epsilon=1e-7, per_channel=False,
                  retain_stats: Union[bool, Callable[[], bool]] = False, *, rng):
    # batchgenerators/augmentations/color_augmentations.py @v0.25.3: augment_gamma
    if invert_image:
        data_sample = - data_sample

    if not per_channel:
        retain_stats_here = retain_stats() if callable(retain_stats) else retain_stats
        if retain_stats_here:
            mn = data_sample.mean()
            sd = data_sample.std()
        if rng.random() < 0.5 and gamma_range[0] < 1:
            gamma = rng.uniform(gamma_range[0], 1)
        else:
            gamma = rng.uniform(max(gamma_range[0], 1), gamma_range[1])
        minm = data_sample.min()
        rnge = data_sample.max() - minm
        data_sample = np.power(((data_sample - minm) / float(rnge + epsilon)), gamma) * rnge + minm
        if retain_stats_here:
            data_sample = data_sample - data_sample.mean()
            data_sample = data_sample / (data_sample.std() + 1e-8) * sd
            data_sample = data_sample + mn
    else:
        for c in range(data_sample.shape[0]):
            retain_stats_here = retain_stats() if callable(retain_stats) else retain_stats
            if retain_stats_here:
                mn = data_sample[c].mean()
                sd = data_sample[c].std()
            if rng.random() < 0.5 and gamma_range[0] < 1:
                gamma = rng.uniform(gamma_range[0], 1)
            else:
                gamma = rng.uniform(max(gamma_range[0], 1), gamma_range[1])
            minm = data_sample[c].min()
            rnge = data_sample[c].max() - minm
            data_sample[c] = np.power(((data_sample[c] - minm) / float(rnge + epsilon)), gamma) * float(rnge + epsilon) + minm
            if retain_stats_here:
                data_sample[c] = data_sample[c] - data_sample[c].mean()
                data_sample[c] = data_sample[c] / (data_sample[c].std() + 1e-8) * sd
                data_sample[c] = data_sample[c] + mn
    if invert_image:
        data_sample = - data_sample
    return data_sample


def augment_gaussian_noise(data_sample: np.ndarray, noise_variance: Tuple[float, float] = (0, 0.1),
                           p_per_channel: float = 1, per_channel: bool = False, *, rng) -> np.ndarray:
    # batchgenerators/augmentations/noise_augmentations.py @v0.25.3: augment_gaussian_noise
    if not per_channel:
        variance = noise_variance[0] if noise_variance[0] == noise_variance[1] else \
            rng.uniform(noise_variance[0], noise_variance[1])
    else:
        variance = None
    for c in range(data_sample.shape[0]):
        if rng.uniform() < p_per_channel:
            # lol good luck reading this
            variance_here = variance if variance is not None else \
                noise_variance[0] if noise_variance[0] == noise_variance[1] else \
                    rng.uniform(noise_variance[0], noise_variance[1])
            # bug fixed: https://github.com/MIC-DKFZ/batchgenerators/issues/86
            data_sample[c] = data_sample[c] + rng.normal(0.0, variance_here, size=data_sample[c].shape)
    return data_sample


def augment_mirroring(sample_data, sample_seg=None, axes=(0, 1, 2), *, rng):
    # batchgenerators/augmentations/spatial_transformations.py @v0.25.3: augment_mirroring
    if (len(sample_data.shape) != 3) and (len(sample_data.shape) != 4):
        raise Exception(
            "Invalid dimension for sample_data and sample_seg. sample_data and sample_seg should be either "
            "[channels, x, y] or [channels, x, y, z]")
    if 0 in axes and rng.uniform() < 0.5:
        sample_data[:, :] = sample_data[:, ::-1]
        if sample_seg is not None:
            sample_seg[:, :] = sample_seg[:, ::-1]
    if 1 in axes and rng.uniform() < 0.5:
        sample_data[:, :, :] = sample_data[:, :, ::-1]
        if sample_seg is not None:
            sample_seg[:, :, :] = sample_seg[:, :, ::-1]
    if 2 in axes and len(sample_data.shape) == 4:
        if rng.uniform() < 0.5:
            sample_data[:, :, :, :] = sample_data[:, :, :, ::-1]
            if sample_seg is not None:
                sample_seg[:, :, :, :] = sample_seg[:, :, :, ::-1]
    return sample_data, sample_seg


# color_augmentations.py @v0.25.3: augment_contrast (nnU-Net's ContrastAugmentationTransform:
# contrast_range=(0.75, 1.25), preserve_range=True, per_channel=True)
@realop(LIB, f"{SRC}/color_augmentations.py: augment_contrast", dtype=np.float32)
def bg_augment_contrast(img: np.ndarray, rng: np.random.Generator,
                        contrast_range: tuple[float, float] = (0.75, 1.25)) -> np.ndarray:
    data = img.astype(np.float32).transpose(2, 0, 1)
    return augment_contrast(data, contrast_range, rng=rng).transpose(1, 2, 0)


# color_augmentations.py @v0.25.3: augment_brightness_additive (mu=0, sigma=10 on a 0..255
# image, per channel)
@realop(LIB, f"{SRC}/color_augmentations.py: augment_brightness_additive", dtype=np.float32)
def bg_augment_brightness_additive(img: np.ndarray, rng: np.random.Generator, mu: float = 0.0,
                                   sigma: float = 10.0) -> np.ndarray:
    data = img.astype(np.float32).transpose(2, 0, 1)
    return augment_brightness_additive(data, mu, sigma, rng=rng).transpose(1, 2, 0)


# color_augmentations.py @v0.25.3: augment_brightness_multiplicative (nnU-Net's
# BrightnessMultiplicativeTransform: multiplier_range=(0.75, 1.25), per_channel=True)
@realop(LIB, f"{SRC}/color_augmentations.py: augment_brightness_multiplicative",
        dtype=np.float32)
def bg_augment_brightness_multiplicative(img: np.ndarray, rng: np.random.Generator,
                                         multiplier_range: tuple[float, float] = (0.75, 1.25)
                                         ) -> np.ndarray:
    data = img.astype(np.float32).transpose(2, 0, 1)
    return augment_brightness_multiplicative(data, multiplier_range,
                                             rng=rng).transpose(1, 2, 0)


# color_augmentations.py @v0.25.3: augment_gamma (nnU-Net's GammaTransform: gamma_range=(0.7,
# 1.5), retain_stats=True)
@realop(LIB, f"{SRC}/color_augmentations.py: augment_gamma", dtype=np.float32)
def bg_augment_gamma(img: np.ndarray, rng: np.random.Generator,
                     gamma_range: tuple[float, float] = (0.7, 1.5),
                     retain_stats: bool = True) -> np.ndarray:
    data = img.astype(np.float32).transpose(2, 0, 1)
    return augment_gamma(data, gamma_range, retain_stats=retain_stats,
                         rng=rng).transpose(1, 2, 0)


# noise_augmentations.py @v0.25.3: augment_gaussian_noise (nnU-Net's GaussianNoiseTransform:
# noise_variance=(0, 0.1); a standard deviation up to 5 here, on a 0..255 image)
@realop(LIB, f"{SRC}/noise_augmentations.py: augment_gaussian_noise", dtype=np.float32)
def bg_augment_gaussian_noise(img: np.ndarray, rng: np.random.Generator,
                              noise_variance: tuple[float, float] = (0, 5.0)) -> np.ndarray:
    data = img.astype(np.float32).transpose(2, 0, 1)
    return augment_gaussian_noise(data, noise_variance, rng=rng).transpose(1, 2, 0)


# spatial_transformations.py @v0.25.3: augment_mirroring (axes=(0, 1): rows, then columns, each
# with probability 0.5; no segmentation)
@realop(LIB, f"{SRC}/spatial_transformations.py: augment_mirroring", dtype=np.float32)
def bg_augment_mirroring(img: np.ndarray, rng: np.random.Generator,
                         axes: tuple[int, ...] = (0, 1)) -> np.ndarray:
    data = img.astype(np.float32).transpose(2, 0, 1)
    return augment_mirroring(data, axes=axes, rng=rng)[0].transpose(1, 2, 0)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    # Its channel means, read after the earlier channels' contrast, may be negative in the
    # tracer's facts, and -0.0 is not excluded from the values np.min then reads.
    "bg_augment_contrast": r"refuses: np\.min over the image of float values that may hold "
                           r"both -0\.0 and 0\.0",
    "bg_augment_brightness_additive": "lowers",
    "bg_augment_brightness_multiplicative": "lowers",
    "bg_augment_gamma": r"refuses: np\.power \(\*\*\) with a per-sample exponent",
    "bg_augment_gaussian_noise": "lowers",
    "bg_augment_mirroring": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
