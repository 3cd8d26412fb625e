"""Ops travel to the op workers by value with their file name and source lines, whatever the
installed cloudpickle does with code objects (3.1.3 renames every file to "<dynamic-code>")."""

from __future__ import annotations

import linecache
import subprocess
import sys
import textwrap

from extsrc.ops_runtime.oppickle import dumps

_WORKER = textwrap.dedent("""
    import pickle, sys, traceback
    fn = pickle.loads(sys.stdin.buffer.read())
    try:
        fn(3)
    except ZeroDivisionError:
        traceback.print_exc()
""")


def _traceback_in_fresh_interpreter(fn) -> str:
    out = subprocess.run([sys.executable, "-c", _WORKER], input=dumps(fn), capture_output=True,
                         timeout=60, check=True)
    return out.stderr.decode()


def _divide_by_zero(x):
    scale = 0
    return x / scale  # the line a traceback must show


def test_a_function_keeps_its_file_and_line(monkeypatch):
    # A function of __main__ goes by value, as ops of scripts and notebooks do.
    monkeypatch.setattr(_divide_by_zero, "__module__", "__main__")
    tb = _traceback_in_fresh_interpreter(_divide_by_zero)
    assert f'File "{__file__}", line ' in tb, tb
    assert "return x / scale  # the line a traceback must show" in tb, tb
    assert "<dynamic-code>" not in tb


def test_a_cell_that_is_not_on_disk_brings_its_source():
    # IPython compiles each cell under a made-up file name and keeps its source in linecache.
    name = "/nonexistent/ipykernel_0/12345.py"
    source = "def cell_op(x):\n    y = x - 3\n    return x / y  # from the notebook cell\n"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    try:
        namespace = {"__name__": "__main__"}
        exec(compile(source, name, "exec"), namespace)
        tb = _traceback_in_fresh_interpreter(namespace["cell_op"])
    finally:
        linecache.cache.pop(name, None)
    assert f'File "{name}", line 3, in cell_op' in tb, tb
    assert "return x / y  # from the notebook cell" in tb, tb
