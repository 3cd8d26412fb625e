"""A slow start says what it is doing (extsrc._util.slowstart); a fast one says nothing."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import write_dataset

import augment_ops
import extsrc
from extsrc import BadFiles, Workers
from extsrc._util import slowstart


def _brighten(img):
    return np.clip(img.astype(np.int16) + 10, 0, 255).astype(np.uint8)


BRIGHTEN = augment_ops.Op(name="slowstart_test_brighten", fn=_brighten)


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "extsrc"]


def test_a_fast_build_says_nothing(tmp_path, caplog, capsys):
    manifest = write_dataset(tmp_path, 8)
    caplog.set_level(logging.INFO, logger="extsrc")
    with extsrc.Loader(manifest, batch_size=4, resize=16, device="cpu", transforms=[BRIGHTEN],
                       bad_files=BadFiles(on_error="skip"),
                       workers=Workers(num_workers=1)) as loader:
        assert len(next(iter(loader))["label"]) == 4
    assert _lines(caplog) == []
    err = capsys.readouterr().err
    assert "extsrc" not in err and "validate" not in err  # no validation bar for a quick check


def test_every_slow_stage_of_a_build_is_named_with_its_time(tmp_path, caplog, monkeypatch):
    manifest = write_dataset(tmp_path, 8)
    monkeypatch.setattr(slowstart, "SLOW_SECONDS", 0.0)  # every stage counts as slow
    caplog.set_level(logging.INFO, logger="extsrc")
    m = extsrc.read_manifest(manifest)
    with extsrc.Loader(m, batch_size=4, resize=16, device="cpu", transforms=[BRIGHTEN],
                       bad_files=BadFiles(on_error="skip"),
                       workers=Workers(num_workers=1, start_method="fork")) as loader:
        next(iter(loader))
    lines = _lines(caplog)
    for what in (f"reading the manifest {manifest}",
                 f"checking the 8 files of {manifest} (on_error='skip')",
                 "tracing op 'slowstart_test_brighten' into DALI operators",
                 "building the DALI pipeline (1 reader process, fork)"):
        said = [x for x in lines if x.startswith(what + ": ")]
        assert len(said) == 2, (what, lines)
        assert said[0] == f"{what}: over 0 s so far"
        assert said[1].startswith(f"{what}: done after ") and said[1].endswith(" s")
    assert len(lines) == 8


def test_a_stage_that_fails_says_so(caplog):
    caplog.set_level(logging.INFO, logger="extsrc")
    with pytest.raises(KeyError), slowstart.stage("counting sheep", threshold=0):
        raise KeyError("no sheep")
    lines = _lines(caplog)
    assert len(lines) == 2 and lines[0] == "counting sheep: over 0 s so far"
    assert lines[1].startswith("counting sheep: failed after ")


def test_a_stage_still_running_is_named_before_it_ends():
    """The timer's thread names the stage while it runs (the block waits for it to)."""
    import threading

    said: list[str] = []
    named = threading.Event()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())
            named.set()

    logger = logging.getLogger("extsrc")
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with slowstart.stage("waiting", threshold=0.01):
            assert named.wait(60)  # said from the timer's thread, the block still running
            assert said == ["waiting: over 0.01 s so far"]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert len(said) == 2 and said[1].startswith("waiting: done after ")


def test_without_logging_configured_the_lines_go_to_stderr(tmp_path):
    manifest = write_dataset(tmp_path, 4)
    script = textwrap.dedent(f"""
        import extsrc
        from extsrc._util import slowstart
        slowstart.SLOW_SECONDS = 0.0
        extsrc.read_manifest({str(manifest)!r})
        slowstart.SLOW_SECONDS = 2.0
        extsrc.read_manifest({str(manifest)!r})
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == f"extsrc: reading the manifest {manifest}: over 0 s so far"
    assert lines[1].startswith(f"extsrc: reading the manifest {manifest}: done after ")
    assert len(lines) == 2  # the second, fast read: nothing


def test_validate_shows_its_bar_once_it_has_taken_the_seconds_given(tmp_path, capsys):
    manifest = write_dataset(tmp_path, 4)
    extsrc.validate(manifest, n_jobs=1, progress=0.0)  # at once, as progress=True
    assert "extsrc.validate" in capsys.readouterr().err
    extsrc.validate(manifest, n_jobs=1, progress=600.0)  # a quick check: no bar
    assert "extsrc.validate" not in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"validate: progress must be a bool or seconds >= 0"):
        extsrc.validate(manifest, progress=-1.0)
    with pytest.raises(TypeError, match=r"validate: progress"):
        extsrc.validate(manifest, progress="yes")
