"""Augmentations of albumentations 2.0.8 (albumentations-team/albumentations, tag 2.0.8), with
the albucore helpers they import, as installed here. Random parameters are drawn as the
transform's ``get_params`` draws them (``self.py_random`` / ``self.random_generator`` -> ``rng``),
then the functional of ``apply`` runs."""

from __future__ import annotations

import cv2
import numpy as np
from albucore import (
    MAX_VALUES_BY_DTYPE,
    clipped,
    float32_io,
    is_grayscale_image,
    preserve_channel_dim,
    sz_lut,
    uint8_io,
)

from realops import realop

LIB = "albumentations"
SRC = "albumentations-team/albumentations@2.0.8"


# albumentations/augmentations/pixel/functional.py @2.0.8: solarize
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: solarize")
def alb_solarize(img: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    dtype = img.dtype
    max_val = MAX_VALUES_BY_DTYPE[dtype]

    if dtype == np.uint8:
        lut = np.array(
            [max_val - i if i >= threshold * max_val else i for i in range(int(max_val) + 1)],
            dtype=dtype,
        )
        prev_shape = img.shape
        img = sz_lut(img, lut, inplace=False)
        return img if len(prev_shape) == img.ndim else np.expand_dims(img, -1)
    return np.where(img >= threshold, max_val - img, img)


# albumentations/augmentations/pixel/functional.py @2.0.8: posterize (its decorators too)
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: posterize")
@uint8_io
@clipped
def alb_posterize(img: np.ndarray, bits: int = 4) -> np.ndarray:
    bits_array = np.uint8(bits)

    if not bits_array.shape or len(bits_array) == 1:
        lut = np.arange(0, 256, dtype=np.uint8)
        mask = ~np.uint8(2 ** (8 - bits_array) - 1)
        lut &= mask

        return sz_lut(img, lut, inplace=False)

    result_img = np.empty_like(img)
    for i, channel_bits in enumerate(bits_array):
        lut = np.arange(0, 256, dtype=np.uint8)
        mask = ~np.uint8(2 ** (8 - channel_bits) - 1)
        lut &= mask

        result_img[..., i] = sz_lut(img[..., i], lut, inplace=True)

    return result_img


# albumentations/augmentations/pixel/functional.py @2.0.8: invert
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: invert")
def alb_invert(img: np.ndarray) -> np.ndarray:
    # Supports all the valid dtypes
    # clips the img to avoid unexpected behaviour.
    return MAX_VALUES_BY_DTYPE[img.dtype] - img


# albumentations/augmentations/pixel/transforms.py @2.0.8: RandomGamma.get_params, then
# albumentations/augmentations/pixel/functional.py: gamma_transform
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: gamma_transform "
             "(RandomGamma.get_params)")
def alb_random_gamma(img: np.ndarray, rng: np.random.Generator,
                     gamma_limit: tuple[float, float] = (80, 120)) -> np.ndarray:
    gamma = rng.uniform(*gamma_limit) / 100.0
    if img.dtype == np.uint8:
        table = (np.arange(0, 256.0 / 255, 1.0 / 255) ** gamma) * 255
        return sz_lut(img, table.astype(np.uint8), inplace=False)

    return np.power(img, gamma)


# albumentations/augmentations/pixel/functional.py @2.0.8: to_gray_desaturation
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: to_gray_desaturation",
        ndim=2)
@clipped
def alb_to_gray_desaturation(img: np.ndarray) -> np.ndarray:
    float_image = img.astype(np.float32)
    return (np.max(float_image, axis=-1) + np.min(float_image, axis=-1)) / 2


# albumentations/augmentations/pixel/functional.py @2.0.8: to_gray_average
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: to_gray_average",
        ndim=2)
def alb_to_gray_average(img: np.ndarray) -> np.ndarray:
    return np.mean(img, axis=-1).astype(img.dtype)


# albumentations/augmentations/pixel/functional.py @2.0.8: to_gray_max
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: to_gray_max", ndim=2)
def alb_to_gray_max(img: np.ndarray) -> np.ndarray:
    return np.max(img, axis=-1)


# albumentations/augmentations/pixel/functional.py @2.0.8: to_gray_weighted_average
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: "
             "to_gray_weighted_average", ndim=2)
def alb_to_gray_weighted_average(img: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)


# albumentations/augmentations/geometric/functional.py @2.0.8: transpose
@realop(LIB, f"{SRC} albumentations/augmentations/geometric/functional.py: transpose")
def alb_transpose(img: np.ndarray) -> np.ndarray:
    # Generate the new axes order
    new_axes = list(range(img.ndim))
    new_axes[0], new_axes[1] = 1, 0  # Swap the first two dimensions

    # Transpose the array using the new axes order
    return img.transpose(new_axes)


# albumentations/augmentations/geometric/rotate.py @2.0.8: RandomRotate90.get_params, then
# albumentations/augmentations/geometric/functional.py: rot90
@realop(LIB, f"{SRC} albumentations/augmentations/geometric/functional.py: rot90 "
             "(RandomRotate90.get_params)")
def alb_random_rotate90(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    # Random int in the range [0, 3]
    factor = rng.integers(0, 3, endpoint=True)
    return np.rot90(img, factor)


# albumentations/augmentations/crops/transforms.py @2.0.8: RandomCrop (h_start, w_start drawn
# by py_random.random()), crops/functional.py: get_crop_coords and crop
@realop(LIB, f"{SRC} albumentations/augmentations/crops/functional.py: get_crop_coords, crop "
             "(RandomCrop)")
def alb_random_crop(img: np.ndarray, rng: np.random.Generator, crop_height: int = 5,
                    crop_width: int = 7) -> np.ndarray:
    h_start = rng.random()
    w_start = rng.random()
    height, width = img.shape[:2]

    # Clip crop dimensions to image dimensions
    crop_height = min(crop_height, height)
    crop_width = min(crop_width, width)

    y_min = int((height - crop_height + 1) * h_start)
    y_max = y_min + crop_height
    x_min = int((width - crop_width + 1) * w_start)
    x_max = x_min + crop_width

    if x_max <= x_min or y_max <= y_min:
        raise ValueError(
            "We should have x_min < x_max and y_min < y_max. But we got"
            f" (x_min = {x_min}, y_min = {y_min}, x_max = {x_max}, y_max = {y_max})",
        )

    if x_min < 0 or x_max > width or y_min < 0 or y_max > height:
        raise ValueError(
            "Values for crop should be non negative and equal or smaller than image sizes"
            f"(x_min = {x_min}, y_min = {y_min}, x_max = {x_max}, y_max = {y_max}, "
            f"height = {height}, width = {width})",
        )

    return img[y_min:y_max, x_min:x_max]


# albumentations/augmentations/dropout/channel_dropout.py @2.0.8:
# ChannelDropout.get_params_dependent_on_data, then dropout/functional.py: channel_dropout
@realop(LIB, f"{SRC} albumentations/augmentations/dropout/functional.py: channel_dropout "
             "(ChannelDropout.get_params_dependent_on_data)")
def alb_channel_dropout(img: np.ndarray, rng: np.random.Generator,
                        channel_drop_range: tuple[int, int] = (1, 1),
                        fill: float = 0) -> np.ndarray:
    num_channels = img.shape[-1]
    num_drop_channels = rng.integers(channel_drop_range[0], channel_drop_range[1], endpoint=True)
    channels_to_drop = rng.choice(num_channels, size=num_drop_channels, replace=False)

    if is_grayscale_image(img):
        msg = "Only one channel. ChannelDropout is not defined."
        raise NotImplementedError(msg)

    img = img.copy()
    img[..., channels_to_drop] = fill
    return img


# albumentations/augmentations/pixel/transforms.py @2.0.8:
# ChannelShuffle.get_params_dependent_on_data, then pixel/functional.py: channel_shuffle
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: channel_shuffle "
             "(ChannelShuffle.get_params_dependent_on_data)")
def alb_channel_shuffle(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    ch_arr = list(range(img.shape[-1]))
    rng.shuffle(ch_arr)
    output = np.empty_like(img)
    from_to = []
    for i, j in enumerate(ch_arr):
        from_to.extend([j, i])  # Use [src, dst]
    cv2.mixChannels([img], [output], from_to)
    return output


# albumentations/augmentations/pixel/transforms.py @2.0.8: FancyPCA.get_params_dependent_on_data,
# then pixel/functional.py: fancy_pca (its decorators too)
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/functional.py: fancy_pca "
             "(FancyPCA.get_params_dependent_on_data)")
def alb_fancy_pca(img: np.ndarray, rng: np.random.Generator, alpha: float = 0.1) -> np.ndarray:
    alpha_vector = rng.normal(0, alpha, img.shape[-1]).astype(np.float32)
    return _fancy_pca(img, alpha_vector)


@float32_io
@clipped
@preserve_channel_dim
def _fancy_pca(img: np.ndarray, alpha_vector: np.ndarray) -> np.ndarray:
    orig_shape = img.shape
    num_channels = img.shape[-1]

    # Reshape image to 2D array of pixels
    img_reshaped = img.reshape(-1, num_channels)

    # Center the pixel values
    img_mean = np.mean(img_reshaped, axis=0)
    img_centered = img_reshaped - img_mean

    if num_channels == 1:
        # For grayscale images, apply a simple scaling
        std_dev = np.std(img_centered)
        noise = alpha_vector[0] * std_dev * img_centered
    else:
        # Compute covariance matrix
        img_cov = np.cov(img_centered, rowvar=False)

        # Compute eigenvectors & eigenvalues of the covariance matrix
        eig_vals, eig_vecs = np.linalg.eigh(img_cov)

        # Sort eigenvectors by eigenvalues in descending order
        sort_perm = eig_vals[::-1].argsort()
        eig_vals = eig_vals[sort_perm]
        eig_vecs = eig_vecs[:, sort_perm]

        # Create noise vector
        noise = np.dot(
            np.dot(eig_vecs, np.diag(alpha_vector * eig_vals)),
            img_centered.T,
        ).T

    # Add noise to the image
    img_pca = img_reshaped + noise

    # Reshape back to original shape
    img_pca = img_pca.reshape(orig_shape)

    # Clip values to [0, 1] range
    return np.clip(img_pca, 0, 1, out=img_pca)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "alb_solarize": "lowers",
    "alb_posterize": "lowers",
    "alb_invert": "lowers",
    "alb_random_gamma": "lowers",
    "alb_to_gray_desaturation": "lowers",
    "alb_to_gray_average": "lowers",
    "alb_to_gray_max": "lowers",
    "alb_to_gray_weighted_average": "lowers",
    "alb_transpose": "lowers",
    "alb_random_rotate90": "lowers",
    "alb_random_crop": "lowers",
    "alb_channel_dropout": "lowers",
    "alb_channel_shuffle": "lowers",
    "alb_fancy_pca": r"refuses: np\.cov \(not among the numpy functions",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
