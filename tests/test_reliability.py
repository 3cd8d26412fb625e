"""Reliability of the Loader on real generated files: bad files, odd image modes, skip policy,
paths escaping the root, user op failures and a DALI worker killed mid-epoch.

Every failure must arrive as an extsrc error naming the manifest line, the path and the reason
(never a bare DALI trace), quickly, and leave no worker process behind.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    BAD_FILES,
    children,
    dataset_with_bad,
    encode,
    noise,
    pattern_image,
    root_with_link_out,
    write_dataset,
)
from PIL import Image

import augment_ops
import extsrc
from augment_ops import OpContractError
from extsrc import BadFiles, Loader, OpRuntime, Sampling, Workers, read_manifest
from extsrc.errors import (
    BadImageError,
    ExtsrcError,
    OpError,
    OpOutputError,
    PathOutsideRootError,
    SampleReadError,
)

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")

REPO = Path(extsrc.__file__).resolve().parents[1]


def run_epoch(loader: Loader) -> list[dict]:
    return list(loader)


def make_loader(manifest, **kw) -> Loader:
    opts = dict(batch_size=4, shuffle=False, resize=16, device="cpu",
                workers=Workers(num_workers=0))
    opts.update(kw)
    return Loader(manifest, **opts)


# -- bad files stop with a clear error ------------------------------------------------------------

EXPECT = {
    "missing": "file not found", "directory": "is a directory", "zero_byte": r"empty \(0 bytes\)",
}


# Every kind in the main process; a representative subset through DALI worker processes, whose
# errors arrive as text and are rebuilt as the same extsrc exception.
CASES = [(k, 0) for k in BAD_FILES] + [
    (k, 2) for k in ("truncated_jpeg", "missing", "corrupt_jpeg", "huge_png_50k")]


@pytest.mark.parametrize(("kind", "workers"), CASES,
                         ids=[f"{k}-{'workers' if w else 'main'}" for k, w in CASES])
def test_bad_file_stops_with_line_path_and_reason(tmp_path, kind, workers):
    mpath, where = dataset_with_bad(tmp_path, [kind], n=6)
    m = read_manifest(mpath)
    i = where[kind]
    before = children()
    loader = make_loader(mpath, workers=Workers(num_workers=workers, start_method="fork"))
    t0 = time.monotonic()
    with pytest.raises(SampleReadError) as ei:
        run_epoch(loader)
    assert time.monotonic() - t0 < 30
    msg = str(ei.value)
    reason = BAD_FILES[kind][2]
    assert msg.startswith(f"{mpath} line {m.lines[i]}: "), msg
    assert m.paths[i] in msg
    assert re.search(EXPECT.get(kind, re.escape(f"[{reason}]")), msg), msg
    assert "Critical error in pipeline" not in msg.split("\n")[0]
    if kind == "corrupt_jpeg":  # header checks pass: DALI's decoder fails, the loader finds it
        assert "DALI could not decode this file" in msg and ei.value.dali_error is not None
    if kind not in EXPECT:
        assert isinstance(ei.value, BadImageError)
        assert "extsrc.validate(manifest)" in msg and "on_error='skip'" in msg
    assert not loader.running  # stopped on the error: no threads, no workers
    assert children() - before == set()


def test_fixing_the_file_and_iterating_again_loses_and_repeats_nothing(tmp_path):
    mpath, where = dataset_with_bad(tmp_path, ["truncated_jpeg"], n=9)
    m = read_manifest(mpath)
    loader = make_loader(mpath, batch_size=2, workers=Workers(num_workers=2))
    got = []
    with pytest.raises(BadImageError):
        for b in loader:
            got += b["index"].tolist()
    bad = where["truncated_jpeg"]
    assert got == list(range(bad - bad % 2))  # the batches before the failing one
    Path(m.paths[where["truncated_jpeg"]]).write_bytes(encode(noise(), "JPEG"))
    for b in loader:  # resumes at the failed batch
        got += b["index"].tolist()
    assert got == list(range(len(m)))
    assert loader.epoch == 1
    loader.close()


# -- odd image modes decode to 3-channel uint8 ----------------------------------------------------


def png16_rgb(arr16: np.ndarray) -> bytes:
    """A 16-bit RGB PNG written by hand (Pillow cannot write one)."""
    h, w, _ = arr16.shape
    raw = b"".join(b"\x00" + arr16[y].astype(">u2").tobytes() for y in range(h))
    chunk = lambda kind, data: (struct.pack(">I", len(data)) + kind + data  # noqa: E731
                                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def to8(a16: np.ndarray) -> np.ndarray:
    """16 -> 8 bits by scaling (v * 255 / 65535, rounded), as DALI does; Pillow's
    ``convert("RGB")`` clips 16-bit values instead, so it is no reference here."""
    return np.rint(a16.astype(np.float64) / 257).astype(np.uint8)


def test_image_modes_decode_to_rgb_uint8(tmp_path):
    h, w = 24, 32
    base = pattern_image(5, h, w)
    pil = Image.fromarray(base)
    gray16 = base[..., 0].astype(np.uint16) * 257 + 3
    rgb16 = base.astype(np.uint16) * 257 + 5
    files = {  # name: (bytes, expected RGB, exact?)
        "cmyk.jpg": (encode(pil.convert("CMYK"), "JPEG", quality=95), None, False),
        "gray.jpg": (encode(pil.convert("L"), "JPEG", quality=95), None, False),
        "rgb.jpg": (encode(pil, "JPEG", quality=95), None, False),
        "gray16.png": (encode(Image.fromarray(gray16), "PNG"),
                       np.repeat(to8(gray16)[..., None], 3, 2), True),
        "rgb16.png": (png16_rgb(rgb16), to8(rgb16), True),
        "palette.png": (encode(pil.convert("P", palette=Image.Palette.ADAPTIVE), "PNG"), None,
                        True),
        "rgba.png": (encode(pil.convert("RGBA"), "PNG"), None, True),
        "la.png": (encode(pil.convert("LA"), "PNG"), None, True),
        "gray.png": (encode(pil.convert("L"), "PNG"), None, True),
    }
    names = list(files)
    for name, (data, _, _) in files.items():
        (tmp_path / name).write_bytes(data)
    mpath = tmp_path / "modes.csv"
    mpath.write_text("".join(f"{n},{k}\n" for k, n in enumerate(names)))
    assert extsrc.validate(mpath, n_jobs=1, progress=False).ok
    with make_loader(mpath, batch_size=len(names), resize=None) as loader:
        (batch,) = run_epoch(loader)
    images = batch["image"]
    assert images.dtype.is_floating_point is False and str(images.dtype) == "torch.uint8"
    assert tuple(images.shape) == (len(names), h, w, 3)
    for k, name in enumerate(names):
        data, expected, exact = files[name]
        got = images[k].numpy()
        if expected is None:
            expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        diff = np.abs(got.astype(int) - expected.astype(int))
        if exact:
            assert diff.max() == 0, name
        else:  # JPEG: decoders may differ by rounding (IDCT, colour conversion)
            assert diff.max() <= 8 and diff.mean() < 1.0, (name, diff.max(), diff.mean())


# -- on_error="skip" ------------------------------------------------------------------------------


def test_skip_drops_bad_samples_keeps_shards_equal_and_original_indices(tmp_path):
    kinds = ["truncated_jpeg", "zero_byte", "missing", "corrupt_jpeg", "huge_png_50k"]
    mpath, where = dataset_with_bad(tmp_path, kinds, n=12)
    m = read_manifest(mpath)
    good = sorted(set(range(len(m))) - set(where.values()))
    seen, lengths = [], []
    for shard in range(2):
        with pytest.warns(UserWarning, match=rf"skipping 5 of {len(m)} samples .*truncated"):
            loader = make_loader(
                mpath, batch_size=3, shuffle=True, seed=1,
                sampling=Sampling(shard_id=shard, num_shards=2),
                bad_files=BadFiles(on_error="skip",
                                   validate_kwargs={"n_jobs": 1, "progress": False}),
            )
        assert sorted(p.index for p in loader.skipped) == sorted(where.values())
        assert {p.reason for p in loader.skipped} == {
            "truncated", "empty", "missing", "corrupt", "too_large"}
        assert all(p.line == m.lines[p.index] for p in loader.skipped)
        lengths.append(len(loader))
        with loader:
            for b in run_epoch(loader):
                idx = b["index"]
                np.testing.assert_array_equal(b["label"].numpy(), m.labels[idx.numpy()])
                seen += idx[~b["is_pad"]].tolist()
    assert lengths[0] == lengths[1] == 2  # 12 good samples, 2 shards of batch 3
    assert sorted(seen) == good  # every good sample exactly once across shards


def test_skip_without_problems_and_bad_policy(tmp_path):
    mpath = write_dataset(tmp_path, 5)
    loader = make_loader(mpath,
                         bad_files=BadFiles(on_error="skip",
                                            validate_kwargs={"n_jobs": 1, "progress": False}))
    assert loader.skipped == () and loader.validation.ok
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        make_loader(mpath, bad_files=BadFiles(on_error="ignore"))


# -- paths outside the root -----------------------------------------------------------------------


def test_paths_escaping_root_are_refused(tmp_path):
    root, secret = root_with_link_out(tmp_path, 4)
    escaping = tmp_path / "escape.csv"
    escaping.write_text("images/00000.png,0\n../secret.png,1\nimages/00001.png,2\n")
    with pytest.raises(PathOutsideRootError, match=r"escape\.csv line 2: path .*secret\.png is "
                       r"outside the root .*allow_outside_root=True"):
        make_loader(read_manifest(escaping, root=root))
    absolute = tmp_path / "abs.csv"
    absolute.write_text(f"images/00000.png,0\n{secret},1\n")
    with pytest.raises(PathOutsideRootError, match=r"abs\.csv line 2"):
        make_loader(read_manifest(absolute, root=root))
    # A symlink pointing out is only visible on disk: refused when the file is opened.
    linked = tmp_path / "link.csv"
    linked.write_text("images/00000.png,0\nimages/link.png,1\n")
    for workers in (0, 2):
        with pytest.raises(PathOutsideRootError, match=r"link\.csv line 2: .*link\.png: resolves "
                           r"to .*secret\.png, outside the root"):
            run_epoch(make_loader(read_manifest(linked, root=root),
                                  workers=Workers(num_workers=workers)))
    # Opting out, or giving no root, reads them; on_error="skip" drops them.
    inner = root / "link.csv"  # no root given: relative to the manifest's folder, no limit
    inner.write_text(linked.read_text())
    for m in (read_manifest(linked, root=root, allow_outside_root=True), read_manifest(inner),
              read_manifest(escaping, root=root, allow_outside_root=True)):
        assert sum(len(b["index"]) for b in run_epoch(make_loader(m, batch_size=1))) == len(m)
    with pytest.warns(UserWarning, match="skipping 1 of 2"):
        loader = make_loader(read_manifest(linked, root=root), batch_size=1,
                             bad_files=BadFiles(on_error="skip",
                                                validate_kwargs={"n_jobs": 1, "progress": False}))
    assert [p.reason for p in loader.skipped] == ["outside_root"]
    assert [b["index"].tolist() for b in run_epoch(loader)] == [[0]]


# -- user op failures -----------------------------------------------------------------------------


@pytest.fixture
def odd_ops():
    @augment_ops.augment_op(replace=True)
    def t_explode(img):
        if int(img[0, 0, 0]) == (3 * 13) % 256:  # pattern_image(3) starts with r = 3 * 13
            raise ValueError("boom on purpose")
        return img

    @augment_ops.augment_op(num_outputs=2, replace=True)
    def t_two_declared(img):
        return img

    @augment_ops.augment_op(replace=True)
    def t_float(img):
        return img.astype(np.float32)

    @augment_ops.augment_op(replace=True)
    def t_flat(img):
        return img[..., 0]

    yield
    for name in ("t_explode", "t_two_declared", "t_float", "t_flat"):
        augment_ops.unregister(name)


@pytest.mark.usefixtures("odd_ops")
@pytest.mark.parametrize("workers", [0, 2], ids=["main", "workers"])
def test_op_that_raises_names_op_line_and_traceback(tmp_path, workers):
    mpath = write_dataset(tmp_path, 10)
    m = read_manifest(mpath)
    before = children()
    loader = make_loader(mpath, ops=["t_explode"], op_runtime=OpRuntime(op_path="numpy"),
                         workers=Workers(num_workers=workers),
                         batch_size=2)
    t0 = time.monotonic()
    got = []
    with pytest.raises(OpError) as ei:
        for b in loader:
            got += b["index"].tolist()
    assert time.monotonic() - t0 < 30
    msg = str(ei.value)
    assert msg.startswith("op 't_explode' raised ValueError: boom on purpose [sample "), msg
    assert f"{mpath} line {m.lines[3]} ({m.paths[3]})" in msg
    assert "Original traceback of the op:" in msg and "in t_explode" in msg
    assert 'raise ValueError("boom on purpose")' in msg
    assert "Critical error in pipeline" not in msg
    assert got == [0, 1]  # the batches before the failing one arrived
    assert not loader.running and children() - before == set()


@pytest.mark.usefixtures("odd_ops")
@pytest.mark.parametrize("workers", [0, 2], ids=["main", "workers"])
def test_errors_carry_their_fields_through_dali(tmp_path, workers):
    # A bad file read by a worker process and an op failing in python_function both reach the
    # loop through DALI's error text; the errors still carry their fields, for callers to read.
    mpath, where = dataset_with_bad(tmp_path, ["truncated_jpeg"], n=6)
    m = read_manifest(mpath)
    i = where["truncated_jpeg"]
    with pytest.raises(BadImageError) as ei:
        run_epoch(make_loader(mpath, workers=Workers(num_workers=workers, start_method="fork")))
    e = ei.value
    assert (e.source, e.line, e.path, e.reason) == (str(mpath), m.lines[i], m.paths[i], "truncated")
    assert e.message.startswith(f"{mpath} line {m.lines[i]}: ") and "\n" not in e.message
    assert (e.detail is not None) == (workers > 0)  # the worker's traceback, apart

    mpath = write_dataset(tmp_path / "ops", 10)
    m = read_manifest(mpath)
    with pytest.raises(OpError) as ei:
        run_epoch(make_loader(mpath, ops=["t_explode"], op_runtime=OpRuntime(op_path="numpy"),
                              workers=Workers(num_workers=workers),
                              batch_size=2))
    e = ei.value
    assert (e.op, e.line, e.path) == ("t_explode", m.lines[3], m.paths[3])
    assert "boom on purpose" in e.message and "in t_explode" in e.detail


@pytest.mark.usefixtures("odd_ops")
@pytest.mark.parametrize(("op", "match"), [
    ("t_two_declared", r"op 't_two_declared' returned 1 output\(s\) but declares num_outputs=2"),
    ("t_float", r"op 't_float' output 0 has dtype float32, declared uint8"),
    ("t_flat", r"op 't_flat' output 0 has rank 2 .*declared ndim=3"),
])
def test_op_contract_fails_at_first_batch(tmp_path, op, match):
    mpath = write_dataset(tmp_path, 6)
    loader = make_loader(mpath, ops=[op], op_runtime=OpRuntime(op_path="numpy"), batch_size=2)
    it = iter(loader)
    with pytest.raises(OpOutputError, match=match) as ei:
        next(it)  # the very first batch
    assert isinstance(ei.value, OpContractError) and isinstance(ei.value, ExtsrcError)
    assert f"{mpath} line 2" in str(ei.value)


# -- a worker killed mid-epoch --------------------------------------------------------------------

KILL_SCRIPT = r'''
import gc, json, os, signal, sys, time
import extsrc

sys.path.insert(0, sys.argv[2])  # the tests folder
from helpers import children

def shm_refs(pid):
    """Shared memory a process maps or holds open (DALI's segments live in /dev/shm)."""
    refs = set()
    try:
        for line in open(f"/proc/{pid}/maps"):
            if "/dev/shm/" in line or "memfd:" in line:
                refs.add(line.split(None, 5)[-1].strip())
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if "/dev/shm/" in target or "memfd:" in target:
                refs.add(target)
    except OSError:
        pass
    return refs

# op_workers=0: the only child processes are DALI's two readers (no op pool resizing)
loader = extsrc.Loader(sys.argv[1], batch_size=2, device="cpu", resize=16, shuffle=False,
                       workers=extsrc.Workers(num_workers=2, start_method="fork",
                                              prefetch_queue_depth=1),
                       op_runtime=extsrc.OpRuntime(op_workers=0))
res = {"batches": 0, "killed": None}
t_kill = None
try:
    for k, b in enumerate(loader):
        res["batches"] += 1
        if k == 1:
            kids = sorted(children())
            res["workers"] = kids
            used = set().union(shm_refs(os.getpid()), *(shm_refs(p) for p in kids))
            res["shm_used"] = len(used)
            os.kill(kids[0], signal.SIGKILL)
            res["killed"] = kids[0]
            t_kill = time.monotonic()
    res["error"] = None
except Exception as e:
    res["error"] = type(e).__name__
    res["mro"] = [c.__name__ for c in type(e).__mro__]
    res["message"] = str(e)
    res["seconds_to_error"] = time.monotonic() - t_kill
loader.close()
del loader
gc.collect()
deadline = time.monotonic() + 5
while children(zombies=True) and time.monotonic() < deadline:
    time.sleep(0.1)
res["children_after_close"] = sorted(children(zombies=True))
names = {u.split("/dev/shm/", 1)[-1].split(" ")[0] for u in used if "/dev/shm/" in u}
res["shm_left_on_disk"] = sorted(names & set(os.listdir("/dev/shm")))
res["shm_still_mapped"] = sorted(shm_refs(os.getpid()))
print("RESULT" + json.dumps(res))
'''


def test_worker_killed_mid_epoch_raises_without_hang_or_leftovers(tmp_path):
    mpath = write_dataset(tmp_path, 40)
    script = tmp_path / "kill_worker.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run([sys.executable, str(script), str(mpath), str(Path(__file__).parent)],
                              capture_output=True,
                              text=True, timeout=90, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the loader hung after a DALI worker was killed (watchdog: 90 s)")
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, proc.stdout + proc.stderr
    res = json.loads(line[len("RESULT"):])
    assert res["killed"] in res["workers"] and len(res["workers"]) == 2
    assert res["error"] == "WorkerDiedError", res
    assert {"ExtsrcError", "RuntimeError"} <= set(res["mro"])
    msg = res["message"]
    assert f"pid {res['killed']} was killed by SIGKILL" in msg
    assert "out-of-memory" in msg and "state_dict()" in msg
    assert re.search(rf"epoch 0 batch \d+ \({re.escape(str(mpath))} lines \d+, \d+\)", msg)
    assert res["seconds_to_error"] < 20
    assert res["children_after_close"] == []
    assert res["shm_used"] > 0  # DALI's worker queues and buffers were seen...
    assert res["shm_left_on_disk"] == []  # ...none of them is left in /dev/shm...
    assert res["shm_still_mapped"] == []  # ...or still mapped once the loader is gone



def test_skip_mode_random_ops_draw_from_the_original_sample(tmp_path):
    # A bad file early in the manifest must not shift which generator a later sample gets:
    # random results depend on (seed, epoch, original index, op), not on what was skipped.
    from extsrc.ops_runtime.seeding import counter_rng, op_salt, sample_rng

    mpath, where = dataset_with_bad(tmp_path, ["zero_byte"], n=8)
    m = read_manifest(mpath)
    op = augment_ops.get("random_crop").with_params(size=7)
    with pytest.warns(UserWarning, match="skipping 1 of"):
        # batch 1 and no resize: sizes differ per sample, and the loader's own decoded `image`
        # is the reference input (PIL's JPEG decoding may differ from DALI's by a level).
        loader = make_loader(mpath, batch_size=1, ops=[op], resize=None,
                             bad_files=BadFiles(on_error="skip",
                                                validate_kwargs={"n_jobs": 1, "progress": False}),
                             seed=3)
    with loader:
        batches = run_epoch(loader)
    # The traced native path draws from the counter-based stream, the numpy path from numpy's.
    make_rng = counter_rng if loader.op_paths["random_crop"] == "native" else sample_rng
    seen = 0
    for b in batches:
        for k, index in enumerate(b["index"].tolist()):
            pixels = b["image"][k].numpy()
            ref = op.apply(pixels, make_rng(3, 0, index, op_salt("random_crop")))[0]
            np.testing.assert_array_equal(b["random_crop_0"][k].numpy(), ref)
            seen += 1
    assert seen == len(m) - 1 and where["zero_byte"] not in {
        i for b in batches for i in b["index"].tolist()}
