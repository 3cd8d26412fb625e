"""numpy functions, indexing, assignment into regions and reductions on :class:`Sym`, as graph
builders registered in :data:`augment_ops.trace.sym.HANDLERS`.

A numpy function an op calls on a traced array reaches ``Sym.__array_function__``, which runs the
builder registered under the function's name; one that has none is refused (:class:`TraceError`)
and the op runs on the numpy path.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from augment_ops.trace.facts import _at_most, _nonneg, _same, lower, upper
from augment_ops.trace.ir import Dim, Node, TraceError, _new, const
from augment_ops.trace.sym import (
    Sym,
    _broadcast,
    _dim,
    _dim_sym,
    _dlt,
    _dop,
    _dwhere,
    _is_weak,
    _rep,
    _to_node,
    cast_node,
    implements,
    raise_where,
    ufunc,
)


@implements("Sym.setitem")
def _setitem(a: Sym, key: Any, value: Any) -> None:
    """``a[key] = value``: a boolean mask, or a region of slices filled with a scalar."""
    n = a._checked()
    if not a._writable:
        raise TraceError("a write into the input image or a view of it (numpy refuses: "
                         "the input is read-only; write into img.copy())")
    if isinstance(key, Sym) and key.dtype.kind == "b":
        v = np.asarray(value) if not isinstance(value, Sym) else value
        a._write(_where(_mask_of(key, n), _setitem_value(n.dtype, v), a).node)
        return
    whole = _assign_whole(n, key, value)
    if whole is not None:
        a._write(whole)
        return
    full = _full_key(key, n.ndim)
    if n.ndim == 3 and isinstance(full[2], (list, tuple)) and _holds_sym(full[2]):
        full = (*full[:2], np_array(full[2]))  # a list of per-sample channels
    if n.ndim == 3 and isinstance(full[2], Sym) and full[2].dtype.kind in "iu":
        a._write(_fill_drawn_channels(n, full, value))
        return
    elements = _value_elements(value)
    channels = _channel_list(n, key)
    if elements is None and channels is None:
        a._write(_fill_region(n, key, value))
        return
    a._write(_fill_channels(n, key, elements if elements is not None else [value], channels))


def _value_elements(value: Any) -> list[Any] | None:
    """The values along the last axis of a per-channel fill ``value`` (a list, tuple, array or
    traced vector, its leading axes of length 1 dropped as numpy broadcasts them); None for a
    scalar."""
    if isinstance(value, Sym):
        node = value._checked()
        if node.ndim == 0:
            return None
        if builtins.any(not isinstance(d, int) for d in node.shape):
            raise TraceError("assigning an array of per-sample shape into a region (only a "
                             "scalar or per-channel fill is lowered)")
        if builtins.any(d != 1 for d in node.shape[:-1]):
            raise TraceError(f"assigning an array of shape {node.shape} into a region (only a "
                             "scalar or per-channel fill is lowered)")
        for _ in range(node.ndim - 1):
            node = _new("take", (node, 0), (0,), node.dtype, node.shape[1:])
        return [Sym(_new("take", (node, i), (0,), node.dtype, ())) for i in range(node.shape[0])]
    if isinstance(value, (list, tuple)):
        items: list[Any] = list(value)
        while len(items) == 1 and isinstance(items[0], (list, tuple)):
            items = list(items[0])
        if builtins.any(isinstance(v, (list, tuple)) or (isinstance(v, (Sym, np.ndarray))
                                                          and np.ndim(v) != 0) for v in items):
            raise TraceError("assigning a nested sequence into a region (only a scalar or "
                             "per-channel fill is lowered)")
        return items
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        if builtins.any(d != 1 for d in value.shape[:-1]):
            raise TraceError(f"assigning an array of shape {value.shape} into a region (only a "
                             "scalar or per-channel fill is lowered)")
        return list(value.reshape(-1))
    return None


def _channel_list(n: Node, key: Any) -> list[int] | None:
    """The channels ``a[..., chans] = v`` writes when ``chans`` is a list of ints; None for an
    int or slice (a fill of one range)."""
    key = key if isinstance(key, tuple) else (key,)
    if not builtins.any(isinstance(k, (list, tuple, np.ndarray)) for k in key):
        return None
    key = _full_key(key, n.ndim)
    if n.ndim != 3 or len(key) != 3 or builtins.any(
            isinstance(k, (list, tuple, np.ndarray)) for k in key[:2]):
        raise TraceError("an assignment with a list of indices other than on the channel axis")
    c = n.shape[2]
    arr = np.asarray(key[2])
    if not isinstance(c, int) or arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TraceError("an assignment with a channel index other than an int, a slice or a "
                         "list of ints")
    bad = [int(i) for i in arr if not -c <= int(i) < c]
    if bad:
        raise IndexError(f"index {bad[0]} is out of bounds for axis 2 with size {c}")
    return [int(i) % c for i in arr]


def _fill_channels(n: Node, key: Any, values: list[Any], channels: list[int] | None) -> Node:
    """``a[y0:y1, x0:x1, chans] = values``: one fill per channel written, each with its value as
    numpy converts it (a Python int out of the dtype's range is refused as numpy refuses it)."""
    if n.ndim != 3:
        raise TraceError("assigning a row of values into a region of a 2-D array (only a "
                         "scalar fill is lowered there)")
    key = _full_key(key, n.ndim)
    c = n.shape[2]
    if channels is None:
        ck = key[2]
        if not isinstance(c, int):
            raise TraceError("a per-channel fill of an array whose channel count is per-sample")
        if isinstance(ck, (int, np.integer)) and not isinstance(ck, bool):
            channels = [int(ck) % c]
        elif isinstance(ck, slice) and not builtins.any(
                isinstance(b, Sym) for b in (ck.start, ck.stop, ck.step)):
            channels = list(range(c))[ck]
        else:
            raise TraceError("a per-channel fill with a channel index other than an int, a "
                             "constant slice or a list of ints")
    if len(values) not in (1, len(channels)):
        raise ValueError(f"could not broadcast input array from shape ({len(values)},) into "
                         f"shape (..., {len(channels)})")
    if len(values) == 1:
        values = values * len(channels)
    # numpy converts every value before it writes any.
    converted = [_setitem_value(n.dtype, v) for v in values]
    out = n
    for ch, v in zip(channels, converted, strict=True):
        out = _fill_region(out, (key[0], key[1], ch), v)
    return out


def _fill_drawn_channels(n: Node, key: tuple, value: Any) -> Node:
    """``a[y0:y1, x0:x1, idx] = v`` with per-sample channel indices ``idx`` (drawn): each
    channel is filled over rows ``y0:y1`` where ``idx`` names it, over no rows where not."""
    elements = _value_elements(value)
    if elements is not None and len(elements) != 1:
        raise TraceError("a fill of per-sample channels with more than one value")
    v = _setitem_value(n.dtype, elements[0] if elements is not None else value)
    size = n.shape[2]
    items = _drawn_indices(key[2], size, 2)
    if not isinstance(key[0], slice) or not isinstance(key[1], slice):
        raise TraceError("an assignment other than out[y0:y1, x0:x1, channels] = scalar")
    lo, hi, _ = _normalize_slice(slice(key[0].start, key[0].stop, key[0].step or 1),
                                 n.shape[0])
    out = n
    for c in range(size):
        hit = None
        for item in items:
            h = _is_index(item, c, size)
            hit = h if hit is None else ufunc("bitwise_or", hit, h)
        rows = slice(_dim_sym(lo), _dim_sym(_dwhere(hit, hi, lo)))
        out = _fill_region(out, (rows, key[1], c), v)
    return out


def _full_key(key: Any, ndim: int) -> tuple:
    """An assignment's key with ``...`` expanded and missing trailing axes as ``:``."""
    key = key if isinstance(key, tuple) else (key,)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1:]
    return key + (slice(None),) * (ndim - len(key))


def _assign_whole(n: Node, key: Any, value: Any) -> Node | None:
    """``a[:] = b`` / ``a[...] = b`` with a traced ``b`` of ``a``'s shape: ``b`` converted to
    ``a``'s dtype (numpy's unsafe cast) replaces ``a``; None for other assignments."""
    key = key if isinstance(key, tuple) else (key,)
    if not isinstance(value, Sym) or value.ndim != n.ndim or n.ndim == 0:
        return None
    if not builtins.all(k is Ellipsis or (isinstance(k, slice) and k == slice(None))
                        for k in key):
        return None
    v = value._checked()
    for dv, dn in zip(v.shape, n.shape, strict=True):
        if not (dv is dn or (isinstance(dv, int) and isinstance(dn, int) and dv == dn)
                or (isinstance(dv, Node) and isinstance(dn, Node) and _same(dv, dn))):
            return None
    return cast_node(v, n.dtype)


def _mask_of(key: Sym, n: Node) -> Sym:
    """A boolean index ``key`` of ``a[key] = v`` as a mask of ``a``'s shape: numpy's ``key``
    covers ``a``'s leading axes and selects whole subarrays along the rest (an HxW mask on an
    HWC image selects pixels, all channels)."""
    kn = key._checked()
    if kn.ndim > n.ndim:
        raise TraceError(f"a boolean index of rank {kn.ndim} into an array of rank {n.ndim}")
    for k, (dk, dn) in enumerate(zip(kn.shape, n.shape[:kn.ndim], strict=True)):
        if not (dk is dn or (isinstance(dk, int) and isinstance(dn, int) and dk == dn)
                or (isinstance(dk, Node) and isinstance(dn, Node) and _same(dk, dn))):
            raise TraceError(f"a boolean index whose axis {k} may differ in length from the "
                             "array's")
    node = kn
    for ax in range(kn.ndim, n.ndim):
        node = _new("expand", (node,), (ax,), node.dtype, (*node.shape, 1))
    return Sym(node)


def _normalize_slice(s: slice, n: Dim) -> tuple[Dim, Dim, bool]:
    """numpy's bounds for ``s`` on an axis of length ``n``: ``(lo, hi, reversed)`` with
    ``0 <= lo <= hi <= n``, the slice taking ``lo..hi-1`` (reversed when the step is -1)."""
    step = s.step
    if isinstance(step, Sym):
        raise TraceError("a per-sample slice step")
    if step is None:
        step = 1
    if step not in (1, -1):
        raise TraceError(f"a slice step of {step} (only 1 and -1 are lowered)")
    if s.start is None and s.stop is None:
        return 0, n, step == -1

    def bound(b: Any, default: Dim, lo_clamp: Dim, hi_clamp: Dim) -> Dim:
        if b is None:
            return default
        if isinstance(b, Sym) and b.dtype.kind not in "iu":
            raise TraceError(f"a slice bound of dtype {b.dtype}")
        if isinstance(b, (np.integer,)):
            b = int(b)
        if not isinstance(b, (int, Sym)):
            raise TraceError(f"a slice bound of type {type(b).__name__}")
        b = _dim(b)
        # Facts known at trace time (a size, h // 2, min(size, h)) spare the run-time clamps.
        if not _nonneg(b):
            neg = _dlt(b, 0)
            b = _dwhere(neg, _dop("add", b, n), b)
            b = _dwhere(_dlt(b, lo_clamp), lo_clamp, b)
        if not _at_most(b, hi_clamp):
            b = _dwhere(_dlt(hi_clamp, b), hi_clamp, b)
        return b

    if step == 1:
        lo = bound(s.start, 0, 0, n)
        hi = bound(s.stop, n, 0, n)
        if not _at_most(lo, hi):
            hi = _dwhere(_dlt(hi, lo), lo, hi)
        return lo, hi, False
    last = _dop("subtract", n, 1)
    start = bound(s.start, last, -1, last)
    stop = bound(s.stop, -1, -1, last)
    lo, hi = _dop("add", stop, 1), _dop("add", start, 1)
    hi = _dwhere(_dlt(hi, lo), lo, hi)
    return lo, hi, True


@implements("Sym.getitem")
def _getitem(n: Node, key: Any) -> Node:
    key = key if isinstance(key, tuple) else (key,)
    if key and isinstance(key[-1], (list, tuple)) and _holds_sym(key[-1]):
        key = (*key[:-1], np_array(key[-1]))  # a list of per-sample indices
    if key and isinstance(key[-1], Sym) and key[-1].dtype.kind in "iu" and None not in key:
        return _take_drawn(n, key)
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise TraceError("more than one ... in an index")
    explicit = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if explicit > n.ndim:
        raise TraceError(f"too many indices ({explicit}) for an array of rank {n.ndim}")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (n.ndim - explicit) + key[i + 1:]
    else:
        key = key + (slice(None),) * (n.ndim - explicit)
    bounds: list[Any] = []
    takes: list[tuple[int, Any]] = []
    newaxes: list[int] = []
    axis = 0
    out_axis = 0
    for k in key:
        if k is None:
            newaxes.append(out_axis)
            out_axis += 1
            continue
        dim = n.shape[axis]
        if isinstance(k, slice):
            if k == slice(None):
                bounds.append(None)
            else:
                bounds.append(_normalize_slice(k, dim))
            out_axis += 1
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            bounds.append(None)
            if isinstance(dim, int):
                if not -dim <= k < dim:
                    raise TraceError(f"index {k} out of bounds for an axis of length {dim}")
                takes.append((axis, k % dim))
            else:
                # A per-sample length: numpy raises IndexError out of bounds, for the sample.
                size = Sym(dim)
                raise_where(size <= k if k >= 0 else size < -k, IndexError,
                            f"index {k} is out of bounds for axis {axis}")
                takes.append((axis, k if k >= 0 else _dop("add", dim, k)))
        elif isinstance(k, (list, tuple, np.ndarray)) and not isinstance(dim, Node):
            arr = np.asarray(k)
            if arr.ndim != 1 or arr.dtype.kind not in "iu":
                raise TraceError("fancy indexing other than a list of ints on one axis")
            bounds.append(("pick", tuple(int(i) % dim for i in arr)))
            out_axis += 1
        elif isinstance(k, Sym) and k.ndim:
            raise TraceError("indexing with an array (a lookup table lut[img], or fancy "
                             "indexing; only slices and integer indices are lowered)")
        elif isinstance(k, Sym):
            raise TraceError("indexing with a per-sample value (use a slice x[i:i+1])")
        else:
            raise TraceError(f"indexing with {type(k).__name__}")
        axis += 1
    out = n
    # Slices (and picks) first, then integer takes from the last axis back, then new axes.
    # All ranges in one slice (one copy), then the reversals.
    ranges = [(ax, b[0], b[1]) for ax, b in enumerate(bounds)
              if b is not None and b[0] != "pick"]
    out = _slice(out, ranges)
    for ax, b in enumerate(bounds):
        if b is not None and b[0] != "pick" and b[2]:
            out = _flip(out, ax)
    for ax, b in enumerate(bounds):
        if b is not None and b[0] == "pick":
            parts = [_slice(out, [(ax, i, i + 1)]) for i in b[1]]
            out = _concat(parts, ax) if len(parts) != 1 else parts[0]
    for ax, i in sorted(takes, reverse=True):
        shape = out.shape[:ax] + out.shape[ax + 1:]
        out = _new("take", (out, i), (ax,), out.dtype, shape)
    for ax in newaxes:
        shape = (*out.shape[:ax], 1, *out.shape[ax:])
        out = _new("expand", (out,), (ax,), out.dtype, shape)
    return out


#: The longest axis a per-sample index may select from (one select per element and position).
MAX_DRAWN_INDEX_AXIS = 16


def _drawn_indices(idx: Sym, size: Any, axis: int) -> list[Sym]:
    """The elements of a per-sample index ``idx`` (a scalar or a vector of constant length) into
    an axis of constant length ``size``, with numpy's IndexError out of range."""
    if not isinstance(size, int) or size > MAX_DRAWN_INDEX_AXIS:
        raise TraceError("indexing with a per-sample value on an axis whose length is "
                         f"per-sample or over {MAX_DRAWN_INDEX_AXIS} (use a slice x[i:i+1])")
    node = idx._checked()
    if node.ndim > 1 or (node.ndim == 1 and not isinstance(node.shape[0], int)):
        raise TraceError("indexing with a per-sample array other than a vector of constant "
                         "length")
    items = [idx] if node.ndim == 0 else [
        Sym(_new("take", (node, i), (0,), node.dtype, ())) for i in range(node.shape[0])]
    for v in items:
        lo, hi = lower(v.node), upper(v.node)
        if lo is None or lo < -size or hi is None or hi >= size:
            raise_where(ufunc("bitwise_or", ufunc("less", v, -size),
                              ufunc("greater_equal", v, size)), IndexError,
                        f"index out of bounds for axis {axis} with size {size}")
    return items


def _is_index(v: Sym, c: int, size: int) -> Any:
    """Whether per-sample index ``v`` selects position ``c`` of an axis of ``size``."""
    hit = ufunc("equal", v, c)
    lo = lower(v.node)
    if lo is None or lo < 0:
        hit = ufunc("bitwise_or", hit, ufunc("equal", v, c - size))
    return hit


def _take_drawn(n: Node, key: tuple) -> Node:
    """``a[..., idx]`` with a per-sample index (``img[..., perm]`` with ``perm`` drawn) on the
    last axis, of constant length: each position a select among that axis' elements."""
    rest = _getitem(n, key[:-1] + (slice(None),) * (1 if Ellipsis in key else 0)) \
        if len(key) > 1 else n
    if Ellipsis not in key and len(key) != n.ndim:
        raise TraceError("indexing with a per-sample value other than on the last axis")
    axis = rest.ndim - 1
    size = rest.shape[axis]
    items = _drawn_indices(key[-1], size, n.ndim - 1)
    parts = [Sym(_new("take", (rest, c), (axis,), rest.dtype, rest.shape[:axis]))
             for c in range(size)]
    picked = []
    for v in items:
        out = parts[size - 1]
        for c in range(size - 2, -1, -1):
            out = _where(_is_index(v, c, size), parts[c], out)
        picked.append(Sym(cast_node(out.node, rest.dtype)))
    if key[-1].ndim == 0:
        return picked[0].node
    return _np_stack(picked, axis=-1).node


def _slice(n: Node, ranges: list[tuple[int, Dim, Dim]]) -> Node:
    """``n`` restricted to ``lo:hi`` on each listed axis (normalized bounds); one node."""
    args: list[Any] = [n]
    axes = []
    shape = list(n.shape)
    for axis, lo, hi in ranges:
        if isinstance(lo, int) and lo == 0 and (hi is n.shape[axis] or hi == n.shape[axis]):
            continue  # the whole axis
        axes.append(axis)
        args += [lo, hi]
        shape[axis] = _dop("subtract", hi, lo)
    if not axes:
        return n
    return _new("slice", tuple(args), tuple(axes), n.dtype, tuple(shape))


def _flip(n: Node, axis: int) -> Node:
    if n.op == "flip" and n.attrs == (axis,):
        return n.args[0]
    if n.ndim not in (2, 3):
        raise TraceError(f"a reversal (step -1) of a rank-{n.ndim} array")
    return _new("flip", (n,), (axis,), n.dtype, n.shape)


@implements("Sym.transpose")
def _transpose(n: Node, perm: tuple[int, ...]) -> Node:
    if len(perm) != n.ndim or sorted(perm) != list(range(n.ndim)):
        raise TraceError(f"transpose with axes {perm} for an array of rank {n.ndim}")
    if perm == tuple(range(n.ndim)):
        return n
    return _new("transpose", (n,), (perm,), n.dtype, tuple(n.shape[p] for p in perm))


def _setitem_value(dtype: np.dtype, value: Any) -> Any:
    """The value numpy stores for ``a[...] = value`` into an array of ``dtype``."""
    if isinstance(value, Sym):
        if value.ndim != 0:
            raise TraceError("assigning an array into a region (only a scalar fill is lowered)")
        if value.node.weak and dtype.kind in "iu" and value.dtype.kind in "iuf":
            _python_int_checks(value, dtype)
        return Sym(cast_node(value.node, dtype))
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim):
        # numpy broadcasts a sequence over the region (a value per channel); a per-sample
        # element is no concrete value to test it on
        raise TraceError(f"assigning several values (a {type(value).__name__}) into a region "
                         "(a value per channel; only a scalar fill is lowered)")
    tmp = np.zeros(1, dtype)
    try:
        tmp[0] = value
    except Exception as e:
        raise TraceError(f"an assignment numpy refuses ({e})") from None
    if np.ndim(value) != 0:
        raise TraceError("assigning an array into a region (only a scalar fill is lowered)")
    return tmp[0]


def _python_int_checks(value: Sym, dtype: np.dtype) -> None:
    """numpy's checks when it stores a Python number (``int()`` of a draw, a size) into an
    integer array: a float is truncated, NaN raises ValueError, a value outside the dtype's
    range OverflowError (where numpy would wrap a numpy integer around)."""
    t = value
    if value.dtype.kind == "f":
        raise_where(ufunc("not_equal", value, value), ValueError,
                    "cannot convert float NaN to integer")
        t = ufunc("trunc", value)
    info = np.iinfo(dtype)
    lo, hi = lower(t.node), upper(t.node)
    message = f"Python integer out of bounds for {dtype}"
    if lo is None or lo < int(info.min):
        raise_where(ufunc("less", t, int(info.min)), OverflowError, message)
    if hi is None or hi > int(info.max):
        raise_where(ufunc("greater", t, int(info.max)), OverflowError, message)


def _fill_region(n: Node, key: Any, value: Any) -> Node:
    key = key if isinstance(key, tuple) else (key,)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (n.ndim - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (n.ndim - len(key))
    if len(key) != n.ndim or not builtins.all(isinstance(k, slice) for k in key[:2]):
        raise TraceError("an assignment other than out[y0:y1, x0:x1(, c)] = scalar")
    region: list[Dim] = []
    for ax in (0, 1):
        lo, hi, _ = _normalize_slice(slice(key[ax].start, key[ax].stop, key[ax].step or 1),
                                     n.shape[ax])
        region += [lo, hi]
    chans: tuple = ()
    if n.ndim == 3:
        k = key[2]
        c = n.shape[2]
        if isinstance(k, slice):
            if k != slice(None):
                lo, hi, _ = _normalize_slice(slice(k.start, k.stop, k.step or 1), c)
                chans = (lo, hi)
        elif isinstance(k, (int, np.integer)):
            chans = (int(k) % c, int(k) % c + 1)
        else:
            raise TraceError("an assignment with a channel index other than an int or slice")
    v = _setitem_value(n.dtype, value)
    vnode = v.node if isinstance(v, Sym) else const(v)
    return _new("fill", (n, *region, vnode), chans, n.dtype, n.shape)


def _where(c: Any, a: Any, b: Any) -> Sym:
    """``np.where(c, a, b)`` with numpy's result dtype."""
    if not isinstance(c, Sym):
        c = np.asarray(c)
        if c.ndim == 0:
            return a if bool(c) else b
        raise TraceError("np.where with a constant array condition")
    cn = cast_node(c.node, np.bool_) if c.dtype != np.bool_ else c.node
    with np.errstate(all="ignore"):
        try:
            rdt = np.result_type(_rep(a), _rep(b)) if not (_is_weak(a) and _is_weak(b)) else (
                np.result_type(np.asarray(_rep(a)), np.asarray(_rep(b))))
        except Exception as e:
            raise TraceError(f"np.where with operands numpy refuses ({e})") from None
    # np.where converts Python scalars as an unsafe cast does (np.where(c, u8, -1) holds 255).
    na, nb = (_to_node(np.asarray(v), rdt) if type(v) in (int, float, bool) else _to_node(v, rdt)
              for v in (a, b))
    if na is nb:
        return Sym(na)
    shape = _broadcast(cn.shape, na.shape, nb.shape)
    return Sym(_new("where", (cn, na, nb), (), rdt, shape))


def _clip(x: Any, lo: Any, hi: Any) -> Any:
    if isinstance(x, Sym) and x.dtype.kind in "iu" and not x.node.weak:
        # np.clip takes Python int bounds outside the dtype's range as that range's ends.
        info = np.iinfo(x.dtype)
        lo, hi = (builtins.min(builtins.max(b, int(info.min)), int(info.max))
                  if type(b) is int else b for b in (lo, hi))
    out = x
    if lo is not None:
        out = ufunc("maximum", out, lo)
    if hi is not None:
        out = ufunc("minimum", out, hi)
    if lo is not None and isinstance(out, Sym) and out.node.op == "bin" and \
            out.node.attrs == ("minimum",) and out.node.ndim > 0:
        # np.clip keeps x where it equals a bound (-0.0 clipped at 0 stays -0.0), where
        # np.minimum and np.maximum give their second operand: marked, so the lowering may
        # use a clamp for np.clip only (augment_ops.trace.lower_dali._clamp_bounds).
        n = out.node
        out = Sym(_new("bin", n.args, ("minimum", "clip"), n.dtype, n.shape, n.weak))
    return out


def _np_clip(a: Any, a_min: Any = None, a_max: Any = None, out: Any = None, *,
             min: Any = None, max: Any = None, **kwargs: Any) -> Any:
    """``np.clip`` and ``ndarray.clip`` with numpy 2's keywords: ``min=``/``max=`` are the
    bounds; ``out=`` and ufunc keywords (``dtype=``, ``casting=``, ``where=``) are refused, so
    the op falls back instead of being traced without them."""
    if out is not None or kwargs:
        names = ["out"] * (out is not None) + sorted(kwargs)
        raise TraceError(f"np.clip with {', '.join(n + '=' for n in names)}")
    if (min is not None or max is not None) and (a_min is not None or a_max is not None):
        raise TraceError("np.clip with both a_min/a_max and min/max")
    lo, hi = (min, max) if min is not None or max is not None else (a_min, a_max)
    return _clip(a, lo, hi)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(a % ndim for a in axis))
    return (int(axis) % ndim,)


@implements("Sym.reduce")
def _reduce(kind: str, x: Sym, axis: Any, dtype: Any, keepdims: bool) -> Sym:
    n = x._checked()
    if dtype is not None:
        raise TraceError(f"{kind}(dtype=)")
    axes = _axes(axis, n.ndim)
    known = builtins.all(isinstance(n.shape[a], int) for a in axes)
    with np.errstate(all="ignore"):
        rdt = getattr(np, kind)(np.ones((1,) * builtins.max(n.ndim, 1), n.dtype)).dtype
    if len(axes) == 1 and known and n.shape[axes[0]] <= 16:
        # A short axis of known length (the channels): numpy adds it in order, one element at a
        # time, and so does this.
        ax, size = axes[0], n.shape[axes[0]]
        parts = [Sym(_new("take", (n, i), (ax,), n.dtype, n.shape[:ax] + n.shape[ax + 1:]))
                 for i in range(size)]
        if kind in ("sum", "mean"):
            acc_dt = rdt if kind == "sum" else (n.dtype if n.dtype.kind == "f" else np.float64)
            acc = Sym(cast_node(parts[0].node, acc_dt))
            for p in parts[1:]:
                acc = ufunc("add", acc, Sym(cast_node(p.node, acc_dt)))
            out = ufunc("divide", acc, np.array(size, acc_dt)) if kind == "mean" else acc
            out = Sym(cast_node(out.node, rdt))
        else:
            out = parts[0]
            for p in parts[1:]:
                out = ufunc("minimum" if kind == "min" else "maximum", out, p)
    else:
        if kind in ("sum", "mean") and n.dtype.kind == "f":
            raise TraceError(f"np.{kind} of floating-point values over the image (numpy sums "
                             "pairwise; cast to an integer type or reduce over the channels)")
        shape = tuple(d for i, d in enumerate(n.shape) if i not in axes)
        if kind in ("sum", "mean"):
            acc_dt = np.dtype(np.uint64 if n.dtype.kind in "u" else np.int64)
            s = Sym(_new("reduce", (cast_node(n, acc_dt) if n.dtype.kind == "b" else n,),
                         ("sum", axes), acc_dt, shape))
            if kind == "mean":
                count: Dim = 1
                for a in axes:
                    count = _dop("multiply", count, n.shape[a])
                out = ufunc("divide", Sym(cast_node(s.node, np.float64)),
                            Sym(cast_node(_dim_sym(count).node, np.float64))
                            if isinstance(count, Node) else np.float64(count))
            else:
                out = s
            out = Sym(cast_node(out.node, rdt))
        else:
            out = Sym(_new("reduce", (n,), (kind, axes), n.dtype, shape))
    if keepdims:
        node = out.node
        for a in axes:
            node = _new("expand", (node,), (a,), node.dtype,
                        (*node.shape[:a], 1, *node.shape[a:]))
        out = Sym(node)
    return Sym(out.node)


#: The most multiplications a traced matrix product may take per pixel (channels x columns).
MAX_PRODUCT_TERMS = 64


def _matmul(a: Any, b: Any) -> Sym:
    """``image @ w`` with a constant vector ``w`` (C,) or matrix ``w`` (C, K): the weighted sum of
    the channels written out, ``(x0*w0 + x1*w1) + x2*w2 ...``, each step rounded in the result
    dtype, the same on every machine. numpy's ``@`` on floats calls the host's BLAS, which may
    sum in another order or fuse multiply-adds: the two then differ by a few units in the last
    place (README, "What traces"); integer products wrap around identically in any order."""
    what = "matrix products other than image @ constant vector or (channels, k) matrix"
    if isinstance(a, Sym) and isinstance(b, Sym) and b.ndim == 1:
        return _matmul_drawn(a, b)
    if not isinstance(a, Sym) and isinstance(b, Sym) and b.ndim == 1 and \
            np.ndim(a) in (1, 2) and not _holds_sym(a):
        return _constant_times_vector(np.asarray(a), b)
    if not isinstance(a, Sym) or isinstance(b, Sym):
        raise TraceError(what)
    w = np.asarray(b)
    if w.ndim not in (1, 2) or not isinstance(a.node.shape[-1], int) or \
            a.node.shape[-1] != len(w) or a.ndim < 1 or (w.ndim == 2 and a.ndim < 2):
        raise TraceError(what)
    if w.size > MAX_PRODUCT_TERMS:
        raise TraceError(f"a matrix product of more than {MAX_PRODUCT_TERMS} terms per pixel")
    rdt = np.result_type(a.dtype, w.dtype)
    if rdt.kind not in "iuf":
        raise TraceError(f"a matrix product of {rdt}")
    x = Sym(cast_node(a.node, rdt))
    wc = w.astype(rdt)
    ax = a.ndim - 1
    channels = [Sym(_new("take", (x.node, i), (ax,), rdt, x.node.shape[:-1]))
                for i in range(len(w))]

    def weighted(col: np.ndarray) -> Sym:
        acc = None
        for xi, wi in zip(channels, col, strict=True):
            part = ufunc("multiply", xi, wi)
            acc = part if acc is None else ufunc("add", acc, part)
        return Sym(cast_node(acc.node, rdt))

    if w.ndim == 1:
        return weighted(wc)
    return _np_stack([weighted(wc[:, k]) for k in range(wc.shape[1])], axis=-1)


def _matmul_drawn(a: Sym, b: Sym) -> Sym:
    """``image @ v`` with a per-sample vector ``v`` of constant length (drawn weights): the
    weighted sum of the channels written out, as :func:`_matmul` does for a constant one."""
    n, w = a._checked(), b._checked()
    size = w.shape[0]
    if a.ndim < 1 or not isinstance(size, int) or n.shape[-1] != size:
        raise TraceError("a matrix product with a per-sample vector other than image @ v with "
                         "v as long as the channel axis")
    if size > MAX_PRODUCT_TERMS:
        raise TraceError(f"a matrix product of more than {MAX_PRODUCT_TERMS} terms per pixel")
    rdt = np.result_type(a.dtype, b.dtype)
    if rdt.kind not in "iuf":
        raise TraceError(f"a matrix product of {rdt}")
    x, v = cast_node(n, rdt), cast_node(w, rdt)
    ax = a.ndim - 1
    acc = None
    for i in range(size):
        xi = Sym(_new("take", (x, i), (ax,), rdt, x.shape[:-1]))
        vi = Sym(_new("take", (v, i), (0,), rdt, ()))
        part = ufunc("multiply", xi, vi)
        acc = part if acc is None else ufunc("add", acc, part)
    return Sym(cast_node(acc.node, rdt))


def _constant_times_vector(m: np.ndarray, v: Sym) -> Sym:
    """``m @ v`` for a constant matrix (K, C) or vector (C,) and a per-sample vector ``v`` of
    constant length C (``eigenvectors @ (alpha * eigenvalues)``): each entry the sum written
    out, ``(m0*v0 + m1*v1) + m2*v2 ...`` (numpy's float product may sum in its BLAS's order)."""
    w = v._checked()
    size = w.shape[0]
    if not isinstance(size, int) or m.shape[-1] != size:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {size} is different from {m.shape[-1]})")
    if m.size > MAX_PRODUCT_TERMS:
        raise TraceError(f"a matrix product of more than {MAX_PRODUCT_TERMS} terms")
    rdt = np.result_type(m.dtype, v.dtype)
    if rdt.kind not in "iuf":
        raise TraceError(f"a matrix product of {rdt}")
    vs = [Sym(_new("take", (cast_node(w, rdt), i), (0,), rdt, ())) for i in range(size)]
    rows = m.astype(rdt).reshape(-1, size)
    out = []
    for row in rows:
        acc = None
        for mi, vi in zip(row, vs, strict=True):
            part = ufunc("multiply", vi, mi)
            acc = part if acc is None else ufunc("add", acc, part)
        out.append(Sym(cast_node(acc.node, rdt)))
    if m.ndim == 1:
        return out[0]
    return Sym(_new("stack", tuple(o.node for o in out), (0,), rdt, (len(out),)))


def _concat(nodes: Sequence[Node], axis: int) -> Node:
    shape = list(nodes[0].shape)
    total: Dim = 0
    for n in nodes:
        total = _dop("add", total, n.shape[axis])
    shape[axis] = total
    return _new("cat", tuple(nodes), (axis,), nodes[0].dtype, tuple(shape))


def _arrays(seq: Sequence[Any], what: str) -> list[Any]:
    seq = list(seq)
    if not seq or not builtins.any(isinstance(x, Sym) for x in seq):
        raise TraceError(f"{what} without a traced array")
    rdt = np.result_type(*(_rep(x) if isinstance(x, Sym) else np.asarray(x) for x in seq))
    return [_to_node(x, rdt) for x in seq]


def _np_concatenate(arrays: Sequence[Any], axis: int = 0, **kw: Any) -> Sym:
    if kw:
        raise TraceError(f"np.concatenate with {sorted(kw)}=")
    nodes = _arrays(arrays, "np.concatenate")
    return Sym(_concat(nodes, axis % nodes[0].ndim))


def _np_stack(arrays: Sequence[Any], axis: int = 0, **kw: Any) -> Sym:
    if kw:
        raise TraceError(f"np.stack with {sorted(kw)}=")
    nodes = _arrays(arrays, "np.stack")
    axis = axis % (nodes[0].ndim + 1)
    shape = (*nodes[0].shape[:axis], len(nodes), *nodes[0].shape[axis:])
    return Sym(_new("stack", tuple(nodes), (axis,), nodes[0].dtype, shape))


def _np_repeat(a: Any, repeats: Any, axis: Any = None) -> Sym:
    if not isinstance(a, Sym) or axis is None or not isinstance(repeats, int):
        raise TraceError("np.repeat other than of an axis of length 1 a constant number of times")
    axis = axis % a.ndim
    if a.node.shape[axis] != 1:
        raise TraceError("np.repeat other than of an axis of length 1 a constant number of times")
    return Sym(_concat([a._checked()] * repeats, axis))


def _np_rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Sym:
    if isinstance(k, Sym):
        # A per-sample k (k = rng.integers(0, 4)): one branch per quarter turn, merged per sample.
        if k.ndim != 0 or k.dtype.kind not in "iu":
            raise TraceError("np.rot90 with a per-sample k that is not an integer scalar")
        turns = k % 4
        for c in range(3):
            if turns == c:
                return _np_rot90(m, c, axes)
        return _np_rot90(m, 3, axes)
    k %= 4
    a0, a1 = (ax % m.ndim for ax in axes)
    if k == 0:
        return m[...]
    if k == 2:
        return m._view(_flip(_flip(m._checked(), a0), a1))
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return m._view(_transpose(_flip(m._checked(), a1), tuple(perm)))
    return m._view(_flip(_transpose(m._checked(), tuple(perm)), a1))


def _np_flip(m: Any, axis: Any = None) -> Sym:
    node = m._checked()
    for ax in _axes(axis, m.ndim):
        node = _flip(node, ax)
    return m._view(node)


def _np_expand_dims(a: Any, axis: int) -> Sym:
    return a[(slice(None),) * (axis % (a.ndim + 1)) + (None,)]


def _np_full_like(a: Any, fill_value: Any, dtype: Any = None) -> Sym:
    if not isinstance(a, Sym):
        raise TraceError("np.full_like of a constant")
    dt = np.dtype(dtype) if dtype is not None else a.dtype
    v = _setitem_value(dt, fill_value)
    vn = v.node if isinstance(v, Sym) else const(v)
    return Sym(_new("full", (a._checked(), vn), (), dt, a.node.shape))


#: The most rows (columns, ...) np.pad may add on one side of an axis: each is a copy of one
#: block in a DALI concatenation.
MAX_PAD = 256


def _np_pad(array: Any, pad_width: Any, mode: Any = "constant", **kwargs: Any) -> Sym:
    """``np.pad`` with constant widths, modes ``"constant"`` and ``"edge"``: each side of each
    axis a concatenation of copies of one block (a constant slab, or the first or last slab of
    the array), axis after axis as numpy pads them (the corners take the later axes' values)."""
    if not isinstance(array, Sym):
        raise TraceError("np.pad of a constant")
    if _holds_sym(pad_width) or isinstance(pad_width, Sym):
        raise TraceError("np.pad with per-sample widths (only constant widths are lowered)")
    if mode not in ("constant", "edge"):
        raise TraceError(f"np.pad(mode={mode!r}) (modes 'constant' and 'edge' are lowered; "
                         "'reflect' and 'symmetric' repeat rows that a small image may not have)")
    allowed = {"constant_values"} if mode == "constant" else set()
    if set(kwargs) - allowed:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': "
                         f"{set(kwargs) - allowed}")
    node = array._checked()
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    widths = np.broadcast_to(widths, (node.ndim, 2))
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    if (widths > MAX_PAD).any():
        raise TraceError(f"np.pad by more than {MAX_PAD} on a side")
    values = kwargs.get("constant_values", 0)
    if _holds_sym(values) or (isinstance(values, Sym) and values.ndim):
        raise TraceError("np.pad with per-sample constant_values other than one scalar")
    if not isinstance(values, Sym):
        values = np.broadcast_to(np.asarray(values), (node.ndim, 2))
    for ax in range(node.ndim):
        before, after = (int(v) for v in widths[ax])
        if not before and not after:
            continue
        dim = node.shape[ax]
        if (isinstance(dim, int) and dim == 0) or (isinstance(dim, Node) and (
                lower(dim) is None or lower(dim) < 1)):
            raise TraceError("np.pad of an axis that may be empty")
        pieces: list[Node] = []
        for side, count in (("before", before), ("after", after)):
            if not count:
                continue
            if mode == "edge":
                at = 0 if side == "before" else _dop("subtract", dim, 1)
                block = _slice(node, [(ax, at, _dop("add", at, 1))])
            else:
                v = values if isinstance(values, Sym) else values[ax][0 if side == "before"
                                                                      else 1]
                block = _np_full_like(Sym(_slice(node, [(ax, 0, 1)])), v).node
            pieces.append(block)
        blocks_before = [pieces[0]] * before if before else []
        blocks_after = [pieces[-1]] * after if after else []
        node = _concat([*blocks_before, node, *blocks_after], ax)
    return Sym(node)


def _np_round(a: Any, decimals: int = 0, out: Any = None) -> Any:
    if decimals != 0 or out is not None:
        raise TraceError("np.round with decimals or out")
    return ufunc("rint", a)


def _refuse(construct: str) -> Any:
    raise TraceError(construct)


def _method(name: str) -> Callable[..., Any]:
    def f(a: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(a, Sym):
            raise TraceError(f"np.{name} of a constant")
        return getattr(a, name)(*args, **kwargs)
    return f


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "clip": lambda a, *args, **kwargs: _np_clip(a, *args, **kwargs),
    "where": lambda c, *ab: _where(c, *ab) if len(ab) == 2 else _refuse("np.where(cond)"),
    "concatenate": _np_concatenate,
    "stack": _np_stack,
    "dstack": lambda arrays: _np_concatenate(
        [x if x.ndim == 3 else x[..., None] for x in arrays], axis=2),
    "repeat": _np_repeat,
    "rot90": _np_rot90,
    "flip": _np_flip,
    "fliplr": lambda m: _np_flip(m, 1),
    "flipud": lambda m: _np_flip(m, 0),
    "transpose": lambda a, axes=None: a.transpose(axes) if axes is not None else a.transpose(),
    "swapaxes": lambda a, b, c: a.swapaxes(b, c),
    "expand_dims": _np_expand_dims,
    "copy": lambda a, **kw: a.copy(),
    "ascontiguousarray": lambda a, dtype=None: a.astype(dtype) if dtype is not None else a,
    "astype": lambda a, dtype, **kw: a.astype(dtype, **kw),
    "full_like": _np_full_like,
    "zeros_like": lambda a, dtype=None: _np_full_like(a, 0, dtype),
    "ones_like": lambda a, dtype=None: _np_full_like(a, 1, dtype),
    # numpy leaves an empty array's values unspecified; the traced one holds zeros.
    "empty_like": lambda a, dtype=None: _np_full_like(a, 0, dtype),
    "pad": _np_pad,
    "round": _np_round,
    "around": _np_round,
    "sum": _method("sum"),
    "mean": _method("mean"),
    "max": _method("max"),
    "min": _method("min"),
    "amax": _method("max"),
    "amin": _method("min"),
    "dot": lambda a, b, out=None: a.dot(b, out) if isinstance(a, Sym) else _matmul(a, b),
    "matmul": lambda a, b: _matmul(a, b),
    "shape": lambda a: a.shape,
    "ndim": lambda a: a.ndim,
}
for _name, _builder in _FUNCTIONS.items():
    implements(_name)(_builder)


# -- array creation from traced values ----------------------------------------------------------
# np.array, np.asarray, np.ascontiguousarray and np.require do not dispatch through
# __array_function__ on their argument (only on like=): the traced function's ``np`` hands them
# to these builders, which keep numpy's rules (a copy or the same array, the dtype numpy would
# pick for a list of scalars) and call numpy itself when nothing traced is involved.
def _holds_sym(x: Any) -> bool:
    if isinstance(x, Sym):
        return True
    return isinstance(x, (list, tuple)) and builtins.any(_holds_sym(v) for v in x)


def _from_sequence(seq: Sequence[Any], dtype: Any) -> Sym:
    """``np.array([a, b, ...])`` with traced elements of one shape: numpy's dtype for the list
    (Python numbers by their kind, numpy values by their dtype), then a stack on a new axis."""
    items = [_from_sequence(v, None) if isinstance(v, (list, tuple)) else v for v in seq]
    if not items:
        raise TraceError("np.array of an empty sequence holding traced values")
    reps = []
    for v in items:
        if isinstance(v, Sym):
            reps.append(_rep(v) if v.node.weak else v.dtype.type(1))
        elif isinstance(v, np.ndarray):
            reps.append(v.dtype.type(1))
        else:
            reps.append(v)
    rdt = np.dtype(dtype) if dtype is not None else np.array(reps).dtype
    if rdt.kind not in "biuf":
        raise TraceError(f"np.array of traced values as dtype {rdt}")
    shapes = {tuple(_shape_key(d) for d in _node_or_const(v).shape) for v in items}
    if len(shapes) != 1:
        raise TraceError("np.array of traced values of different shapes")
    nodes = []
    for v in items:
        if isinstance(v, Sym):
            if v.node.weak and rdt.kind in "iu" and v.dtype.kind in "iuf":
                _python_int_checks(v, rdt)  # np.array([300], np.uint8) raises as a store does
            nodes.append(_to_node(v, rdt))
        else:
            nodes.append(const(np.array(v, dtype=rdt)))  # numpy's own conversion and errors
    shape = (len(nodes), *nodes[0].shape)
    return Sym(_new("stack", tuple(nodes), (0,), rdt, shape))


def _shape_key(d: Dim) -> Any:
    return d if isinstance(d, int) else id(d)


def _node_or_const(v: Any) -> Node:
    return v._checked() if isinstance(v, Sym) else const(np.asarray(v))


def np_array(obj: Any, dtype: Any = None, *, copy: Any = True, order: Any = "K",
             subok: bool = False, ndmin: int = 0, like: Any = None) -> Any:
    """``np.array`` in a traced function."""
    if not _holds_sym(obj):
        return np.array(obj, dtype, copy=copy, order=order, subok=subok, ndmin=ndmin,
                        **({} if like is None else {"like": like}))
    if ndmin or like is not None:
        raise TraceError("np.array of a traced value with ndmin= or like=")
    if isinstance(obj, Sym):
        dt = np.dtype(dtype) if dtype is not None else obj.dtype
        if copy is False and dt != obj.dtype:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        if copy is True or dt != obj.dtype:
            return obj.astype(dt) if dt != obj.dtype else obj.copy()
        return obj
    return _from_sequence(obj, dtype)


@implements("np.asarray")
def np_asarray(a: Any, dtype: Any = None, order: Any = None, **kwargs: Any) -> Any:
    """``np.asarray`` / ``np.asanyarray`` in a traced function: the same array where its dtype
    already fits."""
    if not _holds_sym(a):
        return np.asarray(a, dtype, order, **kwargs)
    copy = kwargs.pop("copy", None)
    if kwargs:
        raise TraceError(f"np.asarray of a traced value with {sorted(kwargs)}=")
    return np_array(a, dtype, copy=copy)


def np_ascontiguousarray(a: Any, dtype: Any = None, **kwargs: Any) -> Any:
    """``np.ascontiguousarray`` in a traced function (a traced array has no memory layout: its
    values are those of the array, converted to ``dtype``)."""
    if not _holds_sym(a):
        return np.ascontiguousarray(a, dtype, **kwargs)
    if kwargs:
        raise TraceError(f"np.ascontiguousarray of a traced value with {sorted(kwargs)}=")
    out = np_array(a, dtype, copy=None)
    if isinstance(out, Sym) and out.ndim == 0:
        out = out[None]
    return out


def np_require(a: Any, dtype: Any = None, requirements: Any = None, **kwargs: Any) -> Any:
    """``np.require`` in a traced function, copying where numpy copies."""
    if not _holds_sym(a):
        return np.require(a, dtype, requirements, **kwargs)
    if kwargs:
        raise TraceError(f"np.require of a traced value with {sorted(kwargs)}=")
    if isinstance(requirements, str):
        requirements = [requirements]
    names = {"C_CONTIGUOUS": "C", "CONTIGUOUS": "C", "F_CONTIGUOUS": "F", "FORTRAN": "F",
             "ALIGNED": "A", "WRITEABLE": "W", "OWNDATA": "O", "ENSUREARRAY": "E"}
    req = {names.get(str(r).upper(), str(r).upper()) for r in (requirements or ())}
    unknown = req - set("ACFWOE")
    if unknown:
        raise KeyError(sorted(unknown)[0])
    if "F" in req and np.ndim(a) > 1:
        raise TraceError("np.require(requirements='F') of a traced array (a Fortran-ordered "
                         "copy; the traced graph has no memory layout)")
    out = np_array(a, dtype, copy=None)
    # numpy copies a read-only array for "W" and a view for "O"; otherwise it returns the same
    # array, which later writes then change for every name bound to it.
    if isinstance(a, Sym) and out is a and (("W" in req and not a._writable)
                                            or ("O" in req and not a._base)):
        out = a.copy()
    return out


def _new_array(name: str) -> Callable[..., Any]:
    """``np.zeros`` / ``ones`` / ``empty`` / ``full`` in a traced function: numpy's own for a
    constant shape; a per-sample shape (``np.zeros((h + 2 * p, w + 2 * p, c))``) is refused
    with the rewrites that trace."""
    real = getattr(np, name)

    def build(shape: Any, *args: Any, **kwargs: Any) -> Any:
        if _holds_sym(shape) or isinstance(shape, Sym) or builtins.any(
                _holds_sym(v) or isinstance(v, Sym) for v in (*args, *kwargs.values())
                if name != "full"):
            raise TraceError(f"np.{name} of a per-sample shape (write it from the image: "
                             "np.zeros_like(img), np.full_like, np.pad(img, ...) or "
                             "np.concatenate of pieces)")
        return real(shape, *args, **kwargs)
    return build


#: The builders the traced function's ``np`` returns instead of numpy's own functions.
CREATION: dict[str, Callable[..., Any]] = {
    "zeros": _new_array("zeros"),
    "ones": _new_array("ones"),
    "empty": _new_array("empty"),
    "full": _new_array("full"),
    "array": np_array,
    "asarray": np_asarray,
    "asanyarray": np_asarray,
    "ascontiguousarray": np_ascontiguousarray,
    "require": np_require,
}
