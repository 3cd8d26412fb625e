"""Helpers shared by the tests: real image datasets written to disk, bad files made for real,
the live child processes and open descriptors of this process (no test file imports another;
scripts/stress_loaders.py uses them too)."""

from __future__ import annotations

import gc
import io
import os
import struct
import time
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


# -- datasets ------------------------------------------------------------------------------------


def pattern_image(index: int, height: int, width: int) -> np.ndarray:
    """A deterministic HWC uint8 image that encodes ``index`` and varies over every pixel."""
    yy, xx = np.mgrid[0:height, 0:width]
    r = (xx * 7 + index * 13) % 256
    g = (yy * 5 + index * 29) % 256
    b = (xx + yy + index * 53) % 256
    return np.stack([r, g, b], axis=2).astype(np.uint8)


def write_dataset(
    root: Path, n: int, *, fmt: str = "png", size: tuple[int, int] = (33, 47),
    label_fn=lambda i: i % 5, name: str = "manifest.csv",
) -> Path:
    """Write ``n`` images and a ``path,label`` CSV (with header) under ``root``; return its path.

    ``fmt`` is ``"png"``, ``"jpg"`` or ``"mixed"`` (alternating). Sizes vary a little per sample so
    that resizing is exercised.
    """
    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = ["path,label"]
    for i in range(n):
        ext = fmt if fmt != "mixed" else ("png" if i % 2 == 0 else "jpg")
        h, w = size[0] + (i % 3), size[1] + (i % 4)
        rel = f"images/{i:05d}.{ext}"
        img = Image.fromarray(pattern_image(i, h, w))
        if ext == "jpg":
            img.save(root / rel, quality=90)
        else:
            img.save(root / rel)
        lines.append(f"{rel},{label_fn(i)}")
    path = root / name
    path.write_text("\n".join(lines) + "\n")
    return path


# -- bad files, made for real ---------------------------------------------------------------------


def noise(h: int = 64, w: int = 64, seed: int = 0) -> np.ndarray:
    """Noise compresses badly, so a JPEG's scan data is most of the file."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def encode(img: np.ndarray | Image.Image, fmt: str, **kw) -> bytes:
    im = img if isinstance(img, Image.Image) else Image.fromarray(img)
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def huge_png(w: int = 50_000, h: int = 50_000) -> bytes:
    """A valid PNG header declaring w x h (2.5 G pixels by default) over a few bytes of data."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (1 + 3 * w))
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + \
        _chunk(b"IEND", b"")


def huge_jpeg(w: int = 50_000, h: int = 50_000) -> bytes:
    """A real small JPEG whose frame header (SOF0) is patched to declare w x h."""
    data = bytearray(encode(noise(16, 16), "JPEG"))
    k = data.find(b"\xff\xc0")
    data[k + 5:k + 9] = struct.pack(">HH", h, w)
    return bytes(data)


def truncated_jpeg() -> bytes:
    data = encode(noise(), "JPEG", quality=90)
    return data[: int(len(data) * 0.6)]  # cut inside the scan data


def corrupt_jpeg() -> bytes:
    """Header checks pass (every marker, the size and EOI are fine) but the Huffman table is
    bogus: only a decoder notices. DALI's decoder fails on it."""
    data = bytearray(encode(noise(), "JPEG", quality=90))
    k = data.find(b"\xff\xc4")
    data[k + 5:k + 21] = b"\xff" * 16
    return bytes(data)


def png_short_idat(h: int = 20, w: int = 21, rows: int = 10, interlace: bool = False) -> bytes:
    """A PNG whose compressed image data is a complete zlib stream holding only ``rows`` of its
    ``h`` scanlines (IEND and every CRC intact): Pillow decodes it (the missing rows black),
    libpng, DALI's PNG decoder, refuses it ("Not enough image data")."""
    img = pattern_image(3, h, w)
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(rows))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, int(interlace))
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw)) + \
        _chunk(b"IEND", b"")


BAD_FILES = {
    # name: (file name, how to make it, reason validate reports, found without decoding?)
    "truncated_jpeg": ("a.jpg", truncated_jpeg, "truncated", True),
    "zero_byte": ("b.jpg", lambda: b"", "empty", True),
    "text_as_jpg": ("c.jpg", lambda: b"this is not an image, it is text\n" * 3, "not_an_image",
                    True),
    "missing": ("d.jpg", None, "missing", True),
    "directory": ("e.jpg", "dir", "is_directory", True),
    "huge_png_50k": ("f.png", huge_png, "too_large", True),
    "huge_jpeg_50k": ("g.jpg", huge_jpeg, "too_large", True),
    "corrupt_jpeg": ("h.jpg", corrupt_jpeg, "corrupt", False),
    "gif": ("i.png", lambda: encode(pattern_image(1, 20, 20), "GIF"), "unsupported_format", True),
    "png_no_iend": ("j.png", lambda: encode(pattern_image(2, 20, 20), "PNG")[:-12], "truncated",
                    True),
}


def make_bad(folder: Path, kind: str) -> Path:
    name, how, _, _ = BAD_FILES[kind]
    path = folder / name
    if how == "dir":
        path.mkdir()
    elif how is not None:
        path.write_bytes(how())
    return path


def dataset_with_bad(tmp_path: Path, kinds, n: int = 8) -> tuple[Path, dict[str, int]]:
    """``n`` good images plus one bad file per kind, interleaved; returns the manifest and
    each kind's manifest index."""
    write_dataset(tmp_path, n, fmt="mixed")
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir(exist_ok=True)
    rows = [f"images/{i:05d}.{'png' if i % 2 == 0 else 'jpg'},{i % 5}" for i in range(n)]
    where: dict[str, int] = {}
    for k, kind in enumerate(kinds):
        path = make_bad(bad_dir, kind)
        pos = min(2 * k + 1, len(rows))
        rows.insert(pos, f"{path.relative_to(tmp_path)},{k % 5}")
    for kind in kinds:
        name = BAD_FILES[kind][0]
        where[kind] = next(i for i, r in enumerate(rows) if r.startswith(f"bad/{name},"))
    manifest = tmp_path / "with_bad.csv"
    manifest.write_text("path,label\n" + "\n".join(rows) + "\n")
    return manifest, where


def root_with_link_out(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """A dataset of ``n`` PNGs under ``tmp_path/root``, a PNG outside it (``tmp_path/secret.png``)
    and a symlink to it inside (``root/images/link.png``)."""
    root = tmp_path / "root"
    write_dataset(root, n, fmt="png")
    outside = tmp_path / "secret.png"
    outside.write_bytes(encode(pattern_image(9, 33, 47), "PNG"))
    (root / "images" / "link.png").symlink_to(outside)
    return root, outside


# -- processes -----------------------------------------------------------------------------------


def children(*, zombies: bool = False) -> set[int]:
    """Live child processes of this process, from /proc (psutil is not a dependency), leaving
    out the resource trackers that multiprocessing and loky start once per process by design
    (one each, idle); ``zombies=True`` counts exited but unreaped ones too."""
    me, out = os.getpid(), set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and (zombies or fields[0] != "Z") \
                and b"resource_tracker" not in cmd:
            out.add(int(d))
    return out


def open_fds() -> tuple[int, int]:
    """(open file descriptors, of which memory files) of this process."""
    n = mem = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used
        n += 1
        mem += target.startswith("/memfd:")
    return n, mem


def forked_gc_exits(timeout: float = 30.0) -> int:
    """Fork a child that collects garbage and ends as multiprocessing's workers (DataLoader's
    included) end, with ``os._exit``; its exit code (-9: it did not end within ``timeout`` and
    was killed). test_lifecycle's ``test_forked_child_exits_through_interpreter_teardown`` covers
    a child that ends as a script does."""
    pid = os.fork()
    if pid == 0:  # the child: a copy of the caller (pytest), which must not go on running
        code = 0
        try:
            gc.collect()
        except BaseException:
            code = 3
        os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -9


def png_interlaced(img: np.ndarray) -> bytes:
    """An Adam7-interlaced 8-bit RGB PNG of ``img`` (HWC uint8; Pillow writes no interlaced
    PNGs): each pass's pixels, row by row, filter byte 0."""
    h, w = img.shape[:2]
    passes = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2))
    raw = b"".join(
        b"\x00" + img[y, x0::dx].tobytes()
        for x0, y0, dx, dy in passes if x0 < w
        for y in range(y0, h, dy)
    )
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw)) + \
        _chunk(b"IEND", b"")


def unregistered(**kw):
    """``@augment_op`` that leaves the registry as it was (the ops of a test are its own)."""
    import augment_ops
    from augment_ops import augment_op

    def wrap(fn):
        op = augment_op(replace=True, **kw)(fn)
        augment_ops.unregister(op.name)
        return op
    return wrap


def sized_dataset(root: Path, sizes: list[tuple[int, int]]) -> Path:
    """A manifest ``root/m.csv`` of PNG pattern images of the given (height, width), labels 0..n."""
    lines = ["path,label"]
    for i, (h, w) in enumerate(sizes):
        Image.fromarray(pattern_image(i, h, w)).save(root / f"img{i}.png")
        lines.append(f"img{i}.png,{i}")
    (root / "m.csv").write_text("\n".join(lines) + "\n")
    return root / "m.csv"


def scalar_draws(traced, seed: int, salt: int, index: np.ndarray, epoch: np.ndarray) -> list:
    """The per-sample scalars of the traced op ``traced`` for the samples ``index`` of epochs
    ``epoch``, drawn as the loader draws them (``counter_uniform(seed, epoch, index, salt,
    slot)``): one batch array per scalar, in the order ``emit`` takes them."""
    from augment_ops.lower_dali import SampleScalars, sample_scalar_nodes
    from extsrc.ops_runtime.seeding import counter_uniform

    nodes = sample_scalar_nodes(traced)
    if not nodes:
        return []
    program = SampleScalars(nodes, lambda i, e, slot: counter_uniform(seed, e, i, salt, slot))
    return program(index, epoch)


def traced_pipeline(traced, imgs: list[np.ndarray], values=(), *, gpu: bool = False):
    """A built DALI pipeline of the traced op ``traced`` over ``imgs`` as one batch, on the CPU
    (``gpu``: the op on GPU 0); ``values``: its per-sample scalars (:func:`scalar_draws`), one
    batch each, in order."""
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    from augment_ops.lower_dali import emit

    pipe = Pipeline(batch_size=len(imgs), num_threads=1, device_id=0 if gpu else None,
                    seed=1234)  # DALI's own draws (noise) the same every run
    with pipe:
        img = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
        if gpu:
            img = img.gpu()
        sample_values = [fn.external_source(source=(lambda v: lambda: v)(a), batch=True)
                         for a in values]
        pipe.set_outputs(*emit(traced, img, sample_values=sample_values))
    pipe.build()
    return pipe


def run_traced(traced, imgs: list[np.ndarray], values=(), *, gpu: bool = False,
               pipe=None) -> list[tuple[np.ndarray, ...]]:
    """Every output of each sample of :func:`traced_pipeline` (``pipe``, when given: that
    pipeline, built by it) run once, as host arrays."""
    pipe = traced_pipeline(traced, imgs, values, gpu=gpu) if pipe is None else pipe
    outs = [o.as_cpu() if gpu else o for o in pipe.run()]
    return [tuple(np.array(o[k]) for o in outs) for k in range(len(imgs))]


def traced_equals_numpy(op, imgs: list[np.ndarray], *, seed: int = 0, index=None, epoch=None,
                        gpu: bool = False) -> list[np.ndarray]:
    """The registered one-output ``op`` traced and run by :func:`run_traced` on ``imgs`` (one
    batch; sample k is manifest sample ``index[k]`` of ``epoch[k]``, by default k of epoch 0),
    checked equal to ``op.apply`` with each sample's counter draws, dtype and shape included;
    the numpy outputs."""
    from augment_ops.trace import trace_op
    from extsrc.ops_runtime.seeding import counter_rng, name_salt

    traced = trace_op(op)
    n = len(imgs)
    index = np.arange(n, dtype=np.int64) if index is None else np.asarray(index, np.int64)
    epoch = np.zeros(n, np.int64) if epoch is None else np.asarray(epoch, np.int64)
    salt = name_salt(op.name)
    values = scalar_draws(traced, seed, salt, index, epoch) if op.random else ()
    wants = []
    for k, (img, (got,)) in enumerate(zip(imgs, run_traced(traced, imgs, values, gpu=gpu),
                                          strict=True)):
        rng = counter_rng(seed, int(epoch[k]), int(index[k]), salt) if op.random else None
        with np.errstate(all="ignore"):
            (want,) = op.apply(img, rng)
        assert got.dtype == want.dtype and got.shape == want.shape, (op.name, k, got.shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{op.name}, sample {k}")
        wants.append(want)
    return wants


def loader_equals_numpy(op, manifest, *, seed: int, batch_size: int, size: tuple[int, int],
                        workers: int = 0) -> list[np.ndarray]:
    """Every batch of a CPU ``extsrc.Loader`` over ``manifest`` (pattern images of ``size``,
    :func:`sized_dataset`) running ``op`` on its native path, each sample checked equal to the
    numpy function with the sample's counter draws; the outputs."""
    import extsrc
    from extsrc.ops_runtime.seeding import counter_rng, name_salt

    outs = []
    with extsrc.Loader(manifest, batch_size=batch_size, ops=[op], device="cpu", shuffle=False,
                       seed=seed, op_runtime=extsrc.OpRuntime(op_path="native"),
                       workers=extsrc.Workers(num_workers=workers)) as loader:
        assert loader.op_paths == {op.name: "native"}
        for batch in loader:
            for k, index in enumerate(batch["index"].tolist()):
                img = pattern_image(index, *size)
                rng = counter_rng(seed, 0, index, name_salt(op.name)) if op.random else None
                (ref,) = op.apply(img, rng)
                got = batch[f"{op.name}_0"][k].numpy()
                np.testing.assert_array_equal(got, ref, err_msg=str(index))
                outs.append(got)
    return outs


# -- noise: constants on both paths ----------------------------------------------------------------
#: What the arrays of noise of a traced op are filled with by :func:`noise_filled`: a standard
#: normal's value and a draw in [0, 1), low then high (salt and pepper).
NOISE_FILLS = [{"normal": -2.0, "uniform": 0.02}, {"normal": 1.5, "uniform": 0.99}]


class noise_filled:
    """While it is entered, every array of noise is the constant ``fills[kind]`` in the traced
    graph (DALI's generator, ``_Emitter._noise``); :meth:`apply` replays an op on numpy with
    its noise filled alike (``counter_rng(..., noise=ctx.noise)``, and ``cv2.randn``: the
    mean plus the standard deviation times ``fills["normal"]``, as OpenCV reads and refuses
    them), so that a test checks exactly everything an op computes around its noise. Trace
    the op before: the stand-ins are not traced."""

    def __init__(self, fills: dict[str, float] | None) -> None:
        self.fills = fills

    def noise(self, kind: str, shape: tuple[int, ...], u: float) -> np.ndarray:
        return np.full(shape, self.fills[kind])  # type: ignore[index]

    def apply(self, op, img: np.ndarray, rng) -> tuple[np.ndarray, ...]:
        """``op.apply(img, rng)`` with ``cv2.randn`` filling its noise as the graph's is
        filled, and ``np.random.default_rng(rng)`` handing the replay's ``DrawRng`` back, as
        numpy hands back a Generator given to it (skimage's ``random_noise(image, rng=rng)``)."""
        import cv2

        from augment_ops.trace import DrawRng

        real_randn, real_default = cv2.randn, np.random.default_rng
        fill = None if self.fills is None else self.fills["normal"]

        def zero(v):
            return tuple(0.0 for _ in v) if isinstance(v, tuple) else (
                np.zeros_like(v) if isinstance(v, np.ndarray) else 0.0)

        def randn(dst, mean, stddev):
            real_randn(np.zeros_like(dst), mean, stddev)  # OpenCV's refusals of the pair
            m, s = np.zeros_like(dst), np.zeros_like(dst)
            real_randn(m, mean, zero(mean))  # each as OpenCV reads it, per channel
            real_randn(s, stddev, zero(stddev))
            dst[...] = m + s * fill
            return dst

        def default_rng(seed=None, *args, **kwargs):
            return seed if isinstance(seed, DrawRng) else real_default(seed, *args, **kwargs)

        if fill is not None:
            cv2.randn = randn
        np.random.default_rng = default_rng
        try:
            return op.apply(img, rng)
        finally:
            cv2.randn, np.random.default_rng = real_randn, real_default

    def __enter__(self) -> noise_filled:
        from augment_ops.trace.dali_ops import _constant
        from augment_ops.trace.emitter import _Emitter

        self._saved = _Emitter._noise
        real_noise, fills = self._saved, self.fills
        if fills is not None:
            def constant(emitter, n):
                draws = real_noise(emitter, n)  # DALI's draws, for their shape and device
                # float64 constants as the emitter makes them (DALI keeps literals as float32)
                f64 = np.dtype(np.float64)
                return draws * _constant(0.0, f64) + _constant(fills[n.attrs[0]], f64)

            _Emitter._noise = constant
        return self

    def __exit__(self, *exc) -> None:
        from augment_ops.trace.emitter import _Emitter

        _Emitter._noise = self._saved
