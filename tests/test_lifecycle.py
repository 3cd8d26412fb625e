"""DALI pipelines' lifetime: several loaders in one process build, run and end without hanging,
aborting or leaving processes, descriptors or shared memory behind; a forked child never shuts a
parent's pipeline down; a worker that never starts is a bounded wait with a clear error."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import children, forked_gc_exits, open_fds, write_dataset

from extsrc import Loader, Workers
from extsrc._dali import lifecycle
from extsrc.errors import WorkerDiedError, WorkerStartError

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")

ROOT = Path(__file__).resolve().parents[1]


def shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def new_shm(before: set[str]) -> set[str]:
    """/dev/shm entries made since ``before`` that stay, leaving out those named after another
    live process (loky's semaphores: ``sem.loky-PID-...``; other programs share the machine)."""
    time.sleep(0.2)  # multiprocessing's semaphores are unlinked right after they are made
    out = set()
    for name in shm() - before:
        pid = re.search(r"-(\d+)-", name)
        if pid and int(pid[1]) != os.getpid() and os.path.exists(f"/proc/{pid[1]}"):
            continue
        out.add(name)
    return out


def loader(manifest: Path, num_workers: int = 2, **kw) -> Loader:
    return Loader(manifest, batch_size=4, resize=16, device="cpu",
                  workers=Workers(num_threads=1, num_workers=num_workers), **kw)


def one_epoch(ld: Loader) -> list[int]:
    return [i for b in ld for i in b["index"].tolist()]


@pytest.mark.slow
def test_build_iterate_close_and_drop_cycles_leave_nothing_behind(tmp_path):
    """5 cycles of each mode: a train and a val loader built, read and closed (even cycles) or
    dropped without close() (odd ones, ended by extsrc's reaper); each cycle's loaders are new,
    so every cycle also rebuilds. No reader process, descriptor, memory file or /dev/shm entry
    outlives its cycle."""
    manifest = write_dataset(tmp_path, 8)
    before_children, before_shm = children(), shm()
    baseline = None
    for cycle in range(10):
        train, val = loader(manifest, num_workers=1), loader(manifest, shuffle=False)
        assert sorted(one_epoch(train)) == list(range(8))
        assert one_epoch(val) == list(range(8))
        assert children() - before_children  # the reader processes were up
        if cycle % 2 == 0:
            train.close()
            val.close()
        del train, val
        gc.collect()
        assert lifecycle.reap_pending(60)
        deadline = time.monotonic() + 10
        while children() - before_children and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children() - before_children == set(), f"cycle {cycle}"
        if baseline is None:
            baseline = open_fds()
        assert open_fds() == baseline, f"cycle {cycle}"
    assert new_shm(before_shm) == set()


def test_dropped_loader_is_shut_down_by_the_reaper_not_by_a_collection(tmp_path):
    manifest = write_dataset(tmp_path, 8)
    before = children()
    ld = loader(manifest)
    it = iter(ld)
    next(it)
    pipe = ld._run.pipe
    assert pipe._pipe is not None  # DALI's backend is up
    del ld, it
    gc.collect()
    assert lifecycle.reap_pending(60)
    # Shut down by extsrc, so the object's own __del__ (whenever a collection gets to it) has
    # nothing left to shut down.
    assert pipe._pipe is None
    deadline = time.monotonic() + 10
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children() - before == set()


@pytest.mark.parametrize("state", ["iterating", "dropped"])
def test_forked_child_collects_and_exits_cleanly(tmp_path, state):
    """A child forked after a loader was built (a DataLoader worker, a user's fork) collects
    garbage and exits normally without touching the parent's pipeline; the parent's epoch
    goes on."""
    manifest = write_dataset(tmp_path, 12)
    ld = loader(manifest, shuffle=False)
    it = iter(ld)
    first = next(it)["index"].tolist()
    if state == "dropped":
        # garbage in this process, not collected yet: the child inherits it as garbage
        gc.disable()
        try:
            cycle = [loader(manifest, num_workers=1)]
            cycle.append(cycle)
            sum(1 for _ in cycle[0])
            del cycle
            assert forked_gc_exits() == 0
        finally:
            gc.enable()
    else:
        assert forked_gc_exits() == 0
    rest = [i for b in it for i in b["index"].tolist()]
    assert first + rest == list(range(12))
    ld.close()


def _script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    manifest = write_dataset(tmp_path, 8)
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from helpers import children
        import extsrc._dali.run
        from extsrc import Loader, Workers
        manifest = {str(manifest)!r}
    """) + textwrap.dedent(body)
    # The repo first, and whatever the interpreter was given besides (where DALI may live).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)


def _faulty_readers(tmp_path: Path, *, build_timeout: float, fault: str,
                    body: str) -> subprocess.CompletedProcess[str]:
    """:func:`_script` of ``body`` after ``ld``, a loader of two reader processes, is made with
    ``extsrc._dali.run.BUILD_TIMEOUT = build_timeout`` and a fork handler that runs ``fault`` (an
    expression) in every child forked while ``fault_on[0]`` is true."""
    return _script(tmp_path, textwrap.dedent(f"""
        extsrc._dali.run.BUILD_TIMEOUT = {build_timeout!r}
        ld = Loader(manifest, batch_size=4, resize=16, device="cpu",
                    workers=Workers(num_workers=2, num_threads=1))
        fault_on = [True]
        os.register_at_fork(after_in_child=lambda: fault_on[0] and {fault})
    """) + textwrap.dedent(body))


def test_reader_that_never_starts_is_a_bounded_wait_with_a_clear_error(tmp_path):
    """pipe.build() waits for every reader process to report ready; one blocked at start-up
    (here: a fork handler that sleeps) is stopped after BUILD_TIMEOUT with WorkerStartError,
    and the loader builds again afterwards."""
    res = _faulty_readers(tmp_path, build_timeout=2.0, fault="time.sleep(3600)", body="""
        from extsrc.errors import WorkerStartError
        t = time.monotonic()
        try:
            iter(ld)
        except WorkerStartError as e:
            print("raised", len(e.pids), e.timeout, time.monotonic() - t < 30)
            print("message", e)
        print("running", ld.running, "children", sorted(children()))
        fault_on[0] = False
        extsrc._dali.run.BUILD_TIMEOUT = 120.0  # the rebuild must not race a short limit
        print("batches", sum(1 for _ in ld))
        ld.close()
    """)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "raised 2 2.0 True" in out
    assert "running False children []" in out
    assert "batches 2" in out
    assert ("did not report ready within 2 s of building the pipeline, so they were stopped"
            in out)


def test_forked_children_exit_through_teardown_and_exit_shuts_the_loader_down(tmp_path):
    """Children forked mid-epoch that drop everything (one after loader.close(), which in a
    child must not touch the parent's workers), collect and exit as a script does (atexit
    hooks, then the interpreter's teardown) end with status 0, and the parent's epoch goes on.
    The parent then exits with the loader still referenced: its reader processes end with it."""
    res = _script(tmp_path, """
        import gc, multiprocessing.process
        ld = Loader(manifest, batch_size=2, resize=16, device="cpu", shuffle=False,
                    workers=Workers(num_workers=2, num_threads=1))
        it = iter(ld)
        seen = next(it)["index"].tolist()
        for close_first in (True, False):
            pid = os.fork()
            if pid == 0:
                multiprocessing.process._children.clear()  # the parent's, listed by os.fork
                if close_first:
                    ld.close()
                del it, ld
                gc.collect()
                sys.exit(0)
            t = time.monotonic()
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    print("child status", os.waitstatus_to_exitcode(status))
                    break
                if time.monotonic() - t > 60:
                    os.kill(pid, 9)
                    print("child hung")
                    break
                time.sleep(0.02)
            seen += next(it)["index"].tolist()
        print("pids", sorted(children()), flush=True)
        print("seen", seen + [i for b in it for i in b["index"].tolist()])
        it = iter(ld)
        next(it)  # still referenced, mid-epoch, when the interpreter exits
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("child status 0") == 2, res.stdout
    assert "seen [0, 1, 2, 3, 4, 5, 6, 7]" in res.stdout
    line = next(x for x in res.stdout.splitlines() if x.startswith("pids"))
    pids = [int(p) for p in line[len("pids ["):-1].split(",")]
    assert pids
    deadline = time.monotonic() + 10
    while [p for p in pids if os.path.exists(f"/proc/{p}")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]


def test_worker_start_error_is_a_worker_died_error():
    e = WorkerStartError(pids=[11, 12], timeout=5.0)
    assert isinstance(e, WorkerDiedError) and isinstance(e, RuntimeError)
    assert (e.pids, e.timeout) == ((11, 12), 5.0)
    assert "pids: 11, 12" in str(e) and "within 5 s" in str(e)


def test_reader_that_dies_at_start_is_reported_without_waiting_for_the_build_limit(tmp_path):
    """A reader process that exits while pipe.build() waits for it gives extsrc's
    WorkerDiedError (with its exit code when the watchdog saw it alive first) instead of DALI's
    bare RuntimeError or a wait until BUILD_TIMEOUT."""
    res = _faulty_readers(tmp_path, build_timeout=3600.0, fault="os._exit(3)", body="""
        from extsrc.errors import WorkerDiedError
        try:
            iter(ld)
        except WorkerDiedError as e:
            print("raised", "did not start" in str(e))
        fault_on[0] = False
        print("children", sorted(children()))
        print("batches", sum(1 for _ in ld))
        ld.close()
    """)
    assert res.returncode == 0, res.stderr
    assert "raised True" in res.stdout, res.stdout
    assert "children []" in res.stdout, res.stdout
    assert "batches 2" in res.stdout, res.stdout
