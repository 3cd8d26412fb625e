"""extsrc: feed PyTorch from any labelled file list through NVIDIA DALI's ExternalSource.

A manifest (CSV, TSV or ``path label`` text) is read by :func:`read_manifest`; the sharding
arithmetic lives in :func:`shard_indices`; :class:`ShardedSource` feeds raw bytes to DALI; and
:class:`Loader` builds the pipeline (decode -> your numpy ops from :mod:`augment_ops` -> resize)
and yields dicts of torch tensors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from extsrc import _moved

# Old module paths (extsrc.sources.manifest, ...) keep working for one release, with a warning.
_moved.install()

if TYPE_CHECKING:
    from extsrc._util.extras import MissingExtraError
    from extsrc.errors import (
        BadImageError,
        BadVideoError,
        DaliVersionError,
        ExtsrcError,
        MainGuardError,
        ManifestError,
        ManifestFileNotFoundError,
        OpError,
        OpOutputError,
        OpTimeoutError,
        OutputOverwritesInputError,
        PathOutsideRootError,
        PipelineError,
        SampleReadError,
        StateMismatchError,
        WorkerDiedError,
        WorkerStartError,
    )
    from extsrc.graph.batchformat import BatchFormat
    from extsrc.loading.config import METADATA_KEYS, LoaderConfig
    from extsrc.loading.loader import Loader
    from extsrc.loading.options import BadFiles, OpRuntime, Sampling, Workers
    from extsrc.loading.presets import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        TrainPreset,
        ValPreset,
        train_loader,
        val_loader,
    )
    from extsrc.loading.video import VideoLoader
    from extsrc.sources.imagecheck import DEFAULT_MAX_PIXELS
    from extsrc.sources.images import SOURCE_OUTPUTS, ShardedSource
    from extsrc.sources.manifest import Manifest
    from extsrc.sources.sharding import (
        LastBatch,
        ShardPlan,
        epoch_permutation,
        shard_indices,
        shard_plan,
    )
    from extsrc.sources.shards import ShardManifest, read_shards
    from extsrc.sources.table import read_manifest
    from extsrc.sources.video.clips import ClipSpec
    from extsrc.sources.video.probe import VideoInfo, probe_video
    from extsrc.tools.preview import render_batch
    from extsrc.tools.sample_data import make_sample_dataset
    from extsrc.tools.sample_videos import make_sample_videos
    from extsrc.validation.report import Problem, ValidationReport
    from extsrc.validation.validate import validate
    from extsrc.validation.videos import validate_videos

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "METADATA_KEYS",
    "SOURCE_OUTPUTS",
    "BadFiles",
    "BadImageError",
    "BadVideoError",
    "BatchFormat",
    "ClipSpec",
    "DaliVersionError",
    "ExtsrcError",
    "LastBatch",
    "Loader",
    "LoaderConfig",
    "MainGuardError",
    "Manifest",
    "ManifestError",
    "ManifestFileNotFoundError",
    "MissingExtraError",
    "OpError",
    "OpOutputError",
    "OpRuntime",
    "OpTimeoutError",
    "OutputOverwritesInputError",
    "PathOutsideRootError",
    "PipelineError",
    "Problem",
    "SampleReadError",
    "Sampling",
    "ShardManifest",
    "ShardPlan",
    "ShardedSource",
    "StateMismatchError",
    "TrainPreset",
    "ValPreset",
    "ValidationReport",
    "VideoInfo",
    "VideoLoader",
    "WorkerDiedError",
    "WorkerStartError",
    "Workers",
    "epoch_permutation",
    "make_sample_dataset",
    "make_sample_videos",
    "probe_video",
    "read_manifest",
    "read_shards",
    "render_batch",
    "shard_indices",
    "shard_plan",
    "train_loader",
    "val_loader",
    "validate",
    "validate_videos",
]

# Names are imported on first use (PEP 562): ``import extsrc.ops_runtime.worker`` in an op worker
# process, or ``extsrc.ops_runtime.hostresize`` when a worker unpickles its op, then costs no
# pandas, torch or DALI.
_WHERE: dict[str, str] = {
    "BatchFormat": "extsrc.graph.batchformat",
    "METADATA_KEYS": "extsrc.loading.config",
    "LoaderConfig": "extsrc.loading.config",
    "Problem": "extsrc.validation.report",
    "ValidationReport": "extsrc.validation.report",
    "validate": "extsrc.validation.validate",
    "BadImageError": "extsrc.errors",
    "BadVideoError": "extsrc.errors",
    "DaliVersionError": "extsrc.errors",
    "ExtsrcError": "extsrc.errors",
    "MainGuardError": "extsrc.errors",
    "ManifestError": "extsrc.errors",
    "ManifestFileNotFoundError": "extsrc.errors",
    "OpError": "extsrc.errors",
    "OpOutputError": "extsrc.errors",
    "OpTimeoutError": "extsrc.errors",
    "OutputOverwritesInputError": "extsrc.errors",
    "PathOutsideRootError": "extsrc.errors",
    "PipelineError": "extsrc.errors",
    "SampleReadError": "extsrc.errors",
    "StateMismatchError": "extsrc.errors",
    "WorkerDiedError": "extsrc.errors",
    "WorkerStartError": "extsrc.errors",
    "MissingExtraError": "extsrc._util.extras",
    "DEFAULT_MAX_PIXELS": "extsrc.sources.imagecheck",
    "Loader": "extsrc.loading.loader",
    "Manifest": "extsrc.sources.manifest",
    "read_manifest": "extsrc.sources.table",
    "BadFiles": "extsrc.loading.options",
    "OpRuntime": "extsrc.loading.options",
    "Sampling": "extsrc.loading.options",
    "Workers": "extsrc.loading.options",
    "IMAGENET_MEAN": "extsrc.loading.presets",
    "IMAGENET_STD": "extsrc.loading.presets",
    "TrainPreset": "extsrc.loading.presets",
    "ValPreset": "extsrc.loading.presets",
    "train_loader": "extsrc.loading.presets",
    "val_loader": "extsrc.loading.presets",
    "render_batch": "extsrc.tools.preview",
    "make_sample_dataset": "extsrc.tools.sample_data",
    "make_sample_videos": "extsrc.tools.sample_videos",
    "LastBatch": "extsrc.sources.sharding",
    "ShardPlan": "extsrc.sources.sharding",
    "epoch_permutation": "extsrc.sources.sharding",
    "shard_indices": "extsrc.sources.sharding",
    "shard_plan": "extsrc.sources.sharding",
    "SOURCE_OUTPUTS": "extsrc.sources.images",
    "ShardedSource": "extsrc.sources.images",
    "ShardManifest": "extsrc.sources.shards",
    "read_shards": "extsrc.sources.shards",
    "VideoLoader": "extsrc.loading.video",
    "validate_videos": "extsrc.validation.videos",
    "ClipSpec": "extsrc.sources.video.clips",
    "VideoInfo": "extsrc.sources.video.probe",
    "probe_video": "extsrc.sources.video.probe",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        old = _moved.moved_attribute(name)
        if old is not None:
            return old
        raise AttributeError(f"module 'extsrc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
