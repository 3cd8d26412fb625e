"""Augmentations of detectron2 (facebookresearch/detectron2, tag v0.6,
detectron2/data/transforms/augmentation_impl.py: ``get_transform``) applied by the transforms of
fvcore 0.1.5.post20221221 (facebookresearch/fvcore, fvcore/transforms/transform.py:
``apply_image``). ``np.random`` -> ``rng``; an augmentation's ``__init__`` arguments are keyword
defaults."""

from __future__ import annotations

import numpy as np

from augment_ops.trace.products import sums_in_order
from realops import realop

D2 = "facebookresearch/detectron2@v0.6 detectron2/data/transforms/augmentation_impl.py"
FV = "facebookresearch/fvcore@v0.1.5.post20221221 fvcore/transforms/transform.py"


def blend_apply_image(img, src_image, src_weight, dst_weight):
    # fvcore/transforms/transform.py @0.1.5.post20221221: BlendTransform.apply_image
    if img.dtype == np.uint8:
        img = img.astype(np.float32)
        img = src_weight * src_image + dst_weight * img
        return np.clip(img, 0, 255).astype(np.uint8)
    else:
        return src_weight * src_image + dst_weight * img


# detectron2 augmentation_impl.py @v0.6: RandomBrightness.get_transform + fvcore BlendTransform
@realop("detectron2", f"{D2}: RandomBrightness.get_transform; {FV}: BlendTransform")
def d2_random_brightness(image: np.ndarray, rng: np.random.Generator,
                         intensity_min: float = 0.8, intensity_max: float = 1.2) -> np.ndarray:
    w = rng.uniform(intensity_min, intensity_max)
    return blend_apply_image(image, src_image=0, src_weight=1 - w, dst_weight=w)


# detectron2 augmentation_impl.py @v0.6: RandomContrast.get_transform + fvcore BlendTransform
@realop("detectron2", f"{D2}: RandomContrast.get_transform; {FV}: BlendTransform")
def d2_random_contrast(image: np.ndarray, rng: np.random.Generator,
                       intensity_min: float = 0.8, intensity_max: float = 1.2) -> np.ndarray:
    w = rng.uniform(intensity_min, intensity_max)
    return blend_apply_image(image, src_image=image.mean(), src_weight=1 - w, dst_weight=w)


# detectron2 augmentation_impl.py @v0.6: RandomSaturation.get_transform + fvcore BlendTransform
@realop("detectron2", f"{D2}: RandomSaturation.get_transform; {FV}: BlendTransform")
def d2_random_saturation(image: np.ndarray, rng: np.random.Generator,
                         intensity_min: float = 0.8, intensity_max: float = 1.2) -> np.ndarray:
    assert image.shape[-1] == 3, "RandomSaturation only works on RGB images"
    w = rng.uniform(intensity_min, intensity_max)
    grayscale = image.dot([0.299, 0.587, 0.114])[:, :, np.newaxis]
    return blend_apply_image(image, src_image=grayscale, src_weight=1 - w, dst_weight=w)


# detectron2 augmentation_impl.py @v0.6: RandomLighting.__init__ and .get_transform + fvcore
# BlendTransform
@realop("detectron2", f"{D2}: RandomLighting.get_transform; {FV}: BlendTransform")
def d2_random_lighting(image: np.ndarray, rng: np.random.Generator,
                       scale: float = 0.1) -> np.ndarray:
    eigen_vecs = np.array(
        [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]
    )
    eigen_vals = np.array([0.2175, 0.0188, 0.0045])
    assert image.shape[-1] == 3, "RandomLighting only works on RGB images"
    weights = rng.normal(scale=scale, size=3)
    return blend_apply_image(
        image, src_image=eigen_vecs.dot(weights * eigen_vals), src_weight=1.0, dst_weight=1.0
    )


# detectron2 augmentation_impl.py @v0.6: RandomFlip.get_transform (horizontal; _rand_range() is
# np.random.uniform(0, 1)) + fvcore HFlipTransform.apply_image
@realop("detectron2", f"{D2}: RandomFlip.get_transform; {FV}: HFlipTransform.apply_image")
def d2_random_flip(img: np.ndarray, rng: np.random.Generator, prob: float = 0.5) -> np.ndarray:
    do = rng.uniform(0, 1) < prob
    if not do:
        return img  # NoOpTransform
    # NOTE: opencv would be faster:
    # https://github.com/pytorch/pytorch/issues/16424#issuecomment-580695672
    if img.ndim <= 3:  # HxW, HxWxC
        return np.flip(img, axis=1)
    else:
        return np.flip(img, axis=-2)


# detectron2 augmentation_impl.py @v0.6: RandomCrop("absolute", (5, 7)).get_transform and
# get_crop_size + fvcore CropTransform.apply_image
@realop("detectron2", f"{D2}: RandomCrop.get_transform; {FV}: CropTransform.apply_image")
def d2_random_crop(image: np.ndarray, rng: np.random.Generator,
                   crop_size: tuple[int, int] = (5, 7)) -> np.ndarray:
    h, w = image.shape[:2]
    croph, cropw = min(crop_size[0], h), min(crop_size[1], w)  # get_crop_size, "absolute"
    assert h >= croph and w >= cropw, "Shape computation has bugs."
    h0 = rng.integers(h - croph + 1)
    w0 = rng.integers(w - cropw + 1)
    x0, y0 = w0, h0
    if len(image.shape) <= 3:
        return image[y0 : y0 + croph, x0 : x0 + cropw]
    else:
        return image[..., y0 : y0 + croph, x0 : x0 + cropw, :]


# fvcore/transforms/transform.py @0.1.5.post20221221: PadTransform.apply_image
@realop("fvcore", f"{FV}: PadTransform.apply_image")
def fv_pad(img: np.ndarray, x0: int = 2, y0: int = 1, x1: int = 3, y1: int = 0,
           pad_value: float = 0) -> np.ndarray:
    if img.ndim == 3:
        padding = ((y0, y1), (x0, x1), (0, 0))
    else:
        padding = ((y0, y1), (x0, x1))
    return np.pad(
        img,
        padding,
        mode="constant",
        constant_values=pad_value,
    )


# numpy's float64 dot sums in its BLAS kernel's order, which differs from the written-out sum
# on some machines and not on others (the eigenvector matrix times a drawn vector, in about 2 of
# 3 draws on one x86-64 machine with OpenBLAS; the image times the grey weights on another): the
# tracer measures it (augment_ops.trace.products) and lowers the op only where the two agree.
_BLAS_ORDER = (r"refuses: a matrix product of float64 values with x\.dot\(w\) or np\.dot, which "
               r"numpy sums here in its BLAS kernel's order")
_LIGHTING = "lowers" if sums_in_order("dot", np.dtype(np.float64), 3, left=np.array(
    [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])
) else _BLAS_ORDER
_SATURATION = "lowers" if sums_in_order("dot", np.dtype(np.float64), 3,
                                        right=np.array([0.299, 0.587, 0.114])) else _BLAS_ORDER

# What the tracer does with each op today: "lowers", or "refuses: <regex of the reason>".
EXPECT: dict[str, str] = {
    "d2_random_brightness": "lowers",
    "d2_random_contrast": "lowers",
    "d2_random_saturation": _SATURATION,
    "d2_random_lighting": _LIGHTING,
    "d2_random_flip": "lowers",
    "d2_random_crop": "lowers",
    "fv_pad": "lowers",
}
