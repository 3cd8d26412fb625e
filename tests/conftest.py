"""Shared fixtures: small real image datasets written to disk, and the GPU marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import has_gpu, write_dataset


@pytest.fixture
def png_dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path, 23, fmt="png")


@pytest.fixture
def mixed_dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path, 23, fmt="mixed", label_fn=lambda i: [300, 70000, 7][i % 3])


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# DALI's worker processes inherit this; keeps BLAS from oversubscribing the 2-core CI machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
