"""Which frames a clip holds: ``ClipSpec`` (the clip policy, checked at construction) and
:func:`clip_start`, the pure function that picks a clip's first frame.

A clip is ``sequence_length`` frames taken every ``stride`` frames, so it spans
``(sequence_length - 1) * stride + 1`` frames of the video. For a video of ``n`` frames the first
frame ``s`` of a clip that fits lies in ``[0, n - span]``:

============  ==========================================================================
``clip``      first frame of clip ``k`` of ``clips_per_video`` (``K``)
============  ==========================================================================
``"random"``  uniform in ``[0, n - span]``, drawn from (seed, epoch, manifest index, k) by a
              counter-based hash (:func:`extsrc._util.counters.counter_uniform`): the same clip
              for the same sample and epoch in any process, another one the next epoch
``"uniform"`` ``round(k * (n - span) / (K - 1))``: ``K`` clips spread from the first frame to
              the last (``K = 1``: the centre clip)
``"center"``  ``(n - span) // 2`` (``K`` must be 1)
============  ==========================================================================

Videos shorter than one span: ``short_videos="error"`` (default) refuses them, naming the
manifest line, the frame count and the span; ``"pad"`` starts the clip at frame 0 and repeats
the last frame for the frames past the end (DALI's ``pad_mode="edge"``); the batch's
``num_frames`` says how many frames the video had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from extsrc._util import argcheck
from extsrc._util.counters import counter_uniform, name_salt

__all__ = ["ClipPolicy", "ClipSpec", "ShortVideoError", "ShortVideos", "clip_start"]

ClipPolicy = Literal["random", "uniform", "center"]
ShortVideos = Literal["error", "pad"]

#: Salt of the clip-start draws: apart from every op's draws.
_CLIP_SALT = name_salt("extsrc.loading.video.clip_start")
#: Largest ``sequence_length``, ``stride`` and ``clips_per_video`` accepted.
MAX_SEQUENCE_LENGTH = 4096
MAX_STRIDE = 1 << 16
MAX_CLIPS_PER_VIDEO = 1024


class ShortVideoError(ValueError):
    """A video has fewer frames than one clip spans (``num_frames`` < ``span``)."""

    def __init__(self, num_frames: int, span: int) -> None:
        super().__init__(f"the video has {num_frames} frames, fewer than the {span} one clip spans")
        self.num_frames = num_frames
        self.span = span


@dataclass(frozen=True)
class ClipSpec:
    """The clips a :class:`~extsrc.loading.video.VideoLoader` cuts from each video (see the
    module)."""

    sequence_length: int
    stride: int = 1
    clip: ClipPolicy = "random"
    clips_per_video: int = 1
    short_videos: ShortVideos = "error"

    def __post_init__(self) -> None:
        for name, top in (("sequence_length", MAX_SEQUENCE_LENGTH), ("stride", MAX_STRIDE),
                          ("clips_per_video", MAX_CLIPS_PER_VIDEO)):
            object.__setattr__(self, name, argcheck.check_int(
                getattr(self, name), f"VideoLoader: {name}", minimum=1, maximum=top))
        for name, allowed in (("clip", get_args(ClipPolicy)),
                              ("short_videos", get_args(ShortVideos))):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise (ValueError if isinstance(value, str) else TypeError)(
                    f"VideoLoader: {name} must be one of {list(allowed)}, got "
                    f"{type(value).__name__} {value!r}"
                )
        if self.clip == "center" and self.clips_per_video != 1:
            raise ValueError(
                f"VideoLoader: clip='center' gives one clip per video, got clips_per_video="
                f"{self.clips_per_video}; use clip='uniform' for several evenly spaced clips or "
                "clip='random' for several random ones"
            )

    @property
    def span(self) -> int:
        """Frames of the video one clip covers, first to last taken."""
        return (self.sequence_length - 1) * self.stride + 1

    def frames(self, start: int) -> list[int]:
        """The frame numbers a clip starting at ``start`` holds (past the end: padded)."""
        return [start + f * self.stride for f in range(self.sequence_length)]


def clip_start(spec: ClipSpec, num_frames: int, *, seed: int, epoch: int, index: int,
               clip: int) -> int:
    """The first frame of clip ``clip`` of manifest sample ``index`` in ``epoch``, for a video of
    ``num_frames`` frames: a pure function of its arguments (see the module for the rules).

    Raises :class:`ShortVideoError` when the video is shorter than one span and
    ``spec.short_videos == "error"``; with ``"pad"`` such a clip starts at 0.
    """
    room = num_frames - spec.span
    if room < 0:
        if spec.short_videos == "error":
            raise ShortVideoError(num_frames, spec.span)
        return 0
    if spec.clip == "random":
        u = float(counter_uniform(seed, epoch, index, _CLIP_SALT, clip))
        return min(int(u * (room + 1)), room)
    if spec.clip == "uniform" and spec.clips_per_video > 1:
        return round(clip * room / (spec.clips_per_video - 1))
    return room // 2
