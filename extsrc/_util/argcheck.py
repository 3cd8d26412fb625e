"""Checks of public arguments, with messages that name the function and the argument.

Integers: ``int`` and numpy integers are accepted (``np.int64(4)`` is as good as ``4``); ``bool``,
floats (even ``4.0``) and strings are refused with a :class:`TypeError`; values outside the
allowed range with a :class:`ValueError` that states the range.

Sequences (:func:`check_sequence`): a ``str`` or ``bytes`` where a list is due is refused, since
``tuple("abc")`` would silently be three items. Paths (:func:`check_path`): a ``str`` or
``os.PathLike``, so that a number or a list is not taken for a file name.
"""

from __future__ import annotations

import numbers
import os
import reprlib
from collections.abc import Iterable, Sequence

__all__ = ["check_bool", "check_int", "check_path", "check_sequence"]


def check_int(
    value: object,
    name: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    allow_none: bool = False,
    what: str = "",
) -> int | None:
    """``value`` as a plain ``int`` after checking its type and range (``None`` passes when
    ``allow_none``). ``name`` is how messages refer to it (``"validate: n_jobs"``); ``what`` adds
    the meaning (``"worker processes"``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        none = " or None" if allow_none else ""
        raise TypeError(
            f"{name} must be an int{none}{f' ({what})' if what else ''}, got "
            f"{type(value).__name__} {value!r}"
        )
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        lo = "" if minimum is None else f">= {minimum}"
        hi = "" if maximum is None else f"<= {maximum:,}"
        rng = " and ".join(x for x in (lo, hi) if x)
        raise ValueError(f"{name} must be {rng}{f' ({what})' if what else ''}, got {v:,}")
    return v


def check_bool(value: object, name: str) -> bool:
    """``value`` as a plain ``bool``; only ``True``/``False`` (and numpy bools) pass, so a
    string such as ``"no"`` is not silently taken as true."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_sequence(
    value: object,
    name: str,
    what: str,
    *,
    iterable: bool = False,
    refuse: tuple[type, ...] = (),
    hint: str = "",
    allow_none: bool = False,
) -> None:
    """Raise :class:`TypeError` unless ``value`` is a sequence (any iterable when ``iterable``),
    and not a ``str``, ``bytes`` or one of ``refuse``: ``"{name} must be {what}, got <type>
    <value>; {hint}"``. ``None`` passes when ``allow_none``."""
    if value is None and allow_none:
        return
    kind = Iterable if iterable else Sequence
    if isinstance(value, (str, bytes, *refuse)) or not isinstance(value, kind):
        raise TypeError(
            f"{name} must be {what}, got {type(value).__name__} {reprlib.repr(value)}"
            f"{f'; {hint}' if hint else ''}"
        )


def check_path(
    value: object, name: str, what: str = "a path", *, allow_none: bool = False,
    allow_bytes: bool = False,
) -> None:
    """Raise :class:`TypeError` unless ``value`` is a ``str`` or ``os.PathLike`` (``bytes`` too
    when ``allow_bytes``; ``None`` when ``allow_none``): ``"{name} must be {what} (str or
    os.PathLike)[ or None], got <type> <value>"``."""
    if value is None and allow_none:
        return
    kinds: tuple[type, ...] = (str, bytes, os.PathLike) if allow_bytes else (str, os.PathLike)
    if not isinstance(value, kinds):
        none = " or None" if allow_none else ""
        raise TypeError(
            f"{name} must be {what} (str or os.PathLike){none}, got {type(value).__name__} "
            f"{reprlib.repr(value)}"
        )
