"""The generator a traced random op receives (:class:`DrawRng`): ``np.random.Generator``'s scalar
methods built from uniform draws, symbolic while traced and concrete when replayed on numpy."""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import augment_ops.trace.numpy_api  # noqa: F401  (registers the handlers Sym dispatches to)
from augment_ops.trace.combine import _where, select
from augment_ops.trace.facts import lower, sound, upper
from augment_ops.trace.ir import Node, TraceError, _new, const
from augment_ops.trace.sym import Sym, _dtype_kind, _to_node, cast_node, raise_where, ufunc

#: The most draws one ``rng`` call with ``size=`` may make (each is a per-sample scalar).
MAX_VECTOR_DRAWS = 64


# -- randomness ---------------------------------------------------------------------------------
def _floor_int(x: Any) -> Any:
    if isinstance(x, Sym):
        return Sym(cast_node(ufunc("floor", x).node, np.int64))
    return np.int64(np.floor(x))


def _as_float(x: Any) -> Any:
    if isinstance(x, Sym):
        return Sym(cast_node(x.node, np.float64, weak=True))
    return float(x)


def _math(name: str, x: Any) -> Any:
    return ufunc(name, x) if isinstance(x, Sym) else getattr(np, name)(np.float64(x))


def _floor_below(span: Any) -> bool:
    """Whether ``floor(u * float(span)) <= span - 1`` for every float64 ``u`` in [0, 1), so that
    the clamp of ``rng.integers`` changes no value.

    Proof, for an integer ``1 <= span <= 2**53`` (exact as a float64): ``u <= 1 - 2**-53``, the
    largest float64 below 1, so the exact product is at most ``span - e`` with
    ``e = span * 2**-53``. Let ``2**j <= span < 2**(j+1)``. For ``span == 2**j`` that product is
    a float64 itself, below ``span``. Otherwise the float64s next to ``span`` are ``2**(j-52)``
    apart and ``e > 2**(j-53)``, half that gap: the product is more than half a gap below
    ``span`` and rounds to at most ``span - 2**(j-52)``. Rounding is monotonic, so every
    ``fl(u * span) < span``, whose floor is at most ``span - 1``."""
    if isinstance(span, Sym):
        if span.dtype.kind not in "iu":
            return False
        lo, up = lower(span.node), upper(span.node)
        return lo is not None and up is not None and lo >= 1 and up <= 2**53
    return isinstance(span, (int, np.integer)) and 1 <= int(span) <= 2**53


def _noop_minimum(n: Node) -> Node:
    """``n``, a ``np.minimum(a, b)`` known to equal ``a``, marked so: the tracer keeps its facts
    (``<= b``) and the DALI lowering emits no operator for it."""
    if n.op != "bin" or n.attrs != ("minimum",):
        return n
    return _new("bin", n.args, ("minimum", "first"), n.dtype, n.shape, n.weak)


def _checked_span(span: Any) -> Any:
    """``span`` (``high - low`` of ``rng.integers``, after :func:`_integers_checks`), marked as at
    least 1: numpy raises for a sample where it is not, so no result of the op is computed from
    its value there. The mark is ``max(span, 1)`` known to equal ``span`` (the DALI lowering
    emits no operator for it), whose bounds tell the tracer that the draw is in ``0..span - 1``
    (no clamp of it, no wrap-around of a negative index made from it). Only where the
    subtraction cannot wrap around, so that ``high > low`` makes ``span >= 1``."""
    if not isinstance(span, Sym) or span.dtype.kind not in "iu" or span.ndim != 0 or \
            not sound(span.node):
        return span
    lo = lower(span.node)
    if lo is not None and lo >= 1:
        return span
    one = const(np.array(1, span.dtype))
    return Sym(_new("bin", (span.node, one), ("maximum", "first"), span.dtype, (),
                    span.node.weak))


def _integers_checks(low: Any, high: Any, dtype: np.dtype, endpoint: bool) -> None:
    """numpy's checks of ``rng.integers(low, high, dtype=, endpoint=)``, with its messages."""
    if dtype.kind not in "iu":
        raise TraceError(f"rng.integers(dtype={dtype})")
    info = np.iinfo(dtype)
    top = int(info.max) + (not endpoint)  # the largest high numpy takes

    def fits(b: Any) -> bool:
        """Whether every value of a per-sample bound lies in ``info.min..top``."""
        return isinstance(b, Sym) and np.iinfo(b.dtype).min >= info.min and \
            np.iinfo(b.dtype).max <= top
    if not fits(low):
        raise_where(low < int(info.min), ValueError, f"low is out of bounds for {dtype}")
    if not fits(high):
        raise_where(high > top, ValueError, f"high is out of bounds for {dtype}")
    zero = isinstance(low, (int, np.integer)) and int(low) == 0
    if endpoint:
        raise_where(low > high, ValueError, "high < 0" if zero else "low > high")
    else:
        raise_where(low >= high, ValueError, "high <= 0" if zero else "low >= high")


class DrawRng:
    """The generator a traced random op sees: ``np.random.Generator``'s scalar methods, each
    built from uniform draws ``uniform(slot)`` in [0, 1).

    On the traced path ``uniform`` gives symbolic per-sample draws (a counter-based hash of seed,
    epoch, sample and op, :func:`extsrc.ops_runtime.seeding.counter_uniform`); given that numpy
    function it replays on numpy exactly what the traced path computes. Draws differ from
    ``np.random.Generator``'s; their distributions are the same. An array drawn the size of
    the image (noise, ``rng.normal(0, s, img.shape)``) takes one slot: :meth:`_noise`.
    """

    def __init__(self, uniform: Callable[[int], Any],
                 noise: Callable[[str, tuple[int, ...], float], np.ndarray] | None = None,
                 noise_slots: frozenset[tuple[int, str]] | None = None) -> None:
        self._uniform = uniform
        self._fill = noise
        self._noise_slots = noise_slots
        self._slot = 0

    @property
    def slots_used(self) -> int:
        return self._slot

    def _next(self) -> Any:
        k = self._slot
        self._slot += 1
        return self._uniform(k)

    @staticmethod
    def _scalar_only(size: Any, what: str) -> None:
        if size is not None:
            raise TraceError(f"rng.{what}(size=...) (only scalar draws are lowered)")

    @staticmethod
    def _constant_shape(size: Any) -> tuple[int, ...] | None:
        """``size=`` as a constant shape (numpy's error for a negative size); ``None`` for a
        size that holds per-sample values."""
        items = tuple(size) if isinstance(size, (tuple, list)) else (size,)
        if builtins.any(isinstance(v, Sym) for v in items):
            return None
        shape = tuple(operator.index(v) for v in items)
        if builtins.any(v < 0 for v in shape):
            raise ValueError("negative dimensions are not allowed")
        return shape

    @classmethod
    def _size(cls, size: Any, what: str) -> tuple[int, ...]:
        """``size=`` as a constant shape; a drawn or per-sample size is refused."""
        shape = cls._constant_shape(size)
        if shape is None:
            raise TraceError(f"rng.{what}(size=<a per-sample value>) (a number of draws that "
                             "differs per sample, which the per-sample draws cannot give; draw a "
                             "constant number of values, or for noise or a mask of the image's "
                             "size use rng.random(shape), rng.uniform or rng.normal, which lower: "
                             "a mask of probability p is rng.random(shape) < p)")
        if math.prod(shape) > MAX_VECTOR_DRAWS:
            raise TraceError(f"rng.{what}(size={size}) of more than {MAX_VECTOR_DRAWS} draws "
                             "(each draw is a per-sample scalar)")
        return shape

    @staticmethod
    def _scalar_args(what: str, *args: Any) -> None:
        for v in args:
            if isinstance(v, (list, tuple, np.ndarray)) or (isinstance(v, Sym) and v.ndim):
                raise TraceError(f"rng.{what} with array arguments (only scalar arguments are "
                                 "lowered)")

    @staticmethod
    def _array(values: list[Any], shape: tuple[int, ...], dtype: Any) -> Any:
        """The draws ``values`` (in numpy's C order) as an array of ``shape`` and ``dtype``:
        numpy's when every value is concrete (replayed on numpy), else a traced stack."""
        dtype = np.dtype(dtype)
        if not builtins.any(isinstance(v, Sym) for v in values):
            return np.array(values, dtype=dtype).reshape(shape)
        nodes = [_to_node(v, dtype) for v in values]
        if not shape:
            return Sym(nodes[0])
        for dim in reversed(shape):
            nodes = [_new("stack", tuple(nodes[k:k + dim]), (0,), dtype,
                          (dim, *nodes[k].shape)) for k in range(0, len(nodes), dim)]
        return Sym(nodes[0])

    def _many(self, size: Any, what: str, one: Callable[[], Any], dtype: Any) -> Any:
        shape = self._size(size, what)
        return self._array([one() for _ in range(math.prod(shape))], shape, dtype)

    def _noise_shape(self, size: Any, what: str) -> tuple[Any, ...] | None:
        """``size=`` of a ``rng.<what>`` draw made as a noise array (:meth:`_noise`): a
        per-sample size (the image's shape), or a constant one of more than
        :data:`MAX_VECTOR_DRAWS` values; ``None`` for a small constant size, whose draws are
        per-sample scalars. A replay given the traced op's ``noise_slots`` follows them
        instead: there every size is a number, and an image small enough gives a traced noise
        array few values. They name the call too, as another branch may draw at the same slot
        (``rng.random(3)`` where one draws ``rng.normal(0, s, img.shape)``)."""
        shape = self._constant_shape(size)
        if shape is None:
            return tuple(size) if isinstance(size, (tuple, list)) else (size,)
        if self._noise_slots is not None:
            return shape if (self._slot, what) in self._noise_slots else None
        return shape if math.prod(shape) > MAX_VECTOR_DRAWS else None

    def _noise(self, kind: str, shape: tuple[Any, ...], what: str) -> Any:
        """An array of ``shape`` of independent draws, ``"normal"`` (standard normal) or
        ``"uniform"`` (in [0, 1)), float64, taking one slot.

        Traced, it is a ``noise`` node, which DALI's own generator fills on the native path
        (``fn.random.normal`` / ``fn.random.uniform``): numpy's distribution, not numpy's
        numbers, and no replay of them elsewhere. Replayed on numpy, the slot's draw seeds a
        numpy generator that fills it (or ``noise(kind, shape, draw)`` given to the
        constructor does), so the other draws keep their slots and values (:func:`noise_slots`
        of the traced op tell a replay which draws are noise)."""
        u = self._next()
        if not isinstance(u, Sym):
            dims = tuple(operator.index(d) for d in shape)
            if self._fill is not None:
                return np.asarray(self._fill(kind, dims, float(u)), np.float64)
            gen = np.random.Generator(np.random.PCG64(int(float(u) * 2**53)))
            return gen.standard_normal(dims) if kind == "normal" else gen.random(dims)
        from augment_ops.trace.creation import checked_dims

        dims = list(shape) if builtins.all(isinstance(d, int) for d in shape) else \
            checked_dims(shape, "a random array")
        return Sym(_new("noise", tuple(dims), (kind, self._slot - 1, what), np.float64,
                        tuple(dims)))

    def random(self, size: Any = None, dtype: Any = np.float64) -> Any:
        """``[0, 1)``, a Python float."""
        if np.dtype(dtype) != np.float64:
            raise TraceError(f"rng.random(dtype={np.dtype(dtype)}) (only float64 is lowered)")
        if size is not None:
            shape = self._noise_shape(size, "random")
            if shape is not None:
                return self._noise("uniform", shape, "random")
            return self._many(size, "random", self.random, np.float64)
        return _as_float(self._next())

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        """``low + (high - low) * u``, numpy's formula, a Python float; raises as numpy does
        for a range that is not finite or below 0."""
        self._scalar_args("uniform", low, high)
        span = _as_float(high) - _as_float(low)
        if _dtype_kind(low) == "f" or _dtype_kind(high) == "f":  # integers make finite spans
            raise_where((span - span) != 0, OverflowError,  # inf or NaN
                        "high - low range exceeds valid bounds")
        raise_where(span < 0, ValueError, "high - low < 0")  # numpy checks before the size
        if size is not None:
            shape = self._noise_shape(size, "uniform")
            if shape is None:
                return self._many(size, "uniform", lambda: self.uniform(low, high), np.float64)
            return _as_float(low) + span * self._noise("uniform", shape, "uniform")
        u = self._next()
        return _as_float(_as_float(low) + span * u)

    def integers(self, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> Any:
        """``low + floor(u * (high - low))`` (below ``high``), an ``np.int64``; raises as numpy
        does for an empty range or bounds outside ``dtype``."""
        self._scalar_args("integers", low, high)
        if size is not None:
            return self._many(size, "integers",
                              lambda: self.integers(low, high, dtype=dtype, endpoint=endpoint),
                              dtype)
        if high is None:
            low, high = 0, low
        if builtins.any(isinstance(b, Sym) and b.dtype.kind not in "iu" for b in (low, high)):
            raise TraceError("rng.integers with per-sample bounds that are not integers")
        _integers_checks(low, high, np.dtype(dtype), endpoint)
        if endpoint:
            high = high + 1
        span = _checked_span(high - low)
        u = self._next()
        if not isinstance(span, Sym) and span == 1:
            # One value to draw (rng.integers(1, 1, endpoint=True)): a constant, the slot used
            # all the same so that later draws keep their slots.
            return np.dtype(dtype).type(low)
        k = _floor_int(u * _as_float(span))
        last = span - 1
        if isinstance(k, Sym):
            k = ufunc("minimum", k, last)
            if _floor_below(span):
                k = Sym(_noop_minimum(k.node))
            low = Sym(cast_node(low.node, np.int64)) if isinstance(low, Sym) else np.int64(low)
            out = ufunc("add", low, k)
        else:
            out = np.int64(low) + np.minimum(k, np.int64(last))
        if np.dtype(dtype) != np.int64:
            out = out.astype(dtype) if isinstance(out, Sym) else np.dtype(dtype).type(out)
        return out

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        """Box-Muller from two draws, ``loc + scale * z``, a Python float; raises as numpy does
        for ``scale < 0``."""
        self._scalar_args("normal", loc, scale)
        if size is not None:
            raise_where(_as_float(scale) < 0, ValueError, "scale < 0")  # numpy checks it first
            shape = self._noise_shape(size, "normal")
            if shape is None:
                return self._many(size, "normal", lambda: self.normal(loc, scale), np.float64)
            return _as_float(loc) + _as_float(scale) * self._noise("normal", shape, "normal")
        raise_where(_as_float(scale) < 0, ValueError, "scale < 0")
        u1, u2 = self._next(), self._next()
        r = _math("sqrt", -2.0 * _math("log", 1.0 - _as_float(u1)))
        z = r * _math("cos", 2.0 * math.pi * _as_float(u2))
        return _as_float(_as_float(loc) + _as_float(scale) * z)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> Any:
        """``normal(0.0, 1.0, size)``, as numpy's distribution is (float64 only)."""
        if np.dtype(dtype) != np.float64:
            raise TraceError(f"rng.standard_normal(dtype={np.dtype(dtype)}) (only float64 is "
                             "lowered)")
        if size is not None:
            shape = self._noise_shape(size, "standard_normal")
            if shape is not None:
                return self._noise("normal", shape, "standard_normal")
            return self._many(size, "standard_normal", self.standard_normal, np.float64)
        return self.normal(0.0, 1.0)

    def binomial(self, n: Any, p: Any, size: Any = None) -> Any:
        """``n`` trials of probability ``p`` (``n`` a constant count, at most
        :data:`MAX_VECTOR_DRAWS`), one draw each: how many draws lie below ``p``, a Python int
        (imgaug's ``rng.binomial(1, p)``); raises as numpy does for ``n < 0`` and for ``p``
        outside [0, 1] or NaN."""
        self._scalar_args("binomial", n, p)
        if size is not None:
            return self._many(size, "binomial", lambda: self.binomial(n, p), np.int64)
        if isinstance(n, Sym) or not isinstance(n, (int, np.integer)):
            raise TraceError("rng.binomial with a per-sample or non-integer n (only a constant "
                             "count of trials is lowered)")
        if n < 0:
            raise ValueError("n < 0")
        if n > MAX_VECTOR_DRAWS:
            raise TraceError(f"rng.binomial of more than {MAX_VECTOR_DRAWS} trials (each is a "
                             "draw)")
        message = "p < 0, p > 1 or p is NaN"
        if isinstance(p, Sym):
            q = _as_float(p)
            raise_where(ufunc("logical_not", ufunc("bitwise_and", q >= 0.0, q <= 1.0)),
                        ValueError, message)  # NaN compares false
        elif not 0.0 <= float(p) <= 1.0:
            raise ValueError(message)
        count: Any = 0
        for _ in range(int(n)):
            hit = self._next() < _as_float(p)
            count = count + (Sym(cast_node(hit.node, np.int64, weak=True))
                             if isinstance(hit, Sym) else int(hit))
        return count

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
        """Elements of ``a`` (a constant sequence, or ``range(a)`` for an int): one, or ``size``
        of them, drawn independently or (``replace=False``) as the first ``size`` of a
        Fisher-Yates shuffle."""
        if isinstance(a, Sym) or isinstance(p, Sym):
            raise TraceError("rng.choice over something other than a constant 1-D sequence")
        shape = self._size(size, "choice") if size is not None else None
        # The arguments are constants: numpy's own checks of them (an empty sequence, p of
        # another size or not summing to 1, a sample larger than the population without
        # replacement) raise here as they do on the numpy path.
        np.random.default_rng(0).choice(a, size=shape, replace=replace, p=p)
        values = np.arange(a) if isinstance(a, (int, np.integer)) else np.asarray(a)
        if values.ndim != 1:
            raise TraceError("rng.choice over something other than a constant 1-D sequence")
        _numbers(values, "rng.choice")
        if shape is not None:
            count = math.prod(shape)
            if replace:
                picks = [self.choice(values, p=p) for _ in range(count)]
            elif p is not None:
                raise TraceError("rng.choice(replace=False, p=...) (only uniform sampling "
                                 "without replacement is lowered)")
            else:
                picks = self._shuffled(list(values), count)
            return self._array(picks, shape, values.dtype)
        if p is None:
            idx = self.integers(0, len(values))
        else:
            cum = np.cumsum(np.asarray(p, dtype=np.float64))
            u = self._next()
            idx = np.int64(0)
            for c in cum[:-1]:
                hit = u >= c
                idx = idx + (Sym(cast_node(hit.node, np.int64)) if isinstance(hit, Sym)
                             else np.int64(hit))
        if not isinstance(idx, Sym):
            return values[int(idx)]
        return select(idx, values)

    def _shuffled(self, pool: list[Any], count: int) -> list[Any]:
        """The first ``count`` items of ``pool`` after a Fisher-Yates shuffle: position ``i``
        swaps with a uniform ``j`` in ``i..n-1``, one draw per position (none for the last)."""
        n = len(pool)
        if n > MAX_VECTOR_DRAWS:
            raise TraceError(f"a shuffle of more than {MAX_VECTOR_DRAWS} items")
        for i in range(builtins.min(count, n - 1)):
            j = self.integers(i, n)
            if not isinstance(j, Sym):
                j = int(j)
                pool[i], pool[j] = pool[j], pool[i]
                continue
            picked = pool[i]
            for m in range(i + 1, n):
                hit = ufunc("equal", j, m)
                picked, pool[m] = _where(hit, pool[m], picked), _where(hit, pool[i], pool[m])
            pool[i] = picked
        return pool[:count]

    def permutation(self, x: Any, axis: int = 0) -> Any:
        """``np.arange(x)`` (an int) or a constant 1-D sequence, shuffled."""
        if isinstance(x, Sym) or axis != 0:
            raise TraceError("rng.permutation of a traced array (only of an int or a constant "
                             "1-D sequence)")
        values = np.arange(x) if isinstance(x, (int, np.integer)) else np.array(x)
        if values.ndim != 1:
            raise TraceError("rng.permutation of a constant array of more than one axis")
        _numbers(values, "rng.permutation")
        return self._array(self._shuffled(list(values), len(values)), values.shape,
                           values.dtype)

    def shuffle(self, x: Any, axis: int = 0) -> None:
        """Shuffle a Python list in place (its items become per-sample values)."""
        if not isinstance(x, list) or axis != 0:
            raise TraceError("rng.shuffle of something other than a Python list (use "
                             "x = x[rng.permutation(len(x))] or rng.permutation(x))")
        x[:] = self._shuffled(list(x), len(x))

    def __getattr__(self, name: str) -> Any:
        raise TraceError(f"rng.{name} (lowered: random, uniform, integers, normal, "
                         "standard_normal, binomial, choice, permutation, shuffle)")


def noise_slots(traced: Any) -> frozenset[tuple[int, str]]:
    """The slots of a traced op's draws of noise arrays (:meth:`DrawRng._noise`), each with the
    ``rng`` method that drew it, for a replay on numpy:
    ``DrawRng(..., noise_slots=noise_slots(traced))``."""
    return frozenset((n.attrs[1], n.attrs[2]) for n in traced.nodes() if n.op == "noise")


def _numbers(values: np.ndarray, call: str) -> None:
    """Refuse a draw among Python objects (functions, strings): a DALI graph computes numbers,
    and a per-sample choice of which code runs would change the graph itself."""
    if values.dtype.kind not in "biuf":
        kinds = sorted({type(v).__name__ for v in values.tolist()})
        raise TraceError(
            f"{call} of a list of {' and '.join(kinds)} values (a per-sample choice among "
            "Python objects: which object each sample gets would decide the code that runs, "
            "while a DALI graph computes numbers only; draw an index, k = rng.integers(n), and "
            "branch on it, if k == 0: ..., for the choice to lower)")
