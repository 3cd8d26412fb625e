"""The native path's per-sample check (:mod:`augment_ops.trace.sample_gate`): numpy evaluates it
for the whole batch in one Python call, inside the scalar stage's when the op has one, and it
raises what the numpy path raises, naming the sample, before any operator of the op reads the
image; a batch without a failing sample goes through with numpy's pixels."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pattern_image, scalar_draws, sized_dataset, unregistered

import extsrc
from augment_ops.lower_dali import check_layout, emit, uses_stage
from augment_ops.trace import trace_op
from extsrc.errors import OpError


@unregistered()
def g_drawn_rows(img, rng, size: int = 4):
    """A drawn crop of ``size`` rows (numpy raises on a shorter image), scaled by a gain of the
    image's height that only numpy computes exactly, so the scalar stage computes it."""
    h = img.shape[0]
    y = int(rng.integers(0, h - size + 1))
    gain = np.float32(1.0 / (1.0 + np.exp(h / 7.0)))
    return (img[y:y + size].astype(np.float32) * gain).astype(np.uint8)


@unregistered()
def g_bright_drawn_rows(img, rng, size: int = 4):
    """g_drawn_rows, with a check of the pixel values first."""
    if img.max() > 250:
        raise ValueError("too bright")
    h = img.shape[0]
    y = int(rng.integers(0, h - size + 1))
    gain = np.float32(1.0 / (1.0 + np.exp(h / 7.0)))
    return (img[y:y + size].astype(np.float32) * gain).astype(np.uint8)


@unregistered()
def g_left_half(img):
    """An output empty on an image one pixel wide."""
    return img[:, : img.shape[1] // 2]


@unregistered()
def g_patch(img, rng, size: int = 4):
    """A drawn square set to 0: numpy's guards (an image below ``size``) read the sizes alone."""
    h, w = img.shape[:2]
    y = rng.integers(0, h - size + 1)
    x = rng.integers(0, w - size + 1)
    out = img.copy()
    out[y:y + size, x:x + size] = 0
    return out


@unregistered()
def g_drawn_margin(img, rng):
    """A guard that reads a draw."""
    y = int(rng.integers(0, 3))
    if img.shape[0] - y < 2:
        raise ValueError("no rows left")
    return img[::-1]


def _pipeline(op, imgs, calls):
    """``op``'s traced graph on one batch of ``imgs``, with a check that records its rows and
    info rows and raises; the built pipeline."""
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    def check(rows, infos):
        calls.append(([tuple(int(v) for v in r) for r in rows], [int(i[0]) for i in infos]))
        raise ValueError("a sample fails")

    traced = trace_op(op)
    n = len(imgs)
    values = scalar_draws(traced, 1, 2, np.arange(n), np.zeros(n, np.int64)) if op.random \
        else []
    info = np.array([[10 + k, 0, 0] for k in range(n)], np.int64)
    pipe = Pipeline(batch_size=n, num_threads=1, device_id=None, prefetch_queue_depth=1)
    with pipe:
        img, inf = fn.external_source(source=lambda: (imgs, info), num_outputs=2, batch=True,
                                      layout=["HWC", ""])
        given = [fn.external_source(source=(lambda v: lambda: v)(a), batch=True)
                 for a in values]
        pipe.set_outputs(*emit(traced, img, sample_values=given, info=inf, check=check))
    pipe.build()
    return pipe


def _operators(pipe) -> list[str]:
    return [o.name for o in pipe._ops if o._op is not None]


@pytest.mark.parametrize("op, pythons", [(g_drawn_rows, 1), (g_bright_drawn_rows, 2),
                                         (g_left_half, 1)], ids=lambda v: getattr(v, "name", v))
def test_the_check_takes_one_python_call_and_no_conditional(op, pythons):
    # g_drawn_rows: the check rides in the stage's call; a pixel check is computed by DALI
    # operators that may read the stage's outputs, so it has a call of its own.
    assert uses_stage(trace_op(op)) == (op is not g_left_half)
    imgs = [pattern_image(k, 6 + k, 5) % 240 for k in range(3)]
    names = _operators(_pipeline(op, imgs, []))
    assert sum("PythonFunction" in n for n in names) == pythons, names
    assert not any("Split" in n or "Merge" in n for n in names), names


@pytest.mark.parametrize("op, reads_draws", [(g_patch, False), (g_drawn_margin, True)],
                         ids=lambda v: getattr(v, "name", v))
def test_the_checks_call_takes_only_the_draws_its_conditions_read(op, reads_draws):
    # Each input of the call is marshalled per sample on every batch.
    assert not uses_stage(trace_op(op))
    imgs = [pattern_image(k, 6 + k, 5) for k in range(3)]
    pipe = _pipeline(op, imgs, [])
    (call,) = [o for o in pipe._ops if o._op is not None and "PythonFunction" in o.name]
    sources = [i.name for i in call.inputs if "ExternalSource" in i.name]
    assert len(sources) == 1 + reads_draws, sources  # the info rows, and the draw read
    calls: list = []
    short = [pattern_image(0, 6, 5), pattern_image(1, 3 if op is g_patch else 1, 5)]
    with pytest.raises(Exception, match="a sample fails"):
        _pipeline(op, short, calls).run()
    assert calls[0][1] == [11]


@pytest.mark.parametrize("op", [g_drawn_rows, g_bright_drawn_rows, g_left_half],
                         ids=lambda v: v.name)
def test_the_check_gets_the_failing_samples_alone_with_their_rows(op):
    calls: list = []
    short = (2, 5) if op is not g_left_half else (5, 1)
    sizes = [(6, 5), short, (7, 4)]
    imgs = [pattern_image(k, h, w) % 240 for k, (h, w) in enumerate(sizes)]
    with pytest.raises(Exception, match="a sample fails"):
        _pipeline(op, imgs, calls).run()
    ((rows, infos),) = calls
    assert infos == [11]  # the short image alone, with its info row
    (row,) = rows
    assert row[:3] == (*short, 3)
    if op is g_left_half:
        assert row[3:] == (5, 0, 3)  # the empty output's shape
    else:
        layout = check_layout(trace_op(op))
        flags = row[3:3 + layout.guards]
        assert flags[-1] == 1 and not any(flags[:-1]), row  # the drawn crop's guard alone
    calls.clear()
    # no failing sample: the check is not called, the pixels are numpy's
    ok = [pattern_image(k, h, w) % 240 for k, (h, w) in enumerate([(6, 5), (9, 3), (7, 4)])]
    outs = _pipeline(op, ok, calls).run()
    assert calls == []
    traced = trace_op(op)
    if not op.random:
        for k, img in enumerate(ok):
            np.testing.assert_array_equal(np.array(outs[0][k]), op.apply(img)[0])
    else:
        assert [np.array(outs[0][k]).shape for k in range(3)] == [(4, 5, 3), (4, 3, 3),
                                                                  (4, 4, 3)]
        assert traced.guards


@pytest.mark.parametrize("op, bad, message", [
    (g_drawn_rows, (2, 5), "ValueError"),
    (g_bright_drawn_rows, (2, 5), "ValueError"),
    (g_bright_drawn_rows, "bright", "too bright"),
], ids=["staged", "staged-pixel-check-short", "staged-pixel-check-bright"])
def test_the_loader_raises_numpys_error_naming_the_sample(tmp_path, op, bad, message):
    sizes = [(6, 5), (8, 4), (5, 5)]
    manifest = sized_dataset(tmp_path, sizes if bad == "bright" else [*sizes[:2], bad])
    if bad == "bright":
        from PIL import Image

        Image.fromarray(np.full((5, 5, 3), 255, np.uint8)).save(tmp_path / "img2.png")
    with extsrc.Loader(manifest, batch_size=3, ops=[op], device="cpu", shuffle=False,
                       op_runtime=extsrc.OpRuntime(op_path="native"),
                       workers=extsrc.Workers(num_workers=0)) as loader:
        assert loader.op_paths == {op.name: "native"}
        with pytest.raises(OpError, match=message) as e:
            next(iter(loader))
    text = str(e.value)
    assert "img2.png" in text and "line 4" in text and "[native path]" in text, text


@unregistered()
def g_noise_rows(img, rng):
    """Noise of a shape computed from the image's height: numpy raises for a negative one."""
    h, w = img.shape[:2]
    noise = rng.normal(0, 1, (h - 5, w, 3))
    return np.clip(img[5:] + noise, 0, 255).astype(np.uint8)


@unregistered()
def g_new_rows(img):
    """An output of a third of the image's rows that never reads its pixels."""
    h, w = img.shape[:2]
    return np.full((h // 3, w, 3), 7, np.uint8)


@unregistered()
def g_top_max(img):
    """A maximum over the top third: numpy raises for an image under 3 rows."""
    h = img.shape[0]
    if img[: h // 3].max() > 250:
        raise ValueError("bright top")
    return img // 2


@pytest.mark.parametrize("op, short", [(g_noise_rows, (3, 5)), (g_new_rows, (2, 5)),
                                       (g_top_max, (2, 5))], ids=lambda v: getattr(v, "name", ""))
def test_no_operator_of_the_op_runs_before_the_check(op, short):
    # The noise's shape, np.full's shape and the reduction read the checked sizes: the check
    # raises for the short image, not DALI's operators (nor a crash), even where no output
    # reads the image's pixels.
    calls: list = []
    imgs = [pattern_image(k, h, w) % 240 for k, (h, w) in enumerate([(9, 5), short, (8, 4)])]
    with pytest.raises(Exception, match="a sample fails"):
        _pipeline(op, imgs, calls).run()
    ((_, infos),) = calls
    assert infos == [11]


def test_a_maximum_over_an_empty_region_raises_numpys_error(tmp_path):
    traced = trace_op(g_top_max)
    message = "zero-size array to reduction operation maximum which has no identity"
    assert [g.message for g in traced.guards] == [message, "bright top"]
    with pytest.raises(ValueError, match=message):
        g_top_max.apply(pattern_image(0, 2, 5))
    manifest = sized_dataset(tmp_path, [(6, 5), (8, 4), (2, 5)])
    with extsrc.Loader(manifest, batch_size=3, ops=[g_top_max], device="cpu", shuffle=False,
                       op_runtime=extsrc.OpRuntime(op_path="native"),
                       workers=extsrc.Workers(num_workers=0)) as loader:
        with pytest.raises(OpError, match="zero-size array") as e:
            next(iter(loader))
    assert "img2.png" in str(e.value) and "line 4" in str(e.value)
