"""benchmarks/s3_static.py, the read-only S3 endpoint the storage and shard benchmarks read from
on a GPU machine: s3fs reads the same bytes through it as from the disk (on each latency's
port), the Loader delivers the same epoch as from local files, and a missing key or a range past
the end gets the error S3 gives."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import write_dataset

from extsrc import Loader, read_manifest

pytest.importorskip("s3fs")
pytest.importorskip("aiohttp")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from s3_static import StaticS3
from storage_server import fake_credentials
from storage_server import storage_options as options

N = 11


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    local = tmp_path_factory.mktemp("static")
    manifest = write_dataset(local, N, fmt="mixed")
    with fake_credentials(), StaticS3(local, "bench", [0, 30], processes=2, prefix="ds") as s3:
        yield {"manifest": manifest, "local": local, "s3": s3}


def epoch(loader: Loader) -> dict[int, tuple[int, np.ndarray]]:
    out = {}
    for b in loader:
        for k, i in enumerate(b["index"].tolist()):
            assert i not in out
            out[i] = (int(b["label"][k]), b["image"][k].numpy().copy())
    return out


def test_loader_reads_the_same_epoch_as_from_the_disk(served: dict) -> None:
    kw = dict(batch_size=4, resize=16, device="cpu", seed=1)
    with Loader(str(served["manifest"]), **kw) as loader:
        ref = epoch(loader)
    m = read_manifest("s3://bench/ds/manifest.csv",
                      storage_options=options(served["s3"].endpoints[0]))
    with Loader(m, **kw) as loader:
        got = epoch(loader)
    assert sorted(got) == sorted(ref) == list(range(N))
    for i, (label, image) in ref.items():
        assert got[i][0] == label
        np.testing.assert_array_equal(got[i][1], image)


def test_ranges_latency_and_errors(served: dict) -> None:
    import s3fs

    s3 = served["s3"]
    name = sorted(p.name for p in (served["local"] / "images").iterdir())[0]
    data = (served["local"] / "images" / name).read_bytes()
    fs = s3fs.S3FileSystem(**options(s3.endpoints[0]), skip_instance_cache=True)
    key = f"bench/ds/images/{name}"
    assert fs.info(key)["size"] == len(data)
    assert fs.cat_file(key) == data
    assert fs.cat_file(key, start=5, end=50) == data[5:50]
    assert fs.cat_file(key, start=len(data) - 7) == data[-7:]
    with pytest.raises(FileNotFoundError):
        fs.cat_file("bench/ds/images/missing.png")
    with pytest.raises(FileNotFoundError):
        fs.cat_file("other-bucket/ds/manifest.csv")
    with pytest.raises(OSError, match=r"InvalidRange|416|not satisfiable"):
        fs.cat_file(key, start=len(data) + 10, end=len(data) + 20)
    assert sorted(fs.ls("bench/ds")) == ["bench/ds/images", "bench/ds/manifest.csv"]

    slow = s3fs.S3FileSystem(**options(s3.endpoints[30]), skip_instance_cache=True)
    assert slow.cat_file(key, start=0, end=10) == data[:10]  # the port that adds 30 ms
