"""Build, iterate and close loaders many times in one process; report hangs, aborts and leaks.

Each cycle of a mode builds a train loader (shuffled, with reader processes), a val loader and a
rebuilt train loader (a new ``Loader`` on the same data), reads an epoch of each, leaves one
epoch part-way (the next ``iter`` builds the pipeline again), forks a child that runs a garbage
collection and exits (as a DataLoader worker would), and then:

* ``close``: closes every loader;
* ``drop``: drops every loader without ``close()`` (extsrc's reaper shuts the pipelines down).

Every mode runs in a child process of this script, so that an abort is an exit status and not
the end of the measurement. The child reports each cycle on a line; a cycle that does not
finish within ``--cycle-timeout`` seconds is a hang (the child's Python stacks are dumped to
stderr, then it is killed). At the end the child reports its live child processes, its open
file descriptors and memory files (``memfd``) against the counts after its first cycle, and
this script reports processes left behind (it is the subreaper of everything the modes start)
and new ``/dev/shm`` entries. Any hang, abort, failed fork check or leak makes the exit status
non-zero; ``--json`` writes the summary.

    python scripts/stress_loaders.py --cycles 50 --busy 2 --json stress.json
    python scripts/stress_loaders.py --cycles 20 --device cuda      # on a GPU machine
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import gc
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The tests' own counts of child processes and open descriptors, and their forked child
# (tests/helpers.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import children, forked_gc_exits, open_fds

MODES = ("close", "drop")


# -- what a mode's child process runs -------------------------------------------------------------


def _write_dataset(root: Path, n: int) -> Path:
    import numpy as np
    from PIL import Image

    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = ["path,label"]
    rng = np.random.default_rng(0)
    for i in range(n):
        rel = f"images/{i:04d}.{'png' if i % 2 else 'jpg'}"
        img = rng.integers(0, 256, (30 + i % 5, 40 + i % 3, 3), dtype=np.uint8)
        Image.fromarray(img).save(root / rel)
        lines.append(f"{rel},{i % 3}")
    (root / "manifest.csv").write_text("\n".join(lines) + "\n")
    return root / "manifest.csv"


def _fork_check(timeout: float) -> str | None:
    """Fork a child that collects garbage and exits; what went wrong, or None."""
    code = forked_gc_exits(timeout)
    if code == -9:
        return f"forked child did not exit within {timeout:g} s"
    return None if code == 0 else f"forked child exited with {code}"


def _cycle(manifest: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    import warnings

    from extsrc import Loader, Workers
    from extsrc._dali import lifecycle

    kw = {"batch_size": args.batch_size, "resize": 16, "device": args.device,
          "workers": Workers(num_threads=1, num_workers=args.workers)}
    train = Loader(manifest, shuffle=True, **kw)
    val = Loader(manifest, shuffle=False, **kw)
    batches = sum(1 for _ in train) + sum(1 for _ in val)
    for _ in train:  # leave an epoch part-way: the next iteration builds the pipeline again
        break
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches += sum(1 for _ in train)
    fork_problem = _fork_check(args.fork_timeout) if args.fork else None
    rebuilt = Loader(manifest, shuffle=True, seed=1, **kw)
    batches += sum(1 for _ in rebuilt)
    if mode == "close":
        for loader in (train, val, rebuilt):
            loader.close()
    del train, val, rebuilt
    gc.collect()
    reaped = lifecycle.reap_pending(args.cycle_timeout)
    return {"batches": batches, "fork_problem": fork_problem, "reaped": reaped}


def run_mode(args: argparse.Namespace) -> int:
    """The child process of one mode: cycles, one JSON line each, then a final line."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    manifest = Path(args.manifest)
    baseline = None
    for i in range(args.cycles):
        t = time.monotonic()
        res = _cycle(manifest, args.mode, args)
        res.update(cycle=i, seconds=round(time.monotonic() - t, 3), fds=open_fds(),
                   children=sorted(children()))
        if baseline is None:
            baseline = res["fds"]
        print(json.dumps(res), flush=True)
    time.sleep(0.5)  # stopped processes finish exiting
    fds, memfds = open_fds()
    final = {"final": True, "children": sorted(children()), "fds": fds, "memfds": memfds,
             "baseline_fds": baseline[0] if baseline else fds,
             "baseline_memfds": baseline[1] if baseline else memfds}
    print(json.dumps(final), flush=True)
    return 0


# -- the supervisor -------------------------------------------------------------------------------


def _spin() -> None:
    while True:
        pass


def _shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def _new_shm(before: set[str]) -> set[str]:
    """/dev/shm entries made since ``before`` that stay, leaving out those named after another
    live process (loky's semaphores, ``sem.loky-PID-...``, of other programs on the machine)."""
    out = set()
    for name in _shm() - before:
        pid = re.search(r"-(\d+)-", name)
        if pid and os.path.exists(f"/proc/{pid[1]}"):
            continue
        out.add(name)
    return out


def supervise(mode: str, manifest: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--manifest",
           str(manifest), "--cycles", str(args.cycles), "--workers", str(args.workers),
           "--batch-size", str(args.batch_size), "--device", args.device,
           "--cycle-timeout", str(args.cycle_timeout), "--fork-timeout", str(args.fork_timeout)]
    if not args.fork:
        cmd.append("--no-fork")
    shm_before = _shm()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cycles: list[dict[str, Any]] = []
    final: dict[str, Any] | None = None
    hang = None
    buf = ""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    # The first cycle imports DALI and torch: it gets three timeouts.
    deadline = time.monotonic() + 3 * args.cycle_timeout
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            hang = {"cycle": len(cycles), "after_s": args.cycle_timeout}
            proc.send_signal(signal.SIGUSR1)  # the child's stacks, on its stderr
            time.sleep(2.0)
            proc.kill()
            break
        chunk = os.read(fd, 65536).decode()
        if not chunk:
            break
        buf += chunk
        while "\n" in buf:
            line, buf = buf.split("\n", 1)
            rec = json.loads(line)
            if rec.get("final"):
                final = rec
            else:
                cycles.append(rec)
                deadline = time.monotonic() + args.cycle_timeout
    stderr = proc.stderr.read() if proc.stderr is not None else ""
    code = proc.wait()
    time.sleep(0.5)
    leftovers = [p for p in sorted(children()) if p not in args.spinners]  # reparented to us
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    new_shm = sorted(_new_shm(shm_before))
    problems = []
    if hang:
        problems.append(f"hang in cycle {hang['cycle']} (no progress for {hang['after_s']} s)")
    elif code != 0:
        problems.append(f"child exited with status {code}"
                        + (f" ({signal.Signals(-code).name})" if code < 0 else ""))
    bad_forks = [c["cycle"] for c in cycles if c["fork_problem"]]
    if bad_forks:
        problems.append(f"fork check failed in cycles {bad_forks}: "
                        f"{cycles[bad_forks[0]]['fork_problem']}")
    unreaped = [c["cycle"] for c in cycles if not c["reaped"]]
    if unreaped:
        problems.append(f"dropped loaders not shut down in time in cycles {unreaped}")
    if final is not None:
        if final["children"]:
            problems.append(f"live child processes at the end: {final['children']}")
        if final["fds"] > final["baseline_fds"]:
            problems.append(f"file descriptors grew from {final['baseline_fds']} (after cycle "
                            f"0) to {final['fds']}")
        if final["memfds"] > final["baseline_memfds"]:
            problems.append(f"memory files grew from {final['baseline_memfds']} to "
                            f"{final['memfds']}")
    elif not problems:
        problems.append("child ended without its final report")
    if leftovers:
        problems.append(f"processes left behind after the child exited: {leftovers}")
    if new_shm:
        problems.append(f"new /dev/shm entries: {new_shm[:10]}")
    secs = [c["seconds"] for c in cycles]
    return {
        "mode": mode, "cycles_done": len(cycles), "cycles_asked": args.cycles,
        "exit_status": code, "hang": hang, "final": final, "leftover_processes": leftovers,
        "new_shm": new_shm, "seconds": round(time.monotonic() - t0, 1),
        "cycle_seconds": {"min": min(secs), "median": sorted(secs)[len(secs) // 2],
                          "max": max(secs)} if secs else None,
        "problems": problems, "stderr_tail": stderr[-4000:] if problems else "",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50, help="cycles per mode (default 50)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: close,drop")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--workers", type=int, default=2, help="DALI reader processes per loader")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--busy", type=int, default=0, help="processes spinning on the cores")
    ap.add_argument("--cycle-timeout", type=float, default=120.0)
    ap.add_argument("--fork-timeout", type=float, default=30.0)
    ap.add_argument("--no-fork", dest="fork", action="store_false",
                    help="leave out the forked child's garbage collection")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--manifest", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.mode = args.child
        return run_mode(args)

    if sys.platform.startswith("linux"):  # orphans of the modes are reparented here, and seen
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    import multiprocessing

    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    args.spinners = {p.pid for p in spinners}
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="extsrc-stress-") as tmp:
            manifest = _write_dataset(Path(tmp), args.samples)
            for mode in args.modes.split(","):
                res = supervise(mode, manifest, args)
                results.append(res)
                print(f"{mode}: {res['cycles_done']}/{args.cycles} cycles in {res['seconds']} s,"
                      f" exit status {res['exit_status']}, problems: {res['problems'] or 'none'}",
                      flush=True)
    finally:
        for p in spinners:
            p.kill()
            p.join()
    summary = {"device": args.device, "cycles": args.cycles, "busy": args.busy,
               "workers": args.workers, "fork_check": args.fork, "modes": results,
               "ok": all(not r["problems"] for r in results)}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
