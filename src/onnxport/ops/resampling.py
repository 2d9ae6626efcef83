"""Resampling: upsample/interpolate (nearest, linear, cubic, antialiased), pixel
shuffle/unshuffle and 3-D grid sampling (grid_sampler_3d).

The 2-D grid_sampler is in sampling.py, which reuses `_grid_sample_gather` from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list, rank
from onnxport.ops._layers import _compute_dtype, _dim, _div, _HALF, _mul, _schema_doc, _separable
from onnxport.translate import GraphBuilder, Tensor, aten, register


# -- upsampling ------------------------------------------------------------------------------

def _resize(g: GraphBuilder, x: Tensor, n: int, output_size: Any, scales: Sequence[Any] | None,
            mode: str, align_corners: bool = False) -> Tensor:
    """ONNX Resize with torch's source-index rule for `mode`.

    nearest:       src = floor(dst * in/out)            -> asymmetric + floor
    nearest-exact: src = floor((dst + 0.5) * in/out)    -> half_pixel + round_prefer_ceil
    linear/cubic:  src = (dst + 0.5) * in/out - 0.5     -> half_pixel (or align_corners)
    Given scale factors, torch uses 1/scale as in/out, as ONNX does with `scales`.
    """
    dtype = x.dtype
    assert dtype is not None
    if mode.endswith("_aa"):
        return _resize_antialiased(g, x, n, output_size, scales, mode == "cubic_aa", align_corners)
    compute = _compute_dtype(x) if mode != "nearest" and mode != "nearest-exact" else dtype
    if compute in (ir.DataType.INT64, ir.DataType.INT16, ir.DataType.BOOL):
        compute = ir.DataType.FLOAT  # ORT Resize has no kernels for these
    if compute in _HALF:
        compute = ir.DataType.FLOAT
    attrs: dict[str, Any] = {}
    if mode == "nearest":
        attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                 "nearest_mode": "floor"}
    elif mode == "nearest-exact":
        attrs = {"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                 "nearest_mode": "round_prefer_ceil"}
    else:
        attrs = {"mode": mode, "coordinate_transformation_mode":
                 "align_corners" if align_corners else "half_pixel"}
        if mode == "cubic":
            attrs["cubic_coeff_a"] = -0.75
    xc = cast(g, x, compute)
    use_scales = scales is not None and len(scales) > 0 and all(s is not None for s in scales)
    if use_scales and output_size is not None and x.shape is not None:
        # the .default overloads pass both; scales decide the source index only if they also
        # give torch's output size (floor(in * scale)), which ONNX derives from them
        sizes_in = [x.shape[2 + i] for i in range(n)]
        if any(not isinstance(v, int) or isinstance(o, ir.Value) or math.floor(v * float(s)) != o
               for v, s, o in zip(sizes_in, scales, output_size)):
            use_scales = False
    if use_scales:
        assert scales is not None
        scale_list = [float(s) for s in scales] * (n if len(scales) == 1 and n > 1 else 1)
        y = g.op("Resize", xc, None, g.const([1.0, 1.0, *scale_list], ir.DataType.FLOAT), **attrs)
    else:
        if output_size is None:
            raise TranslationError("upsample without output_size or scale factors")
        sizes = int_list(g, [_dim(g, x, 0), _dim(g, x, 1), *output_size])
        y = g.op("Resize", xc, None, None, sizes, **attrs)
    return cast(g, y, dtype)


def _aa_filter(x: np.ndarray, is_cubic: bool) -> np.ndarray:
    """torch's antialiasing filters: the triangle, or Keys' cubic with a = -0.5 (PIL's)."""
    x = np.abs(x)
    one = x.dtype.type(1.0)
    if not is_cubic:
        return np.where(x < one, one - x, x.dtype.type(0.0))
    a = x.dtype.type(-0.5)
    near = ((a + 2) * x - (a + 3)) * x * x + one
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < one, near, np.where(x < 2, far, x.dtype.type(0.0)))


def _aa_matrix(size: int, out: int, scale_factor: float | None, align_corners: bool,
               is_cubic: bool, dtype: type) -> np.ndarray:
    """The (in, out) weights of torch's antialiased resampling along one axis.

    As aten/src/ATen/native/cpu/UpSampleKernel.cpp computes them, in the input's precision
    (`dtype`): output i reads inputs [xmin, xmin + xsize) around center = scale * (i + 0.5),
    the filter stretched by the scale when downsampling, its weights normalized to sum to 1.
    """
    if align_corners:
        scale = dtype((size - 1) / (out - 1) if out > 1 else 0.0)
    elif scale_factor is not None and scale_factor > 0:
        scale = dtype(1.0 / scale_factor)
    else:
        scale = dtype(size / out)
    interp_size = 4 if is_cubic else 2
    support = dtype(interp_size * 0.5) * scale if scale >= 1.0 else dtype(interp_size * 0.5)
    invscale = dtype(1.0) / scale if scale >= 1.0 else dtype(1.0)
    matrix = np.zeros((size, out), dtype=dtype)
    for i in range(out):
        center = scale * dtype(i + 0.5)
        xmin = max(int(center - support + dtype(0.5)), 0)
        xmax = min(int(center + support + dtype(0.5)), size)
        js = np.arange(xmin, xmax).astype(dtype)
        w = _aa_filter((js - center + dtype(0.5)) * invscale, is_cubic).astype(dtype)
        total = dtype(0.0)
        for v in w:  # torch sums the taps in order
            total = dtype(total + v)
        matrix[xmin:xmax, i] = w / total if total != 0 else w
    return matrix


def _resize_antialiased(g: GraphBuilder, x: Tensor, n: int, output_size: Any,
                        scales: Sequence[Any] | None, is_cubic: bool, align_corners: bool) -> Tensor:
    """torch's antialiased bilinear/bicubic resize as a separable product of weight matrices.

    ONNX Resize's `antialias` places and normalizes its filter taps differently from torch
    (up to 0.27 apart on a 11x9 -> 5x7 bilinear resize in ONNX Runtime), so torch's weights
    are computed here for the static sizes.
    """
    dtype = x.dtype
    assert dtype is not None
    r = rank(x)
    sizes = [x.shape[r - n + i] for i in range(n)] if x.shape is not None else []
    if len(sizes) != n or not all(isinstance(v, int) for v in sizes):
        raise TranslationError("antialiased upsampling of dynamic spatial sizes")
    factors = list(scales) if scales else [None] * n
    factors = factors * n if len(factors) == 1 else factors
    if output_size is None:
        if any(f is None for f in factors):
            raise TranslationError("upsample without output_size or scale factors")
        outs = [math.floor(v * float(f)) for v, f in zip(sizes, factors)]
    else:
        if any(isinstance(o, ir.Value) for o in output_size):
            raise TranslationError("antialiased upsampling to a dynamic output size")
        outs = [int(o) for o in output_size]
    compute = ir.DataType.DOUBLE if dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT
    precision = np.float64 if compute == ir.DataType.DOUBLE else np.float32
    matrices = [_aa_matrix(v, o, None if f is None else float(f), align_corners, is_cubic,
                           precision) for v, o, f in zip(sizes, outs, factors)]
    return cast(g, _separable(g, cast(g, x, compute), sizes, matrices, compute), dtype)


def _upsample_targets(name: str, dims: Sequence[int]) -> list[tuple[int, Any, Any]]:
    out = []
    for n in dims:
        packet = getattr(aten, name.format(n=n))
        out.append((n, packet.vec, packet.default))
    return out


def _make_upsample_vec(n: int, mode: str, has_align: bool) -> Any:
    if has_align:
        def aten_upsample_vec(g: GraphBuilder, input: Tensor, output_size: Sequence[int] | None,
                              align_corners: bool, scale_factors: Sequence[float] | None) -> Tensor:
            return _resize(g, input, n, output_size, scale_factors, mode, align_corners)

        return aten_upsample_vec

    def aten_upsample_nearest_vec(g: GraphBuilder, input: Tensor, output_size: Sequence[int] | None,
                                  scale_factors: Sequence[float] | None) -> Tensor:
        return _resize(g, input, n, output_size, scale_factors, mode)

    return aten_upsample_nearest_vec


def _make_upsample_default(n: int, mode: str, has_align: bool) -> Any:
    """The .default overloads: output_size plus one optional scale per spatial dim."""
    if has_align and n == 1:
        def aten_upsample_1d(g: GraphBuilder, self: Tensor, output_size: Sequence[int],
                             align_corners: bool, scales: float | None = None) -> Tensor:
            return _resize(g, self, 1, output_size, [scales], mode, align_corners)

        return aten_upsample_1d
    if has_align and n == 2:
        def aten_upsample_2d(g: GraphBuilder, self: Tensor, output_size: Sequence[int],
                             align_corners: bool, scales_h: float | None = None,
                             scales_w: float | None = None) -> Tensor:
            return _resize(g, self, 2, output_size, [scales_h, scales_w], mode, align_corners)

        return aten_upsample_2d
    if has_align:
        def aten_upsample_3d(g: GraphBuilder, self: Tensor, output_size: Sequence[int],
                             align_corners: bool, scales_d: float | None = None,
                             scales_h: float | None = None, scales_w: float | None = None) -> Tensor:
            return _resize(g, self, 3, output_size, [scales_d, scales_h, scales_w], mode, align_corners)

        return aten_upsample_3d
    if n == 1:
        def aten_upsample_nearest_1d(g: GraphBuilder, self: Tensor, output_size: Sequence[int],
                                     scales: float | None = None) -> Tensor:
            return _resize(g, self, 1, output_size, [scales], mode)

        return aten_upsample_nearest_1d
    if n == 2:
        def aten_upsample_nearest_2d(g: GraphBuilder, self: Tensor, output_size: Sequence[int],
                                     scales_h: float | None = None,
                                     scales_w: float | None = None) -> Tensor:
            return _resize(g, self, 2, output_size, [scales_h, scales_w], mode)

        return aten_upsample_nearest_2d

    def aten_upsample_nearest_3d(g: GraphBuilder, self: Tensor, output_size: Sequence[int],
                                 scales_d: float | None = None, scales_h: float | None = None,
                                 scales_w: float | None = None) -> Tensor:
        return _resize(g, self, 3, output_size, [scales_d, scales_h, scales_w], mode)

    return aten_upsample_nearest_3d


_UPSAMPLE = (
    ("upsample_nearest{n}d", (1, 2, 3), "nearest", False),
    ("_upsample_nearest_exact{n}d", (1, 2, 3), "nearest-exact", False),
    ("upsample_linear{n}d", (1,), "linear", True),
    ("upsample_bilinear{n}d", (2,), "linear", True),
    ("upsample_trilinear{n}d", (3,), "linear", True),
    ("upsample_bicubic{n}d", (2,), "cubic", True),
    ("_upsample_bilinear{n}d_aa", (2,), "linear_aa", True),
    ("_upsample_bicubic{n}d_aa", (2,), "cubic_aa", True),
)
for _name, _dims, _mode, _has_align in _UPSAMPLE:
    for _n, _vec, _default in _upsample_targets(_name, _dims):
        for _target, _fn in ((_vec, _make_upsample_vec(_n, _mode, _has_align)),
                             (_default, _make_upsample_default(_n, _mode, _has_align))):
            _fn.__doc__ = _schema_doc(_target)
            register(_target)(_fn)


# -- pixel shuffle ---------------------------------------------------------------------------

def _shuffle(g: GraphBuilder, self: Tensor, factor: int, is_up: bool) -> Tensor:
    """pixel_(un)shuffle as Reshape -> Transpose -> Reshape over (*, C, H, W)."""
    r = rank(self)
    lead = [_dim(g, self, i) for i in range(r - 3)]
    c, h, w = (_dim(g, self, i) for i in range(r - 3, r))
    f = int(factor)
    batch: int | Tensor = 1
    for d in lead:
        batch = _mul(g, batch, d)
    # No -1 in the shapes and allowzero=1: empty tensors have literal 0 sizes.
    if is_up:
        oc = _div(g, c, f * f)
        split = [batch, oc, f, f, h, w]
        perm = [0, 1, 4, 2, 5, 3]
        final = [*lead, oc, _mul(g, h, f), _mul(g, w, f)]
    else:
        oh, ow = _div(g, h, f), _div(g, w, f)
        split = [batch, c, oh, f, ow, f]
        perm = [0, 1, 3, 5, 2, 4]
        final = [*lead, _mul(g, c, f * f), oh, ow]
    y = g.op("Reshape", self, int_list(g, split), allowzero=1)
    y = g.op("Transpose", y, perm=perm)
    return g.op("Reshape", y, int_list(g, final), allowzero=1)


@register(aten.pixel_shuffle.default)
def aten_pixel_shuffle(g: GraphBuilder, self: Tensor, upscale_factor: int) -> Tensor:
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor"""
    return _shuffle(g, self, upscale_factor, True)


@register(aten.pixel_unshuffle.default)
def aten_pixel_unshuffle(g: GraphBuilder, self: Tensor, downscale_factor: int) -> Tensor:
    """pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor"""
    return _shuffle(g, self, downscale_factor, False)


# -- grid_sampler_3d -------------------------------------------------------------------------

_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _grid_source(g: GraphBuilder, coord: Tensor, size: int, padding_mode: int,
                 align_corners: bool, dtype: ir.DataType) -> Tensor:
    """torch's source coordinate along one axis: unnormalized, then clipped or reflected."""
    c = g.const
    if align_corners:
        x = g.op("Mul", g.op("Add", coord, c(1.0, dtype)), c((size - 1) / 2, dtype))
    else:
        x = g.op("Div", g.op("Sub", g.op("Mul", g.op("Add", coord, c(1.0, dtype)), c(float(size), dtype)),
                             c(1.0, dtype)), c(2.0, dtype))
    if padding_mode == 2:
        # reflect over [low, high] (the pixel centers, or the pixel edges without align_corners)
        low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        span = high - low
        if span <= 0:
            x = g.op("Mul", x, c(0.0, dtype))
        else:
            d = g.op("Abs", g.op("Sub", x, c(low, dtype)))
            extra = g.op("Mod", d, c(span, dtype), fmod=1)
            flips = g.op("Floor", g.op("Div", d, c(span, dtype)))
            is_even = g.op("Equal", g.op("Mod", flips, c(2.0, dtype), fmod=1), c(0.0, dtype))
            x = g.op("Where", is_even, g.op("Add", extra, c(low, dtype)),
                     g.op("Sub", c(span + low, dtype), extra))
    if padding_mode in (1, 2):
        x = g.op("Clip", x, c(0.0, dtype), c(size - 1.0, dtype))
    return x


def _grid_sample_gather(g: GraphBuilder, input: Tensor, grid: Tensor, interpolation_mode: int,
                        padding_mode: int, align_corners: bool) -> Tensor:
    """grid_sampler_3d from Gather arithmetic: ONNX GridSample takes 5-D input from opset 20."""
    out_dtype = g.out_dtype()
    dtype = ir.DataType.DOUBLE if out_dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT
    shape = input.shape
    sizes = [shape[i] for i in (2, 3, 4)] if shape is not None else []
    if len(sizes) != 3 or not all(isinstance(v, int) for v in sizes):
        raise TranslationError("grid_sampler_3d with dynamic spatial sizes")
    depth, height, width = (int(v) for v in sizes)
    i64 = ir.DataType.INT64
    x_in = g.op("Reshape", cast(g, input, dtype), g.const([0, 0, -1], i64))  # (N, C, D*H*W)
    points = g.op("Reshape", cast(g, grid, dtype), g.const([0, -1, 3], i64))  # (N, P, 3)
    coords = [g.op("Squeeze", g.op("Slice", points, g.const([k], i64), g.const([k + 1], i64),
                                    g.const([2], i64)), g.const([2], i64)) for k in range(3)]
    # grid's last axis is (x, y, z) = (W, H, D)
    src = [_grid_source(g, coords[k], size, padding_mode, align_corners, dtype)
           for k, size in ((2, depth), (1, height), (0, width))]
    strides = (height * width, width, 1)
    bounds = (depth, height, width)

    def tap(positions: list[Tensor]) -> Tensor:
        """input at integer positions (z, y, x) of shape (N, P); zero outside the volume."""
        inside: Tensor | None = None
        flat: Tensor | None = None
        for pos, size, stride in zip(positions, bounds, strides):
            ok = g.op("And", g.op("GreaterOrEqual", pos, g.const(0, i64)),
                      g.op("Less", pos, g.const(size, i64)))
            inside = ok if inside is None else g.op("And", inside, ok)
            term = g.op("Mul", g.op("Clip", pos, g.const(0, i64), g.const(size - 1, i64)),
                        g.const(stride, i64))
            flat = term if flat is None else g.op("Add", flat, term)
        assert flat is not None and inside is not None
        index = g.op("Expand", g.op("Unsqueeze", flat, g.const([1], i64)),
                     g.op("Concat", g.op("Shape", x_in, end=2),
                          g.op("Shape", flat, start=1), axis=0))
        values = g.op("GatherElements", x_in, index, axis=2)
        return g.op("Where", g.op("Unsqueeze", inside, g.const([1], i64)), values,
                    g.const(0.0, dtype))

    if interpolation_mode == 1:
        # nearest: round half to even, as torch's nearbyint
        out = tap([cast(g, g.op("Round", s), i64) for s in src])
    elif interpolation_mode == 0:
        lows = [g.op("Floor", s) for s in src]
        fracs = [g.op("Sub", s, lo) for s, lo in zip(src, lows)]
        lows_i = [cast(g, lo, i64) for lo in lows]
        out = None
        for corner in range(8):
            bits = [(corner >> (2 - k)) & 1 for k in range(3)]
            positions = [g.op("Add", lo, g.const(b, i64)) if b else lo for lo, b in zip(lows_i, bits)]
            weight: Tensor | None = None
            for f, b in zip(fracs, bits):
                w = f if b else g.op("Sub", g.const(1.0, dtype), f)
                weight = w if weight is None else g.op("Mul", weight, w)
            assert weight is not None
            term = g.op("Mul", tap(positions), g.op("Unsqueeze", weight, g.const([1], i64)))
            out = term if out is None else g.op("Add", out, term)
        assert out is not None
    else:
        raise TranslationError("bicubic grid sampling is defined for 4-D input only")
    # (N, C, P) -> (N, C, Do, Ho, Wo)
    out_shape = g.op("Concat", g.op("Shape", x_in, end=2), g.op("Shape", grid, start=1, end=4),
                     axis=0)
    return cast(g, g.op("Reshape", out, out_shape), out_dtype)


@register(aten.grid_sampler_3d.default)
def aten_grid_sampler_3d(g: GraphBuilder, input: Tensor, grid: Tensor, interpolation_mode: int,
                         padding_mode: int, align_corners: bool) -> Tensor:
    """grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    return _grid_sample_gather(g, input, grid, interpolation_mode, padding_mode, align_corners)


@register(aten.grid_sampler_3d.default, since_opset=20)
def aten_grid_sampler_3d_20(g: GraphBuilder, input: Tensor, grid: Tensor, interpolation_mode: int,
                            padding_mode: int, align_corners: bool) -> Tensor:
    """grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    if interpolation_mode not in (0, 1):
        raise TranslationError("bicubic grid sampling is defined for 4-D input only")
    out_dtype = g.out_dtype()
    # ONNX Runtime's GridSample kernel covers float and double.
    work = ir.DataType.DOUBLE if out_dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT
    out = g.op("GridSample", cast(g, input, work), cast(g, grid, work),
               align_corners=int(align_corners), mode="linear" if interpolation_mode == 0 else "nearest",
               padding_mode=_GRID_PADDING[padding_mode])
    return cast(g, out, out_dtype)
