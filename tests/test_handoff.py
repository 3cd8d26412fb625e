"""``extsrc._dali.handoff``: a reader's large state travels to a spawned reader by file, so that
the spawn pipe (64 KiB) does not make the readers start one after another."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import write_dataset

import extsrc
from extsrc._dali import handoff


@pytest.fixture()
def private_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _handoff_dirs(root):
    return sorted(p.name for p in root.glob("extsrc-handoff-*"))


def test_outside_a_start_every_object_is_left_as_it_is():
    big = np.arange(100_000)
    assert handoff.outgoing(big) is big


def test_a_large_object_pickles_as_its_file_and_loads_equal(private_tmp):
    big = {"paths": [f"images/{i:07d}.jpg" for i in range(20_000)], "labels": np.arange(20_000)}
    small = {"n": 3}
    with handoff.handing_over():
        sent = pickle.dumps(handoff.outgoing(big))
        assert handoff.outgoing(small) is small
        assert len(sent) < 1024 < handoff.MIN_BYTES < len(pickle.dumps(big))
        got = pickle.loads(sent)
        assert _handoff_dirs(private_tmp)  # the file is there while readers start
    assert got["paths"] == big["paths"] and np.array_equal(got["labels"], big["labels"])
    assert _handoff_dirs(private_tmp) == []  # and gone once they have


def test_a_file_changed_after_it_was_written_is_not_loaded(private_tmp):
    big = list(range(20_000))
    with handoff.handing_over():
        sent = pickle.dumps(handoff.outgoing(big))
        (path,) = private_tmp.glob("extsrc-handoff-*/*.pickle")
        path.write_bytes(pickle.dumps(list(range(20_001))))
        with pytest.raises(RuntimeError, match="not what its loader wrote"):
            pickle.loads(sent)


def test_a_process_forked_inside_a_start_pickles_as_outside_one(private_tmp):
    """A reader forked while a start hands over (DALI's ``fork``) runs on the forking thread's
    state: it must not write files of its own that nothing removes."""
    big = list(range(20_000))
    with handoff.handing_over():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report whether the object was left as it is
            os.write(w, b"1" if handoff.outgoing(big) is big else b"0")
            os._exit(0)
        os.close(w)
        left = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
    assert left == b"1"
    assert _handoff_dirs(private_tmp) == []


def test_a_start_that_never_ends_leaves_no_file_after_the_process(tmp_path):
    """A start abandoned inside the block (a build the watchdog gave up on) still removes its
    files when the process exits: they may hold storage options."""
    code = ("import pathlib, pickle, sys, tempfile, threading, time\n"
            "tempfile.tempdir = sys.argv[1]\n"
            "from extsrc._dali import handoff\n"
            "ready = threading.Event()\n"
            "def stuck():\n"
            "    with handoff.handing_over():\n"
            "        pickle.dumps(handoff.outgoing(list(range(20_000))))\n"
            "        ready.set()\n"
            "        time.sleep(3600)  # a start that never returns\n"
            "threading.Thread(target=stuck, daemon=True).start()\n"
            "ready.wait()\n"
            "assert list(pathlib.Path(sys.argv[1]).glob('extsrc-handoff-*'))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env)
    assert _handoff_dirs(tmp_path) == []


def test_what_standard_pickle_cannot_write_is_left_to_the_callers_pickler(private_tmp):
    local = [lambda x: x] * 10_000
    with handoff.handing_over():
        assert handoff.outgoing(local) is local
    assert _handoff_dirs(private_tmp) == []


@pytest.mark.slow
def test_spawned_readers_of_a_large_manifest_deliver_every_sample_once(tmp_path, private_tmp):
    """2,000 samples pickle to well over the spawn pipe's 64 KiB: the readers get the manifest
    by file, deliver each sample once, and leave no file behind."""
    n = 2_000
    manifest = write_dataset(tmp_path / "data", n, fmt="jpg", size=(8, 8), label_fn=lambda i: i)
    m = extsrc.read_manifest(manifest)
    assert len(pickle.dumps(m)) > 64 * 1024
    from extsrc.sources.images import ShardedSource

    with handoff.handing_over():  # what DALI writes to each reader's pipe
        assert len(pickle.dumps(ShardedSource(m, batch_size=100))) < 8 * 1024
    loader = extsrc.Loader(m, batch_size=100, resize=8, device="cpu", shuffle=True, seed=1,
                           workers=extsrc.Workers(num_workers=2, start_method="spawn"))
    labels = np.concatenate([b["label"].numpy().ravel() for b in loader])
    assert sorted(labels.tolist()) == list(range(n))
    assert _handoff_dirs(private_tmp) == []
    loader.close()
