"""A held-out set of augmentations copied from public libraries, to measure the tracer on code
it was not tuned against.

The ops of ``tests/realops`` are the corpus the tracer is extended against; these are new ones
(none in the corpus, by name or by source), chosen as a user picks augmentations (common colour,
flip, crop, pad, noise, erasing and normalisation ops of each library), not by what the tracer
can do. They are written, adapted and tabled exactly as the corpus's (see ``realops``): each
module registers its ops with ``realops.realop`` and holds an ``EXPECT`` table and a
``KNOWN_FAILURES`` table. ``tests/test_realops.py`` holds the tracer to both sets and
``benchmarks/realops_report.py --set holdout`` prints this set's share. Imported as
``realops_holdout``, with ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import realops
from realops import RealOp

MODULES = ("albumentations_ops", "torchvision_ops", "timm_ops", "imgaug_ops", "mm_ops",
           "paddle_ops", "keras_ops", "dino_ops", "ultralytics_ops", "detectron2_ops",
           "randaugment_ops")


def holdout() -> list[RealOp]:
    """Every op of the held-out set, module by module, in source order."""
    return realops.collection(__name__, MODULES)


def expected() -> dict[str, str]:
    """The ``EXPECT`` tables of every module of the held-out set, merged."""
    return realops.expected(__name__, MODULES)


def known_failures() -> dict[str, str]:
    """The ``KNOWN_FAILURES`` tables of every module of the held-out set, merged."""
    return realops.known_failures(__name__, MODULES)
