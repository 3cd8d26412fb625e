"""Indexing and assignment on :class:`Sym`: ``a[key]`` (slices, flips, drawn indices, a value
per channel) and ``a[key] = value`` (region fills, per-channel fills, boolean masks), as graph
builders registered in :data:`augment_ops.trace.sym.HANDLERS` (``Sym.getitem``, ``Sym.setitem``,
``Sym.transpose``).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from augment_ops.trace.combine import _concat, _np_stack, _where
from augment_ops.trace.creation import (
    MAX_SMALL_NEW,
    _holds_sym,
    _python_int_checks,
    canvas_fill,
    np_array,
)
from augment_ops.trace.facts import _at_most, _no_nan, _nonneg, _same, linear_form, lower, upper
from augment_ops.trace.ir import Dim, Node, TraceError, _new, const
from augment_ops.trace.strided import read_strided, strided_key, write_strided
from augment_ops.trace.sym import (
    Sym,
    _dim,
    _dim_sym,
    _dlt,
    _dop,
    _dwhere,
    cast_node,
    implements,
    raise_where,
    ufunc,
)


def _has_ellipsis(key: tuple) -> bool:
    """Whether ``key`` holds ``...`` (by identity: ``in`` would compare an index array with
    ``==``, which numpy answers elementwise)."""
    return any(k is Ellipsis for k in key)


def _ellipsis_at(key: tuple) -> int:
    """The position of ``...`` in ``key`` (by identity, as :func:`_has_ellipsis`)."""
    return next(i for i, k in enumerate(key) if k is Ellipsis)


@implements("Sym.setitem")
def _setitem(a: Sym, key: Any, value: Any) -> None:
    """``a[key] = value``: a boolean mask, or a region of slices filled with a scalar."""
    n = a._checked()
    if not a._writable:
        raise TraceError("a write into the input image or a view of it (numpy refuses: "
                         "the input is read-only; write into img.copy())")
    a._check_written_through()
    if _write_strided(a, n, key, value):
        return
    element = _write_element(n, key, value)
    if element is not None:
        a._write(element)
        return
    if isinstance(key, Sym) and key.dtype.kind == "b":
        v = np.asarray(value) if not isinstance(value, Sym) else value
        a._write(_where(_mask_of(key, n), _setitem_value(n.dtype, v), a).node)
        return
    whole = _assign_whole(n, key, value)
    if whole is not None:
        a._write(whole)
        return
    if n.op in ("canvas", "pad"):
        a._write(_write_canvas(n, key, value))
        return
    full = _full_key(key, n.ndim)
    if n.ndim == 3 and isinstance(full[2], (list, tuple)) and _holds_sym(full[2]):
        full = (*full[:2], np_array(full[2]))  # a list of per-sample channels
    if n.ndim == 3 and isinstance(full[2], Sym) and full[2].dtype.kind in "iu":
        a._write(_fill_drawn_channels(n, full, value))
        return
    if _assign_region(a, key, value):
        return
    value = _canvas_value(a, key, value)
    elements = _value_elements(value)
    channels = _channel_list(n, key)
    if elements is None and channels is None:
        if not _fill_view(a, key, value):
            a._write(_fill_region(n, key, value))
        return
    a._write(_fill_channels(n, key, elements if elements is not None else [value], channels))


def _write_element(n: Node, key: Any, value: Any) -> Node | None:
    """``a[i] = v`` into a small vector (a box's coordinates, ``np.empty(4)`` filled value by
    value): the vector of its elements with element ``i`` replaced, operators the per-sample
    scalar stage computes (:mod:`augment_ops.trace.scalar_stage`); None for other writes."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if n.ndim != 1 or not isinstance(n.shape[0], int) or n.shape[0] > MAX_SMALL_NEW or \
            not isinstance(k, (int, np.integer)) or isinstance(k, (bool, np.bool_)):
        return None
    size = n.shape[0]
    if not -size <= int(k) < size:
        raise IndexError(f"index {int(k)} is out of bounds for axis 0 with size {size}")
    if isinstance(value, Sym) and (value.ndim != 0 or not _converts_exactly(value, n.dtype)):
        return None  # the region write's rules (and refusals) apply
    v = _setitem_value(n.dtype, value)
    vn = v.node if isinstance(v, Sym) else const(np.asarray(v, n.dtype))
    at = int(k) % size
    parts = [vn if j == at else _new("take", (n, j), (0,), n.dtype, ()) for j in range(size)]
    return _new("stack", tuple(parts), (0,), n.dtype, (size,))


def _converts_exactly(value: Sym, dtype: np.dtype) -> bool:
    """Whether numpy stores the per-sample scalar ``value`` into an array of ``dtype`` as a
    cast does, raising for no sample: the same dtype; a float array (rounded as a cast
    rounds); an integer one whose range holds every value the bounds allow (numpy raises for
    NaN and for a float or Python int out of the range, and wraps some numpy ints); a Python
    int of a size (checked as numpy checks it, :func:`_setitem_value`)."""
    vd = value.dtype
    if vd == dtype or value.node.weak or (dtype.kind == "f" and vd.kind in "biuf"):
        return True
    if dtype.kind not in "iu" or vd.kind not in "biuf":
        return False
    lo, hi = lower(value.node), upper(value.node)
    info = np.iinfo(dtype)
    return lo is not None and hi is not None and info.min <= lo and hi <= info.max and (
        vd.kind != "f" or _no_nan(value.node))


def _write_strided(a: Sym, n: Node, key: Any, value: Any) -> bool:
    """``a[0::2] = value`` on an axis of a constant length (:mod:`augment_ops.trace.strided`);
    False for a key with no such slice."""
    key = key if isinstance(key, tuple) else (key,)
    if not builtins.any(isinstance(k, slice) and k.step not in (None, 1, -1) for k in key) or \
            not builtins.all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer))
                             for k in key):
        return False
    full = _basic_key(n, key)
    found = strided_key(n, full)
    if found is None:
        return False
    selected = builtins.sum(1 for k in full if k is None or isinstance(k, slice))
    write_strided(full, value, found, selected, lambda k, v: _setitem(a, k, v))
    return True


def _canvas_value(a: Sym, key: Any, value: Any) -> Any:
    """``value`` for ``a[key] = value``; for a new array of a per-sample shape holding one value
    per channel (``patch = np.full((h, w, 3), fill)`` then ``img[y:y + h, x:x + w] = patch``),
    that value (a vector, or a scalar for a 2-D array), since every pixel of the region gets it
    where numpy's write succeeds: numpy raises ValueError where the array's sizes are neither
    the region's nor 1, and so does the traced op."""
    if not isinstance(value, Sym) or value.node.op != "canvas":
        return value
    v = value._checked()
    region = a[key].node.shape
    if v.ndim > len(region):
        raise ValueError(f"could not broadcast input array of rank {v.ndim} into a region of "
                         f"rank {len(region)}")
    for ax, (have, size) in enumerate(zip(v.shape, region[len(region) - v.ndim:], strict=True)):
        if isinstance(have, int) and isinstance(size, int):
            if have not in (1, size):
                raise ValueError(f"could not broadcast input array into the region (their "
                                 f"sizes differ on axis {ax})")
        elif not (isinstance(have, int) and have == 1) and \
                linear_form(have) != linear_form(size):
            raise_where(ufunc("bitwise_and", ufunc("not_equal", _dim_sym(have), _dim_sym(size)),
                              ufunc("not_equal", _dim_sym(have), 1)), ValueError,
                        f"could not broadcast input array into the region (their sizes differ "
                        f"on axis {ax})")
    return v.args[-1].value


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
        raise TraceError(f"assigning a row of values into a region of a {n.ndim}-D array "
                         "(only a scalar fill is lowered there)")
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
    if _has_ellipsis(key):
        i = _ellipsis_at(key)
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
    return cast_node(v, n.dtype) if _same_shape(v.shape, n.shape) else None


def _same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and builtins.all(
        x is y or (isinstance(x, int) and isinstance(y, int) and x == y)
        or (isinstance(x, Node) and isinstance(y, Node) and _same(x, y))
        for x, y in zip(a, b, strict=True))


def _assign_region(a: Sym, key: Any, value: Any) -> bool:
    """``a[key] = b`` with a basic-indexing ``key`` and a traced ``b`` of the region's shape:
    ``b`` converted to ``a``'s dtype (numpy's unsafe cast) written through the view
    ``a[key]``; False (nothing written) for other assignments."""
    if not isinstance(value, Sym) or value.ndim == 0:
        return False
    view = a[key]
    if view._origin is None or not _same_shape(view.node.shape, value.node.shape):
        return False
    if value._buffer is view._buffer and value._origin is not None and \
            value._origin[0] is view._origin[0] and _same_key(value._origin[1], view._origin[1]):
        return True  # a[k] *= f stores the view a[k], already written through, into itself
    view._write(cast_node(value._checked(), a.dtype))
    return True


def _same_key(x: Any, y: Any) -> bool:
    """Whether view steps (or keys) ``x`` and ``y`` are the same, without comparing traced
    values (``==`` of a Sym records a comparison)."""
    if x is y:
        return True
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and builtins.all(_same_key(a, b) for a, b in zip(x, y,
                                                                                   strict=True))
    if isinstance(x, slice) and isinstance(y, slice):
        return builtins.all(_same_key(getattr(x, f), getattr(y, f))
                            for f in ("start", "stop", "step"))
    if isinstance(x, Sym) or isinstance(y, Sym):
        return False
    return type(x) is type(y) and x == y


def _fill_view(a: Sym, key: Any, value: Any) -> bool:
    """``a[key] = scalar`` where ``key`` is basic indexing that is no region of rows and
    columns (an integer row index, a new axis, a 1-D array): the view ``a[key]`` filled; False
    (nothing written) for a region, which one ``fill`` over ``a`` writes."""
    parts = key if isinstance(key, tuple) else (key,)
    if a.ndim in (2, 3) and None not in parts and builtins.all(
            isinstance(k, slice) for k in _full_key(parts, a.ndim)[:2]):
        return False
    view = a[key]
    if view._origin is None:
        return False
    v = _setitem_value(view.dtype, value)
    vn = cast_node(v.node if isinstance(v, Sym) else const(v), view.dtype)
    view._write(vn if view.ndim == 0 else
                _new("full", (view.node, vn), (), view.dtype, view.node.shape))
    return True


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
        raise TraceError(f"a slice step of {step} here (only 1 and -1 are lowered on an axis of "
                         "per-sample length and in a write through a view)")
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
        if isinstance(b, int) and b < 0 and _at_most(-b, n):
            b = _dop("add", n, b)  # x[1:-1]: n - 1, which is >= 0
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
    if len(key) == 1 and isinstance(key[0], Sym) and key[0].ndim == 0 and n.ndim > 1 and \
            key[0].dtype.kind in "iu":
        # a[i] with a per-sample i: the last axis' pick of a with axis 0 moved last
        perm = (*range(1, n.ndim), 0)
        moved = const(np.transpose(n.value, perm)) if n.op == "const" else _transpose(n, perm)
        return _take_drawn(moved, (Ellipsis, key[0]))
    if key and isinstance(key[-1], Sym) and key[-1].dtype.kind in "iu" and None not in key:
        return _take_drawn(n, key)
    key = _basic_key(n, key)
    strided = strided_key(n, key)
    if strided is not None:
        return read_strided(n, key, strided, _getitem, _stack_nodes)
    bounds, takes, newaxes = _index_parts(n, key)
    return _indexed(n, bounds, takes, newaxes)


def _stack_nodes(nodes: list[Node], axis: int) -> Node:
    return _np_stack([Sym(m) for m in nodes], axis=axis).node


def _basic_key(n: Node, key: tuple) -> tuple:
    """A key of basic indexing with ``...`` expanded and missing trailing axes as ``:``."""
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise TraceError("more than one ... in an index")
    explicit = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if explicit > n.ndim:
        raise TraceError(f"too many indices ({explicit}) for an array of rank {n.ndim}")
    if _has_ellipsis(key):
        i = _ellipsis_at(key)
        return key[:i] + (slice(None),) * (n.ndim - explicit) + key[i + 1:]
    return key + (slice(None),) * (n.ndim - explicit)


@implements("Sym.view_step")
def _view_step(n: Node, step: tuple) -> Node:
    """The view ``step`` (``("getitem", key)`` or ``("transpose", perm)``) of ``n``."""
    kind, arg = step
    return _getitem(n, arg) if kind == "getitem" else _transpose(n, arg)


@implements("Sym.write_through")
def _write_through(root: Node, steps: tuple, value: Node) -> Node:
    """``root`` with ``value`` written over the view that ``steps`` make of it: each step undone
    from the last, the view's new values placed into the array it was taken from."""
    nodes = [root]
    for step in steps[:-1]:
        nodes.append(_view_step(nodes[-1], step))
    filled = _filled_root(nodes, steps, value)
    if filled is not None:
        return filled
    for n, (kind, arg) in zip(reversed(nodes), reversed(steps), strict=True):
        if kind == "transpose":
            value = _transpose(value, tuple(int(i) for i in np.argsort(arg)))
            continue
        key = arg if isinstance(arg, tuple) else (arg,)
        bounds, takes, newaxes = _index_parts(n, _basic_key(n, key))
        for ax in reversed(newaxes):
            value = _new("take", (value, 0), (ax,), value.dtype,
                         value.shape[:ax] + value.shape[ax + 1:])
        ranges = []
        for ax, i in sorted(takes):
            value = _new("expand", (value,), (ax,), value.dtype,
                         (*value.shape[:ax], 1, *value.shape[ax:]))
            ranges.append((ax, i, _dop("add", i, 1)))
        for ax, b in enumerate(bounds):
            if b is not None:
                ranges.append((ax, b[0], b[1]))
                if b[2]:
                    value = _flip(value, ax)
        value = _placed(n, sorted(ranges, key=lambda r: r[0]), value)
    return value


def _filled_root(nodes: list[Node], steps: tuple, value: Node) -> Node | None:
    """A write of constants into regions of a view (``v[:] = 0``, ``v[y0:y1, :, 1] = 7``: fills
    of the view, or a ``full`` of it) as the same fills of the base array, each region mapped
    into the base's coordinates (one ``fill`` each, where a concatenation would copy the whole
    array); None for other writes, or regions a ``fill`` of the base cannot hold."""
    view = _view_step(nodes[-1], steps[-1])
    fills: list[tuple[list[tuple[Dim, Dim]], Node]] = []
    while value is not view:
        if value.op == "full" and value.args[0] is view:
            fills.append(([(0, d) for d in view.shape], value.args[1]))
            break
        if value.op != "fill" or value.args[0].ndim not in (2, 3):
            return None
        y0, y1, x0, x1, v = value.args[1:]
        regions = [(y0, y1), (x0, x1)]
        if value.ndim == 3:
            regions.append(value.attrs or (0, value.shape[2]))
        fills.append((regions, v))
        value = value.args[0]
    root = nodes[0]
    if root.ndim not in (2, 3):
        return None
    out = root
    for regions, v in reversed(fills):
        for n, step in zip(reversed(nodes), reversed(steps), strict=True):
            regions = _region_in(n, step, regions)
        chans: tuple = ()
        if root.ndim == 3:
            c0, c1 = regions[2]
            if not isinstance(c0, int) or not isinstance(c1, int):
                return None
            if not (c0 == 0 and c1 == root.shape[2]):
                chans = (c0, c1)
        (y0, y1), (x0, x1) = regions[:2]
        out = _new("fill", (out, y0, y1, x0, x1, v), chans, root.dtype, root.shape)
    return out


def _region_in(n: Node, step: tuple, regions: list[tuple[Dim, Dim]]) -> list[tuple[Dim, Dim]]:
    """Region ``lo:hi`` per axis of the view ``step`` makes of ``n`` as a region of ``n``."""
    kind, arg = step
    if kind == "transpose":
        out: list[Any] = [None] * len(regions)
        for i, p in enumerate(arg):
            out[p] = regions[i]
        return out
    bounds, takes, newaxes = _index_parts(n, _basic_key(n, arg if isinstance(arg, tuple)
                                                         else (arg,)))
    kept = iter(r for i, r in enumerate(regions) if i not in newaxes)
    taken = dict(takes)
    out = []
    for ax in range(n.ndim):
        if ax in taken:
            out.append((taken[ax], _dop("add", taken[ax], 1)))
            continue
        lo, hi = next(kept)
        b = bounds[ax]
        if b is None:
            out.append((lo, hi))
        elif b[2]:  # reversed: index j of the view is hi - 1 - j of n
            out.append((_dop("subtract", b[1], hi), _dop("subtract", b[1], lo)))
        else:
            out.append((_dop("add", b[0], lo), _dop("add", b[0], hi)))
    return out


def _whole_axis(n: Node, axis: int, lo: Dim, hi: Dim) -> tuple[bool, bool]:
    """Whether ``lo`` is known to be 0 and ``hi`` known to be the length of ``n``'s ``axis``."""
    dim = n.shape[axis]
    return (isinstance(lo, int) and lo == 0,
            hi is dim or (isinstance(hi, int) and isinstance(dim, int) and hi == dim)
            or (isinstance(hi, Node) and isinstance(dim, Node) and _same(hi, dim)))


def _placed(n: Node, ranges: list[tuple[int, Dim, Dim]], value: Node) -> Node:
    """``n`` with ``value`` in place of its region ``lo:hi`` on each listed axis (in axis
    order): the parts of ``n`` around the region concatenated with it, axis by axis."""
    if not ranges:
        return value
    (ax, lo, hi), rest = ranges[0], ranges[1:]
    mid = _placed(_slice(n, [(ax, lo, hi)]), rest, value)
    from_start, to_end = _whole_axis(n, ax, lo, hi)
    parts = [] if from_start else [_slice(n, [(ax, 0, lo)])]
    parts.append(mid)
    if not to_end:
        parts.append(_slice(n, [(ax, hi, n.shape[ax])]))
    # the parts' lengths add up to the axis' length: the result keeps n's shape (its
    # expression too, so the array written keeps the shape its views compare against)
    return _new("cat", tuple(parts), (ax,), n.dtype, n.shape) if len(parts) > 1 else mid


def _check_advanced(key: tuple) -> None:
    """Refuse a key whose integer and index-array entries are apart (``img[0, :, [1, 2]]``):
    numpy then puts the indexed axes first, which the tracer does not follow."""
    def advanced(k: Any) -> bool:
        return (isinstance(k, (int, np.integer)) and not isinstance(k, bool)) or \
            isinstance(k, (list, tuple, np.ndarray))
    at = [i for i, k in enumerate(key) if advanced(k)]
    arrays = any(isinstance(key[i], (list, tuple, np.ndarray)) for i in at)
    if arrays and len(at) > 1 and at[-1] - at[0] != len(at) - 1:
        raise TraceError("an index that mixes integers and an index array apart from each other "
                         "(numpy moves the indexed axes to the front); index in two steps, "
                         "img[0][:, [1, 2]]")


def _index_parts(n: Node, key: tuple) -> tuple[list[Any], list[tuple[int, Any]], list[int]]:
    """What a full key (one entry per axis, and ``None`` for new axes) asks of ``n``: per axis a
    slice's normalized bounds, ``("pick", indices)`` or None (the whole axis), the integer takes
    ``(axis, index)``, and the positions of new axes in the result."""
    bounds: list[Any] = []
    takes: list[tuple[int, Any]] = []
    newaxes: list[int] = []
    axis = 0
    out_axis = 0
    _check_advanced(key)
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
            for i in arr.tolist():
                if not -dim <= i < dim:  # numpy's error, for every image
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size "
                                     f"{dim}")
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
    return bounds, takes, newaxes


def _indexed(n: Node, bounds: list[Any], takes: list[tuple[int, Any]],
             newaxes: list[int]) -> Node:
    """``n`` sliced, picked, taken and expanded as :func:`_index_parts` describes."""
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
    rest = _getitem(n, key[:-1] + (slice(None),) * (1 if _has_ellipsis(key) else 0)) \
        if len(key) > 1 else n
    if not _has_ellipsis(key) and len(key) != n.ndim:
        raise TraceError("indexing with a per-sample value other than on the last axis")
    axis = rest.ndim - 1
    size = rest.shape[axis]
    items = _drawn_indices(key[-1], size, n.ndim - 1)
    parts = [Sym(const(np.take(rest.value, c, axis)) if rest.op == "const" else
                 _new("take", (rest, c), (axis,), rest.dtype, rest.shape[:axis]))
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


def _write_canvas(n: Node, key: Any, value: Any) -> Node:
    """``canvas[key] = value`` on a new array of a per-sample shape (:func:`canvas`) filled with
    one value per channel: a constant written over all of it fills it anew; an array written
    into a region of its rows and columns (``dst[p:p + h, p:p + w] = img``) makes it a padded
    slice of that array (a ``pad`` node: the array, its offset, and the canvas' fill around
    it). numpy raises ValueError where the region's size is not the array's, and so does the
    traced op."""
    full = _full_key(key, n.ndim)
    if len(full) != n.ndim or not builtins.all(isinstance(k, slice) for k in full) or (
            n.ndim == 3 and full[2] != slice(None)):
        raise TraceError("a write into a new array of a per-sample shape other than "
                         "dst[y0:y1, x0:x1] = array or dst[:] = constant")
    bounds = [_normalize_slice(k, d) for k, d in zip(full[:2], n.shape[:2], strict=True)]
    if builtins.any(rev for _, _, rev in bounds):
        raise TraceError("a write into a reversed region (step -1) of a new array")
    whole = builtins.all(k == slice(None) for k in full)
    channels = n.shape[2] if n.ndim == 3 else None
    if whole and not isinstance(value, Sym):
        return _new("canvas", (*n.shape, const(canvas_fill(value, n.dtype, channels))), (),
                    n.dtype, n.shape)
    if n.op != "canvas" or not isinstance(value, Sym) or value.ndim != n.ndim or (
            n.ndim == 3 and value.node.shape[2] != channels):
        raise TraceError("a write into a new array of a per-sample shape other than one array "
                         "of its rank (and channels) pasted into a region of it, or a constant "
                         "over all of it")
    v = value._checked()
    for ax, (lo, hi, _) in enumerate(bounds):
        size, have = _dop("subtract", hi, lo), v.shape[ax]
        if linear_form(size) == linear_form(have):
            continue
        low = lower(have)
        if low is None or low <= 1:
            raise TraceError("an array that may be broadcast into a region of a new array (a "
                             "size of 1, which numpy repeats; only an array of the region's "
                             "size is lowered)")
        raise_where(ufunc("not_equal", _dim_sym(size), _dim_sym(have)), ValueError,
                    f"could not broadcast input array into the region (their sizes differ "
                    f"on axis {ax})")
    return padded_slice(cast_node(v, n.dtype), _dop("subtract", 0, bounds[0][0]),
                        _dop("subtract", 0, bounds[1][0]), n.shape[0], n.shape[1],
                        n.args[-1].value)


def holds_in_float32(fill: Any, dtype: np.dtype) -> bool:
    """Whether float32 holds each value of ``fill`` (of ``dtype``) exactly: DALI pads with
    float32 values."""
    with np.errstate(all="ignore"):
        back = np.asarray(fill, np.float32).astype(dtype)
    return back.tobytes() == np.asarray(fill, dtype).tobytes()


def padded_slice(x: Node, y0: Dim, x0: Dim, height: Dim, width: Dim, fill: np.ndarray) -> Node:
    """``x`` read at rows ``y0..y0+height-1`` and columns ``x0..x0+width-1`` (per-sample
    bounds), ``fill`` (a value per channel, or one) where they fall outside ``x``. DALI pads
    with float32 values: a fill that float32 does not hold exactly is refused."""
    if not holds_in_float32(fill, x.dtype):
        raise TraceError(f"a padded array filled with {fill.tolist()}, which float32 does not "
                         "hold exactly (DALI pads with float32 values)")
    return _new("pad", (x, y0, x0, height, width, const(fill)), (), x.dtype,
                (height, width, *x.shape[2:]))


def _slice_canvas(n: Node, ranges: list[tuple[int, Dim, Dim]]) -> Node | None:
    """A slice of rows and columns of a canvas (a smaller canvas) or of a padded slice (one
    whose offset moves by the slice's start); None for a slice of the channels."""
    if builtins.any(axis > 1 for axis, _, _ in ranges):
        return None
    shape = list(n.shape)
    starts: dict[int, Dim] = {}
    for axis, lo, hi in ranges:
        shape[axis] = _dop("subtract", hi, lo)
        starts[axis] = lo
    if n.op == "canvas":
        return _new("canvas", (*shape, n.args[-1]), (), n.dtype, tuple(shape))
    x, y0, x0, _, _, fill = n.args
    return _new("pad", (x, _dop("add", y0, starts.get(0, 0)), _dop("add", x0, starts.get(1, 0)),
                        shape[0], shape[1], fill), (), n.dtype, tuple(shape))


def _slice(n: Node, ranges: list[tuple[int, Dim, Dim]]) -> Node:
    """``n`` restricted to ``lo:hi`` on each listed axis (normalized bounds); one node."""
    if n.op in ("canvas", "pad") and ranges:
        ranges = [(ax, lo, hi) for ax, lo, hi in ranges if not (
            isinstance(lo, int) and lo == 0 and (hi is n.shape[ax] or hi == n.shape[ax]))]
        got = _slice_canvas(n, ranges) if ranges else n
        if got is not None:
            return got
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


def _fill_region(n: Node, key: Any, value: Any) -> Node:
    key = _full_key(key, n.ndim)
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
