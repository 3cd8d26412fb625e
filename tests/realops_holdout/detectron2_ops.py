"""Held-out augmentation of detectron2 (facebookresearch/detectron2, tag v0.6):
``ResizeShortestEdge.get_transform`` (detectron2/data/transforms/augmentation_impl.py) applied by
``ResizeTransform.apply_image`` (detectron2/data/transforms/transform.py, its uint8 branch: PIL).
``np.random`` -> ``rng``; the augmentation's ``__init__`` arguments are keyword defaults."""

from __future__ import annotations

import sys

import numpy as np
from PIL import Image
from realops import realop

D2 = "facebookresearch/detectron2@v0.6 detectron2/data/transforms"


def get_output_shape(oldh: int, oldw: int, short_edge_length: int,
                     max_size: int) -> tuple[int, int]:
    # augmentation_impl.py @v0.6: ResizeShortestEdge.get_output_shape
    h, w = oldh, oldw
    size = short_edge_length * 1.0
    scale = size / min(h, w)
    if h < w:
        newh, neww = size, scale * w
    else:
        newh, neww = scale * h, size
    if max(newh, neww) > max_size:
        scale = max_size * 1.0 / max(newh, neww)
        newh = newh * scale
        neww = neww * scale
    neww = int(neww + 0.5)
    newh = int(newh + 0.5)
    return (newh, neww)


# augmentation_impl.py @v0.6: ResizeShortestEdge.get_transform (sample_style="range"; COCO's
# (640, 800) and max_size=1333 scaled to the test images: (8, 12) and 20), then transform.py:
# ResizeTransform.apply_image
@realop("detectron2", f"{D2}/augmentation_impl.py: ResizeShortestEdge.get_transform; "
                      "transform.py: ResizeTransform.apply_image")
def d2_resize_shortest_edge(image: np.ndarray, rng: np.random.Generator,
                            short_edge_length: tuple[int, int] = (8, 12),
                            max_size: int = 20, interp: int = Image.BILINEAR) -> np.ndarray:
    h, w = image.shape[:2]
    size = rng.integers(short_edge_length[0], short_edge_length[1] + 1)
    if size == 0:
        return image
    newh, neww = get_output_shape(h, w, size, max_size if max_size else sys.maxsize)

    img = image
    assert img.shape[:2] == (h, w)
    assert len(img.shape) <= 4
    interp_method = interp

    if len(img.shape) > 2 and img.shape[2] == 1:
        pil_image = Image.fromarray(img[:, :, 0], mode="L")
    else:
        pil_image = Image.fromarray(img)
    pil_image = pil_image.resize((neww, newh), interp_method)
    ret = np.asarray(pil_image)
    if len(img.shape) > 2 and img.shape[2] == 1:
        ret = np.expand_dims(ret, -1)
    return ret


# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "d2_resize_shortest_edge": r"refuses: PIL Image\.resize on a traced image",
}

# Lowered ops whose native path fails the parity checks: op -> what goes wrong.
KNOWN_FAILURES: dict[str, str] = {}
