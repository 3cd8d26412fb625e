"""Held-out op of a RandAugment reference implementation (ildoonet/pytorch-randaugment at commit
48b8f509c4bbda93bbe733d98b3fd052b6e4c8ae, RandAugment/augmentations.py, adapted from
rpmcruz/autoaugment), on a numpy HWC image converted to PIL and back at the edges."""

from __future__ import annotations

import numpy as np
import PIL.ImageDraw
from PIL import Image
from realops import realop

SRC = ("ildoonet/pytorch-randaugment@48b8f509c4bbda93bbe733d98b3fd052b6e4c8ae "
       "RandAugment/augmentations.py")


def CutoutAbs(img, v, rng):  # [0, 60] => percentage: [0, 0.2]
    # RandAugment/augmentations.py @48b8f50: CutoutAbs (np.random.uniform(w), which is
    # uniform(low=w, high=1.0), a draw between 1 and w -> rng.uniform(1.0, w), as
    # Generator.uniform refuses high < low)
    # assert 0 <= v <= 20
    if v < 0:
        return img
    w, h = img.size
    x0 = rng.uniform(1.0, w)
    y0 = rng.uniform(1.0, h)

    x0 = int(max(0, x0 - v / 2.))
    y0 = int(max(0, y0 - v / 2.))
    x1 = min(w, x0 + v)
    y1 = min(h, y0 + v)

    xy = (x0, y0, x1, y1)
    color = (125, 123, 114)
    # color = (0, 0, 0)
    img = img.copy()
    PIL.ImageDraw.Draw(img).rectangle(xy, color)
    return img


# RandAugment/augmentations.py @48b8f50: Cutout (v=0.2: its largest value, RandAugment's m=30)
@realop("RandAugment", f"{SRC}: Cutout, CutoutAbs")
def ra_cutout(image: np.ndarray, rng: np.random.Generator, v: float = 0.2) -> np.ndarray:
    img = Image.fromarray(image)
    assert 0.0 <= v <= 0.2
    if v <= 0.:
        return np.asarray(img)

    v = v * img.size[0]
    return np.asarray(CutoutAbs(img, v, rng))


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "ra_cutout": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
