"""Per-sample random generators, derived from (seed, epoch, sample index, salt) and nothing else.

A random op must give the same result for the same sample whatever process, thread or order runs
it, so there is no global ``np.random`` and no counter: each call builds its generator from the
sample's identity.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["name_salt", "sample_rng"]


def name_salt(name: str) -> int:
    """A stable 32-bit salt for a name (Python's ``hash`` differs between processes)."""
    return zlib.crc32(name.encode("utf-8"))


def sample_rng(seed: int, epoch: int, index: int, salt: int = 0) -> np.random.Generator:
    """The generator a random op uses for manifest sample ``index`` in ``epoch``.

    ``salt`` separates ops, so two random ops on one sample do not draw the same numbers.
    """
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(epoch), int(index), int(salt)])
    return np.random.Generator(np.random.PCG64(ss))
