"""Checks of one encoded image file, shared by the source and the manifest doctor.

DALI cannot skip a sample once it is in a batch: its decoder raises and the pipeline is left
unusable. So every check that can name a bad file runs before DALI sees it:

* :func:`check_bytes` (header checks, no decoding: microseconds) runs in
  :class:`~extsrc.sources.images.ShardedSource` on every sample it reads: magic bytes, a format DALI
  decodes, the pixel count the header declares (a decompression-bomb guard), and the end-of-image
  structure (JPEG ``EOI`` after the first scan, PNG ``IEND``) that truncated files lack.
* :func:`check_file` adds the file-system checks of :mod:`extsrc.sources.fileread` (missing,
directory,
  not a regular file, larger than ``max_file_bytes``, unreadable, empty, outside the root) and,
  with ``decode=True``, a full decode (see :func:`decode_check` for what that finds).
  :func:`extsrc.validate` runs it over a whole manifest.

A problem is a :class:`Finding`: a reason code (one of :data:`REASONS`) and a message that says
what is wrong and how to fix it. Nothing here unpickles anything; files are only read as bytes and
parsed as images.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from dataclasses import dataclass
from typing import Any

from extsrc._util.textsafe import shown
from extsrc.sources.fileread import (
    DEFAULT_MAX_FILE_BYTES,
    FILE_REASONS,
    FileReadProblem,
    open_regular,
)
from extsrc.sources.where import reworded_fix, sample_where

__all__ = [
    "DALI_FORMATS",
    "DEFAULT_MAX_PIXELS",
    "REASONS",
    "Finding",
    "check_bytes",
    "check_file",
    "decode_check",
    "fix_for",
    "sniff_format",
]

#: Largest declared pixel count accepted by default: Pillow's decompression-bomb error threshold
#: (2 * ``PIL.Image.MAX_IMAGE_PIXELS``), about 13,377 x 13,377.
DEFAULT_MAX_PIXELS = 178_956_970

#: Reason codes and what they mean (the file-system ones come from :mod:`extsrc.sources.fileread`).
REASONS: dict[str, str] = {
    **{reason: meaning for reason, (meaning, _) in FILE_REASONS.items()},
    "not_an_image": "the file is not an image (no known image signature)",
    "unsupported_format": "an image format that DALI's decoder does not read",
    "too_large": "the header declares more pixels than max_pixels (decompression-bomb guard)",
    "truncated": "the file ends before the image data does",
    "corrupt": "the image data is damaged",
    "header_mismatch": "the image decodes to another shape than its header gives",
}

#: Formats DALI's image decoder reads (``fn.decoders.image``).
DALI_FORMATS = frozenset({"jpeg", "png", "bmp", "tiff", "webp", "jpeg2000", "pnm"})

_HEAD = 65536
_TAIL = 65536
_FIX = {
    **{reason: fix for reason, (_, fix) in FILE_REASONS.items()},
    "not_an_image": "replace it with the real image or drop the line",
    "unsupported_format": "convert it to JPEG or PNG, or drop the line",
    "too_large": "downscale the image, drop the line, or raise max_pixels if it is genuine",
    "truncated": "re-download or re-export the image, or drop the line",
    "corrupt": "re-download or re-export the image, or drop the line",
    "header_mismatch": "re-encode the image (save it again as JPEG or PNG), or drop the line",
}


@dataclass(frozen=True)
class Finding:
    """What is wrong with one file: a reason code from :data:`REASONS` and a message."""

    reason: str
    message: str

    @property
    def fix(self) -> str:
        """How to fix it, in a few words."""
        return fix_for(self.reason)

    def describe(self, *, source: str, line: int, path: str, prefix: str = "") -> str:
        """The one wording of a finding about a manifest sample:
        ``<manifest> line <n>: <path>: <prefix><what> [<reason>]; <how to fix it>``
        (``folder <root>/, sample <n>: ...`` for a folder dataset)."""
        return (
            f"{sample_where(source, line)}: {shown(path)}: {prefix}{self.message} "
            f"[{self.reason}]; {reworded_fix(self.fix, source)}"
        )


def fix_for(reason: str) -> str:
    """How to fix a problem with reason code ``reason`` (see :data:`REASONS`), in a few words."""
    return _FIX.get(reason, "drop the line")


class _Found(Exception):
    """A header parser found a problem: its :class:`Finding`, as fields."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.finding = Finding(reason, message)


class _NeedMore(Exception):
    """The head/tail windows are not enough to decide; read the whole file."""


def sniff_format(head: bytes) -> str | None:
    """The image format named by the first bytes (``"jpeg"``, ``"png"``, ...), else ``None``."""
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:2] == b"BM":
        return "bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:12] == b"\x00\x00\x00\x0cjP  \r\n\x87\n" or head[:4] == b"\xff\x4f\xff\x51":
        return "jpeg2000"
    if len(head) >= 3 and head[0:1] == b"P" and head[1:2] in b"123456" and head[2:3].isspace():
        return "pnm"
    if head[:4] in (b"\x00\x00\x01\x00",):
        return "ico"
    if head[:4] == b"8BPS":
        return "psd"
    if head[4:8] == b"ftyp" and head[8:12] in (b"heic", b"heix", b"mif1", b"avif", b"msf1"):
        return "heif"
    return None


# Signatures of common non-image files, named so that a message can say what a file seems to be
# without echoing any of its content (a manifest may name /etc/passwd or a private key).
_OTHER_FORMATS: tuple[tuple[bytes, str], ...] = (
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x80", "a Python pickle or other binary data"),
)


def _describe_start(head: bytes) -> str:
    """A guess at what a non-image file is, never any of its bytes."""
    for magic, name in _OTHER_FORMATS:
        if head.startswith(magic):
            return f"it looks like {name}"
    text = head[:512].lstrip()
    if text[:1] == b"<":
        return "it looks like HTML or XML text (an error page saved as an image?)"
    if text[:1] in (b"{", b"["):
        return "it looks like JSON text"
    try:
        decoded = head[:512].decode("utf-8")
    except UnicodeDecodeError as e:
        decoded = head[: e.start].decode("utf-8") if e.start > len(head[:512]) - 4 else None
    if decoded is not None and all(c.isprintable() or c in "\t\r\n" for c in decoded):
        return "it looks like text"
    return "unrecognised binary data"


# SOF markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_header(head: bytes, whole: bool) -> tuple[int, int, int]:
    """(width, height, offset of the first SOS marker) from the JPEG marker segments."""
    n = len(head)
    i = 2
    size: tuple[int, int] | None = None
    while True:
        if i + 4 > n:
            if whole:
                raise _Found("truncated", "the file ends inside the JPEG header")
            raise _NeedMore
        if head[i] != 0xFF:
            raise _Found("corrupt", f"JPEG header broken (no marker at byte {i})")
        marker = head[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # stand-alone markers
            i += 2
            continue
        if marker == 0xD9:
            raise _Found("corrupt", "JPEG ends (EOI marker) before any image data")
        seg = int.from_bytes(head[i + 2:i + 4], "big")
        if seg < 2:
            raise _Found("corrupt", f"JPEG header broken (segment length {seg} at byte {i})")
        if marker in _SOF:
            if i + 9 > n:
                if whole:
                    raise _Found("truncated", "the file ends inside the JPEG frame header")
                raise _NeedMore
            h = int.from_bytes(head[i + 5:i + 7], "big")
            w = int.from_bytes(head[i + 7:i + 9], "big")
            size = (w, h)
        elif marker == 0xDA:
            if size is None:
                raise _Found("corrupt", "JPEG has image data but no frame header (SOF)")
            return size[0], size[1], i
        i += 2 + seg


def _png_header(head: bytes) -> tuple[int, int]:
    if len(head) < 33:
        raise _Found("truncated", "the file ends inside the PNG header")
    if head[12:16] != b"IHDR":
        raise _Found("corrupt", "PNG does not start with an IHDR chunk")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _pil_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                return im.size
    except Image.DecompressionBombError as e:
        raise _Found("too_large", str(e)) from None
    except Exception as e:  # PIL raises many types for bad headers
        raise _Found("corrupt", f"cannot read the image header ({type(e).__name__}: {e})") \
            from None


def _check(head: bytes, tail: bytes, size: int, max_pixels: int | None) -> Finding | None:
    """Header and structure checks on the first and last bytes of a file of ``size`` bytes.

    ``head`` is the whole file when ``len(head) == size``. Raises :class:`_NeedMore` when the
    windows cannot decide.
    """
    whole = len(head) >= size
    fmt = sniff_format(head)
    if fmt is None:
        return Finding(
            "not_an_image", f"not an image file (no known image signature; {_describe_start(head)})"
        )
    if fmt not in DALI_FORMATS:
        return Finding(
            "unsupported_format",
            f"{fmt.upper()} image, which DALI's decoder does not read (it reads "
            f"{', '.join(sorted(DALI_FORMATS))})",
        )
    try:
        if fmt == "jpeg":
            w, h, sos = _jpeg_header(head, whole)
        elif fmt == "png":
            w, h = _png_header(head)
        else:
            if not whole:
                raise _NeedMore
            w, h = _pil_size(head)
    except _Found as e:
        return e.finding
    if w <= 0 or h <= 0:
        return Finding("corrupt", f"{fmt.upper()} header declares an empty image ({w}x{h})")
    if max_pixels is not None and w * h > max_pixels:
        return Finding(
            "too_large",
            f"header declares {w}x{h} = {w * h:,} pixels, more than max_pixels={max_pixels:,} "
            "(decompression-bomb guard)",
        )
    if fmt == "jpeg":
        # EOI (FF D9) must follow the first scan. Inside entropy-coded data 0xFF is always
        # followed by 00 or a restart marker, so a later FF D9 is the real end of the image;
        # trailing bytes after it are allowed (DALI and Pillow accept them).
        k = tail.rfind(b"\xff\xd9")
        if k < 0 or size - len(tail) + k <= sos:
            if not whole and k < 0:
                raise _NeedMore
            return Finding("truncated", "JPEG has no end-of-image marker (FF D9) after its data")
    elif fmt == "png":
        k = tail.rfind(b"IEND")
        if k < 4 or tail[k - 4:k] != b"\x00\x00\x00\x00":
            if not whole and k < 0:
                raise _NeedMore
            return Finding("truncated", "PNG has no IEND chunk (the file ends early)")
    return None


def check_bytes(data: bytes, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Finding | None:
    """Header and structure checks of a whole encoded file held in memory (no decoding)."""
    if not data:
        return Finding("empty", "the file is empty (0 bytes)")
    data = bytes(data) if not isinstance(data, bytes) else data
    return _check(data, data, len(data), max_pixels)


# libjpeg's warnings (it prints them and carries on, so Pillow and DALI return an image) that mean
# the compressed data is damaged. Others ("Unknown Adobe color transform", "unknown JFIF
# revision", "bad ICC marker") leave the pixels intact and are not findings.
_LIBJPEG_TRUNCATED = ("Premature end of JPEG file",)
_LIBJPEG_CORRUPT = (
    "Corrupt JPEG data",  # bad Huffman/arithmetic code, premature end, extraneous bytes, ...
    "Inconsistent progression sequence",
    "Invalid SOS parameters",
)
_LIBJPEG_HARMLESS = ("Corrupt JPEG data: bad ICC marker",)
_UNDECIDED = object()


def _libjpeg_check(data: bytes) -> object:
    """Decode a JPEG with libjpeg-turbo (``simplejpeg``) treating its corrupt-data warnings as
    errors: a :class:`Finding`, ``None`` (clean), or ``_UNDECIDED`` (let Pillow decide: an error
    that is not about damaged data, or ``simplejpeg`` missing)."""
    try:
        import simplejpeg
    except ImportError:
        return _UNDECIDED
    try:
        colorspace = simplejpeg.decode_jpeg_header(data)[2]
        target = {"Gray": "GRAY", "CMYK": "CMYK", "YCCK": "CMYK"}.get(colorspace, "RGB")
        simplejpeg.decode_jpeg(data, colorspace=target, strict=True)
    except ValueError as e:
        text = str(e).strip()
        if text.startswith(_LIBJPEG_TRUNCATED):
            return Finding("truncated", f"the JPEG data ends early (libjpeg: {text})")
        if text.startswith(_LIBJPEG_CORRUPT) and not text.startswith(_LIBJPEG_HARMLESS):
            return Finding(
                "corrupt", f"the JPEG's compressed data is damaged (libjpeg: {text})"
            )
        return _UNDECIDED
    return None


# PNG colour types: samples per pixel.
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# Adam7 interlacing passes: (first column, first row, column step, row step).
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
          (0, 1, 1, 2))


def _png_expected_bytes(w: int, h: int, depth: int, colour: int, interlace: int) -> int | None:
    """Bytes of filtered scanlines a PNG of this header holds once inflated (``None``: a
    header this check does not know)."""
    channels = _PNG_CHANNELS.get(colour)
    if channels is None or depth not in (1, 2, 4, 8, 16):
        return None
    bits = channels * depth

    def rows(cols: int, n: int) -> int:
        return 0 if cols <= 0 or n <= 0 else n * (1 + (cols * bits + 7) // 8)

    if interlace == 0:
        return rows(w, h)
    if interlace != 1:
        return None
    return sum(rows(-(-(w - x0) // dx), -(-(h - y0) // dy)) for x0, y0, dx, dy in _ADAM7)


def _png_data_check(data: bytes) -> Finding | None:
    """Inflate a PNG's IDAT stream and compare its length with what the header declares.

    libpng (DALI's PNG decoder) refuses a stream that ends before the last scanline ("Not enough
    image data") while Pillow fills the missing rows with zeros without a word, so only this
    count finds such a file before DALI meets it. Bytes are counted, not kept."""
    try:
        w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    except struct.error:
        return None
    expected = _png_expected_bytes(w, h, depth, colour, interlace)
    if expected is None:
        return None
    inflate = zlib.decompressobj()
    got, i, n = 0, 8, len(data)
    try:
        while i + 8 <= n and got <= expected:
            length = int.from_bytes(data[i:i + 4], "big")
            kind = data[i + 4:i + 8]
            if kind == b"IDAT":
                chunk = data[i + 8:i + 8 + length]
                while chunk and got <= expected:
                    got += len(inflate.decompress(chunk, 1 << 20))
                    chunk = inflate.unconsumed_tail
            elif kind == b"IEND":
                break
            i += 12 + length
        got += len(inflate.flush()) if got <= expected else 0
    except zlib.error:
        return None  # a damaged stream: Pillow's decode reports it, in its words
    if got < expected:
        return Finding(
            "truncated",
            f"the PNG's compressed image data ends early: it inflates to {got:,} of the "
            f"{expected:,} bytes its {w}x{h} header needs (libpng, DALI's decoder: \"Not enough "
            "image data\"; Pillow fills the missing rows with black)",
        )
    return None


def decode_check(data: bytes) -> Finding | None:
    """Fully decode ``data``; a failure is ``truncated`` or ``corrupt``.

    JPEGs are decoded by libjpeg-turbo (the ``simplejpeg`` package) with its warnings taken as
    errors, because libjpeg *warns* about damaged compressed data ("Corrupt JPEG data: ...") and
    returns an image anyway, as Pillow and DALI do: random or zeroed entropy-coded data decodes
    to noise or grey without any error. It finds damaged Huffman/arithmetic codes, data that
    ends before the last block (``premature end of data segment``), data that decodes in fewer
    bytes than the scan holds (``N extraneous bytes before marker``; a few encoders also write
    such bytes into otherwise whole images, and those are reported too), wrong restart markers
    and inconsistent progressive scans. It cannot find damage that still decodes consistently
    (replaced bytes that happen to form valid codes of the right total length: an image whose
    pixels are wrong but whose data is well-formed), nor damage in metadata it ignores (EXIF,
    ICC). PNGs first have their compressed image data inflated and counted: a stream that ends
    before the last scanline is refused by libpng, DALI's decoder ("Not enough image data"),
    while Pillow decodes it with the missing rows black. Other formats, JPEGs libjpeg-turbo does
    not read, and PNGs past that count are decoded with Pillow, which finds only what makes its
    decoder fail.
    """
    fmt = sniff_format(data[:16])
    if fmt == "jpeg":
        verdict = _libjpeg_check(data)
        if verdict is not _UNDECIDED:
            return verdict  # type: ignore[return-value]
    elif fmt == "png":
        finding = _png_data_check(data)
        if finding is not None:
            return finding
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                im.load()
    except Image.DecompressionBombError:
        return None  # the caller's max_pixels is above Pillow's; the header check passed
    except Image.UnidentifiedImageError:
        return Finding("corrupt", "the image data cannot be parsed (Pillow cannot identify it)")
    except Exception as e:
        text = f"{type(e).__name__}: {e}"
        low = text.lower()
        if "truncated" in low or "premature end" in low or isinstance(e, EOFError):
            return Finding("truncated", f"the image data ends early (decoder: {text})")
        return Finding("corrupt", f"the image data cannot be decoded ({text})")
    return None


def check_file(
    path: str,
    *,
    decode: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    root_real: str | None = None,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
    storage: Any = None,
    data: bytes | FileReadProblem | None = None,
) -> Finding | None:
    """Every check of one file: file system, header, structure and (``decode``) a full decode.

    A URL ``path`` is read through ``storage`` (an :class:`extsrc.sources.storage.Storage`;
    default: one with the environment's credentials), or its bytes (or the problem reading them)
    are given as ``data`` when a caller read several at once.

    The file is opened with :func:`extsrc.sources.fileread.open_regular`, as the loader opens it:
    only a regular file of at most ``max_file_bytes`` bytes is read. ``root_real``: the resolved
    root folder the file must stay inside (symlinks followed), or ``None``. Returns ``None`` for
    a good file.
    """
    from extsrc.sources.storage import Storage, is_url

    if data is not None or is_url(path):
        try:
            if isinstance(data, FileReadProblem):
                raise data
            if data is None:
                data = (storage or Storage()).read(path, max_bytes=max_file_bytes)
        except FileReadProblem as e:
            return Finding(e.reason, e.message)
        finding = check_bytes(data, max_pixels=max_pixels)
        return decode_check(data) if finding is None and decode else finding
    try:
        f, size = open_regular(path, max_bytes=max_file_bytes, root_real=root_real)
    except FileReadProblem as e:
        return Finding(e.reason, e.message)
    if size == 0:
        f.close()
        return Finding("empty", "the file is empty (0 bytes)")
    try:
        with f:
            if decode or size <= _HEAD + _TAIL:
                data = f.read()
                head = tail = data
                size = len(data)
            else:
                head = f.read(_HEAD)
                f.seek(size - _TAIL)
                tail = f.read(_TAIL)
                data = b""
            try:
                finding = _check(head, tail, size, max_pixels)
            except _NeedMore:
                f.seek(0)
                data = f.read()
                size = len(data)
                finding = _check(data, data, size, max_pixels)
    except OSError as e:
        return Finding("unreadable", f"cannot read the file: {e.strerror or e}")
    if finding is None and decode:
        finding = decode_check(data)
    return finding
