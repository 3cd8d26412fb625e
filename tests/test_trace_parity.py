"""The traced native path agrees with the numpy path on every input, errors included.

Where the numpy function raises for a sample (``rng.integers(0, h - size)`` on an image
``size`` high, a Python number divided by 0, an output that comes out empty), a loader on the
native path raises the same kind of error, naming the op, the manifest line and the path; where
numpy returns a value (integer ``//`` and ``%`` by 0, float division by 0, a 2-D mask written
into an HWC image), the traced graph returns the same value. Real CPU DALI pipelines throughout.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers import pattern_image, unregistered
from helpers import sized_dataset as _dataset
from test_trace import _emit_on

import augment_ops
import extsrc
from augment_ops.trace import trace_function, trace_op
from extsrc.errors import OpError, OpOutputError


def _first_error(manifest: Path, op, path: str, device: str = "cpu") -> Exception | None:
    with extsrc.Loader(manifest, batch_size=1, ops=[op], op_runtime=extsrc.OpRuntime(op_path=path),
                       device=device,
                       shuffle=False, workers=extsrc.Workers(num_workers=0)) as loader:
        assert loader.op_paths == {op.name: path}
        try:
            for _ in loader:
                pass
        except Exception as e:  # what the user sees, whatever its class: compared below
            return e
    return None


def _check_same_error(tmp_path: Path, op, sizes, bad: int, numpy_kind: type,
                      message: str, device: str = "cpu") -> None:
    """Both paths raise ``numpy_kind`` for the sample at 0-based position ``bad`` (manifest line
    ``bad + 2``), naming the op, the line and the file, with ``message``."""
    manifest = _dataset(tmp_path, sizes)
    errors = {path: _first_error(manifest, op, path, device) for path in ("numpy", "native")}
    for path, err in errors.items():
        assert err is not None, path
        assert isinstance(err, numpy_kind), (path, type(err), err)
        text = str(err)
        assert f"op '{op.name}'" in text, (path, text)
        assert f"line {bad + 2} " in text and f"img{bad}.png" in text, (path, text)
        assert re.search(message, text), (path, text)
    assert type(errors["native"]) is type(errors["numpy"])
    native = errors["native"]
    assert native.op == op.name and native.line == bad + 2, vars(native)
    assert native.path.endswith(f"img{bad}.png")
    assert "[native path]" in str(native)


# -- rng arguments numpy refuses -----------------------------------------------------------------
@unregistered()
def u_rows_crop(img, rng, size: int = 5):
    h = img.shape[0]
    y = rng.integers(0, h - size)
    return img[y:y + size]


@unregistered()
def u_rows_crop_from(img, rng, size: int = 5):
    h = img.shape[0]
    y = rng.integers(1, h - size + 1)
    return img[y - 1:y - 1 + size]


@unregistered()
def u_narrow_integers(img, rng):
    w = img.shape[1]
    v = rng.integers(0, w * 20, dtype=np.uint8)
    return img + v


@unregistered()
def u_uniform_span(img, rng):
    h, w = img.shape[:2]
    s = rng.uniform(h, w)
    return np.clip(img * (s / 20), 0, 255).astype(np.uint8)


@unregistered()
def u_normal_scale(img, rng):
    h = img.shape[0]
    d = rng.normal(0.0, h - 8)
    return np.clip(img + d, 0, 255).astype(np.uint8)


@unregistered()
def u_python_divide(img):
    h, w = img.shape[:2]
    k = w // (h - 7)
    return img[:, :k]


@unregistered()
def u_fold_rows(img):
    h = img.shape[0]
    return img[:h // 2 + 1] // 2 + img[h // 2:] // 2  # the same size for odd h only


@unregistered()
def u_two_rows(img):
    return np.stack([img[2], img[-3]])


@pytest.mark.parametrize(("op", "sizes", "bad", "message"), [
    (u_rows_crop, [(9, 7), (11, 13), (5, 11)], 2, r"raised ValueError: high <= 0"),
    (u_rows_crop_from, [(9, 7), (5, 13), (7, 7)], 1, r"raised ValueError: low >= high"),
    (u_narrow_integers, [(9, 7), (7, 11), (13, 15)], 2,
     r"raised ValueError: high is out of bounds for uint8"),
    (u_uniform_span, [(9, 11), (7, 7), (13, 9)], 2, r"raised ValueError: high - low < 0"),
    (u_normal_scale, [(9, 11), (11, 7), (7, 13)], 2, r"raised ValueError: scale < 0"),
    (u_python_divide, [(9, 11), (7, 13)], 1,
     r"raised ZeroDivisionError: integer division or modulo by zero"),
    (u_fold_rows, [(9, 11), (1, 7), (8, 5)], 2,
     r"raised ValueError: operands could not be broadcast together"),
    (u_two_rows, [(9, 11), (3, 7), (2, 5)], 2,
     r"raised IndexError: index 2 is out of bounds for axis 0"),
], ids=["integers-high<=0", "integers-low>=high", "integers-dtype", "uniform", "normal",
        "python-divide", "broadcast", "index"])
def test_native_path_raises_what_numpy_raises_naming_the_sample(tmp_path, op, sizes, bad,
                                                                message):
    assert augment_ops.explain(op) == "native (traced)"
    assert trace_op(op).guards, "the trace records where numpy raises"
    _check_same_error(tmp_path, op, sizes, bad, OpError, message)


@pytest.mark.gpu
def test_native_path_on_gpu_raises_what_numpy_raises(tmp_path):
    _check_same_error(tmp_path, u_rows_crop, [(9, 7), (5, 11)], 1, OpError,
                      r"raised ValueError: high <= 0", device="cuda")


@unregistered()
def u_rows_crop_guarded(img, rng, size: int = 5):
    h = img.shape[0]
    if h > size:
        y = rng.integers(0, h - size)
    else:
        y = 0
    return img[y:y + size]


def test_a_check_on_a_branch_not_taken_does_not_raise(tmp_path):
    """``rng.integers(0, h - size)`` under ``if h > size``: an image ``size`` high takes the
    other branch, on which numpy raises nothing, and neither does the native path."""
    manifest = _dataset(tmp_path, [(5, 9), (9, 7), (5, 5)])
    assert _first_error(manifest, u_rows_crop_guarded, "native") is None
    with extsrc.Loader(manifest, batch_size=1, ops=[u_rows_crop_guarded],
                       op_runtime=extsrc.OpRuntime(op_path="native"),
                       device="cpu", shuffle=False,
                       workers=extsrc.Workers(num_workers=0)) as loader:
        batches = list(loader)
    for k in (0, 2):
        np.testing.assert_array_equal(batches[k]["u_rows_crop_guarded_0"][0].numpy(),
                                      pattern_image(k, 5, 9 if k == 0 else 5))


def test_checks_the_tracer_can_rule_out_take_no_operators():
    """``rng.integers(0, h)`` and ``rng.uniform(0, w)`` cannot fail, nor can ``np.uint8`` of a
    draw below 200 (numpy 2 raises out of 0..255, and for NaN), nor a crop of ``min(size, h)``
    rows come out empty: no guard, no output check, no operator per batch."""
    from augment_ops.lower_dali import check_layout

    @unregistered()
    def u_safe_draws(img, rng):
        h, w = img.shape[:2]
        y, x = rng.integers(0, h), rng.integers(0, w)
        s = rng.uniform(0, w) * 0 + rng.uniform(0, 200)
        return img[y:, x:] + np.uint8(s)

    assert trace_op(u_safe_draws).guards == ()
    traced = trace_op(augment_ops.get("random_crop").with_params(size=7))
    assert traced.guards == () and check_layout(traced).outputs == ()


def test_constant_arguments_numpy_refuses_keep_the_op_on_the_numpy_path():
    @unregistered()
    def u_empty_choice(img, rng):
        return img + np.uint8(rng.choice([]))

    @unregistered()
    def u_bad_p(img, rng):
        return img + np.uint8(rng.choice(3, p=[0.5, 0.5, 0.5]))

    assert re.match(r"numpy: ValueError: a cannot be empty", augment_ops.explain(u_empty_choice))
    assert re.match(r"numpy: ValueError: Probabilities do not sum to 1",
                    augment_ops.explain(u_bad_p))


# -- outputs that come out empty -----------------------------------------------------------------
@unregistered()
def u_top_rows(img):
    h = img.shape[0]
    return img[:h - 7]


@unregistered(num_outputs=2)
def u_split_at(img, rng):
    w = img.shape[1]
    x = w - 1 - rng.integers(0, max(w - 1, 1))  # 1..w-1, but 0 on an image 1 pixel wide
    return img[:, :x], img[:, x:]


def test_native_path_refuses_an_empty_output_as_numpy_does(tmp_path):
    _check_same_error(tmp_path, u_top_rows, [(9, 11), (8, 5), (7, 13)], 2, OpOutputError,
                      r"output 0 is empty \(shape \(0, 13, 3\)\); an image output needs at "
                      r"least one pixel")


def test_native_path_refuses_a_random_empty_output_as_numpy_does(tmp_path):
    """``img[:, :x]`` is empty on an image one pixel wide (``x`` is 0 there) only."""
    _check_same_error(tmp_path, u_split_at, [(9, 11), (7, 1)], 1, OpOutputError,
                      r"output 0 is empty \(shape \(7, 0, 3\)\)")


def _columns_op(k):
    @unregistered(num_outputs=k)
    def u_columns(img):
        w = img.shape[1]
        return tuple(img[:, :w // j] for j in range(2, k + 2))  # empty where w < j
    return u_columns


def _check_operator_kinds(op):
    """The operators of ``op``'s traced graph with its per-sample check, by kind."""
    from collections import Counter

    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    from augment_ops.lower_dali import emit

    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        img = fn.external_source(source=lambda: [np.zeros((4, 9, 3), np.uint8)] * 2, batch=True,
                                 layout="HWC")
        info = fn.external_source(source=lambda: [np.zeros(3, np.int64)] * 2, batch=True)
        pipe.set_outputs(*emit(trace_op(op), img, info=info, check=lambda rows, infos: rows))
    pipe.build()
    return Counter(type(o._op).__name__ for o in pipe._ops if o._op is not None)


def test_the_check_of_many_output_sizes_takes_a_fixed_number_of_operators():
    """Each output of ``img[:, :w // j]`` adds its own division and slice; the check of all
    their sizes stays one stack, one reduction and one comparison, whatever their number."""
    two, six = _check_operator_kinds(_columns_op(2)), _check_operator_kinds(_columns_op(6))
    assert six["_ArithmeticGenericOp"] - two["_ArithmeticGenericOp"] == 4  # w // 4 ... w // 7
    for kind in ("Min", "Stack", "Constant", "Split", "Merge", "PythonFunction"):
        assert six[kind] == two[kind], kind


# -- values numpy returns where DALI raised --------------------------------------------------------
INT_TYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64]


def _division_program(dt, name):
    def program(img):
        x = img.astype(dt) - dt(100)  # negative and wrapped-around values
        x[0:1] = np.iinfo(dt).min  # the most negative value over -1 traps in hardware
        y = (img % 5).astype(dt) - dt(2)  # -2, -1, 0, 1, 2
        return x // y if name == "floordiv" else x % y
    return program


@pytest.mark.parametrize("dt", INT_TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", ["floordiv", "mod"])
def test_integer_division_by_zero_and_minus_one_equals_numpy(dt, name):
    program = _division_program(dt, name)
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (5, 3)])]
    with np.errstate(all="ignore"):
        refs = [program(im) for im in imgs]
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=dt, ndim=3)
    for got, ref, im in zip(_emit_on(traced, imgs), refs, imgs, strict=True):
        assert ((im % 5) == 2).any() and ((im % 5) == 1).any()  # y takes 0 and -1
        np.testing.assert_array_equal(got, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [np.uint8, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_integer_division_by_zero_on_gpu_equals_numpy(dt):
    program = _division_program(dt, "floordiv")
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (5, 3)])]
    with np.errstate(all="ignore"):
        refs = [program(im) for im in imgs]
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=dt, ndim=3)
    for got, ref in zip(_emit_on(traced, imgs, gpu=True), refs, strict=True):
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("divisor", [0, -1])
@pytest.mark.parametrize("name", ["floordiv", "mod"])
def test_integer_division_by_a_constant_zero_or_minus_one_equals_numpy(divisor, name):
    def program(img):
        x = img.astype(np.int32) - 128
        x[0:1] = np.iinfo(np.int32).min
        d = np.int32(divisor)
        return x // d if name == "floordiv" else x % d

    imgs = [pattern_image(3, 9, 5)]
    with np.errstate(all="ignore"):
        ref = program(imgs[0])
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=np.int32,
                            ndim=3)
    np.testing.assert_array_equal(_emit_on(traced, imgs)[0], ref)


def test_float_division_by_zero_gives_inf_and_nan_as_numpy():
    def program(img):
        y = (img % 3).astype(np.float32) - 1  # -1, 0, 1
        return (img.astype(np.float32) - 128) / y

    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (11, 5)])]
    with np.errstate(all="ignore"):
        refs = [program(im) for im in imgs]
    assert np.isinf(refs[0]).any()
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=np.float32,
                            ndim=3)
    for got, ref in zip(_emit_on(traced, imgs), refs, strict=True):
        np.testing.assert_array_equal(got, ref)


# -- boolean masks of lower rank -----------------------------------------------------------------
@unregistered()
def u_mask_pixels(img):
    out = img.copy()
    out[img[..., 0] > 128] = 0
    return out


@unregistered()
def u_mask_rows(img):
    out = img.astype(np.int16)
    out[(img[:, 0, 1] > 100)] = -1
    return out.astype(np.uint8)


@pytest.mark.parametrize("op", [u_mask_pixels, u_mask_rows], ids=lambda op: op.name)
def test_a_mask_of_lower_rank_selects_whole_pixels_as_numpy(op):
    assert augment_ops.explain(op) == "native (traced)"
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (13, 5)])]
    refs = [op.apply(im)[0] for im in imgs]
    for got, ref in zip(_emit_on(trace_op(op), imgs), refs, strict=True):
        np.testing.assert_array_equal(got, ref)


def test_a_mask_of_another_shape_is_refused_at_trace_time():
    @unregistered()
    def u_mask_shifted(img):
        out = img.copy()
        out[img[1:, :, 0] > 128] = 0
        return out

    assert re.match(r"numpy: a boolean index whose axis 0 may differ in length",
                    augment_ops.explain(u_mask_shifted))


# -- dtypes no path can deliver --------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.uint16, np.uint32, np.uint64], ids=lambda d: np.dtype(d).name)
def test_a_loader_refuses_an_op_whose_dtype_torch_cannot_take(tmp_path, dt):
    """DALI computes in these dtypes (the op traces), but its torch bridge has none of them, so
    every path failed at the first batch naming only the type: the loader refuses the op when
    it is built, naming it and what to return instead."""
    @unregistered(dtype=dt)
    def u_wide(img):
        return img.astype(dt) * dt(300)

    assert augment_ops.explain(u_wide) == "native (traced)"
    manifest = _dataset(tmp_path, [(9, 7)])
    for path in ("numpy", "native"):
        with pytest.raises(ValueError, match=rf"op 'u_wide' declares dtype={np.dtype(dt)}, which "
                           r"DALI cannot hand to torch .* out.astype\(np.int32\)"):
            extsrc.Loader(manifest, batch_size=1, ops=[u_wide],
                          op_runtime=extsrc.OpRuntime(op_path=path), device="cpu")


def test_a_wide_signed_dtype_passes_through_both_paths_alike(tmp_path):
    @unregistered(dtype=np.int64)
    def u_wide_signed(img):
        return img.astype(np.int64) * 70000 - 5

    manifest = _dataset(tmp_path, [(9, 7), (5, 11)])
    got = {}
    for path in ("numpy", "native"):
        with extsrc.Loader(manifest, batch_size=1, ops=[u_wide_signed],
                           op_runtime=extsrc.OpRuntime(op_path=path),
                           device="cpu", shuffle=False,
                           workers=extsrc.Workers(num_workers=0)) as loader:
            got[path] = [b["u_wide_signed_0"][0].numpy() for b in loader]
    for k, (a, b) in enumerate(zip(got["numpy"], got["native"], strict=True)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, u_wide_signed.apply(pattern_image(k, *a.shape[:2]))[0])
