"""A native op's sizes come from the files' headers (``fn.peek_image_shape`` of the encoded
bytes), so that its scalars and check need not wait for the decoder. The decoder turns images by
their EXIF orientation; the sizes must be those of the turned image, or a crop would read the
wrong rows and a check would pass or fail the wrong sample. Real JPEG and PNG files with every
orientation, through a loader on the native path, against the op applied by numpy to the image
the loader decoded."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from helpers import pattern_image, unregistered
from PIL import Image

import extsrc
from augment_ops.trace import trace_op
from extsrc.errors import OpError
from extsrc.ops_runtime.seeding import counter_rng, name_salt

SEED = 5


@unregistered()
def h_left_third(img):
    """The left third: empty, which the loader refuses, for an image under 3 columns."""
    return img[:, : img.shape[1] // 3]


@unregistered()
def h_crop(img, rng):
    """A drawn 4x6 crop (numpy raises on an image under 4 rows or 6 columns)."""
    h, w = img.shape[:2]
    y = int(rng.integers(0, h - 4 + 1))
    x = int(rng.integers(0, w - 6 + 1))
    return img[y:y + 4, x:x + 6]


@unregistered()
def h_drawn_rows(img, rng, size: int = 4):
    """A drawn band of ``size`` rows scaled by a gain of the height only numpy computes exactly,
    so that the scalar stage computes the band and the gain."""
    h = img.shape[0]
    y = int(rng.integers(0, h - size + 1))
    gain = np.float32(1.0 / (1.0 + np.exp(h / 7.0)))
    return (img[y:y + size].astype(np.float32) * gain).astype(np.uint8)


def _encoded(img: np.ndarray, fmt: str, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    # PNG keeps the pixels exactly; JPEG is the format phones write orientations into.
    Image.fromarray(img).save(out, fmt, exif=exif.tobytes(), **({"quality": 95} if
                                                                 fmt == "JPEG" else {}))
    return out.getvalue()


def _dataset(root: Path, sizes: list[tuple[int, int, int, str]]) -> Path:
    """A manifest of images of (height, width) as stored, with an EXIF orientation, in a
    format."""
    lines = ["path,label"]
    for i, (h, w, orientation, fmt) in enumerate(sizes):
        name = f"img{i}.{fmt.lower().replace('jpeg', 'jpg')}"
        (root / name).write_bytes(_encoded(pattern_image(i, h, w), fmt, orientation))
        lines.append(f"{name},{i}")
    (root / "m.csv").write_text("\n".join(lines) + "\n")
    return root / "m.csv"


ALL_ORIENTATIONS = [(9, 14, o, fmt) for fmt in ("JPEG", "PNG") for o in range(1, 9)]


def _check(tmp_path: Path, op, device: str) -> None:
    assert trace_op(op) is not None
    manifest = _dataset(tmp_path, ALL_ORIENTATIONS)
    with extsrc.Loader(manifest, batch_size=4, ops=[op], resize=None, device=device, seed=SEED,
                       shuffle=False, op_runtime=extsrc.OpRuntime(op_path="native"),
                       workers=extsrc.Workers(num_workers=0)) as loader:
        assert loader.op_paths == {op.name: "native"}
        epoch = loader.epoch
        seen = 0
        for batch in loader:
            for k, index in enumerate(batch["index"].tolist()):
                decoded = batch["image"][k].cpu().numpy()
                turned = ALL_ORIENTATIONS[index][2] >= 5  # 5-8 swap height and width
                assert decoded.shape[:2] == ((14, 9) if turned else (9, 14)), index
                rng = counter_rng(SEED, epoch, index, name_salt(op.name)) if op.random else None
                (ref,) = op.apply(decoded, rng)
                got = batch[f"{op.name}_0"][k].cpu().numpy()
                np.testing.assert_array_equal(got, ref, err_msg=f"sample {index}")
                seen += 1
    assert seen == len(ALL_ORIENTATIONS)


@pytest.mark.parametrize("op", [h_left_third, h_crop, h_drawn_rows],
                         ids=lambda op: op.name)
def test_sizes_follow_the_exif_orientation(tmp_path, op):
    _check(tmp_path, op, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("op", [h_left_third, h_crop, h_drawn_rows],
                         ids=lambda op: op.name)
def test_sizes_follow_the_exif_orientation_on_gpu(tmp_path, op):
    # Mixed decoding (nvJPEG, and the hardware decoder where the GPU has one) turns the image.
    _check(tmp_path, op, "cuda")


def _native_loader(manifest: Path, op, batch_size: int) -> extsrc.Loader:
    return extsrc.Loader(manifest, batch_size=batch_size, ops=[op], resize=None, device="cpu",
                         shuffle=False, op_runtime=extsrc.OpRuntime(op_path="native"),
                         workers=extsrc.Workers(num_workers=0))


def _first_batch_error(manifest: Path, op, kind: type) -> Exception:
    """The error of type ``kind`` the first batch of a native loader of ``op`` raises."""
    with _native_loader(manifest, op, 3) as loader, pytest.raises(kind) as e:
        next(iter(loader))
    return e.value


def _first_error(manifest: Path, op) -> Exception | None:
    with _native_loader(manifest, op, 1) as loader:
        try:
            for _ in loader:
                pass
        except Exception as e:  # compared below
            return e
    return None


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_the_check_reads_the_turned_sizes(tmp_path, fmt):
    # Stored 3 high and 14 wide, turned to 14 high and 3 wide: h_drawn_rows needs 4 rows, which
    # the turned image has; h_crop needs 6 columns, which it has not.
    manifest = _dataset(tmp_path, [(9, 14, 1, fmt), (3, 14, 6, fmt)])
    assert _first_error(manifest, h_drawn_rows) is None
    err = _first_error(manifest, h_crop)
    assert isinstance(err, OpError), err
    assert "img1." in str(err) and "line 3" in str(err) and "high <= 0" in str(err), err


@unregistered()
def h_inverted(img):
    """Reads no size: takes no header shape."""
    return 255 - img


def test_only_ops_that_read_sizes_take_the_header_shapes():
    from augment_ops.lower_dali import reads_sizes

    assert not reads_sizes(trace_op(h_inverted), gpu=False)
    assert all(reads_sizes(trace_op(op), gpu=False)
               for op in (h_left_third, h_crop, h_drawn_rows))


@pytest.fixture
def header_disagrees(monkeypatch):
    """DALI's header reader made to disagree with its decoder for the image stored 8x14 at
    position 1: ``swap`` gives 14x8 (as many pixels), ``row`` 10x14. No real file was found
    that does this (EXIF orientations, CMYK, 16-bit, animated, multi-page files all agree);
    this is what the loader does if one ever does."""
    from nvidia.dali import fn, types

    real = fn.peek_image_shape
    how = {"height": 8}

    def peek(encoded, **kw):
        shape = real(encoded, **kw)
        # The files of the test are 9x14 except the culprit, stored how["height"] high.
        culprit = (shape[0] == how["height"])
        wrong = fn.stack(shape[1], shape[0], shape[2]) if how["kind"] == "swap" else \
            shape + types.Constant(np.array([2, 0, 0], np.int64))
        return fn.cast(culprit, dtype=types.INT64) * (wrong - shape) + shape

    monkeypatch.setattr(fn, "peek_image_shape", peek)
    return how


@pytest.mark.parametrize("kind", ["swap", "row"])
@pytest.mark.parametrize("op", [h_left_third, h_crop, h_drawn_rows], ids=lambda op: op.name)
def test_a_header_unlike_the_decoded_image_stops_the_loader_naming_the_file(
        tmp_path, header_disagrees, kind, op):
    from extsrc.errors import BadImageError

    header_disagrees["kind"] = kind
    manifest = _dataset(tmp_path, [(9, 14, 1, "PNG"), (8, 14, 1, "PNG"), (9, 14, 1, "PNG")])
    err = _first_batch_error(manifest, op, BadImageError)
    assert (err.line, err.reason) == (3, "header_mismatch"), str(err)
    assert err.path.endswith("img1.png") and "8x14x3" in str(err), str(err)


def test_a_check_failing_on_the_header_sizes_names_the_header_not_the_op(
        tmp_path, header_disagrees):
    # Stored 5x8, which h_crop takes; its header made to say 8x5, which h_crop's check refuses.
    # The check reads the header's sizes so as not to wait for the decoder: it fails first,
    # and the loader finds the file's header unlike its image.
    from extsrc.errors import BadImageError

    header_disagrees.update(kind="swap", height=5)
    manifest = _dataset(tmp_path, [(9, 14, 1, "PNG"), (5, 8, 1, "PNG"), (9, 14, 1, "PNG")])
    err = _first_batch_error(manifest, h_crop, BadImageError)
    assert (err.line, err.reason) == (3, "header_mismatch"), str(err)
    assert "5x8x3" in str(err) and "8x5x3" in str(err), str(err)


def test_an_op_reading_no_size_takes_no_header_check(tmp_path, header_disagrees):
    # The culprit's header disagrees with its image, but no op reads sizes: nothing reads the
    # header, and nothing stops.
    header_disagrees["kind"] = "swap"
    manifest = _dataset(tmp_path, [(9, 14, 1, "PNG"), (8, 14, 1, "PNG")])
    with _native_loader(manifest, h_inverted, 1) as loader:
        assert loader.op_paths == {h_inverted.name: "native"}
        shapes = [tuple(b[f"{h_inverted.name}_0"].shape[1:]) for b in loader]
    assert shapes == [(9, 14, 3), (8, 14, 3)]


def test_a_mismatch_the_cpu_does_not_see_names_the_batch(tmp_path, header_disagrees,
                                                          monkeypatch):
    # As where only the GPU's decoder disagrees with the header: decoding the files again on
    # the CPU finds nothing, and the error names the batch and says what to do.
    import extsrc.validation.header_sizes as header_sizes
    from extsrc.errors import PipelineError

    header_disagrees["kind"] = "swap"
    monkeypatch.setattr(header_sizes, "sizes_unlike_headers", lambda blobs: [])
    manifest = _dataset(tmp_path, [(9, 14, 1, "PNG"), (8, 14, 1, "PNG"), (9, 14, 1, "PNG")])
    text = str(_first_batch_error(manifest, h_left_third, PipelineError))
    assert "another shape than its header" in text, text
    assert "lines 2, 3, 4" in text and "op_path='numpy'" in text, text
