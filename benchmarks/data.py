"""Synthetic benchmark dataset: ImageNet-sized JPEGs (about 500x375, ~90 KB) and a manifest.

Images are smooth random patterns plus noise, so they compress like photographs rather than like
flat colour (which would make decoding unrealistically cheap) or pure noise (unrealistically big).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

H, W = 375, 500


def across_epochs(loader: Iterable[Any], it: Iterator[Any] | None = None) -> Iterator[Any]:
    """The batches of ``it`` (an epoch already under way, if given), then of ``loader`` one
    epoch after another without end: a timed loop of N batches need not fit in one epoch."""
    if it is not None:
        yield from it
    while True:
        yield from loader


def time_epochs(loader: Any, epochs: int, sync: Callable[[], Any] | None = None,
                ) -> dict[str, float]:
    """Run ``epochs`` epochs of ``loader`` (closed after): ``first_batch``, seconds to
    ``iter`` and the first batch (the pipeline build included), then ``images`` delivered after
    it and the ``seconds`` they took (``sync``, e.g. ``torch.cuda.synchronize``, before the
    clock stops)."""
    t1 = time.perf_counter()
    # A torch DataLoader (litdata's StreamingDataLoader) has no close: nothing to enter.
    with loader if hasattr(loader, "__enter__") else contextlib.nullcontext():
        it = iter(loader)
        next(it)
        t2 = time.perf_counter()
        images = sum(len(b["label"]) for b in it)
        for _ in range(epochs - 1):
            images += sum(len(b["label"]) for b in loader)
        if sync is not None:
            sync()
        t3 = time.perf_counter()
    return {"first_batch": t2 - t1, "images": images, "seconds": t3 - t2}


def _bases(count: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    out = []
    for _ in range(count):
        f = rng.uniform(4, 40, size=6)
        p = rng.uniform(0, 6.3, size=3)
        b = np.stack([
            np.sin(xx / f[0] + p[0]) * np.cos(yy / f[1]),
            np.sin((xx + yy) / f[2] + p[1]),
            np.cos(xx / f[3] + p[2]) * np.sin(yy / f[4]) + 0.3 * np.sin(yy / f[5]),
        ], axis=2)
        out.append(b * 80 + 128)
    return np.stack(out).astype(np.float32)


def _write_chunk(args: tuple[str, list[int], int]) -> list[int]:
    from PIL import Image

    root, indices, seed = args
    bases = _bases(seed=seed)
    sizes = []
    for i in indices:
        rng = np.random.default_rng([seed, i])
        base = np.roll(bases[i % len(bases)], int(rng.integers(0, W)), axis=1)
        noise = rng.standard_normal(size=base.shape, dtype=np.float32) * 12
        img = np.clip(base + noise, 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=90)
        Path(root, "images", f"{i:06d}.jpg").write_bytes(buf.getvalue())
        sizes.append(buf.tell())
    return sizes


def make_dataset(root: str | os.PathLike[str], n: int, *, num_classes: int = 1000,
                 seed: int = 0, jobs: int | None = None) -> tuple[Path, float]:
    """Write ``n`` JPEGs and ``manifest.csv`` (reused when already complete); return the manifest
    path and the mean file size in bytes."""
    root = Path(root)
    manifest = root / "manifest.csv"
    (root / "images").mkdir(parents=True, exist_ok=True)
    if manifest.exists() and len(manifest.read_text().splitlines()) == n + 1:
        sizes = [p.stat().st_size for p in (root / "images").glob("*.jpg")]
        return manifest, float(np.mean(sizes))
    jobs = jobs or os.cpu_count() or 1
    chunks = [(str(root), list(range(k, n, jobs)), seed) for k in range(jobs)]
    with ProcessPoolExecutor(jobs) as ex:
        sizes = [s for part in ex.map(_write_chunk, chunks) for s in part]
    labels = np.random.default_rng(seed).integers(0, num_classes, size=n)
    lines = ["path,label"] + [f"images/{i:06d}.jpg,{labels[i]}" for i in range(n)]
    manifest.write_text("\n".join(lines) + "\n")
    return manifest, float(np.mean(sizes))
