"""Held-out op of DINO's data code (facebookresearch/dino at commit
144f70567a6ff853b9ea44503ba37fdcf8ca41fb, utils.py), on a numpy HWC image converted to PIL and
back at the edges. ``random.random()`` -> ``rng.random()``."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageOps
from realops import realop

SRC = "facebookresearch/dino@144f70567a6ff853b9ea44503ba37fdcf8ca41fb utils.py"


# utils.py @144f705: Solarization.__call__ (p=0.2, as DINO's second global crop uses it)
@realop("dino", f"{SRC}: Solarization.__call__")
def dino_solarization(image: np.ndarray, rng: np.random.Generator, p: float = 0.2) -> np.ndarray:
    img = Image.fromarray(image)
    if rng.random() < p:
        return np.asarray(ImageOps.solarize(img))
    else:
        return np.asarray(img)


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "dino_solarization": "lowers",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
