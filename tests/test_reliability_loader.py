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

import extsrc.errors
import extsrc.sources.imagecheck
from extsrc import BadFiles, Loader, Sampling, Workers
from extsrc.errors import BadImageError
from extsrc.loading.options import FLAT, GROUPS
from extsrc.validation.validate import validate

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
    loader = Loader(manifest, batch_size=2, shuffle=False, resize=16,
                    workers=Workers(num_workers=workers, num_threads=1))
    with pytest.raises(BadImageError, match=r"line 7: .*00005\.png: DALI could not decode") as e:
        run_epoch(loader)
    assert (e.value.line, e.value.path, e.value.reason) == (line, str(bad), "truncated")
    assert "Pillow decodes every file" not in str(e.value)


def test_case10_named_from_dali_sample_number_when_no_check_finds_it(tmp_path, monkeypatch):
    """A file DALI refuses and every check of ours passes: DALI's "sample #k" names it."""
    monkeypatch.setattr(extsrc.sources.imagecheck, "_png_data_check", lambda data: None)
    manifest, line, bad = with_file(tmp_path, png_short_idat())
    loader = Loader(manifest, batch_size=4, shuffle=False, resize=16,
                    workers=Workers(num_workers=0, num_threads=1))
    with pytest.raises(BadImageError, match=r"sample #1 of the batch") as e:
        run_epoch(loader)
    assert (e.value.line, e.value.path, e.value.reason) == (line, str(bad), "corrupt")


def test_case10_skip_leaves_the_file_out_and_names_it(tmp_path):
    manifest, line, _ = with_file(tmp_path, png_short_idat())
    with pytest.warns(UserWarning, match=r"skipping 1 of 8 samples.*00005\.png"):
        loader = Loader(manifest, batch_size=2, shuffle=False, resize=16,
                        workers=Workers(num_workers=0, num_threads=1),
                        bad_files=BadFiles(on_error="skip",
                                           validate_kwargs={"n_jobs": 1, "progress": False}))
    assert [(p.line, p.reason) for p in loader.skipped] == [(line, "truncated")]
    assert sorted(run_epoch(loader)) == [0, 1, 2, 3, 4, 6, 7]


def test_case10_whole_and_interlaced_pngs_still_pass(tmp_path):
    """The count follows the header (bit depth, colour type, Adam7): real PNGs are not refused,
    and DALI decodes the interlaced one as Pillow does."""
    img = pattern_image(4, 33, 47)
    manifest, _, _ = with_file(tmp_path, png_interlaced(img), at=0)
    assert validate(manifest, n_jobs=1, progress=False).problems == ()
    with Loader(manifest, batch_size=1, shuffle=False,
                workers=Workers(num_workers=0, num_threads=1)) as loader:
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
        Loader(manifest, batch_size=2, resize=16, workers=Workers(num_workers=0, num_threads=1),
               **{where: [op]})


@pytest.mark.parametrize("op", ["r11_f32", "r11_i16"])
def test_case11_resizable_dtypes_still_run(tmp_path, resize_ops, op):
    manifest = write_dataset(tmp_path, 4)
    with Loader(manifest, batch_size=2, resize=(16, 12), ops=[op],
                workers=Workers(num_workers=0, num_threads=1)) as loader:
        batch = next(iter(loader))
    out = batch[f"{op}_0"]
    assert tuple(out.shape) == (2, 16, 12, 3)
    assert str(out.dtype) == f"torch.{resize_ops[op].dtype.name}"


def test_case11_float64_without_resize_runs(tmp_path, resize_ops):
    """Nothing resizes the op's output: float64 reaches torch as declared."""
    manifest = write_dataset(tmp_path, 2, size=(20, 20))
    with Loader(manifest, batch_size=1, ops=["r11_f64"],
                workers=Workers(num_workers=0, num_threads=1)) as loader:
        batch = next(iter(loader))
    assert str(batch["r11_f64_0"].dtype) == "torch.float64"


# -- class: every public argument of Loader, checked at construction -----------------------------

BIG = 2**21
# (arguments, the exception, what its message must say); a dataset of 8 samples, num_workers=0.
BAD_ARGUMENTS = [
    ({"batch_size": 2.0}, TypeError, r"Loader: batch_size must be an int .*got float 2\.0"),
    ({"batch_size": True}, TypeError, r"batch_size must be an int"),
    ({"batch_size": "4"}, TypeError, r"batch_size must be an int"),
    ({"batch_size": 0}, ValueError, r"batch_size must be >= 1"),
    ({"batch_size": -3}, ValueError, r"batch_size must be >= 1"),
    ({"batch_size": BIG}, ValueError, r"batch_size must be >= 1 and <= 1,048,576"),
    ({"batch_size": 8001}, ValueError,
     r"batch_size=8,001 is more than 1,000 times the 8 sample\(s\) of the manifest"),
    ({"shard_id": 1.0, "num_shards": 2}, TypeError, r"shard_id must be an int"),
    ({"shard_id": 2, "num_shards": 2}, ValueError, r"shard_id must be in \[0, num_shards=2\)"),
    ({"shard_id": -1, "num_shards": 2}, ValueError, r"shard_id must be >= 0"),
    ({"shard_id": 0, "num_shards": 0}, ValueError, r"num_shards must be >= 1"),
    ({"shard_id": 0, "num_shards": BIG}, ValueError, r"num_shards must be >= 1 and <= "),
    ({"shard_id": 0}, ValueError, r"shard_id was given but num_shards was not"),
    ({"shuffle": "no"}, TypeError, r"Loader: shuffle must be True or False, got str 'no'"),
    ({"shuffle": 1}, TypeError, r"shuffle must be True or False"),
    ({"seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*63\)"),
    ({"seed": 1.5}, ValueError, r"seed must be an int in"),
    ({"seed": 2**63}, ValueError, r"seed must be an int in"),
    ({"last_batch": "fill"}, ValueError, r"last_batch must be one of \['pad', 'drop', 'partial'\]"),
    ({"last_batch": None}, ValueError, r"last_batch must be one of"),
    ({"last_batch": 3}, TypeError, r"last_batch must be one of .*got int 3"),
    ({"device": "tpu"}, ValueError, r"device must be None, 'cpu', 'cuda', 'cuda:N'"),
    ({"device": 1.5}, TypeError, r"device must be None, .*got float 1\.5"),
    ({"device": True}, TypeError, r"device must be None.*got a bool"),
    ({"device": -1}, ValueError, r"GPU index must be >= 0"),
    ({"num_workers": -1}, ValueError, r"num_workers must be >= 0 and <= 256"),
    ({"num_workers": 1.5}, TypeError, r"num_workers must be an int or None"),
    ({"num_workers": 10**6}, ValueError, r"num_workers must be >= 0 and <= 256"),
    ({"num_threads": 0}, ValueError, r"num_threads must be >= 1 and <= 1,024"),
    ({"num_threads": 2.0}, TypeError, r"num_threads must be an int or None"),
    ({"start_method": "forkserver"}, ValueError, r"start_method must be one of \[None, 'fork'"),
    ({"start_method": 1}, TypeError, r"start_method must be one of"),
    ({"prefetch_queue_depth": 0}, ValueError, r"prefetch_queue_depth must be >= 1 and <= 64"),
    ({"prefetch_queue_depth": 1.5}, TypeError, r"prefetch_queue_depth must be an int"),
    ({"prefetch_queue_depth": 1000}, ValueError, r"prefetch_queue_depth must be >= 1 and <= 64"),
    ({"op_path": "fast"}, ValueError, r"op_path must be None, one of \['numpy', "),
    ({"op_path": 3}, TypeError, r"op_path must be None, one of"),
    ({"op_path": ["numpy"]}, TypeError, r"op_path must be None, one of .*got list"),
    ({"op_path": {"hflip": "fast"}, "ops": ["hflip"]}, ValueError, r"op_path for 'hflip' must be"),
    ({"op_path": {"hflip": 1}, "ops": ["hflip"]}, TypeError, r"got the entry 'hflip': 1"),
    ({"op_path": {"vflip": "numpy"}, "ops": ["hflip"]}, ValueError,
     r"op_path names op\(s\) \['vflip'\] that the loader does not use"),
    ({"stages": print}, TypeError, r"stages must be a sequence of callables .*wrap one stage"),
    ({"stages": [3]}, TypeError, r"stages must be callables"),
    ({"decoder": "gpu"}, ValueError, r"decoder must be one of \['auto', 'cpu', 'mixed'\]"),
    ({"decoder": "mixed"}, ValueError, r"decoder='mixed' decodes on the GPU"),
    ({"hw_decoder_load": 1.5}, ValueError, r"hw_decoder_load must be None .* in \[0, 1\]"),
    ({"hw_decoder_load": "0.5"}, TypeError, r"hw_decoder_load must be None or a number"),
    ({"on_error": "ignore"}, ValueError, r"on_error must be 'raise' or 'skip', got 'ignore'"),
    ({"on_error": True}, TypeError, r"on_error must be 'raise' or 'skip', got bool"),
    ({"max_pixels": 0}, ValueError, r"max_pixels must be >= 1"),
    ({"max_pixels": 1.5e8}, TypeError, r"max_pixels must be an int or None"),
    ({"max_file_bytes": 0}, ValueError, r"max_file_bytes must be >= 1 \(the largest file read, "
                                        r"in bytes; None: no limit\), got 0"),
    ({"max_file_bytes": "1MB"}, TypeError, r"max_file_bytes must be an int or None"),
    ({"validate_kwargs": {"n_jobs": 1}}, ValueError, r"validate_kwargs is used by on_error='skip'"),
    ({"validate_kwargs": {"bogus": 1}, "on_error": "skip"}, TypeError,
     r"validate_kwargs has unknown option\(s\) \['bogus'\]"),
    ({"validate_kwargs": [1], "on_error": "skip"}, TypeError, r"validate_kwargs must be a dict"),
    ({"watchdog": "yes"}, TypeError, r"watchdog must be True or False"),
    ({"resize": 0}, ValueError, r"resize height must be >= 1 and <= 65,536"),
    ({"resize": 2.5}, TypeError, r"resize must be None, a positive int or \(height, width\)"),
    ({"resize": "16"}, TypeError, r"resize must be None, a positive int"),
    ({"resize": (16,)}, TypeError, r"resize must be None, a positive int"),
    ({"resize": (16, -1)}, ValueError, r"resize width must be >= 1"),
    ({"resize": (16, 2.0)}, TypeError, r"resize width must be an int"),
    ({"resize": 10**6}, ValueError, r"resize height must be >= 1 and <= 65,536"),
    ({"output_map": "abc"}, TypeError, r"output_map must be None or a sequence of output names"),
    ({"output_map": [1, 2]}, TypeError, r"output_map must be a sequence of names \(str\)"),
    ({"output_map": ["image", "index"]}, ValueError, r"\['index'\] are reserved"),
    ({"output_map": ["is_pad", "y"]}, ValueError, r"\['is_pad'\] are reserved"),
    ({"output_map": ["x", "x"]}, ValueError, r"must be distinct non-empty strings"),
    ({"output_map": ["x"]}, ValueError, r"output_map has 1 names but the loader has 2 outputs"),
    ({"ops": 3}, TypeError, r"ops must be an op name, an augment_ops.Op or a sequence"),
    ({"ops": ["nope"]}, KeyError, r"no op named 'nope'"),
    ({"transforms": [3]}, TypeError, r"transforms must be a sequence of op names"),
    ({"transforms": ["grid2x2"]}, ValueError, r"transform 'grid2x2' has 4 outputs"),
]


@pytest.fixture(scope="module")
def eight(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("args"), 8)


@pytest.mark.parametrize(("kwargs", "error", "match"), BAD_ARGUMENTS,
                         ids=[f"{k}={v!r}"[:40] for a, _, _ in BAD_ARGUMENTS
                              for k, v in list(a.items())[:1]])
def test_every_bad_argument_refused_at_construction_naming_it(eight, kwargs, error, match):
    """Each argument in its place: top-level, or in its option group (built inside the check,
    which refuses most bad values itself)."""
    top: dict = {"batch_size": 2, "device": "cpu"}
    fields: dict = {"workers": {"num_workers": 0, "num_threads": 1}}
    for name, value in kwargs.items():
        if name in FLAT:
            fields.setdefault(FLAT[name], {})[name] = value
        else:
            top[name] = value
    with pytest.raises(error, match=match):
        groups = {group: GROUPS[group][0](**f) for group, f in fields.items()}
        Loader(eight, **top, **groups)


def test_manifest_argument_refused_naming_it(tmp_path):
    with pytest.raises(TypeError, match=r"manifest must be an extsrc\.Manifest or a manifest file"):
        Loader(3, batch_size=2)
    with pytest.raises(FileNotFoundError, match="manifest file not found"):
        Loader(tmp_path / "none.csv", batch_size=2)


def test_numpy_integers_are_taken_as_ints(eight):
    """Where an int is due a numpy integer is as good, and is stored as a plain int, so the
    resume state is JSON."""
    import json

    i = np.int64
    loader = Loader(eight, batch_size=i(4),
                    sampling=Sampling(shard_id=i(0), num_shards=np.int32(1)), seed=i(7),
                    workers=Workers(num_workers=i(0), num_threads=np.uint8(1),
                                    prefetch_queue_depth=i(2)),
                    resize=(i(16), np.int16(12)),
                    bad_files=BadFiles(max_pixels=i(10**6), max_file_bytes=i(10**6)),
                    device="cpu")
    c = loader.config
    assert (c.batch_size, c.seed, c.resize, c.bad_files.max_pixels) == (4, 7, (16, 12), 10**6)
    assert all(type(v) is int for v in (c.batch_size, c.seed, c.workers.num_workers,
                                        c.sampling.shard_id, c.bad_files.max_file_bytes,
                                        *c.resize))
    json.dumps(loader.state_dict())
    with loader:
        batch = next(iter(loader))
    assert tuple(batch["image"].shape) == (4, 16, 12, 3)
    with pytest.raises(ValueError, match=r"asks for GPU 0 but no CUDA GPU is visible"):
        Loader(eight, batch_size=2, device=i(0))  # a numpy index is read as a GPU index


def test_batch_size_rule_counts_the_samples_read(eight):
    """Up to 1,000 times the manifest's samples is accepted (a padded batch repeats them)."""
    with Loader(eight, batch_size=8000, workers=Workers(num_workers=0, num_threads=1), device="cpu",
                resize=4, sampling=Sampling(last_batch="pad")) as loader:
        batch = next(iter(loader))
    assert len(batch["index"]) == 8000 and int((~batch["is_pad"]).sum()) == 8


def test_max_file_bytes_reaches_the_source_and_validate(tmp_path):
    manifest, line, _ = with_file(tmp_path, png_short_idat(), n=4, at=1)
    big = tmp_path / "images" / "00002.png"
    big.write_bytes(big.read_bytes() + b"\0" * 4096)  # trailing bytes after IEND: a good PNG
    limit = big.stat().st_size - 1
    loader = Loader(manifest, batch_size=4, shuffle=False,
                    workers=Workers(num_workers=0, num_threads=1),
                    resize=8, bad_files=BadFiles(max_file_bytes=limit), device="cpu")
    assert loader.source.max_file_bytes == limit
    with pytest.raises(extsrc.errors.SampleReadError, match=r"line 4: .*00002\.png") as e:
        run_epoch(loader)
    assert e.value.reason == "file_too_large"
    with pytest.warns(UserWarning, match="skipping 2 of 4"):
        skipping = Loader(manifest, batch_size=2, workers=Workers(num_workers=0, num_threads=1),
                          resize=8,
                          device="cpu",
                          bad_files=BadFiles(on_error="skip", max_file_bytes=limit,
                                             validate_kwargs={"n_jobs": 1, "progress": False}))
    assert sorted((p.line, p.reason) for p in skipping.skipped) == [
        (line, "truncated"), (4, "file_too_large")]


# -- class: every field of a resume state, checked before it is used ----------------------------


def _set(key, value):
    def change(state):
        state[key] = value
    return change


def _drop(key):
    def change(state):
        del state[key]
    return change


def _config(key, value):
    def change(state):
        state["config"][key] = value
    return change


# (what is done to a good state of 4 batches per epoch, what the message must say)
BAD_STATES = [
    ("missing version", _drop("version"), r"keys \['version'\] are missing"),
    ("missing epoch", _drop("epoch"), r"keys \['epoch'\] are missing"),
    ("missing batch", _drop("batch"), r"keys \['batch'\] are missing"),
    ("missing config", _drop("config"), r"keys \['config'\] are missing"),
    ("extra key", _set("optimizer", {}), r"unexpected keys \['optimizer'\]"),
    ("version 2", _set("version", 2), r"version 2 is not supported"),
    ("version '1'", _set("version", "1"), r"version '1' is not supported"),
    ("version True", _set("version", True), r"version True is not supported"),
    ("version 1.0", _set("version", 1.0), r"version 1\.0 is not supported"),
    ("epoch -1", _set("epoch", -1), r"epoch must be an int >= 0 and <= 2,147,483,647"),
    ("epoch 2**40", _set("epoch", 2**40), r"epoch must be an int >= 0 and <= 2,147,483,647"),
    ("epoch 1.0", _set("epoch", 1.0), r"epoch must be an int >= 0, got float 1\.0"),
    ("epoch '1'", _set("epoch", "1"), r"epoch must be an int >= 0, got str '1'"),
    ("epoch None", _set("epoch", None), r"epoch must be an int >= 0, got NoneType"),
    ("epoch True", _set("epoch", True), r"epoch must be an int >= 0, got bool"),
    ("batch -1", _set("batch", -1), r"batch must be an int >= 0 and <="),
    ("batch 5 of 4", _set("batch", 5), r"batch must be an int >= 0 and <= 4 \(an epoch here has "
                                       r"4 batches\), got 5; batch 5 is past the end"),
    ("batch 2.5", _set("batch", 2.5), r"batch must be an int >= 0, got float 2\.5"),
    ("batch [1]", _set("batch", [1]), r"batch must be an int >= 0, got list"),
    ("config list", _set("config", [1]), r"'config' must be a dict, got list"),
    ("config int keys", _set("config", {1: 2}), r"'config' keys must be strings, got 1"),
    ("config field missing", lambda s: s["config"].pop("seed"),
     r"seed: '<absent>' in the state, 3 here"),
    ("config field wrong type", _config("batch_size", "2"), r"batch_size: '2' in the state, 2 "),
    ("config field not JSON", _config("shuffle", np.arange(3)),
     r"shuffle: '<not JSON: array\(\[0, 1, 2\]\)>' in the state, true here"),
    ("config field extra", _config("colour", "red"), r"colour: 'red' in the state, "),
]


@pytest.fixture(scope="module")
def state_loader(tmp_path_factory):
    manifest = write_dataset(tmp_path_factory.mktemp("state"), 8)
    return Loader(manifest, batch_size=2, seed=3, workers=Workers(num_workers=0, num_threads=1),
                  device="cpu",
                  resize=8)


@pytest.mark.parametrize(("what", "change", "match"), BAD_STATES,
                         ids=[w for w, _, _ in BAD_STATES])
def test_every_bad_state_field_refused_naming_it(state_loader, what, change, match):
    import copy

    from extsrc.errors import StateMismatchError

    good = state_loader.state_dict()
    state_loader.load_state_dict(copy.deepcopy(good))  # the good state itself is accepted
    bad = copy.deepcopy(good)
    state_loader.position.move_to(1, 3)
    change(bad)
    with pytest.raises(StateMismatchError, match=match):
        state_loader.load_state_dict(bad)
    assert (state_loader.position.epoch, state_loader.position.batch) == (1, 3)  # untouched


def test_state_with_numpy_integers_and_at_an_epochs_end_is_taken(state_loader):
    state = state_loader.state_dict()
    state.update(epoch=np.int64(2), batch=np.int32(4))  # batch == batches per epoch: next epoch
    state_loader.load_state_dict(state)
    assert state_loader.position.due() == (3, 0)
    with state_loader:
        batch = next(iter(state_loader))
    assert len(batch["index"]) == 2


# -- the loader's messages escape file names -------------------------------------------------------

HOSTILE = "x\x1b[2J\x1b[31m\u202e"


@pytest.mark.parametrize("how", ["header check", "decode failure", "dali sample number"])
def test_bad_file_messages_escape_the_name(tmp_path, monkeypatch, how):
    """A file found bad before DALI (its header), by decoding the failed batch again, or from
    DALI's sample number: each message names the file with its control characters escaped."""
    if how == "dali sample number":
        monkeypatch.setattr(extsrc.sources.imagecheck, "_png_data_check", lambda data: None)
    data = png_short_idat() if how != "header check" else png_short_idat()[:-12]  # no IEND
    manifest = write_dataset(tmp_path, 4)
    (tmp_path / "images" / f"{HOSTILE}.png").write_bytes(data)
    text = manifest.read_text().replace("images/00001.png", f"images/{HOSTILE}.png")
    manifest.write_text(text)
    loader = Loader(manifest, batch_size=4, shuffle=False,
                    workers=Workers(num_workers=0, num_threads=1),
                    resize=8, device="cpu")
    with pytest.raises(BadImageError) as e:
        run_epoch(loader)
    message = str(e.value)
    assert e.value.line == 3 and e.value.path.endswith(f"{HOSTILE}.png")
    assert not any(c in message for c in "\x1b\u202e"), message
    assert "x\\x1b[2J\\x1b[31m\\u202e.png" in message


# -- the presets' arguments ---------------------------------------------------------------------

BAD_PRESETS = [
    ("TrainPreset", {"crop": 0}, ValueError, r"TrainPreset: crop must be >= 1 and <= 65,536"),
    ("TrainPreset", {"crop": 224.0}, TypeError, r"TrainPreset: crop must be an int"),
    ("TrainPreset", {"crop": True}, TypeError, r"crop must be an int"),
    ("TrainPreset", {"mirror_p": "0.5"}, TypeError, r"mirror_p must hold numbers, got str"),
    ("TrainPreset", {"mirror_p": 1.5}, ValueError, r"mirror_p must be in \[0, 1\]"),
    ("TrainPreset", {"random_area": (0.5,)}, ValueError, r"random_area \(lo, hi\) needs 2"),
    ("TrainPreset", {"random_area": 0.5}, TypeError, r"random_area \(lo, hi\) must be a seq"),
    ("TrainPreset", {"random_aspect_ratio": (2.0, 1.0)}, ValueError,
     r"random_aspect_ratio must be \(lo, hi\) with 0 < lo <= hi"),
    ("TrainPreset", {"mean": (1, 2)}, ValueError, r"mean \(R, G, B\) needs 3 values"),
    ("TrainPreset", {"mean": (1, 2, float("nan"))}, ValueError, r"mean .* finite numbers"),
    ("TrainPreset", {"std": "abc"}, TypeError, r"std \(R, G, B\) must be a sequence"),
    ("TrainPreset", {"std": (1.0, 0.0, 1.0)}, ValueError, r"std values must be > 0"),
    ("ValPreset", {"size": 0}, ValueError, r"ValPreset: size must be >= 1"),
    ("ValPreset", {"size": 256.0}, TypeError, r"ValPreset: size must be an int"),
    ("ValPreset", {"size": 100, "crop": 224}, ValueError, r"crop \(224\) is larger than"),
]


@pytest.mark.parametrize(("kind", "kwargs", "error", "match"), BAD_PRESETS,
                         ids=[f"{k}-{next(iter(a))}" for k, a, _, _ in BAD_PRESETS])
def test_every_bad_preset_argument_refused_naming_it(kind, kwargs, error, match):
    from extsrc.loading import presets

    with pytest.raises(error, match=match):
        getattr(presets, kind)(**kwargs)


def test_presets_take_numpy_integers_and_check_the_preset_type(eight):
    from extsrc.loading.presets import TrainPreset, ValPreset, train_loader, val_loader

    p = ValPreset(size=np.int64(40), crop=np.int32(32))
    assert (type(p.size), type(p.crop)) == (int, int)
    assert TrainPreset(crop=np.int64(32)).crop == 32
    with pytest.raises(TypeError, match="train_loader: preset must be a TrainPreset"):
        train_loader(eight, batch_size=2, preset=p)
    with pytest.raises(TypeError, match="val_loader: preset must be a ValPreset"):
        val_loader(eight, batch_size=2, preset=TrainPreset())


def test_skip_checks_an_image_loaders_files_as_images(tmp_path):
    # PNG files named *.mp4: extsrc.validate's media detection takes the manifest for videos
    # (and finds no video in them), while the image loader, which decodes every file as an
    # image whatever its name, checks them as images and keeps them all.
    manifest = write_dataset(tmp_path, 4)
    text = manifest.read_text()
    for p in (tmp_path / "images").iterdir():
        p.rename(p.with_suffix(".mp4"))
    manifest.write_text(text.replace(".png", ".mp4"))
    report = validate(str(manifest), n_jobs=1, progress=False)
    assert (report.media, report.num_bad) == ("video", 4)
    loader = Loader(str(manifest), batch_size=2, shuffle=False, resize=16, num_workers=0,
                    num_threads=1, on_error="skip",
                    validate_kwargs={"n_jobs": 1, "progress": False})
    assert loader.validation.media == "image" and loader.skipped == ()
    assert sorted(run_epoch(loader)) == [0, 1, 2, 3]
