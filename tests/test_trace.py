"""Traced native paths: users' numpy ops lowered to DALI operators by ``augment_ops.trace``.

Every check runs real DALI pipelines on the CPU. Deterministic traced ops must equal the numpy
reference exactly; random ones must equal the numpy function run with ``counter_rng`` (the same
counter-based draws, replayed on numpy), follow the same distributions as the numpy path, and be
reproducible across worker counts. Untraceable ops fall back to numpy with a reason naming the
construct and the source line.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    pattern_image,
    run_traced,
    scalar_draws,
    sized_dataset,
    traced_pipeline,
    unregistered,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import augment_ops
import extsrc
from augment_ops.lower_dali import emit
from augment_ops.trace import TraceError, trace_function
from extsrc.ops_runtime.seeding import counter_rng, counter_uniform, name_salt

SEED = 3



# -- users' ops, written as users write them --------------------------------------------------
@unregistered(num_outputs=3)
def u_strips(img):
    w = img.shape[1]
    t = w // 3
    return img[:, :t], img[:, t:2 * t], img[:, 2 * t:]


@unregistered()
def u_flip_both(img):
    return img[::-1, ::-1]


@unregistered()
def u_channel_flip(img):
    return img[..., ::-1]


@unregistered()
def u_gray_weighted(img):
    y = img[..., 0] * 0.299 + img[..., 1] * 0.587 + img[..., 2] * 0.114
    g = np.rint(y).astype(np.uint8)
    return np.stack([g, g, g], axis=-1)


@unregistered()
def u_brightness_contrast(img, rng, b: float = 0.2, c: float = 0.3):
    alpha = rng.uniform(1 - c, 1 + c)
    beta = rng.uniform(-b, b) * 255
    out = img.astype(np.float32) * alpha + beta
    return np.clip(out, 0, 255).astype(np.uint8)


@unregistered()
def u_cutout(img, rng, size: int = 8):
    h, w = img.shape[:2]
    y = int(rng.integers(0, h))
    x = int(rng.integers(0, w))
    out = img.copy()
    out[max(0, y - size // 2):y + size // 2, max(0, x - size // 2):x + size // 2] = 0
    return out


@unregistered()
def u_portrait(img):
    h, w = img.shape[:2]
    if h < w:
        return np.rot90(img)
    return img


@unregistered()
def u_invert_sometimes(img, rng, p: float = 0.5):
    if rng.random() < p:
        return 255 - img
    return img


@unregistered()
def u_wrap_offset(img, rng):
    off = rng.choice([0, 100, 200])
    return img + np.uint8(off)


@unregistered()
def u_noise_brightness(img, rng):
    d = rng.normal(0.0, 20.0)
    return np.clip(img + d, 0, 255).astype(np.uint8)


@unregistered()
def u_random_rot90(img, rng):
    return np.rot90(img, rng.integers(0, 4))


@unregistered()
def u_mean_contrast(img):
    m = img.mean()
    out = (img.astype(np.float32) - m) * 1.5 + m
    return np.clip(out, 0, 255).astype(np.uint8)


ROT = [augment_ops.get("rot90").with_params(k=k) for k in range(4)]
CROPS = [augment_ops.get(n).with_params(size=s) for n in ("center_crop", "random_crop")
         for s in (5, 16, 100)]
USER_OPS = [u_strips, u_flip_both, u_channel_flip, u_gray_weighted, u_brightness_contrast,
            u_cutout, u_portrait, u_invert_sometimes, u_wrap_offset, u_noise_brightness,
            u_mean_contrast, u_random_rot90]


SIZES = [(33, 47), (47, 33), (20, 20), (35, 21), (9, 40), (41, 13)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Landscape, portrait and square PNGs of odd and even sizes (batches of one: sizes differ)."""
    return sized_dataset(tmp_path_factory.mktemp("trace"), SIZES)


def _pixels(manifest_path: Path) -> list[np.ndarray]:
    from PIL import Image

    m = extsrc.read_manifest(manifest_path)
    return [np.asarray(Image.open(p).convert("RGB")) for p in m.paths]


def _run_native(dataset: Path, ops, *, transforms=(), epochs: int = 2, workers: int = 0,
                device: str = "cpu"):
    """Batches of a loader running every op on its native path, with the epoch of each."""
    with extsrc.Loader(dataset, batch_size=1, ops=ops, transforms=transforms,
                       op_runtime=extsrc.OpRuntime(op_path="native"), device=device, seed=SEED,
                       shuffle=True,
                       workers=extsrc.Workers(num_workers=workers)) as loader:
        assert set(loader.op_paths.values()) == {"native"}
        out = []
        for _ in range(epochs):
            epoch = loader.epoch
            out += [(epoch, {k: v.cpu().clone() for k, v in b.items()}) for b in loader]
    return out


def _reference(op, img, epoch, index):
    rng = counter_rng(SEED, epoch, index, name_salt(op.name)) if op.random else None
    return op.apply(img, rng)


GROUPS = [USER_OPS[:6], USER_OPS[6:], ROT, CROPS]
GROUP_IDS = ["user-a", "user-b", "rot90", "crops"]


@pytest.mark.slow
@pytest.mark.parametrize("group", GROUPS, ids=GROUP_IDS)
def test_traced_ops_equal_numpy_reference_through_a_loader(dataset, group):
    _check_group(dataset, group, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("group", GROUPS, ids=GROUP_IDS)
def test_traced_ops_on_gpu_equal_numpy_reference_through_a_loader(dataset, group):
    _check_group(dataset, group, "cuda")


def _check_group(dataset, group, device):
    if group is ROT or group is CROPS:  # variants of one op: one loader each (names collide)
        runs = [[op] for op in group]
    else:
        runs = [group]
    pixels = _pixels(dataset)
    for ops in runs:
        seen = 0
        for epoch, batch in _run_native(dataset, ops, device=device):
            for k, index in enumerate(batch["index"].tolist()):
                for op in ops:
                    refs = _reference(op, pixels[index], epoch, index)
                    for j, ref in enumerate(refs):
                        got = batch[f"{op.name}_{j}"][k].numpy()
                        assert got.shape == ref.shape, (op.name, j, index)
                        diff = np.abs(got.astype(np.int32) - ref.astype(np.int32)).max()
                        assert diff <= op.tolerance, (op.name, dict(op.params), j, index, diff)
                seen += 1
        assert seen == 2 * len(pixels)


@pytest.mark.slow
def test_two_traced_ops_chained(dataset):
    crop = augment_ops.get("random_crop").with_params(size=20)
    pixels = _pixels(dataset)
    for epoch, batch in _run_native(dataset, [u_strips], transforms=[crop], epochs=1):
        for k, index in enumerate(batch["index"].tolist()):
            (cropped,) = _reference(crop, pixels[index], epoch, index)
            np.testing.assert_array_equal(batch["image"][k].numpy(), cropped)
            for j, ref in enumerate(u_strips.apply(cropped)):
                np.testing.assert_array_equal(batch[f"u_strips_{j}"][k].numpy(), ref)


# -- random traced ops: reproducible, within the reference's support, same statistics ----------
RANDOM = [u_brightness_contrast, u_cutout, u_invert_sometimes, u_random_rot90,
          augment_ops.get("random_crop").with_params(size=16)]


@pytest.mark.slow
def test_random_traced_ops_reproducible_across_workers_and_vary_by_epoch(dataset):
    a = _run_native(dataset, RANDOM, epochs=2, workers=0)
    b = _run_native(dataset, RANDOM, epochs=2, workers=2)
    assert len(a) == len(b)
    for (ea, ba), (eb, bb) in zip(a, b, strict=True):
        assert ea == eb and ba.keys() == bb.keys()
        for key in ba:
            assert ba[key].equal(bb[key]), key
    # Epoch 1 differs from epoch 0 for each op, sample by sample.
    by_epoch: dict[int, dict[int, dict[str, np.ndarray]]] = {0: {}, 1: {}}
    for epoch, batch in a:
        for k, index in enumerate(batch["index"].tolist()):
            by_epoch[epoch][index] = {n: batch[n][k].numpy() for n in batch if n.endswith("_0")}
    for name in (f"{op.name}_0" for op in RANDOM):
        assert any(not np.array_equal(by_epoch[0][i][name], by_epoch[1][i][name])
                   for i in by_epoch[0]), name


def test_counter_uniform_is_uniform_and_keyed_by_every_input():
    idx = np.arange(20000)
    u = counter_uniform(SEED, 0, idx, 7, 0)
    assert u.min() >= 0.0 and u.max() < 1.0
    # Mean 1/2 and variance 1/12, within 5 standard errors.
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / len(u))
    assert abs(u.var() - 1 / 12) < 5 * 0.0745 / np.sqrt(len(u))
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / np.sqrt(len(u))
    for other in (counter_uniform(SEED + 1, 0, idx, 7, 0), counter_uniform(SEED, 1, idx, 7, 0),
                  counter_uniform(SEED, 0, idx, 8, 0), counter_uniform(SEED, 0, idx, 7, 1),
                  counter_uniform(SEED, 0, idx + 1, 7, 0)):
        assert np.mean(other == u) < 1e-3


@pytest.mark.parametrize("op", [u_brightness_contrast, u_cutout, u_invert_sometimes,
                                u_wrap_offset, u_noise_brightness, u_random_rot90,
                                augment_ops.get("random_crop").with_params(size=5)],
                         ids=lambda op: op.name)
def test_random_traced_draws_match_numpy_generator_statistics(op):
    """The mean output pixel over many samples: counter draws (the traced path's, replayed on
    numpy: exact, see the loader tests) against numpy's generator (the numpy path). Both must lie
    within 5 standard errors of each other; every counter-draw output must also be one the
    numpy path can produce (same shape set, values in the reference's range)."""
    img = np.random.default_rng(0).integers(0, 256, (9, 11, 3), dtype=np.uint8)
    n = 1500
    ours = [op.apply(img, counter_rng(SEED, 0, i, 5))[0] for i in range(n)]
    theirs = [op.apply(img, np.random.default_rng([SEED, i]))[0] for i in range(n)]
    a = np.array([o.astype(np.float64).mean() for o in ours])
    b = np.array([o.astype(np.float64).mean() for o in theirs])
    se = np.sqrt(a.var() / n + b.var() / n) + 1e-9
    assert abs(a.mean() - b.mean()) < 5 * se, (a.mean(), b.mean(), se)
    assert {o.shape for o in ours} <= {o.shape for o in theirs} | {ours[0].shape}
    lo = min(o.min() for o in theirs)
    hi = max(o.max() for o in theirs)
    assert all(lo <= o.min() and o.max() <= hi for o in ours)


# -- fallback with a reason ---------------------------------------------------------------------
class _CStyleLibrary:
    """A method of a class with ``__slots__``, which the tracer runs as it is (with numpy's own
    np.asarray), unlike a function of the module or a method of a plain class (a copy of a
    class with slots would be a subclass whose objects have a ``__dict__`` they lack)."""

    __slots__ = ()

    @staticmethod
    def blur(a):
        arr = np.asarray(a)  # what C-extension libraries (cv2, PIL, scipy) do with their input
        return arr


@unregistered()
def u_uses_library(img):
    return _CStyleLibrary.blur(img)


@unregistered()
def u_pixel_branch(img):
    if img.mean() > 100:
        return img[::-1]
    return img


@unregistered()
def u_pixel_loop(img):
    while img.mean() > 100:
        img = img // 2
    return img


@unregistered()
def u_fft(img):
    return np.abs(np.fft.fft2(img, axes=(0, 1))).astype(np.uint8)


@unregistered()
def u_global_random(img):
    if np.random.rand() < 0.5:  # noqa: NPY002 (what the tracer must refuse)
        return img[::-1]
    return img


@unregistered()
def u_stride2(img):
    return img[::2]


@unregistered()
def u_writes_input(img):
    img[:2] = 0
    return img


@pytest.mark.parametrize(("op", "construct", "line"), [
    (u_uses_library, r"np.asarray in _CStyleLibrary.blur\(\), code the tracer runs as it is "
                     r"\(a method of an object made before the op's call or of a class the "
                     r"tracer does not copy", r"arr = np.asarray\(a\)"),
    (u_pixel_loop, r"Python control flow \(if/while/and/or\) on pixel values",
     r"while img.mean\(\) > 100:"),
    (u_fft, r"np.fft.fft2", r"return np.abs\(np.fft.fft2"),
    (u_global_random, r"np.random.rand \(global random state", r"if np.random.rand\(\)"),
    (u_stride2, r"a slice step of 2", r"return img\[::2\]"),
    (u_writes_input, r"a write into the input image", r"img\[:2\] = 0"),
], ids=["library", "pixel-loop", "fft", "global-random", "stride-2", "writes-input"])
def test_untraceable_ops_fall_back_to_numpy_naming_construct_and_line(op, construct, line):
    why = augment_ops.explain(op)
    assert re.fullmatch(rf"numpy: {construct}.* at \S+test_trace.py:\d+: {line}.*", why), why
    assert augment_ops.available_paths(op) == ("numpy",)
    from extsrc.ops_runtime.paths import choose_paths

    assert choose_paths([op], gpu=False) == {op.name: "numpy"}
    with pytest.raises(ValueError, match=re.escape(why)):
        choose_paths([op], gpu=False, override="native")


def test_explain_names_traced_and_hand_written_paths():
    assert augment_ops.explain("grid2x2") == "native (traced)"
    assert augment_ops.explain(u_cutout) == "native (traced)"

    @unregistered()
    def u_hand(img):
        return np.asarray(img)

    u_hand.implement("native")(lambda img: img)
    assert augment_ops.explain(u_hand) == "native (hand-written)"


def test_trace_is_cached_per_variant():
    from augment_ops.trace import trace_op

    crop = augment_ops.get("center_crop")
    assert trace_op(crop) is trace_op(crop)
    assert trace_op(crop.with_params(size=3)) is not trace_op(crop)


# -- paths agree on which inputs are valid; ops cannot write into their input ------------------
@pytest.mark.slow
def test_native_path_refuses_images_below_min_size(tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((1, 9, 3), np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(np.zeros((6, 9, 3), np.uint8)).save(tmp_path / "b.png")
    (tmp_path / "m.csv").write_text("path,label\na.png,0\nb.png,1\n")
    for path in ("native", "numpy"):
        with extsrc.Loader(tmp_path / "m.csv", batch_size=2, ops=["grid2x2"],
                           op_runtime=extsrc.OpRuntime(op_path=path),
                           device="cpu", shuffle=False,
                           workers=extsrc.Workers(num_workers=0)) as loader:
            with pytest.raises(Exception) as info:
                next(iter(loader))
        text = str(info.value)
        assert "op 'grid2x2' needs images of at least 2x2 pixels, got 1x9" in text, text
        assert "line 2" in text and "a.png" in text, text
        if path == "native":
            assert "[native path]" in text


def _run_checked(sizes: list[tuple[int, int]], calls: list) -> list[np.ndarray]:
    """grid2x2's traced graph, with its min_size check, on one batch of images of ``sizes``."""
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    from augment_ops.trace import trace_op

    def check(shapes, infos):
        calls.append(([tuple(int(v) for v in s[:3]) for s in shapes],
                      [int(i[0]) for i in infos]))
        raise ValueError("an image is too small")

    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate(sizes)]
    info = np.array([[10 + k, 0, 0] for k in range(len(sizes))], np.int64)
    pipe = Pipeline(batch_size=len(sizes), num_threads=1, device_id=None,
                    prefetch_queue_depth=1)
    with pipe:
        img, inf = fn.external_source(source=lambda: (imgs, info), num_outputs=2, batch=True,
                                      layout=["HWC", ""])
        pipe.set_outputs(*emit(trace_op(augment_ops.get("grid2x2")), img, info=inf,
                               check=check, min_size=2))
    pipe.build()
    outs = pipe.run()
    return [np.array(out[k]) for out in outs for k in range(len(sizes))]


def test_native_min_size_check_is_called_only_with_the_small_images():
    calls: list = []
    got = _run_checked([(5, 7), (2, 2), (9, 4)], calls)
    assert calls == []  # no image below 2x2: the check is not called
    grid = augment_ops.get("grid2x2")
    refs = [grid.apply(pattern_image(k, h, w))[j] for j in range(4)
            for k, (h, w) in enumerate([(5, 7), (2, 2), (9, 4)])]
    for g, r in zip(got, refs, strict=True):
        np.testing.assert_array_equal(g, r)
    with pytest.raises(Exception, match="an image is too small"):
        _run_checked([(5, 7), (1, 9), (6, 6)], calls)
    assert calls == [([(1, 9, 3)], [11])]  # the small image alone, with its info row


@pytest.mark.slow
def test_numpy_path_op_writing_into_its_input_is_refused(dataset):
    with extsrc.Loader(dataset, batch_size=1, ops=[u_writes_input], device="cpu",
                       shuffle=False, workers=extsrc.Workers(num_workers=0)) as loader:
        assert loader.op_paths == {"u_writes_input": "numpy"}
        with pytest.raises(Exception) as info:
            next(iter(loader))
    text = str(info.value)
    assert "op 'u_writes_input' raised ValueError: assignment destination is read-only" in text
    assert "write into a copy, out = img.copy()" in text and "line 2 (" in text


# -- random programs of the supported subset: numpy and the traced graph agree exactly ----------
DTYPES = [np.uint8, np.int16, np.int32, np.float32, np.float64]
SCALARS = st.one_of(st.integers(-3, 260), st.floats(-2.5, 300.0, allow_nan=False, width=32),
                    st.sampled_from([np.uint8(7), np.int16(-5), np.float32(1.5), np.int64(3)]))
BOUNDS = st.one_of(st.none(), st.integers(-40, 40),
                  st.sampled_from([-100, 100, "h/2", "-w/3", "max(0,h/2-9)", "h/2+9",
                                   "int(h*0.4)"]))


def _bound(b, x, axis):
    if b == "h/2":
        return x.shape[axis] // 2
    if b == "-w/3":
        return -(x.shape[axis] // 3)
    if b == "max(0,h/2-9)":  # a start clamped by the user, as cutout's
        return np.maximum(x.shape[axis] // 2 - 9, 0)
    if b == "h/2+9":  # a stop past the end for small images
        return x.shape[axis] // 2 + 9
    if b == "int(h*0.4)":  # a size times a float: float64 arithmetic on an int64
        return np.floor(x.shape[axis] * 0.4).astype(np.int64)
    return b


GRAY = np.array([0.299, 0.587, 0.114], np.float32)
GRAY.setflags(write=False)  # a constant: an op reading a writable global array does not trace


def _matmul_in_order(x, w):
    """``x.dot(w)`` as the tracer defines it: traced, the product itself; on numpy, the in-order
    weighted sum it lowers to (numpy's own ``dot`` sums in the host BLAS's order, held within the
    documented tolerance by test_dot_is_the_in_order_sum_within_tolerance_of_any_blas)."""
    if not isinstance(x, np.ndarray):
        return x.dot(w)
    rdt = np.result_type(x.dtype, w.dtype)
    xc, wc = x.astype(rdt), w.astype(rdt)
    acc = xc[..., 0] * wc[0]
    for i in range(1, len(wc)):
        acc = acc + xc[..., i] * wc[i]
    return acc


def _apply(step, x):
    kind, arg = step
    if kind == "slice":
        (a, b), (c, d), step0 = arg
        return x[_bound(a, x, 0):_bound(b, x, 0):step0, _bound(c, x, 1):_bound(d, x, 1)]
    if kind == "flip":
        return x[::-1] if arg == 0 else x[:, ::-1] if arg == 1 else x[..., ::-1]
    if kind == "transpose":
        return (x.transpose(1, 0, 2) if arg == 0 else np.swapaxes(x, 0, 1) if arg == 1
                else np.rot90(x, arg))
    if kind == "astype":
        dt = np.dtype(arg)
        if x.dtype.kind == "f" and dt.kind != "f":  # float -> int is defined only in range
            info = np.iinfo(dt)
            x = np.clip(x, info.min, info.max)
        return x.astype(dt)
    if kind == "arith":
        op, c = arg
        if op in ("//", "%") and x.dtype.kind == "f":  # float // and % are not lowered
            q = np.floor(x / c)
            return q if op == "//" else x - q * c
        return {"+": lambda: x + c, "-": lambda: x - c, "*": lambda: x * c,
                "r-": lambda: c - x, "/": lambda: x / c,
                "//": lambda: x // c, "%": lambda: x % c}[op]()
    if kind == "clip":
        return np.clip(x, *arg)
    if kind == "rint":
        return np.rint(x) if x.dtype.kind == "f" else x
    if kind == "where":
        t, c = arg
        return np.where(x > t, x, c)
    if kind == "reduce":
        how = arg
        r = (x.sum(axis=2) if how == "sum" else x.mean(axis=-1) if how == "mean"
             else x.max(axis=2) if how == "max" else _matmul_in_order(x, GRAY))
        return np.stack([r, r, r], axis=2)
    if kind == "stack":
        return (np.concatenate([x, x[:, ::-1]], axis=1) if arg == 0
                else np.stack([x[..., 2], x[..., 0], x[..., 1]], axis=-1))
    if kind == "fill":
        (a, b), (c, d), value, channel = arg
        out = x.copy()
        key = (slice(_bound(a, x, 0), _bound(b, x, 0)), slice(_bound(c, x, 1), _bound(d, x, 1)))
        out[key + ((channel,) if channel is not None and x.ndim == 3 else ())] = value
        return out
    raise AssertionError(kind)


STEPS = st.one_of(
    st.tuples(st.just("slice"), st.tuples(st.tuples(BOUNDS, BOUNDS), st.tuples(BOUNDS, BOUNDS),
                                          st.sampled_from([None, 1, -1]))),
    st.tuples(st.just("flip"), st.integers(0, 2)),
    st.tuples(st.just("transpose"), st.integers(0, 4)),
    st.tuples(st.just("astype"), st.sampled_from(DTYPES)),
    st.tuples(st.just("arith"), st.tuples(st.sampled_from(["+", "-", "*", "r-", "/"]), SCALARS)),
    st.tuples(st.just("arith"), st.tuples(st.sampled_from(["//", "%"]),
                                          st.sampled_from([3, -4, 7]))),
    st.tuples(st.just("clip"), st.tuples(st.integers(-5, 100), st.integers(100, 300))),
    st.tuples(st.just("rint"), st.just(None)),
    st.tuples(st.just("where"), st.tuples(st.integers(0, 200), SCALARS)),
    st.tuples(st.just("reduce"), st.sampled_from(["sum", "mean", "max", "gray"])),
    st.tuples(st.just("stack"), st.integers(0, 1)),
    st.tuples(st.just("fill"), st.tuples(st.tuples(BOUNDS, BOUNDS), st.tuples(BOUNDS, BOUNDS),
                                         st.sampled_from([0, 7, 200, -3, 1.5]),
                                         st.sampled_from([None, 1, slice(0, 2)]))),
)


def _numpy_or_none(program, img):
    try:
        with np.errstate(all="ignore"):
            out = program(img)
    except (OverflowError, TypeError, ValueError, ZeroDivisionError, IndexError):
        return None
    if out.size == 0 or not np.isfinite(out.astype(np.float64)).all():
        return None
    return out


def _emit_on(traced, imgs: list[np.ndarray], values=(), gpu: bool = False) -> list[np.ndarray]:
    """``traced`` run by a DALI CPU pipeline (``gpu``: on GPU 0) on ``imgs`` (one batch), each
    sample of its one output as an array; ``values``: the op's per-sample scalars
    (``SampleScalars`` arrays), in order."""
    return [out for (out,) in run_traced(traced, imgs, values, gpu=gpu)]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(STEPS, min_size=1, max_size=4),
       sizes=st.lists(st.tuples(st.integers(1, 12).map(lambda v: 2 * v + 1),
                                st.integers(1, 12).map(lambda v: 2 * v + 1)), min_size=3,
                      max_size=3),
       seed=st.integers(0, 2**16))
def test_random_programs_trace_to_the_numpy_result(steps, sizes, seed):
    from hypothesis import assume

    def program(img):
        x = img
        for s in steps:
            x = _apply(s, x)
        return x

    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    refs = [_numpy_or_none(program, im) for im in imgs]
    assume(all(r is not None for r in refs))
    assume(len({(r.dtype, r.ndim) for r in refs}) == 1)
    traced = trace_function(program, params={}, random=False, num_outputs=1,
                            dtype=refs[0].dtype, ndim=refs[0].ndim)
    outs = _emit_on(traced, imgs)
    for k, ref in enumerate(refs):
        got = outs[k]
        assert got.dtype == ref.dtype and got.shape == ref.shape, (steps, sizes[k])
        np.testing.assert_array_equal(got, ref, err_msg=f"{steps} on {sizes[k]}")


MATRIX = np.array([[0.2, -1.5], [0.7, 0.1], [0.1, 3.0]], np.float32)
MATRIX.setflags(write=False)
def _in_order(x, w, order):
    """The weighted sum of ``x``'s channels in ``order`` (one column of ``w`` per output)."""
    cols = [w] if w.ndim == 1 else [w[:, k] for k in range(w.shape[1])]
    outs = []
    for col in cols:
        acc = x[..., order[0]] * col[order[0]]
        for i in order[1:]:
            acc = acc + x[..., i] * col[i]
        outs.append(acc)
    return outs[0] if w.ndim == 1 else np.stack(outs, axis=-1)


@unregistered()
def u_gray_of_binary_weights(img):
    # pixel values times weights of a few binary digits: every sum exact, in any order
    y = img.astype(np.float32).dot(np.array([0.25, 0.5, 0.25], np.float32))
    return np.stack([y, y, y], axis=-1).astype(np.uint8)


def test_a_product_exact_in_any_order_lowers_whatever_numpy_sums_in():
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(40, 33), (21, 64)])]
    outs = _emit_on(trace_op_of(u_gray_of_binary_weights), imgs)
    for k, im in enumerate(imgs):
        np.testing.assert_array_equal(outs[k], u_gray_of_binary_weights(im))


def trace_op_of(op):
    from augment_ops.trace import trace_op

    return trace_op(op)


def test_builtin_grayscale_is_exact_on_both_paths_whatever_the_blas():
    """grayscale's reference is the in-order sum itself, not ``@``: its native path equals it to
    the bit, and neither depends on the BLAS numpy was built with."""
    gray = augment_ops.get("grayscale")
    assert gray.tolerance == 0 and augment_ops.explain(gray) == "native (traced)"
    imgs = [pattern_image(k, h, w) * 7 for k, (h, w) in enumerate([(40, 33), (21, 64)])]
    outs = _emit_on(trace_op_of(gray), imgs)
    for k, im in enumerate(imgs):
        y = np.rint(_in_order(im.astype(np.float32), GRAY, [0, 1, 2]))
        ref = np.repeat(np.clip(y, 0, 255).astype(np.uint8)[..., None], 3, axis=2)
        np.testing.assert_array_equal(gray(im), ref)
        np.testing.assert_array_equal(outs[k], ref)


#: name -> (program tail, whether it is np.clip (one clamp), what a NaN gives on CPU, on GPU;
#: None: NaN, as numpy).
CLIPS = {
    "clip": (lambda y: np.clip(y, 0, 255), True, None, 0),
    "method": (lambda y: y.clip(-3, 200.5), True, None, -3),
    "empty-range": (lambda y: np.clip(y, 10, 5), False, 5, 5),  # lo > hi: hi everywhere
    "written-out": (lambda y: np.minimum(np.maximum(y, 0), 255), False, 0, 0),
}


def _clip_program(name):
    def program(img):
        x = img.astype(np.float32) - 128
        return CLIPS[name][0](x / x * x)  # NaN where the pixel is 128, inf nowhere

    return program


def _clip_images():
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate([(7, 9), (12, 5)])]
    imgs[0][0, :3] = 128
    return imgs


def _check_clips(name, outs, imgs, nan_to):
    program = _clip_program(name)
    for k, im in enumerate(imgs):
        with np.errstate(all="ignore"):
            ref = program(im)
        assert np.isnan(ref).any() == (k == 0)
        if nan_to is not None:
            ref = np.where(np.isnan(ref), np.float32(nan_to), ref)
        np.testing.assert_array_equal(outs[k], ref, err_msg=name)


def _arithmetic_names(traced) -> list[str]:
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(*emit(traced, fn.external_source(name="img", layout="HWC")))
    pipe.build()
    return [o._op._init_args.get("expression_desc", "").split("(")[0] for o in pipe._ops]


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_np_clip_with_constant_bounds_takes_one_operator(name):
    """``np.clip`` with constant bounds ``lo <= hi`` lowers to one ``math.clamp``, which keeps
    numpy's NaN on the CPU; other forms keep DALI's ``max`` and ``min``."""
    _, clamps, nan_cpu, _ = CLIPS[name]
    imgs = _clip_images()
    traced = trace_function(_clip_program(name), params={}, random=False, num_outputs=1,
                            dtype=np.float32, ndim=3)
    _check_clips(name, _emit_on(traced, imgs), imgs, nan_to=nan_cpu)
    exprs = _arithmetic_names(traced)
    if clamps:
        assert exprs.count("clamp") == 1 and "min" not in exprs and "max" not in exprs, exprs
    else:
        assert "clamp" not in exprs and "max" in exprs and "min" in exprs, exprs


CLIP_KEYWORDS = {
    "np-min-max": lambda img: np.clip(img, min=10, max=200),
    "np-max-only": lambda img: np.clip(img, max=100),
    "method-min": lambda img: img.clip(min=50),
    "method-positional": lambda img: img.clip(20, 90),
}


@pytest.mark.parametrize("name", sorted(CLIP_KEYWORDS))
def test_np_clip_keywords_trace_to_numpy(name):
    """numpy 2's ``min=``/``max=`` keywords are the bounds (they were once dropped silently)."""
    program = CLIP_KEYWORDS[name]
    imgs = [pattern_image(k, h, w) * 4 for k, (h, w) in enumerate([(7, 9), (12, 5)])]
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=np.uint8,
                            ndim=3)
    outs = _emit_on(traced, imgs)
    for k, im in enumerate(imgs):
        assert not np.array_equal(program(im), im)  # the clip changes something
        np.testing.assert_array_equal(outs[k], program(im), err_msg=name)


@pytest.mark.parametrize("call", [
    lambda img: np.clip(img, 0, 100, dtype=np.int16),
    lambda img: np.clip(img, 0, 100, casting="unsafe"),
    lambda img: np.clip(img, 0, 100, min=3),
    lambda img: img.clip(0, 100, out=np.empty((1,), np.uint8)),
], ids=["dtype", "casting", "both-bounds", "out"])
def test_np_clip_keywords_that_are_not_lowered_are_refused(call):
    with pytest.raises(TraceError, match=r"np\.clip with"):
        trace_function(call, params={}, random=False, num_outputs=1, dtype=np.uint8, ndim=3)


@pytest.mark.parametrize("form", ["clip", "written-out"])
def test_clips_keep_numpy_signed_zero(form):
    """``np.clip`` keeps ``x`` where it equals a bound (-0.0 at 0 stays -0.0); ``np.maximum``
    gives its second operand (+0.0): both as numpy, to the bit."""

    def program(img):
        z = (img.astype(np.float32) - img.astype(np.float32)) * -1.0  # -0.0 everywhere
        y = np.where(img > 30, z, -z)  # and +0.0 where the pixel is at most 30
        return np.clip(y, 0, 255) if form == "clip" else np.minimum(np.maximum(y, 0), 255)

    imgs = [pattern_image(k, 6, 7) for k in range(2)]
    traced = trace_function(program, params={}, random=False, num_outputs=1,
                            dtype=np.float32, ndim=3)
    outs = _emit_on(traced, imgs)
    for k, im in enumerate(imgs):
        ref = program(im)
        assert np.signbit(ref).any() == (form == "clip")
        np.testing.assert_array_equal(outs[k].view(np.uint32), ref.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CLIPS))
def test_clips_on_gpu_equal_numpy_nan_aside(name):
    """On the GPU a NaN becomes the lower bound through a clamp, and a bound through DALI's
    ``max`` and ``min``, as on the CPU."""
    imgs = _clip_images()
    traced = trace_function(_clip_program(name), params={}, random=False, num_outputs=1,
                            dtype=np.float32, ndim=3)
    _check_clips(name, _emit_on(traced, imgs, gpu=True), imgs, nan_to=CLIPS[name][3])


CROP_FORMULAS = {
    "centre": lambda x, s: _crop(x, s, lambda n, c: (n - c) // 2),
    "third": lambda x, s: _crop(x, s, lambda n, c: (n - c) // 3),
    "end": lambda x, s: _crop(x, s, lambda n, c: n - c),
    "start": lambda x, s: _crop(x, s, lambda n, c: 0),
    "plus-minus": lambda x, s: _crop(x, s, lambda n, c: ((n - c) + 1) - 1),
    # Bounds that do leave the image for some sizes: their clamps must stay.
    "overhang": lambda x, s: x[x.shape[0] // 2:x.shape[0] // 2 + s, :s],
    "negative": lambda x, s: x[x.shape[0] - s:, max(0, x.shape[1] - s) - 1:],
    "length": lambda x, s: _row_at_length(x, s),
}


def _row_at_length(x, size):
    """The row at the length of an overhanging slice: wrong if the slice's size is unclamped."""
    k = x[x.shape[0] // 2:x.shape[0] // 2 + size].shape[0]
    return x[k - 1:k]


def _crop(x, size, offset):
    h, w = x.shape[:2]
    ch, cw = min(size, h), min(size, w)
    y, z = offset(h, ch), offset(w, cw)
    return x[y:y + ch, z:z + cw]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(formula=st.sampled_from(sorted(CROP_FORMULAS)), size=st.integers(1, 24),
       sizes=st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=2, max_size=2))
def test_crops_whose_clamps_the_tracer_drops_equal_numpy(formula, size, sizes):
    """Bounds the tracer proves in range (``(h - ch) // 2 + ch <= h``, ...) get no run-time
    clamp; the crop must still equal numpy's for sizes above and below the crop."""

    def program(img):
        return CROP_FORMULAS[formula](img, size)

    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate(sizes)]
    traced = trace_function(program, params={}, random=False, num_outputs=1, dtype=np.uint8,
                            ndim=3)
    outs = _emit_on(traced, imgs)
    for k, im in enumerate(imgs):
        np.testing.assert_array_equal(outs[k], program(im), err_msg=str(sizes[k]))


def test_trace_error_is_a_value_error_with_fields():
    with pytest.raises(TraceError) as info:
        trace_function(lambda img: img[::3], params={}, random=False, num_outputs=1,
                       dtype=np.uint8, ndim=3)
    e = info.value
    assert isinstance(e, ValueError) and e.construct == "a slice step of 3 on an axis of " \
        "per-sample length, or with per-sample bounds (only 1 and -1 are lowered there; a step " \
        "on an axis of a constant length lowers)" and re.search(
            r"test_trace.py:\d+: trace_function\(lambda img: img\[::3\]", e.location)



# -- rectangle fills at random places: the bounds' lanes share operators, fn.erase clips -------
_fill_cutout = u_cutout.fn  # the user's cutout, as a plain function


def _fill_corner(img, rng, size):
    h, w = img.shape[:2]
    out = img.copy()
    out[int(rng.integers(0, h)):, :int(rng.integers(0, w)) + size] = 7
    y = rng.integers(0, h)
    out[:min(h - 1, y + size), y:] = 9  # a stop clamped below the size: the clamp stays
    return out


def _fill_channel(img, rng, size):
    h, w = img.shape[:2]
    y, x = rng.integers(0, h), rng.integers(0, w)
    out = img.copy()
    out[max(0, y - size):min(h, y + size), x:x + size, 1] = 200
    return out


def _fill_wrapping(img, rng, size):
    """Starts that go negative wrap around (numpy's negative index), in int32 (a fill float32
    cannot hold exactly)."""
    h, w = img.shape[:2]
    y, x = rng.integers(0, h), rng.integers(0, w)
    out = img.astype(np.int32)
    out[y - size:y + size, x - size:] = -70000
    return out


FILLS = {"cutout": _fill_cutout, "corner": _fill_corner, "channel": _fill_channel,
         "wrapping": _fill_wrapping}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(FILLS)), size=st.integers(1, 12),
       sizes=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=4, max_size=4),
       epoch=st.integers(0, 3))
def test_random_rectangle_fills_equal_numpy_on_tiny_and_one_pixel_images(name, size, sizes,
                                                                        epoch):
    """The draws, bounds and clamps of a fill run as vectors of the y and x lanes, and fn.erase
    clips the unclamped rectangle; the result must be numpy's, for images down to one pixel."""


    func = FILLS[name]
    sizes = [(1, 1), (1, 7), (7, 1), *sizes]
    imgs = [pattern_image(k, h, w) for k, (h, w) in enumerate(sizes)]
    ref0 = func(imgs[0], counter_rng(SEED, 0, 0, 5), size)
    traced = trace_function(func, params={"size": size}, random=True, num_outputs=1,
                            dtype=ref0.dtype, ndim=3)
    index = np.arange(len(imgs), dtype=np.int64)
    epochs = np.full(len(imgs), epoch, np.int64)
    outs = _emit_on(traced, imgs, scalar_draws(traced, SEED, 5, index, epochs))
    for k, im in enumerate(imgs):
        ref = func(im, counter_rng(SEED, epoch, k, 5), size)
        np.testing.assert_array_equal(outs[k], ref, err_msg=f"{name} on {sizes[k]}")


def _operator_count(func, random: bool, **params) -> int:
    """The DALI operators of ``func``'s traced graph, its inputs' external sources excluded."""
    from augment_ops.lower_dali import sample_scalar_nodes

    traced = trace_function(func, params=params, random=random, num_outputs=1, dtype=np.uint8,
                            ndim=3)
    values = [[np.float64(0.5)] for _ in sample_scalar_nodes(traced)]
    pipe = traced_pipeline(traced, [pattern_image(0, 5, 6)], values)
    return len(pipe._ops) - 1 - len(values)


def test_cutout_graph_computes_both_axes_with_shared_operators():
    """Cutout's y and x bounds share each operator (the draws' stack, the shape, u * size,
    floor, the casts, the start), the clamps of rng.integers and of the bounds take none, nor
    does the size (y + 32) - (y - 32): 9 operators besides the draws' external sources, where one
    per axis and per step took 32."""
    assert _operator_count(_fill_cutout, True, size=64) <= 9


@pytest.mark.parametrize(("name", "bound"), [("center_crop", 6), ("random_crop", 10)])
def test_crop_graphs_slice_once_with_vector_bounds(name, bound):
    """A crop's starts and sizes along y and x are vectors computed together, and one fn.slice
    takes them (center_crop took 12 operators, random_crop 20 besides its draws)."""
    op = augment_ops.get(name)
    assert _operator_count(op.fn, op.random, size=64) <= bound
