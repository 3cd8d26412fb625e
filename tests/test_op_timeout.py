"""The op time limit (``Loader(op_timeout=...)``): an op that never returns stops the loader with
an OpTimeoutError naming the op and the samples in flight; stuck worker processes are killed,
stuck threads are abandoned without keeping the process alive."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import children, write_dataset

import augment_ops
import extsrc
from extsrc.errors import OpError, OpTimeoutError
from extsrc.ops_runtime.pool import OpPool

ROOT = Path(__file__).resolve().parent.parent

# Released at the end of the thread test, so the abandoned thread ends with it.
_RELEASE = threading.Event()


def _spins_on_sample_6(img):
    # Sample 6's first pixel is 6 * 13 (helpers.pattern_image); a pixel test, so the tracer
    # cannot take the op over (it would run both branches).
    if int(img[0, 0, 0]) == 6 * 13:
        while True:
            pass
    return img


def _waits_on_sample_6(img):
    if int(img[0, 0, 0]) == 6 * 13:
        _RELEASE.wait()  # a deadlock, until the test ends it
    return img


SPINS = augment_ops.Op(name="timeout_test_spins", fn=_spins_on_sample_6)
WAITS = augment_ops.Op(name="timeout_test_waits", fn=_waits_on_sample_6)


def _loader(manifest, op, **op_runtime):
    return extsrc.Loader(manifest, batch_size=8, transforms=[op],
                         op_runtime=extsrc.OpRuntime(op_path="numpy", **op_runtime),
                         device="cpu", resize=16, shuffle=False,
                         workers=extsrc.Workers(num_workers=0))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stuck_op_in_a_worker_process_is_killed_and_named(tmp_path, workers):
    manifest = write_dataset(tmp_path, 8)  # PNG: pixels kept exactly
    before = children()
    loader = _loader(manifest, SPINS, op_workers=workers, op_timeout=1.5)
    assert loader.op_pool is not None and loader.op_pool.workers == workers
    with pytest.raises(OpTimeoutError, match=r"op 'timeout_test_spins' did not finish within "
                       r"op_timeout=1\.5 s per sample") as info:
        next(iter(loader))
    err = info.value
    assert isinstance(err, OpError)
    assert err.op == "timeout_test_spins" and err.timeout == 1.5
    # Sample 6 is manifest line 8 (after the header); a worker of two has it alone.
    assert (8, str(tmp_path / "images" / "00006.png")) in err.samples
    if workers == 2:
        assert err.samples == ((8, str(tmp_path / "images" / "00006.png")),)
        assert err.line == 8 and err.path.endswith("00006.png")
    assert "manifest.csv line 8" in str(err)
    assert "was killed" in str(err) and "op_timeout=..." in str(err)
    assert loader.op_pool.pids == []  # every worker ended, the late one killed
    assert children() - before == set()
    # Iterating again starts new workers (and stops them again at the same sample).
    with pytest.raises(OpTimeoutError):
        next(iter(loader))
    loader.close()
    assert children() - before == set()


def test_a_single_sample_batch_is_timed_too(tmp_path):
    manifest = write_dataset(tmp_path, 8)
    loader = extsrc.Loader(manifest, batch_size=1, transforms=[SPINS],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2,
                                                       op_timeout=1.0),
                           device="cpu", resize=16, shuffle=False,
                           workers=extsrc.Workers(num_workers=0))
    seen = 0
    with pytest.raises(OpTimeoutError) as info:
        for _ in loader:
            seen += 1
    assert seen == 6 and info.value.line == 8
    loader.close()


def test_a_stuck_thread_is_abandoned_and_the_loader_refuses_until_it_ends(tmp_path):
    manifest = write_dataset(tmp_path, 8)
    _RELEASE.clear()
    loader = _loader(manifest, WAITS, op_workers=2, op_pool="thread", op_timeout=1.0)
    try:
        with pytest.raises(OpTimeoutError, match="did not finish within op_timeout=1 s") as info:
            next(iter(loader))
        assert info.value.line == 8 and "Threads cannot be stopped" in str(info.value)
        stuck = [t for t in threading.enumerate() if t.name.startswith("extsrc-op")
                 and t.is_alive()]
        assert stuck and all(t.daemon for t in stuck)
        with pytest.raises(OpTimeoutError, match="its thread still runs") as again:
            next(iter(loader))
        assert again.value.line == 8 and again.value.op == "timeout_test_waits"
    finally:
        _RELEASE.set()
    deadline = time.monotonic() + 30
    while any(t.name.startswith("extsrc-op") and t.is_alive() for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the released thread did not end"
        time.sleep(0.05)
    # The thread returned: the loader goes on (the op now returns for every sample).
    batch = next(iter(loader))
    assert batch["index"].tolist() == list(range(8))
    loader.close()


_SCRIPT = """
import sys, threading
import extsrc, augment_ops

def stuck(img):
    if int(img[0, 0, 0]) >= 0:  # a pixel test: the tracer leaves the op to the numpy path
        threading.Event().wait()  # never set
    return img

loader = extsrc.Loader(sys.argv[1], batch_size=4, device="cpu", resize=16,
                       workers=extsrc.Workers(num_workers=0),
                       op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2,
                                                   op_pool="thread", op_timeout=0.5),
                       transforms=[augment_ops.Op(name="stuck", fn=stuck)])
try:
    next(iter(loader))
except extsrc.OpTimeoutError as e:
    print("TIMEOUT", e.op, flush=True)
loader.close()
print("CLOSED", flush=True)
"""


def test_a_process_with_an_abandoned_thread_still_exits(tmp_path):
    manifest = write_dataset(tmp_path, 4)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, str(script), str(manifest)], capture_output=True,
                         text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "TIMEOUT stuck" in out.stdout and "CLOSED" in out.stdout


def test_op_timeout_is_checked(tmp_path):
    manifest = write_dataset(tmp_path, 4)
    kw = dict(batch_size=2, transforms=[SPINS], device="cpu")
    numpy = functools.partial(extsrc.OpRuntime, op_path="numpy")
    for bad, exc in ((0, ValueError), (-1.0, ValueError), (float("inf"), ValueError),
                     (float("nan"), ValueError), ("5", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="op_timeout must be"):
            extsrc.Loader(manifest, op_runtime=numpy(op_timeout=bad), **kw)
    with pytest.raises(ValueError, match="op_timeout needs an op pool, but op_workers=0"):
        extsrc.Loader(manifest, op_runtime=numpy(op_timeout=5, op_workers=0), **kw)
    # op_workers=1 gives a pool of one, so the limit can stop the op; no limit: no pool.
    loader = extsrc.Loader(manifest, op_runtime=numpy(op_timeout=np.float32(5), op_workers=1),
                           **kw)
    assert loader.op_pool is not None and loader.op_pool.workers == 1
    assert loader.op_pool.timeout == 5.0 and loader.config.op_runtime.op_timeout == 5.0
    assert extsrc.Loader(manifest, op_runtime=numpy(op_workers=1), **kw).op_pool is None
    # No op on the numpy path: nothing to limit, nothing refused.
    assert extsrc.Loader(manifest, batch_size=2, device="cpu",
                         op_runtime=extsrc.OpRuntime(op_timeout=5, op_workers=0)).op_pool is None
    with pytest.raises(TypeError, match="op_timeout must be"):
        OpPool(2, timeout="1")


def _waits_on_every_clip(img):
    if int(img[0, 0, 0]) >= 0:  # a pixel test: the tracer leaves the op to the numpy path
        _RELEASE.wait()
    return img


def test_a_stuck_clip_op_is_named_and_its_thread_abandoned(tmp_path):
    from extsrc.tools.sample_videos import make_sample_videos

    root = make_sample_videos(tmp_path / "videos", n=2, frames=8, size=(32, 48))
    _RELEASE.clear()
    op = augment_ops.Op(name="timeout_test_clip_waits", fn=_waits_on_every_clip)
    loader = extsrc.VideoLoader(root, batch_size=2, sequence_length=4, transforms=[op],
                                device="cpu", workers=extsrc.Workers(num_workers=0), shuffle=False,
                                op_runtime=extsrc.OpRuntime(op_timeout=0.5))
    try:
        with pytest.raises(OpTimeoutError, match=r"op 'timeout_test_clip_waits' did not finish "
                           r"within op_timeout=0\.5 s per clip \(2 clips in the batch\)") as info:
            next(iter(loader))
        assert info.value.line == 1 and info.value.path == loader.manifest.paths[0]
        with pytest.raises(OpTimeoutError, match="its thread still runs"):
            next(iter(loader))
    finally:
        _RELEASE.set()
    deadline = time.monotonic() + 30
    while any(t.name.startswith("extsrc-clip-op") and t.is_alive()
              for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the released thread did not end"
        time.sleep(0.05)
    assert next(iter(loader))["video"].shape[:2] == (2, 4)  # the op returns now
    loader.close()
    with pytest.raises(ValueError, match="OpRuntime: op_timeout must be > 0"):
        extsrc.VideoLoader(root, batch_size=2, sequence_length=4, device="cpu",
                           op_runtime=extsrc.OpRuntime(op_timeout=0))
