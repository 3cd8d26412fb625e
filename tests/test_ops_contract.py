"""One contract harness for every registered op, plus grid2x2 against an independent reference.

The op list is read at import time, after ``augment_ops`` (and its built-ins) is imported, so an op
registered by the package is covered the moment it exists. Each op runs with its own parameters
(:data:`PARAMS`: ``rot90`` with every ``k``, crops with several sizes); a built-in op without an
entry there fails :func:`test_every_builtin_has_parameters`.
"""

from __future__ import annotations

import numpy as np
import pytest

import augment_ops
from augment_ops import OpContractError

#: The parameters each built-in op is checked with (one dict per variant; ``{}``: defaults).
#: Every random variant must still depend on the seed at 101x99.
PARAMS: dict[str, list[dict]] = {
    "grid2x2": [{}],
    "hflip": [{}],
    "vflip": [{}],
    "grayscale": [{}],
    "rot90": [{"k": k} for k in (0, 1, 2, 3, -1, 5)],
    "random_hflip": [{"p": p} for p in (0.25, 0.5, 0.75)],
    "random_crop": [{"size": s} for s in (1, 5, 64)],
    "center_crop": [{"size": s} for s in (1, 6, 64, 200)],
}


def is_builtin(op) -> bool:
    return getattr(op.fn, "__module__", None) == "augment_ops.builtin"


def variants(ops) -> list:
    """Every op with each of its parameter sets (ops registered outside the package: defaults)."""
    return [op.with_params(**p) if p else op for op in ops for p in PARAMS.get(op.name, [{}])]


def variant_id(op) -> str:
    return op.name + "".join(f"[{k}={v}]" for k, v in op.params)


REGISTERED = list(augment_ops.iter_ops())
OPS = variants(REGISTERED)
OP_IDS = [variant_id(op) for op in OPS]
ODD_SHAPES = [(101, 99, 3), (7, 5, 3)]
SEEDS = range(8)


def sample_image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def shapes_for(op) -> list[tuple[int, int, int]]:
    return [*ODD_SHAPES, (op.min_size, op.min_size, 3)]


def run(op, img: np.ndarray, seed: int = 0) -> tuple[np.ndarray, ...]:
    return op.apply(img, np.random.default_rng(seed) if op.random else None)


def assert_same_outputs(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_builtins_are_registered():
    assert {"grid2x2", "hflip", "vflip", "rot90", "grayscale", "random_hflip", "random_crop",
            "center_crop"} <= {op.name for op in REGISTERED}


def test_every_builtin_has_parameters():
    missing = sorted(op.name for op in REGISTERED if is_builtin(op) and op.name not in PARAMS)
    assert not missing, f"add the built-in op(s) {missing} to PARAMS with their own parameters"
    assert {"k=2", "k=3"} <= {f"{k}={v}" for op in OPS if op.name == "rot90" for k, v in op.params}


def test_parameters_change_the_result():
    # The table is no decoration: different parameters give different outputs.
    img = sample_image(ODD_SHAPES[0])
    for name in ("rot90", "center_crop", "random_crop"):
        outs = [run(op, img)[0] for op in OPS if op.name == name]
        assert len({(o.shape, o.tobytes()) for o in outs}) > 1, name


@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_contract(op):
    for shape in shapes_for(op):
        img = sample_image(shape)
        before = img.copy()
        outs = run(op, img)
        np.testing.assert_array_equal(img, before, err_msg=f"{op.name} mutated its input {shape}")
        # Count, dtype, rank and non-emptiness as declared.
        assert isinstance(outs, tuple) and len(outs) == op.num_outputs, shape
        for k, o in enumerate(outs):
            assert isinstance(o, np.ndarray), (shape, k)
            assert o.dtype == op.dtype, (shape, k, o.dtype)
            assert o.ndim == op.ndim, (shape, k, o.shape)
            assert o.size > 0, (shape, k, o.shape)
            assert o.flags.c_contiguous, (shape, k)


@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_deterministic_for_same_seed(op):
    for shape in shapes_for(op):
        img = sample_image(shape)
        for seed in (0, 12345):
            assert_same_outputs(run(op, img, seed), run(op, img.copy(), seed))


RANDOM_OPS = [op for op in OPS if op.random]
SIZED_OPS = [op for op in REGISTERED if op.min_size > 1]


@pytest.mark.parametrize("op", RANDOM_OPS, ids=[variant_id(op) for op in RANDOM_OPS])
def test_random_op_depends_on_seed(op):
    img = sample_image(ODD_SHAPES[0])
    first = run(op, img, SEEDS[0])
    for seed in SEEDS[1:]:
        other = run(op, img, seed)
        if any(a.shape != b.shape or not np.array_equal(a, b)
               for a, b in zip(first, other, strict=True)):
            return
    pytest.fail(f"random op '{op.name}' gave the same output for seeds {list(SEEDS)}")


@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_non_contiguous_input(op):
    for shape in shapes_for(op):
        img = sample_image(shape)
        h, w, c = shape
        big = np.zeros((2 * h, 3 * w, c), dtype=np.uint8)
        big[::2, ::3] = img
        strided = big[::2, ::3]
        reversed_view = np.ascontiguousarray(img[::-1, ::-1])[::-1, ::-1]
        for view in (strided, reversed_view):
            assert not view.flags.c_contiguous or h * w == 1
            np.testing.assert_array_equal(view, img)
            assert_same_outputs(run(op, view, 7), run(op, img.copy(), 7))


@pytest.mark.parametrize("op", SIZED_OPS, ids=[op.name for op in SIZED_OPS])
def test_too_small_refused(op):
    s = op.min_size - 1
    with pytest.raises(OpContractError, match=rf"'{op.name}' needs images of at least"):
        run(op, sample_image((s, op.min_size + 3, 3)))
    with pytest.raises(OpContractError, match=rf"'{op.name}' needs images of at least"):
        run(op, sample_image((op.min_size + 3, s, 3)))


# --- grid2x2 against an independent reference -------------------------------------------------

GRID_SHAPES = [(2, 2, 3), (2, 3, 3), (3, 2, 3), (7, 5, 3), (33, 47, 3), (101, 99, 3), (64, 64, 3),
               (5, 9, 1)]


def grid_reference(img: np.ndarray) -> list[np.ndarray]:
    """Quadrants cut at h // 2 and w // 2, built pixel by pixel (no slicing shared with the op)."""
    h, w = img.shape[:2]
    top, left = h // 2, w // 2
    rows = {"t": range(0, top), "b": range(top, h)}
    cols = {"l": range(0, left), "r": range(left, w)}
    tiles = []
    for r, c in (("t", "l"), ("t", "r"), ("b", "l"), ("b", "r")):
        tile = np.empty((len(rows[r]), len(cols[c]), img.shape[2]), dtype=img.dtype)
        for ty, y in enumerate(rows[r]):
            for tx, x in enumerate(cols[c]):
                tile[ty, tx] = img[y, x]
        tiles.append(tile)
    return tiles


@pytest.mark.parametrize("shape", GRID_SHAPES, ids=[f"{s[0]}x{s[1]}x{s[2]}" for s in GRID_SHAPES])
def test_grid2x2_matches_reference(shape):
    op = augment_ops.get("grid2x2")
    img = sample_image(shape, seed=3)
    outs = op.apply(img)
    ref = grid_reference(img)
    h, w = shape[:2]
    expected_shapes = [(h // 2, w // 2), (h // 2, w - w // 2), (h - h // 2, w // 2),
                       (h - h // 2, w - w // 2)]
    assert [o.shape[:2] for o in outs] == expected_shapes
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        np.testing.assert_array_equal(o, r, err_msg=f"tile {k}")
    # The four tiles reassemble the image exactly.
    top = np.concatenate([outs[0], outs[1]], axis=1)
    bottom = np.concatenate([outs[2], outs[3]], axis=1)
    np.testing.assert_array_equal(np.concatenate([top, bottom], axis=0), img)


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (7, 5), (33, 47), (101, 99)])
def test_grid2x2_tiles_are_distinct_regions_covering_every_pixel_once(shape):
    h, w = shape
    # Each pixel holds its own flat position, so every tile names exactly which pixels it took.
    coords = np.arange(h * w, dtype=np.int64).reshape(h, w, 1)
    tiles = augment_ops.get("grid2x2")(coords)
    assert len(tiles) == 4
    taken = [set(t.ravel().tolist()) for t in tiles]
    assert all(len(t) == tile.size for t, tile in zip(taken, tiles, strict=True))
    for a in range(4):
        for b in range(a + 1, 4):
            assert not taken[a] & taken[b], f"tiles {a} and {b} overlap"
    assert sorted(np.concatenate([t.ravel() for t in tiles]).tolist()) == list(range(h * w))
    # And in the documented places: top-left holds pixel (0, 0), bottom-right pixel (h-1, w-1).
    assert tiles[0][0, 0, 0] == 0
    assert tiles[1][0, 0, 0] == w // 2
    assert tiles[2][0, 0, 0] == (h // 2) * w
    assert tiles[3][-1, -1, 0] == h * w - 1
