"""Object storage for real: a generated image dataset uploaded to a local S3 server (moto), read
by the Loader and by validate through s3fs, with faults injected by a proxy in front of it.

The server and the proxy are in tests/storage_server.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import storage_server
from helpers import children, write_dataset
from storage_server import FaultProxy, Faults, S3Server

from extsrc import BadFiles, Loader, Manifest, Workers, read_manifest, validate
from extsrc.errors import ManifestError, PathOutsideRootError, SampleReadError
from extsrc.sources.fileread import FileReadProblem
from extsrc.sources.storage import Storage, classify, is_url, join_url, url_protocol

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")
s3_server = storage_server.s3_server
fault_proxy = storage_server.fault_proxy

REPO = Path(__file__).resolve().parent.parent
N = 23
BATCH = 4


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> dict:
    """The same images locally and in s3://extsrc-data/ds/ (and as a class-folder tree)."""
    local = tmp_path_factory.mktemp("local")
    manifest = write_dataset(local, N, fmt="mixed")
    s3_server.make_bucket("extsrc-data")
    s3_server.upload_tree(local, "extsrc-data", "ds")
    client = s3_server.client()
    for i in range(6):  # a folder dataset: class = first-level prefix
        body = (local / "images" / f"{i:05d}.png").read_bytes() if i % 2 == 0 else \
            (local / "images" / f"{i:05d}.jpg").read_bytes()
        ext = "png" if i % 2 == 0 else "jpg"
        client.put_object(Bucket="extsrc-data", Key=f"tree/{['cat', 'dog'][i % 2]}/{i}.{ext}",
                          Body=body)
    client.put_object(Bucket="extsrc-data", Key="tree/cat/.hidden.png", Body=b"x")
    client.put_object(Bucket="extsrc-data", Key="tree/dog/notes.txt", Body=b"x")
    return {"local": manifest, "url": "s3://extsrc-data/ds/manifest.csv"}


def epoch_by_index(loader: Loader) -> dict[int, tuple[int, np.ndarray]]:
    """One epoch: manifest index -> (label, image), every real sample exactly once."""
    out: dict[int, tuple[int, np.ndarray]] = {}
    for b in loader:
        for k, i in enumerate(b["index"].tolist()):
            if bool(b["is_pad"][k]):
                continue
            assert i not in out, f"sample {i} delivered twice in one epoch"
            out[i] = (int(b["label"][k]), b["image"][k].numpy().copy())
    return out


def assert_same_samples(got: dict, ref: dict) -> None:
    assert sorted(got) == sorted(ref) == list(range(N))
    for i in ref:
        assert got[i][0] == ref[i][0], f"label of sample {i}"
        np.testing.assert_array_equal(got[i][1], ref[i][1], err_msg=f"pixels of sample {i}")


@pytest.fixture(scope="module")
def reference(dataset: dict) -> dict:
    with Loader(str(dataset["local"]), batch_size=BATCH, resize=16, device="cpu") as loader:
        return epoch_by_index(loader)


# -- URLs and manifests ------------------------------------------------------------------------


def test_url_helpers() -> None:
    assert url_protocol("s3://b/k") == "s3" and url_protocol("HTTPS://x/y") == "https"
    assert url_protocol("file:///a") is None and url_protocol("/data/a.jpg") is None
    assert url_protocol("C:/data/a.jpg") is None and not is_url("images/a.jpg")
    assert join_url("s3://b/ds/", "images/../a.jpg") == "s3://b/ds/a.jpg"
    assert join_url("s3://b/ds/", "../../x.jpg") is None  # above the bucket
    assert join_url("s3://b/ds/", "gs://c/./d") == "gs://c/d"
    long_key = "s3://b/" + "k" * 300 + "/a.jpg"  # longer than a file name may be, a valid key
    assert Manifest.from_lists([long_key], [0]).paths == (long_key,)


def test_read_manifest_from_s3_resolves_rows_under_its_folder(s3_server: S3Server,
                                                              dataset: dict) -> None:
    m = read_manifest(dataset["url"], storage_options=s3_server.storage_options())
    local = read_manifest(dataset["local"])
    assert len(m) == N and np.array_equal(m.labels, local.labels)
    assert m.paths[0] == "s3://extsrc-data/ds/images/00000.png"
    assert m.root == "s3://extsrc-data/ds/" and m.lines == local.lines
    assert isinstance(m.storage, Storage) and "secret" not in repr(m.storage)


def test_url_manifest_rows_must_stay_under_its_folder(s3_server: S3Server, dataset: dict) -> None:
    client = s3_server.client()
    client.put_object(Bucket="extsrc-data", Key="ds/escape.csv",
                      Body=b"path,label\nimages/00000.png,0\ns3://other-bucket/x.png,1\n")
    so = s3_server.storage_options()
    with pytest.raises(PathOutsideRootError, match=r"s3://extsrc-data/ds/escape\.csv line 3: path "
                       r"s3://other-bucket/x\.png is outside the root s3://extsrc-data/ds/.*"
                       r"allow_outside_root=True"):
        read_manifest("s3://extsrc-data/ds/escape.csv", storage_options=so)
    m = read_manifest("s3://extsrc-data/ds/escape.csv", storage_options=so,
                      allow_outside_root=True)
    assert m.paths[1] == "s3://other-bucket/x.png" and m.root is None
    client.put_object(Bucket="extsrc-data", Key="ds/climb.csv", Body=b"../../../x.png,0\n")
    with pytest.raises(ManifestError, match=r"climb\.csv line 1: path \.\./\.\./\.\./x\.png "
                                            r"climbs above the bucket"):
        read_manifest("s3://extsrc-data/ds/climb.csv", storage_options=so)


def test_local_manifest_with_url_rows_and_url_root(s3_server: S3Server, dataset: dict,
                                                   tmp_path: Path) -> None:
    so = s3_server.storage_options()
    m1 = tmp_path / "rel.csv"
    m1.write_text("images/00000.png,0\nimages/00002.png,1\n")
    m = read_manifest(m1, root="s3://extsrc-data/ds/", storage_options=so)
    assert m.paths == ("s3://extsrc-data/ds/images/00000.png", "s3://extsrc-data/ds/images/00002.png")
    m2 = tmp_path / "abs.csv"
    m2.write_text("s3://extsrc-data/ds/images/00000.png,0\n")
    assert read_manifest(m2, storage_options=so).root is None  # local manifest, no root: no limit
    with pytest.raises(PathOutsideRootError):  # a local root confines URL rows too
        read_manifest(m2, root=tmp_path).check_root()
    fl = Manifest.from_lists(["images/00000.png"], [0], root="s3://extsrc-data/ds/",
                             storage_options=so)
    assert fl.paths == ("s3://extsrc-data/ds/images/00000.png",)


def test_missing_url_manifest_and_bad_bucket_are_clear(s3_server: S3Server) -> None:
    from extsrc.errors import ManifestFileNotFoundError

    so = s3_server.storage_options()
    with pytest.raises(ManifestFileNotFoundError, match=r"s3://extsrc-data/ds/nope\.csv: cannot "
                                                        r"read the manifest: no such object"):
        read_manifest("s3://extsrc-data/ds/nope.csv", storage_options=so)
    with pytest.raises(ManifestFileNotFoundError, match=r"s3://no-such-bucket-x/m\.csv: cannot "
                                                        r"read the manifest: no such object"):
        read_manifest("s3://no-such-bucket-x/m.csv", storage_options=so)


def test_check_files_finds_missing_objects(s3_server: S3Server, dataset: dict) -> None:
    from extsrc.errors import ManifestFileNotFoundError

    s3_server.client().put_object(Bucket="extsrc-data", Key="ds/gaps.csv",
                                  Body=b"images/00000.png,0\nimages/nope.png,1\n")
    so = s3_server.storage_options()
    with pytest.raises(ManifestFileNotFoundError, match=r"gaps\.csv line 2: file not found: "
                                                        r"s3://extsrc-data/ds/images/nope\.png"):
        read_manifest("s3://extsrc-data/ds/gaps.csv", storage_options=so, check_files=True)
    assert len(read_manifest(dataset["url"], storage_options=so, check_files=True)) == N


def test_url_folder_is_a_class_tree(s3_server: S3Server, dataset: dict) -> None:
    m = read_manifest("s3://extsrc-data/tree/", storage_options=s3_server.storage_options())
    assert m.classes == ["cat", "dog"] and len(m) == 6  # .hidden.png and notes.txt skipped
    assert all(p.startswith("s3://extsrc-data/tree/") for p in m.paths)
    assert [m.classes[k] for k in m.labels] == [p.split("/")[-2] for p in m.paths]
    assert m.source == "s3://extsrc-data/tree/" and m.root == "s3://extsrc-data/tree/"
    with pytest.raises(ManifestError, match=r"folder s3://extsrc-data/ds/images/: .*00000\.png is "
                                            r"directly in the folder, so it belongs to no class"):
        read_manifest("s3://extsrc-data/ds/images/", storage_options=s3_server.storage_options())


def test_any_fsspec_protocol_reads(dataset: dict, reference: dict) -> None:
    """fsspec's in-memory filesystem stands for the protocols extsrc does not name itself."""
    import fsspec

    fs = fsspec.filesystem("memory")
    local = dataset["local"].parent
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.pipe_file(f"/extsrc-mem/{path.relative_to(local).as_posix()}", path.read_bytes())
    try:
        m = read_manifest("memory://extsrc-mem/manifest.csv")
        assert m.paths[0] == "memory://extsrc-mem/images/00000.png"
        with Loader(m, batch_size=BATCH, resize=16, device="cpu",
                    workers=Workers(num_workers=0)) as loader:
            assert_same_samples(epoch_by_index(loader), reference)
    finally:
        fs.rm("/extsrc-mem", recursive=True)


def test_missing_extra_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from extsrc._util.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"needs gcsfs, which is not installed; install it "
                                                r"with pip install 'extsrc\[gcs\]'"):
        Manifest.from_lists(["gs://bucket/a.jpg"], [0])


def test_a_csv_manifest_imports_no_storage_or_tar_module(tmp_path: Path) -> None:
    # read_manifest imports extsrc.sources.storage and .shards for every manifest; neither may
    # import fsspec, a filesystem package or tarfile until a URL or a shard is read.
    manifest = write_dataset(tmp_path, 2, fmt="png")
    code = ("import sys, extsrc\n"
            f"extsrc.read_manifest({str(manifest)!r})\n"
            "heavy = ('fsspec', 's3fs', 'gcsfs', 'aiohttp', 'botocore', 'aiobotocore', 'tarfile')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stdout


def test_failures_are_classified() -> None:
    from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

    def client_error(code: str, status: int) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": code},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    assert classify(client_error("SlowDown", 503)) == "transient"
    assert classify(client_error("InternalError", 500)) == "transient"
    assert classify(client_error("AccessDenied", 403)) == "access_denied"
    assert classify(client_error("InvalidAccessKeyId", 403)) == "access_denied"
    assert classify(client_error("NoSuchKey", 404)) == "missing"
    assert classify(ReadTimeoutError(endpoint_url="http://x")) == "transient"
    assert classify(ConnectionClosedError(endpoint_url="http://x")) == "transient"
    assert classify(ConnectionResetError(104, "reset")) == "transient"
    assert classify(FileNotFoundError("k")) == "missing"
    assert classify(PermissionError("k")) == "access_denied"
    assert classify(ValueError("bad")) == "unreadable"


# -- the loader over s3:// -------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_over_s3_delivers_every_sample_once_per_epoch(s3_server: S3Server, dataset: dict,
                                                             reference: dict, workers: int) -> None:
    before = children()
    m = read_manifest(dataset["url"], storage_options=s3_server.storage_options())
    with Loader(m, batch_size=BATCH, resize=16, device="cpu",
                workers=Workers(num_workers=workers)) as loader:
        for _ in range(2):
            assert_same_samples(epoch_by_index(loader), reference)
    assert children() - before == set()


def test_resume_mid_epoch_over_s3(s3_server: S3Server, dataset: dict) -> None:
    m = read_manifest(dataset["url"], storage_options=s3_server.storage_options())
    kw = dict(batch_size=BATCH, resize=16, device="cpu", seed=3)
    with Loader(m, **kw) as first:
        it = iter(first)
        seen = [next(it)["index"].tolist() for _ in range(2)]
        state = first.state_dict()
    with Loader(m, **kw) as resumed:
        resumed.load_state_dict(json.loads(json.dumps(state)))
        rest = [b["index"].tolist() for b in resumed]
    with Loader(m, **kw) as whole:
        uninterrupted = [b["index"].tolist() for b in whole]
    assert seen + rest == uninterrupted


def test_validate_reads_urls(s3_server: S3Server, dataset: dict) -> None:
    from extsrc import validate

    client = s3_server.client()
    client.put_object(Bucket="extsrc-data", Key="val/good.png",
                      Body=(dataset["local"].parent / "images" / "00000.png").read_bytes())
    client.put_object(Bucket="extsrc-data", Key="val/bad.png", Body=b"not an image at all")
    client.put_object(Bucket="extsrc-data", Key="val/m.csv",
                      Body=b"path,label\ngood.png,0\nbad.png,1\ngone.png,0\n")
    m = read_manifest("s3://extsrc-data/val/m.csv", storage_options=s3_server.storage_options())
    report = validate(m, n_jobs=2)  # reader processes of their own (loky)
    assert [(p.line, p.reason) for p in report.problems] == [(3, "not_an_image"), (4, "missing")]
    # The command line, with the endpoint and credentials from the environment as for any tool.
    env = {**os.environ, "AWS_ENDPOINT_URL_S3": s3_server.endpoint,
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run([sys.executable, "-m", "extsrc", "validate", "s3://extsrc-data/val/m.csv",
                        "--jobs", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "line 3:" in p.stdout and "[not_an_image]" in p.stdout
    assert "line 4:" in p.stdout and "[missing]" in p.stdout


def test_cli_root_url_with_storage_options(s3_server: S3Server, dataset: dict,
                                           tmp_path: Path) -> None:
    """``--root s3://...`` with ``--storage-option`` pairs: the endpoint, the credentials and a
    nested option come from the command line alone (no AWS_* variables), as with
    ``read_manifest(root=..., storage_options=...)``."""
    rel = tmp_path / "rel.csv"
    rel.write_text(dataset["local"].read_text())  # rows images/0000k.png, relative
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = str(REPO)
    options = ["--storage-option", f"endpoint_url={s3_server.endpoint}",
               "--storage-option", f"key={storage_server.TEST_KEY}",
               "--storage-option", f"secret={storage_server.TEST_SECRET}",
               "--storage-option", f"client_kwargs.region_name={storage_server.TEST_REGION}",
               "--storage-option", "anon=false"]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "extsrc", *args], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=180)

    p = cli("validate", str(rel), "--root", "s3://extsrc-data/ds/", "--jobs", "1", *options)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{N} ok, 0 bad" in p.stdout
    p = cli("bench", str(rel), "--root", "s3://extsrc-data/ds/", "--workers", "0", "--device",
            "cpu", "--resize", "16", "--batch-size", "8", *options)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"loader: {N} samples" in p.stdout and "images/s" in p.stdout
    # A row missing under the root URL is named with its line.
    rel.write_text("images/00000.png,0\nimages/nope.png,1\n")
    p = cli("validate", str(rel), "--root", "s3://extsrc-data/ds/", "--jobs", "1", *options)
    assert p.returncode == 1 and "line 2:" in p.stdout and "[missing]" in p.stdout, p.stdout
    for bad, needle in (("endpoint_url", "write KEY=VALUE or KEY:=JSON"),
                        ("config_kwargs:={x", "config_kwargs: '{x' is not JSON")):
        p = cli("validate", str(rel), "--root", "s3://extsrc-data/ds/", "--storage-option", bad)
        assert p.returncode == 2 and needle in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = cli("validate", str(rel), "--root", "nosuch://bucket/")
    assert p.returncode == 2 and "--root nosuch://bucket/ is a URL" in p.stderr, p.stderr


# -- http:// -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_root(dataset: dict) -> Iterator[str]:
    """The local copy of the dataset served by ``http.server`` on 127.0.0.1 (fsspec's HTTP
    filesystem reads it through aiohttp); its URL, without a trailing slash."""
    pytest.importorskip("aiohttp", reason="needs aiohttp (pip install extsrc[http])")
    from http.server import SimpleHTTPRequestHandler

    folder = str(dataset["local"].parent)

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=folder, **kwargs)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    with storage_server.local_http_server(Handler) as url:
        yield url


def http_manifest(dataset: dict, http_root: str, path: Path, extra: str = "") -> list[str]:
    """A local CSV at ``path`` whose rows are the dataset's images as http:// URLs (then
    ``extra``); returns the URLs."""
    local = read_manifest(dataset["local"])
    folder = dataset["local"].parent
    urls = [f"{http_root}/{Path(p).relative_to(folder).as_posix()}" for p in local.paths]
    rows = [f"{u},{int(lab)}" for u, lab in zip(urls, local.labels.tolist(), strict=True)]
    path.write_text("path,label\n" + "\n".join(rows) + "\n" + extra)
    return urls


@pytest.mark.parametrize("workers", [0, 1])
def test_http_url_rows_deliver_every_sample_once_per_epoch(
        http_root: str, dataset: dict, reference: dict, tmp_path: Path, workers: int) -> None:
    urls = http_manifest(dataset, http_root, tmp_path / "http.csv")
    m = read_manifest(tmp_path / "http.csv")
    assert m.paths == tuple(urls) and m.paths[0].startswith("http://127.0.0.1:")
    with Loader(m, batch_size=BATCH, resize=16, device="cpu",
                workers=Workers(num_workers=workers)) as loader:
        for _ in range(2):
            assert_same_samples(epoch_by_index(loader), reference)
    assert loader.storage_stats()["reads"] >= 2 * N and loader.storage_stats()["failures"] == 0
    # The manifest itself at an http:// URL: its relative rows resolve under its folder.
    assert read_manifest(f"{http_root}/manifest.csv").paths == tuple(urls)


def test_http_404_names_the_line_and_the_url(http_root: str, dataset: dict,
                                             tmp_path: Path) -> None:
    csv = tmp_path / "gone.csv"
    http_manifest(dataset, http_root, csv, extra=f"{http_root}/images/nope.png,1\n")
    gone = re.escape(f"{http_root}/images/nope.png")
    with pytest.raises(SampleReadError, match=rf"{re.escape(str(csv))} line {N + 2}: {gone}: "
                       r"no such object .*\[missing\]") as ei:
        with Loader(read_manifest(csv), batch_size=BATCH, resize=16, device="cpu",
                    shuffle=False) as loader:
            for _ in loader:
                pass
    assert (ei.value.line, ei.value.reason) == (N + 2, "missing")
    report = validate(read_manifest(csv), n_jobs=1)
    assert [(p.line, p.reason) for p in report.problems] == [(N + 2, "missing")]


# -- faults --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["slowdown", "drop"])
def test_transient_faults_are_retried_and_everything_arrives(
        s3_server: S3Server, fault_proxy: FaultProxy, dataset: dict, reference: dict,
        kind: str) -> None:
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), backoff=0.01)
    m = read_manifest(dataset["url"], storage_options=storage)
    fault_proxy.reset(Faults(**{kind: 0.4}))
    # Reader processes for SlowDown: their retries reach the loader through storage_stats().
    workers = 2 if kind == "slowdown" else 0
    with Loader(m, batch_size=BATCH, resize=16, device="cpu",
                workers=Workers(num_workers=workers)) as loader:
        assert_same_samples(epoch_by_index(loader), reference)
    stats = loader.storage_stats()  # closed: every read done, the next epoch's read-ahead too
    injected = getattr(fault_proxy.counts, kind)
    assert injected >= 3, fault_proxy.counts  # ~40% of the 23 images
    assert stats["reads"] >= N and stats["failures"] == 0
    if kind == "slowdown":  # each counted by extsrc (a dropped connection may be retried by the
        assert stats["retries"] == injected  # HTTP client itself before extsrc sees it)
        assert stats["processes"] == 2 and sum(stats["retried_reasons"].values()) == injected


def test_object_deleted_mid_epoch_raises_naming_the_line(s3_server: S3Server,
                                                         dataset: dict) -> None:
    client = s3_server.client()
    for i in range(8):
        client.copy_object(Bucket="extsrc-data", Key=f"del1/{i}.png",
                           CopySource={"Bucket": "extsrc-data", "Key": "ds/images/00000.png"})
    client.put_object(Bucket="extsrc-data", Key="del1/m.csv",
                      Body=("\n".join(f"{i}.png,{i % 2}" for i in range(8)) + "\n").encode())
    m = read_manifest("s3://extsrc-data/del1/m.csv", storage_options=s3_server.storage_options())
    with Loader(m, batch_size=4, resize=16, device="cpu", shuffle=False) as loader:
        client.delete_object(Bucket="extsrc-data", Key="del1/6.png")
        with pytest.raises(SampleReadError, match=r"s3://extsrc-data/del1/m\.csv line 7: "
                           r"s3://extsrc-data/del1/6\.png: no such object .*\[missing\]") as ei:
            for _ in loader:
                pass
    assert (ei.value.line, ei.value.reason) == (7, "missing")


def test_object_deleted_mid_epoch_is_a_reported_skip(s3_server: S3Server, dataset: dict) -> None:
    client = s3_server.client()
    for i in range(8):
        client.copy_object(Bucket="extsrc-data", Key=f"del2/{i}.png",
                           CopySource={"Bucket": "extsrc-data", "Key": f"ds/images/0000{i}.png"
                                       if i % 2 == 0 else "ds/images/00000.png"})
    client.put_object(Bucket="extsrc-data", Key="del2/m.csv",
                      Body=("\n".join(f"{i}.png,{i % 2}" for i in range(8)) + "\n").encode())
    m = read_manifest("s3://extsrc-data/del2/m.csv", storage_options=s3_server.storage_options())
    with Loader(m, batch_size=4, resize=16, device="cpu", shuffle=False,
                bad_files=BadFiles(on_error="skip")) as loader:
        assert loader.skipped == ()  # every object was there when the loader checked
        client.delete_object(Bucket="extsrc-data", Key="del2/6.png")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches = list(loader)
    flat = [(i, bool(p)) for b in batches for i, p in zip(b["index"].tolist(),
                                                          b["is_pad"].tolist(), strict=True)]
    assert flat == [(i, i == 6) for i in range(8)]  # the batch keeps its size; 6 is marked
    assert [(p.index, p.line, p.reason) for p in loader.skipped] == [(6, 7, "missing")]
    assert any("del2/6.png" in str(w.message) for w in caught)


def test_local_file_deleted_mid_epoch_is_a_reported_skip_too(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, 8, fmt="png")
    with Loader(str(manifest), batch_size=4, resize=16, device="cpu", shuffle=False,
                bad_files=BadFiles(on_error="skip"), workers=Workers(num_workers=1)) as loader:
        (tmp_path / "images" / "00005.png").unlink()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flat = [(i, bool(p)) for b in loader
                    for i, p in zip(b["index"].tolist(), b["is_pad"].tolist(), strict=True)]
    assert flat == [(i, i == 5) for i in range(8)]
    assert [(p.index, p.line, p.reason) for p in loader.skipped] == [(5, 7, "missing")]


def test_a_server_that_stops_answering_fails_in_bounded_time(
        s3_server: S3Server, fault_proxy: FaultProxy, dataset: dict) -> None:
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), timeout=1, retries=1,
                      backoff=0.01)
    m = read_manifest(dataset["url"], storage_options=storage)
    fault_proxy.reset(Faults(stall=True))
    result: list[BaseException] = []

    def run() -> None:
        try:
            with Loader(m, batch_size=BATCH, resize=16, device="cpu") as loader:
                for _ in loader:
                    pass
        except BaseException as e:  # handed to the test thread
            result.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=120)  # a hang guard, far above the bound (timeouts and retries)
    assert not t.is_alive(), "the loader hung on a server that stopped answering"
    assert len(result) == 1 and isinstance(result[0], SampleReadError), result
    assert result[0].reason == "unreachable"
    assert "did not answer usably after 2 attempts" in str(result[0])


def test_access_denied_is_not_retried_and_names_the_line(
        s3_server: S3Server, fault_proxy: FaultProxy, dataset: dict) -> None:
    m = read_manifest(dataset["url"], storage_options=Storage(
        s3_server.storage_options(fault_proxy.endpoint)))
    fault_proxy.reset(Faults(deny=1.0, times=10**6))  # every object refused
    with pytest.raises(SampleReadError, match=r"manifest\.csv line 2: s3://extsrc-data/ds/images/"
                                              r"00000\.png: access denied.*\[access_denied\]; "
                                              r"check the credentials") as ei:
        with Loader(m, batch_size=BATCH, resize=16, device="cpu", shuffle=False,
                    workers=Workers(num_workers=0)) as loader:
            next(iter(loader))
    assert (ei.value.line, ei.value.reason) == (2, "access_denied")
    assert m.storage.stats.retries == 0


def test_storage_read_reports_permanent_failures(s3_server: S3Server, dataset: dict) -> None:
    storage = Storage(s3_server.storage_options())
    with pytest.raises(FileReadProblem, match="no such object") as ei:
        storage.read("s3://extsrc-data/ds/images/nope.png")
    assert ei.value.reason == "missing" and storage.stats.retries == 0
    with pytest.raises(FileReadProblem) as ei:
        storage.read("s3://extsrc-data/ds/images/00000.png", max_bytes=10)
    assert ei.value.reason == "file_too_large"


@pytest.mark.parametrize("given", [None, 5])
def test_s3_client_keeps_a_connection_per_request_in_flight(s3_server: S3Server, dataset: dict,
                                                            given: int | None) -> None:
    """botocore keeps 10 connections unless told otherwise: a Storage with more requests in
    flight than that would wait for connections. The user's own setting wins."""
    options = s3_server.storage_options()
    if given is not None:
        options["config_kwargs"] = {"max_pool_connections": given}
    storage = Storage(options, concurrency=24)
    storage.read("s3://extsrc-data/ds/images/00000.png")
    fs = storage.filesystem("s3")
    assert fs.s3.meta.config.max_pool_connections == (given or 24)


def test_sizes_read_through_the_fault_proxy_are_the_objects_sizes(
        s3_server: S3Server, fault_proxy: FaultProxy, dataset: dict) -> None:
    # A HEAD answer has no body, but its Content-Length is the object's size: a proxy sending
    # the length of the (empty) body it forwards would make every size read through it 0.
    import boto3

    key = "ds/images/00000.png"
    want = len(s3_server.client().get_object(Bucket="extsrc-data", Key=key)["Body"].read())
    assert want > 0
    fault_proxy.reset()
    opts = s3_server.storage_options(fault_proxy.endpoint)
    client = boto3.client("s3", endpoint_url=fault_proxy.endpoint,
                          region_name=storage_server.TEST_REGION,
                          aws_access_key_id=opts["key"], aws_secret_access_key=opts["secret"])
    assert client.head_object(Bucket="extsrc-data", Key=key)["ContentLength"] == want
    fs = Storage(opts).filesystem("s3")
    assert fs.size(f"s3://extsrc-data/{key}") == want
    assert fs.info(f"s3://extsrc-data/{key}")["size"] == want
    heads = [k for k in fault_proxy.counts.per_key if k.startswith("HEAD ")]
    assert heads, fault_proxy.counts.per_key  # the sizes came through the proxy


def test_cache_serves_later_epochs_within_its_bound(s3_server: S3Server, fault_proxy: FaultProxy,
                                                    dataset: dict, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), cache_dir=cache)
    urls = [f"s3://extsrc-data/ds/images/{i:05d}.{'png' if i % 2 == 0 else 'jpg'}"
            for i in range(6)]
    first = storage.read_many(urls)
    gets = fault_proxy.counts.requests
    assert storage.read_many(urls) == first and fault_proxy.counts.requests == gets
    assert storage.stats.cache_hits == 6
    size = sum(len(b) for b in first)  # type: ignore[arg-type]
    small = Storage(s3_server.storage_options(), cache_dir=tmp_path / "small",
                    cache_bytes=size // 2)
    small.read_many(urls)
    held = sum(f.stat().st_size for f in (tmp_path / "small").iterdir())
    assert 0 < held <= size // 2


# -- several processes ---------------------------------------------------------------------

_RANK_SCRIPT = """
import json, os, sys
import torch.distributed as dist
from extsrc import Loader, Workers, read_manifest

def main():
    dist.init_process_group("gloo")
    url, options, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    m = read_manifest(url, storage_options=options)
    with Loader(m, batch_size=4, resize=16, device="cpu",
                workers=Workers(num_workers=1)) as loader:
        rows = [(i, p) for b in loader for i, p in zip(b["index"].tolist(), b["is_pad"].tolist())]
    with open(f"{out}/rank{dist.get_rank()}.json", "w") as f:
        json.dump({"rows": rows, "shard": loader.source.shard_id}, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
"""


def test_torchrun_two_ranks_read_the_manifest_between_them(s3_server: S3Server, dataset: dict,
                                                           tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(script), dataset["url"], json.dumps(s3_server.storage_options()), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["shard"] for r in ranks] == [0, 1]
    real = [set(i for i, pad in r["rows"] if not pad) for r in ranks]
    assert real[0].isdisjoint(real[1]) and real[0] | real[1] == set(range(N))
