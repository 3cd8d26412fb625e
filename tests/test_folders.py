"""Folder datasets (``Manifest.from_folder``, ``read_manifest(folder)``) on real image files:
ImageFolder labels, integer class folders, each listing rule, a real DALI Loader over a folder,
resume fingerprints and ``extsrc validate <folder>``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import pattern_image
from PIL import Image

from extsrc import Loader, Manifest, Sampling, Workers, read_manifest
from extsrc.errors import (
    BadImageError,
    ManifestError,
    ManifestFileNotFoundError,
    PathOutsideRootError,
    StateMismatchError,
)
from extsrc.loading.presets import val_loader
from extsrc.sources.folders import IMAGE_EXTENSIONS

REPO = Path(__file__).resolve().parents[1]
SIZE = (9, 11)  # odd, so a height/width swap shows


def image(path: Path, index: int, fmt: str = "PNG") -> Path:
    """A real image at ``path`` whose pixels encode ``index``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pattern_image(index, *SIZE)).save(path, format=fmt)
    return path


def tree(root: Path, layout: dict[str, int], ext: str = "png") -> dict[str, int]:
    """``layout`` maps class folder -> image count; returns relative path -> image index."""
    out, k = {}, 0
    for cls, n in layout.items():
        for j in range(n):
            rel = f"{cls}/{j:03d}.{ext}"
            image(root / rel, k)
            out[rel] = k
            k += 1
    return out


def rel(m: Manifest, root: Path) -> list[str]:
    return [os.path.relpath(p, root) for p in m.paths]


# -- labels and classes --------------------------------------------------------------------------


def test_imagefolder_labels_classes_and_order(tmp_path):
    tree(tmp_path, {"dog": 2, "cat": 3, "emu": 1})
    image(tmp_path / "cat" / "2024" / "summer" / "x.jpg", 50, "JPEG")  # nested: still a cat
    m = Manifest.from_folder(tmp_path)
    assert m.classes == ["cat", "dog", "emu"]
    assert rel(m, tmp_path) == [
        "cat/000.png", "cat/001.png", "cat/002.png", "cat/2024/summer/x.jpg",
        "dog/000.png", "dog/001.png", "emu/000.png",
    ]
    assert m.labels.tolist() == [0, 0, 0, 0, 1, 1, 2]
    assert m.lines == tuple(range(1, 8))
    assert m.source == os.path.join(str(tmp_path), "")
    assert m.root == str(tmp_path)
    assert all(os.path.isabs(p) for p in m.paths)
    # read_manifest(folder) is the same manifest; so is a second listing (deterministic).
    assert read_manifest(tmp_path) == m == Manifest.from_folder(str(tmp_path))


def test_class_names_sort_by_code_point_like_imagefolder(tmp_path):
    tree(tmp_path, {"b": 1, "B": 1, "a b": 1, "a": 1})
    m = Manifest.from_folder(tmp_path)
    assert m.classes == ["B", "a", "a b", "b"]
    # Folder by folder: "a/..." before "a b/...", although "a b/" < "a/" as whole strings.
    assert rel(m, tmp_path) == ["B/000.png", "a/000.png", "a b/000.png", "b/000.png"]
    assert m.labels.tolist() == [0, 1, 2, 3]


def test_integer_class_folders_are_the_labels(tmp_path):
    tree(tmp_path, {"7": 2, "0": 1, "12": 1, "003": 1})
    m = Manifest.from_folder(tmp_path)
    assert m.classes is None
    # String order of the folders, integer labels from their names.
    assert rel(m, tmp_path) == ["0/000.png", "003/000.png", "12/000.png", "7/000.png",
                                "7/001.png"]
    assert m.labels.tolist() == [0, 3, 12, 7, 7]


def test_integer_and_name_folders_mixed_are_names(tmp_path):
    tree(tmp_path, {"1": 1, "10": 1, "2": 1, "cat": 1})
    m = Manifest.from_folder(tmp_path)
    assert m.classes == ["1", "10", "2", "cat"]
    assert m.labels.tolist() == [0, 1, 2, 3]


def test_two_spellings_of_one_integer_are_refused(tmp_path):
    tree(tmp_path, {"7": 1, "07": 1})
    with pytest.raises(ManifestError, match=r"class folders 07 and 7 are both label 7; rename"):
        Manifest.from_folder(tmp_path)


# -- the listing rules ---------------------------------------------------------------------------


def test_image_files_in_the_root_are_refused_naming_them(tmp_path):
    tree(tmp_path, {"cat": 1})
    image(tmp_path / "stray.png", 9)
    image(tmp_path / "Also.JPG", 8, "JPEG")
    with pytest.raises(ManifestError, match=r"2 image file\(s\) directly in the folder "
                       r"\(Also\.JPG, stray\.png\) belong to no class.*move them into a class"):
        Manifest.from_folder(tmp_path)


def test_other_files_in_the_root_and_classes_are_skipped(tmp_path):
    tree(tmp_path, {"cat": 2})
    (tmp_path / "README.md").write_text("about\n")
    (tmp_path / "labels.csv").write_text("x,1\n")
    (tmp_path / "cat" / "notes.txt").write_text("n\n")
    (tmp_path / "cat" / "anim.gif").write_bytes(b"GIF89a")
    m = Manifest.from_folder(tmp_path)
    assert rel(m, tmp_path) == ["cat/000.png", "cat/001.png"]


def test_extensions_are_case_insensitive_and_overridable(tmp_path):
    image(tmp_path / "cat" / "a.PNG", 0)
    image(tmp_path / "cat" / "b.Jpeg", 1, "JPEG")
    image(tmp_path / "cat" / "c.webp", 2, "WEBP")
    image(tmp_path / "dog" / "d.tiff", 3, "TIFF")
    assert len(Manifest.from_folder(tmp_path)) == 4
    only = Manifest.from_folder(tmp_path, extensions=["png", ".JPEG", ".tiff"])
    assert rel(only, tmp_path) == ["cat/a.PNG", "cat/b.Jpeg", "dog/d.tiff"]
    assert ".jp2" in IMAGE_EXTENSIONS and ".pgm" in IMAGE_EXTENSIONS
    with pytest.raises(TypeError, match=r"extensions must be a list .*\['\.jpg', '\.png'\]"):
        Manifest.from_folder(tmp_path, extensions=".png")
    with pytest.raises(ValueError, match="extensions is empty"):
        Manifest.from_folder(tmp_path, extensions=[])


def test_hidden_files_and_folders_are_skipped(tmp_path):
    tree(tmp_path, {"cat": 1, "dog": 1})
    image(tmp_path / ".ipynb_checkpoints" / "x.png", 5)  # a hidden class folder
    image(tmp_path / "cat" / ".hidden.png", 6)
    image(tmp_path / "cat" / ".cache" / "y.png", 7)
    (tmp_path / ".DS_Store").write_bytes(b"\0\1")
    m = Manifest.from_folder(tmp_path)
    assert m.classes == ["cat", "dog"]
    assert rel(m, tmp_path) == ["cat/000.png", "dog/000.png"]


def test_empty_class_folder_is_refused_unless_allowed(tmp_path):
    tree(tmp_path, {"cat": 1, "emu": 1})
    (tmp_path / "dog").mkdir()
    (tmp_path / "dog" / "readme.txt").write_text("todo\n")
    with pytest.raises(ManifestError, match=r"1 empty class folder\(s\) \(dog\).*readme\.txt.*"
                       r"shift the label.*allow_empty=True"):
        Manifest.from_folder(tmp_path)
    m = Manifest.from_folder(tmp_path, allow_empty=True)
    assert m.classes == ["cat", "dog", "emu"]
    assert m.labels.tolist() == [0, 2]  # emu keeps its index


def test_no_class_folders_and_no_folder(tmp_path):
    with pytest.raises(ManifestError, match="no class folders; a folder dataset holds one"):
        Manifest.from_folder(tmp_path)
    with pytest.raises(ManifestFileNotFoundError, match=r"nope/: not found"):
        Manifest.from_folder(tmp_path / "nope")
    with pytest.raises(TypeError, match=r"from_folder: folder must be a folder path .*int 3"):
        Manifest.from_folder(3)  # type: ignore[arg-type]


def test_read_manifest_refuses_column_arguments_for_a_folder(tmp_path):
    tree(tmp_path, {"cat": 1})
    with pytest.raises(ManifestError, match=r"is a folder.*no columns; drop sep=','"):
        read_manifest(tmp_path, sep=",")


# -- symlinks and the root -----------------------------------------------------------------------


def test_symlinked_folders_and_files_are_followed_and_checked_against_the_root(tmp_path):
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    tree(data, {"cat": 1})
    tree(elsewhere, {"pool": 2})
    (data / "dog").symlink_to(elsewhere / "pool", target_is_directory=True)
    (data / "cat" / "linked.png").symlink_to(elsewhere / "pool" / "000.png")
    m = Manifest.from_folder(data)
    assert rel(m, data) == ["cat/000.png", "cat/linked.png", "dog/000.png", "dog/001.png"]
    assert m.labels.tolist() == [0, 0, 1, 1]
    # Lexically inside, really outside: refused when used, naming the sample.
    assert m.outside_root() == [] and m.outside_root(follow_symlinks=True) == [1, 2, 3]
    with Loader(m, batch_size=4, shuffle=False, device="cpu",
                workers=Workers(num_workers=0)) as loader:
        with pytest.raises(PathOutsideRootError, match=r"folder .*data/, sample 2: .*linked\.png"
                           r".*outside the root"):
            next(iter(loader))
    assert Manifest.from_folder(data, allow_outside_root=True).root is None
    assert read_manifest(data, allow_outside_root=True).root is None


@pytest.mark.parametrize("target", ["cat", "."])
def test_symlink_loop_is_refused(tmp_path, target):
    tree(tmp_path, {"cat": 1})
    (tmp_path / "cat" / "again").symlink_to(tmp_path / target, target_is_directory=True)
    with pytest.raises(ManifestError, match=r"cat/again: a symlink loop"):
        Manifest.from_folder(tmp_path)


# -- messages ------------------------------------------------------------------------------------


def test_a_bad_file_is_named_by_folder_and_sample(tmp_path):
    tree(tmp_path, {"cat": 2, "dog": 1})
    (tmp_path / "cat" / "001.png").write_text("not an image\n")
    m = Manifest.from_folder(tmp_path)
    assert m.where(1) == f"folder {os.path.join(str(tmp_path), '')}, sample 2"
    with Loader(m, batch_size=3, shuffle=False, device="cpu",
                workers=Workers(num_workers=0)) as loader:
        with pytest.raises(BadImageError) as ei:
            next(iter(loader))
    msg = str(ei.value)
    assert msg.startswith(f"folder {os.path.join(str(tmp_path), '')}, sample 2: "), msg
    assert "cat/001.png" in msg and "delete the file" in msg and "line" not in msg.split(";")[0]
    assert ei.value.line == 2 and ei.value.source == m.source


# -- loading -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_loader_over_a_folder_two_shards_two_epochs(tmp_path):
    ids = tree(tmp_path, {"cat": 4, "dog": 3, "emu": 2})  # 9 samples: one pad per epoch
    expected_label = {"cat": 0, "dog": 1, "emu": 2}
    loaders = [
        Loader(str(tmp_path), batch_size=2, sampling=Sampling(shard_id=s, num_shards=2), seed=5,
               device="cpu",
               workers=Workers(num_workers=1))
        for s in range(2)
    ]
    try:
        m = loaders[0].manifest
        assert m.classes == ["cat", "dog", "emu"]
        orders = []
        for e in range(2):
            seen = []
            for loader in loaders:
                for b in loader:
                    for k, (i, pad) in enumerate(zip(b["index"].tolist(), b["is_pad"].tolist(),
                                                     strict=True)):
                        r = os.path.relpath(m.paths[i], tmp_path)
                        assert int(b["label"][k]) == expected_label[r.split("/")[0]]
                        np.testing.assert_array_equal(
                            b["image"][k].numpy(), pattern_image(ids[r], *SIZE))
                        if not pad:
                            seen.append(i)
            assert sorted(seen) == list(range(9)), f"epoch {e}"
            orders.append(seen)
        assert orders[0] != orders[1]
    finally:
        for loader in loaders:
            loader.close()


def test_presets_take_a_folder(tmp_path):
    tree(tmp_path, {"cat": 3, "dog": 2})
    with val_loader(str(tmp_path), batch_size=5, size=8, crop=8, device="cpu",
                    workers=Workers(num_workers=0)) as loader:
        (batch,) = list(loader)
    assert batch["image"].shape == (5, 3, 8, 8)
    assert batch["label"].tolist() == [0, 0, 0, 1, 1]


def test_resume_fingerprint_follows_the_folder_content(tmp_path):
    tree(tmp_path, {"cat": 2, "dog": 2})
    a, b = Manifest.from_folder(tmp_path), read_manifest(str(tmp_path) + "/")
    assert a.fingerprint() == b.fingerprint()
    with Loader(a, batch_size=2, device="cpu", workers=Workers(num_workers=0)) as loader:
        state = loader.state_dict()
    image(tmp_path / "dog" / "new.png", 9)
    c = Manifest.from_folder(tmp_path)
    assert c.fingerprint() != a.fingerprint()
    with Loader(c, batch_size=2, device="cpu", workers=Workers(num_workers=0)) as loader:
        with pytest.raises(StateMismatchError, match="manifest"):
            loader.load_state_dict(state)


def test_cli_validate_a_folder(tmp_path):
    tree(tmp_path, {"cat": 2, "dog": 2})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]), "OMP_NUM_THREADS": "1"}

    def validate() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "extsrc.tools.cli", "validate", str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=180)

    p = validate()
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "4 file(s) checked" in p.stdout and "4 ok, 0 bad" in p.stdout, p.stdout
    (tmp_path / "dog" / "001.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    p = validate()
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert f"folder {os.path.join(str(tmp_path), '')}, sample 4: " in p.stdout, p.stdout
    assert "dog/001.png" in p.stdout and "delete the file" in p.stdout
