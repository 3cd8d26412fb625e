"""Float sums, means, variances and standard deviations over the image
(``augment_ops.trace.pairwise``): numpy's own pairwise sum, one Python call per batch, on an
array laid out in memory as the numpy path's; the arithmetic around it in DALI's operators.

Each op, in real DALI pipelines on the CPU and on the GPU, equals numpy bit for bit on images
whose sums round (random values, sizes past numpy's 128-value blocks), for arrays laid out as
new arrays, transposes of them and single channels of them; the layouts are shown to change
numpy's result, so a sum in another order would fail. A sum over a crop is refused saying why.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from helpers import traced_equals_numpy, unregistered
from PIL import Image

from augment_ops.trace import TraceError, trace_op


# Squares spread the values over four orders of magnitude, so that their float32 sums round
# differently in different orders (test_the_layouts_change_numpys_sums).
@unregistered(dtype=np.float32)
def p_centre(img):
    x = img.astype(np.float32)
    x = x * x / np.float32(3.3)
    return x - x.mean()


@unregistered(dtype=np.float32)
def p_channel_means(img):
    x = img.astype(np.float32)
    x = x * x / np.float32(3.3)
    return x - np.mean(x, axis=(0, 1), keepdims=True)


@unregistered(dtype=np.float32)
def p_standardize(img):
    # keras' ImageDataGenerator.standardize: samplewise centre and std normalization
    x = np.asarray(img, dtype="float32")
    x *= 1.0 / 255
    x -= np.mean(x, keepdims=True)
    x /= np.std(x, keepdims=True) + 1e-6
    return x


@unregistered(dtype=np.float64)
def p_float64_sum_and_var(img):
    x = img / 7.0
    return (x - x.sum() / x.size) / (np.var(img, ddof=1) + 1.0)


@unregistered(dtype=np.float32)
def p_transposed(img):
    x = img.astype(np.float32)
    d = (x * x / np.float32(3.3)).transpose(2, 0, 1)
    return d.transpose(1, 2, 0) - d.mean()


@unregistered(dtype=np.float32)
def p_one_channel(img):
    x = img.astype(np.float32)
    x = x * x / np.float32(3.3)
    d = x.transpose(2, 0, 1)
    return x - x[..., 0].mean() + d[2].std()


@unregistered(dtype=np.float32)
def p_floor_of_std(img):
    # tensorpack's MeanVarianceNormalize
    x = img.astype("float32")
    std = np.maximum(np.std(x), 1.0 / np.sqrt(np.prod(img.shape)))
    return ((x - np.mean(x)) / std).astype(np.float32)


@unregistered(dtype=np.float32)
def p_transposed_standardize(img):
    """Arithmetic of a transposed array is laid out as it is (numpy's K order): its sums too."""
    d = (img.astype(np.float32) * np.float32(1.7)).transpose(2, 0, 1)
    y = d - d.mean()
    return (y / (y.std() + np.float32(1e-3))).transpose(1, 2, 0)


@unregistered(dtype=np.float32)
def p_written_through_a_transpose(img):
    """batchgenerators' contrast: each channel of a CHW view of an HWC array rewritten in turn
    and summed; the writes keep the array's memory, whatever form the tracer gives them. The
    minimum reads the channel plus 0.0, as the tracer's refusal of a minimum of values that may
    hold -0.0 advises."""
    d = (img.astype(np.float32) * np.float32(1.3)).transpose(2, 0, 1)
    for c in range(3):
        mn = d[c].mean()
        d[c] = (d[c] - mn) * np.float32(0.8 + 0.1 * c) + mn
    return d.transpose(1, 2, 0) + (d[1] + np.float32(0.0)).min()


OPS = [p_centre, p_channel_means, p_standardize, p_float64_sum_and_var, p_transposed,
       p_one_channel, p_floor_of_std, p_transposed_standardize, p_written_through_a_transpose]


def _images() -> list[np.ndarray]:
    rs = np.random.default_rng(6)
    return [rs.integers(0, 256, (h, w, 3), dtype=np.uint8)
            for h, w in [(1, 1), (3, 5), (16, 9), (40, 57), (97, 64)]]


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)],
                         ids=["cpu", "gpu"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_a_float_reduction_equals_numpy_in_a_dali_pipeline(op, gpu):
    assert any(n.op == "npsum" for n in trace_op(op).nodes())
    traced_equals_numpy(op, _images(), gpu=gpu)


def test_the_layouts_change_numpys_sums():
    """The sums above differ from a sum of the same values laid out otherwise, so a lowering
    that summed in another order would fail them."""
    spread = [im.astype(np.float32) * im / np.float32(3.3) for im in _images()]
    assert any(x.transpose(2, 0, 1).mean() != np.ascontiguousarray(x.transpose(2, 0, 1)).mean()
               for x in spread)
    assert any(x[..., 0].mean() != np.ascontiguousarray(x[..., 0].T).mean() for x in spread)
    assert any(x.mean(axis=(0, 1))[1] != np.ascontiguousarray(x[..., 1]).mean() for x in spread)
    assert any(x.sum() != np.float32(x.astype(np.float64).sum()) for x in spread)
    # the K-ordered difference summed as numpy lays it out, not as a C-ordered copy
    for x in spread:
        d = x.transpose(2, 0, 1)
        y = d - d.mean()
        assert y.strides == tuple(sorted(y.strides, reverse=True)[k] for k in (2, 0, 1))
    assert any((y := x.transpose(2, 0, 1) - x.mean()).sum() != np.ascontiguousarray(y).sum()
               for x in spread)


def test_a_sum_over_a_crop_is_refused_saying_why():
    @unregistered(dtype=np.float32)
    def crop_mean(img):
        x = img.astype(np.float32)
        return x - x[1:, 1:].mean()

    with pytest.raises(TraceError, match=r"^np\.mean of floating-point values over an array "
                                         r"whose memory layout the tracer does not follow"):
        trace_op(crop_mean)


@unregistered(dtype=np.float32)
def p_copied_transpose(img):
    x = img.astype(np.float32)
    d = (x * x / np.float32(3.3)).transpose(2, 0, 1)
    c = d.copy()  # C order: another layout than d's, so another sum
    k = np.copy(d)  # order 'K': d's layout
    return (c - c.mean() + k.mean() - np.ascontiguousarray(d).mean()).transpose(1, 2, 0)


def test_a_copy_that_changes_the_layout_is_followed():
    assert any(n.op == "laid" for n in trace_op(p_copied_transpose).nodes())
    traced_equals_numpy(p_copied_transpose, _images())


def test_a_fortran_ordered_copy_is_refused():
    @unregistered(dtype=np.float32)
    def fortran(img):
        x = np.array(img.astype(np.float32), order="F")
        return x - x.mean()

    with pytest.raises(TraceError, match=r"^np\.array with order='F' of a traced array \(a "
                                         r"Fortran-ordered copy"):
        trace_op(fortran)


def test_explain_names_the_python_call():
    from augment_ops.trace import explain

    assert "numpy's own float sums over the image" in explain(p_standardize)


# -- numpy's tree of additions, by torch (augment_ops.trace.pairwise_torch) ---------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torchs_pairwise_sums_equal_numpys_on_every_kind_of_length(dtype):
    torch = pytest.importorskip("torch")
    from augment_ops.trace.pairwise_torch import batch_sums, model_holds

    assert model_holds()
    rs = np.random.default_rng(4)
    lengths = [0, 1, 7, 8, 9, 15, 16, 17, 120, 127, 128, 129, 136, 255, 256, 1000, 8191, 8193,
               65537, 500 * 375 * 3]
    arrays = [(rs.standard_normal(n) * 10.0 ** rs.uniform(-5, 7, n)).astype(dtype)
              for n in lengths]
    arrays[1][0] = -0.0  # one -0.0: numpy's sum is 0.0
    arrays[3][2] = np.inf
    arrays[5][:] = -0.0
    arrays[6][4] = np.nan
    got = batch_sums([torch.from_numpy(a) for a in arrays])  # one batch of every length
    for n, a, g in zip(lengths, arrays, got, strict=True):
        assert np.asarray(g.numpy()).tobytes() == np.asarray(np.add.reduce(a)).tobytes(), n
    # a sum in another order differs for some of them, so the test can fail
    assert any(np.add.reduce(a) != np.add.reduce(a[::-1]) for a in arrays[10:])


def test_the_gpu_path_choice_keeps_float_sums_on_the_numpy_path():
    from extsrc.ops_runtime.paths import explain_choice, sums_floats

    assert sums_floats(p_channel_means) and sums_floats(p_standardize)
    for op in (p_channel_means, p_standardize):
        assert explain_choice(op, gpu=True).startswith(
            "numpy: the op's traced graph sums floats over the image in numpy's pairwise order")


def test_a_sum_over_a_strided_view_and_a_list_of_axes_are_refused_as_numpy_would():
    @unregistered(dtype=np.float32)
    def strided(img):
        x = img.astype(np.float32) / np.float32(7)
        return x - x[..., ::2].mean()  # numpy sums a view with gaps in its own way

    @unregistered(dtype=np.float32)
    def listed(img):
        x = img.astype(np.float32)
        return x - x.sum(axis=[0, 1])  # numpy: TypeError for a list

    with pytest.raises(TraceError, match=r"^np\.mean of floating-point values over an array "
                                         r"whose memory layout"):
        trace_op(strided)
    with pytest.raises(TraceError, match=r"'list' object cannot be interpreted as an integer"):
        trace_op(listed)


def test_thousands_of_writes_trace():
    """The layout of each written array is known without walking the graph again (or
    recursing through it) at every write."""
    from augment_ops.trace import trace_function

    def dots(img):
        c = img.copy()
        for i in range(1500):
            c[0:1, 0:1] = i % 255
        return c

    traced = trace_function(dots, params={}, random=False, num_outputs=1, dtype=np.uint8,
                            ndim=3)
    assert traced.outputs


@unregistered(dtype=np.float32)
def p_view_rewritten(img):
    """A transposed view written whole keeps its memory: its sum is in the base's order."""
    x = img.astype(np.float32) * np.float32(1.3)
    d = x.transpose(2, 0, 1)
    d[...] = d.copy()
    return x - d.mean()


@unregistered(dtype=np.float32)
def p_opencv_of_a_transpose(img):
    """OpenCV returns a new C-contiguous array, whatever its input's layout."""
    a = np.ascontiguousarray(img[..., 0]).astype(np.float32).T
    s = cv2.add(a, a) * np.float32(1.3)
    return img.astype(np.float32) + s.mean()


@unregistered(dtype=np.float32)
def p_pil_of_a_transpose(img):
    """PIL keeps its own row-major copy of the pixels."""
    back = np.asarray(Image.fromarray(np.ascontiguousarray(img).transpose(1, 0, 2)))
    y = back.astype(np.float32) * np.float32(1.3)
    return img.astype(np.float32) + y.mean()


@pytest.mark.parametrize("op", [p_view_rewritten, p_opencv_of_a_transpose, p_pil_of_a_transpose],
                         ids=lambda o: o.name)
def test_a_sum_of_a_library_result_or_a_rewritten_view_is_in_its_memorys_order(op):
    assert any(n.op == "npsum" for n in trace_op(op).nodes())
    traced_equals_numpy(op, _images())
