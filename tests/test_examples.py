"""The example and the benchmark's variant grammar, run for real on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_throughput import parse_variant  # noqa: E402

MINIMAL_FLAGS = ["--synthetic-float", "--no-pad-mask", "--loss-in-autocast", "--no-weight-decay",
                 "--no-loader"]


@pytest.mark.slow
@pytest.mark.parametrize("feed", ["extsrc", "synthetic", "synthetic+minimal flags",
                                  "synthetic per epoch"])
def test_train_ddp_single_process_cpu(tmp_path, feed):
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, str(ROOT / "examples" / "train_ddp.py"), "--data", str(tmp_path / "d"),
           "--num-images", "40", "--batch-size", "8", "--epochs", "2", "--device-mode", "cpu",
           "--json", str(out), "--tag", "t", "--hw-decoder-load", "dali"]
    if feed != "extsrc":
        cmd.append("--synthetic")
    if feed == "synthetic+minimal flags":
        cmd += MINIMAL_FLAGS
    if feed == "synthetic per epoch":
        cmd.append("--synthetic-per-epoch")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "total:" in proc.stdout
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["tag"] == "t" and row["world_size"] == 1
    assert row["feed"] == ("extsrc" if feed == "extsrc" else "synthetic")
    assert row["synthetic_per_epoch"] == (feed == "synthetic per epoch")
    (cores,) = row["per_rank_cores_busy"]
    assert cores > 0 and row["cores_per_rank"] >= 1
    # 40 images / batch 8 = 5 steps an epoch, 2 epochs, min(5, 10 // 2) warm-up steps (with
    # --no-loader too: the steps are counted from the manifest as the loader counts them)
    assert row["timed_steps"] == 5 and row["total_images_per_s"] > 0
    if feed == "synthetic+minimal flags":
        assert row["minimal_flags"] == sorted(f[2:].replace("-", "_") for f in MINIMAL_FLAGS)
        assert row["dali_workers"] is None  # no Loader was built
    else:
        assert row["minimal_flags"] == []
        assert row["hw_decoder_load"] is None  # "dali": DALI's own split, passed through


def test_train_ddp_refuses_a_synthetic_flag_without_synthetic(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_ddp.py"), "--data", str(tmp_path / "d"),
         "--synthetic-per-epoch"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "--synthetic-per-epoch changes the --synthetic feed; add --synthetic" in proc.stderr


@pytest.mark.slow
def test_ddp_minimal_two_ranks_cpu(tmp_path):
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "benchmarks" / "ddp_minimal.py"), "--arch", "tiny", "--batch-size", "4",
           "--image-size", "32", "--num-classes", "10", "--steps", "3", "--warmup", "2",
           "--device-mode", "cpu", "--json", str(out), "--tag", "m"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["tag"] == "m" and row["world_size"] == 2 and row["feed"] == "minimal"
    assert row["timed_steps"] == 3 and row["warmup_steps"] == 2
    assert len(row["per_rank_images_per_s"]) == 2 and row["total_images_per_s"] > 0


def test_parse_variant():
    assert parse_variant("extsrc_auto") == ("extsrc_auto", {})
    assert parse_variant("ceiling+w8+hw1.0+t6") == (
        "ceiling", {"num_workers": 8, "hw_decoder_load": 1.0, "num_threads": 6})
    assert parse_variant("extsrc_auto+hwdali+nowd") == (
        "extsrc_auto", {"hw_decoder_load": None, "watchdog": False})
    assert parse_variant("ceiling_8w") == ("ceiling", {"num_workers": 8})  # an older name
    with pytest.raises(SystemExit, match="unknown modifier 'x9'"):
        parse_variant("ceiling+x9")
