"""Augmentations of Pillow's ``ImageOps`` (python-pillow/Pillow 13.0.0, src/PIL/ImageOps.py, the
version installed here, called as installed), on a numpy HWC image converted to PIL and back at
the edges, as a user feeding numpy images writes it. The arguments are the functions' own,
given as keyword defaults."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageOps
from realops import realop

LIB = "Pillow"
SRC = "python-pillow/Pillow@13.0.0 src/PIL/ImageOps.py"


# src/PIL/ImageOps.py @13.0.0: invert
@realop(LIB, f"{SRC}: invert")
def pil_invert(image: np.ndarray) -> np.ndarray:
    return np.asarray(ImageOps.invert(Image.fromarray(image)))


# src/PIL/ImageOps.py @13.0.0: mirror (left to right)
@realop(LIB, f"{SRC}: mirror")
def pil_mirror(image: np.ndarray) -> np.ndarray:
    return np.asarray(ImageOps.mirror(Image.fromarray(image)))


# src/PIL/ImageOps.py @13.0.0: flip (top to bottom)
@realop(LIB, f"{SRC}: flip")
def pil_flip(image: np.ndarray) -> np.ndarray:
    return np.asarray(ImageOps.flip(Image.fromarray(image)))


# src/PIL/ImageOps.py @13.0.0: grayscale (an "L" image: one channel, so a 2-D array)
@realop(LIB, f"{SRC}: grayscale", ndim=2)
def pil_grayscale(image: np.ndarray) -> np.ndarray:
    return np.asarray(ImageOps.grayscale(Image.fromarray(image)))


# src/PIL/ImageOps.py @13.0.0: crop (border=1: one pixel off each side)
@realop(LIB, f"{SRC}: crop", min_size=3)
def pil_crop(image: np.ndarray, border: int = 1) -> np.ndarray:
    return np.asarray(ImageOps.crop(Image.fromarray(image), border=border))


# src/PIL/ImageOps.py @13.0.0: pad (to 16x16, resized to fit inside and centred)
@realop(LIB, f"{SRC}: pad")
def pil_pad(image: np.ndarray, size: tuple[int, int] = (16, 16),
            centering: tuple[float, float] = (0.5, 0.5)) -> np.ndarray:
    return np.asarray(ImageOps.pad(Image.fromarray(image), size, centering=centering))


# src/PIL/ImageOps.py @13.0.0: fit (to 8 wide and 6 high: resized and centre-cropped to that
# aspect ratio)
@realop(LIB, f"{SRC}: fit")
def pil_fit(image: np.ndarray, size: tuple[int, int] = (8, 6)) -> np.ndarray:
    return np.asarray(ImageOps.fit(Image.fromarray(image), size))


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "pil_invert": "lowers",
    "pil_mirror": "lowers",
    "pil_flip": "lowers",
    "pil_grayscale": "lowers",
    "pil_crop": "lowers",
    # the first refused call differs with Pillow's version (ImageOps.contain changed in 13)
    "pil_pad": r"refuses: (PIL\.Image\.Image\.paste given a traced image|PIL Image\.resize on "
               r"a traced image)",
    "pil_fit": r"refuses: PIL Image\.resize on a traced image \(PIL's resampling filters",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
