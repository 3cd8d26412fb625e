"""Counter-based uniform draws: a pure hash of (seed, epoch, sample index, salt, slot).

The random numbers of traced (native) random ops (:mod:`extsrc.ops_runtime.seeding` re-exports
them) and the starts of random video clips (:mod:`extsrc.sources.video.clips`) both come from
here, so a dataset's sources need nothing of the op runtime for them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["counter_uniform", "name_salt"]


def name_salt(name: str) -> int:
    """A stable 32-bit salt for a name (Python's ``hash`` differs between processes)."""
    return zlib.crc32(name.encode("utf-8"))


# -- counter-based draws: the random numbers of traced (native) random ops ---------------------
# splitmix64's constants: the golden-ratio increment and the two finaliser multipliers.
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1


def _mix(z: Any, c: Callable[[int], Any]) -> Any:
    """splitmix64's finaliser on uint64 values (``c`` makes a uint64 constant)."""
    z = (z ^ (z >> c(30))) * c(_MIX1)
    z = (z ^ (z >> c(27))) * c(_MIX2)
    return z ^ (z >> c(31))


def _op_key(seed: int, salt: int) -> int:
    c = np.uint64
    with np.errstate(over="ignore"):
        salted = _mix(np.array([(int(salt) + _GOLDEN) & _MASK64], np.uint64), c)
        return int(_mix(np.array([int(seed) & _MASK64], np.uint64) ^ salted, c)[0])


def _draws(index: Any, epoch: Any, key: int, slot: int, c: Callable[[int], Any]) -> Any:
    """The uint64 draw of ``slot`` for samples (index, epoch) of the op keyed ``key``."""
    z = _mix(c(key) ^ index, c)
    z = _mix(z + epoch * c(_GOLDEN), c)
    return _mix(z + c(((slot + 1) * _GOLDEN) & _MASK64), c)


def counter_uniform(seed: int, epoch: Any, index: Any, salt: int, slot: int) -> np.ndarray:
    """Uniform draws in [0, 1) of a traced random op, vectorised over ``epoch`` and ``index``.

    A pure function of (seed, epoch, manifest index, op salt, draw slot): splitmix64 over the
    sample's identity, 53 bits to a float64. The traced path calls this very function in the
    source's reader processes (``augment_ops.lower_dali.SampleScalars`` through
    ``extsrc.sources.images.ReaderValues``), so :func:`counter_rng` replays it on numpy bit for bit.
    (The same hash as DALI uint64 arithmetic operators took about 20 operators per op and made a
    traced ``random_crop`` 3.5x slower on the CPU: 14 ms against 4 ms per batch of 32 224x224
    images.)
    """
    idx = np.asarray(index, dtype=np.int64).astype(np.uint64)
    ep = np.asarray(epoch, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = _draws(idx, ep, _op_key(seed, salt), slot, np.uint64)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53
