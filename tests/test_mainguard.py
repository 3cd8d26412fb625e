"""A script that builds a Loader at top level, without ``if __name__ == "__main__":``, while DALI's
readers start with ``spawn``: it must end at once with a one-line message, not hang or end with
DALI's raw "Workers initialization failed". Real scripts, run as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from extsrc._util.mainguard import _under_main_guard
from extsrc.tools.sample_data import make_sample_dataset

ROOT = Path(__file__).resolve().parents[1]
GUARD_HINT = 'put the script\'s top-level code under `if __name__ == "__main__":`'

LOADER = """
import sys
sys.path.insert(0, {root!r})
import extsrc

def make():
    return extsrc.Loader({manifest!r}, batch_size=4, resize=32, device="cpu",
                         workers=extsrc.Workers(num_workers={workers}, start_method="spawn"))
"""


def _session_processes(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the script and everything it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # field 6 of stat: session id
            pids.append(int(entry.name))
    return pids


def _run_script(path: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, cwd=path.parent,
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        # Helpers (multiprocessing's resource tracker, readers being reaped) get a moment to
        # exit after the script; anything still there after it was left behind.
        deadline = time.monotonic() + 5.0
        while (left := _session_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() is None or left:
            os.killpg(proc.pid, 9)
            proc.communicate()
    assert not left, f"processes left running: {left}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    return make_sample_dataset(tmp_path_factory.mktemp("mg"), 8, size=(40, 48))


@pytest.mark.parametrize("where", ["top level", "function called at top level"])
def test_unguarded_script_ends_at_once_with_the_hint(tmp_path, manifest, where):
    body = LOADER.format(root=str(ROOT), manifest=str(manifest), workers=2)
    if where == "top level":
        body += "loader = make()\nnext(iter(loader))\nprint('got a batch')\n"
    else:
        body += "def train():\n    next(iter(make()))\n\ntrain()\n"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    res = _run_script(script)
    assert res.returncode != 0
    assert "got a batch" not in res.stdout
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("extsrc.errors.MainGuardError: extsrc.Loader: ")
    assert GUARD_HINT in last and f"{script} line " in last
    assert "Workers initialization failed" not in res.stderr


@pytest.mark.slow
def test_guarded_script_with_spawned_readers_runs(tmp_path, manifest):
    body = LOADER.format(root=str(ROOT), manifest=str(manifest), workers=1)
    body += "if __name__ == '__main__':\n    with make() as loader:\n" \
            "        print('batch of', len(next(iter(loader))['label']))\n"
    script = tmp_path / "train.py"
    script.write_text(body)
    res = _run_script(script)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "batch of 4" in res.stdout


def test_a_spawned_child_importing_the_script_refuses_too(tmp_path, manifest):
    # No readers in the script's own process (num_workers=0): only the spawned child, which
    # imports the script again and so builds the Loader while it starts, can notice.
    body = LOADER.format(root=str(ROOT), manifest=str(manifest), workers=0)
    body += textwrap.dedent("""
        loader = make()
        import multiprocessing as mp

        def noop():
            pass

        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=noop)
            p.start()
            p.join(50)
            print("child exit code", p.exitcode)
    """)
    script = tmp_path / "train.py"
    script.write_text(body)
    res = _run_script(script)
    assert "child exit code 1" in res.stdout
    assert "MainGuardError: extsrc.Loader: " in res.stderr
    assert "importing the script again" in res.stderr and GUARD_HINT in res.stderr


@pytest.mark.parametrize(("source", "line", "expected"), [
    ("x = 1\nif __name__ == '__main__':\n    y = 2\n", 3, True),
    ("x = 1\nif __name__ == '__main__':\n    y = 2\n", 1, False),
    ("if '__main__' == __name__ and True:\n    with open('f') as f:\n        y = 2\n", 3, True),
    ("if __name__ == '__main__':\n    pass\nelse:\n    y = 2\n", 4, False),
    ("try:\n    y = 2\nexcept Exception:\n    pass\n", 2, False),
    ("if x:\n    if __name__ == '__main__':\n        y = 2\n", 3, True),
])
def test_under_main_guard_reads_the_source(tmp_path, source, line, expected):
    path = tmp_path / "s.py"
    path.write_text(source)
    assert _under_main_guard(str(path), line) is expected


def test_under_main_guard_claims_nothing_without_source(tmp_path):
    assert _under_main_guard(str(tmp_path / "missing.py"), 1) is None
