"""The user's line, for warnings raised deep inside the package.

A warning about how a loader was built should point at the user's ``Loader(...)`` line, however
many of the package's own frames lie between (a subclass such as ``VideoLoader``, a preset, a
helper): :func:`user_stacklevel` counts them instead of a fixed ``stacklevel``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["user_stacklevel"]

#: The folders whose frames are the package's own: extsrc and augment_ops, side by side.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OWN = tuple(os.path.join(_ROOT, name) + os.sep for name in ("extsrc", "augment_ops"))


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a :func:`warnings.warn` in the calling function point at
    the first frame outside the package (the frame that called into it)."""
    level = 1
    frame = sys._getframe(1)  # the function about to warn
    callee = None
    while frame.f_back is not None and (_own(frame) or _generated_init(frame, callee)):
        frame, callee = frame.f_back, frame
        level += 1
    return level


def _generated_init(frame: Any, callee: Any) -> bool:
    """Whether ``frame`` is the ``__init__`` a dataclass generates (file ``"<string>"``) for
    one of the package's classes: the frame it called is the package's ``__post_init__``."""
    return (frame.f_code.co_filename == "<string>" and frame.f_code.co_name == "__init__"
            and callee is not None and callee.f_code.co_name == "__post_init__"
            and _own(callee))


def _own(frame: Any) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(_OWN)
