"""The numpy path's op pool (extsrc.ops_runtime.pool): the same batches as one thread, errors that
name the sample, ops from __main__, and no process or memory left behind however the run ends."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import children, has_gpu, write_dataset

import augment_ops
import extsrc
from extsrc.errors import OpError, WorkerDiedError
from extsrc.loading.config import cores_per_process
from extsrc.ops_runtime.pool import OpPool, chunks

ROOT = Path(__file__).resolve().parent.parent


# Op objects, not registered: the contract harness runs every registered op, and these fail on
# purpose.
def _jitter_tiles(img, rng):
    """Random and multi-output: a brightness draw, then the top and bottom halves."""
    out = np.clip(img.astype(np.float32) * rng.uniform(0.5, 1.5), 0, 255).astype(np.uint8)
    h = out.shape[0] // 2
    return out[:h], out[h:]


def _flip_rows(img):
    """A strided view (negative step) as the output."""
    return img[::-1]


def _fails_on_odd(img, rng):
    if img.shape[1] % 2:
        raise ZeroDivisionError("odd width")
    return img


def _fails_on_sample_6(img):
    if int(img[0, 0, 0]) == 6 * 13:  # see helpers.pattern_image
        raise KeyError("sample six")
    return img


def _fails_on_2_late_and_on_6_at_once(img):
    """Samples 2 and 6 fail; sample 2 only after a while, so sample 6's failure arrives first."""
    first = int(img[0, 0, 0])
    if first == 2 * 13:
        time.sleep(0.5)
        raise KeyError("sample two")
    if first == 6 * 13:
        raise KeyError("sample six")
    return img


def _flip_cols(img):
    return img[:, ::-1]


def _raise_on_load():
    raise RuntimeError("cannot be rebuilt here")


class _LoadsNowhere:
    """An op function that pickles, but whose unpickling raises (in the op worker)."""

    def __call__(self, img):
        return img

    def __reduce__(self):
        return (_raise_on_load, ())


def _crashes(img):
    # Sample 3 (its first pixel is 3 * 13, see helpers.pattern_image) kills its process in the
    # middle of a batch. A pixel test, not a size test: the tracer would run both branches of
    # a size test, in this process.
    if int(img[0, 0, 0]) == 39:
        os.kill(os.getpid(), signal.SIGKILL)
    return img


JITTER_TILES = augment_ops.Op(name="pool_test_jitter_tiles", fn=_jitter_tiles, num_outputs=2,
                              random=True)
FLIP_ROWS = augment_ops.Op(name="pool_test_flip_rows", fn=_flip_rows)
FAILS_ON_ODD = augment_ops.Op(name="pool_test_fails_on_odd", fn=_fails_on_odd, random=True)
CRASHES = augment_ops.Op(name="pool_test_crashes", fn=_crashes)
FAILS_ON_6 = augment_ops.Op(name="pool_test_fails_on_6", fn=_fails_on_sample_6)
FLIP_COLS = augment_ops.Op(name="pool_test_flip_cols", fn=_flip_cols)
FAILS_ON_2_AND_6 = augment_ops.Op(name="pool_test_fails_on_2_and_6",
                                  fn=_fails_on_2_late_and_on_6_at_once)


def _batches(manifest, ops, **op_runtime) -> list[dict]:
    loader = extsrc.Loader(manifest, batch_size=6, transforms=ops[:1], ops=ops[1:], resize=16,
                           op_runtime=extsrc.OpRuntime(op_path="numpy", **op_runtime),
                           device="cpu", shuffle=True, seed=3)
    try:
        return [{k: v.clone() for k, v in b.items()} for _ in range(2) for b in loader]
    finally:
        loader.close()


def test_chunks_cover_every_sample_once_in_order_large_ones_first():
    for n in range(0, 300, 7):
        for workers in range(1, 20):
            cut = chunks(n, workers)
            assert [i for lo, hi in cut for i in range(lo, hi)] == list(range(n))
            sizes = [hi - lo for lo, hi in cut]
            assert all(s > 0 for s in sizes)
            assert sizes == sorted(sizes, reverse=True)
            # no fewer chunks than workers can take (every worker starts at once), and a bounded
            # number of messages: at most about 4 per worker and a few more
            assert len(cut) >= min(n, workers)
            assert len(cut) <= 4 * workers + 1
    sizes = [hi - lo for lo, hi in chunks(128, 16)]
    assert sizes[:8] == [4] * 8 and max(sizes[-8:]) == 2  # 128 images, 16 workers


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_pool_gives_the_serial_batches(tmp_path, kind):
    manifest = write_dataset(tmp_path, 15, fmt="png")
    # a transform, then two ops on its output that DALI may run at the same time
    ops = [FLIP_ROWS, JITTER_TILES, FLIP_COLS]
    serial = _batches(manifest, ops, op_workers=0)
    pooled = _batches(manifest, ops, op_workers=3, op_pool=kind)
    assert len(serial) == len(pooled) == 6
    for a, b in zip(serial, pooled, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].equal(b[k]), k
    # the ops ran: without them the images differ
    plain = _batches(manifest, [augment_ops.Op(name="pool_test_same", fn=lambda img: img)],
                     op_workers=0)
    assert not plain[0]["image"].equal(serial[0]["image"])
    assert not serial[0]["image"].equal(serial[0]["pool_test_flip_cols_0"])


def test_pool_workers_are_processes_and_close_ends_them(tmp_path):
    manifest = write_dataset(tmp_path, 8)
    before = children()
    loader = extsrc.Loader(manifest, batch_size=4, transforms=[FLIP_ROWS],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2), device="cpu",
                           resize=16, workers=extsrc.Workers(num_workers=0))
    assert loader.op_pool is not None and loader.op_pool.pids == []  # started lazily
    for _ in loader:
        break
    pids = set(loader.op_pool.pids)
    assert len(pids) == 2 and pids <= children() - before
    loader.close()
    assert children() - before == set()
    assert len(next(iter(loader))["label"]) == 4  # iterating again starts new workers
    assert len(loader.op_pool.pids) == 2 and set(loader.op_pool.pids).isdisjoint(pids)
    loader.close()
    assert children() - before == set()


def test_op_error_in_a_worker_names_the_sample_and_keeps_the_traceback(tmp_path):
    manifest = write_dataset(tmp_path, 8, size=(20, 20))  # widths 20, 21, 22, 23, ...
    loader = extsrc.Loader(manifest, batch_size=8, transforms=[FAILS_ON_ODD],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2), device="cpu",
                           resize=16, shuffle=False)
    with pytest.raises(OpError) as info:
        next(iter(loader))
    err = info.value
    assert err.op == "pool_test_fails_on_odd" and err.line == 3  # sample 1: header + 2
    assert err.path.endswith("00001.png")
    assert "ZeroDivisionError: odd width" in str(err)
    assert 'raise ZeroDivisionError("odd width")' in err.detail  # the worker's own traceback
    loader.close()


def test_a_failure_in_a_later_workers_share_names_that_sample(tmp_path):
    manifest = write_dataset(tmp_path, 8)  # PNG: pixels kept exactly
    loader = extsrc.Loader(manifest, batch_size=8, transforms=[FAILS_ON_6],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2),
                           device="cpu", resize=16, shuffle=False)
    with pytest.raises(OpError) as info:  # sample 6 is in a chunk that does not start at 0
        next(iter(loader))
    assert info.value.line == 8 and info.value.path.endswith("00006.png")
    assert "KeyError: 'sample six'" in str(info.value)
    loader.close()


def test_of_two_failing_samples_the_first_in_the_batch_is_named(tmp_path):
    # As on the serial path, whichever worker's failure arrives first.
    manifest = write_dataset(tmp_path, 8)
    loader = extsrc.Loader(manifest, batch_size=8, transforms=[FAILS_ON_2_AND_6],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=3), device="cpu",
                           resize=16, shuffle=False)
    with pytest.raises(OpError) as info:
        next(iter(loader))
    assert info.value.line == 4 and info.value.path.endswith("00002.png")
    assert "sample two" in str(info.value)
    loader.close()


def _grows(img, rng):
    """Outputs that grow along the batch (their worker's memory grows in the middle of it)."""
    k = int(img[0, 0, 0]) // 13 + 1
    return np.full((k * 100, 1000, 3), k, np.uint8), np.full((k, k, 3), k, np.uint8)


GROWS = augment_ops.Op(name="pool_test_grows", fn=_grows, num_outputs=2, random=True)


def test_chunk_outputs_reach_on_outputs_in_batch_order_through_growing_memory(tmp_path):
    from extsrc.ops_runtime.runners import BatchOpRunner
    from extsrc.sources.table import read_manifest

    manifest = read_manifest(write_dataset(tmp_path, 12))
    pool = OpPool(3)
    runner = BatchOpRunner(GROWS, seed=1, manifest=manifest, pool=pool)
    waits = []

    def on_outputs(m, start, end, placed):
        # one chunk: its outputs lie in [start, end) of its worker's memory, in sample order
        assert 0 <= start <= end <= len(m)
        assert all(start <= off and off + int(np.prod(shape)) * np.dtype(dt).itemsize <= end
                   for sample in placed for off, shape, dt in sample)
        block = bytes(m[start:end])  # what a copy of the range would carry
        return [tuple(np.frombuffer(block, dt, int(np.prod(shape)), off - start).reshape(shape)
                      for off, shape, dt in sample) for sample in placed]

    try:
        for _ in range(2):  # the second batch reuses the memory grown by the first
            images = [np.full((4, 4, 3), 13 * i, np.uint8) for i in range(12)]
            infos = [np.array([i, 0, 0]) for i in range(12)]
            out = pool.run(runner, images, infos, copied=lambda: waits.append(1),
                           on_outputs=on_outputs)
            assert [int(o[0][0, 0, 0]) for o in out] == list(range(1, 13))
            assert [o[0].shape for o in out] == [((i + 1) * 100, 1000, 3) for i in range(12)]
            assert all((o[0] == i + 1).all() and (o[1] == i + 1).all() for i, o in enumerate(out))
        assert waits  # asked to wait for copies before a map was replaced
    finally:
        pool.close()


def test_a_worker_that_died_between_batches_is_reported_and_replaced(tmp_path):
    manifest = write_dataset(tmp_path, 24)
    before = children()
    loader = extsrc.Loader(manifest, batch_size=4, transforms=[FLIP_ROWS],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2),
                           device="cpu", resize=16, workers=extsrc.Workers(num_workers=0))
    try:
        it = iter(loader)
        got = [next(it)]
        victim = loader.op_pool.pids[1]
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.5)  # the worker is gone before the next batches
        with pytest.raises(WorkerDiedError, match="SIGKILL"):
            for _ in range(5):  # batches DALI made before the kill still come first
                got.append(next(it))
        loader.close()
        got += list(loader)  # new workers, and the rest of the epoch from the failed batch
        assert victim not in loader.op_pool.pids
        assert sorted(int(i) for b in got for i in b["index"]) == list(range(24))
    finally:
        loader.close()
    assert children() - before == set()


def test_the_pool_works_with_socket_numbers_past_1024(tmp_path):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit on open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    manifest = write_dataset(tmp_path, 8)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        serial = _batches(manifest, [FLIP_ROWS, JITTER_TILES], op_workers=0)
        pooled = _batches(manifest, [FLIP_ROWS, JITTER_TILES], op_workers=2)
        assert all(a[k].equal(b[k]) for a, b in zip(serial, pooled, strict=True) for k in a)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_op_that_cannot_be_rebuilt_in_a_worker_is_named(tmp_path):
    manifest = write_dataset(tmp_path, 4)
    op = augment_ops.Op(name="pool_test_loads_nowhere", fn=_LoadsNowhere())
    loader = extsrc.Loader(manifest, batch_size=4, transforms=[op],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2),
                           device="cpu", resize=16)
    with pytest.raises(OpError, match="could not be loaded in an op worker process") as info:
        next(iter(loader))
    assert "cannot be rebuilt here" in str(info.value)
    loader.close()


def test_a_worker_killed_mid_batch_is_reported_and_nothing_is_left(tmp_path):
    manifest = write_dataset(tmp_path, 8, size=(20, 20))  # PNG: pixels kept exactly
    before = children()
    loader = extsrc.Loader(manifest, batch_size=8, transforms=[CRASHES],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2), device="cpu",
                           resize=16, shuffle=False)
    t0 = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        next(iter(loader))
    assert time.monotonic() - t0 < 60  # no hang
    msg = str(info.value)
    assert "SIGKILL" in msg and "pool_test_crashes" in msg and "manifest.csv" in msg
    loader.close()
    assert children() - before == set()


def _open_links() -> list[str]:
    """What this process's file descriptors point at."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return out


def test_a_forked_child_lets_go_of_the_pools_sockets(tmp_path):
    manifest = write_dataset(tmp_path, 8)
    loader = extsrc.Loader(manifest, batch_size=4, transforms=[FLIP_ROWS],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2),
                           device="cpu", resize=16, workers=extsrc.Workers(num_workers=0))
    next(iter(loader))
    sockets = {f"socket:[{os.fstat(w.sock.fileno()).st_ino}]" for w in loader.op_pool._procs}
    assert len(sockets) == 2 and sockets <= set(_open_links())
    pid = os.fork()
    if pid == 0:  # the child: exit at once, telling how many of the pool's sockets it holds
        os._exit(len(sockets & set(_open_links())))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    pool = loader.op_pool
    memory = {os.fstat(m.fd).st_ino
              for m in (pool._inputs, *(m for w in pool._procs for m in w.outputs.values()))}
    loader.close()
    gc.collect()  # arrays that viewed the memory go, and their maps with them
    still = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            still.add(os.stat(f"/proc/self/fd/{fd}").st_ino)
        except OSError:
            continue
    assert len(memory) == 3 and not memory & still  # the inputs, each worker's outputs


def test_an_op_that_cannot_be_pickled_is_refused_at_construction(tmp_path):
    manifest = write_dataset(tmp_path, 4)
    lock = threading.Lock()
    op = augment_ops.Op(name="holds_a_lock", fn=lambda img, lock=lock: img)
    with pytest.raises(ValueError, match="op_pool='thread'"):
        extsrc.Loader(manifest, batch_size=2, transforms=[op],
                      op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2), device="cpu",
                      resize=16)
    # threads take it as it is
    loader = extsrc.Loader(manifest, batch_size=2, transforms=[op],
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2,
                                                       op_pool="thread"),
                           device="cpu", resize=16)
    assert sum(len(b["label"]) for b in loader) == 4
    loader.close()


def test_op_workers_come_from_the_cpu_affinity_and_the_local_world(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert cores_per_process() == 3
    manifest = write_dataset(tmp_path, 4)
    loader = extsrc.Loader(manifest, batch_size=2, transforms=[FLIP_ROWS],
                           op_runtime=extsrc.OpRuntime(op_path="numpy"), device="cpu", resize=16,
                           workers=extsrc.Workers(num_workers=0))
    assert loader.op_pool is not None and loader.op_pool.workers == 3
    no_numpy = extsrc.Loader(manifest, batch_size=2, device="cpu",
                             workers=extsrc.Workers(num_workers=0))
    assert no_numpy.op_pool is None  # nothing runs on the numpy path: no pool


def test_pool_arguments_are_checked(tmp_path):
    manifest = write_dataset(tmp_path, 4)
    with pytest.raises(ValueError, match="op_pool"):
        extsrc.Loader(manifest, batch_size=2, op_runtime=extsrc.OpRuntime(op_pool="fibers"),
                      device="cpu")
    with pytest.raises(ValueError, match="op_workers"):
        extsrc.Loader(manifest, batch_size=2, op_runtime=extsrc.OpRuntime(op_workers=-1),
                      device="cpu")
    with pytest.raises(ValueError, match="at least one worker"):
        OpPool(0)


_SCRIPT = """
import faulthandler, os, signal, sys
import numpy as np

faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's view of a hang
import extsrc
from augment_ops import augment_op

# no `if __name__ == "__main__":` guard, the op lives in __main__, a constant beside it
LEVELS = (np.arange(256) // 64 * 64).astype(np.uint8)

@augment_op(replace=True)
def main_posterize(img):
    return np.full_like(img, LEVELS[200])

loader = extsrc.Loader(sys.argv[1], batch_size=4, transforms=["main_posterize"],
                       op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=2),
                       device="cpu", resize=16, workers=extsrc.Workers(num_workers=0),
                       shuffle=False)
batch = next(iter(loader))
assert (batch["image"].numpy() == 192).all(), "op did not run"
print("PIDS", *loader.op_pool.pids, flush=True)
if sys.argv[2] == "wait":
    import time
    time.sleep(60)
loader.close()
print("DONE", flush=True)
"""


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(_SCRIPT))
    return path


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_an_op_defined_in_a_scripts_main_runs_in_the_workers(tmp_path):
    manifest = write_dataset(tmp_path, 8)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, str(_script(tmp_path)), str(manifest), "go"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "DONE" in out.stdout


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_workers_end_when_their_parent_is_killed_or_interrupted(tmp_path, how):
    manifest = write_dataset(tmp_path, 8)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen([sys.executable, str(_script(tmp_path)), str(manifest), "wait"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path, start_new_session=True)  # its own process group
    try:
        line = ""
        while not line.startswith("PIDS"):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()[-2000:]
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        # Ctrl-C in a terminal signals the whole process group: the workers ignore it, and
        # leave when their parent does.
        for p in pids:
            ignored = int(next(ln for ln in Path(f"/proc/{p}/status").read_text().splitlines()
                               if ln.startswith("SigIgn:")).split()[1], 16)
            assert ignored & (1 << (signal.SIGINT - 1))
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGKILL)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # every thread's stack, to stderr
            time.sleep(2)
            proc.kill()
            err = proc.communicate()[1]
            pytest.fail(f"the script did not end within 30 s of {how}; its threads then:\n"
                        f"{err[-8000:]}")
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_gpu_loader_pool_gives_the_serial_batches(tmp_path, kind):
    manifest = write_dataset(tmp_path, 30, fmt="jpg", size=(61, 83))
    ops = [FLIP_ROWS, JITTER_TILES]

    def batches(**op_runtime):
        loader = extsrc.Loader(manifest, batch_size=7, transforms=ops[:1], ops=ops[1:], resize=24,
                               op_runtime=extsrc.OpRuntime(op_path="numpy", **op_runtime),
                               device="cuda", seed=5)
        try:
            return [{k: v.cpu().clone() for k, v in b.items()} for _ in range(2) for b in loader]
        finally:
            loader.close()

    serial, pooled = batches(op_workers=0), batches(op_workers=3, op_pool=kind)
    assert len(serial) == len(pooled) == 10
    for a, b in zip(serial, pooled, strict=True):
        for k in a:
            assert a[k].equal(b[k]), k


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_a_refused_pin_leaves_memory_pageable_and_torch_unharmed():
    import ctypes
    import mmap
    import threading

    import torch

    from extsrc._util.device import pin_host_memory

    cuda = ctypes.CDLL("libcuda.so.1")

    def current() -> int | None:
        ctx = ctypes.c_void_p()
        assert cuda.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
        return ctx.value

    m = mmap.mmap(-1, 1 << 20)
    address = ctypes.addressof(ctypes.c_char.from_buffer(m))
    undo = pin_host_memory(address, len(m), 0)
    assert undo is not None
    try:
        # The same range again is refused (already registered): None, and no error left
        # behind for torch's next check to raise.
        assert pin_host_memory(address, len(m), 0) is None
        x = torch.ones(4, device="cuda:0") * 2
        torch.cuda.synchronize()
        assert x.sum().item() == 8
        # Undone from another thread, which starts without a current context and is left so.
        seen = []

        def unpin() -> None:
            undo()
            seen.append(current())

        t = threading.Thread(target=unpin)
        t.start()
        t.join()
        assert seen == [None]
    except BaseException:
        undo()
        raise
    # A thread whose current context is another one (here a second context on the same GPU,
    # as a user's thread on another GPU would have) keeps it.
    mine, before = ctypes.c_void_p(), current()
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(mine), 0, dev) == 0
    try:
        assert current() == mine.value
        again = pin_host_memory(address, len(m), 0)
        assert again is not None
        assert current() == mine.value
        again()
        assert current() == mine.value
    finally:
        assert cuda.cuCtxDestroy_v2(mine) == 0
        assert cuda.cuCtxSetCurrent(ctypes.c_void_p(before)) == 0


def test_gpu_loader_with_an_op_pool_leaves_the_cores_to_it():
    from unittest import mock

    from extsrc.loading.config import LoaderConfig, RunPlan

    def plan(**kw):
        config = LoaderConfig(batch_size=8, **kw)
        return RunPlan(config, tuple((op.name, "numpy") for op in config.ops))

    numpy = extsrc.OpRuntime(op_path="numpy")
    with mock.patch("extsrc.loading.config.cores_per_process", return_value=16):
        pooled = plan(ops=(FLIP_COLS,), op_runtime=numpy, device_id=0)
        assert pooled.op_pool_workers == 16 and (pooled.threads, pooled.workers) == (2, 2)
        # explicit values stand
        mine = plan(ops=(FLIP_COLS,), op_runtime=numpy, device_id=0,
                    workers=extsrc.Workers(num_threads=7, num_workers=3))
        assert (mine.threads, mine.workers) == (7, 3)
        # no pool (no numpy op; ops in DALI's thread) or no GPU: DALI gets the cores
        for other in (plan(device_id=0),
                      plan(ops=(FLIP_COLS,), device_id=0,
                           op_runtime=extsrc.OpRuntime(op_path="numpy", op_workers=0)),
                      plan(ops=(FLIP_COLS,), op_runtime=numpy)):
            assert (other.threads, other.workers) == (12, 4)
    with mock.patch("extsrc.loading.config.cores_per_process", return_value=64):  # scales with them
        pooled = plan(ops=(FLIP_COLS,), op_runtime=numpy, device_id=0)
        assert (pooled.threads, pooled.workers) == (8, 4)


def test_host_resize_runs_in_threads_until_the_workers_are_up_with_the_same_pixels(
        tmp_path, monkeypatch):
    """extsrc's own resize-only step takes no interpreter's start: its first batch runs in
    threads of this process before any worker exists, the workers start from the second, and
    once they have loaded the step it runs in them; every batch has the pixels of one thread."""
    from extsrc.ops_runtime.hostresize import HostResize, ResizeOnly
    from extsrc.ops_runtime.runners import BatchOpRunner
    from extsrc.sources.table import read_manifest

    manifest = read_manifest(write_dataset(tmp_path, 6, size=(33, 47)))
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (30 + i, 40 - i, 3), dtype=np.uint8) for i in range(6)]
    infos = [np.array([i, 0, 0]) for i in range(6)]
    step = ResizeOnly(HostResize((12, 16)))
    expected = [step.apply(img) for img in images]
    in_processes = []
    run_processes = OpPool._run_processes
    monkeypatch.setattr(OpPool, "_run_processes", lambda self, *a, **kw: (
        in_processes.append(1), run_processes(self, *a, **kw))[1])
    before = children()
    pool = OpPool(2, "process")
    runner = BatchOpRunner(step, seed=0, manifest=manifest, pool=pool)
    try:
        out = pool.run(runner, images, infos)
        assert pool.pids == [] and not in_processes  # the first batch: threads, no process
        for got, want in zip(out, expected, strict=True):
            np.testing.assert_array_equal(got[0], want[0])
        batches = 1
        deadline = time.monotonic() + 120
        while not in_processes and time.monotonic() < deadline:
            out = pool.run(runner, images, infos)
            batches += 1
            assert len(pool.pids) == 2  # started from the second batch on
            for got, want in zip(out, expected, strict=True):
                np.testing.assert_array_equal(got[0], want[0])
        assert in_processes and batches >= 2  # the workers took over
        out = pool.run(runner, images, infos)
        for got, want in zip(out, expected, strict=True):
            np.testing.assert_array_equal(got[0], want[0])
        assert len(in_processes) == 2  # and keep it
    finally:
        pool.close()
    assert children() - before == set()


def test_cpu_loader_without_ops_gives_the_serial_batches_with_an_op_pool(tmp_path):
    """Resizing in threads while the workers start, then in them: the batches of one thread."""
    manifest = write_dataset(tmp_path, 30, size=(33, 47))

    def batches(**kw):
        with extsrc.Loader(manifest, batch_size=4, resize=(12, 16), device="cpu", seed=2,
                           **kw) as loader:
            return [{k: v.clone() for k, v in b.items()} for _ in range(3) for b in loader]

    serial = batches(op_runtime=extsrc.OpRuntime(op_workers=0))
    pooled = batches(op_runtime=extsrc.OpRuntime(op_workers=2))
    assert len(serial) == len(pooled) == 24
    for a, b in zip(serial, pooled, strict=True):
        for k in a:
            assert a[k].equal(b[k]), k
