"""Float math of a uint8 image as lookup tables computed by numpy at trace time.

numpy's ``exp``, ``log``, ``tanh``, ``x ** 0.8``... (its own SIMD routines, or the C
library's) and DALI's differ in the last bit for some values, so the tracer records each such
node of pixel values as inexact (:func:`augment_ops.trace.sym._inexact`). Where the node is part
of an elementwise expression of ONE uint8 array (the image, a channel of it, a uint8 cast of
something) and constant scalars, the expression has only 256 possible inputs: numpy computes it
for each of them, through the same ufuncs with the same dtypes and constants
(:func:`augment_ops.trace.scalar_stage.evaluate`), and the pixels are ``table[img]``, exact by
construction, one ``fn.lookup_table`` (:func:`augment_ops.trace.lookup._constant_at`).

Each table covers the largest such expression containing inexact nodes (skimage's
``adjust_gamma`` down to its final cast to uint8); one whose values ``fn.lookup_table`` cannot
hold (float64 infinities beside finite values that float32 does not hold) is cut lower, at its
arguments. An expression that also reads per-sample draws (``(img / 255) ** gamma`` of a drawn
``gamma``) is a per-sample table: the same expression on ``np.arange(256)``, which numpy computes
for each sample beside its draws (:mod:`augment_ops.trace.gather`). An inexact node left outside
every table (an exponent computed from the image, a second array operand, ``img ** img[::-1]``)
refuses the op with the reason recorded for it; one inside a per-sample table is numpy's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from augment_ops.trace.gather import draw_only, gather, gathered_tables, table_expression
from augment_ops.trace.ir import Node, Traced, TraceError, _new, same_shape
from augment_ops.trace.lookup import _ELEMENTWISE, _constant_at
from augment_ops.trace.scalar_stage import evaluate
from augment_ops.trace.sym import _INEXACT

__all__ = ["tabulate"]

#: The values a table is computed on: every uint8 value.
_VALUES = np.arange(256, dtype=np.uint8)


def _readers_values(roots: list[Node]) -> set[int]:
    """The nodes the source's readers compute with numpy (as
    :func:`augment_ops.trace.lower_dali.sample_scalar_nodes` collects them): a small array of
    the draws alone (up to 64 elements) that a node computed from the image reads, and what it
    is computed from. Not such an array that is itself an output: DALI computes that one."""
    drawn: dict[int, bool] = {}
    dependent: dict[int, bool] = {}

    def on_image(n: Node) -> bool:
        got = dependent.get(id(n))
        if got is None:
            got = n.pixel or n.op in ("in_dim", "noise") or any(
                on_image(a) for a in n.args if isinstance(a, Node))
            dependent[id(n)] = got
        return got

    found: set[int] = set()
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for a in n.args:
            if not isinstance(a, Node):
                continue
            if on_image(n) and not on_image(a) and all(isinstance(d, int) for d in a.shape) \
                    and int(np.prod(a.shape)) <= 64 and draw_only(a, drawn):
                found.update(id(m) for m in Traced((a,), 0, 0).nodes())
            else:
                stack.append(a)
    return found


def _above(n: Node, src: Node, holds: Callable[[Node], bool]) -> bool:
    """Whether ``holds`` is true of a node of ``n``'s graph above ``src`` (not under it)."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if m is src or id(m) in seen:
            continue
        seen.add(id(m))
        if holds(m):
            return True
        stack.extend(a for a in m.args if isinstance(a, Node))
    return False


class _Tables:
    """Finds the uint8 source of elementwise expressions and replaces inexact ones by tables."""

    def __init__(self, inexact: dict[Node, TraceError]) -> None:
        self.inexact = inexact
        self.sources: dict[int, Node | str | None] = {}
        self.rebuilt: dict[int, Node] = {}
        self.drawn: dict[int, bool] = {}

    def _drawn(self, m: Node) -> bool:
        """A per-sample scalar of the op's draws (or a draw of size 1), which a per-sample
        table may read."""
        return (m.ndim == 0 or m.shape == (1,)) and not m.pixel and draw_only(m, self.drawn)

    def source(self, n: Node) -> Node | str | None:
        """The one uint8 array ``n`` is an elementwise function of (with constant scalars and
        draws), ``"const"`` for a constant scalar expression, ``"drawn"`` for one of draws, None
        for neither."""
        if id(n) in self.sources:
            return self.sources[id(n)]
        stack, order = [n], []
        while stack:  # arguments first, without recursion (expressions may be deep)
            m = stack.pop()
            if id(m) in self.sources:
                continue
            order.append(m)
            if m.op in _ELEMENTWISE:
                stack.extend(a for a in m.args if isinstance(a, Node) and id(a) not in
                             self.sources)
        for m in reversed(order):
            if id(m) in self.sources:
                continue
            found: Node | str | None = None
            if m.op == "const":
                found = "const" if np.size(m.value) == 1 else None
            elif m.op in _ELEMENTWISE and all(isinstance(a, Node) for a in m.args):
                kinds = {id(s) if isinstance(s, Node) else s: s
                         for s in (self._known(a) for a in m.args)}
                if None not in kinds.values():
                    arrays = [s for s in kinds.values() if isinstance(s, Node)]
                    found = arrays[0] if len(arrays) == 1 else None if arrays else \
                        "drawn" if "drawn" in kinds else "const"
            if found is None and self._drawn(m):
                found = "drawn"
            if found is None and m.dtype == np.uint8 and m.pixel and m.ndim:
                found = m  # a source itself: a table's positions
            self.sources[id(m)] = found
        return self.sources[id(n)]

    def _known(self, a: Node) -> Node | str | None:
        return self.sources[id(a)] if id(a) in self.sources else self.source(a)

    def _holds_inexact(self, n: Node, src: Node) -> bool:
        return _above(n, src, lambda m: m in self.inexact)

    def _table(self, n: Node) -> Node | None:
        """``n`` as a table read at its source's values, or None where it is not one."""
        src = self.source(n)
        if not isinstance(src, Node) or src is n or n.op not in _ELEMENTWISE or \
                not same_shape(n.shape, src.shape) or not self._holds_inexact(n, src):
            return None
        if self._reads_draws(n, src):
            expr = table_expression(n, src)
            if expr is None:
                return None
            try:
                return gather(expr, self.rebuild(src), "float math of pixel values and draws")
            except TraceError:  # a table numpy cannot compute in the readers: cut lower
                return None
        values = _VALUES.reshape((256,) + (1,) * src.ndim)
        try:
            (table,) = evaluate([n], 256, lambda m: values if m is src else None)
        except ValueError:  # a node numpy does not compute from its name
            return None
        table = np.ascontiguousarray(table.reshape(256))
        try:
            return _constant_at(table, self.rebuild(src))
        except TraceError:  # values fn.lookup_table cannot hold: cut lower
            return None

    def _reads_draws(self, n: Node, src: Node) -> bool:
        return _above(n, src, lambda m: self.sources.get(id(m)) == "drawn" and m.op != "const")

    def rebuild(self, n: Node) -> Node:
        """``n`` with its largest inexact elementwise expressions replaced by tables."""
        stack = [n]
        while stack:
            m = stack[-1]
            if id(m) in self.rebuilt:
                stack.pop()
                continue
            table = self._table(m) if m.pixel else None
            if table is not None:
                self.rebuilt[id(m)] = table
                stack.pop()
                continue
            todo = [a for a in m.args if isinstance(a, Node) and id(a) not in self.rebuilt]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            args = tuple(self.rebuilt[id(a)] if isinstance(a, Node) else a for a in m.args)
            same = all(x is y for x, y in zip(args, m.args, strict=True))
            self.rebuilt[id(m)] = m if same else _new(m.op, args, m.attrs, m.dtype, m.shape,
                                                      m.weak, m.value)
        return self.rebuilt[id(n)]


def tabulate(traced: Traced, inexact: dict[Node, TraceError]) -> Traced:
    """``traced`` with its inexact float math of uint8 arrays replaced by lookup tables (see the
    module's docstring); raises the recorded :class:`TraceError` of an inexact node left, and
    for float math of an array of draws that DALI would compute (:func:`_draws_math_left`)."""
    if not inexact:
        roots = [*traced.outputs, *(g.bad for g in traced.guards)]
        _draws_math_left(roots, _readers_values(roots))
        return traced
    tables = _Tables(inexact)
    outputs = tuple(tables.rebuild(n) for n in traced.outputs)
    guards = tuple(dataclasses.replace(g, bad=tables.rebuild(g.bad)) for g in traced.guards)
    result = dataclasses.replace(traced, outputs=outputs, guards=guards)
    roots = [*outputs, *(g.bad for g in guards)]
    left = {id(n) for n in Traced(tuple(roots), 0, 0).nodes()}
    # numpy computes a per-sample table, and a small array of the draws alone
    # (rng.uniform(size=3) ** 2.2), in the readers (lower_dali.sample_scalar_nodes), as arrays:
    # as the numpy path computes them. Not a single number (2.0 ** rng.uniform()): the numpy
    # path computes it with Python's or numpy's scalar pow (the C library's), the readers with
    # numpy's array routine, and the two differ in the last bit for some values.
    gathered, given = gathered_tables(roots), _readers_values(roots)
    left -= {id(n) for n in inexact if id(n) in left and not n.pixel and n.ndim and (
        id(n) in gathered or id(n) in given)}
    for node, refusal in inexact.items():
        if id(node) in left:
            raise refusal
    _draws_math_left(roots, given | gathered)
    return result


def _draws_math_left(roots: list[Node], numpys: set[int]) -> None:
    """Raise :class:`TraceError` for ``np.exp``, ``np.log`` ... of an array of draws (rank 2 or
    more) that numpy does not compute (not in ``numpys``): DALI would, and its result differs
    in the last bit for some values. Scalars and short vectors of draws and sizes are numpy's:
    in the readers, or in the scalar stage (:func:`augment_ops.trace.scalar_stage.
    wants_stage`)."""
    for n in Traced(tuple(roots), 0, 0).nodes():
        if n.op == "un" and n.attrs[0] in _INEXACT and not n.pixel and n.ndim >= 2 and \
                id(n) not in numpys:
            raise TraceError(f"np.{n.attrs[0]} of an array of draws that no value of the image "
                             "reads (DALI would compute it, and numpy's and DALI's "
                             f"{n.attrs[0]} differ in the last bit for some values; numpy "
                             "computes such an array where a value of the image reads it)")
