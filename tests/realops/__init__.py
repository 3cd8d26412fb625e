"""A corpus of augmentations copied from public libraries, as their authors wrote them.

Each op is registered with ``@realop`` (``@augment_op`` that leaves the registry as it was) and
adapted only in its signature: an ``rng: np.random.Generator`` argument in place of ``random`` /
``np.random``, a copy where the original wrote into its input, its parameters as keyword
defaults, one image in place of a batch or a dict of results. The comment over each op names
its source: repository, path, version or commit, and the original function.

Each library's module holds an ``EXPECT`` table, op name -> ``"lowers"`` or
``"refuses: <regex of the reason>"``: what ``augment_ops.trace`` does with the op today.
A module's ``KNOWN_FAILURES`` (op name -> what goes wrong) lists lowered ops whose native
path is known to fail the parity checks, and its ``KNOWN_REFUSAL_FAILURES`` (optional) refused
ops whose refusal breaks the contract of one (a reason that names no line of the op's source);
they are strict expected failures, so a fix fails the test until its entry is removed.
``tests/test_realops.py`` holds the tracer to these tables, so a regression, a mistrace, and an
op that starts to lower all fail until the table says so.
``benchmarks/realops_report.py`` prints the table and the share of ops that lower. The package
is imported as ``realops``, with ``tests/`` on ``sys.path`` (as pytest puts it there for
``helpers``).

``tests/realops_holdout`` is a second set built the same way (its ops registered with this
``realop``, its tables read by these functions): augmentations chosen as users pick them, to
measure the tracer on code that was not tuned against. :func:`collection` returns either set.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import augment_ops
from augment_ops import Op, augment_op

MODULES = ("albumentations_ops", "ultralytics_ops", "mm_ops", "timm_ops", "imgaug_ops",
           "torchvision_ops", "detectron2_ops", "ffcv_ops", "readme_ops")


@dataclass(frozen=True)
class RealOp:
    """An op of the corpus: the registered op, its library and the source it was copied from;
    ``package`` is the set it belongs to (``realops`` or ``realops_holdout``)."""

    op: Op
    library: str
    source: str
    package: str

    @property
    def name(self) -> str:
        return self.op.name


_COLLECTED: list[RealOp] = []


def realop(library: str, source: str, **kw: Any) -> Callable[[Callable[..., Any]], Op]:
    """``@augment_op(**kw)`` that unregisters the op again and records it in the corpus."""

    def wrap(fn: Callable[..., Any]) -> Op:
        op = augment_op(replace=True, **kw)(fn)
        augment_ops.unregister(op.name)
        _COLLECTED.append(RealOp(op, library, source, fn.__module__.rpartition(".")[0]))
        return op

    return wrap


def collection(package: str, modules: Sequence[str]) -> list[RealOp]:
    """Every op that ``package``'s ``modules`` register, module by module, in source order."""
    for m in modules:
        importlib.import_module(f"{package}.{m}")
    return [r for r in _COLLECTED if r.package == package]


def corpus() -> list[RealOp]:
    """Every op of the corpus, module by module, in source order."""
    return collection(__name__, MODULES)


def known_failures(package: str = __name__, modules: Sequence[str] = MODULES,
                   name: str = "KNOWN_FAILURES") -> dict[str, str]:
    """The ``name`` tables of ``package``'s modules (the corpus's by default), merged: the
    ``KNOWN_FAILURES`` (lowered ops that fail the parity checks) or, with
    ``name="KNOWN_REFUSAL_FAILURES"``, the refused ops whose refusal breaks its contract."""
    table: dict[str, str] = {}
    for m in modules:
        table.update(getattr(importlib.import_module(f"{package}.{m}"), name, {}))
    return table


def expected(package: str = __name__, modules: Sequence[str] = MODULES) -> dict[str, str]:
    """The ``EXPECT`` tables of ``package``'s modules (the corpus's by default), merged (op names
    are unique across a set)."""
    table: dict[str, str] = {}
    for m in modules:
        mod = importlib.import_module(f"{package}.{m}")
        for name, value in mod.EXPECT.items():
            if name in table:
                raise ValueError(f"op {name!r} is in two EXPECT tables")
            table[name] = value
    return table
