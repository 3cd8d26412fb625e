"""augment_ops: register numpy augmentations and look them up by name.

>>> import augment_ops
>>> @augment_ops.augment_op(num_outputs=2)
... def halves(img):
...     return img[:, : img.shape[1] // 2], img[:, img.shape[1] // 2 :]
>>> "halves" in augment_ops.available()
True
"""

from augment_ops import builtin
from augment_ops.albumentations import from_albumentations
from augment_ops.paths import available_paths
from augment_ops.registry import (
    Op,
    OpContractError,
    OpRegistrationError,
    augment_op,
    available,
    get,
    iter_ops,
    register,
    unregister,
)
from augment_ops.trace import TraceError, explain
from augment_ops.trace_cache import clear_trace_cache

__all__ = [
    "Op",
    "OpContractError",
    "OpRegistrationError",
    "TraceError",
    "augment_op",
    "available",
    "available_paths",
    "builtin",
    "clear_trace_cache",
    "explain",
    "from_albumentations",
    "get",
    "iter_ops",
    "register",
    "unregister",
]
