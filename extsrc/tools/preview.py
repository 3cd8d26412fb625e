"""Look at a batch instead of reading tensors: every image output of a few samples, in a grid.

:func:`render_batch` draws one row per sample and one column per image output (``image``, then each
op's outputs, in order), with the manifest index and label of each sample. :func:`preview` builds a
loader over a manifest, takes its first batch and renders it. Both return a matplotlib
:class:`~matplotlib.figure.Figure` (shown inline in a notebook) and write a PNG when given ``path``.

>>> from extsrc.tools.preview import preview
>>> preview("manifest.csv", ops=["grid2x2"], path="preview.png")   # doctest: +SKIP
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from extsrc._util.extras import require
from extsrc.graph.batchformat import check_mean_std
from extsrc.loading.presets import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["image_outputs", "preview", "render_batch", "to_display"]

_NOT_IMAGES = frozenset({"label", "index", "is_pad"})


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, possibly on a GPU
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def image_outputs(batch: Mapping[str, Any], label_key: str = "label") -> list[str]:
    """Names of the image outputs of ``batch``, in order: arrays of rank 3 (``B,H,W``) or 4."""
    return [
        k for k, v in batch.items()
        if k not in _NOT_IMAGES and k != label_key and getattr(v, "ndim", 0) in (3, 4)
    ]


def to_display(
    img: Any,
    *,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> np.ndarray:
    """One image as HWC (or HW) ``uint8`` for display.

    Accepts HWC or CHW (1, 3 or 4 channels), ``uint8`` as is, floating point as normalised with
    ``mean`` / ``std`` in pixel units (what the presets produce), which is undone.
    """
    mean, std = check_mean_std(mean, std, "to_display:")
    a = _numpy(img)
    if a.ndim == 3 and a.shape[0] in (1, 3, 4) and a.shape[-1] not in (1, 3, 4):
        a = np.moveaxis(a, 0, -1)  # CHW -> HWC
    if a.dtype.kind == "f":
        c = a.shape[-1] if a.ndim == 3 else 1
        m = np.asarray(mean, np.float32)[:c] if c in (1, 3) else np.float32(0)
        s = np.asarray(std, np.float32)[:c] if c in (1, 3) else np.float32(1)
        if a.ndim == 2:
            m, s = m[0], s[0]
        a = a.astype(np.float32) * s + m
        a = np.clip(np.rint(a), 0, 255)
    elif a.dtype != np.uint8:
        a = np.clip(a, 0, 255)
    a = a.astype(np.uint8)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    return a


def _label_text(label: Any, classes: Sequence[str] | None) -> str:
    lab = np.asarray(label)
    if lab.ndim == 0:
        v = int(lab)
        if classes is not None and 0 <= v < len(classes):
            return f"{classes[v]} ({v})"
        return str(v)
    return str(lab.tolist())


def _figure_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)
    return buf.getvalue()


def _enable_notebook_display() -> None:
    """Show our figures inline in Jupyter even when pyplot (and its inline backend) is not loaded.

    Figures are made without pyplot (no global state, nothing to close); IPython only knows how to
    draw a Figure once the inline backend registered a PNG formatter for it, so register one.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    from matplotlib.figure import Figure

    png = shell.display_formatter.formatters.get("image/png")
    if png is None:
        return
    try:
        png.lookup_by_type(Figure)
    except KeyError:
        png.for_type(Figure, _figure_png)


def render_batch(
    batch: Mapping[str, Any],
    *,
    max_samples: int = 8,
    path: str | os.PathLike[str] | None = None,
    classes: Sequence[str] | None = None,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    label_key: str = "label",
    tile_size: float = 1.6,
    dpi: int = 100,
) -> Any:
    """Draw a batch from :class:`extsrc.Loader` as a grid and return the matplotlib Figure.

    Rows are samples (at most ``max_samples``), labelled with the manifest index (``#12``), the
    label (with its class name when ``classes`` is given) and ``pad`` for pad repeats. Columns are
    the image outputs in order (``image``, then each op's outputs). Images may be HWC ``uint8`` or
    CHW floating point normalised with ``mean`` / ``std`` (undone for display); CUDA tensors are
    copied to the host. ``path``: also save the figure there (PNG).

    Needs matplotlib (``pip install 'extsrc[preview]'``); without it raises
    :class:`~extsrc._util.extras.MissingExtraError`.
    """
    require("matplotlib", "preview", "extsrc.render_batch")
    from matplotlib.figure import Figure

    mean, std = check_mean_std(mean, std, "render_batch:")

    names = image_outputs(batch, label_key)
    if not names:
        raise ValueError(
            f"the batch has no image outputs (arrays of rank 3 or 4); its keys are {list(batch)}"
        )
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}")
    n = min(int(_numpy(batch[names[0]]).shape[0]), max_samples)
    if n == 0:
        raise ValueError("the batch is empty")
    labels = _numpy(batch[label_key]) if label_key in batch else None
    index = _numpy(batch["index"]) if "index" in batch else None
    is_pad = _numpy(batch["is_pad"]) if "is_pad" in batch else None
    arrays = {k: _numpy(batch[k])[:n] for k in names}

    first = to_display(arrays[names[0]][0], mean=mean, std=std)
    aspect = min(max(first.shape[0] / first.shape[1], 0.25), 4.0)  # tile height / width
    fig = Figure(figsize=(tile_size * len(names) + 0.6, tile_size * aspect * n + 0.4), dpi=dpi,
                 layout="constrained")
    axes = fig.subplots(n, len(names), squeeze=False)
    for r in range(n):
        parts = []
        if index is not None:
            parts.append(f"#{int(index[r])}")
        if labels is not None:
            parts.append(_label_text(labels[r], classes))
        if is_pad is not None and bool(is_pad[r]):
            parts.append("pad")
        for c, k in enumerate(names):
            ax = axes[r, c]
            img = to_display(arrays[k][r], mean=mean, std=std)
            ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=255,
                      interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(k, fontsize=9)
            if c == 0 and parts:
                ax.set_ylabel("\n".join(parts), fontsize=8)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    _enable_notebook_display()
    return fig


def preview(
    source: Any,
    *,
    ops: Sequence[Any] = (),
    n: int = 8,
    path: str | os.PathLike[str] | None = None,
    resize: int | tuple[int, int] | None = 128,
    seed: int = 0,
    device: Any = "cpu",
    classes: Sequence[str] | None = None,
    **loader_kwargs: Any,
) -> Any:
    """Render the first batch of a loader, or of a new loader over a manifest; return the Figure.

    ``source`` is an :class:`extsrc.Loader` (its next batch is drawn; ``ops``, ``resize`` and the
    other loader arguments are then ignored) or a manifest (path or :class:`extsrc.Manifest`), for
    which a loader with ``batch_size=n``, ``ops``, ``resize``, ``seed`` and ``device`` is built
    (``shuffle=False`` unless given, so the first ``n`` lines are shown). ``path``: also save the
    figure as a PNG there.
    """
    from extsrc.loading.loader import Loader
    from extsrc.loading.options import Workers

    require("matplotlib", "preview", "extsrc.tools.preview")  # before building a loader

    if isinstance(source, Loader):
        loader, owned = source, False
    else:
        loader_kwargs.setdefault("shuffle", False)
        if "workers" not in loader_kwargs and "num_workers" not in loader_kwargs:
            loader_kwargs["workers"] = Workers(num_workers=0)
        loader = Loader(source, batch_size=n, ops=ops, resize=resize, seed=seed, device=device,
                        **loader_kwargs)
        owned = True
    try:
        batch = next(iter(loader))
    except StopIteration:
        raise ValueError("the loader yielded no batch") from None
    finally:
        if owned:
            loader.close()
    if classes is None:
        classes = loader.manifest.classes
    return render_batch(batch, max_samples=n, path=path, classes=classes)
