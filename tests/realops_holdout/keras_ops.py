"""Held-out augmentations of Keras' numpy image utilities (keras-team/keras-preprocessing:
keras_preprocessing/image/image_data_generator.py at commit
0654ef7090184681ee73178a1118f7cc8eb74603, affine_transformations.py at commit
015608d844e78d35c1e01d765fbc6e5a37d2c21b), each as ``ImageDataGenerator(...)`` runs it on one
image. The generator works on float32 arrays (``img_to_array``), so each op converts the uint8
image as ``img_to_array`` does and returns float32; ``np.random`` -> ``rng``."""

from __future__ import annotations

import numpy as np
from realops import realop

SRC = "keras-team/keras-preprocessing"
IDG = (f"{SRC}@0654ef7090184681ee73178a1118f7cc8eb74603 "
       "keras_preprocessing/image/image_data_generator.py")
AFF = (f"{SRC}@015608d844e78d35c1e01d765fbc6e5a37d2c21b "
       "keras_preprocessing/image/affine_transformations.py")

# channels_last: ImageDataGenerator's row, col and channel axes of a batch; an image's are one less
ROW_AXIS, COL_AXIS, CHANNEL_AXIS = 1, 2, 3


def flip_axis(x, axis):
    # keras_preprocessing/image/affine_transformations.py @015608d: flip_axis
    x = np.asarray(x).swapaxes(axis, 0)
    x = x[::-1, ...]
    x = x.swapaxes(0, axis)
    return x


def apply_channel_shift(x, intensity, channel_axis=0):
    # keras_preprocessing/image/affine_transformations.py @015608d: apply_channel_shift
    x = np.rollaxis(x, channel_axis, 0)
    min_x, max_x = np.min(x), np.max(x)
    channel_images = [
        np.clip(x_channel + intensity,
                min_x,
                max_x)
        for x_channel in x]
    x = np.stack(channel_images, axis=0)
    x = np.rollaxis(x, 0, channel_axis + 1)
    return x


# image_data_generator.py @0654ef7: ImageDataGenerator(horizontal_flip=True)'s
# get_random_transform (its flip draws) and apply_transform (flip_axis)
@realop("keras", f"{IDG}: ImageDataGenerator.apply_transform (horizontal_flip)",
        dtype=np.float32)
def keras_horizontal_flip(image: np.ndarray, rng: np.random.Generator,
                          horizontal_flip: bool = True,
                          vertical_flip: bool = False) -> np.ndarray:
    x = np.asarray(image, dtype='float32')
    img_row_axis = ROW_AXIS - 1
    img_col_axis = COL_AXIS - 1

    flip_horizontal = (rng.random() < 0.5) * horizontal_flip
    flip_vertical = (rng.random() < 0.5) * vertical_flip

    if flip_horizontal:
        x = flip_axis(x, img_col_axis)

    if flip_vertical:
        x = flip_axis(x, img_row_axis)
    return x


# image_data_generator.py @0654ef7: ImageDataGenerator(channel_shift_range=20.)'s
# get_random_transform (flip draws, then the intensity) and apply_transform
# (affine_transformations.py @015608d: apply_channel_shift)
@realop("keras", f"{IDG}: ImageDataGenerator.apply_transform (channel_shift_range); {AFF}: "
                 "apply_channel_shift", dtype=np.float32)
def keras_channel_shift(image: np.ndarray, rng: np.random.Generator,
                        channel_shift_range: float = 20.) -> np.ndarray:
    x = np.asarray(image, dtype='float32')
    img_channel_axis = CHANNEL_AXIS - 1

    flip_horizontal = (rng.random() < 0.5) * False
    flip_vertical = (rng.random() < 0.5) * False
    del flip_horizontal, flip_vertical  # drawn, not used: horizontal_flip=vertical_flip=False

    channel_shift_intensity = None
    if channel_shift_range != 0:
        channel_shift_intensity = rng.uniform(-channel_shift_range,
                                              channel_shift_range)

    if channel_shift_intensity is not None:
        x = apply_channel_shift(x,
                                channel_shift_intensity,
                                img_channel_axis)
    return x


# image_data_generator.py @0654ef7: ImageDataGenerator(rescale=1./255, samplewise_center=True,
# samplewise_std_normalization=True).standardize (in place on its float32 array)
@realop("keras", f"{IDG}: ImageDataGenerator.standardize", dtype=np.float32)
def keras_standardize(image: np.ndarray, rescale: float = 1. / 255,
                      samplewise_center: bool = True,
                      samplewise_std_normalization: bool = True) -> np.ndarray:
    x = np.asarray(image, dtype='float32')
    if rescale:
        x *= rescale
    if samplewise_center:
        x -= np.mean(x, keepdims=True)
    if samplewise_std_normalization:
        x /= (np.std(x, keepdims=True) + 1e-6)
    return x


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "keras_horizontal_flip": "lowers",
    "keras_channel_shift": "lowers",
    "keras_standardize": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
