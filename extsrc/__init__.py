"""extsrc: feed PyTorch from any labelled file list through NVIDIA DALI's ExternalSource.

A manifest (CSV, TSV or ``path label`` text) is read by :func:`read_manifest`; the sharding
arithmetic lives in :func:`shard_indices`; :class:`ShardedSource` feeds raw bytes to DALI; and
:class:`Loader` builds the pipeline (decode -> your numpy ops from :mod:`augment_ops` -> resize)
and yields dicts of torch tensors.
"""

from extsrc.errors import (
    ExtsrcError,
    ManifestError,
    ManifestFileNotFoundError,
    OpError,
    SampleReadError,
)
from extsrc.loader import METADATA_KEYS, Loader, LoaderConfig
from extsrc.manifest import Manifest, read_manifest
from extsrc.sharding import LastBatch, ShardPlan, epoch_permutation, shard_indices, shard_plan
from extsrc.source import SOURCE_OUTPUTS, ShardedSource

__version__ = "0.1.0"

__all__ = [
    "METADATA_KEYS",
    "SOURCE_OUTPUTS",
    "ExtsrcError",
    "LastBatch",
    "Loader",
    "LoaderConfig",
    "Manifest",
    "ManifestError",
    "ManifestFileNotFoundError",
    "OpError",
    "SampleReadError",
    "ShardPlan",
    "ShardedSource",
    "epoch_permutation",
    "read_manifest",
    "shard_indices",
    "shard_plan",
]
