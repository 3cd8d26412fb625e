"""``make_sample_videos``: a small folder dataset of videos, written with Pillow alone.

Motion JPEG in AVI, which DALI decodes on the CPU and the GPU: every frame a JPEG (Pillow) in a
RIFF container written here (``avih``/``strh``/``strf`` headers, a ``movi`` list, an ``idx1``
index). Two classes, ``right/`` and ``down/``: a square moving that way.
"""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

__all__ = ["make_sample_videos", "write_mjpeg_avi"]


def _chunk(fourcc: bytes, payload: bytes) -> bytes:
    pad = b"\x00" if len(payload) % 2 else b""
    return fourcc + struct.pack("<I", len(payload)) + payload + pad


def _list(kind: bytes, payload: bytes) -> bytes:
    return _chunk(b"LIST", kind + payload)


def write_mjpeg_avi(path: str | os.PathLike[str], jpegs: list[bytes], width: int, height: int,
                    fps: int = 25) -> Path:
    """Write JPEG-encoded frames as a Motion JPEG AVI file."""
    n = len(jpegs)
    largest = max(len(j) for j in jpegs)
    avih = struct.pack("<14I", 1_000_000 // fps, largest * fps, 0, 0x10, n, 0, 1, largest,
                       width, height, 0, 0, 0, 0)
    strh = struct.pack("<4s4sIHHIIIIIIIIhhhh", b"vids", b"MJPG", 0, 0, 0, 0, 1, fps, 0, n,
                       largest, 0xFFFFFFFF, 0, 0, 0, width, height)
    strf = struct.pack("<IiiHH4sIiiII", 40, width, height, 1, 24, b"MJPG", width * height * 3,
                       0, 0, 0, 0)
    hdrl = _list(b"hdrl", _chunk(b"avih", avih) + _list(b"strl", _chunk(b"strh", strh)
                                                        + _chunk(b"strf", strf)))
    frames, index, offset = [], [], 4  # idx1 offsets count from the 'movi' fourcc
    for j in jpegs:
        c = _chunk(b"00dc", j)
        index.append(struct.pack("<4sIII", b"00dc", 0x10, offset, len(j)))
        frames.append(c)
        offset += len(c)
    body = b"AVI " + hdrl + _list(b"movi", b"".join(frames)) + _chunk(b"idx1", b"".join(index))
    path = Path(path)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


def make_sample_videos(root: str | os.PathLike[str], n: int = 8, *, frames: int = 32,
                       size: tuple[int, int] = (64, 96)) -> Path:
    """Write ``n`` videos of ``frames`` frames of ``size`` (height, width) under
    ``root/right/`` and ``root/down/`` (a folder dataset: ``VideoLoader(root, ...)``); returns
    ``root``. Frame ``i`` of each video shows the square moved ``i`` pixels, on a grey
    background of level ``4 * i``."""
    from PIL import Image, ImageDraw

    root = Path(root)
    h, w = size
    for k in range(n):
        cls = ("right", "down")[k % 2]
        (root / cls).mkdir(parents=True, exist_ok=True)
        jpegs = []
        for i in range(frames):
            img = Image.new("RGB", (w, h), (4 * i % 256,) * 3)
            x, y = (i + k, h // 3) if cls == "right" else (w // 3, i + k)
            ImageDraw.Draw(img).rectangle([x, y, x + 12, y + 12], fill=(230, 40, 40))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            jpegs.append(buf.getvalue())
        write_mjpeg_avi(root / cls / f"{k:03d}.avi", jpegs, w, h)
    return root
