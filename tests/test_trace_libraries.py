"""Library code an op calls, traced as the op's own: the functions of an installed library (here
a module written into a ``site-packages`` folder the tracer counts as installed) see the traced
``int``, ``float``, ``round``, ``math`` and ``np``, through decorators and module attributes; a
library's ``raise`` on a per-sample branch is a run-time check (none where no sample takes it);
what stays impossible is refused naming the construct. Each lowered op is run by a real CPU DALI
pipeline and compared with numpy exactly."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest
from helpers import pattern_image
from PIL import Image, ImageStat
from test_trace import _emit_on
from test_trace_arrays import _check, _refused

from augment_ops import state
from augment_ops.trace import TraceError, trace_function

#: An installed library's functions: sizes from int()/float()/round()/math of per-sample values,
#: a decorator as albucore writes them, a check that raises on some images and one that no image
#: reaches, a class whose objects the op makes, and what the tracer cannot follow (a method of an
#: object made at import, libm's exp, a per-sample loop count).
LIBRARY = '''
import abc
import functools
import math

import numpy as np
from numpy import asarray


def centre_box(h, w, frac):
    ch = int(h * frac)
    cw = int(math.sqrt(w * w * frac * frac))
    top = int((h - ch) / 2.0)
    left = round(float(w - cw) / 2)
    return max(top, 0), max(left, 0), max(ch, 1), max(cw, 1)


def keeps_dtype(func):
    @functools.wraps(func)
    def wrapped(img, *args, **kwargs):
        out = func(img, *args, **kwargs)
        return np.clip(out, 0, 255).astype(img.dtype)
    return wrapped


@keeps_dtype
def brighten(img, amount):
    return img.astype(np.int16) + int(math.floor(amount * img.shape[0]))


def rows(img, count):
    h = img.shape[0]
    if h < count:
        raise ValueError(f"need {count} rows")
    return img[:count]


def centre_crop(img, size):
    x_min = (img.shape[1] - size) // 2
    x_max = x_min + size
    if not x_min < x_max:
        raise ValueError("x_min < x_max")
    return img[:, max(x_min, 0):x_max]


class Box:
    def top(self, h):
        return int(h / 3)


BOX = Box()  # made at import: its methods run as they are


class Transform(abc.ABC):
    @abc.abstractmethod
    def __call__(self, img): ...

    @staticmethod
    def as_float(img):
        return asarray(img, dtype=np.float32)


class Shift(Transform):
    def __init__(self, offset):
        self.offset = offset

    @property
    def rows(self):
        return int(self.offset) // 8

    @classmethod
    def of(cls, offset):
        return cls(offset)

    def __call__(self, img):
        x = self.as_float(img) + float(self.offset)
        return np.asarray(np.clip(x, 0, 255), dtype=img.dtype)[self.rows:]


class FlippedShift(Shift):
    def __call__(self, img):
        return super().__call__(img)[::-1]


def shrink(h):
    return math.exp(h / 100.0)


def repeat(img, n):
    for _ in range(n):
        img = img[1:]
    return img


def spectrum(img):
    return np.fft.fft(img).real
'''


@pytest.fixture
def lib(tmp_path, monkeypatch):
    """The module ``LIBRARY`` as an installed library: a folder on ``sys.path`` where pip's
    record of it (``tracedlib-1.0.dist-info``) lists its file, as ``pip install --target``
    leaves it, so :func:`augment_ops.libfiles.library_file` counts it as a library's."""
    where = tmp_path / "target"
    where.mkdir()
    (where / "tracedlib.py").write_text(textwrap.dedent(LIBRARY))
    info = where / "tracedlib-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tracedlib\nVersion: 1.0\n")
    (info / "RECORD").write_text("tracedlib.py,,\ntracedlib-1.0.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(where))
    sys.modules.pop("tracedlib", None)
    module = importlib.import_module("tracedlib")
    assert state.library_file(module.__file__)
    yield module
    sys.modules.pop("tracedlib", None)


def _trace(fn, random: bool = False):
    return trace_function(fn, params={}, random=random, num_outputs=1, dtype=np.uint8, ndim=3)


def test_a_library_helper_computes_sizes_with_int_float_round_and_math(lib):
    def op(img, frac: float = 0.6):
        top, left, ch, cw = lib.centre_box(img.shape[0], img.shape[1], frac)
        return img[top:top + ch, left:left + cw]

    _check(op)
    _check(op, frac=0.35)


def test_a_decorated_library_function_sees_the_traced_names(lib):
    def op(img, amount: float = 1.7):
        return lib.brighten(img, amount)

    _check(op)


def test_a_library_class_the_op_makes_runs_its_methods_as_traced_copies(lib):
    # MONAI's transforms: an object made in the op's call, whose methods (through super(), a
    # property, a static and a class method of an abstract base) convert with np.asarray and
    # int() and float() of a draw
    def op(img, rng):
        t = lib.FlippedShift.of(rng.uniform(0.0, 40.0))
        if not isinstance(t, lib.Transform) or type(t) is not lib.FlippedShift:
            return img
        return t(img)

    _check(op, random=True)


class _Base:
    def apply(self, img):
        return np.asarray(img[::-1], dtype=np.int16)


class _Plus(_Base):
    def apply(self, img):
        return super().apply(img) + int(img.shape[0] / 3)


class _Twice(_Base):
    def apply(self, img):
        return super().apply(img) * 2


class _Both(_Plus, _Twice):
    def apply(self, img):
        return super().apply(img) - 3


def test_super_through_a_diamond_of_copied_classes_follows_the_real_order():
    def op(img):
        return _Both().apply(img)

    assert [k.__name__ for k in _Both.__mro__] == ["_Both", "_Plus", "_Twice", "_Base", "object"]
    _check(op)


def test_a_library_class_copy_stands_in_for_the_class_in_comparisons(lib):
    def op(img):
        made = lib.Box()
        kinds = {lib.Box: 1}
        if isinstance(lib.BOX, lib.Box) and issubclass(type(made), lib.Box) and \
                kinds[type(made)] == 1 and type(lib.BOX) == lib.Box:  # noqa: E721 (== itself)
            return img[::-1]
        return img

    _check(op)
    assert not lib.Shift.__abstractmethods__ and lib.Transform.__abstractmethods__


def test_a_library_raise_on_some_images_is_a_check_and_equals_numpy_elsewhere(lib):
    def op(img):
        return lib.rows(img, 4)

    traced = _trace(op)
    assert [(g.error, g.message) for g in traced.guards] == [("ValueError", "need 4 rows")]
    assert traced.guards[0].location.endswith("return lib.rows(img, 4)")
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(4, 6), (9, 2), (5, 5)])]
    for img, got in zip(imgs, _emit_on(traced, imgs), strict=True):
        np.testing.assert_array_equal(got, op(img))
    with pytest.raises(ValueError, match="need 4 rows"):
        op(pattern_image(0, 3, 3))  # numpy raises where the check does


def test_a_library_raise_no_image_reaches_costs_nothing(lib):
    def op(img):
        return lib.centre_crop(img, 3)

    traced = _trace(op)
    assert traced.guards == () and traced.num_paths == 1
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(4, 6), (3, 3), (5, 8)])]
    for img, got in zip(imgs, _emit_on(traced, imgs), strict=True):
        np.testing.assert_array_equal(got, op(img))


def test_a_branch_no_image_takes_is_not_traced():
    def op(img):
        if img.size == 0:  # every image has a pixel
            return img[:, :0]
        return img[::-1]

    assert _trace(op).num_paths == 1
    _check(op)


def test_a_library_type_check_failing_on_a_traced_image_names_the_library_function():
    def op(img):
        pil = Image.fromarray(img)  # statistics under a mask: PIL's own code, which checks
        return img + int(ImageStat.Stat(pil, pil.convert("L")).mean[0])  # its argument's type

    _refused(op, r"^PIL\.ImageStat\.Stat given a traced image \(TypeError: first argument must "
                 r"be image or list: .* at \S+test_trace_libraries\.py:\d+: return img \+ int")


@pytest.mark.parametrize(("body", "match"), [
    ("img[:lib.BOX.top(img.shape[0])]",
     r"^int\(\) of a per-sample value in Box\.top\(\), code the tracer runs as it is \(a method"),
    ("img[:int(lib.shrink(img.shape[0]))]",
     r"^math\.exp of a per-sample value \(the C library's exp and numpy's may differ"),
    ("lib.repeat(img, img.shape[0] // 2)",
     r"^range\(\) of a per-sample count the tracer cannot bound by 16 .*, inside \S+tracedlib"
     r"\.py:\d+: for _ in range\(n\):"),
], ids=["method-of-an-object-made-at-import", "libm-exp", "loop-count"])
def test_what_library_code_cannot_do_on_a_per_sample_value_is_refused_by_name(lib, body, match):
    scope = {"lib": lib}
    exec(f"def op(img):\n    return {body}\n", scope)
    with pytest.raises(TraceError, match=match) as e:
        _trace(scope["op"])
    assert "0x" not in str(e.value) and "Node" not in str(e.value), str(e.value)


def test_a_numpy_function_refused_inside_a_library_names_the_librarys_line(lib):
    def op(img):
        return lib.spectrum(img)

    _refused(op, r"^np\.fft\.fft \(not among the numpy functions and methods the tracer "
                 r"lowers\), inside \S+tracedlib\.py:\d+: return np\.fft\.fft\(img\)"
                 r"\.real at \S+test_trace_libraries\.py:\d+: return lib\.spectrum\(img\)")


def test_math_sqrt_of_a_negative_per_sample_value_raises_as_math_does():
    import math

    def op(img):
        return img[:int(math.sqrt(img.shape[0] - 4)) + 1]

    traced = _trace(op)
    assert [(g.error, g.message) for g in traced.guards] == [("ValueError", "math domain error")]
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(4, 6), (13, 2), (29, 5)])]
    for img, got in zip(imgs, _emit_on(traced, imgs), strict=True):
        np.testing.assert_array_equal(got, op(img))
    with pytest.raises(ValueError, match="math domain error"):
        op(pattern_image(0, 3, 3))  # numpy's path raises where the check does
