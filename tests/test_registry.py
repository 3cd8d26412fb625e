"""The op registry: decorator forms, name rules, signatures, lookup, variants and output checks."""

from __future__ import annotations

import numpy as np
import pytest

import augment_ops
from augment_ops import Op, OpContractError, OpRegistrationError, augment_op

IMG = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)


@pytest.fixture
def cleanup():
    """Names to unregister after the test, whatever happened."""
    names: list[str] = []
    before = set(augment_ops.available())
    yield names
    for n in names:
        augment_ops.unregister(n)
    assert set(augment_ops.available()) == before


def test_bare_decorator(cleanup):
    cleanup.append("t_bare")

    @augment_op
    def t_bare(img):
        """Flip it.

        More text that is not part of the description."""
        return img[::-1]

    assert isinstance(t_bare, Op)
    assert augment_ops.get("t_bare") is t_bare
    assert t_bare.name == "t_bare" and t_bare.num_outputs == 1 and not t_bare.random
    assert t_bare.dtype == np.dtype(np.uint8) and t_bare.ndim == 3
    assert t_bare.description == "Flip it."
    # Still callable as the plain function.
    np.testing.assert_array_equal(t_bare(IMG), IMG[::-1])
    (out,) = t_bare.apply(IMG)
    np.testing.assert_array_equal(out, IMG[::-1])
    assert out.flags.c_contiguous


def test_decorator_with_arguments(cleanup):
    cleanup.append("t_renamed")

    @augment_op(name="t_renamed", num_outputs=2, dtype=np.float32, ndim=2, min_size=3)
    def halves(img):
        g = img[..., 0].astype(np.float32)
        return g[:, :4], g[:, 4:]

    assert augment_ops.get("t_renamed") is halves
    assert "halves" not in augment_ops.available()
    assert (halves.num_outputs, halves.dtype, halves.ndim, halves.min_size) == (
        2, np.dtype(np.float32), 2, 3,
    )
    a, b = halves.apply(IMG)
    assert a.shape == b.shape == (6, 4) and a.dtype == np.float32
    with pytest.raises(OpContractError, match=r"needs images of at least 3x3 pixels, got 2x8"):
        halves.apply(IMG[:2])


def test_taken_name_refused_unless_replace(cleanup):
    cleanup.append("t_taken")

    @augment_op(name="t_taken")
    def first(img):
        return img

    with pytest.raises(OpRegistrationError, match=r"an op named 't_taken' is already registered"):
        @augment_op(name="t_taken")
        def second(img):
            return img[::-1]

    assert augment_ops.get("t_taken") is first

    @augment_op(name="t_taken", replace=True)
    def third(img):
        return img[:, ::-1]

    assert augment_ops.get("t_taken") is third
    # Built-in names are protected the same way.
    with pytest.raises(OpRegistrationError, match=r"'grid2x2' is already registered"):
        augment_op(lambda img: img, name="grid2x2")
    assert augment_ops.get("grid2x2").num_outputs == 4


def test_register_same_op_twice_is_harmless(cleanup):
    cleanup.append("t_same")
    op = augment_op(lambda img: img, name="t_same")
    assert augment_ops.register(op) is op
    other = Op(name="t_same", fn=lambda img: img)
    with pytest.raises(OpRegistrationError, match="already registered"):
        augment_ops.register(other)


def test_double_decoration_refused(cleanup):
    cleanup.append("t_once")

    @augment_op
    def t_once(img):
        return img

    with pytest.raises(OpRegistrationError, match=r"'t_once' is already a registered op"):
        augment_op(t_once)
    with pytest.raises(OpRegistrationError, match=r"already a registered op"):
        augment_op(name="t_twice")(t_once)
    assert "t_twice" not in augment_ops.available()


@pytest.mark.parametrize("bad", ["1abc", "with-dash", "has space", "", "a.b", "é-x"])
def test_bad_names(bad):
    with pytest.raises(OpRegistrationError, match=r"op name must be a Python identifier"):
        augment_op(lambda img: img, name=bad)
    assert bad not in augment_ops.available()


def test_lambda_name_refused():
    # A lambda's __name__ is '<lambda>', which cannot name outputs.
    with pytest.raises(OpRegistrationError, match=r"got '<lambda>'"):
        augment_op(lambda img: img)


def test_not_callable_refused():
    with pytest.raises(OpRegistrationError, match=r"needs a function, got int"):
        augment_op(3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(num_outputs=0), r"num_outputs must be an int >= 1, got 0"),
        (dict(ndim=5), r"ndim must be 2 or 3 \(an op on one image\), or 4 .*got 5"),
        (dict(tolerance=-1.0), r"tolerance must be >= 0"),
    ],
)
def test_bad_declarations(kwargs, match):
    with pytest.raises(OpRegistrationError, match=match):
        augment_op(name="t_bad_decl", **kwargs)(lambda img: img)
    assert "t_bad_decl" not in augment_ops.available()


def test_parameters_without_defaults_refused():
    with pytest.raises(OpRegistrationError, match=r"parameter 'size' needs a default value"):
        @augment_op
        def t_nodefault(img, size):
            return img

    with pytest.raises(OpRegistrationError, match=r"first parameter must be the image"):
        @augment_op
        def t_noimg():
            return None

    with pytest.raises(OpRegistrationError, match=r"first parameter must be the image"):
        @augment_op
        def t_kwonly(*, img=None):
            return img

    assert not {"t_nodefault", "t_noimg", "t_kwonly"} & set(augment_ops.available())


def test_rng_marks_random(cleanup):
    cleanup.extend(["t_rand", "t_det"])

    @augment_op
    def t_rand(img, rng, amount: int = 1):
        return np.roll(img, int(rng.integers(0, 5)) * amount, axis=1)

    @augment_op
    def t_det(img, amount: int = 1):
        return np.roll(img, amount, axis=1)

    assert t_rand.random and not t_det.random
    with pytest.raises(TypeError, match=r"op 't_rand' is random: pass rng="):
        t_rand.apply(IMG)
    a = t_rand.apply(IMG, np.random.default_rng(1))[0]
    b = t_rand.apply(IMG, np.random.default_rng(1))[0]
    np.testing.assert_array_equal(a, b)
    # A deterministic op ignores rng.
    det = t_det.apply(IMG, np.random.default_rng(1))[0]
    np.testing.assert_array_equal(det, t_det.apply(IMG)[0])


def test_get_unknown_lists_names():
    with pytest.raises(KeyError, match=r"no op named 'nope'; registered ops: \[.*'grid2x2'.*\]"):
        augment_ops.get("nope")
    op = augment_ops.get("grid2x2")
    assert augment_ops.get(op) is op


def test_available_and_iter_ops(cleanup):
    names = augment_ops.available()
    assert names == sorted(names)
    assert {"grid2x2", "hflip", "random_hflip", "random_crop"} <= set(names)
    assert [op.name for op in augment_ops.iter_ops()] == names
    cleanup.append("t_listed")
    augment_op(lambda img: img, name="t_listed")
    assert "t_listed" in augment_ops.available()
    assert "t_listed" in [op.name for op in augment_ops.iter_ops()]
    augment_ops.unregister("t_listed")
    assert "t_listed" not in augment_ops.available()
    augment_ops.unregister("t_listed")  # unknown names are ignored


def test_with_params(cleanup):
    cleanup.append("t_shift")

    @augment_op
    def t_shift(img, rng, by: int = 1, axis: int = 1):
        return np.roll(img, by, axis=axis)

    bound = t_shift.with_params(by=3)
    assert bound is not t_shift and bound.name == "t_shift" and bound.random
    assert dict(bound.params) == {"by": 3}
    assert augment_ops.get("t_shift") is t_shift  # the registered op is untouched
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(bound.apply(IMG, rng)[0], np.roll(IMG, 3, axis=1))
    np.testing.assert_array_equal(bound(IMG, None), np.roll(IMG, 3, axis=1))
    # Binding again merges; call-time keywords win.
    both = bound.with_params(axis=0)
    assert dict(both.params) == {"by": 3, "axis": 0}
    np.testing.assert_array_equal(both.apply(IMG, rng)[0], np.roll(IMG, 3, axis=0))
    np.testing.assert_array_equal(both(IMG, None, by=1), np.roll(IMG, 1, axis=0))
    with pytest.raises(TypeError, match=r"op 't_shift' has no parameter\(s\) \['size'\]"):
        t_shift.with_params(size=3)
    with pytest.raises(TypeError, match=r"\['rng'\]; it accepts \['axis', 'by'\]"):
        t_shift.with_params(rng=np.random.default_rng(0))
    crop = augment_ops.get("center_crop").with_params(size=4)
    assert crop.apply(IMG)[0].shape == (4, 4, 3)


def test_implement_adds_path(cleanup):
    cleanup.append("t_impl")

    @augment_op
    def t_impl(img):
        return np.array(img.tolist(), np.uint8)  # tolist(): the tracer cannot lower it

    assert t_impl.paths == ("numpy",)
    assert augment_ops.available_paths(t_impl) == ("numpy",)

    @t_impl.implement("native")
    def t_impl_native(img):
        return img

    assert t_impl.paths == ("numpy", "native")
    assert augment_ops.available_paths(t_impl) == ("numpy", "native")
    assert t_impl.impls["native"] is t_impl_native
    with pytest.raises(ValueError, match=r"path must be 'native' or 'gpu', got 'numpy'"):
        t_impl.implement("numpy")
    with pytest.raises(ValueError, match=r"got 'cuda'"):
        t_impl.implement("cuda")


def test_native_refused_for_random_op(cleanup):
    cleanup.append("t_rand_native")

    @augment_op
    def t_rand_native(img, rng):
        return np.array(img.tolist(), np.uint8)  # untraceable, so no traced native path either

    with pytest.raises(OpRegistrationError,
                       match=r"'t_rand_native' is random; a hand-written native lowering"):
        t_rand_native.implement("native")
    assert augment_ops.available_paths(t_rand_native) == ("numpy",)
    t_rand_native.implement("gpu")(lambda img, rng: img)
    assert augment_ops.available_paths(t_rand_native) == ("numpy", "gpu")


# --- check_outputs: one pinned message per broken contract -------------------------------------

OP4 = Op(name="t_contract", fn=lambda img: img, num_outputs=2)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        ((IMG,), r"returned 1 output\(s\) but declares num_outputs=2"),
        ((IMG, IMG, IMG), r"returned 3 output\(s\) but declares num_outputs=2"),
        (IMG, r"returned 1 output\(s\) but declares num_outputs=2"),
        ((IMG, IMG.astype(np.float32)), r"output 1 has dtype float32, declared uint8"),
        ((IMG, IMG[..., 0]), r"output 1 has rank 2 \(shape \(6, 8\)\), declared ndim=3"),
        ((IMG[:0], IMG), r"output 0 is empty \(shape \(0, 8, 3\)\)"),
        ((IMG, IMG[:, :, :0]), r"output 1 is empty"),
        ((IMG.tolist(), IMG), r"output 0 is a list, expected numpy\.ndarray"),
        ((IMG, None), r"output 1 is a NoneType, expected numpy\.ndarray"),
    ],
)
def test_check_outputs_errors(out, match):
    with pytest.raises(OpContractError, match=r"^op 't_contract' " + match):
        OP4.check_outputs(out)


def test_check_outputs_accepts_list_and_makes_contiguous():
    outs = OP4.check_outputs([IMG[:, ::-1], IMG[::2]])
    assert isinstance(outs, tuple) and len(outs) == 2
    assert all(o.flags.c_contiguous for o in outs)
    np.testing.assert_array_equal(outs[0], IMG[:, ::-1])


def test_single_output_non_array():
    op = Op(name="t_one", fn=lambda img: img)
    with pytest.raises(OpContractError, match=r"op 't_one' output 0 is a int, expected numpy"):
        op.check_outputs(5)
    with pytest.raises(OpContractError, match=r"returned 2 output\(s\) but declares num_outputs=1"):
        op.check_outputs((IMG, IMG))


def test_apply_checks_outputs(cleanup):
    cleanup.append("t_wrong_dtype")

    @augment_op
    def t_wrong_dtype(img):
        return img.astype(np.float64)

    with pytest.raises(OpContractError, match=r"'t_wrong_dtype' output 0 has dtype float64"):
        t_wrong_dtype.apply(IMG)


def test_with_params_variants_do_not_share_implementations(cleanup):
    cleanup.append("t_variant_base")

    @augment_op(name="t_variant_base")
    def base(img, k: int = 1):
        return np.asarray(img)  # untraceable: only declared paths count here

    variant = base.with_params(k=2)
    variant.implement("gpu")(lambda img, k=1: img)
    assert variant.paths == ("numpy", "gpu")
    assert base.paths == ("numpy",)  # declaring on the variant left the registered op alone


def test_a_second_implementation_of_the_same_path_is_an_error(cleanup):
    cleanup.append("t_twice")

    @augment_op(name="t_twice", gpu=True)
    def t_twice(img):
        return img

    assert t_twice.paths == ("numpy", "gpu")  # declared: gpu=True
    assert augment_ops.available_paths(t_twice) == ("numpy", "native", "gpu")  # the identity traces
    assert augment_ops.registry.implementation(t_twice, "gpu") is t_twice.fn  # gpu=True: itself
    with pytest.raises(OpRegistrationError, match="already has a 'gpu' implementation"):
        t_twice.implement("gpu")(lambda img: img)
    first = t_twice.implement("native")(lambda img: img)
    with pytest.raises(OpRegistrationError, match="already has a 'native' implementation"):
        t_twice.implement("native")(lambda img: img[::-1])
    assert augment_ops.registry.implementation(t_twice, "native") is first  # not overwritten
    with pytest.raises(TypeError):
        t_twice.impls["native"] = first  # read-only: declared through implement() only


def test_op_paths_are_the_declared_ones_and_available_paths_adds_the_traced_native(cleanup):
    cleanup.append("t_declared_only")

    @augment_op(name="t_declared_only")
    def t_declared_only(img):
        return img[:, ::-1]

    assert t_declared_only.paths == ("numpy",)  # nothing declared: the registry does not trace
    assert augment_ops.available_paths(t_declared_only) == ("numpy", "native")
    assert augment_ops.explain(t_declared_only) == "native (traced)"


def test_the_registry_never_imports_the_tracer():
    import ast
    from pathlib import Path

    source = Path(augment_ops.registry.__file__)
    imported = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
            imported.update(f"{node.module}.{a.name}" for a in node.names)
    assert not {m for m in imported if m.startswith(("augment_ops.trace", "augment_ops.paths"))}
