"""extsrc: feed PyTorch from any labelled file list through NVIDIA DALI's ExternalSource.

A manifest (CSV, TSV or ``path label`` text) is read by :func:`read_manifest`; the sharding
arithmetic lives in :func:`shard_indices`; :class:`ShardedSource` feeds raw bytes to DALI; and
:class:`Loader` builds the pipeline (decode -> your numpy ops from :mod:`augment_ops` -> resize)
and yields dicts of torch tensors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from extsrc.batchformat import BatchFormat
    from extsrc.config import METADATA_KEYS, LoaderConfig
    from extsrc.doctor import Problem, ValidationReport, validate
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
    from extsrc.extras import MissingExtraError
    from extsrc.imagecheck import DEFAULT_MAX_PIXELS
    from extsrc.loader import Loader
    from extsrc.manifest import Manifest, read_manifest
    from extsrc.presets import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        TrainPreset,
        ValPreset,
        train_loader,
        val_loader,
    )
    from extsrc.preview import render_batch
    from extsrc.sample_data import make_sample_dataset
    from extsrc.sample_videos import make_sample_videos
    from extsrc.sharding import LastBatch, ShardPlan, epoch_permutation, shard_indices, shard_plan
    from extsrc.source import SOURCE_OUTPUTS, ShardedSource
    from extsrc.sources.shards import ShardManifest, read_shards
    from extsrc.video import VideoLoader
    from extsrc.videocheck import validate_videos
    from extsrc.videoclips import ClipSpec
    from extsrc.videoprobe import VideoInfo, probe_video

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "METADATA_KEYS",
    "SOURCE_OUTPUTS",
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
    "OpTimeoutError",
    "OutputOverwritesInputError",
    "PathOutsideRootError",
    "PipelineError",
    "Problem",
    "SampleReadError",
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

# Names are imported on first use (PEP 562): ``import extsrc.opworker`` in an op worker process,
# or ``extsrc.hostresize`` when a worker unpickles its op, then costs no pandas, torch or DALI.
_WHERE: dict[str, str] = {
    "BatchFormat": "extsrc.batchformat",
    "METADATA_KEYS": "extsrc.config",
    "LoaderConfig": "extsrc.config",
    "Problem": "extsrc.doctor",
    "ValidationReport": "extsrc.doctor",
    "validate": "extsrc.doctor",
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
    "MissingExtraError": "extsrc.extras",
    "DEFAULT_MAX_PIXELS": "extsrc.imagecheck",
    "Loader": "extsrc.loader",
    "Manifest": "extsrc.manifest",
    "read_manifest": "extsrc.manifest",
    "IMAGENET_MEAN": "extsrc.presets",
    "IMAGENET_STD": "extsrc.presets",
    "TrainPreset": "extsrc.presets",
    "ValPreset": "extsrc.presets",
    "train_loader": "extsrc.presets",
    "val_loader": "extsrc.presets",
    "render_batch": "extsrc.preview",
    "make_sample_dataset": "extsrc.sample_data",
    "make_sample_videos": "extsrc.sample_videos",
    "LastBatch": "extsrc.sharding",
    "ShardPlan": "extsrc.sharding",
    "epoch_permutation": "extsrc.sharding",
    "shard_indices": "extsrc.sharding",
    "shard_plan": "extsrc.sharding",
    "SOURCE_OUTPUTS": "extsrc.source",
    "ShardedSource": "extsrc.source",
    "ShardManifest": "extsrc.sources.shards",
    "read_shards": "extsrc.sources.shards",
    "VideoLoader": "extsrc.video",
    "validate_videos": "extsrc.videocheck",
    "ClipSpec": "extsrc.videoclips",
    "VideoInfo": "extsrc.videoprobe",
    "probe_video": "extsrc.videoprobe",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'extsrc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
