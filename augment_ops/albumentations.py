"""Use an albumentations transform (or ``Compose``) as a registered, reproducible random op.

>>> import albumentations as A
>>> from augment_ops import from_albumentations
>>> jitter = from_albumentations(
...     A.Compose([A.HorizontalFlip(p=0.5), A.RandomBrightnessContrast(p=0.8)]), name="jitter"
... )  # doctest: +SKIP
>>> Loader("train.csv", batch_size=32, ops=[jitter], resize=224)  # doctest: +SKIP

The op is random: for every sample the loader passes a generator derived from (loader seed,
epoch, manifest index), the op draws a seed from it and runs the transform re-seeded with that
seed, so a sample gets the same augmentation in any process, thread or batch order, and a new one
each epoch. The transform is deep-copied once per process and thread (it is never shared, and the
caller's object is never re-seeded), and the op pickles whenever the transform does.

albumentations is optional (``pip install 'extsrc[albumentations]'``, 2.0.8, the last
MIT-licensed release; its successor AlbumentationsX is AGPL).
"""

from __future__ import annotations

import copy
import os
import random
import threading
from typing import Any

import numpy as np

from augment_ops.registry import Op, OpRegistrationError, register

__all__ = ["AlbumentationsFn", "from_albumentations"]


class AlbumentationsFn:
    """The op function: ``fn(img, rng) -> transform(image=img)["image"]``, seeded from ``rng``.

    Holds the original transform; each process and thread works on its own deep copy, made on
    first use. The copies are not pickled, so the function travels to worker processes as the
    transform alone.
    """

    def __init__(self, transform: Any) -> None:
        self.transform = transform
        self._local = threading.local()

    def _own_copy(self) -> Any:
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.transform = copy.deepcopy(self.transform)
            local.pid = os.getpid()
        return local.transform

    def __call__(self, img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        seed = int(rng.integers(2**32))
        t = self._own_copy()
        # One numpy and one Python generator shared by every child transform, as drawing in order
        # from one stream does. (albumentations' set_random_seed gives every child of a Compose
        # its own generator with the *same* seed, so e.g. HorizontalFlip(p=.5) and
        # VerticalFlip(p=.5) would always fire together.)
        t.set_random_state(np.random.default_rng(seed), random.Random(seed))
        return t(image=img)["image"]

    def __getstate__(self) -> dict[str, Any]:
        return {"transform": self.transform}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.transform = state["transform"]
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"AlbumentationsFn({_describe(self.transform)})"


def _describe(transform: Any) -> str:
    inner = getattr(transform, "transforms", None)
    if inner is not None:
        return f"{type(transform).__name__}([{', '.join(type(t).__name__ for t in inner)}])"
    return type(transform).__name__


def from_albumentations(
    transform: Any,
    *,
    name: str,
    dtype: Any = np.uint8,
    ndim: int = 3,
    min_size: int = 1,
    replace: bool = False,
    description: str | None = None,
) -> Op:
    """Register an albumentations transform (or ``Compose``) as a random op named ``name``.

    The op takes the HWC ``uint8`` image and returns ``transform(image=img)["image"]``; declare
    ``dtype`` / ``ndim`` if the transform changes them (``A.Normalize`` gives ``float32``).
    Image-only: masks, boxes and keypoints are not passed. ``ToTensorV2`` does not belong here
    (ops return numpy arrays; the loader makes the tensors). Registering a name that is taken
    raises unless ``replace=True``. Returns the :class:`~augment_ops.Op`, usable in
    ``Loader(ops=[...])`` / ``transforms=[...]`` by object or by name.
    """
    try:
        import albumentations  # noqa: F401  (the adapter is checked against 2.0.8)
    except ImportError:
        raise ImportError(
            "augment_ops.from_albumentations needs albumentations, which is not installed; "
            "install it with pip install 'extsrc[albumentations]' (albumentations 2.0.8)"
        ) from None
    if not callable(transform) or not hasattr(transform, "set_random_state"):
        raise OpRegistrationError(
            f"from_albumentations needs an albumentations transform or Compose, got "
            f"{type(transform).__name__}"
        )
    op = Op(
        name=name, fn=AlbumentationsFn(transform), num_outputs=1, random=True, dtype=dtype,
        ndim=ndim, min_size=min_size,
        description=description or f"albumentations {_describe(transform)}",
    )
    return register(op, replace=replace)
