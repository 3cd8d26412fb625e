"""The ``extsrc`` command: try the loader, check a manifest, look at and time a pipeline.

Run ``extsrc --help`` (or ``python -m extsrc.tools.cli --help``) for the commands. Every command
exits 0 on success, 1 when it found a problem (``validate`` found bad files, a pipeline failed) and
2 on bad input (a missing manifest, an unknown op, a bad option), printing a one-line reason to
stderr.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

PROG = "extsrc"
EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2

_DESCRIPTION = """\
extsrc feeds PyTorch from a labelled file list (a "manifest": CSV or text lines of
`path,label`) through NVIDIA DALI, running your own numpy augmentations ("ops").

New here? Start with:
  extsrc demo                      make a small dataset, run the loader, write a preview PNG
"""

_EPILOG = """\
examples:
  extsrc demo --out extsrc-demo
  extsrc validate data/train.csv
  extsrc preview data/train.csv --ops grid2x2 -o preview.png
  extsrc bench data/train.csv --ops grid2x2 hflip --batch-size 64
  extsrc preview data/train.csv --ops center_crop:size=96,rot90:k=2
  extsrc bench data/train.csv --preset train --crop 224
  extsrc ops --import my_ops.py

Run `extsrc COMMAND --help` for the options of a command.
exit status: 0 ok, 1 a problem was found (bad files, a failing pipeline), 2 bad input.
Set EXTSRC_DEBUG=1 to see the full traceback of an error.
"""


class CliError(Exception):
    """Bad input found by the CLI itself (exit 2)."""


_UNSET: Any = object()  # --resize not given: each command picks its default

#: --normalize choices and the Loader's normalize= for each (ImageNet constants in 0-255 units).
_NORMALIZE: dict[str, Any] = {
    "none": None,
    "scale": "scale",
    "imagenet": ((0.485 * 255, 0.456 * 255, 0.406 * 255), (0.229 * 255, 0.224 * 255,
                                                           0.225 * 255)),
}


# -- argument types ------------------------------------------------------------------------------
def _size(text: str) -> tuple[int, int] | None:
    """``128`` -> (128, 128); ``96x128`` -> (96, 128); ``0`` / ``none`` -> no resize."""
    t = text.strip().lower()
    if t in ("0", "none"):
        return None
    try:
        parts = [int(p) for p in t.split("x")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or min(parts) < 1:
        raise argparse.ArgumentTypeError(
            f"expected SIZE or HEIGHTxWIDTH (e.g. 128 or 96x128, 0 for none), got {text!r}"
        )
    return parts[0], parts[1]


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return v


def _device(text: str) -> Any:
    return None if text.strip().lower() == "auto" else text


# -- helpers -------------------------------------------------------------------------------------
def _quiet_dali() -> None:
    # DALI warns on every build when the graph leaves one of the source's outputs (encoded
    # bytes, labels, info) unused. Not actionable for a CLI user.
    warnings.filterwarnings("ignore", message=r"The external source node")
    # --skip-bad: the CLI prints its own one-line summary of what was skipped.
    warnings.filterwarnings("ignore", message=r"extsrc\.Loader\(on_error='skip'\)")


def _import_user_ops(specs: Sequence[str]) -> None:
    """Import modules (``pkg.mod``) or files (``my_ops.py``) that register ops."""
    for spec in specs:
        if spec.endswith(".py") or os.sep in spec or "/" in spec:
            path = Path(spec)
            if not path.is_file():
                raise FileNotFoundError(f"--import: no such file: {spec}")
            name = f"_extsrc_user_ops_{path.stem}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            if mod_spec is None or mod_spec.loader is None:
                raise CliError(f"--import: cannot import {spec}")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
            # The op pool's workers cannot import a module known only by this name: its ops
            # and their helpers travel to them by value.
            import cloudpickle

            cloudpickle.register_pickle_by_value(module)
        else:
            try:
                importlib.import_module(spec)
            except ModuleNotFoundError as e:
                raise CliError(f"--import: no module named {e.name!r}") from None


def _op_names(values: Sequence[str] | None) -> list[str]:
    """``--ops a b`` and ``--ops a,b`` both give ``[a, b]`` (each ``NAME[:KEY=VALUE...]``)."""
    return [n for v in values or () for n in v.split(",") if n.strip()]


def _param_value(text: str) -> Any:
    """An op parameter from the command line: ``true``/``false``, an int, a float, else the
    string itself (``none`` is ``None``)."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _suggest(name: str, known: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def _resolve_op(spec: str) -> Any:
    """``NAME`` or ``NAME:KEY=VALUE[:KEY=VALUE...]`` (e.g. ``center_crop:size=96``) to an op."""
    import augment_ops

    name, *pairs = [part.strip() for part in spec.strip().split(":")]
    if name not in augment_ops.available():
        raise CliError(
            f"--ops: no op named {name!r}; {_suggest(name, augment_ops.available())}"
            "`extsrc ops` lists the registered ops (--import adds your own)"
        )
    op = augment_ops.get(name)
    params: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise CliError(
                f"--ops {spec}: expected NAME:KEY=VALUE (e.g. center_crop:size=96), got {pair!r}"
            )
        params[key.strip()] = _param_value(value.strip())
    if not params:
        return op
    accepted = sorted(op_parameters(op))
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        hint = "".join(_suggest(k, accepted) for k in unknown)
        raise CliError(
            f"--ops {spec}: op {name!r} has no parameter {', '.join(map(repr, unknown))}; "
            f"{hint}its parameters: "
            f"{', '.join(accepted) if accepted else 'none'}"
        )
    return op.with_params(**params)


def _resolve_ops(names: Sequence[str]) -> list[Any]:
    return [_resolve_op(n) for n in names]


def op_parameters(op: Any) -> dict[str, Any]:
    """An op's parameters and their values: the function's defaults, with bound ones on top."""
    import inspect

    sig = inspect.signature(op.fn)
    params = {
        name: p.default for name, p in list(sig.parameters.items())[1:]
        if name != "rng" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    return {**params, **dict(op.params)}


#: Python-API advice in the library's messages, and what a CLI user does instead.
_CLI_WORDING: tuple[tuple[str, str], ...] = (
    ("run extsrc.validate(manifest) and train on report.clean_manifest(), or pass "
     "bad_files=extsrc.BadFiles(on_error='skip') to Loader",
     "run `extsrc validate MANIFEST` (--write-clean CSV writes the good samples), or pass "
     "--skip-bad"),
)


def _cli_words(text: str) -> str:
    for python, cli in _CLI_WORDING:
        text = text.replace(python, cli)
    return text


def _loader(args: argparse.Namespace, *, batch_size: int, shuffle: bool,
            resize: tuple[int, int] | None, last_batch: str = "partial") -> Any:
    """A Loader, or a preset loader with ``--preset``, from the common options."""
    from extsrc.graph.batchformat import BatchFormat
    from extsrc.loading.loader import Loader
    from extsrc.loading.options import BadFiles, Sampling, Workers

    ops = _resolve_ops(_op_names(args.ops))
    preset = getattr(args, "preset", None)
    if preset is None or preset == "none" or args.dtype is not None:
        # Normalised values need a float dtype: float32 unless --dtype says which.
        dtype = args.dtype or ("uint8" if args.normalize == "none" else "float32")
        fmt = BatchFormat(layout=args.layout, dtype=dtype, normalize=_NORMALIZE[args.normalize],
                          resize_mode=args.resize_mode)
    else:  # the presets' own format (NCHW float32, ImageNet-normalised) unless told
        fmt = BatchFormat(layout="NCHW", dtype="float32", normalize=_NORMALIZE["imagenet"],
                          resize_mode=args.resize_mode)
    common: dict[str, Any] = dict(
        batch_size=batch_size, ops=ops, seed=args.seed, device=args.device, shuffle=shuffle,
        workers=Workers(num_workers=args.workers), sampling=Sampling(last_batch=last_batch),
        format=fmt,
    )
    if args.skip_bad:
        common["bad_files"] = BadFiles(on_error="skip",
                                       validate_kwargs={"progress": sys.stderr.isatty()})
    if preset is None or preset == "none":
        return Loader(_manifest_arg(args), resize=resize, **common)
    from extsrc.loading import presets

    if resize is not None:
        common["resize"] = resize
    if preset == "train":
        return presets.train_loader(_manifest_arg(args), crop=args.crop, **common)
    size = args.size or round(args.crop * 256 / 224)
    return presets.val_loader(_manifest_arg(args), size=size, crop=args.crop, **common)


def _manifest_arg(args: argparse.Namespace) -> Any:
    """MANIFEST as given, or read with ``--root`` and ``--storage-option``: relative paths
    resolve against the root folder (or folder URL) and a path leading outside it (``..``, an
    absolute path elsewhere, a symlink pointing out) is refused, naming its line, before the
    file is opened; URLs are read with the storage options given."""
    root = getattr(args, "root", None)
    options = _storage_options(getattr(args, "storage_option", None) or [])
    if root is None and options is None:
        return args.manifest
    from extsrc._util.textsafe import shown
    from extsrc.sources.table import read_manifest
    from extsrc.sources.urls import is_url
    from extsrc.sources.where import refuse_url

    if root is not None:
        refuse_url(root, "--root", allow_storage=True)
        if not is_url(root) and not os.path.isdir(root):
            raise CliError(f"--root {shown(root)}: not a folder")
    return read_manifest(args.manifest, root=root, storage_options=options)


def _storage_options(pairs: list[str]) -> dict[str, Any] | None:
    """``--storage-option`` pairs as fsspec options: ``KEY=VALUE`` a string (``true`` and
    ``false`` booleans), ``KEY:=JSON`` any JSON value; a dotted key sets a nested option
    (``client_kwargs.region_name=us-east-1``). ``None`` when none are given."""
    import json

    if not pairs:
        return None
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        as_json = key.endswith(":")
        key = key[:-1] if as_json else key
        if not sep or not key or any(not k for k in key.split(".")):
            raise CliError(f"--storage-option {pair!r}: write KEY=VALUE or KEY:=JSON, e.g. "
                           "endpoint_url=http://127.0.0.1:9000 or anon=true")
        if as_json:
            try:
                parsed: Any = json.loads(value)
            except ValueError as e:
                raise CliError(f"--storage-option {key}: {value!r} is not JSON ({e})") from None
        else:
            parsed = {"true": True, "false": False}.get(value.lower(), value)
        *parents, last = key.split(".")
        node = out
        for k in parents:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise CliError(f"--storage-option {key}: {k} is set to a value already")
        node[last] = parsed
    return out


def _refuse_overwriting(out: str, option: str, manifest: str,
                        listed: frozenset[str] = frozenset()) -> None:
    """Refuse an output path that names an input: the manifest file (however spelled: a
    symlink, another relative path) or, when it exists, a file the manifest lists."""
    from extsrc._util.textsafe import shown
    from extsrc.validation.report import same_file

    if not os.path.isdir(manifest) and same_file(out, manifest):
        raise CliError(f"{option} {shown(out)} is the input manifest {shown(manifest)}; writing "
                       "there would destroy it: choose another file")
    if listed and os.path.lexists(out):
        names = {os.path.abspath(out), os.path.realpath(out)}
        if not names.isdisjoint(listed):
            raise CliError(f"{option} {shown(out)} is a file the manifest lists; writing there "
                           "would destroy it: choose another file")


#: Written by ``extsrc demo`` in its --out folder, which it may then write over again.
DEMO_MARK = ".extsrc-demo"


def _add_root_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, metavar="DIR",
                   help="confine the manifest to DIR, a folder or a folder URL (s3://bucket/ds/, "
                        "gs://, https://): relative paths resolve against it, and a path "
                        "leading outside it (.., an absolute path elsewhere, a symlink pointing "
                        "out) is refused without being opened (default: paths resolve against "
                        "the manifest's folder and may lead anywhere)")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an fsspec option for URLs (the manifest, --root, rows, shards), "
                        "repeatable: endpoint_url=http://127.0.0.1:9000, anon=true, "
                        "client_kwargs.region_name=us-east-1, or KEY:=JSON. Credentials are "
                        "better left to the environment (AWS_ACCESS_KEY_ID...): a command line "
                        "is visible to other users")


def _add_device_option(p: argparse.ArgumentParser, *, help: str) -> None:
    p.add_argument("--device", type=_device, default=None, metavar="DEVICE", help=help)


def _add_run_options(p: argparse.ArgumentParser, *, device: str, workers: str) -> None:
    """--device, --workers and --seed, with each command's help for the first two."""
    _add_device_option(p, help=device)
    p.add_argument("--workers", type=int, default=None, metavar="N", help=workers)
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def _add_import_option(p: argparse.ArgumentParser, *, help: str) -> None:
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help=help)


def _report_skipped(loader: Any) -> None:
    skipped = getattr(loader, "skipped", ())
    if skipped:
        counts = getattr(loader.validation, "counts", {})
        detail = ", ".join(f"{k}: {v}" for k, v in counts.items())
        print(f"skipped {len(skipped)} bad file(s) ({detail}); `extsrc validate "
              f"{loader.manifest.source}` lists them")


def _add_loader_options(p: argparse.ArgumentParser, *, resize_default: str) -> None:
    p.add_argument("manifest", metavar="MANIFEST",
                   help="the labelled file list: CSV/TSV/text lines of `path,label`")
    p.add_argument("--ops", nargs="+", action="extend", metavar="OP",
                   help="registered ops to run on every image (see `extsrc ops`), e.g. "
                        "--ops grid2x2 hflip (or grid2x2,hflip); parameters as "
                        "NAME:KEY=VALUE[:KEY=VALUE], e.g. --ops center_crop:size=96,rot90:k=2")
    p.add_argument("--resize", type=_size, default=_UNSET, metavar="SIZE",
                   help="resize every image output to SIZE or HEIGHTxWIDTH so a batch stacks "
                        f"into one tensor; 0 for none (default: {resize_default})")
    p.add_argument("--resize-mode", choices=("shorter_side", "stretch"), default="shorter_side",
                   help="shorter_side: keep the aspect ratio, scale to cover SIZE and crop the "
                        "centre (torchvision Resize + CenterCrop); stretch: scale each side to "
                        "SIZE (default: shorter_side)")
    p.add_argument("--layout", choices=("NHWC", "NCHW"), default="NHWC",
                   help="layout of the image outputs (default: NHWC)")
    p.add_argument("--dtype", choices=("uint8", "float32", "float16", "bfloat16"), default=None,
                   help="dtype of the image outputs (default: uint8; float32 with --normalize "
                        "or --preset)")
    p.add_argument("--normalize", choices=tuple(_NORMALIZE), default="none",
                   help="none: pixel values 0-255; scale: divided by 255; imagenet: "
                        "(x - mean) / std with torchvision's ImageNet constants (default: none)")
    p.add_argument("--preset", choices=("none", "train", "val"), default="none",
                   help="run the standard ImageNet-style pipeline on the main image: train = "
                        "random resized crop + flip + normalise, val = resize + centre crop + "
                        "normalise (default: none)")
    p.add_argument("--crop", type=_positive, default=224, metavar="N",
                   help="crop size of --preset (default: 224)")
    p.add_argument("--size", type=_positive, default=None, metavar="N",
                   help="shorter side before the centre crop of --preset val "
                        "(default: crop * 256/224)")
    _add_run_options(p, device="auto (a GPU if one is visible, else the CPU), cpu, cuda or cuda:N "
                               "(default: auto)",
                     workers="worker processes reading files (0: none; default: from the core "
                             "count)")
    p.add_argument("--skip-bad", action="store_true",
                   help="check every file first and leave out the bad ones instead of failing "
                        "on the first")
    _add_import_option(p, help="import a module or .py file that registers your own ops first "
                               "(repeatable)")
    _add_root_option(p)


def _resize_arg(args: argparse.Namespace, default: tuple[int, int] | None) -> Any:
    """``--resize`` as given (``0``: ``None``), else ``default``."""
    return default if args.resize is _UNSET else args.resize


# -- commands ------------------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    from extsrc._util.extras import require
    from extsrc.loading.loader import Loader
    from extsrc.loading.options import Workers
    from extsrc.sources.table import read_manifest
    from extsrc.tools.preview import render_batch
    from extsrc.tools.sample_data import make_sample_dataset

    require("matplotlib", "preview", "extsrc demo")  # before the work, not after it
    out = Path(args.out)
    if out.exists() and not (out / DEMO_MARK).exists() and (
            not out.is_dir() or any(out.iterdir())):
        from extsrc._util.textsafe import shown

        raise CliError(
            f"--out {shown(args.out)}: {'not a folder' if not out.is_dir() else 'the folder'} "
            "holds files extsrc demo did not write, and demo writes data/ and preview.png "
            "there: choose a new or empty folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARK).touch()
    size = (96, 128)
    manifest_path = make_sample_dataset(out / "data", n=args.n, size=size, seed=args.seed)
    manifest = read_manifest(manifest_path)
    print(f"dataset: {len(manifest)} images of {len(manifest.classes or [])} classes, "
          f"manifest {manifest_path}")
    batch_size = min(16, len(manifest))
    with Loader(manifest, batch_size=batch_size, ops=["grid2x2"], resize=size, device=args.device,
                seed=args.seed, workers=Workers(num_workers=args.workers)) as loader:
        print(f"loader: device {loader.device}, outputs {list(loader.output_names)}")
        print("op paths: " + ", ".join(f"{k}={v}" for k, v in loader.op_paths.items()))
        first = None
        for epoch in range(args.epochs):
            t0 = time.perf_counter()
            seen = 0
            for batch in loader:
                if first is None:
                    first = {k: v.clone() for k, v in batch.items()}
                seen += int((~batch["is_pad"]).sum())
            dt = time.perf_counter() - t0
            note = " (includes building the pipeline)" if epoch == 0 else ""
            print(f"epoch {epoch}: {seen} images in {dt:.2f} s, {seen / dt:.0f} images/s{note}")
    assert first is not None
    preview = out / "preview.png"
    render_batch(first, max_samples=6, path=preview, classes=manifest.classes)
    print(f"preview: {preview}  (rows: samples; columns: image, then the 4 grid2x2 tiles)")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from extsrc.errors import ManifestError
    from extsrc.validation.validate import validate

    if args.write_clean:
        _refuse_overwriting(args.write_clean, "--write-clean", args.manifest)
    clips = None
    if args.sequence_length is not None:
        from extsrc.sources.video.clips import ClipSpec

        try:
            clips = ClipSpec(args.sequence_length, args.stride)
        except ValueError as e:
            raise CliError(f"--sequence-length/--stride: {e}") from None
    report = validate(_manifest_arg(args), decode=not args.no_decode, n_jobs=args.jobs,
                      progress=sys.stderr.isatty(), media=args.media, device=args.device,
                      clips=clips)
    text = report.summary(max_problems=args.max_problems)
    if not report.ok:
        # The summary's closing advice speaks Python; say it with this command's options.
        lines = text.splitlines()
        if lines and lines[-1].startswith("Train on the"):
            lines[-1] = (
                f"Train on the {len(report.ok_indices)} good samples: rerun with --write-clean "
                "CSV and use that manifest, or pass --skip-bad to `extsrc preview` / `extsrc "
                "bench` (Python: Loader(bad_files=BadFiles(on_error='skip')))"
            ) if report.media == "image" else (
                f"Train on the {len(report.ok_indices)} good videos: rerun with --write-clean "
                "CSV and use that manifest (Python: "
                "VideoLoader(bad_files=BadFiles(on_error='skip')))"
            )
        text = "\n".join(lines).replace(
            "(see report.problems)", f"(--max-problems {report.num_bad} lists them all)"
        )
    print(text)
    if args.write_clean:
        try:
            out = report.write_clean(args.write_clean)
        except ManifestError as e:
            print(f"--write-clean: nothing written: {e.message}")
        else:
            what = (f"all {len(report.ok_indices)} samples (the manifest is clean)" if report.ok
                    else f"the {len(report.ok_indices)} good samples")
            print(f"wrote {what} to {out}")
    return EXIT_OK if report.ok else EXIT_FOUND


def cmd_preview(args: argparse.Namespace) -> int:
    from extsrc._util.extras import require
    from extsrc.tools.preview import image_outputs, render_batch

    require("matplotlib", "preview", "extsrc preview")
    resize = _resize_arg(args, None if args.preset != "none" else (128, 128))
    _refuse_overwriting(args.output, "-o", args.manifest)
    with _loader(args, batch_size=args.n, shuffle=args.shuffle, resize=resize) as loader:
        _refuse_overwriting(args.output, "-o", args.manifest,
                            frozenset(loader.manifest.paths))
        _report_skipped(loader)
        batch = next(iter(loader))
        # Floating-point images are drawn by undoing the normalisation they were given.
        mean, std = {"none": ((0.0,) * 3, (1.0,) * 3), "scale": ((0.0,) * 3, (255.0,) * 3),
                     "imagenet": _NORMALIZE["imagenet"]}[args.normalize]
        if args.preset != "none" and args.dtype is None:
            mean, std = _NORMALIZE["imagenet"]
        render_batch(batch, max_samples=args.n, path=args.output, mean=mean, std=std,
                     classes=loader.manifest.classes)
    names = image_outputs(batch)
    rows, cols = min(args.n, len(batch["index"])), len(names)
    shapes = ", ".join(
        f"{n} {'x'.join(map(str, batch[n].shape[1:]))} {str(batch[n].dtype).removeprefix('torch.')}"
        for n in names
    )
    print(f"wrote {args.output} ({rows} samples x {cols} image outputs, device {loader.device}, "
          f"op paths {loader.op_paths})\noutputs (per sample): {shapes}")
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    resize = _resize_arg(args, None if args.preset != "none" else (224, 224))
    with _loader(args, batch_size=args.batch_size, shuffle=True, resize=resize) as loader:
        _report_skipped(loader)
        print(f"loader: {len(loader.manifest)} samples, batch {args.batch_size}, device "
              f"{loader.device}, op paths {loader.op_paths}, outputs {list(loader.output_names)}")
        per_epoch = len(loader)
        total = per_epoch * args.epochs
        if args.max_batches is not None:
            total = min(total, args.max_batches)
        images = batches = 0
        t_start = time.perf_counter()
        t_warm = None
        warm_images = 0
        with tqdm(total=total, unit="batch", desc="bench", disable=None) as bar:
            while batches < total:
                for batch in loader:
                    n = int((~batch["is_pad"]).sum())
                    images += n
                    batches += 1
                    if t_warm is None:  # the first batch pays for building the pipeline
                        t_warm, warm_images = time.perf_counter(), images
                    bar.update(1)
                    elapsed = time.perf_counter() - t_start
                    bar.set_postfix_str(f"{images / elapsed:.0f} img/s")
                    if batches >= total:
                        break
        t_end = time.perf_counter()
    warmup = (t_warm or t_end) - t_start
    steady_images = images - warm_images
    if batches > 1 and steady_images > 0:
        rate = steady_images / (t_end - (t_warm or t_start))
        print(f"{rate:.1f} images/s ({steady_images} images in {batches - 1} batches after a "
              f"{warmup:.2f} s warm-up)")
    else:
        rate = images / max(t_end - t_start, 1e-9)
        print(f"{rate:.1f} images/s ({images} images in 1 batch, including the warm-up)")
    return EXIT_OK


def cmd_ops(args: argparse.Namespace) -> int:
    import augment_ops
    from augment_ops.paths import available_paths
    from extsrc._util.device import cuda_device_count
    from extsrc.ops_runtime.paths import choose_paths

    gpu = cuda_device_count() > 0
    rows = [("NAME", "OUTPUTS", "RANDOM", "PATHS", f"AUTO ({'gpu' if gpu else 'cpu'})",
             "PARAMETERS (defaults)", "DESCRIPTION")]
    for op in augment_ops.iter_ops():
        auto = choose_paths([op], gpu=gpu)[op.name]
        params = ",".join(f"{k}={v}" for k, v in op_parameters(op).items()) or "-"
        rows.append((op.name, str(op.num_outputs), "yes" if op.random else "no",
                     ",".join(available_paths(op)), auto, params, op.description))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])
    print("\nOutputs are named <op>_0, <op>_1, ... in the batch. Paths: numpy = your function "
          "(the reference), native = DALI operators, gpu = the same code on CuPy arrays; AUTO is "
          "what a loader on this machine picks for the op on decoded images. Set parameters "
          "with --ops NAME:KEY=VALUE, e.g. --ops center_crop:size=96,rot90:k=2.")
    # Native paths are generated by tracing the numpy function; say what stopped the others.
    untraced = [(op.name, augment_ops.explain(op)) for op in augment_ops.iter_ops()
                if "native" not in available_paths(op)]
    if untraced:
        print("\nNo native path (see augment_ops.explain):")
        for name, why in untraced:
            print(f"  {name}: {why}")
    return EXIT_OK


# -- parser and entry point ----------------------------------------------------------------------
def _add_validate_parser(sub: Any) -> None:
    """``extsrc validate``: its options are the image and video checks' own."""
    p = sub.add_parser("validate", help="check that every file in a manifest can be read",
                       description="Read MANIFEST and check every file it lists (missing, "
                                   "unreadable, empty, not an image, truncated, corrupt; for "
                                   "videos: not a video, cut short, no video track, a codec "
                                   "DALI cannot decode on the device, too short for a clip, "
                                   "damaged frames). Prints "
                                   "one line per problem (manifest line, path, reason, fix); "
                                   "exits 1 if there is any.")
    p.add_argument("manifest", metavar="MANIFEST", help="the labelled file list")
    p.add_argument("--no-decode", action="store_true",
                   help="check headers and file ends only, do not decode every image or "
                        "video fully (much faster; misses files corrupt in the middle)")
    p.add_argument("--jobs", type=int, default=-1, metavar="N",
                   help="processes checking files (-1: all cores; default: -1)")
    p.add_argument("--max-problems", type=_positive, default=20, metavar="N",
                   help="problems to list (default: 20)")
    p.add_argument("--write-clean", default=None, metavar="CSV",
                   help="also write a manifest of the good samples to CSV (all of them when "
                        "the manifest is clean); CSV must not be MANIFEST itself")
    p.add_argument("--media", choices=["auto", "image", "video"], default="auto",
                   help="check the files as images or videos (default: auto, videos when "
                        "every path has a video extension or the folder holds videos only)")
    _add_device_option(p, help="videos: refuse codecs DALI cannot decode on DEVICE (auto, cpu, "
                               "cuda; default: auto)")
    p.add_argument("--sequence-length", type=_positive, default=None, metavar="N",
                   help="videos: also refuse videos shorter than one clip of N frames")
    p.add_argument("--stride", type=_positive, default=1, metavar="S",
                   help="videos: frames between a clip's frames, with --sequence-length "
                        "(default: 1)")
    _add_root_option(p)
    p.set_defaults(func=cmd_validate, imports=[])


def build_parser() -> argparse.ArgumentParser:
    from extsrc import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    p = sub.add_parser("demo", help="make a sample dataset, run a loader, write a preview PNG",
                       description="Make a small generated dataset (shapes on gradients), run a "
                                   "loader with the grid2x2 op for a couple of epochs, print "
                                   "images/s, the device and op paths, and write preview.png.")
    p.add_argument("--out", default="extsrc-demo", metavar="DIR",
                   help="folder for the dataset and preview.png (default: extsrc-demo)")
    p.add_argument("--n", type=_positive, default=64, help="number of images (default: 64)")
    p.add_argument("--epochs", type=_positive, default=2, help="epochs to run (default: 2)")
    _add_run_options(p, device="auto, cpu, cuda or cuda:N (default: auto)",
                     workers="worker processes reading files (default: from the core count)")
    p.set_defaults(func=cmd_demo, imports=[])

    _add_validate_parser(sub)

    p = sub.add_parser("preview", help="render the first batch (image and every op output) "
                                       "to a PNG",
                       description="Run the loader on MANIFEST and draw its first batch: one row "
                                   "per sample (manifest index and label), one column per image "
                                   "output (image, then each op's outputs).")
    _add_loader_options(p, resize_default="128, or none with --preset")
    p.add_argument("-o", "--output", default="preview.png", metavar="PNG",
                   help="where to write the picture (default: preview.png)")
    p.add_argument("--n", type=_positive, default=8, help="samples to show (default: 8)")
    p.add_argument("--shuffle", action="store_true",
                   help="show a random batch instead of the first lines")
    p.set_defaults(func=cmd_preview)

    p = sub.add_parser("bench", help="measure loader throughput in images/s",
                       description="Run the loader on MANIFEST and report images per second "
                                   "(the first batch, which builds the pipeline, is timed apart).")
    _add_loader_options(p, resize_default="224, or none with --preset")
    p.add_argument("--batch-size", type=_positive, default=32, metavar="N",
                   help="samples per batch (default: 32)")
    p.add_argument("--epochs", type=_positive, default=1, metavar="N",
                   help="passes over the manifest (default: 1)")
    p.add_argument("--max-batches", type=_positive, default=None, metavar="N",
                   help="stop after N batches")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("ops", help="list the registered ops, their outputs and paths",
                       description="List every registered op: outputs, whether it is random, the "
                                   "implementations it has and which one a loader picks here.")
    _add_import_option(p, help="import a module or .py file that registers your own ops first")
    p.set_defaults(func=cmd_ops)
    return parser


def _reason(e: BaseException) -> tuple[str, bool]:
    """The reason in one line, and whether it is one of extsrc's own errors (bad input).

    An extsrc error's ``message`` is its reason (a DALI worker's traceback, kept in ``detail``,
    is left out); another exception's first line is.
    """
    from extsrc.errors import ExtsrcError

    if isinstance(e, ExtsrcError):
        text = e.message
    else:
        text = str(e.args[0] if isinstance(e, KeyError) and e.args else e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return _cli_words(lines[0] if lines else type(e).__name__), isinstance(e, ExtsrcError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``extsrc`` command line; return the exit status."""
    from extsrc.errors import (
        ExtsrcError,
        OpError,
        PipelineError,
        SampleReadError,
        WorkerDiedError,
        debug,
    )

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    _quiet_dali()
    try:
        _import_user_ops(args.imports)
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (SampleReadError, OpError, WorkerDiedError, PipelineError) as e:
        # The input was well formed but a file or the pipeline failed: a finding, like validate's.
        if debug():
            raise
        print(f"{PROG}: error: {_reason(e)[0]}", file=sys.stderr)
        return EXIT_FOUND
    except (ExtsrcError, ValueError, FileNotFoundError, KeyError, TypeError, CliError) as e:
        if debug():
            raise
        print(f"{PROG}: error: {_reason(e)[0]}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # DALI or an op failed in a way the loader could not name
        if debug():
            raise
        text, own = _reason(e)
        print(f"{PROG}: error: {text}", file=sys.stderr)
        return EXIT_USAGE if own else EXIT_FOUND


if __name__ == "__main__":
    sys.exit(main())
