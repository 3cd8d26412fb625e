"""Held-out ops of torchvision's PIL functional code (pytorch/vision at commit
08f6a9b50c772c2218b82825bf260c7e4fb32c0a, torchvision/transforms/_functional_pil.py), on a
numpy HWC image converted to PIL and back at the edges, as a user feeding numpy images writes
it. Where the user picks the random transform (``RandomVerticalFlip``, ``ColorJitter``,
``RandomGrayscale``, ``RandomAutocontrast``), its draw is made as torchvision makes it
(``torch.rand(1) < p`` -> ``rng.random() < p``, ``torch.empty(1).uniform_(a, b)`` ->
``rng.uniform(a, b)``)."""

# The authors' code as written: kept as they wrote it.
# ruff: noqa: UP032, E501

from __future__ import annotations

import numbers

import numpy as np
from PIL import Image, ImageEnhance, ImageOps
from PIL import __version__ as PILLOW_VERSION
from realops import realop

SRC = "pytorch/vision@08f6a9b50c772c2218b82825bf260c7e4fb32c0a"
PIL_SRC = f"{SRC} torchvision/transforms/_functional_pil.py"


def _parse_fill(fill, img, min_pil_version, name="fillcolor"):
    # torchvision/transforms/_functional_pil.py @08f6a9b: _parse_fill
    # Process fill color for affine transforms
    major_found, minor_found = (int(v) for v in PILLOW_VERSION.split('.')[:2])
    major_required, minor_required = (int(v) for v in min_pil_version.split('.')[:2])
    if major_found < major_required or (major_found == major_required and minor_found < minor_required):
        if fill is None:
            return {}
        else:
            msg = ("The option to fill background area of the transformed image, "
                   "requires pillow>={}")
            raise RuntimeError(msg.format(min_pil_version))

    num_bands = len(img.getbands())
    if fill is None:
        fill = 0
    if isinstance(fill, (int, float)) and num_bands > 1:
        fill = tuple([fill] * num_bands)
    if isinstance(fill, (list, tuple)):
        if len(fill) != num_bands:
            msg = ("The number of elements in 'fill' does not match the number of "
                   "bands of the image ({} != {})")
            raise ValueError(msg.format(len(fill), num_bands))

        fill = tuple(fill)

    return {name: fill}


# torchvision/transforms/_functional_pil.py @08f6a9b: vflip (RandomVerticalFlip, p=0.5)
@realop("torchvision", f"{PIL_SRC}: vflip (RandomVerticalFlip)")
def tv_random_vflip(image: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    img = Image.fromarray(image)
    if rng.random() < p:
        return np.asarray(img.transpose(Image.FLIP_TOP_BOTTOM))
    return np.asarray(img)


# torchvision/transforms/_functional_pil.py @08f6a9b: adjust_brightness (its factor drawn as
# ColorJitter(brightness=0.4) draws it)
@realop("torchvision", f"{PIL_SRC}: adjust_brightness (ColorJitter)")
def tv_adjust_brightness(image: np.ndarray, rng: np.random.Generator,
                         brightness: float = 0.4) -> np.ndarray:
    brightness_factor = float(rng.uniform(1 - brightness, 1 + brightness))
    img = Image.fromarray(image)
    enhancer = ImageEnhance.Brightness(img)
    img = enhancer.enhance(brightness_factor)
    return np.asarray(img)


# torchvision/transforms/_functional_pil.py @08f6a9b: adjust_saturation (its factor drawn as
# ColorJitter(saturation=0.4) draws it)
@realop("torchvision", f"{PIL_SRC}: adjust_saturation (ColorJitter)")
def tv_adjust_saturation(image: np.ndarray, rng: np.random.Generator,
                         saturation: float = 0.4) -> np.ndarray:
    saturation_factor = float(rng.uniform(1 - saturation, 1 + saturation))
    img = Image.fromarray(image)
    enhancer = ImageEnhance.Color(img)
    img = enhancer.enhance(saturation_factor)
    return np.asarray(img)


# torchvision/transforms/_functional_pil.py @08f6a9b: pad (Pad(2); the branch of palette images
# left out of its other modes: the image is RGB)
@realop("torchvision", f"{PIL_SRC}: pad")
def tv_pad(image: np.ndarray, padding: int = 2, fill: int = 0,
           padding_mode: str = "constant") -> np.ndarray:
    img = Image.fromarray(image)
    if not isinstance(padding, (numbers.Number, tuple, list)):
        raise TypeError("Got inappropriate padding arg")
    if not isinstance(fill, (numbers.Number, str, tuple)):
        raise TypeError("Got inappropriate fill arg")
    if not isinstance(padding_mode, str):
        raise TypeError("Got inappropriate padding_mode arg")

    if isinstance(padding, list):
        padding = tuple(padding)

    if isinstance(padding, tuple) and len(padding) not in [1, 2, 4]:
        raise ValueError("Padding must be an int or a 1, 2, or 4 element tuple, not a " +
                         "{} element tuple".format(len(padding)))

    if isinstance(padding, tuple) and len(padding) == 1:
        # Compatibility with `_functional_tensor.pad`
        padding = padding[0]

    if padding_mode not in ["constant", "edge", "reflect", "symmetric"]:
        raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")

    if padding_mode == "constant":
        opts = _parse_fill(fill, img, "2.3.0", name="fill")
        if img.mode == "P":
            palette = img.getpalette()
            image = ImageOps.expand(img, border=padding, **opts)
            image.putpalette(palette)
            return np.asarray(image)

        return np.asarray(ImageOps.expand(img, border=padding, **opts))
    else:
        if isinstance(padding, int):
            pad_left = pad_right = pad_top = pad_bottom = padding
        if isinstance(padding, tuple) and len(padding) == 2:
            pad_left = pad_right = padding[0]
            pad_top = pad_bottom = padding[1]
        if isinstance(padding, tuple) and len(padding) == 4:
            pad_left = padding[0]
            pad_top = padding[1]
            pad_right = padding[2]
            pad_bottom = padding[3]

        p = [pad_left, pad_top, pad_right, pad_bottom]
        cropping = -np.minimum(p, 0)

        if cropping.any():
            crop_left, crop_top, crop_right, crop_bottom = cropping
            img = img.crop((crop_left, crop_top, img.width - crop_right, img.height - crop_bottom))

        pad_left, pad_top, pad_right, pad_bottom = np.maximum(p, 0)

        img = np.asarray(img)
        # RGB image
        if len(img.shape) == 3:
            img = np.pad(img, ((pad_top, pad_bottom), (pad_left, pad_right), (0, 0)), padding_mode)
        # Grayscale image
        if len(img.shape) == 2:
            img = np.pad(img, ((pad_top, pad_bottom), (pad_left, pad_right)), padding_mode)

        return img


# torchvision/transforms/_functional_pil.py @08f6a9b: to_grayscale (RandomGrayscale(p=0.1):
# num_output_channels=3)
@realop("torchvision", f"{PIL_SRC}: to_grayscale (RandomGrayscale)")
def tv_random_grayscale(image: np.ndarray, rng: np.random.Generator,
                        p: float = 0.1) -> np.ndarray:
    img = Image.fromarray(image)
    if not rng.random() < p:
        return np.asarray(img)
    num_output_channels = 3
    if num_output_channels == 1:
        img = img.convert('L')
    elif num_output_channels == 3:
        img = img.convert('L')
        np_img = np.array(img, dtype=np.uint8)
        np_img = np.dstack([np_img, np_img, np_img])
        img = Image.fromarray(np_img, 'RGB')
    else:
        raise ValueError('num_output_channels should be either 1 or 3')

    return np.asarray(img)


# torchvision/transforms/_functional_pil.py @08f6a9b: autocontrast (RandomAutocontrast, p=0.5)
@realop("torchvision", f"{PIL_SRC}: autocontrast (RandomAutocontrast)")
def tv_random_autocontrast(image: np.ndarray, rng: np.random.Generator,
                           p: float = 0.5) -> np.ndarray:
    img = Image.fromarray(image)
    if rng.random() < p:
        return np.asarray(ImageOps.autocontrast(img))
    return np.asarray(img)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "tv_random_vflip": "lowers",
    "tv_adjust_brightness": "lowers",
    "tv_adjust_saturation": "lowers",
    "tv_pad": "lowers",
    "tv_random_grayscale": "lowers",
    "tv_random_autocontrast": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
