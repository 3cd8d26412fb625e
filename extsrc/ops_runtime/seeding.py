"""Per-sample random generators, derived from (seed, epoch, sample index, salt) and nothing else.

A random op must give the same result for the same sample whatever process, thread or order runs
it, so there is no global ``np.random`` and no counter: each call builds its generator from the
sample's identity.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "counter_rng", "counter_uniform", "name_salt", "op_salt", "sample_rng",
]


def name_salt(name: str) -> int:
    """A stable 32-bit salt for a name (Python's ``hash`` differs between processes)."""
    return zlib.crc32(name.encode("utf-8"))


def op_salt(name: str, occurrence: int = 0) -> int:
    """The generator salt of the ``occurrence``-th use (0-based) of op ``name`` in one loader.

    The first use salts with the name alone; later uses of the same op (two random crops for
    two views, say) get their own streams instead of repeating the first one's draws.
    """
    return name_salt(name if occurrence == 0 else f"{name}#{occurrence}")


def sample_rng(seed: int, epoch: int, index: int, salt: int = 0) -> np.random.Generator:
    """The generator a random op uses for manifest sample ``index`` in ``epoch``.

    ``salt`` separates ops, so two random ops on one sample do not draw the same numbers.
    """
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(epoch), int(index), int(salt)])
    return np.random.Generator(np.random.PCG64(ss))


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


def counter_rng(seed: int, epoch: int, index: int, salt: int = 0) -> Any:
    """The generator whose draws a traced random op makes for one sample on the native path
    (``augment_ops.trace.DrawRng`` over :func:`counter_uniform`):
    ``op.apply(img, counter_rng(...))`` gives the native path's result on numpy."""
    from augment_ops.trace import DrawRng

    return DrawRng(lambda slot: float(counter_uniform(seed, epoch, index, salt, slot)))
