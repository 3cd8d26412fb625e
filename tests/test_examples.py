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


@pytest.mark.slow
@pytest.mark.parametrize("synthetic", [False, True])
def test_train_ddp_single_process_cpu(tmp_path, synthetic):
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, str(ROOT / "examples" / "train_ddp.py"), "--data", str(tmp_path / "d"),
           "--num-images", "40", "--batch-size", "8", "--epochs", "2", "--device-mode", "cpu",
           "--json", str(out), "--tag", "t", "--hw-decoder-load", "dali"]
    if synthetic:
        cmd.append("--synthetic")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "total:" in proc.stdout
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["tag"] == "t" and row["world_size"] == 1
    assert row["feed"] == ("synthetic" if synthetic else "extsrc")
    assert row["hw_decoder_load"] is None  # "dali": DALI's own split, passed through
    # 40 images / batch 8 = 5 steps an epoch, 2 epochs, min(5, 10 // 2) warm-up steps
    assert row["timed_steps"] == 5 and row["total_images_per_s"] > 0


def test_parse_variant():
    assert parse_variant("extsrc_auto") == ("extsrc_auto", {})
    assert parse_variant("ceiling+w8+hw1.0+t6") == (
        "ceiling", {"num_workers": 8, "hw_decoder_load": 1.0, "num_threads": 6})
    assert parse_variant("extsrc_auto+hwdali+nowd") == (
        "extsrc_auto", {"hw_decoder_load": None, "watchdog": False})
    assert parse_variant("ceiling_8w") == ("ceiling", {"num_workers": 8})  # an older name
    with pytest.raises(SystemExit, match="unknown modifier 'x9'"):
        parse_variant("ceiling+x9")
