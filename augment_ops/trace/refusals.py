"""What a refusal says when the op's code hands a traced array to code outside numpy.

A library call (cv2, PIL, torch, scipy, ``math``...) given a traced array fails in the library's
own terms ("src is not a numpy array", "AttributeError: __array_interface__", "expected
np.ndarray (got Sym)"); :func:`outside_numpy` finds the call from the traceback and names it, so
that the refusal says what the user wrote and why it cannot be lowered. A numpy function the
tracer has no lowering for is named the same way.
"""

from __future__ import annotations

import dis
import re
import types
from typing import Any

import numpy as np

from augment_ops.trace.frames import (
    _DOTTED,
    _instruction,
    _store_target,
    note_small_store,
)
from augment_ops.trace.ir import _is_internal

#: Packages whose functions are not "outside numpy" (a failure inside them is the tracer's to
#: explain, or Python's own).
_NOT_LIBRARIES = ("numpy", "builtins", "augment_ops", "extsrc")


def _callee(frame: types.FrameType, lasti: int, given_traced: bool = False
            ) -> tuple[str, Any] | None:
    """The dotted name and object of the function the call at ``lasti`` of ``frame`` calls, when
    the call is written ``name(...)`` or ``module.name(...)`` and (unless ``given_traced``, known
    otherwise) its arguments name a traced value."""
    code = frame.f_code
    # the instruction running: lasti may point into the inline cache after a CALL
    ins = None
    for i in dis.get_instructions(code):
        if i.offset > lasti:
            break
        ins = i
    if ins is None or ins.opname not in ("CALL", "CALL_FUNCTION_EX", "PRECALL") or \
            ins.positions is None or ins.positions.lineno is None:
        return None
    import linecache

    pos = ins.positions
    if pos.col_offset is None or pos.end_lineno is None or pos.end_col_offset is None:
        return None
    lines = [linecache.getline(code.co_filename, k) for k in range(pos.lineno, pos.end_lineno + 1)]
    lines[-1] = lines[-1][:pos.end_col_offset]
    lines[0] = lines[0][pos.col_offset:]
    text = "".join(lines)
    m = _DOTTED.match(text)
    if m is None or not text[m.end():].lstrip().startswith("("):
        return None
    name = re.sub(r"\s+", "", m.group(0))
    head, *rest = name.split(".")
    scope = {**frame.f_builtins, **frame.f_globals, **frame.f_locals}
    if not given_traced and not _passes_traced(text, frame.f_locals):
        return None  # a call on concrete values fails as on the numpy path: its error stands
    if head not in scope:
        return None
    obj = scope[head]
    for part in rest:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return name, obj


def _passes_traced(call: str, names: dict[str, Any]) -> bool:
    """Whether the arguments of call expression ``call`` name a local variable holding a traced
    value (or a list, tuple or dict of them)."""
    import ast

    from augment_ops.trace.sym import Sym

    try:
        tree = ast.parse("(" + call.strip() + ")", mode="eval").body
    except SyntaxError:
        return False
    if not isinstance(tree, ast.Call):
        return False

    def traced(v: Any) -> bool:
        if type(v) is Sym:
            return True
        if isinstance(v, (list, tuple)):
            return any(type(x) is Sym for x in v)
        return isinstance(v, dict) and any(type(x) is Sym for x in v.values())

    args = [*tree.args, *(k.value for k in tree.keywords)]
    return any(isinstance(n, ast.Name) and traced(names.get(n.id))
               for a in args for n in ast.walk(a))


def _package(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0]
    mod = getattr(obj, "__module__", None)
    owner = getattr(obj, "__self__", None)
    if not isinstance(mod, str) and isinstance(owner, types.ModuleType):
        mod = owner.__name__  # a C extension's function (cv2.cvtColor) has no __module__
    if not isinstance(mod, str) and isinstance(obj, types.BuiltinFunctionType):
        return ""  # a C function that does not say whose it is: see the name it was called by
    if not isinstance(mod, str):
        mod = getattr(type(obj), "__module__", "") or ""
    return mod.split(".")[0]


def _qualified(name: str, frame: types.FrameType) -> str:
    """``cv2.cvtColor``, ``PIL.Image.fromarray``: the name as written, its first part replaced
    by the full name of the module it names."""
    head, _, rest = name.partition(".")
    scope = {**frame.f_builtins, **frame.f_globals, **frame.f_locals}
    mod = scope.get(head)
    if isinstance(mod, types.ModuleType) and rest:
        return f"{mod.__name__}.{rest}"
    return name


def _lowered_where_copied(name: str, obj: Any) -> bool:
    """Whether the numpy function ``obj`` (called as ``name``) lowers in code the tracer copies
    (``np.asarray``, ``np.array``: :data:`augment_ops.trace.creation.CREATION`)."""
    from augment_ops.trace.creation import CREATION

    short = getattr(obj, "__name__", name.rsplit(".", 1)[-1])
    return short in CREATION and obj is getattr(np, short, None)


def _copied_code(frame: types.FrameType) -> bool:
    """Whether ``frame`` runs a traced copy of a function (one that sees the traced names)."""
    from augment_ops.trace.rebind import _TracedGlobals

    return isinstance(frame.f_globals, _TracedGlobals)


def _numpy_name(name: str, obj: Any) -> str:
    """``np.ascontiguousarray``: numpy's public name of ``obj`` (not its private module's)."""
    short = getattr(obj, "__name__", name.split(".")[-1])
    import numpy as np

    return f"np.{short}" if getattr(np, short, None) is obj else name


def _raised_here(frame: types.FrameType, lasti: int) -> bool:
    code = frame.f_code.co_code
    return 0 <= lasti < len(code) and code[lasti] == dis.opmap["RAISE_VARARGS"]


def outside_numpy(e: BaseException) -> tuple[str, bool] | None:
    """The refusal's construct for an exception met calling a library outside numpy with a
    traced value (``"cv2.cvtColor is outside numpy: ..."``), or a numpy function that converts
    its argument to a concrete array (``"np.ascontiguousarray (a numpy function ...)"``), and
    whether the line inside a library where it failed is worth naming (for the numpy function,
    not for the library's own internals); ``None`` where the failure is not such a call's (the
    exception's own text says more)."""
    from augment_ops.state import library_file
    from augment_ops.trace.ir import TraceError
    from augment_ops.trace.sym import Sym

    frames = _user_frames(e)
    if getattr(e, "needs_number", None):
        # a[i] = v into a concrete array: numpy asks the value for a number
        stored = _stored_into_constant(e, *frames[-1]) if frames else None
        if stored is not None:
            return stored, False
        return _needs_number(e, e.needs_number)  # type: ignore[attr-defined]
    conversion = isinstance(e, TraceError) and e.construct.startswith(
        "conversion to a concrete numpy array")
    if isinstance(e, TraceError) and not conversion:
        return None
    if not frames:
        return None
    stored = _stored_into_constant(e, *frames[-1])
    if stored is not None:
        return stored, False
    if not conversion and _raised_here(*frames[-1]):
        return _type_checked(e, frames[-1][0])
    if conversion and _instruction(*frames[-1]) == "BINARY_SUBSCR":
        return ("indexing a constant array with a traced array (a lookup table lut[img], or "
                "fancy indexing; only slices and integer indices are lowered)", False)
    for k, (frame, lasti) in enumerate(reversed(frames)):
        found = _callee(frame, lasti, conversion and k == 0)
        if found is None:
            if k == 0 and library_file(frame.f_code.co_filename):
                continue  # inside a library (PIL reading __array_interface__): its caller's call
            return None
        name, obj = found
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, np.ndarray) and not isinstance(owner, Sym):
            method = getattr(obj, "__name__", name.rsplit(".", 1)[-1])
            return (f"{name} (the method ndarray.{method} of a constant array, given a per-sample "
                    f"value: numpy converts that value to a concrete array; written as a numpy "
                    f"function, np.{method}(constant, value), or with the @ operator, the step "
                    "could lower)", False)
        package = _package(obj) or _qualified(name, frame).split(".")[0]
        if package == "builtins" and isinstance(e, TypeError) and isinstance(obj, type):
            return (f"{name}() of a traced array (Python's {name} reads the array's memory, "
                    "which exists per sample only inside the DALI pipeline); the op runs on the "
                    "numpy path", True)
        if package == "numpy":
            if not conversion or k:
                return None
            if _lowered_where_copied(name, obj) and not _copied_code(frame):
                numpy_name = _numpy_name(name, obj)
                return (f"{numpy_name} in {frame.f_code.co_qualname}(), code the tracer runs as "
                        "it is (a method of an object made before the op's call or of a class "
                        "the tracer does not copy, or the standard library's): there numpy's "
                        f"own {numpy_name} converts a traced array to a concrete one; the op "
                        f"runs on the numpy path (in the op's functions, or a method of an "
                        f"object the op makes, {numpy_name} lowers)", True)
            return (f"{_numpy_name(name, obj)} (a numpy function the tracer does not lower: it "
                    "converts its argument to a concrete array; the op runs on the numpy path)",
                    True)
        if package in _NOT_LIBRARIES or (isinstance(obj, types.FunctionType)
                                         and not library_file(obj.__code__.co_filename)):
            return None
        return (f"{_qualified(name, frame)} is outside numpy: the tracer lowers numpy code only, "
                f"and a {package} function cannot run on the per-sample values of a DALI "
                "pipeline; the op runs on the numpy path (written with numpy functions, the "
                "step could lower)", False)
    return None



def _stored_into_constant(e: BaseException, frame: types.FrameType, lasti: int) -> str | None:
    """The refusal of ``a[i] = <per-sample value>`` into a concrete numpy array ``a`` (numpy
    converts the value to a number, which fails on a traced one), or ``None``."""
    from augment_ops.trace.ir import TraceError

    cause: BaseException | None = e
    while cause is not None and not isinstance(cause, TraceError):
        cause = cause.__cause__ or cause.__context__
    if cause is None or _instruction(frame, lasti) != "STORE_SUBSCR":
        return None
    tb = e.__traceback__
    while tb is not None and tb.tb_frame is not frame:
        tb = tb.tb_next
    while tb is not None:  # a traced array's own __setitem__ explains itself
        if tb.tb_frame.f_code.co_name == "__setitem__":
            return None
        tb = tb.tb_next
    found = _store_target(frame, lasti)
    if found is None:
        return None
    text, name, target = found
    note_small_store(target)
    return (f"{text} = <a per-sample value>: a per-sample value written into a concrete numpy "
            f"array ('{name}' is a numpy array of numbers fixed at loader build, and a DALI "
            "graph cannot store a value that differs per sample in it); build the array from "
            f"its elements instead, {name} = np.array([...]) with the per-sample values "
            "in place, for the step to lower")


def _type_checked(e: BaseException, frame: types.FrameType) -> tuple[str, bool] | None:
    """The refusal of a library function that raised on its own (``raise TypeError(...)``) when
    given a traced value: its check of what it was given (``isinstance(x, Image.Image)``) fails
    on a traced image or array, which only stands in for one. ``None`` where none of its
    arguments is traced, or outside installed libraries."""
    from augment_ops.state import library_file
    from augment_ops.trace.pil_api import TracedImage
    from augment_ops.trace.sym import Sym

    code = frame.f_code
    if not library_file(code.co_filename) or _package_of(frame) in _NOT_LIBRARIES:
        return None
    count = code.co_argcount + code.co_kwonlyargcount
    given = [frame.f_locals.get(n) for n in code.co_varnames[:count]]
    given += [v for g in given if isinstance(g, (list, tuple)) for v in g]
    if any(isinstance(v, TracedImage) for v in given):
        kind = "image"
    elif any(type(v) is Sym for v in given):
        kind = "array"
    else:
        return None
    module = frame.f_globals.get("__name__", "")
    name = code.co_qualname.removesuffix(".__init__")
    return (f"{module}.{name} given a traced {kind} ({type(e).__name__}: {e}: the library checks "
            f"what it is given, and a traced {kind} only stands in for one while tracing; its "
            "code cannot run on the per-sample values of a DALI pipeline); the op runs on the "
            "numpy path (written with numpy functions on the image array, the step could "
            "lower)", True)


def _package_of(frame: types.FrameType) -> str:
    return str(frame.f_globals.get("__name__", "")).split(".")[0]


def _user_frames(e: BaseException) -> list[tuple[types.FrameType, int]]:
    """The frames of ``e``'s traceback outside the tracer, outermost first, each with the
    instruction it was running."""
    frames = []
    tb = e.__traceback__
    while tb is not None:
        if not _is_internal(tb.tb_frame.f_code.co_filename):
            frames.append((tb.tb_frame, tb.tb_lasti))
        tb = tb.tb_next
    return frames


def _needs_number(e: BaseException, kind: str) -> tuple[str, bool]:
    """The refusal of ``int()``/``float()`` of a per-sample value (``kind``) that Python's own
    built-in or a C function made: named after the call at the innermost frame outside the
    tracer."""
    frames = _user_frames(e)
    frame, lasti = frames[-1] if frames else (None, -1)
    called = _callee(frame, lasti, True) if frame is not None else None
    name = called[0] if called is not None else kind
    if frame is None or name in ("int", "float", "round"):
        where = f" in {frame.f_code.co_qualname}()" if frame is not None else ""
        return (f"{name}() of a per-sample value{where}, code the tracer runs as it is (a method "
                "of a class, or the standard library's: only functions, the op's own and those "
                "it calls, see an int() that keeps a value per sample); written as a function "
                "of the module, the step could lower", True)
    return (f"{name}() given a per-sample value: a C function, which needs a concrete number "
            f"where a DALI graph has a value per sample ({kind}() of it); written with numpy "
            "functions, the step could lower", True)
