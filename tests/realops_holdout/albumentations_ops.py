"""Held-out augmentations of albumentations 2.0.8 (albumentations-team/albumentations, tag
2.0.8), calling the albumentations and albucore functions they call, as installed here. Random
parameters are drawn as the transform draws them (``self.py_random`` /
``self.random_generator`` -> ``rng``; a transform applies when ``py_random.random() < p``),
then the functional of ``apply`` runs."""

from __future__ import annotations

import numpy as np
from albucore import (
    MAX_VALUES_BY_DTYPE,
    hflip,
    is_grayscale_image,
    is_rgb_image,
    multiply_add,
    normalize,
    vflip,
)
from albumentations.augmentations.crops import functional as fcrops
from albumentations.augmentations.geometric import functional as fgeometric
from albumentations.augmentations.pixel import functional as fpixel
from realops import realop

LIB = "albumentations"
SRC = "albumentations-team/albumentations@2.0.8"


# albumentations/augmentations/geometric/flip.py @2.0.8: HorizontalFlip.apply (albucore hflip),
# applied with probability p
@realop(LIB, f"{SRC} albumentations/augmentations/geometric/flip.py: HorizontalFlip.apply")
def alb_horizontal_flip(img: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    if rng.random() < p:
        return hflip(img)
    return img


# albumentations/augmentations/geometric/flip.py @2.0.8: VerticalFlip.apply (albucore vflip),
# applied with probability p
@realop(LIB, f"{SRC} albumentations/augmentations/geometric/flip.py: VerticalFlip.apply")
def alb_vertical_flip(img: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    if rng.random() < p:
        return vflip(img)
    return img


# albumentations/augmentations/pixel/transforms.py @2.0.8: Normalize.__init__ and .apply
# (normalization="standard", ImageNet defaults; albucore normalize returns float32)
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/transforms.py: Normalize.apply",
        dtype=np.float32)
def alb_normalize(img: np.ndarray, mean: tuple[float, ...] = (0.485, 0.456, 0.406),
                  std: tuple[float, ...] = (0.229, 0.224, 0.225),
                  max_pixel_value: float = 255.0) -> np.ndarray:
    mean_np = np.array(mean, dtype=np.float32) * max_pixel_value
    denominator = np.reciprocal(
        np.array(std, dtype=np.float32) * max_pixel_value,
    )
    return normalize(
        img,
        mean_np,
        denominator,
    )


# albumentations/augmentations/pixel/transforms.py @2.0.8:
# RandomBrightnessContrast.get_params_dependent_on_data and .apply (albucore multiply_add)
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/transforms.py: "
             "RandomBrightnessContrast.apply")
def alb_random_brightness_contrast(img: np.ndarray, rng: np.random.Generator,
                                   brightness_limit: tuple[float, float] = (-0.2, 0.2),
                                   contrast_limit: tuple[float, float] = (-0.2, 0.2),
                                   brightness_by_max: bool = True,
                                   ensure_safe_range: bool = False) -> np.ndarray:
    image = img
    # Sample initial values
    alpha = 1.0 + rng.uniform(*contrast_limit)
    beta = rng.uniform(*brightness_limit)

    max_value = MAX_VALUES_BY_DTYPE[image.dtype]
    # Scale beta according to brightness_by_max setting
    beta = beta * max_value if brightness_by_max else beta * np.mean(image)

    # Clip values to safe ranges if needed
    if ensure_safe_range:
        alpha, beta = fpixel.get_safe_brightness_contrast_params(
            alpha,
            beta,
            max_value,
        )
    return multiply_add(img, alpha, beta, inplace=False)


# albumentations/augmentations/pixel/transforms.py @2.0.8: GaussNoise.get_params_dependent_on_data
# (pixel/functional.py: generate_noise) and .apply (pixel/functional.py: add_noise)
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/transforms.py: GaussNoise.apply")
def alb_gauss_noise(img: np.ndarray, rng: np.random.Generator,
                    std_range: tuple[float, float] = (0.2, 0.44),
                    mean_range: tuple[float, float] = (0.0, 0.0), per_channel: bool = True,
                    noise_scale_factor: float = 1) -> np.ndarray:
    image = img
    max_value = MAX_VALUES_BY_DTYPE[image.dtype]
    sigma = rng.uniform(*std_range)
    mean = rng.uniform(*mean_range)

    noise_map = fpixel.generate_noise(
        noise_type="gaussian",
        spatial_mode="per_pixel" if per_channel else "shared",
        shape=image.shape,
        params={"mean_range": (mean, mean), "std_range": (sigma, sigma)},
        max_value=max_value,
        approximation=noise_scale_factor,
        random_generator=rng,
    )
    return fpixel.add_noise(img, noise_map)


# albumentations/augmentations/geometric/pad.py @2.0.8: PadIfNeeded.get_params_dependent_on_data
# and Pad.apply (geometric/functional.py: pad_with_params), position="center", constant border
@realop(LIB, f"{SRC} albumentations/augmentations/geometric/pad.py: PadIfNeeded "
             "(Pad.apply)")
def alb_pad_if_needed(img: np.ndarray, min_height: int = 12, min_width: int = 12,
                      border_mode: int = 0, fill: float = 0) -> np.ndarray:
    h_pad_top, h_pad_bottom, w_pad_left, w_pad_right = fgeometric.get_padding_params(
        image_shape=img.shape[:2],
        min_height=min_height,
        min_width=min_width,
        pad_height_divisor=None,
        pad_width_divisor=None,
    )

    h_pad_top, h_pad_bottom, w_pad_left, w_pad_right = fgeometric.adjust_padding_by_position(
        h_top=h_pad_top,
        h_bottom=h_pad_bottom,
        w_left=w_pad_left,
        w_right=w_pad_right,
        position="center",
        py_random=None,
    )
    return fgeometric.pad_with_params(
        img,
        h_pad_top,
        h_pad_bottom,
        w_pad_left,
        w_pad_right,
        border_mode=border_mode,
        value=fill,
    )


# albumentations/augmentations/crops/transforms.py @2.0.8: CenterCrop (pad_if_needed=False):
# crops/functional.py get_center_crop_coords, then crop
@realop(LIB, f"{SRC} albumentations/augmentations/crops/functional.py: get_center_crop_coords, "
             "crop (CenterCrop)", min_size=3)
def alb_center_crop(img: np.ndarray, height: int = 3, width: int = 3) -> np.ndarray:
    crop_coords = fcrops.get_center_crop_coords(img.shape[:2], (height, width))
    return fcrops.crop(img, *crop_coords)


# albumentations/augmentations/pixel/transforms.py @2.0.8: ToSepia.__init__ and .apply
# (pixel/functional.py: linear_transformation_rgb)
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/transforms.py: ToSepia.apply")
def alb_to_sepia(img: np.ndarray) -> np.ndarray:
    sepia_transformation_matrix = np.array(
        [[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]],
    )
    if is_grayscale_image(img):
        return img

    if not is_rgb_image(img):
        msg = "ToSepia transformation expects 1 or 3-channel images."
        raise TypeError(msg)
    return fpixel.linear_transformation_rgb(img, sepia_transformation_matrix)


# albumentations/augmentations/pixel/transforms.py @2.0.8: HueSaturationValue.get_params and
# .apply (pixel/functional.py: shift_hsv)
@realop(LIB, f"{SRC} albumentations/augmentations/pixel/transforms.py: HueSaturationValue.apply")
def alb_hue_saturation_value(img: np.ndarray, rng: np.random.Generator,
                             hue_shift_limit: tuple[float, float] = (-20, 20),
                             sat_shift_limit: tuple[float, float] = (-30, 30),
                             val_shift_limit: tuple[float, float] = (-20, 20)) -> np.ndarray:
    hue_shift = rng.uniform(*hue_shift_limit)
    sat_shift = rng.uniform(*sat_shift_limit)
    val_shift = rng.uniform(*val_shift_limit)
    if not is_rgb_image(img) and not is_grayscale_image(img):
        msg = "HueSaturationValue transformation expects 1-channel or 3-channel images."
        raise TypeError(msg)
    return fpixel.shift_hsv(img, hue_shift, sat_shift, val_shift)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "alb_horizontal_flip": "lowers",
    "alb_vertical_flip": "lowers",
    "alb_normalize": "lowers",
    "alb_random_brightness_contrast": "lowers",
    "alb_gauss_noise": "lowers",
    "alb_pad_if_needed": "lowers",
    "alb_center_crop": "lowers",
    "alb_to_sepia": "lowers",
    "alb_hue_saturation_value": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
