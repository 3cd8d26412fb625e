"""The loader's own reliability (issue 13, round two): files DALI refuses although Pillow decodes
them, named by line; op declarations DALI cannot resize, refused at construction; every public
argument of ``Loader`` checked at construction with a message naming it; every field of a resume
state checked before it is used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import pattern_image, png_interlaced, png_short_idat, write_dataset

import extsrc.imagecheck
from extsrc import Loader
from extsrc.doctor import validate
from extsrc.errors import BadImageError

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")


def with_file(tmp_path: Path, data: bytes, n: int = 8, at: int = 5) -> tuple[Path, int, Path]:
    """``n`` good PNGs with manifest entry ``at`` replaced by ``data``; (manifest, the entry's
    1-based manifest line, the file)."""
    manifest = write_dataset(tmp_path, n)
    bad = tmp_path / "images" / f"{at:05d}.png"
    bad.write_bytes(data)
    return manifest, at + 2, bad  # a header line, then 1-based


def run_epoch(loader: Loader) -> list[int]:
    """The manifest indices of one epoch, pad repeats left out."""
    with loader:
        return [i for b in loader
                for i, pad in zip(b["index"].tolist(), b["is_pad"].tolist(), strict=True)
                if not pad]


# -- case 10: a PNG that Pillow decodes but DALI cannot ------------------------------------------


def test_case10_short_png_data_found_by_validate(tmp_path):
    manifest, line, bad = with_file(tmp_path, png_short_idat())
    report = validate(manifest, n_jobs=1, progress=False)
    assert [(p.line, p.path, p.reason) for p in report.problems] == [(line, str(bad), "truncated")]
    assert "Not enough image data" in report.problems[0].message
    # the header checks alone cannot see it (every chunk and CRC is intact)
    assert validate(manifest, decode=False, n_jobs=1, progress=False).problems == ()


@pytest.mark.parametrize("workers", [0, 2])
def test_case10_loader_names_the_line_and_file(tmp_path, workers):
    manifest, line, bad = with_file(tmp_path, png_short_idat())
    loader = Loader(manifest, batch_size=2, shuffle=False, resize=16, num_workers=workers,
                    num_threads=1)
    with pytest.raises(BadImageError, match=r"line 7: .*00005\.png: DALI could not decode") as e:
        run_epoch(loader)
    assert (e.value.line, e.value.path, e.value.reason) == (line, str(bad), "truncated")
    assert "Pillow decodes every file" not in str(e.value)


def test_case10_named_from_dali_sample_number_when_no_check_finds_it(tmp_path, monkeypatch):
    """A file DALI refuses and every check of ours passes: DALI's "sample #k" names it."""
    monkeypatch.setattr(extsrc.imagecheck, "_png_data_check", lambda data: None)
    manifest, line, bad = with_file(tmp_path, png_short_idat())
    loader = Loader(manifest, batch_size=4, shuffle=False, resize=16, num_workers=0,
                    num_threads=1)
    with pytest.raises(BadImageError, match=r"sample #1 of the batch") as e:
        run_epoch(loader)
    assert (e.value.line, e.value.path, e.value.reason) == (line, str(bad), "corrupt")


def test_case10_skip_leaves_the_file_out_and_names_it(tmp_path):
    manifest, line, _ = with_file(tmp_path, png_short_idat())
    with pytest.warns(UserWarning, match=r"skipping 1 of 8 samples.*00005\.png"):
        loader = Loader(manifest, batch_size=2, shuffle=False, resize=16, num_workers=0,
                        num_threads=1, on_error="skip",
                        validate_kwargs={"n_jobs": 1, "progress": False})
    assert [(p.line, p.reason) for p in loader.skipped] == [(line, "truncated")]
    assert sorted(run_epoch(loader)) == [0, 1, 2, 3, 4, 6, 7]


def test_case10_whole_and_interlaced_pngs_still_pass(tmp_path):
    """The count follows the header (bit depth, colour type, Adam7): real PNGs are not refused,
    and DALI decodes the interlaced one as Pillow does."""
    img = pattern_image(4, 33, 47)
    manifest, _, _ = with_file(tmp_path, png_interlaced(img), at=0)
    assert validate(manifest, n_jobs=1, progress=False).problems == ()
    with Loader(manifest, batch_size=1, shuffle=False, num_workers=0, num_threads=1) as loader:
        first = next(iter(loader))
    assert np.array_equal(first["image"][0].numpy(), img)


# -- case 11: an op declaring what DALI's resize cannot take -------------------------------------


@pytest.fixture(scope="module")
def resize_ops():
    """Ops declaring each kind of output: float64 and rank 2 (DALI's resize refuses them),
    float32 and int16 (it takes them)."""
    from augment_ops import augment_op, unregister

    made = {
        "r11_f64": augment_op(name="r11_f64", dtype=np.float64)(lambda img: img.astype(np.float64)),
        "r11_gray": augment_op(name="r11_gray", ndim=2)(lambda img: img[..., 0].copy()),
        "r11_f32": augment_op(name="r11_f32", dtype=np.float32)(lambda img: img.astype(np.float32)),
        "r11_i16": augment_op(name="r11_i16", dtype=np.int16)(lambda img: img.astype(np.int16)),
    }
    yield made
    for name in made:
        unregister(name)


@pytest.mark.parametrize(("where", "op", "match"), [
    ("ops", "r11_f64", r"op 'r11_f64' \(in ops\) declares float64 outputs, but resize=\(16, 16\)"
                       r".*takes only uint8, uint16, int16, float32; declare dtype=np.float32"),
    ("transforms", "r11_f64", r"op 'r11_f64' \(in transforms\) declares float64"),
    ("ops", "r11_gray", r"op 'r11_gray' \(in ops\) declares rank-2 outputs .*HWC"),
    ("transforms", "r11_gray", r"op 'r11_gray' \(in transforms\) declares rank-2"),
])
def test_case11_unresizable_op_refused_at_construction(tmp_path, resize_ops, where, op, match):
    manifest = write_dataset(tmp_path, 4)
    with pytest.raises(ValueError, match=match):
        Loader(manifest, batch_size=2, resize=16, num_workers=0, num_threads=1, **{where: [op]})


@pytest.mark.parametrize("op", ["r11_f32", "r11_i16"])
def test_case11_resizable_dtypes_still_run(tmp_path, resize_ops, op):
    manifest = write_dataset(tmp_path, 4)
    with Loader(manifest, batch_size=2, resize=(16, 12), ops=[op], num_workers=0,
                num_threads=1) as loader:
        batch = next(iter(loader))
    out = batch[f"{op}_0"]
    assert tuple(out.shape) == (2, 16, 12, 3)
    assert str(out.dtype) == f"torch.{resize_ops[op].dtype.name}"


def test_case11_float64_without_resize_runs(tmp_path, resize_ops):
    """Nothing resizes the op's output: float64 reaches torch as declared."""
    manifest = write_dataset(tmp_path, 2, size=(20, 20))
    with Loader(manifest, batch_size=1, ops=["r11_f64"], num_workers=0, num_threads=1) as loader:
        batch = next(iter(loader))
    assert str(batch["r11_f64_0"].dtype) == "torch.float64"
