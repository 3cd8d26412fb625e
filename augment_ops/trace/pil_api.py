"""PIL images of traced arrays: ``Image.fromarray(img)`` while tracing gives a
:class:`TracedImage`, which does exactly what PIL does for the methods listed on it (flips and
quarter turns, crops inside the image, ``point`` with a constant table or function, and so
``ImageOps.posterize``/``solarize``/``invert``, ``ImageOps.autocontrast`` (without cutoff:
:mod:`.pil_autocontrast`), ``ImageOps.equalize`` (without a mask: :mod:`.pil_equalize`),
conversions between ``L`` and ``RGB`` and
between ``RGB`` and ``HSV`` (:mod:`.pil_color`), ``Image.merge`` of traced bands,
``Image.blend`` (and so ``ImageEnhance.Brightness``/``Color``), ``Image.new`` of the traced
image's size, ``paste`` inside the image, and so ``ImageOps.expand``, and filled
``ImageDraw`` rectangles), and
``np.asarray(img)``/``np.array(img)`` give the traced array back. Any other PIL call on it is
refused naming it. Only ``uint8`` images of modes ``L`` (HxW), ``RGB`` and ``HSV`` (HxWx3) are
traced.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from augment_ops.trace.combine import _np_stack
from augment_ops.trace.creation import CREATION, canvas
from augment_ops.trace.facts import _at_most, _nonneg
from augment_ops.trace.indexing import padded_slice
from augment_ops.trace.ir import MadeWithoutImage, TraceError
from augment_ops.trace.lookup import NUMPY_CALLS, lookup
from augment_ops.trace.numpy_api import _np_rot90
from augment_ops.trace.pairwise import made_new
from augment_ops.trace.pil_autocontrast import autocontrast_bands
from augment_ops.trace.pil_color import hsv_from_rgb_pil, rgb_from_hsv_pil
from augment_ops.trace.pil_equalize import equalize_bands, model_holds
from augment_ops.trace.sym import Sym, _dim, _dim_sym, _dop, cast_node, raise_where, ufunc

#: What a PIL method not lowered would need, where there is more to say.
_WHY_NOT: dict[str, str] = {
    "resize": "PIL's resampling filters differ from DALI's resize",
    "rotate": "PIL's rotation by an angle resamples with its own arithmetic",
    "filter": "PIL's filters have no exact DALI equivalent",
    "transform": "PIL's resampling differs from DALI's warps",
    "histogram": "a histogram of the pixels, which DALI's operators cannot compute "
                 "(ImageOps.autocontrast without a cutoff and ImageOps.equalize lower, called "
                 "as ImageOps' own)",
}


def _gray(x: Sym) -> Sym:
    """PIL's RGB -> L: ``(19595 R + 38470 G + 7471 B + 0x8000) >> 16`` (checked against PIL on
    every RGB triple)."""
    r, g, b = (Sym(cast_node(x[..., c]._checked(), np.int64)) for c in range(3))
    acc = ufunc("add", ufunc("add", ufunc("add", ufunc("multiply", r, 19595),
                                          ufunc("multiply", g, 38470)),
                             ufunc("multiply", b, 7471)), 0x8000)
    return Sym(cast_node(ufunc("floor_divide", acc, 1 << 16).node, np.uint8))


class TracedImage:
    """A PIL image of a traced uint8 array (``L``: HxW, ``RGB``: HxWx3)."""

    def __init__(self, arr: Sym, mode: str) -> None:
        self._arr = Sym(made_new(arr._checked()))  # PIL's own row-major copy of the pixels
        self.mode = mode

    # -- what PIL images tell
    @property
    def size(self) -> tuple[Any, Any]:
        return self._arr.shape[1], self._arr.shape[0]

    @property
    def width(self) -> Any:
        return self._arr.shape[1]

    @property
    def height(self) -> Any:
        return self._arr.shape[0]

    def getbands(self) -> tuple[str, ...]:
        return tuple(self.mode)

    @property
    def palette(self) -> None:
        return None  # as PIL's for its L, RGB and HSV images

    @property
    def info(self) -> dict[str, Any]:
        return {}  # as Image.fromarray's: no transparency, no metadata

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        why = _WHY_NOT.get(name, "not lowered: only transpose, crop inside the image, point, "
                                 "convert between L and RGB and between RGB and HSV, split, "
                                 "copy and np.asarray are")
        raise TraceError(f"PIL Image.{name} on a traced image ({why}); the op runs on the "
                         "numpy path")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TraceError("a traced PIL image converted to an array outside the op's module (use "
                         "np.asarray(img) in the op's own code)")

    # -- lowered methods
    def copy(self) -> TracedImage:
        return TracedImage(self._arr, self.mode)

    def transpose(self, method: int) -> TracedImage:
        a = self._arr
        if isinstance(method, Sym):
            raise TraceError("PIL Image.transpose with a per-sample method (use an if)")
        swap = (1, 0, 2) if a.ndim == 3 else (1, 0)
        out = {0: lambda: a[:, ::-1], 1: lambda: a[::-1], 2: lambda: _np_rot90(a, 1),
               3: lambda: _np_rot90(a, 2), 4: lambda: _np_rot90(a, 3),
               5: lambda: a.transpose(swap), 6: lambda: a.transpose(swap)[::-1, ::-1]}.get(
            int(method))
        if out is None:
            raise TraceError(f"PIL Image.transpose({method})")
        return TracedImage(out(), self.mode)

    def crop(self, box: Any = None) -> TracedImage:
        if box is None:
            return self.copy()
        left, upper, right, lower = box
        for v in box:
            if not (isinstance(v, (int, np.integer)) or (isinstance(v, Sym) and v.ndim == 0
                    and v.dtype.kind in "iu")):
                raise TraceError(f"PIL Image.crop with a box coordinate of type "
                                 f"{type(v).__name__} (only integers are lowered)")
        h, w = (_dim(d) if isinstance(d, Sym) else d for d in self._arr.shape[:2])
        x0, y0, x1, y1 = (_dim(v) for v in (left, upper, right, lower))
        if _nonneg(x0) and _nonneg(y0) and _at_most(x0, x1) and _at_most(y0, y1) \
                and _at_most(x1, w) and _at_most(y1, h):
            return TracedImage(self._arr[upper:lower, left:right], self.mode)
        # A box that may reach outside the image: PIL fills the part outside with zeros (a
        # padded slice) and raises for a box of negative size.
        raise_where(ufunc("less", _dim_sym(x1), _dim_sym(x0)), ValueError,
                    "Coordinate 'right' is less than 'left'")
        raise_where(ufunc("less", _dim_sym(y1), _dim_sym(y0)), ValueError,
                    "Coordinate 'lower' is less than 'upper'")
        a = self._arr._checked()
        fill = np.zeros(a.shape[2:], a.dtype)
        return TracedImage(Sym(padded_slice(a, y0, x0, _dop("subtract", y1, y0),
                                            _dop("subtract", x1, x0), fill)), self.mode)

    def point(self, lut: Any, mode: str | None = None) -> TracedImage:
        from PIL import Image

        # PIL applies a table (or a function evaluated on 0..255) per band; the table it really
        # uses, with its conversions and clipping of the entries, is read off PIL itself on a
        # ramp of every value.
        bands = len(self.mode)
        ramp = np.arange(256, dtype=np.uint8).reshape(1, 256)
        if bands > 1:
            ramp = np.repeat(ramp[..., None], bands, axis=2)
        try:
            # PIL calls a function on 0..255 for 8-bit images and applies the values as a list.
            values = [lut(i) for i in range(256)] if callable(lut) else \
                lut if isinstance(lut, (list, tuple)) else ()
            if any(isinstance(v, Sym) for v in values):
                raise TraceError("per-sample")
            table = np.asarray(Image.fromarray(ramp).point(lut, mode))
        except TraceError:
            raise TraceError("PIL Image.point with a per-sample table (PIL needs its numbers "
                             "when the op is traced; a table built with numpy from np.arange "
                             "and the draws, indexed as table[np.asarray(img)], traces)"
                             ) from None
        except Exception as e:
            raise TraceError(f"PIL Image.point with a table PIL refuses ({type(e).__name__}: "
                             f"{e})") from None
        if table.dtype != np.uint8 or table.shape != ramp.shape:
            raise TraceError(f"PIL Image.point to mode {mode!r} (only 8-bit results are "
                             "lowered)")
        if bands == 1:
            return TracedImage(lookup(table[0], self._arr), self.mode)
        return TracedImage(_np_stack([lookup(table[0, :, c], self._arr[..., c])
                                      for c in range(bands)], axis=-1), self.mode)

    def convert(self, mode: str | None = None, *args: Any, **kwargs: Any) -> TracedImage:
        if args or kwargs:
            raise TraceError("PIL Image.convert with a matrix, dither or palette")
        if mode is None or mode == self.mode:
            return self.copy()
        if (self.mode, mode) == ("L", "RGB"):
            return TracedImage(_np_stack([self._arr] * 3, axis=-1), "RGB")
        if (self.mode, mode) == ("RGB", "L"):
            return TracedImage(_gray(self._arr), "L")
        if (self.mode, mode) in (("RGB", "HSV"), ("HSV", "RGB")):
            return TracedImage((hsv_from_rgb_pil if mode == "HSV" else rgb_from_hsv_pil)(
                self._arr), mode)
        raise TraceError(f"PIL Image.convert from {self.mode} to {mode} (only L <-> RGB and "
                         "RGB <-> HSV are lowered)")

    def split(self) -> tuple[TracedImage, ...]:
        if self.mode == "L":
            return (self.copy(),)
        return tuple(TracedImage(self._arr[..., c], "L") for c in range(len(self.mode)))

    def getdraw(self, mode: str | None = None, hints: Any = None) -> _TracedDraw:
        """What ``ImageDraw.Draw(img)`` gives for a traced image (:class:`_TracedDraw`)."""
        if mode not in (None, self.mode) or hints is not None or self.mode not in ("L", "RGB"):
            raise TraceError(f"PIL ImageDraw.Draw of a traced {self.mode} image in mode {mode!r}")
        return _TracedDraw(self)

    def paste(self, im: Any, box: Any = None, mask: Any = None) -> None:
        """``self.paste(im, (left, top))`` of a traced image of the same mode lying inside
        this one (``ImageOps.expand`` pastes the image into a new one of its size plus the
        borders): its region replaced by ``im``'s pixels. PIL clips an image reaching outside,
        which is refused here where the tracer cannot show it does not."""
        what = ("PIL Image.paste other than of a traced image of the same mode, without a "
                "mask, at an upper left corner where the tracer shows it lies inside the "
                "destination (PIL clips what falls outside)")
        box = (0, 0) if box is None else box
        if not isinstance(im, TracedImage) or im.mode != self.mode or mask is not None or \
                not isinstance(box, (tuple, list)) or len(box) != 2:
            raise TraceError(what)
        left, top = (_dim(v) for v in box)
        src, dst = im._arr.node.shape, self._arr.node.shape
        if not (_nonneg(left) and _nonneg(top) and _at_most(_dop("add", top, src[0]), dst[0])
                and _at_most(_dop("add", left, src[1]), dst[1])):
            raise TraceError(what)
        out = Sym(self._arr._checked())
        out[_dim_sym(top):_dim_sym(_dop("add", top, src[0])),
            _dim_sym(left):_dim_sym(_dop("add", left, src[1]))] = im._arr
        self._arr = Sym(out._checked())


class _TracedDraw:
    """``ImageDraw.Draw(img)`` of a traced image: ``rectangle`` filled with a constant colour
    (RandAugment's Cutout); its other drawing calls are refused naming them."""

    def __init__(self, image: TracedImage) -> None:
        self._image = image

    def rectangle(self, xy: Any, fill: Any = None, outline: Any = None, width: int = 1) -> None:
        """Pillow's filled rectangle (Draw.c): the corners truncated to integers as C's
        ``(int)`` does, rows ``y0..y1`` and columns ``x0..x1`` inclusive, clipped to the image;
        ValueError where ``x1 < x0`` or ``y1 < y0``, as Pillow raises."""
        img = self._image
        channels = 3 if img.mode == "RGB" else None
        if fill is None or (outline is not None and outline != fill) or _traced_in(fill) or \
                isinstance(fill, str) or np.shape(fill) != ((channels,) if channels else ()) or \
                not all(isinstance(v, (int, np.integer)) and 0 <= v <= 255
                        for v in np.ravel(fill).tolist()):
            raise TraceError("PIL ImageDraw rectangle other than filled with a constant colour "
                             "(an int for L, a tuple of three ints for RGB) without another "
                             "outline")
        flat = list(xy) if not isinstance(xy[0], (tuple, list)) else [*xy[0], *xy[1]]
        if len(flat) != 4:
            raise ValueError("coordinate list must contain exactly 2 coordinates")
        x0, y0, x1, y1 = (_c_int(v) for v in flat)
        raise_where(ufunc("less", flat[2], flat[0]), ValueError,
                    "x1 must be greater than or equal to x0")
        raise_where(ufunc("less", flat[3], flat[1]), ValueError,
                    "y1 must be greater than or equal to y0")
        lo = [ufunc("maximum", v, 0) for v in (y0, x0)]
        hi = [ufunc("maximum", ufunc("add", v, 1), 0) for v in (y1, x1)]
        out = Sym(img._arr._checked())
        out[lo[0]:hi[0], lo[1]:hi[1]] = np.asarray(fill, np.uint8)
        img._arr = Sym(out._checked())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(f"PIL ImageDraw.{name} on a traced image (only rectangle filled with a "
                         "constant colour is lowered)")


def _c_int(v: Any) -> Any:
    """C's ``(int)`` of a coordinate: a float truncated toward zero, as an int64."""
    if isinstance(v, Sym):
        if v.ndim or v.dtype.kind not in "iuf":
            raise TraceError("PIL ImageDraw with a coordinate that is not a number")
        return Sym(cast_node((ufunc("trunc", v) if v.dtype.kind == "f" else v).node, np.int64))
    return int(v)


def _fromarray(obj: Any, mode: str | None = None) -> TracedImage:
    if obj.dtype != np.uint8 or obj.ndim not in (2, 3) or (obj.ndim == 3 and \
            obj.node.shape[2] != 3):
        raise TraceError(f"PIL Image.fromarray of a {obj.dtype} array of rank {obj.ndim} (only "
                         "uint8 HxW and HxWx3 images are lowered)")
    inferred = "L" if obj.ndim == 2 else "RGB"
    if obj.ndim == 3 and mode == "HSV":  # the bytes of an HSV image, as PIL takes them
        inferred = mode
    if mode not in (None, inferred):
        raise TraceError(f"PIL Image.fromarray with mode {mode!r} of a {inferred} array")
    return TracedImage(obj, inferred)


_REAL: dict[str, Any] = {}


def _wrapped_fromarray(real: Any) -> Any:
    def fromarray(obj: Any, mode: str | None = None) -> Any:
        if isinstance(obj, Sym):
            return _fromarray(obj, mode)
        return real(obj, mode) if mode is not None else real(obj)
    fromarray.__wrapped__ = real  # type: ignore[attr-defined]
    return fromarray


def _wrapped_merge(real: Any) -> Any:
    def merge(mode: str, bands: Any) -> Any:
        if not any(isinstance(b, TracedImage) for b in bands):
            return real(mode, bands)
        if mode not in ("RGB", "HSV") or len(bands) != 3 or not all(
                isinstance(b, TracedImage) and b.mode == "L" for b in bands):
            raise TraceError(f"PIL Image.merge to {mode!r} of other than three traced L bands")
        return TracedImage(_np_stack([b._arr for b in bands], axis=-1), mode)
    merge.__wrapped__ = real  # type: ignore[attr-defined]
    return merge


def _traced_in(value: Any) -> bool:
    """Whether ``value`` is, or a tuple or list holds, a traced value."""
    if isinstance(value, (tuple, list)):
        return any(_traced_in(v) for v in value)
    return isinstance(value, (Sym, TracedImage))


def _wrapped_new(real: Any) -> Any:
    def new(mode: str, size: Any, *args: Any, **kwargs: Any) -> Any:
        # A blank image of constant size and colour is what PIL makes; pasting a traced image
        # onto it is refused by paste itself. One of a per-sample size (the image's: the
        # degenerate image of ImageEnhance.Brightness) and a constant colour is a new array of
        # that size, each pixel the colour PIL gives a 1x1 image. One whose colour is
        # per-sample cannot be made while tracing (PIL needs the numbers), and is made without
        # the image.
        if _traced_in(size) and not (_traced_in(args) or _traced_in(list(kwargs.values()))) \
                and mode in ("L", "RGB") and isinstance(size, (tuple, list)) and len(size) == 2:
            if (args[:1] or [kwargs.get("color", 0)])[0] is None:
                raise TraceError("PIL Image.new(color=None) of a per-sample size (PIL leaves "
                                 "its pixels uninitialised)")
            pixel = np.asarray(real(mode, (1, 1), *args, **kwargs))[0, 0]
            shape = (size[1], size[0]) + ((3,) if mode == "RGB" else ())
            return TracedImage(canvas(shape, pixel, np.dtype(np.uint8)), mode)
        colour = (args[:1] or [kwargs.get("color", 0)])[0]
        if mode == "L" and _traced_in(size) and isinstance(size, (tuple, list)) \
                and len(size) == 2 and isinstance(colour, Sym) and colour.ndim == 0 \
                and colour.dtype.kind in "iu" and not args[1:] and set(kwargs) <= {"color"}:
            # ImageEnhance.Contrast's grey image of the image's mean: PIL clips an integer
            # colour of an L image to 0..255.
            ink = Sym(cast_node(ufunc("minimum", ufunc("maximum", colour, 0), 255).node,
                                np.uint8))
            blank = canvas((size[1], size[0]), np.uint8(0), np.dtype(np.uint8))
            return TracedImage(ufunc("add", blank, ink), "L")
        if _traced_in(size) or _traced_in(args) or _traced_in(list(kwargs.values())):
            raise MadeWithoutImage(
                "PIL Image.new of a per-sample colour, or of a per-sample size in a mode other "
                "than L and RGB (a blank image made without the traced one: PIL needs its "
                "numbers when the op is traced, and a traced graph makes its images from the "
                "input image; to pad with zeros, crop with a box reaching outside the image, "
                "img.crop((-left, -top, width + right, height + bottom)), and to blend with a "
                "colour, write the blend as numpy arithmetic on np.asarray(img): both lower)")
        return real(mode, size, *args, **kwargs)
    new.__wrapped__ = real  # type: ignore[attr-defined]
    return new


def _blend_model_holds(real: Any) -> bool:
    """Whether this Pillow's ``Image.blend`` of 8-bit images computes what :func:`_blend`
    does: ``in1 + alpha * (in2 - in1)`` in float32 (a multiplication, then an addition, each
    rounded), clipped to 0..255 and truncated. Its C code says so, but a compiler may fuse the
    two into one multiply-add (where the processor has one), which rounds once: checked on
    every pair of values for alphas inside and outside [0, 1], once per process."""
    if "blend" not in _BLEND_CHECKED:
        import PIL.Image

        a = np.repeat(np.arange(256, dtype=np.uint8), 256).reshape(256, 256)
        b = np.ascontiguousarray(a.T)
        im1 = PIL.Image.frombytes("L", (256, 256), a.tobytes())
        im2 = PIL.Image.frombytes("L", (256, 256), b.tobytes())
        diff = (b.astype(np.int32) - a.astype(np.int32)).astype(np.float32)
        holds = True
        for alpha in [*np.random.default_rng(7).uniform(-1.5, 2.5, 24).tolist(), 0.3, 0.7]:
            t = a.astype(np.float32) + np.float32(alpha) * diff
            want = np.clip(t, 0, 255).astype(np.uint8)
            holds = holds and np.array_equal(np.asarray(real(im1, im2, alpha)), want)
        _BLEND_CHECKED["blend"] = holds
    return _BLEND_CHECKED["blend"]


_BLEND_CHECKED: dict[str, bool] = {}


def _blend(im1: TracedImage, im2: TracedImage, alpha: Any) -> TracedImage:
    """PIL's ``Image.blend`` of two traced 8-bit images (Blend.c): each value
    ``in1 + alpha * (in2 - in1)`` computed in float32 with ``alpha`` rounded to float32,
    clipped to 0..255 and truncated to uint8. PIL raises ValueError for images of different
    modes or sizes, and so does the traced op."""
    if im1.mode != im2.mode:
        raise ValueError("images do not match")
    if im1.mode not in ("L", "RGB"):
        raise TraceError(f"PIL Image.blend of {im1.mode} images")
    if isinstance(alpha, Sym) and (alpha.ndim or alpha.dtype.kind not in "iuf"):
        raise TraceError("PIL Image.blend with an alpha that is not one number")
    a, b = im1._arr, im2._arr
    for ax in (0, 1):
        da, db = a.node.shape[ax], b.node.shape[ax]
        if not (da is db or (isinstance(da, int) and isinstance(db, int) and da == db)):
            raise_where(ufunc("not_equal", _dim_sym(da), _dim_sym(db)),
                        ValueError, "images do not match")
    weight = Sym(cast_node(alpha.node, np.float32)) if isinstance(alpha, Sym) else \
        np.float32(alpha)
    diff = Sym(cast_node(ufunc("subtract", Sym(cast_node(b._checked(), np.int32)),
                               Sym(cast_node(a._checked(), np.int32))).node, np.float32))
    t = ufunc("add", Sym(cast_node(a._checked(), np.float32)), ufunc("multiply", weight, diff))
    t = ufunc("minimum", ufunc("maximum", t, np.float32(0)), np.float32(255))
    return TracedImage(Sym(cast_node(t.node, np.uint8)), im1.mode)


def _wrapped_blend(real: Any) -> Any:
    def blend(im1: Any, im2: Any, alpha: Any) -> Any:
        if not _traced_in([im1, im2, alpha]):
            return real(im1, im2, alpha)
        if not (isinstance(im1, TracedImage) and isinstance(im2, TracedImage)):
            raise TraceError("PIL Image.blend of a traced image with an image made without it "
                             "(only two traced images, or images made from the traced one, "
                             "are blended)")
        if not _blend_model_holds(real):
            raise TraceError("PIL Image.blend (this Pillow computes it otherwise than in "
                             "float32 with a multiplication and an addition, each rounded, "
                             "probably fused into one multiply-add: DALI does not reproduce "
                             "it)")
        return _blend(im1, im2, alpha)
    blend.__wrapped__ = real  # type: ignore[attr-defined]
    return blend


_WRAPPERS = {"fromarray": _wrapped_fromarray, "merge": _wrapped_merge, "new": _wrapped_new,
             "blend": _wrapped_blend}


class TracedStat:
    """``PIL.ImageStat.Stat`` of a traced image: per band, ``count``, ``sum``, ``mean`` and
    ``extrema``, as PIL computes them from the histogram: integer counts and sums (Python ints
    there, int64 here, exact), the mean their quotient, ``0`` for an empty band (float64 of
    both is exact below 2**53, and the division rounds as Python's does). The other statistics
    (``median``, ``rms``, ``var``, ``stddev``, ``sum2``) are refused."""

    def __init__(self, image: TracedImage) -> None:
        self.bands = list(range(len(image.mode)))
        self._bands = [b._arr for b in image.split()]

    @functools.cached_property
    def count(self) -> list[Any]:
        out = []
        for b in self._bands:
            n = _dop("multiply", _dim(b.shape[0]), _dim(b.shape[1]))
            out.append(np.int64(n) if isinstance(n, int) else Sym(n))
        return out

    @functools.cached_property
    def sum(self) -> list[Sym]:
        return [Sym(cast_node(b.sum().node, np.int64)) for b in self._bands]

    @functools.cached_property
    def mean(self) -> list[Sym]:
        out = []
        for s, c in zip(self.sum, self.count, strict=True):
            # an empty band: its sum is 0, and 0 / max(0, 1) is PIL's 0
            count = Sym(cast_node(c.node, np.float64)) if isinstance(c, Sym) else np.float64(c)
            denom = ufunc("maximum", count, np.float64(1))
            out.append(ufunc("divide", Sym(cast_node(s.node, np.float64)), denom))
        return out

    @functools.cached_property
    def extrema(self) -> list[tuple[Sym, Sym]]:
        return [(Sym(cast_node(b.min().node, np.int64)), Sym(cast_node(b.max().node, np.int64)))
                for b in self._bands]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise TraceError(f"PIL ImageStat.Stat.{name} of a traced image (only count, sum, mean "
                         "and extrema are lowered: the others need float sums of squares or "
                         "the histogram)")


def _wrapped_stat(real: Any) -> Any:
    def Stat(image_or_list: Any, mask: Any = None) -> Any:  # PIL's class name
        if isinstance(image_or_list, TracedImage) and mask is None:
            if image_or_list.mode not in ("L", "RGB"):
                raise TraceError(f"PIL ImageStat.Stat of a traced {image_or_list.mode} image")
            return TracedStat(image_or_list)
        return real(image_or_list, mask)
    Stat.__wrapped__ = real  # type: ignore[attr-defined]
    return Stat


def _wrapped_autocontrast(real: Any) -> Any:
    def autocontrast(image: Any, cutoff: Any = 0, ignore: Any = None, mask: Any = None,
                     preserve_tone: bool = False) -> Any:
        if not isinstance(image, TracedImage):
            return real(image, cutoff, ignore, mask, preserve_tone)
        if cutoff or ignore is not None or mask is not None or preserve_tone:
            raise TraceError("PIL ImageOps.autocontrast of a traced image with cutoff, ignore, "
                             "mask or preserve_tone (its histogram's clipped tails have no "
                             "DALI equivalent; without them it lowers)")
        if image.mode not in ("L", "RGB"):
            raise TraceError(f"PIL ImageOps.autocontrast of a traced {image.mode} image")
        return TracedImage(autocontrast_bands(image._arr), image.mode)
    autocontrast.__wrapped__ = real  # type: ignore[attr-defined]
    return autocontrast


def _wrapped_equalize(real: Any) -> Any:
    def equalize(image: Any, mask: Any = None) -> Any:
        if not isinstance(image, TracedImage):
            return real(image, mask)
        if mask is not None:
            raise TraceError("PIL ImageOps.equalize of a traced image with a mask (a histogram "
                             "of the masked pixels; without a mask it lowers)")
        if image.mode not in ("L", "RGB"):
            raise TraceError(f"PIL ImageOps.equalize of a traced {image.mode} image")
        if not model_holds(real):
            raise TraceError("PIL ImageOps.equalize of a traced image: this Pillow's tables "
                             "differ from the rule the tracer knows (augment_ops.trace."
                             "pil_equalize), so its result cannot be reproduced")
        return TracedImage(equalize_bands(image._arr), image.mode)
    equalize.__wrapped__ = real  # type: ignore[attr-defined]
    return equalize


def install_pil() -> Any:
    """Replace ``PIL.Image.fromarray``, ``PIL.Image.merge``, ``PIL.Image.new``,
    ``PIL.Image.blend``, ``PIL.ImageStat.Stat`` and ``PIL.ImageOps.autocontrast`` (when PIL is
    imported); returns what restores them."""
    image = sys.modules.get("PIL.Image")
    if image is None:
        return None
    for name, wrap in _WRAPPERS.items():
        _REAL[name] = getattr(image, name)
        setattr(image, name, wrap(_REAL[name]))
    # ImageEnhance imports ImageStat: replaced where it is loaded, as the Image functions are
    stat = sys.modules.get("PIL.ImageStat")
    if stat is not None:
        _REAL["ImageStat.Stat"] = stat.Stat
        stat.Stat = _wrapped_stat(stat.Stat)
    ops = sys.modules.get("PIL.ImageOps")
    if ops is not None:
        _REAL["ImageOps.autocontrast"] = ops.autocontrast
        ops.autocontrast = _wrapped_autocontrast(ops.autocontrast)
        _REAL["ImageOps.equalize"] = ops.equalize
        ops.equalize = _wrapped_equalize(ops.equalize)

    def restore() -> None:
        for name in _WRAPPERS:
            setattr(image, name, _REAL.pop(name))
        if stat is not None:
            stat.Stat = _REAL.pop("ImageStat.Stat")
        if ops is not None:
            ops.autocontrast = _REAL.pop("ImageOps.autocontrast")
            ops.equalize = _REAL.pop("ImageOps.equalize")
    return restore


def as_array(x: Any, dtype: Any = None, writable: bool = True) -> Sym:
    """``np.asarray(img)`` / ``np.array(img)`` of a :class:`TracedImage`: its array (read-only
    from ``np.asarray``, as PIL gives it)."""
    arr = x._arr if dtype is None else x._arr.astype(dtype)
    return Sym(arr._checked(), writable=writable)


def _image_aware(real: Any, writable: bool) -> Any:
    def f(a: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(a, TracedImage):
            if args[1:] or set(kwargs) - {"dtype", "copy"}:
                raise TraceError("np.asarray/np.array of a traced PIL image with arguments "
                                 "other than dtype")
            return as_array(a, kwargs.get("dtype", args[0] if args else None), writable)
        return real(a, *args, **kwargs)
    f.__name__ = f.__qualname__ = getattr(real, "__name__", "array")
    return f


NUMPY_CALLS["array"] = _image_aware(NUMPY_CALLS.get("array", np.array), True)
NUMPY_CALLS["asarray"] = _image_aware(NUMPY_CALLS.get("asarray", CREATION["asarray"]), False)
NUMPY_CALLS["asanyarray"] = _image_aware(NUMPY_CALLS.get("asanyarray", CREATION["asanyarray"]),
                                         False)
