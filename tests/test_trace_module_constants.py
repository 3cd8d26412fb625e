"""Module-level dicts, lists and sets an op reads (``MAX_VALUES_BY_DTYPE[img.dtype]``): kept as
constants of the traced graph when no function of their module writes them and the op only
reads them, and explain() says so; refused, naming the writer, when some function may write
them. The same for a list or dict default value the function only reads.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import pattern_image, scalar_draws, unregistered
from test_trace import _emit_on
from test_trace_parity import _check_same_error

import augment_ops
from augment_ops.trace import TraceError, trace_op
from extsrc.errors import OpError
from extsrc.ops_runtime.seeding import counter_rng

LIBRARY = '''
import numpy as np

MAX_BY_DTYPE = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65535}
OFFSETS = [10, 20, 30]
REGISTRY = {"gain": 2}
TABLES = {"shift": 7}
LOOKUPS = {"k": 1}
FLIPPED_BY_CV2 = {"uint8", "float32"}
SEEN = {"uint8"}


def max_value(dtype):
    return MAX_BY_DTYPE[dtype] if dtype in MAX_BY_DTYPE else None


def register(name, value):
    REGISTRY[name] = value


def grow(more):
    TABLES.update(more)


def spread(d):
    return dict(d)


def hand_out():
    return spread(LOOKUPS)


def note(name):
    SEEN.add(name)


CALLS = 0


def counted_shift(img):
    global CALLS
    CALLS += 1
    return img + np.uint8(CALLS % 3)


def plain_shift(img):
    return img + np.uint8(1)


AUGMENTATIONS = {"counted": counted_shift, "plain": plain_shift}
PLAIN_AUGMENTATIONS = {"plain": plain_shift}
'''


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("modconst")
    (root / "modconst_lib.py").write_text(textwrap.dedent(LIBRARY))
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("modconst_lib")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("modconst_lib", None)


def _exec_op(lib, source: str, *names: str):
    """The op ``source`` defines, its globals being numpy and ``names`` from ``lib`` (as a module
    that imports them from a library has them)."""
    ns = {"np": np, "__name__": "ops_module", **{n: getattr(lib, n) for n in names}}
    exec(textwrap.dedent(source), ns)
    return unregistered()(next(v for k, v in ns.items() if k.startswith("m_")))


def test_a_dict_and_a_list_no_code_writes_are_read_as_constants(lib):
    op = _exec_op(lib, """
        def m_invert_offset(img):
            return (MAX_BY_DTYPE[img.dtype] - img) // 2 + OFFSETS[1]
        """, "MAX_BY_DTYPE", "OFFSETS")
    traced = trace_op(op)
    imgs = [pattern_image(k, 3 + k, 4) for k in range(3)]
    for img, got in zip(imgs, _emit_on(traced, imgs), strict=True):
        (ref,) = op.apply(img, None)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)
    why = augment_ops.explain(op)
    assert why.startswith("native (traced; the global 'MAX_BY_DTYPE' (a module-level dict that "
                          "no code of its module writes) read as a constant at "), why
    assert "the global 'OFFSETS' (a module-level list" in why, why


def test_a_function_called_through_a_table_of_functions_is_looked_into(lib):
    """A module-level dict of augmentation functions read as a constant: its functions are
    checked as functions the op calls (any of them may be called: the key may be computed), so a
    table holding one that keeps a count outside the op is refused, and one without lowers."""
    counted = _exec_op(lib, """
        def m_counted(img):
            return AUGMENTATIONS["counted"](img)
        """, "AUGMENTATIONS")
    with pytest.raises(TraceError, match=r"a write to the global 'CALLS' .* in counted_shift\(\)"):
        trace_op(counted)
    plain = _exec_op(lib, """
        def m_plain(img):
            return PLAIN_AUGMENTATIONS["plain"](img)
        """, "PLAIN_AUGMENTATIONS")
    traced = trace_op(plain)
    img = pattern_image(1, 3, 4)
    np.testing.assert_array_equal(_emit_on(traced, [img])[0], plain.apply(img, None)[0])


def test_a_set_no_code_writes_is_read_as_a_constant_and_one_written_is_refused(lib):
    # imgaug's fliplr: if arr.dtype.name in _FLIPLR_DTYPES_CV2
    op = _exec_op(lib, """
        def m_flip_if_listed(img):
            return img[:, ::-1] if img.dtype.name in FLIPPED_BY_CV2 else img
        """, "FLIPPED_BY_CV2")
    traced = trace_op(op)
    imgs = [pattern_image(k, 3 + k, 4) for k in range(3)]
    for img, got in zip(imgs, _emit_on(traced, imgs), strict=True):
        np.testing.assert_array_equal(got, op.apply(img, None)[0])
    assert augment_ops.explain(op).startswith(
        "native (traced; the global 'FLIPPED_BY_CV2' (a module-level set that no code of its "
        "module writes) read as a constant at ")
    written = _exec_op(lib, """
        def m_flip_if_seen(img):
            return img[:, ::-1] if img.dtype.name in SEEN else img
        """, "SEEN")
    assert augment_ops.explain(written).startswith(
        "numpy: a read of the global 'SEEN', a set that note() of modconst_lib writes")


@pytest.mark.parametrize(("name", "key", "pattern"), [
    ("REGISTRY", "gain", r"a read of the global 'REGISTRY', a dict that register\(\) of "
                         r"modconst_lib writes; the traced graph would keep"),
    ("TABLES", "shift", r"a read of the global 'TABLES', a dict that grow\(\) of modconst_lib "
                        r"writes"),
    ("LOOKUPS", "k", r"a read of the global 'LOOKUPS', a dict that hand_out\(\) of "
                     r"modconst_lib writes"),
])
def test_a_dict_some_function_of_its_module_may_write_is_refused_naming_it(lib, name, key,
                                                                           pattern):
    op = _exec_op(lib, f"""
        def m_reads(img):
            return img + np.uint8({name}["{key}"])
        """, name)
    with pytest.raises(TraceError, match=pattern):
        trace_op(op)
    assert augment_ops.explain(op).startswith(f"numpy: a read of the global '{name}'")


@pytest.mark.parametrize(("source", "name", "pattern"), [
    ("""
        def m_binds_it(img):
            d = MAX_BY_DTYPE
            return img + np.uint8(d[img.dtype] // 255)
        """, "MAX_BY_DTYPE", r"a read of the global 'MAX_BY_DTYPE', a dict, which can change"),
    ("""
        def m_reads(img):
            return img + np.uint8(OFFSETS[0])

        def set_offset(v):
            OFFSETS[0] = v
        """, "OFFSETS",
     r"a read of the global 'OFFSETS', a list that set_offset\(\) of ops_module writes"),
], ids=["the op itself", "another function of the op's module"])
def test_a_global_the_op_or_its_module_may_write_is_refused(lib, source, name, pattern):
    with pytest.raises(TraceError, match=pattern):
        trace_op(_exec_op(lib, source, name))


def test_a_library_function_reading_its_own_constant_lowers(lib):
    op = _exec_op(lib, """
        def m_via_library(img):
            return max_value(img.dtype) - img
        """, "max_value")
    img = pattern_image(1, 4, 5)
    (got,) = _emit_on(trace_op(op), [img])
    np.testing.assert_array_equal(got, 255 - img)


def test_a_list_default_the_function_only_reads_is_a_constant():
    def m_rows(img, sizes=[2, 4, 6], scale={"a": 1}):  # noqa: B006 - read only
        k = len(sizes) - 2 + scale["a"]
        return img[: sizes[k]] // 2 if 9 not in sizes else img

    op = unregistered()(m_rows)
    imgs = [pattern_image(k, 3 + 2 * k, 4) for k in range(3)]
    for img, got in zip(imgs, _emit_on(trace_op(op), imgs), strict=True):
        (ref,) = op.apply(img, None)
        np.testing.assert_array_equal(got, ref)
    why = augment_ops.explain(op)
    assert why.startswith("native (traced; the default value of 'sizes' (a list the function "
                          "only reads) read as a constant at "), why
    assert "the default value of 'scale' (a dict" in why, why


@pytest.mark.parametrize("body", [
    "sizes.append(1)\n    return img[: sizes[0]]",
    "rows = sizes\n    rows.append(1)\n    return img[: rows[0]]",
    "rows = sizes if img.ndim else []\n    return img[: _first(rows)]",
    "rows = [sizes]\n    rows[0].append(1)\n    return img",
    "rows = sizes\n    if not isinstance(rows, list):\n        rows = [rows]\n"
    "    rows[0].append(1)\n    return img",
    "rows = [sizes]\n    for r in rows:\n        r.append(1)\n    return img",
    "rows = [sizes]\n    k = slice(0, 1)\n    first = rows[k]\n    first[0].append(1)\n"
    "    return img",
    "rows = []\n    rows += [sizes]\n    return img",
    "rows = sizes\n    rows += [1]\n    return img",
    "rows = sizes or [1]\n    rows.append(1)\n    return img",
    "return img[: _first(sizes)]",
    "sizes[0] = 3\n    return img[: sizes[0]]",
    "nested = [[sizes]]\n    nested[0][0].append(4)\n    return img",
    "nested = ((sizes,),)\n    nested[0][0].append(4)\n    return img",
    "rows = [[sizes]] * 2\n    rows[1][0].append(4)\n    return img",
    "rows = [sizes]\n    nested = [rows]\n    nested[0][0][0] += 1\n    return img",
    "rows = sizes\n    for _ in range(2):\n        rows = [rows]\n    rows[0][0].append(4)\n"
    "    return img",
    "rows = sizes\n    rows = [rows]\n    rows = [rows]\n    rows[0][0].append(4)\n    return img",
], ids=["append", "alias, then append", "alias given to a function", "wrapped, item appended",
        "wrapped where not a list, item appended", "wrapped, iterated", "wrapped, sliced",
        "wrapped, added to a list", "alias +=", "alias by or", "given to a function",
        "item assigned", "wrapped twice", "wrapped twice in tuples", "wrapped twice, repeated",
        "wrapped, then wrapped again", "wrapped itself in a loop", "wrapped itself twice"])
def test_a_list_default_the_function_may_change_is_refused(body):
    ns = {"np": np, "_first": lambda v: v[0]}
    exec(f"def m_changes(img, sizes=[2, 4]):\n    {body}\n", ns)
    op = unregistered()(ns["m_changes"])
    with pytest.raises(TraceError, match=r"a read of the default value of 'sizes', a list, which "
                                         r"can change"):
        trace_op(op)


# -- a list default indexed by a per-sample value -----------------------------------------------
SEED = 11


def _equals_numpy_per_sample(op, n: int = 8) -> None:
    """``op`` (random) traced by trace_op, run in a DALI CPU pipeline, equals numpy on ``n``
    images, sample ``k`` drawing the same counter draws on both paths."""
    traced = trace_op(op)
    imgs = [pattern_image(k, 5 + k, 7 + 2 * k) for k in range(n)]
    values = scalar_draws(traced, SEED, 3, np.arange(n, dtype=np.int64), np.zeros(n, np.int64))
    for k, (img, got) in enumerate(zip(imgs, _emit_on(traced, imgs, values), strict=True)):
        (ref,) = op.apply(img, counter_rng(SEED, 0, k, 3))
        assert got.dtype == ref.dtype, (k, got.dtype, ref.dtype)
        np.testing.assert_array_equal(got, ref, err_msg=f"sample {k}")


def m_cutout_shapes(img, rng, shapes=[(1, 2), (3, 1), (2, 3)], ratios=None):  # noqa: B006
    # mmdet's CutOut: an alias of the default (through a conditional expression), wrapped in a
    # list where it is not one, indexed by a draw and unpacked
    candidates = ratios if ratios is not None else shapes
    if not isinstance(candidates, list) or type(candidates) is not list:
        candidates = [candidates]
    out = img.copy()
    index = rng.integers(0, len(candidates))
    w, h = candidates[index]
    out[:h, :w] = 0
    return out


def test_an_alias_of_a_list_default_indexed_by_a_draw_lowers_and_equals_numpy():
    op = unregistered()(m_cutout_shapes)
    # every item is picked by some sample
    assert {int(counter_rng(SEED, 0, k, 3).integers(0, 3)) for k in range(8)} == {0, 1, 2}
    _equals_numpy_per_sample(op)
    assert augment_ops.explain(op).startswith(
        "native (traced; the default value of 'shapes' (a list the function only reads)")
    assert not trace_op(op).guards  # the draw is in range: no check at run time


def m_offset_by_negative_index(img, rng, offsets=[1, 20, 40]):  # noqa: B006
    # a Python int item stays one: img + it is uint8, as on the numpy path
    return img + offsets[rng.integers(-3, 3)]


def m_offset_by_int8_index(img, rng, offsets=[1, 20, 40]):  # noqa: B006
    return img + offsets[rng.integers(-3, 3, dtype=np.int8)]


def m_offset_by_uint8_index(img, rng, offsets=[1, 20, 40]):  # noqa: B006
    return img + offsets[rng.integers(0, 3, dtype=np.uint8)]  # compared with -3 in int64


@pytest.mark.parametrize("func", [m_offset_by_negative_index, m_offset_by_int8_index,
                                  m_offset_by_uint8_index])
def test_a_per_sample_index_picks_as_python_does_negative_or_narrow(func):
    # every index from -3 to 2 is drawn by some sample
    assert {int(counter_rng(SEED, 0, k, 3).integers(-3, 3)) for k in range(16)} == set(
        range(-3, 3))
    _equals_numpy_per_sample(unregistered()(func), n=16)


@unregistered()
def u_gain_by_height(img, gains=[2, 3, 4]):  # noqa: B006
    return img // gains[img.shape[0] - 2]  # out of range for 5 rows: Python's IndexError


def test_a_per_sample_index_out_of_range_raises_as_python_does(tmp_path):
    assert [(g.error, g.message) for g in trace_op(u_gain_by_height).guards] == [
        ("IndexError", "list index out of range")]
    _check_same_error(tmp_path, u_gain_by_height, [(2, 3), (4, 4), (5, 3)], 2, OpError,
                      "IndexError: list index out of range")


@pytest.mark.parametrize(("items", "pattern"), [
    ("[1, 2.5]", r"a list of float, int values indexed by a per-sample value \(only numbers of "
                 r"one type"),
    ("['a', 'b']", r"a list of str values indexed by a per-sample value"),
    ("[(1, 2), (3,)]", r"a list of tuple of int values indexed by a per-sample value"),
])
def test_a_list_default_of_mixed_items_indexed_per_sample_is_refused(items, pattern):
    ns = {"np": np}
    exec(f"def m_picks(img, rng, items={items}):\n"
         "    v = items[rng.integers(0, len(items))]\n    return img\n", ns)
    with pytest.raises(TraceError, match=pattern):
        trace_op(unregistered()(ns["m_picks"]))


DEFAULT_SIZES = (2, 3)


def u_is_the_default(img, sizes=DEFAULT_SIZES):
    # an identity test of a tuple default: its stand-in would be another object
    if sizes is DEFAULT_SIZES:
        return img[:1]
    return img[:2]


def u_picks_from_the_default(img, rng, sizes=DEFAULT_SIZES):
    # compared with None only: the default's stand-in picks by a per-sample index
    if sizes is None:
        return img
    return img[:sizes[rng.integers(0, len(sizes))]]


def test_a_default_compared_by_identity_keeps_its_identity():
    from test_trace_arrays import _check

    _check(u_is_the_default)
    _check(u_picks_from_the_default, random=True)
