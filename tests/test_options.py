"""The loaders' option groups (extsrc.loading.options): each checked at construction naming its
group and field, frozen; the flat keywords of earlier releases mapped onto them with a warning,
giving the same config and the same batches; a flat keyword together with its group refused."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import write_dataset

import extsrc
from extsrc import BadFiles, BatchFormat, Loader, OpRuntime, Sampling, Workers
from extsrc.loading.options import DEFAULT_HW_DECODER_LOAD, FLAT, GROUPS, from_flat

# (group, field values, exception, what the message must say: the group and the field)
BAD_GROUPS = [
    (Sampling, {"shard_id": -1}, ValueError, r"Sampling: shard_id must be >= 0"),
    (Sampling, {"shard_id": 1.0}, TypeError, r"Sampling: shard_id must be an int or None"),
    (Sampling, {"num_shards": 0}, ValueError, r"Sampling: num_shards must be >= 1"),
    (Sampling, {"shard_id": 2, "num_shards": 2}, ValueError,
     r"Sampling: shard_id must be in \[0, num_shards=2\), got 2"),
    (Sampling, {"last_batch": "fill"}, ValueError,
     r"Sampling: last_batch must be one of \['pad', 'drop', 'partial'\], got str 'fill'"),
    (Sampling, {"last_batch": 3}, TypeError, r"Sampling: last_batch must be one of"),
    (Workers, {"num_workers": -1}, ValueError, r"Workers: num_workers must be >= 0 and <= 256"),
    (Workers, {"num_workers": 1.5}, TypeError, r"Workers: num_workers must be an int or None"),
    (Workers, {"num_threads": 0}, ValueError, r"Workers: num_threads must be >= 1"),
    (Workers, {"start_method": "forkserver"}, ValueError,
     r"Workers: start_method must be one of \[None, 'fork', 'spawn'\]"),
    (Workers, {"prefetch_queue_depth": 0}, ValueError,
     r"Workers: prefetch_queue_depth must be >= 1 and <= 64"),
    (Workers, {"decoder": "gpu"}, ValueError,
     r"Workers: decoder must be one of \['auto', 'cpu', 'mixed'\]"),
    (Workers, {"hw_decoder_load": 1.5}, ValueError, r"Workers: hw_decoder_load must be None"),
    (Workers, {"hw_decoder_load": "0.5"}, TypeError, r"Workers: hw_decoder_load must be None"),
    (Workers, {"watchdog": "yes"}, TypeError, r"Workers: watchdog must be True or False"),
    (OpRuntime, {"op_path": "fast"}, ValueError, r"OpRuntime: op_path must be None, one of"),
    (OpRuntime, {"op_path": ["numpy"]}, TypeError, r"OpRuntime: op_path must be .*got list"),
    (OpRuntime, {"op_path": {"hflip": "fast"}}, ValueError,
     r"OpRuntime: op_path for 'hflip' must be one of"),
    (OpRuntime, {"op_workers": -1}, ValueError, r"OpRuntime: op_workers must be >= 0"),
    (OpRuntime, {"op_pool": "fiber"}, ValueError,
     r"OpRuntime: op_pool must be one of \['process', 'thread'\]"),
    (OpRuntime, {"op_timeout": 0}, ValueError, r"OpRuntime: op_timeout must be > 0"),
    (OpRuntime, {"op_timeout": "1"}, TypeError, r"OpRuntime: op_timeout must be a number"),
    (BadFiles, {"on_error": "ignore"}, ValueError,
     r"BadFiles: on_error must be 'raise' or 'skip', got 'ignore'"),
    (BadFiles, {"on_error": True}, TypeError, r"BadFiles: on_error must be 'raise' or 'skip'"),
    (BadFiles, {"max_pixels": 0}, ValueError, r"BadFiles: max_pixels must be >= 1"),
    (BadFiles, {"max_file_bytes": "1MB"}, TypeError,
     r"BadFiles: max_file_bytes must be an int or None \(the largest file read, in bytes"),
    (BadFiles, {"validate_kwargs": {"n_jobs": 1}}, ValueError,
     r"BadFiles: validate_kwargs is used by on_error='skip' only"),
    (BadFiles, {"validate_kwargs": {"bogus": 1}, "on_error": "skip"}, TypeError,
     r"BadFiles: validate_kwargs has unknown option\(s\) \['bogus'\]"),
    (BadFiles, {"validate_kwargs": [1], "on_error": "skip"}, TypeError,
     r"BadFiles: validate_kwargs must be a dict"),
]


@pytest.mark.parametrize(("cls", "fields", "error", "match"), BAD_GROUPS,
                         ids=[f"{c.__name__}-{next(iter(f))}={next(iter(f.values()))!r}"
                              for c, f, _, _ in BAD_GROUPS])
def test_a_bad_field_is_refused_naming_its_group_and_field(cls, fields, error, match):
    with pytest.raises(error, match=match):
        cls(**fields)


@pytest.mark.parametrize("group", [Sampling(), Workers(), OpRuntime(), BadFiles(),
                                   BatchFormat()])
def test_groups_are_frozen(group):
    name = dataclasses.fields(group)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(group, name, None)


def test_the_defaults_are_the_loaders_defaults():
    assert Sampling() == Sampling(shard_id=None, num_shards=None, last_batch="partial")
    assert Workers() == Workers(num_workers=None, num_threads=None, start_method=None,
                                prefetch_queue_depth=2, decoder="auto",
                                hw_decoder_load=DEFAULT_HW_DECODER_LOAD, watchdog=True)
    assert DEFAULT_HW_DECODER_LOAD == 0.85
    assert OpRuntime() == OpRuntime(op_path=None, op_workers=None, op_pool="process",
                                    op_timeout=None)
    assert BadFiles() == BadFiles(on_error="raise", max_pixels=extsrc.DEFAULT_MAX_PIXELS,
                                  max_file_bytes=256 * 2**20, validate_kwargs=None)


def test_values_are_normalised_numpy_ints_dicts_and_validate_kwargs():
    w = Workers(num_workers=np.int64(2), hw_decoder_load=1)
    assert type(w.num_workers) is int and w.hw_decoder_load == 1.0
    rt = OpRuntime(op_path={"b": "numpy", "a": "native"})
    assert rt.op_path == (("a", "native"), ("b", "numpy"))
    assert rt.op_path_override == {"a": "native", "b": "numpy"}
    assert dataclasses.replace(rt, op_workers=2).op_path == rt.op_path  # the held form again
    kw = {"n_jobs": 1}
    bad = BadFiles(on_error="skip", validate_kwargs=kw)
    kw["n_jobs"] = 9  # the caller's dict changing later does not change the group
    assert bad.validate_kwargs == {"n_jobs": 1}
    with pytest.raises(TypeError, match="cannot be changed"):
        bad.validate_kwargs["n_jobs"] = 2  # type: ignore[index]
    assert hash(bad) == hash(BadFiles(on_error="skip", validate_kwargs={"n_jobs": 1}))
    import copy
    import pickle

    assert copy.deepcopy(bad) == pickle.loads(pickle.dumps(bad)) == bad


def test_every_flat_keyword_has_one_group():
    flat = [name for _, (_, names) in GROUPS.items() for name in names]
    assert len(flat) == len(set(flat)) == len(FLAT) == 22
    # Fields added after the flat keywords were deprecated have none.
    newer = {"sampling": {"run_length"}}
    for key, (cls, names) in GROUPS.items():
        assert set(names) == {f.name for f in dataclasses.fields(cls)} - newer.get(key, set()), key
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['run_length'\]"):
        from_flat("Loader", {"sampling": None}, {"run_length": 2})


# -- the flat keywords of earlier releases -------------------------------------------------------


@pytest.fixture(scope="module")
def twelve(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("opts"), 12, fmt="mixed")


FLAT_FORM = dict(num_workers=0, num_threads=1, prefetch_queue_depth=1, last_batch="pad",
                 layout="NCHW", dtype="float32", normalize="scale", op_path="numpy",
                 op_workers=0, max_file_bytes=10**7)
GROUP_FORM = dict(
    workers=Workers(num_workers=0, num_threads=1, prefetch_queue_depth=1),
    sampling=Sampling(last_batch="pad"),
    format=BatchFormat(layout="NCHW", dtype="float32", normalize="scale"),
    op_runtime=OpRuntime(op_path="numpy", op_workers=0),
    bad_files=BadFiles(max_file_bytes=10**7),
)


def test_flat_keywords_warn_naming_the_group_and_give_the_same_config_and_batches(twelve):
    common = dict(batch_size=5, ops=["grid2x2"], resize=(12, 10), device="cpu", seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the group form warns about nothing
        grouped = Loader(twelve, **common, **GROUP_FORM)
    with pytest.warns(DeprecationWarning) as caught:
        flat = Loader(twelve, **common, **FLAT_FORM)
    assert len(caught) == 1  # one warning for all the flat keywords
    message = str(caught[0].message)
    assert caught[0].filename == __file__  # it points at the caller's line
    for advice in ("workers=Workers(num_workers=0, num_threads=1, prefetch_queue_depth=1)",
                   "sampling=Sampling(last_batch='pad')", "op_runtime=OpRuntime(op_path='numpy'",
                   "format=BatchFormat(layout='NCHW', dtype='float32', normalize='scale')",
                   "bad_files=BadFiles(max_file_bytes=10000000)"):
        assert advice in message
    assert flat.config == grouped.config
    with grouped, flat:
        a, b = list(grouped), list(flat)
    assert len(a) == len(b) == 3 and a[-1]["is_pad"].any()
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k
    assert a[0]["image"].dtype == torch.float32 and a[0]["image"].shape == (5, 3, 12, 10)


def test_the_advice_is_exact_for_one_keyword(twelve):
    with pytest.warns(DeprecationWarning, match=r"pass workers=Workers\(num_workers=4\) "):
        Loader(twelve, batch_size=4, device="cpu", num_workers=4)


@pytest.mark.parametrize(("flat", "group"), [
    ({"num_workers": 0}, {"workers": Workers()}),
    ({"last_batch": "drop"}, {"sampling": Sampling()}),
    ({"op_path": "numpy"}, {"op_runtime": OpRuntime()}),
    ({"on_error": "skip"}, {"bad_files": BadFiles()}),
    ({"dtype": "float32"}, {"format": BatchFormat()}),
])
def test_a_flat_keyword_and_its_group_together_are_a_type_error(twelve, flat, group):
    key = next(iter(group))
    with pytest.raises(TypeError, match=rf"{next(iter(flat))} given both on its own and in "
                                        rf"{key}="):
        Loader(twelve, batch_size=4, device="cpu", **flat, **group)


def test_a_group_of_the_wrong_type_and_an_unknown_keyword_are_type_errors(twelve):
    with pytest.raises(TypeError, match=r"Loader: workers must be an extsrc\.Workers, got dict"):
        Loader(twelve, batch_size=4, device="cpu", workers={"num_workers": 0})
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['num_wrokers'\]"):
        Loader(twelve, batch_size=4, device="cpu", num_wrokers=0)


def test_a_bad_flat_value_is_refused_by_its_group(twelve):
    with pytest.raises(ValueError, match=r"Workers: num_workers must be >= 0"):
        Loader(twelve, batch_size=4, device="cpu", num_workers=-1)


def test_from_flat_puts_flat_keywords_over_a_callers_base():
    base = {"format": {"layout": "NCHW", "dtype": "float32"}}
    out = from_flat("f", {"format": None, "sampling": None}, {}, base=base)
    assert out == {"format": BatchFormat(layout="NCHW", dtype="float32"), "sampling": Sampling()}
    with pytest.warns(DeprecationWarning,
                      match=r"format=BatchFormat\(layout='NCHW', dtype='float16'\)"):
        out = from_flat("f", {"format": None}, {"dtype": "float16"}, base=base)
    assert out["format"] == BatchFormat(layout="NCHW", dtype="float16")
    given = BatchFormat()
    assert from_flat("f", {"format": given}, {}, base=base)["format"] is given


def test_presets_take_groups_and_map_flat_keywords(twelve):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = extsrc.train_loader(twelve, batch_size=4, crop=8, device="cpu",
                                workers=Workers(num_workers=0))
    assert t.config.sampling.last_batch == "drop" and t.config.format.layout == "NCHW"
    with pytest.warns(DeprecationWarning, match=r"train_loader: .*sampling=Sampling"
                                                r"\(last_batch='pad'\)") as caught:
        p = extsrc.train_loader(twelve, batch_size=4, crop=8, device="cpu", last_batch="pad",
                                workers=Workers(num_workers=0))
    assert caught[0].filename == __file__
    assert p.config.sampling.last_batch == "pad"
    assert p.config.format == t.config.format  # the preset's format still


# -- VideoLoader ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("videos")
    return extsrc.make_sample_videos(root, n=4)


def test_video_loader_flat_keywords_warn_and_give_the_same_config_and_batches(videos):
    common = dict(batch_size=2, sequence_length=3, device="cpu", shuffle=False, resize=16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grouped = extsrc.VideoLoader(
            videos, **common, workers=Workers(num_workers=0, num_threads=1),
            sampling=Sampling(last_batch="pad"), format=BatchFormat(dtype="float32"),
            bad_files=BadFiles(max_file_bytes=10**7))
    with pytest.warns(DeprecationWarning, match=r"VideoLoader: .*workers=Workers"
                                                r"\(num_workers=0, num_threads=1\)"):
        flat = extsrc.VideoLoader(videos, **common, num_workers=0, num_threads=1,
                                  last_batch="pad", dtype="float32", max_file_bytes=10**7)
    assert flat.config == grouped.config
    with grouped, flat:
        for x, y in zip(grouped, flat, strict=True):
            for k in x:
                assert torch.equal(x[k], y[k]), k
    with pytest.raises(TypeError, match=r"num_workers given both on its own and in workers="):
        extsrc.VideoLoader(videos, **common, num_workers=0, workers=Workers())


def test_video_loader_takes_clips_as_a_clip_spec(videos):
    spec = extsrc.ClipSpec(sequence_length=3, stride=2)
    kw = dict(batch_size=2, device="cpu", workers=Workers(num_workers=0))
    assert extsrc.VideoLoader(videos, clips=spec, **kw).clips == spec
    with pytest.raises(TypeError, match=r"stride given both on its own and in clips="):
        extsrc.VideoLoader(videos, clips=spec, stride=3, **kw)
    with pytest.raises(TypeError, match=r"VideoLoader needs sequence_length=N"):
        extsrc.VideoLoader(videos, **kw)


@pytest.mark.parametrize(("group", "match"), [
    ({"op_runtime": OpRuntime(op_path="native")}, r"op_runtime\.op_path='native' does not "
                                                  r"apply to video"),
    ({"workers": Workers(decoder="cpu")}, r"workers\.decoder='cpu' does not apply"),
    ({"bad_files": BadFiles(max_pixels=10)}, r"bad_files\.max_pixels=10 does not apply"),
    ({"format": BatchFormat(layout="NCHW")}, r"format\.layout='NCHW' does not apply .*NFCHW"),
])
def test_video_loader_refuses_group_fields_it_does_not_use(videos, group, match):
    with pytest.raises(ValueError, match=rf"VideoLoader: {match}"):
        extsrc.VideoLoader(videos, batch_size=2, sequence_length=3, device="cpu", **group)


# -- LoaderConfig is a value; path choice is the loader's step after it ------------------------


def test_building_a_config_neither_traces_nor_pickles_an_op():
    import threading

    import augment_ops
    from augment_ops.trace_cache import PER_OP
    from extsrc.loading.config import LoaderConfig
    from extsrc.loading.loader import plan_run

    lock = threading.Lock()  # a process pool cannot pickle it

    def locked(img):
        with lock:
            return img[::-1]

    op = augment_ops.Op(name="options_test_locked", fn=locked)
    config = LoaderConfig(batch_size=2, ops=(op,), op_runtime=OpRuntime(op_workers=2))
    assert op not in PER_OP  # not traced
    assert config.output_names == ("image", "options_test_locked_0", "label")
    assert config == LoaderConfig(batch_size=2, ops=(op,), op_runtime=OpRuntime(op_workers=2))
    with pytest.raises(ValueError, match=r"op 'options_test_locked' cannot be sent to op "
                                         r"worker processes"):
        plan_run(config)  # the explicit step: trace (for a path), then pickle for the pool
    assert op in PER_OP
    plan = plan_run(dataclasses.replace(config, op_runtime=OpRuntime(op_workers=2,
                                                                     op_pool="thread")))
    assert plan.paths == {"options_test_locked": "numpy"} and plan.op_pool_size == 2


def test_the_epoch_module_does_not_import_the_loader():
    import ast

    import extsrc.loading.epoch

    tree = ast.parse(Path(extsrc.loading.epoch.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.split(".")[:2] == ["extsrc", "loader"]}


def test_a_run_longer_than_a_batch_warns_naming_both(tmp_path):
    from helpers import sized_dataset

    manifest = sized_dataset(tmp_path, [(8, 8)] * 8)
    with pytest.warns(UserWarning, match=r"Sampling\(run_length=8\) is longer than "
                                         r"batch_size=4") as got:
        Loader(manifest, batch_size=4, sampling=Sampling(run_length=8), device="cpu").close()
    assert got[0].filename == __file__  # it points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Loader(manifest, batch_size=4, sampling=Sampling(run_length=4), device="cpu").close()
        Loader(manifest, batch_size=4, shuffle=False, sampling=Sampling(run_length=8),
               device="cpu").close()
