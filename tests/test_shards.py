"""Tar shards (``extsrc.read_shards``, ``Loader("train-{000000..000003}.tar")``): real shards
written with tarfile holding real PNG/JPEG members, read through real DALI pipelines.

Labels and pixels equal the source images; every sample comes exactly once an epoch on one and on
two ranks; the shuffle differs by epoch and seed and is reproducible; a resumed loader yields the
batches still due; malformed shards, samples and labels are refused naming the shard and member,
or left out and reported under ``on_error="skip"``; ``extsrc validate`` checks shards; the same
shards read from a local S3 server (moto) through ``s3://`` URLs.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import re
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import corrupt_jpeg, encode, pattern_image
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from storage_server import Faults, fault_proxy, s3_server  # noqa: F401

from extsrc import BadFiles, Loader, Sampling, Workers, read_manifest, read_shards, validate
from extsrc.errors import (
    BadImageError,
    ManifestError,
    ManifestFileNotFoundError,
    SampleReadError,
)
from extsrc.sources.fileread import FileReadProblem
from extsrc.sources.images import ShardedSource
from extsrc.sources.rangemerge import merge_ranges
from extsrc.sources.shards import ShardManifest, expand_shards
from extsrc.sources.storage import Storage, StorageStats

pytestmark = pytest.mark.filterwarnings("ignore:.*external source node.*:Warning")

REPO = Path(__file__).resolve().parents[1]
SHARDS, PER_SHARD = 4, 5  # 20 samples
N = SHARDS * PER_SHARD
CPU = dict(device="cpu", workers=Workers(num_workers=0))


def label_of(i: int) -> int:
    return (i * 3) % 7


def image_of(i: int) -> np.ndarray:
    return pattern_image(i, 12, 14)


def png(i: int) -> bytes:
    return encode(Image.fromarray(image_of(i)), "PNG")


def write_tar(path: Path, members: list[tuple[str, bytes]],
              links: tuple[tuple[str, str], ...] = ()) -> Path:
    """A tar of ``members`` (name, data) in order, then symbolic links (name, target)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        for name, target in links:
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = tarfile.SYMTYPE, target
            tf.addfile(ti)
    return path


def sample_members(i: int, fmt: str = "png") -> list[tuple[str, bytes]]:
    image = png(i) if fmt == "png" else encode(Image.fromarray(image_of(i)), "JPEG", quality=90)
    return [(f"{i:06d}.cls", f"{label_of(i)}\n".encode()), (f"{i:06d}.{fmt}", image),
            (f"{i:06d}.json", f'{{"label": {label_of(i)}, "name": "c{label_of(i)}"}}'.encode())]


def write_shards(folder: Path, shards: int = SHARDS, per_shard: int = PER_SHARD,
                 fmt: str = "png") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        members = [m for i in range(s * per_shard, (s + 1) * per_shard)
                   for m in sample_members(i, fmt)]
        write_tar(folder / f"train-{s:06d}.tar", members)
    return str(folder / f"train-{{000000..{shards - 1:06d}}}.tar")


@pytest.fixture(scope="module")
def pattern(tmp_path_factory) -> str:
    return write_shards(tmp_path_factory.mktemp("shards") / "data")


def epoch_indices(loader: Loader) -> list[int]:
    """The manifest indices one epoch yields, pads left out, in order."""
    out: list[int] = []
    for batch in loader:
        keep = ~batch["is_pad"].numpy().astype(bool)
        out += batch["index"].numpy()[keep].tolist()
    return out


# -- names and indexing ---------------------------------------------------------------------------


def test_expand_shards_ranges_lists_and_padding() -> None:
    assert expand_shards("a-{000..002}.tar") == ["a-000.tar", "a-001.tar", "a-002.tar"]
    assert expand_shards("a-{8..10}.tar") == ["a-8.tar", "a-9.tar", "a-10.tar"]
    assert expand_shards("{tr,va}-{0..1}.tar") == ["tr-0.tar", "tr-1.tar", "va-0.tar", "va-1.tar"]
    assert expand_shards("s3://b/x.tar") == ["s3://b/x.tar"]
    with pytest.raises(ManifestError, match=r"runs backwards; write it low\.\.high"):
        expand_shards("a-{5..1}.tar")
    with pytest.raises(ManifestError, match=r"neither a range .* nor a list"):
        expand_shards("a-{x}.tar")


def test_index_gives_members_labels_and_exact_bytes(pattern) -> None:
    m = read_shards(pattern)
    assert isinstance(m, ShardManifest) and len(m) == N and len(m.shards) == SHARDS
    assert m.labels.tolist() == [label_of(i) for i in range(N)]
    assert m.lines == tuple(range(1, N + 1))
    assert m.paths[6].endswith("train-000001.tar/000006.png")
    for i in (0, 7, N - 1):
        assert m.read(i) == png(i)
    assert m.where(6) == f"shards {pattern}, sample 7"
    # read_manifest and a list of shard paths reach the same samples.
    assert read_manifest(pattern).fingerprint() == m.fingerprint()
    listed = read_shards(list(m.shards))
    assert listed.fingerprint() == m.fingerprint() and listed.source.endswith(".tar}")
    with pytest.raises(ManifestError, match=r"tar shards have no columns or root; drop sep=','"):
        read_manifest(pattern, sep=",")


def test_json_labels_class_names_and_no_labels(pattern) -> None:
    m = read_shards(pattern, label="json", label_field="label")
    assert m.labels.tolist() == [label_of(i) for i in range(N)] and m.classes is None
    named = read_shards(pattern, label="json", label_field="name")
    assert named.classes == sorted({f"c{label_of(i)}" for i in range(N)})
    assert [named.classes[k] for k in named.labels] == [f"c{label_of(i)}" for i in range(N)]
    assert read_shards(pattern, label=None).labels.tolist() == [0] * N
    with pytest.raises(ValueError, match=r"label='json' needs label_field="):
        read_shards(pattern, label="json")


# -- the loader's guarantees ----------------------------------------------------------------------


def test_loader_pixels_and_labels_equal_the_source_images(pattern) -> None:
    seen = set()
    with Loader(pattern, batch_size=1, shuffle=True, seed=3, **CPU) as loader:
        for batch in loader:
            i = int(batch["index"][0])
            np.testing.assert_array_equal(batch["image"][0].numpy(), image_of(i))
            assert int(batch["label"][0]) == label_of(i)
            seen.add(i)
    assert seen == set(range(N))


@pytest.mark.parametrize("ranks", [1, 2])
def test_every_sample_exactly_once_per_epoch(pattern, ranks) -> None:
    m = read_shards(pattern)
    loaders = [Loader(m, batch_size=3, sampling=Sampling(shard_id=r, num_shards=ranks),
                      shuffle=True, seed=1, **CPU)
               for r in range(ranks)]
    try:
        for _epoch in range(2):
            parts = [epoch_indices(loader) for loader in loaders]
            union = [i for p in parts for i in p]
            assert sorted(union) == list(range(N))  # all of them, none twice, across ranks
    finally:
        for loader in loaders:
            loader.close()


def test_shuffle_differs_by_epoch_and_seed_and_is_reproducible(pattern) -> None:
    def two_epochs(seed: int) -> list[list[int]]:
        with Loader(pattern, batch_size=4, shuffle=True, seed=seed, **CPU) as loader:
            return [epoch_indices(loader), epoch_indices(loader)]

    a, b, other = two_epochs(5), two_epochs(5), two_epochs(6)
    assert a == b
    assert a[0] != a[1] and a[0] != other[0]
    assert sorted(a[0]) == sorted(a[1]) == list(range(N))


def test_resume_mid_epoch_in_reader_processes(pattern) -> None:
    config = dict(batch_size=3, shuffle=True, seed=9, device="cpu",
                  workers=Workers(num_workers=1))
    with Loader(pattern, **config) as loader:
        full = [[(b["index"].numpy(), b["image"].numpy()) for b in loader] for _ in range(2)]
    with Loader(pattern, **config) as first:
        it = iter(first)
        for _ in range(3):
            next(it)
        state = first.state_dict()
    with Loader(pattern, **config) as resumed:
        resumed.load_state_dict(state)
        rest = [(b["index"].numpy(), b["image"].numpy()) for b in resumed]
    assert len(rest) == len(full[0]) - 3
    for (ia, xa), (ib, xb) in zip(full[0][3:], rest, strict=True):
        np.testing.assert_array_equal(ia, ib)
        for k in range(len(xa)):
            np.testing.assert_array_equal(xa[k], xb[k])


@pytest.mark.parametrize("ranks", [1, 2])
def test_runs_keep_a_shards_neighbours_together_and_every_sample_once(pattern, ranks) -> None:
    """``Sampling(run_length=2)``: over all ranks, every sample once, a member followed by the
    next one of its shard but where a run of two ends (at most every other member, and never
    across shards), in an order that differs by epoch; a resumed loader reads the same
    batches."""
    m = read_shards(pattern)
    shard = m.shard_of.tolist()

    def loaders():
        return [Loader(m, batch_size=4, shuffle=True, seed=2,
                       sampling=Sampling(shard_id=r, num_shards=ranks, run_length=2), **CPU)
                for r in range(ranks)]

    opened = loaders()
    try:
        epochs = []
        for _ in range(2):
            order = [i for loader in opened for i in epoch_indices(loader)]
            assert sorted(order) == list(range(N))
            epochs.append(order)
            follows = dict(itertools.pairwise(order))
            cuts = sum(1 for i in range(N - 1)
                       if shard[i] == shard[i + 1] and follows.get(i) != i + 1)
            assert cuts <= SHARDS * -(-PER_SHARD // 2)
            assert sum(1 for a, b in itertools.pairwise(order) if b == a + 1) >= N // 4
        assert epochs[0] != epochs[1]
        with opened[0] as first:
            it = iter(first)
            next(it)
            state = first.state_dict()
            rest = [b["index"].tolist() for b in it]
    finally:
        for loader in opened:
            loader.close()
    resumed = loaders()
    try:
        resumed[0].load_state_dict(state)
        assert [b["index"].tolist() for b in resumed[0]] == rest
    finally:
        for loader in resumed:
            loader.close()


# -- malformed shards, samples and labels -------------------------------------------------------


def good(i: int) -> list[tuple[str, bytes]]:
    return sample_members(i)[:2]  # cls + png


def cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def damage_header(path: Path, member: str) -> None:
    """Break the checksum of ``member``'s header (tarfile then stops reading without a word)."""
    data = bytearray(path.read_bytes())
    with tarfile.open(path) as tf:
        offset = tf.getmember(member).offset
    data[offset + 148:offset + 156] = b"9999999\0"
    path.write_bytes(bytes(data))


def build(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.tar"
    members = [m for i in range(4) for m in good(i)]
    if kind == "not_a_tar":
        path.write_bytes(b"this is plain text, not a tar archive\n" * 40)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "damaged_header":
        write_tar(path, members)
        damage_header(path, "000002.cls")
    elif kind == "cut_in_member":
        write_tar(path, members)
        with tarfile.open(path) as tf:
            last = tf.getmember("000003.png")
        cut(path, last.offset_data + last.size // 2)
    elif kind == "cut_at_boundary":
        write_tar(path, members)
        with tarfile.open(path) as tf:
            last = tf.getmember("000003.png")
        cut(path, last.offset_data + ((last.size + 511) // 512) * 512)
    elif kind == "no_image":
        write_tar(path, [*members, ("000009.cls", b"1")])
    elif kind == "two_images":
        write_tar(path, [*members, ("000009.cls", b"1"), ("000009.png", png(9)),
                         ("000009.jpg", encode(Image.fromarray(image_of(9)), "JPEG"))])
    elif kind == "no_label":
        write_tar(path, [*members, ("000009.png", png(9))])
    elif kind == "label_text":
        write_tar(path, [*members, ("000009.cls", b"cat"), ("000009.png", png(9))])
    elif kind == "label_negative":
        write_tar(path, [*members, ("000009.cls", b"-2"), ("000009.png", png(9))])
    elif kind == "duplicate_key":
        write_tar(path, [*members, *good(1)])  # key 000001 again, after other keys
    elif kind == "image_link":
        write_tar(path, [*members, ("000009.cls", b"1")], links=(("000009.png", "../x.png"),))
    return path


CASES = [
    # kind, reason, message pattern, samples left under on_error="skip"
    ("not_a_tar", "bad_shard", r"not_a_tar\.tar: the shard is not a tar archive", 0),
    ("empty", "bad_shard", r"empty\.tar: the shard is empty \(0 bytes\)", 0),
    ("damaged_header", "bad_shard",
     r"damaged_header\.tar member 000001\.png: the tar header at byte [0-9,]+ is damaged", 2),
    ("cut_in_member", "truncated_shard",
     r"cut_in_member\.tar member 000003\.png: the shard ends [0-9,]+ bytes before this member's "
     r"data does", 3),
    ("cut_at_boundary", "truncated_shard",
     r"cut_at_boundary\.tar member 000003\.png: the shard ends without tar's end-of-archive "
     "blocks", 4),
    ("no_image", "no_image",
     r"no_image\.tar member 000009\.cls: the sample 000009 has no image member \(members: cls", 4),
    ("two_images", "two_images", r"the sample 000009 has 2 image members", 4),
    ("no_label", "no_label", r"no_label\.tar member 000009\.png: the sample 000009 has no \.cls "
     "member", 4),
    ("label_text", "bad_label", r"member 000009\.cls: the label member is bad: it holds 'cat', "
     "not an integer", 4),
    ("label_negative", "bad_label", r"its label -2 is not an integer >= 0", 4),
    ("duplicate_key", "duplicate_key",
     r"member 000001\.cls: the key 000001 appears twice \(also member 000001\.cls\)", 3),
    ("image_link", "not_a_file", r"member 000009\.png: the image member is a link", 4),
]


@pytest.mark.parametrize(("kind", "reason", "match", "left"), CASES, ids=[c[0] for c in CASES])
def test_bad_shards_raise_naming_shard_and_member_or_skip_and_report(
        tmp_path, kind, reason, match, left) -> None:
    path = build(kind, tmp_path)
    with pytest.raises(ManifestError, match=match) as info:
        read_shards(str(path))
    assert info.value.reason == reason and str(path) in str(info.value.path)
    assert "on_error='skip'" in str(info.value)  # says how to go on without the bad samples
    # skip: the good samples are kept, the bad ones reported, nothing silently lost or doubled.
    other = write_tar(tmp_path / "other.tar", [m for i in range(10, 12) for m in good(i)])
    with pytest.warns(UserWarning, match=rf"left out .*{reason}"):
        m = read_shards([str(path), str(other)], on_error="skip")
    assert m.skipped[0].reason == reason
    assert len(m) == left + 2
    keys = [p.rsplit("/", 1)[1] for p in m.paths]
    assert len(set(keys)) == len(keys)
    for i in range(len(m)):
        assert m.read(i) == png(int(keys[i].split(".")[0]))


def test_missing_shard_compressed_and_repeated_shards(tmp_path, pattern) -> None:
    with pytest.raises(ManifestFileNotFoundError, match=r"nope-000000\.tar: the shard does not "
                       r"exist \[missing_shard\]; fix the shard pattern or list"):
        read_shards(str(tmp_path / "nope-{000000..000001}.tar"))
    with pytest.raises(ManifestError, match=r"compressed tar shards cannot be read by byte range"):
        read_shards(str(tmp_path / "x.tar.gz"))
    one = read_shards(pattern).shards[0]
    with pytest.raises(ManifestError, match=r"is named 2 times; every sample would be read"):
        read_shards([one, one])
    os.symlink(one, tmp_path / "alias-000000.tar")
    with pytest.raises(ManifestError, match=r"alias-000000\.tar are the same file \(a link\)"):
        read_shards([one, str(tmp_path / "alias-000000.tar")])


def test_a_shard_changed_after_indexing_is_refused_not_misread(tmp_path) -> None:
    shard = tmp_path / "c-000000.tar"
    write_tar(shard, [m for i in range(3) for m in good(i)])
    old = read_shards(str(shard))
    assert old.read(1) == png(1)  # this process now holds the shard open
    # Replaced by another shard (a new file at the path: members at other offsets).
    tmp = tmp_path / "new.tar"
    write_tar(tmp, [("extra.cls", b"1"), ("extra.png", png(7)),
                    *[m for i in range(3) for m in good(i)]])
    os.replace(tmp, shard)
    new = read_shards(str(shard))  # reads the new file, not the one still open
    assert [new.read(i) for i in range(4)] == [png(7), png(0), png(1), png(2)]
    with pytest.raises(FileReadProblem, match=r"its shard changed since it was indexed"):
        old.read(1)  # the old index no longer fits the file at the path
    # Rewritten in place: the open descriptor sees the new content, and the stamp catches it.
    with open(shard, "ab") as f:
        f.write(bytes(512))
    with pytest.raises(FileReadProblem, match=r"read the shards again"):
        new.read(0)
    assert read_shards(str(shard)).read(0) == png(7)


def test_index_cache_is_reused_for_the_same_content_only(tmp_path, monkeypatch) -> None:
    from extsrc.sources import shardindex

    pattern = write_shards(tmp_path / "data", shards=2, per_shard=3)
    cache = tmp_path / "cache"
    first = read_shards(pattern, index_cache=cache)
    assert len(list(cache.glob("*.json"))) == 2

    def no_scan(*args, **kwargs):
        raise AssertionError("the shard was scanned again")

    with monkeypatch.context() as mp:
        mp.setattr(shardindex, "_scan", no_scan)
        again = read_shards(pattern, index_cache=cache)
    assert again.fingerprint() == first.fingerprint()
    assert again.offsets.tolist() == first.offsets.tolist()
    assert again.labels.tolist() == first.labels.tolist()
    # Another content at the same path (a sample fewer): indexed again, not taken from the cache.
    write_tar(tmp_path / "data" / "train-000001.tar", [m for i in (3, 4) for m in good(i)])
    changed = read_shards(pattern, index_cache=cache)
    assert len(changed) == 5 and [changed.read(i) for i in (3, 4)] == [png(3), png(4)]
    # A damaged cache file is read past: the shard is indexed again.
    for f in cache.glob("*.json"):
        f.write_text("{not json")
    assert read_shards(pattern, index_cache=cache).fingerprint() == changed.fingerprint()


def test_bad_image_member_named_by_the_loader_and_skipped_with_on_error_skip(tmp_path) -> None:
    members = [m for i in range(5) for m in good(i)]
    members[5] = ("000002.png", corrupt_jpeg()[:300])  # the image member of sample 000002
    shard = str(write_tar(tmp_path / "bad-000000.tar", members))
    with pytest.raises(BadImageError, match=r"shards .*bad-000000\.tar, sample 3: "
                       r".*bad-000000\.tar/000002\.png: .*remove the sample from its shard"):
        with Loader(shard, batch_size=5, shuffle=False, **CPU) as loader:
            next(iter(loader))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Loader(shard, batch_size=2, bad_files=BadFiles(on_error="skip"), shuffle=False,
                    **CPU) as loader:
            got = epoch_indices(loader)
            assert [p.path.rsplit("/", 1)[1] for p in loader.skipped] == ["000002.png"]
    assert sorted(got) == [0, 1, 3, 4]


def test_loader_on_error_skip_reports_indexing_problems_too(tmp_path) -> None:
    write_tar(tmp_path / "s-000000.tar", [*good(0), ("000001.cls", b"dog"), ("000001.png", png(1)),
                                          *good(2)])
    write_tar(tmp_path / "s-000001.tar", [*good(3), ("000004.png", png(4))])
    pattern = str(tmp_path / "s-{000000..000001}.tar")
    with pytest.raises(ManifestError, match=r"s-000000\.tar member 000001\.cls: the label member"):
        Loader(pattern, batch_size=2, **CPU)
    with pytest.warns(UserWarning, match=r"skipping 2 of 5 samples") as caught:
        loader = Loader(pattern, batch_size=2, bad_files=BadFiles(on_error="skip"), **CPU)
    assert len(caught) == 1  # one report, not one from indexing and one from validating
    with loader:
        assert sorted(epoch_indices(loader)) == [0, 1, 2]
        assert [(p.reason, p.path.rsplit("/", 2)[1:]) for p in loader.skipped] == [
            ("bad_label", ["s-000000.tar", "000001.cls"]),
            ("no_label", ["s-000001.tar", "000004.png"])]
        assert [int(x) for x in loader.manifest.labels] == [label_of(i) for i in (0, 2, 3)]


def test_a_member_only_dali_fails_to_decode_is_named(tmp_path) -> None:
    """Header checks pass, DALI's decoder fails: the loader finds the member by decoding the
    failed batch's members from the shard."""
    members = [m for i in range(4) for m in sample_members(i, "jpg")[:2]]
    members[3] = ("000001.jpg", corrupt_jpeg())
    shard = str(write_tar(tmp_path / "dali-000000.tar", members))
    with pytest.raises(BadImageError, match=r"dali-000000\.tar/000001\.jpg: DALI could not "
                       r"decode this file: .*\[corrupt\]; .*remove the sample from its shard"):
        with Loader(shard, batch_size=4, shuffle=False, resize=16, **CPU) as loader:
            next(iter(loader))


def test_validate_reports_members_and_indexing_problems(tmp_path) -> None:
    members = [m for i in range(4) for m in good(i)]
    members[3] = ("000001.png", b"not an image at all" * 10)
    write_tar(tmp_path / "v-000000.tar", members)
    write_tar(tmp_path / "v-000001.tar", [*good(5), ("000006.cls", b"x"), ("000006.png", png(6))])
    pattern = str(tmp_path / "v-{000000..000001}.tar")
    report = validate(pattern, n_jobs=1, progress=False)
    assert report.counts == {"not_an_image": 1, "bad_label": 1}
    assert len(report.ok_indices) == 4 and report.num_checked == 5
    with pytest.raises(ManifestError, match=r"tar shards, whose members a CSV manifest cannot"):
        report.write_clean(tmp_path / "clean.csv")
    assert len(report.clean_manifest()) == 4
    p = subprocess.run([sys.executable, "-m", "extsrc.tools.cli", "validate", pattern],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 1, p.stderr
    assert "v-000000.tar/000001.png" in p.stdout and "not_an_image" in p.stdout
    assert "v-000001.tar/000006.cls: the label member is bad" in p.stdout


# -- object storage -----------------------------------------------------------------------------


def test_shards_over_s3_read_like_local_ones(tmp_path, s3_server, fault_proxy, pattern) -> None:  # noqa: F811
    local = read_shards(pattern)
    folder = Path(local.shards[0]).parent
    bucket = s3_server.make_bucket("extsrc-shards")
    s3_server.upload_tree(folder, bucket, "train")
    url = "s3://extsrc-shards/train/train-{000000..000003}.tar"
    remote = read_shards(url, storage_options=s3_server.storage_options(),
                         index_cache=tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("*.json"))) == SHARDS  # keyed by ETag
    cached = read_shards(url, storage_options=s3_server.storage_options(),
                         index_cache=tmp_path / "cache")
    assert cached.fingerprint() == remote.fingerprint()
    assert remote.labels.tolist() == local.labels.tolist()
    assert remote.offsets.tolist() == local.offsets.tolist()
    assert remote.paths[0] == "s3://extsrc-shards/train/train-000000.tar/000000.png"
    # Indexed again through the fault proxy (sizes from its HEAD answers), then the samples'
    # ranged reads through it, a third of the shards answering 503 SlowDown once.
    fault_proxy.reset()
    remote = read_shards(url, storage_options=Storage(
        s3_server.storage_options(fault_proxy.endpoint)))
    assert remote.offsets.tolist() == local.offsets.tolist()
    assert remote.read(0) == png(0)  # this process now holds a client for these options...
    # ...which a forked reader process must not use (s3fs's clients are not fork-safe).
    fault_proxy.reset(Faults(slowdown=0.34, times=1))  # faults from here on: the readers'
    seen = []
    with Loader(remote, batch_size=4, shuffle=True, seed=2, device="cpu",
                workers=Workers(num_workers=1)) as loader:
        for batch in loader:
            for k, i in enumerate(batch["index"].tolist()):
                seen.append(i)
                np.testing.assert_array_equal(batch["image"][k].numpy(), image_of(i))
    assert sorted(seen) == list(range(N))
    assert fault_proxy.counts.slowdown > 0  # the faults happened and were ridden out
    # The ranged reads went through the storage layer: counted, and its retries with them.
    stats = loader.storage_stats()
    assert stats["bytes_used"] >= int(local.sizes.sum()) and stats["retries"] >= 1
    assert stats["retried_reasons"] and stats["failures"] == 0
    # A batch's ranged reads go out together, up to the storage's concurrency, and come back
    # in batch order.
    fault_proxy.reset(Faults(delay=0.05))
    indices = [9, 2, 17, 5, 11, 0, 14, 7]
    got = remote.read_many(indices)
    assert got == [png(i) for i in indices]
    assert fault_proxy.counts.max_in_flight > 1
    with pytest.raises(ManifestFileNotFoundError, match=r"train-000004\.tar: the shard does not"):
        read_shards("s3://extsrc-shards/train/train-{000003..000004}.tar",
                    storage_options=s3_server.storage_options())


@pytest.fixture(scope="module")
def index_bucket(s3_server, pattern, tmp_path_factory) -> dict:  # noqa: F811
    """The shards of ``pattern`` in s3://extsrc-shard-index/train/, and one shard of three
    large members (big/) whose headers are a small part of it."""
    bucket = s3_server.make_bucket("extsrc-shard-index")
    s3_server.upload_tree(Path(read_shards(pattern).shards[0]).parent, bucket, "train")
    big = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(0)
    write_tar(big / "big-000000.tar", [m for i in range(3) for m in (
        (f"{i:06d}.cls", f"{label_of(i)}\n".encode()),
        (f"{i:06d}.jpg", rng.integers(0, 256, 700_000, dtype=np.uint8).tobytes()))])
    s3_server.upload_tree(big, bucket, "big")
    return {"train": f"s3://{bucket}/train/train-{{000000..000003}}.tar",
            "big": f"s3://{bucket}/big/big-000000.tar", "big_local": big / "big-000000.tar"}


@pytest.mark.parametrize("fault", ["slowdown", "drop"])
def test_indexing_a_url_shard_retries_and_counts_transient_failures(
        s3_server, fault_proxy, pattern, index_bucket, fault) -> None:  # noqa: F811
    """Every shard's first two GETs while indexing answer 503 SlowDown (or reset the
    connection): the index reads are retried and counted as sample reads are, and the index
    is the local one."""
    local = read_shards(pattern)
    fault_proxy.reset(Faults(**{fault: 1.0}, times=2))
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), backoff=0.01)
    remote = read_shards(index_bucket["train"], storage_options=storage)
    assert remote.offsets.tolist() == local.offsets.tolist()
    assert remote.labels.tolist() == local.labels.tolist()
    assert getattr(fault_proxy.counts, fault) == 2 * SHARDS
    # A reset on a reused keep-alive connection is retried once by the HTTP client itself
    # before extsrc sees it; every 503 reaches extsrc.
    least = SHARDS if fault == "drop" else 2 * SHARDS
    assert least <= storage.stats.retries <= 2 * SHARDS and storage.stats.failures == 0
    assert storage.stats.reads >= SHARDS  # one block read per shard at least, counted
    assert storage.stats.bytes == sum(os.path.getsize(s) for s in local.shards)
    assert remote.read(7) == png(7)
    # read_manifest passes its storage options on to read_shards.
    via = read_manifest(index_bucket["train"], storage_options=s3_server.storage_options())
    assert via.fingerprint() == remote.fingerprint()


def test_indexing_a_url_shard_reads_its_headers_not_its_members(
        s3_server, fault_proxy, index_bucket) -> None:  # noqa: F811
    fault_proxy.reset()
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint))
    remote = read_shards(index_bucket["big"], storage_options=storage)
    size = index_bucket["big_local"].stat().st_size
    # Ranged reads from header to header: 3 x 700 kB of image data are skipped.
    assert storage.stats.reads >= 3 and storage.stats.bytes < size // 4, storage.stats
    assert len(remote) == 3 and remote.labels.tolist() == [label_of(i) for i in range(3)]
    assert remote.read(2) == read_shards(str(index_bucket["big_local"])).read(2)


def test_indexing_a_missing_denied_or_unreachable_url_shard_names_it(
        s3_server, fault_proxy, index_bucket) -> None:  # noqa: F811
    so = s3_server.storage_options(fault_proxy.endpoint)
    fault_proxy.reset()
    url = index_bucket["train"].replace("{000000..000003}", "000009")
    with pytest.raises(ManifestFileNotFoundError,
                       match=rf"^{url}: the shard does not exist \[missing_shard\]"):
        read_shards(url, storage_options=so)
    fault_proxy.reset(Faults(deny=1.0, methods=("HEAD", "GET")))
    with pytest.raises(ManifestError, match=rf"^{index_bucket['big']}: the shard cannot be read "
                       r"\(access_denied\): access denied.*\[unreadable_shard\]"):
        read_shards(index_bucket["big"], storage_options=so)
    # Faults on every GET, more than the retries: the shard's reads give up, naming it.
    fault_proxy.reset(Faults(slowdown=1.0, times=100))
    storage = Storage(so, retries=2, backoff=0.01)
    with pytest.raises(ManifestError, match=rf"^{index_bucket['big']}: the shard cannot be read "
                       r"\(unreachable\): the storage did not answer usably after 3 attempts"):
        read_shards(index_bucket["big"], storage_options=storage)
    assert storage.stats.retries == 2 and storage.stats.failures == 1
    fault_proxy.reset(Faults())
    with pytest.warns(UserWarning, match="missing_shard"):
        m = read_shards([url, index_bucket["train"]], on_error="skip", storage_options=so)
    assert len(m) == N and [(p.shard, p.reason) for p in m.skipped] == [(url, "missing_shard")]


# -- merged range reads ---------------------------------------------------------------------------


def gets(proxy) -> int:
    """The GET requests ``proxy`` forwarded or failed since its last reset."""
    return sum(n for k, n in proxy.counts.per_key.items() if k.startswith("GET "))


def epoch_reads(manifest: ShardManifest, batch_size: int, seed: int = 3, run_length: int = 1
                ) -> tuple[list[int], list[bytes], int]:
    """One epoch of what a reader process does (``ShardedSource``, shuffled): the manifest
    indices in order, their bytes, and the (batch, shard) pairs the batches touch."""
    src = ShardedSource(manifest, batch_size=batch_size, shuffle=True, seed=seed,
                        run_length=run_length)
    indices: list[int] = []
    data: list[bytes] = []
    touched = 0
    for b in range(len(src)):
        got, _, info = src(SimpleNamespace(iteration=b, epoch_idx=0))
        indices += info[:, 0].tolist()
        data += [g.tobytes() for g in got]
        touched += len({int(manifest.shard_of[i]) for i in info[:, 0]})
    return indices, data, touched


@pytest.mark.parametrize("gap", [None, 1 << 20])
def test_a_batch_reads_each_shard_it_touches_with_one_get(
        s3_server, fault_proxy, pattern, index_bucket, gap) -> None:  # noqa: F811
    """Members of one shard that one batch needs, a few kB apart, come in one ranged GET
    (``coalesce_gap=None``: one GET per member), split back into each member's exact bytes."""
    local = read_shards(pattern)
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), coalesce_gap=gap)
    remote = read_shards(index_bucket["train"], storage_options=storage)
    storage.stats = StorageStats()
    fault_proxy.reset()
    indices, data, touched = epoch_reads(remote, batch_size=5)  # 4 batches
    assert sorted(indices) == list(range(N)) and data == [png(i) for i in indices]
    stats = storage.stats
    assert stats.bytes_used == int(local.sizes.sum()) and stats.failures == 0
    if gap is None:
        assert gets(fault_proxy) == stats.reads == N
        assert stats.bytes == stats.bytes_used
    else:
        assert gets(fault_proxy) == stats.reads == touched < N
        # The bytes between a shard's members (labels, headers) are read too: at most the
        # shard per batch that touches it.
        assert stats.bytes_used < stats.bytes <= touched * max(
            os.path.getsize(x) for x in local.shards)


def test_runs_read_a_batchs_members_of_one_shard_in_one_get_of_their_span(
        s3_server, fault_proxy, pattern, index_bucket) -> None:  # noqa: F811
    """Runs as long as a shard and batches as large: every batch reads each shard it touches
    with one GET, of the span from its first member to its last and nothing more, and touches
    far fewer shards than when single samples are shuffled."""
    local = read_shards(pattern)
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint))
    remote = read_shards(index_bucket["train"], storage_options=storage)
    storage.stats = StorageStats()
    fault_proxy.reset()
    indices, data, touched = epoch_reads(remote, batch_size=PER_SHARD, run_length=PER_SHARD)
    assert sorted(indices) == list(range(N)) and data == [png(i) for i in indices]
    assert gets(fault_proxy) == storage.stats.reads == touched
    span = 0
    for k in range(0, N, PER_SHARD):
        for s in {int(local.shard_of[i]) for i in indices[k:k + PER_SHARD]}:
            mine = [i for i in indices[k:k + PER_SHARD] if local.shard_of[i] == s]
            span += int(max(local.offsets[i] + local.sizes[i] for i in mine)
                        - min(local.offsets[i] for i in mine))
    assert storage.stats.bytes == span
    fault_proxy.reset()
    assert epoch_reads(remote, batch_size=PER_SHARD)[2] == gets(fault_proxy) > touched


def test_a_merged_get_reads_at_most_coalesce_span_bytes(
        s3_server, fault_proxy, index_bucket) -> None:  # noqa: F811
    """Members 3 kB apart with ``coalesce_span=4096``: two to a GET at most, never more bytes
    per GET than the bound, every member's bytes exact."""
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), coalesce_span=4096)
    remote = read_shards(index_bucket["train"], storage_options=storage)
    storage.stats = StorageStats()
    fault_proxy.reset()
    indices = [int(i) for i in np.random.default_rng(5).permutation(N)]
    assert remote.read_many(indices) == [png(i) for i in indices]
    assert SHARDS < gets(fault_proxy) == storage.stats.reads < N
    assert storage.stats.reads >= N / 2 and storage.stats.bytes <= storage.stats.reads * 4096


def test_members_of_a_merged_get_are_cached_one_by_one(
        tmp_path, s3_server, fault_proxy, index_bucket) -> None:  # noqa: F811
    """With ``cache_dir``, each member a merged GET brought is kept under its own range, so
    the next read of any of them, merged or not, asks the server nothing."""
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), cache_dir=tmp_path / "c")
    remote = read_shards(index_bucket["train"], storage_options=storage)
    storage.stats = StorageStats()
    fault_proxy.reset()
    assert remote.read_many(list(range(N))) == [png(i) for i in range(N)]
    assert gets(fault_proxy) == storage.stats.reads == SHARDS
    assert remote.read_many([3, 17, 8]) == [png(3), png(17), png(8)] and remote.read(9) == png(9)
    assert gets(fault_proxy) == SHARDS and storage.stats.cache_hits == 4


@pytest.mark.parametrize("fault", ["slowdown", "drop"])
def test_a_merged_get_is_retried_and_counted(
        s3_server, fault_proxy, index_bucket, fault) -> None:  # noqa: F811
    """Every shard's first two GETs answer 503 SlowDown (or reset the connection): each
    shard's one merged GET of the batch is retried, counted, and its members come back whole."""
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), backoff=0.01)
    remote = read_shards(index_bucket["train"], storage_options=storage)
    storage.stats = StorageStats()
    fault_proxy.reset(Faults(**{fault: 1.0}, times=2))
    indices, data, touched = epoch_reads(remote, batch_size=N)  # one batch: every shard
    assert data == [png(i) for i in indices] and touched == SHARDS
    assert getattr(fault_proxy.counts, fault) == 2 * SHARDS
    # A reset on a reused keep-alive connection is retried once by the HTTP client itself
    # before extsrc sees it; every 503 reaches extsrc.
    least = SHARDS if fault == "drop" else 2 * SHARDS
    assert least <= storage.stats.retries <= 2 * SHARDS and storage.stats.failures == 0
    assert storage.stats.reads == SHARDS and sum(storage.stats.retried_reasons.values()) == \
        storage.stats.retries


def test_a_merged_get_that_still_fails_is_told_per_member(
        s3_server, fault_proxy, index_bucket) -> None:  # noqa: F811
    """Faults past the retries (the storage throttling every request): the merged GET gives up
    and each of its members' places holds that problem, without a request of its own, which
    would only add to the refused ones; a member read alone gives up on its own."""
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), retries=1, backoff=0.01)
    remote = read_shards(index_bucket["train"], storage_options=storage)
    storage.stats = StorageStats()
    fault_proxy.reset(Faults(slowdown=1.0, times=100))
    got = remote.read_many([0, 1, 2, 7])  # shard 0's three members merged, shard 1's alone
    assert all(isinstance(g, FileReadProblem) and g.reason == "unreachable" for g in got), got
    assert "after 2 attempts" in got[0].message
    assert len({id(g) for g in got}) == 4  # a problem object per member, for its own name
    # Shard 0's merged GET and shard 1's single member's GET, each tried twice.
    assert gets(fault_proxy) == 2 * (1 + 1) and storage.stats.failures == 1 + 1
    assert storage.stats.reads == 0 and storage.stats.retries == 1 + 1


def test_a_shard_cut_short_after_indexing_is_read_member_by_member(
        s3_server, pattern) -> None:  # noqa: F811
    """A shard replaced by a shorter one after it was indexed: the merged GET comes back
    short, so its members are read one by one; those still whole are read, the others hold
    their own ``unreadable`` problem."""
    bucket = s3_server.make_bucket("extsrc-shard-cut")
    local = read_shards(pattern)
    s3_server.upload_tree(Path(local.shards[0]).parent, bucket, "train")
    remote = read_shards(f"s3://{bucket}/train/train-{{000000..000003}}.tar",
                         storage_options=s3_server.storage_options())
    members = [i for i in range(len(remote)) if remote.shard_of[i] == 0]
    _, cut, _, _, _ = remote.range(members[2])  # the shard now ends where member 2 starts
    body = Path(local.shards[0]).read_bytes()[:cut]
    s3_server.client().put_object(Bucket=bucket, Key="train/train-000000.tar", Body=body)
    remote.storage.stats = StorageStats()
    got = remote.read_many(members)
    assert [bytes(g) for g in got[:2]] == [bytes(g) for g in local.read_many(members[:2])]
    assert all(isinstance(g, FileReadProblem) and g.reason == "unreadable" for g in got[2:])
    assert re.search(r"not satisfiable|changed since it was indexed", got[2].message)
    assert remote.storage.stats.reads == 2


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_shard_deleted_mid_epoch_names_its_members(
        s3_server, pattern, on_error) -> None:  # noqa: F811
    """A shard deleted after the loader started: its members' merged GET finds no object, and
    each member is then named with the shard's URL (raised, or replaced and reported under
    ``on_error="skip"``); the other shards' members are read as before."""
    bucket = s3_server.make_bucket(f"extsrc-shard-deleted-{on_error}")
    s3_server.upload_tree(Path(read_shards(pattern).shards[0]).parent, bucket, "train")
    url = f"s3://{bucket}/train/train-{{000000..000003}}.tar"
    remote = read_shards(url, storage_options=s3_server.storage_options())
    gone = f"s3://{bucket}/train/train-000001.tar"
    with Loader(remote, batch_size=N, shuffle=False, device="cpu",
                workers=Workers(num_workers=1),
                bad_files=BadFiles(on_error=on_error)) as loader:
        s3_server.client().delete_object(Bucket=bucket, Key="train/train-000001.tar")
        if on_error == "raise":
            with pytest.raises(SampleReadError, match=rf"{gone}/000005\.png: no such object .*"
                               r"\[missing\]"):
                list(loader)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch = next(iter(loader))
    pads = batch["is_pad"].tolist()
    assert batch["index"].tolist() == list(range(N))
    assert [i for i in range(N) if pads[i]] == list(range(5, 10))
    assert [(p.index, p.reason, p.path) for p in loader.skipped] == [
        (i, "missing", f"{gone}/{i:06d}.png") for i in range(5, 10)]


def test_coalesce_settings_are_checked_and_travel_to_reader_processes() -> None:
    with pytest.raises(ValueError, match=r"storage coalesce_gap must be >= 0, got -1"):
        Storage(coalesce_gap=-1)
    with pytest.raises(ValueError, match=r"storage coalesce_span must be >= 1, got 0"):
        Storage(coalesce_span=0)
    with pytest.raises(TypeError, match=r"storage coalesce_gap must be an int, got float"):
        Storage(coalesce_gap=1.5)
    got = pickle.loads(pickle.dumps(Storage(coalesce_gap=None, coalesce_span=4096)))
    assert (got.coalesce_gap, got.coalesce_span) == (None, 4096)


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 700)), max_size=30),
       st.integers(0, 1500), st.integers(1, 3000))
@settings(max_examples=300, deadline=None)
def test_merged_spans_hold_every_range_once_within_their_bounds(ranges, gap, span) -> None:
    spans = merge_ranges(ranges, max_gap=gap, max_span=span)
    held = sorted(k for sp in spans for k in sp.members)
    assert held == list(range(len(ranges)))  # each range in exactly one span
    for sp in spans:
        members = [ranges[k] for k in sp.members]
        assert sp.start == min(o for o, _ in members) and sp.end == max(o + n for o, n in members)
        assert sp.end - sp.start <= span or len(sp.members) == 1
    for a, b in itertools.pairwise(spans):  # in offset order; b's first range did not fit a
        first = min(ranges[k] for k in b.members)
        assert a.start <= b.start
        assert first[0] - a.end > gap or max(a.end, sum(first)) - a.start > span


# -- the tar header reader ------------------------------------------------------------------------


def tarfile_listing(path: Path) -> list[tuple[str, int, int, bool]]:
    with tarfile.open(path) as tf:
        return [(t.name, t.offset_data, t.size if t.isreg() else 0, t.isreg())
                for t in tf if not t.isdir()]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
       entries=st.lists(st.tuples(
           st.text(st.characters(min_codepoint=0x21, max_codepoint=0x24ff,
                                 blacklist_characters="/\\\x7f", blacklist_categories=("Cs",)),
                   min_size=1, max_size=40),
           st.integers(0, 1300), st.sampled_from(["file", "dir", "symlink", "hardlink"]),
           st.integers(0, 3), st.booleans()), min_size=1, max_size=6))
def test_header_reader_lists_what_tarfile_lists(tmp_path, fmt, entries) -> None:
    """Names (long ones, ustar's prefix, non-ASCII, pax and GNU long names), offsets and sizes
    as tarfile reads them, for every format tarfile writes."""
    from extsrc.sources.tarindex import read_members

    path = tmp_path / f"h{fmt}.tar"
    with tarfile.open(path, "w", format=fmt) as tf:
        for k, (stem, size, kind, depth, fractional) in enumerate(entries):
            name = "/".join([f"d{k}" * (12 * j + 1) for j in range(depth)] + [f"{stem}.{k}.jpg"])
            ti = tarfile.TarInfo(name)
            ti.mtime = 1_700_000_000.5 if fractional else 1_700_000_000
            if kind == "file":
                ti.size = size
                try:
                    tf.addfile(ti, io.BytesIO(bytes([k % 251]) * size))
                except ValueError:  # a name this format cannot hold
                    continue
            else:
                ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                           "hardlink": tarfile.LNKTYPE}[kind]
                ti.linkname = "target.jpg"
                try:
                    tf.addfile(ti)
                except ValueError:
                    continue
    with open(path, "rb") as f:
        scan = read_members(f, path.stat().st_size)
    assert scan.problem is None
    assert [(m.name, m.offset, m.size, m.regular) for m in scan.members] == tarfile_listing(path)


def write_volume_labelled(path: Path) -> Path:
    """Three good samples after a GNU volume label (a 'V' header, left to tarfile)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        volume = tarfile.TarInfo("backup of 2026-11-25")  # GNU tar's --label: a 'V' header
        volume.type = b"V"
        tf.addfile(volume)
        for name, data in [m for i in range(3) for m in good(i)]:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return path


def test_formats_the_header_reader_leaves_to_tarfile_give_the_same_index(tmp_path) -> None:
    from extsrc.sources.tarindex import Unsupported, read_members

    path = write_volume_labelled(tmp_path / "labelled-000000.tar")
    with open(path, "rb") as f, pytest.raises(Unsupported, match="type b'V'"):
        read_members(f, path.stat().st_size)
    m = read_shards(str(path))  # read through tarfile instead
    assert [p.rsplit("/", 1)[1] for p in m.paths] == ["000000.png", "000001.png", "000002.png"]
    assert [m.read(i) for i in range(3)] == [png(i) for i in range(3)]
    assert m.labels.tolist() == [label_of(i) for i in range(3)]


def test_a_url_shard_left_to_tarfile_is_indexed_through_ranged_reads(
        tmp_path, s3_server, fault_proxy) -> None:  # noqa: F811
    """tarfile reads a URL shard through the same retried, counted ranged reads."""
    path = write_volume_labelled(tmp_path / "labelled-000000.tar")
    bucket = s3_server.make_bucket("extsrc-shard-tarfile")
    s3_server.upload_tree(tmp_path, bucket, "v")
    fault_proxy.reset(Faults(slowdown=1.0, times=1))
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), backoff=0.01)
    remote = read_shards(f"s3://{bucket}/v/labelled-000000.tar", storage_options=storage)
    local = read_shards(str(path))
    assert remote.offsets.tolist() == local.offsets.tolist() and len(remote) == 3
    assert remote.labels.tolist() == [label_of(i) for i in range(3)]
    assert storage.stats.retries == 1 and storage.stats.reads >= 1
    assert [remote.read(i) for i in range(3)] == [png(i) for i in range(3)]
