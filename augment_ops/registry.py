"""The op registry: the ``@augment_op`` decorator, the :class:`Op` it makes, and name lookup.

The registry holds ops; the ops themselves live in :mod:`augment_ops.builtin` (and in users' code).
An op is a numpy function ``img (HWC uint8) -> array | tuple of arrays``. The numpy function is
always the reference; an op may also declare faster implementations of the same function
(``"native"``: DALI's own operators, ``"gpu"``: array code on the GPU), and a parity test holds
every declared implementation to the reference. Implementations are kept here, in a mapping from
op to path to function (the frozen :class:`Op` holds none), declared once each with
:meth:`Op.implement` and read with :func:`implementation`.
"""

from __future__ import annotations

import inspect
import re
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, get_args

import numpy as np

__all__ = [
    "Implementation",
    "Op",
    "OpContractError",
    "OpRegistrationError",
    "augment_op",
    "available",
    "get",
    "implementation",
    "unregister",
]

Implementation = Literal["numpy", "native", "gpu"]
IMPLEMENTATIONS: tuple[str, ...] = get_args(Implementation)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class OpRegistrationError(ValueError):
    """An op could not be registered (bad name, bad signature, name taken)."""


class OpContractError(ValueError):
    """An op returned something other than what it declared (count, type, dtype, rank)."""


@dataclass(frozen=True, eq=False)
class Op:
    """A registered augmentation op.

    Calling an ``Op`` calls the user's function unchanged, so a decorated function still works as
    plain numpy code. :meth:`apply` is what the loader calls: it passes the generator of a random
    op and checks the outputs against the declaration.
    """

    name: str
    fn: Callable[..., Any]
    num_outputs: int = 1
    random: bool = False
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.uint8))
    ndim: int = 3
    min_size: int = 1
    tolerance: float = 0.0
    params: tuple[tuple[str, Any], ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise OpRegistrationError(
                f"op name must be a Python identifier (it names outputs like '<op>_0'), "
                f"got {self.name!r}"
            )
        if not isinstance(self.num_outputs, int) or self.num_outputs < 1:
            raise OpRegistrationError(
                f"op '{self.name}': num_outputs must be an int >= 1, got {self.num_outputs!r}"
            )
        if self.ndim not in (2, 3, 4):
            raise OpRegistrationError(
                f"op '{self.name}': ndim must be 2 or 3 (an op on one image), or 4 (an op on a "
                f"whole video clip, FHWC, for extsrc.VideoLoader), got {self.ndim!r}"
            )
        if self.tolerance < 0:
            raise OpRegistrationError(f"op '{self.name}': tolerance must be >= 0")
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    # -- calling -------------------------------------------------------------------------------
    def __call__(self, img: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        return self.fn(img, *args, **{**dict(self.params), **kwargs})

    def apply(
        self, img: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[np.ndarray, ...]:
        """Run the numpy reference on one image and return its outputs as a checked tuple."""
        if min(self.spatial(img.shape)) < self.min_size:
            raise OpContractError(
                f"op '{self.name}' needs images of at least {self.min_size}x{self.min_size} "
                f"pixels, got {'x'.join(str(d) for d in self.spatial(img.shape))}"
            )
        kwargs = dict(self.params)
        if self.random:
            if rng is None:
                raise TypeError(f"op '{self.name}' is random: pass rng=np.random.Generator")
            kwargs["rng"] = rng
        out = self.fn(img, **kwargs)
        return self.check_outputs(out)

    @property
    def on_clips(self) -> bool:
        """Whether the op takes a whole video clip ``(F, H, W, C)`` (declared ``ndim=4``)."""
        return self.ndim == 4

    def spatial(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Height and width of an input of this op (a clip's frames for a clip op)."""
        return tuple(shape[1:3] if self.on_clips else shape[:2])

    def check_outputs(self, out: Any, array_type: type = np.ndarray) -> tuple[Any, ...]:
        """Normalise ``out`` to a tuple of arrays, or say how it breaks the contract.

        ``array_type`` is ``np.ndarray`` on the numpy path and ``cupy.ndarray`` on the gpu path.
        """
        outs = out if isinstance(out, tuple) else (out,)
        if isinstance(out, list):
            outs = tuple(out)
        if len(outs) != self.num_outputs:
            raise OpContractError(
                f"op '{self.name}' returned {len(outs)} output(s) but declares "
                f"num_outputs={self.num_outputs}; return a tuple of {self.num_outputs} arrays or "
                f"fix num_outputs in @augment_op"
            )
        checked = []
        for k, o in enumerate(outs):
            if not isinstance(o, array_type):
                raise OpContractError(
                    f"op '{self.name}' output {k} is a {type(o).__name__}, expected "
                    f"{array_type.__module__}.{array_type.__name__}"
                )
            if o.dtype != self.dtype:
                raise OpContractError(
                    f"op '{self.name}' output {k} has dtype {o.dtype}, declared {self.dtype}; "
                    f"convert with .astype(np.{self.dtype}) or declare dtype= in @augment_op"
                )
            if o.ndim != self.ndim:
                raise OpContractError(
                    f"op '{self.name}' output {k} has rank {o.ndim} (shape {o.shape}), declared "
                    f"ndim={self.ndim} (HWC images are rank 3, FHWC clips rank 4)"
                )
            if 0 in o.shape:
                raise OpContractError(
                    f"op '{self.name}' output {k} is empty (shape {o.shape}); an image output "
                    "needs at least one pixel"
                )
            checked.append(o if array_type is not np.ndarray else np.ascontiguousarray(o))
        return tuple(checked)

    # -- variants and implementations ----------------------------------------------------------
    def with_params(self, **params: Any) -> Op:
        """The same op with keyword parameters bound: ``random_crop.with_params(size=64)``."""
        accepted = _param_names(self.fn)
        unknown = sorted(set(params) - accepted)
        if unknown:
            raise TypeError(
                f"op '{self.name}' has no parameter(s) {unknown}; it accepts {sorted(accepted)}"
            )
        variant = replace(self, params=tuple(sorted({**dict(self.params), **params}.items())))
        # The variant starts with the op's implementations; declaring one on the variant later
        # leaves the op alone.
        _IMPLEMENTATIONS[variant] = dict(_IMPLEMENTATIONS.get(self, {}))
        return variant

    def implement(self, path: Implementation) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Declare a faster implementation of this op, held to the numpy reference by parity tests.

        ``"native"``: ``f(img: DataNode, **params) -> DataNode | tuple`` built from DALI operators,
        placed on whatever device ``img`` is on. ``"gpu"``: ``f(img: cupy.ndarray, [rng=], **params)
        -> array | tuple``, the numpy function's contract on one CuPy image (called for each sample
        of a batch inside one GPU ``python_function`` call); ``@augment_op(gpu=True)`` declares
        the numpy function itself as this. Declaring a path twice raises.
        """
        if path not in IMPLEMENTATIONS or path == "numpy":
            raise ValueError(f"path must be 'native' or 'gpu', got {path!r}")
        if path == "native" and self.random:
            # DALI's operators draw from DALI's RNG, which cannot match the per-sample numpy
            # generator; a hand-written native random op would break reproducibility and parity.
            # (A traced one draws from the sample's counter-based stream: see augment_ops.trace.)
            raise OpRegistrationError(
                f"op '{self.name}' is random; a hand-written native lowering cannot reproduce "
                "its per-sample draws. Let the tracer lower it (augment_ops.explain says whether "
                "it can) or declare a 'gpu' implementation instead"
            )

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            impls = _IMPLEMENTATIONS.setdefault(self, {})
            if path in impls:
                raise OpRegistrationError(
                    f"op '{self.name}' already has a '{path}' implementation "
                    f"({getattr(impls[path], '__qualname__', impls[path])!r}); declare each "
                    "path once (gpu=True in @augment_op declares the numpy function itself as "
                    "the 'gpu' one)"
                )
            impls[path] = f
            return f

        return register

    @property
    def impls(self) -> Mapping[str, Callable[..., Any]]:
        """The faster implementations declared for this op, by path (read-only)."""
        return MappingProxyType(_IMPLEMENTATIONS.get(self, {}))

    @property
    def paths(self) -> tuple[str, ...]:
        """The implementations declared for this op, reference first: ``"numpy"`` and those
        added with :meth:`implement` (or ``gpu=True``).

        A native path traced from the numpy function is not declared:
        :func:`augment_ops.paths.available_paths` adds it, and is what a loader chooses from.
        """
        if self.on_clips:  # the hand-written paths work on HWC images
            return ("numpy",)
        has = set(_IMPLEMENTATIONS.get(self, {}))
        return ("numpy", *(p for p in IMPLEMENTATIONS if p in has))


#: Faster implementations of each op, by path; outside the frozen Op, dropped with the op.
_IMPLEMENTATIONS: weakref.WeakKeyDictionary[Op, dict[str, Callable[..., Any]]] = (
    weakref.WeakKeyDictionary()
)


def implementation(op: Op, path: str) -> Callable[..., Any] | None:
    """The function implementing ``op`` on ``path`` (``"native"`` or ``"gpu"``), or ``None``."""
    return _IMPLEMENTATIONS.get(op, {}).get(path)


def _param_names(fn: Callable[..., Any]) -> set[str]:
    sig = inspect.signature(fn)
    return {n for n in list(sig.parameters)[1:] if n != "rng"}


def _validate_signature(fn: Callable[..., Any], name: str) -> bool:
    """Check ``fn(img, [rng], **params-with-defaults)``; return whether it takes ``rng``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:  # builtins without signatures
        raise OpRegistrationError(f"op '{name}': cannot read the signature of {fn!r}") from e
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
    ):
        raise OpRegistrationError(
            f"op '{name}': the first parameter must be the image, e.g. def {name}(img): ..."
        )
    for p in params[1:]:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.name != "rng" and p.default is inspect.Parameter.empty:
            raise OpRegistrationError(
                f"op '{name}': parameter '{p.name}' needs a default value; ops are called with "
                "the image (and rng=) only, other parameters are bound with Op.with_params()"
            )
    return "rng" in sig.parameters


_REGISTRY: dict[str, Op] = {}


def augment_op(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    num_outputs: int = 1,
    dtype: Any = np.uint8,
    ndim: int = 3,
    min_size: int = 1,
    tolerance: float = 0.0,
    gpu: bool = False,
    replace: bool = False,
) -> Any:
    """Register a numpy function as an augmentation op; usable bare or with arguments.

    ``fn(img)`` takes one HWC ``uint8`` image and returns an array or a tuple of ``num_outputs``
    arrays of ``dtype`` and rank ``ndim``. ``ndim=4`` declares an op on whole video clips instead:
    ``fn(clip)`` takes an ``(F, H, W, C)`` clip and returns clips (``extsrc.VideoLoader`` only,
    numpy path only). A parameter named ``rng`` makes the op random: it then
    receives a ``np.random.Generator`` derived from (seed, epoch, sample index), so results are the
    same whatever process or order runs it. Other parameters need defaults (bind them with
    :meth:`Op.with_params`). ``gpu=True`` says the function also runs unchanged on CuPy arrays
    (slicing, flips and ``np.*`` calls that CuPy dispatches), which enables the ``"gpu"`` path.
    ``tolerance`` is the largest absolute difference allowed between a
    declared fast implementation and this reference (0: exact).

    Registering a name that is taken raises unless ``replace=True``. Returns the :class:`Op`, which
    is still callable like the original function.

    >>> @augment_op(num_outputs=2)
    ... def halves(img):
    ...     return img[:, : img.shape[1] // 2], img[:, img.shape[1] // 2 :]
    """

    def decorate(f: Callable[..., Any]) -> Op:
        if isinstance(f, Op):
            raise OpRegistrationError(
                f"'{f.name}' is already a registered op; decorate the plain function once, or "
                f"use augment_ops.get('{f.name}')"
            )
        if not callable(f):
            raise OpRegistrationError(f"@augment_op needs a function, got {type(f).__name__}")
        op_name = name or getattr(f, "__name__", None)
        if op_name is None:
            raise OpRegistrationError("@augment_op on an object without __name__: pass name=")
        takes_rng = _validate_signature(f, op_name)
        doc = inspect.getdoc(f) or ""
        op = Op(
            name=op_name, fn=f, num_outputs=num_outputs, random=takes_rng, dtype=dtype, ndim=ndim,
            min_size=min_size, tolerance=tolerance, description=doc.split("\n\n")[0],
        )
        if gpu:  # the function runs unchanged on CuPy arrays: it is its own gpu implementation
            op.implement("gpu")(f)
        register(op, replace=replace)
        return op

    if fn is not None:
        return decorate(fn)
    return decorate


def register(op: Op, *, replace: bool = False) -> Op:
    """Add an already built :class:`Op` to the registry."""
    if op.name in _REGISTRY and not replace and _REGISTRY[op.name] is not op:
        raise OpRegistrationError(
            f"an op named '{op.name}' is already registered; pick another name, or pass "
            "replace=True to @augment_op to replace it"
        )
    _REGISTRY[op.name] = op
    return op


def unregister(name: str) -> None:
    """Remove an op (mostly for notebooks and tests)."""
    _REGISTRY.pop(name, None)


def get(name: str | Op) -> Op:
    """The op registered under ``name`` (an :class:`Op` is returned as is)."""
    if isinstance(name, Op):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"no op named {name!r}; registered ops: {sorted(_REGISTRY)}. Register one with "
            "@augment_ops.augment_op"
        ) from None


def available() -> list[str]:
    """Names of all registered ops, sorted."""
    return sorted(_REGISTRY)


def iter_ops() -> Iterator[Op]:
    """All registered ops in name order (for contract tests and the ``extsrc ops`` listing)."""
    return (_REGISTRY[n] for n in sorted(_REGISTRY))
