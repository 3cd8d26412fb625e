"""FFCV's image operations (libffcv/ffcv, ffcv/transforms/), written for numba over a batch:
here the body for one image ``images[i]`` (``dst[i]`` is the output), with ``numpy.random``'s
``randint``/``rand`` -> ``rng``. The commit is the one each file was read at."""

from __future__ import annotations

import numpy as np

from realops import realop

FFCV = "libffcv/ffcv"


# ffcv/transforms/cutout.py @0b5d5d872289cbfa8ff98c9b9ba4a0213c9b2e4d: Cutout.generate_code's
# cutout_square (it blacked out the image in place: here a copy)
@realop("ffcv", f"{FFCV}@0b5d5d872289cbfa8ff98c9b9ba4a0213c9b2e4d ffcv/transforms/cutout.py: "
                "Cutout cutout_square")
def ffcv_cutout(image: np.ndarray, rng: np.random.Generator, crop_size: int = 4) -> np.ndarray:
    image = image.copy()
    # Generate random origin
    coord = (
        rng.integers(image.shape[0] - crop_size),
        rng.integers(image.shape[1] - crop_size),
    )
    # Black out image in-place
    image[coord[0]:coord[0] + crop_size, coord[1]:coord[1] + crop_size] = 0
    return image


# ffcv/transforms/flip.py @053cc824606cfe8a815b84719178951799c43136: RandomHorizontalFlip's flip
# (dst[i] kept the image where it did not flip)
@realop("ffcv", f"{FFCV}@053cc824606cfe8a815b84719178951799c43136 ffcv/transforms/flip.py: "
                "RandomHorizontalFlip flip")
def ffcv_random_hflip(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    dst = image
    should_flip = rng.random() > 0.5
    if should_flip:
        dst = image[:, ::-1]
    return dst


# ffcv/transforms/translate.py @077164781a063d2e62fad9083c87f19fa6400b65: RandomTranslate's
# translate (dst: the image padded by `padding` on each side, filled with `fill`)
@realop("ffcv", f"{FFCV}@077164781a063d2e62fad9083c87f19fa6400b65 ffcv/transforms/"
                "translate.py: RandomTranslate translate")
def ffcv_random_translate(image: np.ndarray, rng: np.random.Generator, padding: int = 3,
                          fill: tuple[int, int, int] = (0, 0, 0)) -> np.ndarray:
    pad = padding
    h, w, c = image.shape
    dst = np.zeros((h + 2 * pad, w + 2 * pad, c), dtype=image.dtype)
    dst[:] = np.array(fill)
    dst[pad:pad+h, pad:pad+w] = image
    y_coord = rng.integers(low=0, high=2 * pad + 1)
    x_coord = rng.integers(low=0, high=2 * pad + 1)
    return dst[y_coord:y_coord+h, x_coord:x_coord+w]


# ffcv/transforms/solarization.py @2019acc04d04e8a231415675b16b62740e4b12a7: Solarization's
# solarize (dst[i] is uint8 like the image)
@realop("ffcv", f"{FFCV}@2019acc04d04e8a231415675b16b62740e4b12a7 ffcv/transforms/"
                "solarization.py: Solarization solarize")
def ffcv_solarization(image: np.ndarray, rng: np.random.Generator,
                      solarization_prob: float = 0.5, threshold: float = 128) -> np.ndarray:
    dst = np.empty_like(image)
    should_solarize = rng.random() < solarization_prob
    if should_solarize:
        mask = (image >= threshold)
        dst[:] = image * (1-mask) + (255 - image)*mask
    else:
        dst[:] = image
    return dst


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "ffcv_cutout": "lowers",
    "ffcv_random_hflip": "lowers",
    "ffcv_random_translate": "lowers",
    "ffcv_solarization": "lowers",
}
