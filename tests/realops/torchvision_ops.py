"""torchvision 0.20.1's PIL functional code (pytorch/vision, tag v0.20.1,
torchvision/transforms/_functional_pil.py and functional.py), on a numpy HWC image converted
to PIL and back at the edges, as a user feeding numpy images writes it."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: RUF046

from __future__ import annotations

import numpy as np
from PIL import Image

from realops import realop

SRC = "pytorch/vision@v0.20.1"


# torchvision/transforms/_functional_pil.py @v0.20.1: hflip
@realop("torchvision", f"{SRC} torchvision/transforms/_functional_pil.py: hflip")
def tv_hflip(image: np.ndarray) -> np.ndarray:
    img = Image.fromarray(image)
    return np.asarray(img.transpose(Image.FLIP_LEFT_RIGHT))


# torchvision/transforms/_functional_pil.py @v0.20.1: adjust_hue
@realop("torchvision", f"{SRC} torchvision/transforms/_functional_pil.py: adjust_hue")
def tv_adjust_hue(image: np.ndarray, hue_factor: float = 0.1) -> np.ndarray:
    if not (-0.5 <= hue_factor <= 0.5):
        raise ValueError(f"hue_factor ({hue_factor}) is not in [-0.5, 0.5].")
    img = Image.fromarray(image)

    input_mode = img.mode
    if input_mode in {"L", "1", "I", "F"}:
        return np.asarray(img)

    h, s, v = img.convert("HSV").split()

    np_h = np.array(h, dtype=np.uint8)
    # This will over/underflow, as desired
    np_h += np.array(hue_factor * 255).astype(np.uint8)

    h = Image.fromarray(np_h, "L")

    img = Image.merge("HSV", (h, s, v)).convert(input_mode)
    return np.asarray(img)


# torchvision/transforms/_functional_pil.py @v0.20.1: adjust_gamma
@realop("torchvision", f"{SRC} torchvision/transforms/_functional_pil.py: adjust_gamma")
def tv_adjust_gamma(image: np.ndarray, gamma: float = 0.8, gain: float = 1.0) -> np.ndarray:
    img = Image.fromarray(image)
    if gamma < 0:
        raise ValueError("Gamma should be a non-negative real number")

    input_mode = img.mode
    img = img.convert("RGB")
    gamma_map = [int((255 + 1 - 1e-3) * gain * pow(ele / 255.0, gamma)) for ele in range(256)] * 3
    img = img.point(gamma_map)  # use PIL's point-function to accelerate this part

    img = img.convert(input_mode)
    return np.asarray(img)


# torchvision/transforms/functional.py @v0.20.1: five_crop, with center_crop and
# _functional_pil.crop on a PIL image
@realop("torchvision", f"{SRC} torchvision/transforms/functional.py: five_crop", num_outputs=5)
def tv_five_crop(image: np.ndarray, size: int = 3) -> tuple[np.ndarray, ...]:
    img = Image.fromarray(image)

    def crop(img, top, left, height, width):
        return img.crop((left, top, left + width, top + height))

    size = (int(size), int(size))
    image_width, image_height = img.size
    crop_height, crop_width = size
    if crop_width > image_width or crop_height > image_height:
        msg = "Requested crop size {} is bigger than input size {}"
        raise ValueError(msg.format(size, (image_height, image_width)))

    tl = crop(img, 0, 0, crop_height, crop_width)
    tr = crop(img, 0, image_width - crop_width, crop_height, crop_width)
    bl = crop(img, image_height - crop_height, 0, crop_height, crop_width)
    br = crop(img, image_height - crop_height, image_width - crop_width, crop_height, crop_width)

    crop_top = int(round((image_height - crop_height) / 2.0))
    crop_left = int(round((image_width - crop_width) / 2.0))
    center = crop(img, crop_top, crop_left, crop_height, crop_width)

    return tuple(np.asarray(c) for c in (tl, tr, bl, br, center))


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "tv_hflip": "lowers",
    "tv_adjust_hue": "lowers",
    "tv_adjust_gamma": "lowers",
    "tv_five_crop": "lowers",
}
