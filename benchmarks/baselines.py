"""The baselines extsrc is measured against. None of this is part of the package.

- ``seed_recipe_iterator``: the blog recipe users copy today (``../shared/seeds/000_*.txt``),
  reproduced as written: an ``ExternalInputIterator`` reading files in the main thread, a legacy
  ``Pipeline`` subclass with ``iter_setup``/``feed_input``, CPU decoding, ``PythonFunction`` running
  ``grid2x2`` per sample on the CPU, five GPU resizes and ``DALIGenericIterator`` with an output
  map. Two of its defects are repaired because they change the work rather than its speed:
  labels are int64 (not uint8) and ``grid2x2`` returns four distinct tiles.
- ``torch_dataloader``: a PyTorch ``DataLoader`` with PIL decoding and resizing, as many workers
  as cores.
- ``ceiling_iterator``: DALI alone doing the same job with nothing of extsrc in between: parallel
  raw-byte external source -> mixed decode -> slices -> resizes; ``raw_dali_iterator`` is that
  pipeline for any image outputs made from the decoded image (the ceilings of
  ``bench_user_ops.py`` and ``bench_realops.py``).
"""

from __future__ import annotations

import os

import numpy as np


def grid2x2(img: np.ndarray):
    h, w = img.shape[:2]
    hh, hw = h // 2, w // 2
    return img[:hh, :hw], img[:hh, hw:], img[hh:, :hw], img[hh:, hw:]


def read_pairs(manifest: str) -> list[tuple[str, int]]:
    root = os.path.dirname(os.path.abspath(manifest))
    with open(manifest) as f:
        lines = [ln.strip() for ln in f if ln.strip()][1:]
    return [(os.path.join(root, p), int(lab)) for p, lab in (ln.rsplit(",", 1) for ln in lines)]


# -- (3) the seed recipe ------------------------------------------------------------------------
class ExternalInputIterator:
    """As in the seed, but without its wrap-around into the next epoch."""

    def __init__(self, pairs, batch_size):
        self.files = list(pairs)
        self.batch_size = batch_size
        self.n = len(self.files)

    def __iter__(self):
        self.i = 0
        np.random.shuffle(self.files)  # noqa: NPY002 - global RNG, as the seed recipe does
        return self

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        batch, labels = [], []
        for _ in range(min(self.batch_size, self.n - self.i)):
            path, label = self.files[self.i]
            with open(path, "rb") as f:
                batch.append(np.frombuffer(f.read(), dtype=np.uint8))
            labels.append(np.array([label], dtype=np.int64))
            self.i += 1
        return batch, labels


def seed_recipe_iterator(manifest, *, batch_size, resize, num_threads, device_id):
    import nvidia.dali.ops as ops
    import nvidia.dali.types as types
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    gpu = device_id is not None

    class ExternalSourcePipeline(Pipeline):
        def __init__(self, external_data):
            super().__init__(batch_size, num_threads, device_id, seed=12,
                             exec_async=False, exec_pipelined=False)
            self.input = ops.ExternalSource()
            self.input_label = ops.ExternalSource()
            self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
            self.grid = ops.PythonFunction(function=grid2x2, num_outputs=4)
            self.resize = ops.Resize(device="gpu" if gpu else "cpu", resize_x=resize,
                                     resize_y=resize, interp_type=types.INTERP_LINEAR)
            self.external_data = external_data
            self.iterator = iter(self.external_data)

        def define_graph(self):
            self.jpegs = self.input()
            self.labels = self.input_label()
            images = self.decode(self.jpegs)
            i1, i2, i3, i4 = self.grid(images)
            mv = (lambda x: x.gpu()) if gpu else (lambda x: x)
            return (self.resize(mv(images)), self.resize(mv(i1)), self.resize(mv(i2)),
                    self.resize(mv(i3)), self.resize(mv(i4)), self.labels)

        def iter_setup(self):
            try:
                images, labels = next(self.iterator)
                self.feed_input(self.jpegs, images)
                self.feed_input(self.labels, labels)
            except StopIteration:
                self.iterator = iter(self.external_data)
                raise

    pipe = ExternalSourcePipeline(ExternalInputIterator(read_pairs(manifest), batch_size))
    pipe.build()
    return DALIGenericIterator(pipe, ["data0", "data1", "data2", "data3", "data4", "label"],
                               last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)


# -- (4) PyTorch DataLoader + PIL -----------------------------------------------------------------
class PILDataset:
    def __init__(self, pairs, resize):
        self.pairs = pairs
        self.resize = resize

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        path, label = self.pairs[i]
        img = pil_rgb(path)
        return resized_tensors([img, *grid2x2(img)], self.resize, label)


def pil_rgb(path: str) -> np.ndarray:
    """The file decoded by PIL as an HWC uint8 RGB array."""
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def resized_tensors(outs, resize: int, label: int) -> list:
    """Each image resized to ``resize`` x ``resize`` (PIL bilinear) as a tensor, then the label."""
    import torch
    from PIL import Image

    size = (resize, resize)
    arrs = [np.asarray(Image.fromarray(np.ascontiguousarray(o)).resize(size, Image.BILINEAR))
            for o in outs]
    return [torch.from_numpy(a) for a in arrs] + [torch.tensor(label, dtype=torch.int64)]


def torch_dataloader(manifest, *, batch_size, resize, num_workers, pin_memory):
    import torch

    ds = PILDataset(read_pairs(manifest), resize)
    return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True,
                                       num_workers=num_workers, pin_memory=pin_memory,
                                       persistent_workers=num_workers > 0, prefetch_factor=4
                                       if num_workers > 0 else None)


# -- (5) the ceiling -----------------------------------------------------------------------------
class RawSource:
    """Minimal picklable batch source: shuffled raw bytes, StopIteration at the epoch's end."""

    def __init__(self, pairs, batch_size):
        self.paths = [p for p, _ in pairs]
        self.labels = np.array([lab for _, lab in pairs], dtype=np.int64)
        self.batch_size = batch_size
        self._perm = (None, None)  # (epoch, permutation): one shuffle per epoch, as extsrc does

    def __call__(self, info):
        n = len(self.paths)
        start = info.iteration * self.batch_size
        if start >= n:
            raise StopIteration
        if self._perm[0] != info.epoch_idx:
            self._perm = (info.epoch_idx, np.random.default_rng(info.epoch_idx).permutation(n))
        idx = self._perm[1][start:start + self.batch_size]
        data = []
        for i in idx:
            with open(self.paths[i], "rb") as f:
                data.append(np.frombuffer(f.read(), dtype=np.uint8))
        return data, self.labels[idx]  # one batch array: cheaper than per-sample scalars


def raw_dali_iterator(manifest, *, batch_size, resize, num_threads, device_id, num_workers,
                      hw_decoder_load=None, images=None, prefix="image", source=None,
                      info=False):
    """DALI alone, nothing of extsrc: parallel raw-byte external source (``num_workers``
    reader processes; ``0``: in DALI's thread) -> decode -> ``images(img)``, the image outputs
    made from the decoded image (default: the image) -> each stretched to ``resize`` x
    ``resize``, with labels. Outputs ``<prefix>0``, ``<prefix>1``... and ``label``.

    ``source``: the batch source (default: :class:`RawSource` over ``manifest``); ``info``: it
    gives a third output per batch, one row per sample as the loader's ``info``, which leaves
    the pipeline on the CPU as ``info``."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    gpu = device_id is not None
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=0,
                    py_num_workers=max(1, num_workers), py_start_method="spawn" if gpu else "fork")
    parallel = {"parallel": True, "prefetch_queue_depth": num_workers} if num_workers else {}
    source = source if source is not None else RawSource(read_pairs(manifest), batch_size)
    with pipe:
        jpegs, labels, *rows = fn.external_source(source=source, num_outputs=3 if info else 2,
                                                  batch=True, batch_info=True, **parallel)
        kw = {} if hw_decoder_load is None or not gpu else {"hw_decoder_load": hw_decoder_load}
        img = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB,
                                **kw)
        outs = [fn.resize(x, resize_x=resize, resize_y=resize)
                for x in (images(img) if images is not None else [img])]
        pipe.set_outputs(*outs, labels.gpu() if gpu else labels, *rows)
    pipe.build()
    names = [*(f"{prefix}{k}" for k in range(len(outs))), "label", *(["info"] if info else [])]
    return DALIGenericIterator(pipe, names, last_batch_policy=LastBatchPolicy.PARTIAL,
                               auto_reset=True)


def ceiling_iterator(manifest, *, batch_size, resize, num_threads, device_id, num_workers,
                     hw_decoder_load=None):
    """The seed recipe's job by DALI alone: the image and its four ``grid2x2`` tiles."""
    def with_tiles(img):
        sh = img.shape()
        hh, hw = sh[0] // 2, sh[1] // 2
        return [img, img[:hh, :hw], img[:hh, hw:], img[hh:, :hw], img[hh:, hw:]]

    return raw_dali_iterator(manifest, batch_size=batch_size, resize=resize,
                             num_threads=num_threads, device_id=device_id,
                             num_workers=max(1, num_workers), hw_decoder_load=hw_decoder_load,
                             images=with_tiles, prefix="data")


def pipeline_rate(pipe, *, warmup: int, seconds: float) -> tuple[int, float]:
    """Run a built DALI pipeline over a source that ends its epochs (``StopIteration``, then
    ``reset``): ``warmup`` untimed batches, then batches for at least ``seconds``. Returns the
    images timed and the seconds they took, the last batch finished."""
    import time

    def run():
        try:
            return pipe.run()
        except StopIteration:  # the source's epoch ended
            pipe.reset()
            return pipe.run()

    for _ in range(warmup):
        run()
    start, images = time.perf_counter(), 0
    while True:
        out = run()
        images += len(out[1])
        if time.perf_counter() - start >= seconds:
            break
    if type(out[0]).__name__ == "TensorListGPU":
        out[0].as_cpu()  # waits for the GPU's work on it
    return images, time.perf_counter() - start
