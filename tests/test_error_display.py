"""What a user sees when a loader fails and the exception goes uncaught: the extsrc error, on one
screen, with its message (line, path, fix; an op's or a worker's own traceback) and the frames of
the user's code, never DALI's traceback or the loader's helper thread before it, nor anything
twice. ``EXTSRC_DEBUG=1`` brings DALI's exception back as the error's cause, with every frame.

Real loaders over real files run in a fresh interpreter (``sys.executable -c``) whose stderr is
read as a terminal would show it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from helpers import BAD_FILES, dataset_with_bad, write_dataset

import extsrc
from extsrc import Loader, OpRuntime, Workers, read_manifest
from extsrc._dali.messages import without_dali_frames
from extsrc.errors import BadImageError, OpError, SampleReadError
from extsrc.loading.failures import DEBUG_ENV, debug

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")

REPO = Path(extsrc.__file__).resolve().parents[1]

#: At most this many lines of stderr for one failure.
SCREEN = 25

#: Text that must never reach the user by default: DALI's report and frames, the helper
#: thread of the loader's watchdog, an exception chain.
NOISE = (
    "Critical error in pipeline", "Current pipeline object is no longer valid",
    "concurrent/futures", "nvidia/dali", "_dali/run.py", "Exception traceback received from",
    "The above exception was the direct cause", "During handling of the above exception",
)

OP = '''
from augment_ops import augment_op

@augment_op(name="ed_boom")
def ed_boom(img):
    raise ValueError("boom on purpose")
'''

LOOP = '''
import sys
import extsrc
{setup}
def main():
    loader = extsrc.{cls}(sys.argv[1], batch_size=2, device="cpu", shuffle=False, {kw})
    for batch in loader:
        pass

if {caught}:
    import traceback
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
else:
    main()
'''


def run_loop(manifest: Path, *, kw: str = "", setup: str = "", cls: str = "Loader",
             caught: bool = False, debug_env: bool = False) -> str:
    """Run a loader's loop over ``manifest`` in a fresh interpreter; its stderr."""
    env = {k: v for k, v in os.environ.items() if k != DEBUG_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    if debug_env:
        env[DEBUG_ENV] = "1"
    code = LOOP.format(setup=setup, cls=cls, kw=kw, caught=caught)
    proc = subprocess.run([sys.executable, "-c", code, str(manifest)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    return proc.stderr


def assert_one_screen(stderr: str, error_line: str) -> None:
    lines = stderr.rstrip("\n").splitlines()
    assert lines.count(error_line) >= 1, stderr
    assert lines[0] == "Traceback (most recent call last):", stderr  # nothing printed before
    assert len(lines) <= SCREEN, f"{len(lines)} lines:\n{stderr}"
    for noise in NOISE:
        assert noise not in stderr, f"{noise!r} shown:\n{stderr}"
    # The traceback shows the user's code (``-c``: "<string>") down to its loop, then the one
    # frame of the iterator that raised, then the error.
    frames = re.findall(r'^  File "([^"]*)", line \d+, in (\S+)$',
                        stderr.split(error_line)[0], re.M)
    assert frames[:2] == [("<string>", "<module>"), ("<string>", "main")], stderr
    assert len(frames) == 3 and frames[2][0].endswith("epoch.py"), stderr


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    return dataset_with_bad(tmp_path_factory.mktemp("bad"),
                            ["missing", "truncated_jpeg", "text_as_jpg"], n=6)


def one_bad(bad: tuple[Path, dict[str, int]], kind: str) -> tuple[Path, int, str]:
    """A manifest of the good images and the one bad file of ``kind``, beside the dataset's:
    (manifest, the bad file's line, its path)."""
    mpath, where = bad
    rows = mpath.read_text().splitlines()
    others = {where[k] + 1 for k in where if k != kind}  # row numbers of the other bad files
    out = mpath.parent / f"only_{kind}.csv"
    out.write_text("\n".join(r for i, r in enumerate(rows) if i not in others) + "\n")
    m = read_manifest(out)
    i = next(i for i, p in enumerate(m.paths) if p.endswith(BAD_FILES[kind][0]))
    return out, m.lines[i], m.paths[i]


FILES = [("missing", "SampleReadError", "file not found"),
         ("truncated_jpeg", "BadImageError", "[truncated]"),
         ("text_as_jpg", "BadImageError", "[not_an_image]")]


NO_WORKERS = "workers=extsrc.Workers(num_workers=0)"


@pytest.mark.parametrize("workers", ["", NO_WORKERS], ids=["default", "no-workers"])
@pytest.mark.parametrize(("kind", "cls", "reason"), FILES, ids=[f[0] for f in FILES])
def test_bad_file_error_on_one_screen(bad, kind, cls, reason, workers):
    manifest, line, path = one_bad(bad, kind)
    stderr = run_loop(manifest, kw=f"resize=16, {workers}")
    first = next(ln for ln in stderr.splitlines() if ln.startswith("extsrc.errors."))
    assert first.startswith(f"extsrc.errors.{cls}: {manifest} line {line}: {path}"), stderr
    assert reason in first and "extsrc.validate(manifest)" in first, stderr
    assert_one_screen(stderr, first)
    # A worker's traceback is shown once, as the error's detail, from the source's own frames.
    assert stderr.count("Traceback in the DALI worker process:") == (0 if workers else 1), stderr
    assert stderr.count("Traceback (most recent call last):") == (1 if workers else 2), stderr


def test_file_only_the_decoder_refuses_on_one_screen(tmp_path):
    manifest, where = dataset_with_bad(tmp_path, ["corrupt_jpeg"], n=4)
    stderr = run_loop(manifest, kw="resize=16, workers=extsrc.Workers(num_workers=0)")
    first = next(ln for ln in stderr.splitlines() if ln.startswith("extsrc.errors."))
    line = where["corrupt_jpeg"] + 2  # after the header
    assert first.startswith(f"extsrc.errors.BadImageError: {manifest} line {line}: "), stderr
    assert "DALI could not decode this file" in first and "[corrupt]" in first
    # libjpeg's own one-line complaint, printed by the decoder as it fails, may come first.
    tb = stderr[stderr.index("Traceback (most recent call last):"):]
    assert len(stderr[:-len(tb)].splitlines()) <= 1, stderr
    assert_one_screen(tb, first)


@pytest.mark.parametrize("kw", ["", NO_WORKERS,
                                f"{NO_WORKERS}, op_runtime=extsrc.OpRuntime(op_workers=1)"],
                         ids=["default", "no-workers", "op-in-process"])
def test_op_error_on_one_screen_with_the_ops_traceback(tmp_path, kw):
    manifest = write_dataset(tmp_path, 6)
    stderr = run_loop(manifest, kw=f"resize=16, ops=['ed_boom'], {kw}", setup=OP)
    first = next(ln for ln in stderr.splitlines() if ln.startswith("extsrc.errors."))
    assert first.startswith("extsrc.errors.OpError: op 'ed_boom' raised ValueError: boom on "
                            f"purpose [sample {manifest} line 2 "), stderr
    assert "Original traceback of the op:" in stderr, stderr
    # The op's own traceback, once, from the op's code on (not the frames that called it).
    assert stderr.count(", in ed_boom\n") == 1, stderr
    assert re.search(r"Original traceback of the op:\nTraceback \(most recent call last\):\n"
                     r'  File "[^"]*", line \d+, in ed_boom\n', stderr), stderr
    for caller in ("worker.py", "runners.py", "hostresize.py", "registry.py"):
        assert caller not in stderr, stderr
    assert stderr.splitlines().count("ValueError: boom on purpose") == 1, stderr
    assert_one_screen(stderr, first)


def test_images_of_different_sizes_without_resize_on_one_screen(tmp_path):
    manifest = write_dataset(tmp_path, 4)  # sizes vary per sample
    stderr = run_loop(manifest, kw="workers=extsrc.Workers(num_workers=0)")
    first = "ValueError: images in a batch have different sizes, so they cannot be stacked " \
        "into one tensor; pass resize=(height, width) (or an int) to Loader"
    assert_one_screen(stderr, first)
    assert "IsDenseTensor" not in stderr, stderr


def test_notebook_print_exc_shows_the_same_screen(bad):
    manifest, line, path = one_bad(bad, "missing")
    stderr = run_loop(manifest, kw="resize=16", caught=True)
    first = next(ln for ln in stderr.splitlines() if ln.startswith("extsrc.errors."))
    assert first.startswith(f"extsrc.errors.SampleReadError: {manifest} line {line}: {path}")
    assert_one_screen(stderr, first)


@pytest.mark.parametrize(("what", "dali_text"), [
    ("missing", "Exception traceback received from worker thread"),
    ("op", "Critical error in pipeline"),
])
def test_debug_switch_chains_dalis_exception_again(bad, tmp_path, what, dali_text):
    if what == "op":
        manifest = write_dataset(tmp_path, 6)
        kw, setup, error = "resize=16, ops=['ed_boom']", OP, "extsrc.errors.OpError: "
    else:
        manifest, _, _ = one_bad(bad, what)
        kw, setup, error = "resize=16", "", "extsrc.errors.SampleReadError: "
    stderr = run_loop(manifest, kw=kw, setup=setup, debug_env=True)
    assert dali_text in stderr and "nvidia/dali" in stderr, stderr
    assert "The above exception was the direct cause of the following exception" in stderr
    assert error in stderr.split("The above exception was the direct cause")[-1], stderr


def test_bad_video_error_on_one_screen(tmp_path):
    root = extsrc.make_sample_videos(tmp_path / "videos", 2, frames=12)
    good = sorted(root.rglob("*.avi"))
    cut = tmp_path / "cut.avi"
    data = good[0].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    manifest = tmp_path / "videos.csv"
    manifest.write_text(f"path,label\n{good[0]},0\n{cut},1\n{good[1]},0\n")
    stderr = run_loop(manifest, cls="VideoLoader",
                      kw="sequence_length=4, workers=extsrc.Workers(num_workers=0)")
    first = next(ln for ln in stderr.splitlines() if ln.startswith("extsrc.errors."))
    assert first.startswith(f"extsrc.errors.BadVideoError: {manifest} line 3: {cut}"), stderr
    assert_one_screen(stderr, first)


# -- in this process: the fields, the chain ------------------------------------------------------


def loop(loader: Loader) -> None:
    for _ in loader:
        pass


def test_dali_error_kept_on_the_error_and_chained_only_in_debug(tmp_path, monkeypatch):
    from augment_ops import augment_op, unregister

    manifest = write_dataset(tmp_path, 6)

    def make() -> Loader:
        return Loader(manifest, batch_size=2, device="cpu", resize=16, shuffle=False,
                      ops=["ed_boom_local"], workers=Workers(num_workers=0),
                      op_runtime=OpRuntime(op_workers=1))

    @augment_op(name="ed_boom_local")
    def ed_boom_local(img):
        raise ValueError("boom on purpose")

    try:
        monkeypatch.delenv(DEBUG_ENV, raising=False)
        with pytest.raises(OpError, match=r"op 'ed_boom_local' raised ValueError: boom") as ei:
            loop(make())
        err = ei.value
        assert "Critical error in pipeline" in str(err.dali_error)
        assert err.__cause__ is None and err.__suppress_context__
        frames = [f.filename for f in traceback.extract_tb(err.__traceback__)]
        assert not any("nvidia" in f or "ops_runtime" in f for f in frames), frames

        monkeypatch.setenv(DEBUG_ENV, "1")
        with pytest.raises(OpError) as ei:
            loop(make())
        assert ei.value.__cause__ is ei.value.dali_error is not None
    finally:
        unregister("ed_boom_local")


def test_source_error_in_this_process_has_no_dali_error(bad, monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    manifest, line, _ = one_bad(bad, "missing")
    with pytest.raises(SampleReadError, match=rf"line {line}: .*file not found") as ei:
        loop(Loader(manifest, batch_size=2, device="cpu", resize=16,
                    workers=Workers(num_workers=0)))
    assert ei.value.dali_error is None and ei.value.__cause__ is None
    manifest, line, _ = one_bad(bad, "truncated_jpeg")
    with pytest.raises(BadImageError, match=rf"line {line}: ") as ei:
        loop(Loader(manifest, batch_size=2, device="cpu", resize=16,
                    workers=Workers(num_workers=1, start_method="fork")))
    assert "Exception traceback received from worker thread" in str(ei.value.dali_error)
    assert "nvidia/dali" not in str(ei.value)  # the worker's traceback, from the source's frames
    assert "in read" in ei.value.detail


@pytest.mark.parametrize(("value", "on"), [("", False), ("0", False), (" 0 ", False),
                                           ("1", True), ("yes", True)])
def test_debug_switch_values(monkeypatch, value, on):
    monkeypatch.setenv(DEBUG_ENV, value)
    assert debug() is on


def test_without_dali_frames_keeps_the_others_and_the_exception():
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/site/nvidia/dali/_multiproc/worker.py", line 467, in worker\n'
        "    data_batch = callback(scheduled)\n"
        "                 ^^^^^^^^^^^^^^^^^^^\n"
        '  File "/home/me/src/my_source.py", line 12, in read\n'
        "    raise KeyError(name)\n"
        '  File "C:\\py\\Lib\\site-packages\\nvidia\\dali\\pipeline.py", line 3, in f\n'
        "    g()\n"
        "KeyError: 'x'\n"
        "    continued message"
    )
    assert without_dali_frames(tb) == (
        "Traceback (most recent call last):\n"
        '  File "/home/me/src/my_source.py", line 12, in read\n'
        "    raise KeyError(name)\n"
        "KeyError: 'x'\n"
        "    continued message"
    )
    only_dali = tb.split('  File "/home/')[0] + "KeyError: 'x'"
    assert without_dali_frames(only_dali) == only_dali  # nothing left to show: all of it
