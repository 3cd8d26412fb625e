"""``reshape`` and ``np.broadcast_to`` on :class:`Sym` (registered in
:data:`augment_ops.trace.sym.HANDLERS`): a new shape of the same elements in C order, and a
read-only array repeated along axes of length 1.

Sizes may be per-sample (``img.reshape(-1, c)``, ``np.broadcast_to(v, img.shape)``): the size a
``-1`` stands for is the array's size divided by the other sizes, with the factors both sides
share cancelled (``h * w * 3 / 3`` is ``h * w``), and where numpy raises for a sample (a size
that does not divide, two sizes that do not broadcast) so does the traced op.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from augment_ops.trace.creation import _holds_sym
from augment_ops.trace.facts import _same
from augment_ops.trace.ir import Dim, Node, TraceError, _new, const
from augment_ops.trace.sym import Sym, _dim, _dim_sym, _dop, implements, raise_where, ufunc


def _same_dim(a: Dim, b: Dim) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return a is b or _same(a, b)


def _sizes(shape: Any) -> list[Dim]:
    """A shape argument (an int, a per-sample size, or a sequence of them) as dims."""
    items = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    dims: list[Dim] = []
    for d in items:
        if isinstance(d, Sym):
            if d.ndim or d.dtype.kind not in "iu":
                raise TypeError(f"'{d.dtype}' object cannot be interpreted as an integer")
        elif not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise TypeError(f"'{type(d).__name__}' object cannot be interpreted as an integer")
        dims.append(_dim(d))
    return dims


def _product(dims: list[Dim]) -> Dim:
    total: Dim = 1
    for d in dims:
        total = _dop("multiply", total, d)
    return total


def _cancel(have: list[Dim], want: list[Dim]) -> tuple[list[Dim], list[Dim]]:
    """``have`` and ``want`` without the factors they share (the same per-sample size, or
    equal constants), and without factors of 1."""
    have = [d for d in have if not (isinstance(d, int) and d == 1)]
    want = [d for d in want if not (isinstance(d, int) and d == 1)]
    rest: list[Dim] = []
    for d in want:
        match = next((i for i, e in enumerate(have) if _same_dim(d, e)), None)
        if match is None:
            rest.append(d)
        else:
            del have[match]
    ints = [d for d in have if isinstance(d, int)], [d for d in rest if isinstance(d, int)]
    a, b = int(np.prod(ints[0])), int(np.prod(ints[1]))
    if a and b and a % b == 0:  # 12 against 3: 4 left on the array's side
        have = [d for d in have if not isinstance(d, int)] + ([a // b] if a != b else [])
        rest = [d for d in rest if not isinstance(d, int)]
    return have, rest


def _size_error(n: Node, dims: list[Dim]) -> str:
    shown = tuple(d if isinstance(d, int) else "h" for d in dims)
    return f"cannot reshape an array of rank {n.ndim} into shape {shown}"


@implements("reshape")
def _np_reshape(a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None,
                copy: Any = None) -> Sym:
    """``np.reshape(a, shape)`` and ``a.reshape(*shape)``: the same elements, in C order."""
    if shape is None:
        shape = newshape
    if not isinstance(a, Sym):
        if _holds_sym(shape) or isinstance(shape, Sym):
            raise TraceError("np.reshape of a constant to a per-sample shape")
        return np.reshape(a, shape, order=order)
    if order != "C" or copy is False:
        raise TraceError("reshape with order= other than 'C' or copy=False (a traced array has "
                         "no memory layout)")
    n = a._checked()
    dims = _sizes(shape)
    unknown = [i for i, d in enumerate(dims) if isinstance(d, int) and d == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    if builtins.any(isinstance(d, int) and d < -1 for d in dims):
        raise ValueError("negative dimensions not allowed")
    for d in dims:
        if isinstance(d, Node):
            raise_where(ufunc("less", Sym(d), 0), ValueError, "negative dimensions not allowed")
    known = [d for i, d in enumerate(dims) if i not in unknown]
    have, rest = _cancel(list(n.shape), known)
    if unknown:
        if rest:
            # A size per sample divided by the other sizes: numpy raises where it does not
            # divide (or they are 0).
            total, part = _dim_sym(_product(have)), _dim_sym(_product(rest))
            raise_where(ufunc("equal", part, 0), ValueError, _size_error(n, dims))
            raise_where(ufunc("not_equal", ufunc("remainder", total, part), 0), ValueError,
                        _size_error(n, dims))
            dims[unknown[0]] = _dim(ufunc("floor_divide", total, part))
        else:
            dims[unknown[0]] = _product(have)
    elif have or rest:
        if builtins.all(isinstance(d, int) for d in (*have, *rest)):
            raise ValueError(_size_error(n, dims))
        raise_where(ufunc("not_equal", _dim_sym(_product(have)), _dim_sym(_product(rest))),
                    ValueError, _size_error(n, dims))
    if len(dims) == n.ndim and builtins.all(_same_dim(d, e) for d, e in zip(dims, n.shape,
                                                                             strict=True)):
        return a._view(n)
    nodes = tuple(d for d in dims if isinstance(d, Node))
    return a._view(_new("reshape", (n, *nodes), (), n.dtype, tuple(dims)))


@implements("broadcast_to")
def _np_broadcast_to(array: Any, shape: Any, subok: bool = False) -> Sym:
    """``np.broadcast_to``: ``array`` repeated along its axes of length 1 (and new leading
    axes) to ``shape``, read-only as numpy's view is."""
    x = array if isinstance(array, Sym) else Sym(const(np.asarray(array)))
    n = x._checked()
    dims = _sizes(shape)
    if n.ndim > len(dims):
        raise ValueError("input operand has more dimensions than allowed by the axis remapping")
    for k, d in enumerate(n.shape):
        want = dims[len(dims) - n.ndim + k]
        if _same_dim(d, want) or (isinstance(d, int) and d == 1):
            continue
        if isinstance(d, int) and isinstance(want, int):
            raise ValueError("operands could not be broadcast together with remapped shapes")
        # numpy repeats a size of 1 and raises where another differs from the shape's
        bad = ufunc("not_equal", _dim_sym(d), _dim_sym(want))
        if not isinstance(d, int):
            bad = ufunc("bitwise_and", bad, ufunc("not_equal", _dim_sym(d), 1))
        raise_where(bad, ValueError, f"operands could not be broadcast together with remapped "
                                     f"shapes (their sizes differ on axis "
                                     f"{len(dims) - n.ndim + k})")
    for d in dims:
        if isinstance(d, Node):
            raise_where(ufunc("less", Sym(d), 0), ValueError,
                        "all elements of broadcast shape must be non-negative")
    if len(dims) == n.ndim and builtins.all(_same_dim(d, e) for d, e in zip(dims, n.shape,
                                                                             strict=True)):
        out = n
    else:
        nodes = tuple(d for d in dims if isinstance(d, Node))
        out = _new("broadcast", (n, *nodes), (), n.dtype, tuple(dims))
    return Sym(out, writable=False, base=False)
