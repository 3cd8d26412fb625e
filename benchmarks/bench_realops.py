"""Every lowered op of the corpus of real users' augmentations (``tests/realops``; ``--sets``
adds the held-out and blind sets) on its native path, against a resize-only loader and a
hand-written DALI pipeline of the same op.

The job: JPEG -> RGB -> the op -> every image output resized to ``--resize`` (stretched), with
labels, over generated 500x375 JPEGs (``benchmarks/data.py``). A one-output op runs as a
transform (it replaces the image), an op of several outputs as an op (its outputs beside the
image). For each op the tracer lowers (the refused ones are listed with their reasons):

- ``native``: ``extsrc.Loader(..., op_runtime=OpRuntime(op_path="native"))``, the traced graph;
- ``handwritten``: raw DALI (parallel raw-byte external source -> decode -> the op written with
  DALI's own operators, ``fn.erase``, ``fn.flip``, ``fn.transpose``, ``fn.noise``, slicing,
  arithmetic ... ->
  resize), for the ops :func:`hand_written` has: the same op in distribution, not draw for draw;
- ``numpy`` and ``auto`` (``--numpy-ops``; by default on CPU-only machines, for a few ops that
  compute new pixel values): the numpy path with its op pool, and the loader's automatic choice,
  with ``loader.op_paths`` and the reason for it (:func:`path_reasons`) recorded.

Besides: ``resize``, the Loader with no op, and ``dali_resize``, raw DALI with no op (what the
hand-written pipelines add their op to). Each op's rows give ``native/handwritten`` (the goal:
>= 0.9), ``native/resize``, and ``relative_native/handwritten``: native/resize over
handwritten/dali_resize, the op's own cost apart from the loader's.

    python benchmarks/bench_realops.py --repeats 3 --out results/realops_gpu.json     # GPU
    python benchmarks/bench_realops.py --device cpu --n 64 --batch-size 16 --out cpu.json

Each measurement builds the pipeline (``build_s``; the Loader builds its pipeline when first
iterated), takes its first batch (``to_first_batch_s``, from the start of the build), skips
``--warmup`` batches, then times batches across epochs until ``--min-seconds`` have
passed. ``--repeats N`` interleaves N rounds of every variant and reports medians, with every
repeat and each ratio taken within every round (``paired``). Compare variants inside one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))  # the corpus package ``realops``
sys.path.insert(0, str(ROOT))

from runs import Epochs, add_options, cpu_split, header, interleave  # noqa: E402

#: Ops compared with the numpy path by default on a machine without a GPU: they compute new
#: pixel values, where the automatic choice on the CPU prefers the numpy path.
NUMPY_OPS = ("readme_jitter", "d2_random_brightness", "d2_random_contrast", "mmcv_solarize",
             "alb_to_gray_average")
#: Corpus ops that :func:`hand_written` writes with DALI's own operators.
HAND_WRITTEN = ("d2_random_flip", "ffcv_random_hflip", "mmcv_imflip", "alb_transpose",
                "alb_random_rotate90", "mmcv_iminvert", "mmcv_solarize", "alb_to_gray_average",
                "alb_to_gray_max", "d2_random_brightness", "d2_random_contrast",
                "d2_random_saturation", "readme_jitter", "ffcv_cutout", "readme_halves",
                "readme_grid2x2", "tp_gaussian_noise", "tp_salt_pepper_noise")


#: Gamma ops of the held-out and blind sets and the range of their exponent.
_GAMMAS = {"alb_random_gamma": (0.8, 1.2), "iaa_gamma_contrast": (0.7, 1.7),
           "tp_gamma": (1 / 1.5, 1 / 0.5)}
#: albumentations' ToSepia matrix.
_SEPIA = ((0.393, 0.769, 0.189), (0.349, 0.686, 0.168), (0.272, 0.534, 0.131))
#: Ops of the held-out and blind sets that :func:`hand_written` writes too.
HAND_WRITTEN_MORE = (*_GAMMAS, "iaa_sigmoid_contrast", "tv_random_autocontrast",
                     "sk_rescale_intensity", "monai_scale_intensity", "mmcv_imtranslate",
                     "alb_to_sepia", "ppcls_normalize_image", "timm_ra_contrast",
                     "timm_ra_equalize", "keras_standardize", "tp_mean_variance_normalize",
                     "mmpre_random_crop")


# -- the hand-written DALI pipelines ---------------------------------------------------------------
def _u8(x: Any) -> Any:
    from nvidia.dali import fn, types

    return fn.cast(x, dtype=types.UINT8)


def _blend_u8(img: Any, src: Any, w: Any) -> Any:
    """``clip((1 - w) * src + w * img, 0, 255)`` as uint8 (fvcore's ``BlendTransform``)."""
    from nvidia.dali import fn, math, types

    out = (1.0 - w) * src + w * fn.cast(img, dtype=types.FLOAT)
    return _u8(math.clamp(out, 0.0, 255.0))


def hand_written(name: str, img: Any) -> list[Any] | None:
    """The corpus op ``name`` as someone fluent in DALI writes it, as a list of its outputs, or
    ``None`` where there is none here. The same results as the numpy function in distribution
    (rounding aside), not draw for draw."""
    from nvidia.dali import fn, types

    def coin() -> Any:
        return fn.random.coin_flip(probability=0.5)

    if name in ("d2_random_flip", "ffcv_random_hflip"):
        return [fn.flip(img, horizontal=coin())]
    if name == "mmcv_imflip":  # direction="diagonal"
        return [fn.flip(img, horizontal=1, vertical=1)]
    if name == "alb_transpose":
        return [fn.transpose(img, perm=[1, 0, 2], output_layout="HWC")]
    if name == "alb_random_rotate90":
        k = fn.random.uniform(values=[0.0, 90.0, 180.0, 270.0])
        return [fn.rotate(img, angle=k, keep_size=False, interp_type=types.INTERP_NN)]
    if name == "mmcv_iminvert":
        return [types.Constant(255, dtype=types.UINT8) - img]
    if name == "mmcv_solarize":  # thr=128
        low = fn.cast(img < types.Constant(128, dtype=types.UINT8), dtype=types.UINT8)
        inv = types.Constant(255, dtype=types.UINT8) - img
        return [img * low + inv * (types.Constant(1, dtype=types.UINT8) - low)]
    if name == "alb_to_gray_average":
        return [_u8(fn.reductions.mean(img, axes=2, keep_dims=True))]
    if name == "alb_to_gray_max":
        return [fn.reductions.max(img, axes=2, keep_dims=True)]
    if name == "d2_random_brightness":
        return [_blend_u8(img, 0.0, fn.random.uniform(range=[0.8, 1.2]))]
    if name == "d2_random_contrast":
        mean = fn.reductions.mean(fn.cast(img, dtype=types.FLOAT))
        return [_blend_u8(img, mean, fn.random.uniform(range=[0.8, 1.2]))]
    if name == "d2_random_saturation":
        grey = fn.cast(fn.color_space_conversion(img, image_type=types.RGB,
                                                 output_type=types.GRAY), dtype=types.FLOAT)
        return [_blend_u8(img, grey, fn.random.uniform(range=[0.8, 1.2]))]
    if name == "readme_jitter":  # amount=20
        from nvidia.dali import math

        shift = fn.cast(fn.random.uniform(range=[-20, 21], dtype=types.INT32), dtype=types.INT16)
        return [_u8(math.clamp(fn.cast(img, dtype=types.INT16) + shift, 0, 255))]
    if name == "ffcv_cutout":  # crop_size=4
        size = fn.cast(img.shape()[0:2], dtype=types.FLOAT) - 4.0
        anchor = fn.cast(fn.random.uniform(range=[0.0, 1.0], shape=[2]) * size, dtype=types.INT32)
        return [fn.erase(img, anchor=fn.cast(anchor, dtype=types.FLOAT), shape=[4.0, 4.0],
                         axis_names="HW", fill_value=0)]
    if name == "tp_gaussian_noise":  # sigma=1, clipped
        return [fn.noise.gaussian(img, stddev=1.0)]
    if name == "tp_salt_pepper_noise":  # white_prob = black_prob = 0.05
        return [fn.noise.salt_and_pepper(img, prob=0.1, salt_vs_pepper=0.5)]
    if name in _GAMMAS:  # 255 * (v / 255) ** gamma, a per-sample gamma
        from nvidia.dali import math

        gamma = fn.random.uniform(range=list(_GAMMAS[name]))
        v = math.pow(fn.cast(img, dtype=types.FLOAT) / 255.0, gamma) * 255.0
        return [_u8(math.clamp(v, 0.0, 255.0))]
    if name == "iaa_sigmoid_contrast":  # gain 5..6, cutoff 0.3..0.6
        from nvidia.dali import math

        gain = fn.random.uniform(range=[5.0, 6.0])
        cutoff = fn.random.uniform(range=[0.3, 0.6])
        v = 255.0 / (1.0 + math.exp(gain * (cutoff - fn.cast(img, dtype=types.FLOAT) / 255.0)))
        return [_u8(math.clamp(v, 0.0, 255.0))]
    if name in ("tv_random_autocontrast", "sk_rescale_intensity"):
        # per channel (PIL) or over the image (skimage): (v - lo) * 255 / (hi - lo)
        from nvidia.dali import math

        axes = [0, 1] if name == "tv_random_autocontrast" else [0, 1, 2]
        x = fn.cast(img, dtype=types.FLOAT)
        lo = fn.reductions.min(x, axes=axes, keep_dims=True)
        hi = fn.reductions.max(x, axes=axes, keep_dims=True)
        v = (x - lo) * 255.0 / math.max(hi - lo, 1.0)
        if name == "tv_random_autocontrast":
            w = fn.cast(coin(), dtype=types.FLOAT)
            v = w * v + (1.0 - w) * x
        return [_u8(math.clamp(v, 0.0, 255.0))]
    if name == "monai_scale_intensity":  # float32, to 0..1
        from nvidia.dali import math

        x = fn.cast(img, dtype=types.FLOAT)
        lo, hi = fn.reductions.min(x), fn.reductions.max(x)
        return [(x - lo) / math.max(hi - lo, 1.0)]
    if name == "mmcv_imtranslate":  # 3 pixels to the right, zeros in
        return [fn.slice(img, fn.constant(idata=[0, -3], dtype=types.INT64), img.shape()[0:2],
                         axes=[0, 1], out_of_bounds_policy="pad", fill_values=0)]
    if name == "alb_to_sepia":
        from nvidia.dali import math

        x = fn.cast(img, dtype=types.FLOAT)
        r, g, b = x[:, :, 0], x[:, :, 1], x[:, :, 2]
        rows = [w0 * r + w1 * g + w2 * b for w0, w1, w2 in _SEPIA]
        return [_u8(math.clamp(fn.stack(*rows, axis=2), 0.0, 255.0))]
    if name == "ppcls_normalize_image":  # ImageNet mean and std, float32
        return [fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="HWC",
                                         mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                         std=[0.229 * 255, 0.224 * 255, 0.225 * 255])]
    if name == "timm_ra_contrast":  # p=0.5, factor about 1 +- 0.81: blend with the grey mean
        from nvidia.dali import math

        x = fn.cast(img, dtype=types.FLOAT)
        grey = fn.color_space_conversion(img, image_type=types.RGB, output_type=types.GRAY)
        mean = fn.reductions.mean(fn.cast(grey, dtype=types.FLOAT))
        factor = fn.random.uniform(range=[0.19, 1.81])
        v = math.clamp(mean + factor * (x - mean), 0.0, 255.0)
        w = fn.cast(coin(), dtype=types.FLOAT)
        return [_u8(w * v + (1.0 - w) * x)]
    if name == "timm_ra_equalize":  # p=0.5; DALI's equalize (OpenCV's table, not PIL's)
        eq = fn.cast(fn.equalize(img), dtype=types.FLOAT)
        w = fn.cast(coin(), dtype=types.FLOAT)
        return [_u8(w * eq + (1.0 - w) * fn.cast(img, dtype=types.FLOAT))]
    if name in ("keras_standardize", "tp_mean_variance_normalize"):
        from nvidia.dali import math

        x = fn.cast(img, dtype=types.FLOAT)
        if name == "keras_standardize":
            x = x * (1.0 / 255)
        mean = fn.reductions.mean(x)
        std = fn.reductions.std_dev(x, mean)
        if name == "keras_standardize":
            return [(x - mean) / (std + 1e-6)]
        floor = 1.0 / math.sqrt(img.shape()[0] * img.shape()[1] * img.shape()[2])
        return [(x - mean) / math.max(std, fn.cast(floor, dtype=types.FLOAT))]
    if name == "mmpre_random_crop":  # pad 2 with zeros, then a random 6x6 crop
        hw = fn.cast(img.shape()[0:2], dtype=types.FLOAT)
        anchor = fn.random.uniform(range=[0.0, 1.0], shape=[2]) * (hw + 4.0 - 6.0 + 1.0) - 2.0
        from nvidia.dali import math

        return [fn.slice(img, fn.cast(math.floor(anchor), dtype=types.INT64),
                         fn.constant(idata=[6, 6], dtype=types.INT64), axes=[0, 1],
                         out_of_bounds_policy="pad", fill_values=0)]
    if name == "readme_halves":
        w = img.shape()[1] // 2
        return [img[:, :w], img[:, w:]]
    if name == "readme_grid2x2":
        h, w = img.shape()[0], img.shape()[1]
        hh, hw = h // 2, w // 2
        return [img[:hh, :hw], img[:hh, hw:], img[hh:, :hw], img[hh:, hw:]]
    return None


def dali_epochs(manifest: str, *, name: str | None, num_outputs: int, batch_size: int,
                resize: int, threads: int, workers: int, gpu: bool) -> Any:
    """Raw DALI: parallel external source of raw bytes -> decode -> the op by hand (``name``;
    ``None``: no op) -> resize, one-output ops in place of the image, others beside it."""
    from baselines import raw_dali_iterator

    from extsrc.loading.loader import DEFAULT_HW_DECODER_LOAD

    def outputs(img):
        if name is None:
            return [img]
        outs = hand_written(name, img)
        return outs if num_outputs == 1 else [img, *outs]

    return Epochs(raw_dali_iterator(manifest, batch_size=batch_size, resize=resize,
                                    num_threads=threads, device_id=0 if gpu else None,
                                    num_workers=max(1, workers),
                                    hw_decoder_load=DEFAULT_HW_DECODER_LOAD, images=outputs))


def with_channel_axis(op: Any) -> Any:
    """``op``, or where it returns greyscale images (``ndim=2``), the op as a user adapts it to
    the loader's resize (which takes HWC images, and says so): ``out[..., None]``, ``ndim=3``."""
    import dataclasses

    if op.ndim == 3:
        return op
    if op.random:
        def fn(img: np.ndarray, rng: np.random.Generator, _f: Any = op.fn) -> np.ndarray:
            return _f(img, rng)[..., None]
    else:
        def fn(img: np.ndarray, _f: Any = op.fn) -> np.ndarray:
            return _f(img)[..., None]
    return dataclasses.replace(op, name=op.name + "_hwc", fn=fn, ndim=3)


def loader_epochs(manifest: str, *, op: Any, op_path: str | None, batch_size: int, resize: int,
                  threads: int | None, workers: int | None, device: str) -> Any:
    """``extsrc.Loader`` with the corpus op ``op`` (``None``: no op) on ``op_path`` (``None``:
    the automatic choice)."""
    import extsrc

    transforms, ops = (), ()
    if op is not None:
        op = with_channel_axis(op)
        transforms, ops = ((op,), ()) if op.num_outputs == 1 else ((), (op,))
    loader = extsrc.Loader(
        manifest, batch_size=batch_size, transforms=transforms, ops=ops, resize=resize,
        device=device, workers=extsrc.Workers(num_workers=workers, num_threads=threads),
        op_runtime=extsrc.OpRuntime(op_path=op_path),
        sampling=extsrc.Sampling(last_batch="partial"),
        format=extsrc.BatchFormat(resize_mode="stretch"))  # as the raw DALI pipelines resize
    return Epochs(loader, op_paths=loader.op_paths,
                  dali={"threads": loader.plan.threads, "readers": loader.plan.workers})


# -- summarising -----------------------------------------------------------------------------------
def median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def path_reasons(op: Any, gpu: bool) -> dict[str, str]:
    """The automatic choice of the op's path on this device and why, as the loader makes it
    (:func:`extsrc.ops_runtime.paths.choose_paths`), and ``augment_ops.explain``'s words."""
    import augment_ops
    from extsrc.ops_runtime.paths import choose_paths, explain_choice

    op = with_channel_axis(op)
    chosen = choose_paths([op], gpu=gpu)[op.name]
    return {"chosen": chosen, "why": explain_choice(op, gpu=gpu),
            "explain": augment_ops.explain(op)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(ap, n=2048, ops="comma-separated corpus op names (default: all)", repeats=3)
    ap.add_argument("--numpy-ops", default=None,
                    help="ops also run on the numpy path and the automatic choice (default: "
                         f"{','.join(NUMPY_OPS)} on a machine without a GPU, none on a GPU)")
    ap.add_argument("--stage-min", type=int, default=None,
                    help="compute an op's per-sample scalars by numpy in one operator from this "
                         "many DALI operators on (augment_ops.trace.scalar_stage; default: its "
                         "STAGE_MIN_OPERATORS and STAGE_MIN_OPERATORS_GPU; a huge number keeps "
                         "them all in DALI)")
    ap.add_argument("--sets", default="corpus",
                    help="comma-separated sets the ops come from: corpus (tests/realops), "
                         "holdout, blind")
    args = ap.parse_args(argv)

    # Spawned workers (DALI's readers on a GPU, the op pool) import the corpus by name.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    import torch
    from data import make_dataset
    from realops import corpus
    from realops_blind import blind
    from realops_holdout import holdout

    from augment_ops.trace import TraceError, scalar_stage, trace_op

    if args.stage_min is not None:
        scalar_stage.STAGE_MIN_OPERATORS = args.stage_min
        scalar_stage.STAGE_MIN_OPERATORS_GPU = args.stage_min

    gpu = args.device != "cpu" and torch.cuda.is_available()
    device = "cuda:0" if gpu else "cpu"
    cores = len(os.sched_getaffinity(0))
    workers, threads = cpu_split(args.workers, args.threads, cores)
    sets = {"corpus": corpus, "holdout": holdout, "blind": blind}
    entries = [e for name in args.sets.split(",") for e in sets[name]()]
    if args.ops is not None:
        wanted = set(args.ops.split(","))
        unknown = wanted - {e.name for e in entries}
        if unknown:
            ap.error(f"--ops: not in the sets {args.sets}: {sorted(unknown)}")
        entries = [e for e in entries if e.name in wanted]
    lowered, refused = [], {}
    for e in entries:
        try:
            trace_op(e.op)
        except TraceError as err:
            refused[e.name] = str(err).replace(str(ROOT) + "/", "")
        else:
            lowered.append(e)
    numpy_ops = set(NUMPY_OPS if args.numpy_ops is None and not gpu else
                    (args.numpy_ops or "").split(",")) & {e.name for e in lowered}
    print(f"[realops] {len(lowered)} lowered, {len(refused)} refused (skipped): "
          f"{', '.join(refused)}", flush=True)

    t0 = time.perf_counter()
    manifest, mean_bytes = make_dataset(args.data, args.n)
    manifest = str(manifest)
    gen_s = time.perf_counter() - t0
    common = {"batch_size": args.batch_size, "resize": args.resize}
    dali_kw = {**common, "threads": threads, "workers": workers, "gpu": gpu}
    ext_kw = {**common, "threads": args.threads, "workers": args.workers, "device": device}

    variants: dict[str, Any] = {
        "resize": lambda: loader_epochs(manifest, op=None, op_path=None, **ext_kw),
        "dali_resize": lambda: dali_epochs(manifest, name=None, num_outputs=1, **dali_kw),
    }
    handwritten = []
    for e in lowered:
        variants[f"{e.name}:native"] = (
            lambda op=e.op: loader_epochs(manifest, op=op, op_path="native", **ext_kw))
        if e.name in HAND_WRITTEN or e.name in HAND_WRITTEN_MORE:
            handwritten.append(e.name)
            variants[f"{e.name}:handwritten"] = (
                lambda e=e: dali_epochs(manifest, name=e.name, num_outputs=e.op.num_outputs,
                                        **dali_kw))
        if e.name in numpy_ops:
            variants[f"{e.name}:numpy"] = (
                lambda op=e.op: loader_epochs(manifest, op=op, op_path="numpy", **ext_kw))
            variants[f"{e.name}:auto"] = (
                lambda op=e.op: loader_epochs(manifest, op=op, op_path=None, **ext_kw))

    results: dict[str, Any] = {
        **header(argv, gpu=gpu, cores=cores, n=args.n, mean_bytes=mean_bytes, generate_s=gen_s),
        "settings": {**common, "dali_threads": threads, "reader_workers": workers,
                     "warmup_batches": args.warmup, "min_seconds": args.min_seconds,
                     "repeats": args.repeats, "device": device,
                     "stage_min_operators": scalar_stage.STAGE_MIN_OPERATORS,
                     "stage_min_operators_gpu": scalar_stage.STAGE_MIN_OPERATORS_GPU},
        "lowered": [e.name for e in lowered],
        "refused": refused,
        "handwritten": handwritten,
        "paths": {e.name: path_reasons(e.op, gpu) for e in lowered},
    }
    names = [e.name for e in lowered]
    interleave(variants, repeats=args.repeats, warmup=args.warmup, min_seconds=args.min_seconds,
               gpu=gpu, after_round=lambda runs, rounds: summarise(results, runs, names,
                                                                   rounds=rounds, out=args.out))
    print_table(results)
    return 0


def summarise(results: dict[str, Any], runs: dict[str, list[dict[str, Any]]],
              names: list[str], *, rounds: int, out: str | None) -> None:
    """Medians per variant, and per op the ratios of its native path to the hand-written
    pipeline and to the resize-only loader (medians of the ratios taken within each round)."""
    results["rounds"] = rounds
    results["throughput"] = {
        k: {"median_images_per_s": median([r["images_per_s"] for r in v]),
            "median_to_first_batch_s": median([r.get("to_first_batch_s", 0.0) for r in v]),
            "median_build_s": median([r.get("build_s", 0.0) for r in v]), "repeats": v}
        for k, v in runs.items()}

    def paired(a: str, b: str) -> float | None:
        if a not in runs or b not in runs:
            return None
        ratios = [x["images_per_s"] / y["images_per_s"]
                  for x, y in zip(runs[a], runs[b], strict=False) if y["images_per_s"] > 0]
        return round(median(ratios), 3) if ratios else None

    table = []
    for name in names:
        row: dict[str, Any] = {"op": name}
        for v in ("native", "handwritten", "numpy", "auto"):
            got = results["throughput"].get(f"{name}:{v}")
            row[v] = got["median_images_per_s"] if got else None
        row["native/handwritten"] = paired(f"{name}:native", f"{name}:handwritten")
        row["native/resize"] = paired(f"{name}:native", "resize")
        row["handwritten/dali_resize"] = paired(f"{name}:handwritten", "dali_resize")
        row["numpy/native"] = paired(f"{name}:numpy", f"{name}:native")
        # The op's own share: each over the no-op pipeline of its kind (extsrc's loader adds
        # its source and checks to both sides of native/handwritten).
        nr, hr = row["native/resize"], row["handwritten/dali_resize"]
        row["relative_native/handwritten"] = round(nr / hr, 3) if nr and hr else None
        auto = results["throughput"].get(f"{name}:auto")
        if auto:
            row["auto_path"] = auto["repeats"][-1].get("op_paths")
        table.append(row)
    results["table"] = table
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(results, indent=1) + "\n")


def print_table(results: dict[str, Any]) -> None:
    tp = results["throughput"]
    print(f"\nresize-only loader {tp['resize']['median_images_per_s']:,.0f} images/s; raw DALI "
          f"resize {tp['dali_resize']['median_images_per_s']:,.0f}")
    print("| op | native | hand-written | numpy | auto | native/hand | native/resize |"
          " numpy/native | auto path |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")

    def cell(x: Any) -> str:
        return "-" if x is None else (f"{x:,.0f}" if isinstance(x, float) and x > 10 else str(x))

    for row in results["table"]:
        print(f"| {row['op']} | {cell(row['native'])} | {cell(row['handwritten'])} | "
              f"{cell(row['numpy'])} | {cell(row['auto'])} | {cell(row['native/handwritten'])} "
              f"| {cell(row['native/resize'])} | {cell(row['numpy/native'])} | "
              f"{row.get('auto_path', '-')} |")
    if results["refused"]:
        print(f"refused (not measured): {', '.join(results['refused'])}")


if __name__ == "__main__":
    sys.exit(main())
