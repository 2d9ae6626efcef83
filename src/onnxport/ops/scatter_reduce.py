"""Reductions into indexed slots: index_reduce, put, segment_reduce, histogram, histogramdd, and
nonzero_static.

Each one computes, per source element, the slot it lands in, then reduces with one ONNX
ScatterElements (add/mul/max/min). ONNX Runtime's max/min reductions do not propagate NaN the
way torch's do, so where a NaN can reach a max/min slot a second scatter of IsNaN flags puts it
back. ORT lacks float16/bfloat16 kernels for the add/mul reductions: those compute in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list, normalize_dim, rank
from onnxport.ops.indexing import _floor_divide, _non_negative, _reduce_identity
from onnxport.ops.shape import dim_size, shape_of, static_shape
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
_F32 = ir.DataType.FLOAT
_F64 = ir.DataType.DOUBLE
_BOOL = ir.DataType.BOOL
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)

_ONNX_REDUCTION = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min",
                   "max": "max", "min": "min"}


def _work_dtype(dtype: ir.DataType) -> ir.DataType:
    # ONNX Runtime's ScatterElements has no float16/bfloat16 kernel for add and mul.
    return _F32 if dtype in _HALF else dtype


def _scatter_nan(g: GraphBuilder, out: Tensor, base: Tensor, index: Tensor, src: Tensor,
                 axis: int) -> Tensor:
    """`out` (a max/min scatter of src into base) with NaN wherever base or a src element
    reaching that slot is NaN, as torch's max/min propagate it."""
    flags = g.op("ScatterElements", cast(g, g.op("IsNaN", base), _F32), index,
                 cast(g, g.op("IsNaN", src), _F32), axis=axis, reduction="max")
    return g.op("Where", cast(g, flags, _BOOL), g.const(np.nan, like=out), out)


def _reduce_into(g: GraphBuilder, base: Tensor, index: Tensor, src: Tensor, axis: int,
                 reduction: str) -> Tensor:
    """ScatterElements with an ONNX reduction, NaN-propagating for max/min of floats."""
    if base.dtype in _HALF:
        if reduction in ("add", "mul"):
            return _sequential(g, base, index, src, axis, reduction)
        # max/min round nothing, so float32 is exact (and has every kernel, NaN checks too).
        out = _reduce_into(g, cast(g, base, _F32), index, cast(g, src, _F32), axis, reduction)
        return cast(g, out, base.dtype)
    out = g.op("ScatterElements", base, index, src, axis=axis, reduction=reduction)
    if reduction in ("max", "min") and base.dtype is not None and base.dtype.is_floating_point():
        out = _scatter_nan(g, out, base, index, src, axis)
    return out


def _sequential(g: GraphBuilder, base: Tensor, index: Tensor, src: Tensor, axis: int,
                reduction: str) -> Tensor:
    """A float16/bfloat16 add/mul scatter done one slice of `src` along `axis` at a time.

    torch rounds its half-precision accumulator after every element, and ORT has no half
    kernel for the reductions: each step computes in float32 and rounds back, in torch's
    order. Within one slice the targets are distinct (one per position off `axis`).
    """
    dtype = base.dtype
    assert dtype is not None
    trips = g.op("Gather", g.op("Shape", src), g.const(axis, _I64))
    body = g.subgraph([], "sequential_scatter")
    iteration = ir.Value(name=g.unique_name("scatter_iteration"), type=ir.TensorType(_I64),
                         shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name("scatter_condition"), type=ir.TensorType(_BOOL),
                         shape=ir.Shape([]))
    acc = ir.Value(name=g.unique_name("scatter_acc"), type=ir.TensorType(dtype))
    body.graph.inputs.extend([iteration, condition, acc])
    at = body.op("Unsqueeze", iteration, body.const([0], _I64))
    targets = body.op("Gather", index, at, axis=axis)
    values = body.op("Gather", src, at, axis=axis)
    current = body.op("GatherElements", acc, targets, axis=axis)
    combined = body.op("Add" if reduction == "add" else "Mul", cast(body, current, _F32),
                       cast(body, values, _F32))
    updated = body.op("ScatterElements", acc, targets, cast(body, combined, dtype), axis=axis)
    body.graph.outputs.extend([body.op("Identity", condition), updated])
    out: Tensor = g.op("Loop", trips, g.const(True), base, body=body.graph)
    out.dtype = dtype  # the builder leaves Loop outputs untyped
    return out


def _filled(g: GraphBuilder, shape: Tensor, value: Any, dtype: ir.DataType) -> Tensor:
    # ONNX Runtime's Expand has no bfloat16 kernel: expand in float32 and cast.
    work = _work_dtype(dtype)
    return cast(g, g.op("Expand", g.const(value, work), shape), dtype)


def _filled_like(g: GraphBuilder, like: Tensor, value: Any, dtype: ir.DataType) -> Tensor:
    return _filled(g, g.op("Shape", like), value, dtype)


# -- index_reduce ---------------------------------------------------------------------------------
@register(aten.index_reduce.default)
def aten_index_reduce(g: GraphBuilder, self: Tensor, dim: int, index: Tensor, source: Tensor,
                      reduce: str, *, include_self: bool = True) -> Tensor:
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor"""  # noqa: E501
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise TranslationError(f"index_reduce with reduce={reduce!r}")
    out_dtype = self.dtype
    assert out_dtype is not None
    dtype = out_dtype
    self_rank, source_rank = rank(self), rank(source)
    r = max(self_rank, 1)
    axis = normalize_dim(dim, r)
    x = cast(g, self, dtype)
    src = cast(g, source, dtype)
    if self_rank == 0:
        x = g.op("Reshape", x, g.const([1], _I64))
    if source_rank == 0:
        src = g.op("Reshape", src, g.const([1], _I64))
    n = dim_size(g, self, axis) if self_rank > 0 else 1
    flat_index = _non_negative(g, g.op("Reshape", cast(g, index, _I64), g.const([-1], _I64)), n)
    # Source slice i lands on slice index[i] of self along `axis`.
    spread = g.op("Reshape", flat_index, g.const([1] * axis + [-1] + [1] * (r - axis - 1), _I64))
    spread = g.op("Expand", spread, g.op("Shape", src))
    base = x
    if not include_self:
        # Indexed slices start from the reduction's identity instead of self.
        identity = _filled_like(g, src, _reduce_identity(reduce, dtype), dtype)
        base = g.op("ScatterElements", x, spread, identity, axis=axis)
    if reduce == "mean":
        total = _reduce_into(g, base, spread, src, axis, "add")
        count_dtype = _work_dtype(dtype)
        start = _filled_like(g, x, 1 if include_self else 0, count_dtype)
        count = g.op("ScatterElements", start, spread, _filled_like(g, src, 1, count_dtype),
                     axis=axis, reduction="add")
        count = g.op("Max", count, g.const(1, count_dtype))
        out = g.op("Div", cast(g, total, count_dtype), count) if dtype.is_floating_point() \
            else _floor_divide(g, total, count)
    else:
        out = _reduce_into(g, base, spread, src, axis, _ONNX_REDUCTION[reduce])
    if self_rank == 0:
        out = g.op("Reshape", out, g.const([], _I64))
    return cast(g, out, out_dtype)


# -- put ------------------------------------------------------------------------------------------
@register(aten.put.default)
def aten_put(g: GraphBuilder, self: Tensor, index: Tensor, source: Tensor,
             accumulate: bool = False) -> Tensor:
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor"""
    out_dtype = self.dtype
    assert out_dtype is not None
    dtype = out_dtype
    if accumulate and out_dtype == _BOOL:
        # Accumulating into bool is a logical or: add in int32, then != 0.
        dtype = ir.DataType.INT32
    flat = g.op("Reshape", cast(g, self, dtype), g.const([-1], _I64))
    numel = g.op("Size", self)
    positions = _non_negative(g, g.op("Reshape", cast(g, index, _I64), g.const([-1], _I64)),
                              numel)
    values = g.op("Reshape", cast(g, source, dtype), g.const([-1], _I64))
    out = _reduce_into(g, flat, positions, values, 0, "add") if accumulate \
        else g.op("ScatterElements", flat, positions, values, axis=0)
    out = g.op("Reshape", out, shape_of(g, self))
    if out_dtype == _BOOL and dtype != _BOOL:
        return g.op("Not", g.op("Equal", out, g.const(0, dtype)))
    return cast(g, out, out_dtype)


# -- nonzero_static -------------------------------------------------------------------------------
@register(aten.nonzero_static.default)
def aten_nonzero_static(g: GraphBuilder, self: Tensor, *, size: Any,
                        fill_value: int = -1) -> Tensor:
    """nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor"""
    r = rank(self)
    rows = int_list(g, [size])
    if r == 0:
        # torch gives (size, 0): one column per dim, and a 0-d input has none.
        return g.op("Expand", g.const(np.zeros((1, 0), dtype=np.int64)),
                    g.op("Concat", rows, g.const([0], _I64), axis=0))
    hits = g.op("Transpose", g.op("NonZero", cast(g, self, _BOOL)), perm=[1, 0])
    # Pad `size` rows of fill_value after the hits, then keep the first `size` rows.
    pads = g.op("Concat", g.const([0, 0], _I64), rows, g.const([0], _I64), axis=0)
    padded = g.op("Pad", hits, pads, g.const(int(fill_value), _I64))
    return g.op("Slice", padded, g.const([0], _I64), rows, g.const([0], _I64))


# -- segment_reduce -------------------------------------------------------------------------------
@register(aten.segment_reduce.default)
def aten_segment_reduce(g: GraphBuilder, data: Tensor, reduce: str, *,
                        lengths: Tensor | None = None, indices: Tensor | None = None,
                        offsets: Tensor | None = None, axis: int = 0, unsafe: bool = False,
                        initial: Any = None) -> Tensor:
    """segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None, Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None) -> Tensor"""  # noqa: E501
    if indices is not None:
        raise TranslationError("segment_reduce with indices (torch does not support them either)")
    if reduce not in ("sum", "mean", "max", "min", "prod"):
        raise TranslationError(f"segment_reduce with reduce={reduce!r}")
    out_dtype = data.dtype
    assert out_dtype is not None
    dtype = out_dtype
    r = rank(data)
    axis = normalize_dim(axis, r)
    x = cast(g, data, dtype)
    # Segment s covers [starts[..., s], ends[..., s]) along `axis`; lengths/offsets have the
    # dims before `axis` as their batch dims.
    if lengths is not None:
        lengths = cast(g, lengths, _I64)
        ends = g.op("CumSum", lengths, g.const(-1, _I64))
        first = g.op("Expand", g.const([0], _I64), g.const([1], _I64))
        first_start = g.op("Expand", first, g.op("Concat", g.op("Shape", lengths, end=-1),
                                                  g.const([1], _I64), axis=0))
    elif offsets is not None:
        offsets = cast(g, offsets, _I64)
        ends = g.op("Slice", offsets, g.const([1], _I64), g.const([2**62], _I64),
                    g.const([-1], _I64))
        first_start = g.op("Slice", offsets, g.const([0], _I64), g.const([1], _I64),
                           g.const([-1], _I64))
    else:
        raise TranslationError("segment_reduce needs lengths or offsets")
    num_segments = g.op("Shape", ends, start=-1)
    length = int_list(g, [dim_size(g, data, axis)])
    position = g.op("Range", g.const(0, _I64), g.op("Squeeze", length), g.const(1, _I64))
    # segment(j) = how many segments end at or before j; positions outside them go to an
    # extra slot `num_segments`, sliced off at the end.
    done = g.op("LessOrEqual", g.op("Unsqueeze", ends, g.const([-2], _I64)),
                g.op("Unsqueeze", position, g.const([1], _I64)))
    segment = g.op("ReduceSum", cast(g, done, _I64), g.const([-1], _I64), keepdims=0)
    last_end = g.op("Slice", ends, g.const([-1], _I64), g.const([2**62], _I64),
                    g.const([-1], _I64))
    inside = g.op("And", g.op("GreaterOrEqual", position, first_start),
                  g.op("Less", position, last_end))
    segment = g.op("Where", inside, segment, g.op("Squeeze", num_segments))
    # Spread the (batch..., L) segment ids over data's trailing dims.
    trailing = list(range(axis + 1, r))
    if trailing:
        segment = g.op("Unsqueeze", segment, g.const(trailing, _I64))
    segment = g.op("Expand", segment, g.op("Shape", x))
    slots = g.op("Add", num_segments, g.const([1], _I64))
    out_shape = g.op("Concat", g.op("Shape", data, end=axis), slots,
                     g.op("Shape", data, start=axis + 1), axis=0)

    def scatter(start: Any, src: Tensor, reduction: str) -> Tensor:
        base = _filled(g, out_shape, start, dtype)
        full = _reduce_into(g, base, segment, src, axis, reduction)
        return g.op("Slice", full, g.const([0], _I64), num_segments, g.const([axis], _I64))

    if reduce != "mean":
        start = _reduce_identity({"max": "amax", "min": "amin"}.get(reduce, reduce), dtype) \
            if initial is None else initial
        return cast(g, scatter(start, x, _ONNX_REDUCTION[reduce]), out_dtype)
    # torch's mean is (initial + the segment's sum) / count, and initial itself (or NaN) for
    # an empty segment.
    total = scatter(0 if initial is None else initial, x, "add")
    count_dtype = _work_dtype(dtype)
    count_base = g.op("Expand", g.const(0, count_dtype), out_shape)
    count = g.op("ScatterElements", count_base, segment, _filled_like(g, x, 1, count_dtype),
                 axis=axis, reduction="add")
    count = g.op("Slice", count, g.const([0], _I64), num_segments, g.const([axis], _I64))
    empty = g.const(np.nan if initial is None else initial, count_dtype)
    is_empty = g.op("Equal", count, g.const(0, count_dtype))
    mean = g.op("Div", cast(g, total, count_dtype),
                g.op("Where", is_empty, g.const(1, count_dtype), count))
    return cast(g, g.op("Where", is_empty, empty, mean), out_dtype)


# -- histogram ------------------------------------------------------------------------------------
def _data_range(g: GraphBuilder, column: Tensor, dtype: ir.DataType,
                bounds: tuple[float, float] | None) -> tuple[Tensor, Tensor]:
    """The outer bin edges as torch picks them: `bounds`, or the data's min and max (0 and 1
    for no data), moved apart by 0.5 each when they coincide."""
    if bounds is not None:
        low, high = float(bounds[0]), float(bounds[1])
        if low == high:
            low, high = low - 0.5, high + 0.5
        return g.const(low, dtype), g.const(high, dtype)
    # A NaN pad keeps the reductions off an empty input; an empty input reads as [0, 1].
    padded = g.op("Concat", column, g.const([np.nan], dtype), axis=0)
    finite = g.op("Not", g.op("IsNaN", padded))
    low = g.op("ReduceMin", g.op("Where", finite, padded, g.const(np.inf, dtype)), keepdims=0)
    high = g.op("ReduceMax", g.op("Where", finite, padded, g.const(-np.inf, dtype)), keepdims=0)
    is_empty = g.op("IsInf", low)
    low = g.op("Where", is_empty, g.const(0.0, dtype), low)
    high = g.op("Where", is_empty, g.const(1.0, dtype), high)
    # torch widens a point range in double, then rounds the edges to the input's dtype.
    low64, high64 = cast(g, low, _F64), cast(g, high, _F64)
    is_point = g.op("Equal", low64, high64)
    half = g.const(0.5, _F64)
    low64 = g.op("Where", is_point, g.op("Sub", low64, half), low64)
    high64 = g.op("Where", is_point, g.op("Add", high64, half), high64)
    return cast(g, low64, dtype), cast(g, high64, dtype)


def _linear_edges(g: GraphBuilder, low: Tensor, high: Tensor, bins: int,
                  dtype: ir.DataType) -> Tensor:
    """torch.linspace(low, high, bins + 1): low + step * i for the first half, high - step *
    (bins - i) for the second, each with one rounding (ATen's kernel fuses the multiply-add)."""
    steps = bins + 1
    step = g.op("Div", g.op("Sub", high, low), g.const(float(bins), dtype))
    index = np.arange(steps)
    first_half = g.const(index < steps // 2)
    start = g.op("Where", first_half, low, high)
    count = np.where(index < steps // 2, index, index - bins)
    return _fused_multiply_add(g, step, count, start, dtype)


def _fused_multiply_add(g: GraphBuilder, step: Tensor, count: np.ndarray, start: Tensor,
                        dtype: ir.DataType) -> Tensor:
    """start + step * count rounded once, for a scalar step and small integer counts."""
    if dtype == _F32:
        # The float32 product is exact in float64; one float64 add, then round to float32.
        product = g.op("Mul", cast(g, step, _F64), g.const(count, _F64))
        return cast(g, g.op("Add", cast(g, start, _F64), product), _F32)
    # float64: split step into halves whose products with small integers are exact
    # (Veltkamp), then add with the rounding error of the first sum carried (TwoSum).
    scaled = g.op("Mul", step, g.const(2.0**27 + 1, _F64))
    head = g.op("Sub", scaled, g.op("Sub", scaled, step))
    tail = g.op("Sub", step, head)
    counts = g.const(count, _F64)
    big, small = g.op("Mul", head, counts), g.op("Mul", tail, counts)
    total = g.op("Add", start, big)
    back = g.op("Sub", total, start)
    error = g.op("Add", g.op("Sub", start, g.op("Sub", total, back)), g.op("Sub", big, back))
    return g.op("Add", total, g.op("Add", error, small))


def _linear_bin(g: GraphBuilder, column: Tensor, edges: Tensor, bins: int) -> Tensor:
    """The bin of each value for evenly spaced edges: interpolated, then moved by one where
    the interpolation lands next to the edge that really bounds it."""
    x64 = cast(g, column, _F64)
    low = cast(g, g.op("Gather", edges, g.const(0, _I64)), _F64)
    high = cast(g, g.op("Gather", edges, g.const(bins, _I64)), _F64)
    guess = g.op("Div", g.op("Mul", g.op("Sub", x64, low), g.const(float(bins), _F64)),
                 g.op("Sub", high, low))
    guess = g.op("Where", g.op("IsNaN", guess), g.const(0.0, _F64), guess)
    top = g.const(bins - 1, _I64)
    guess = g.op("Min", g.op("Max", guess, g.const(0.0, _F64)), g.const(float(bins - 1), _F64))
    position = cast(g, g.op("Floor", guess), _I64)
    lower = g.op("Gather", edges, position)
    upper = g.op("Gather", edges, g.op("Add", position, g.const(1, _I64)))
    down = g.op("And", g.op("Less", column, lower), g.op("Greater", position, g.const(0, _I64)))
    up = g.op("And", g.op("GreaterOrEqual", column, upper), g.op("Less", position, top))
    position = g.op("Where", down, g.op("Sub", position, g.const(1, _I64)), position)
    return g.op("Where", up, g.op("Add", position, g.const(1, _I64)), position)


def _searched_bin(g: GraphBuilder, column: Tensor, edges: Tensor) -> Tensor:
    """The bin of each value for arbitrary increasing edges: how many inner edges are <= it."""
    inner = g.op("Slice", edges, g.const([1], _I64), g.const([-1], _I64), g.const([0], _I64))
    at_or_past = g.op("GreaterOrEqual", g.op("Unsqueeze", column, g.const([1], _I64)),
                      g.op("Unsqueeze", inner, g.const([0], _I64)))
    # An extra column of zeros keeps ReduceSum off an empty axis (ORT returns its input then).
    counts = g.op("Pad", cast(g, at_or_past, _I64), g.const([0, 0, 0, 1], _I64))
    return g.op("ReduceSum", counts, g.const([1], _I64), keepdims=0)


def _inside(g: GraphBuilder, column: Tensor, edges: Tensor) -> Tensor:
    first = g.op("Gather", edges, g.const(0, _I64))
    last = g.op("Gather", edges, g.op("Sub", g.op("Size", edges), g.const(1, _I64)))
    return g.op("And", g.op("GreaterOrEqual", column, first), g.op("LessOrEqual", column, last))


def _histogram(g: GraphBuilder, points: Tensor, bins: Sequence[int | Tensor],
               bounds: Sequence[tuple[float, float] | None], weight: Tensor | None,
               density: bool, dtype: ir.DataType) -> tuple[Tensor, list[Tensor]]:
    """Histogram of the rows of `points` (N, D): dim d has `bins[d]` (a count or an edges
    tensor) and `bounds[d]`. Returns the hist of shape (bins...) and each dim's edges."""
    num_dims = len(bins)
    all_edges, positions = [], []
    inside: Tensor | None = None
    sizes: list[Any] = []
    for d in range(num_dims):
        column = g.op("Gather", points, g.const(d, _I64), axis=1)
        spec = bins[d]
        if isinstance(spec, ir.Value):
            edges = cast(g, spec, dtype)
            position = _searched_bin(g, column, edges)
            sizes.append(g.op("Sub", g.op("Size", edges), g.const(1, _I64)))
        else:
            low, high = _data_range(g, column, dtype, bounds[d])
            edges = _linear_edges(g, low, high, int(spec), dtype)
            position = _linear_bin(g, column, edges, int(spec))
            sizes.append(int(spec))
        is_inside = _inside(g, column, edges)
        inside = is_inside if inside is None else g.op("And", inside, is_inside)
        all_edges.append(edges)
        positions.append(position)
    assert inside is not None
    flat = positions[0]
    for d in range(1, num_dims):
        flat = g.op("Add", g.op("Mul", flat, int_list(g, [sizes[d]])), positions[d])
    flat = g.op("Where", inside, flat, g.const(0, _I64))
    values = _filled_like(g, flat, 1.0, dtype) if weight is None \
        else g.op("Reshape", cast(g, weight, dtype), g.const([-1], _I64))
    values = g.op("Where", inside, values, g.const(0.0, dtype))
    shape = int_list(g, sizes)
    total = g.op("ReduceProd", shape, keepdims=1)
    hist = g.op("ScatterElements", g.op("Expand", g.const([0.0], dtype), total), flat, values,
                axis=0, reduction="add")
    hist = g.op("Reshape", hist, shape)
    if density:
        # hist / (sum of hist * bin volume), the volume being the outer product of widths.
        volume: Tensor | None = None
        for d, edges in enumerate(all_edges):
            width = g.op("Sub", g.op("Slice", edges, g.const([1], _I64), g.const([2**62], _I64)),
                         g.op("Slice", edges, g.const([0], _I64), g.const([-1], _I64)))
            layout = [1] * num_dims
            layout[d] = -1
            width = g.op("Reshape", width, g.const(layout, _I64))
            volume = width if volume is None else g.op("Mul", volume, width)
        assert volume is not None
        hist = g.op("Div", hist, g.op("Mul", g.op("ReduceSum", g.op("Reshape", hist, g.const(
            [-1], _I64)), keepdims=1), volume))
    return hist, all_edges


def _float_dtype(g: GraphBuilder) -> ir.DataType:
    dtype = g.out_dtype(0)
    if dtype not in (_F32, _F64):
        raise TranslationError(f"histogram of {dtype}: torch supports float32 and float64")
    return dtype


@register(aten.histogram.bin_ct)
def aten_histogram_bin_ct(g: GraphBuilder, self: Tensor, bins: int = 100, *,
                          range: Sequence[float] | None = None, weight: Tensor | None = None,
                          density: bool = False) -> tuple[Tensor, Tensor]:
    """histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)"""  # noqa: E501
    dtype = _float_dtype(g)
    points = g.op("Reshape", cast(g, self, dtype), g.const([-1, 1], _I64))
    bounds = None if range is None else (float(range[0]), float(range[1]))
    hist, edges = _histogram(g, points, [bins], [bounds], weight, density, dtype)
    return hist, edges[0]


@register(aten.histogram.bins_tensor)
def aten_histogram_bins_tensor(g: GraphBuilder, self: Tensor, bins: Tensor, *,
                               weight: Tensor | None = None,
                               density: bool = False) -> tuple[Tensor, Tensor]:
    """histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)"""  # noqa: E501
    dtype = _float_dtype(g)
    points = g.op("Reshape", cast(g, self, dtype), g.const([-1, 1], _I64))
    hist, edges = _histogram(g, points, [bins], [None], weight, density, dtype)
    return hist, edges[0]


def _histogramdd(g: GraphBuilder, self: Tensor, bins: Sequence[int | Tensor],
                 flat_range: Sequence[float] | None, weight: Tensor | None,
                 density: bool) -> tuple[Tensor, list[Tensor]]:
    dtype = _float_dtype(g)
    shape = static_shape(self)
    if shape is None or not shape:
        raise TranslationError("histogramdd needs a static last dim")
    num_dims = shape[-1]
    if len(bins) != num_dims:
        raise TranslationError(f"histogramdd with {len(bins)} bin specs for {num_dims} dims")
    points = g.op("Reshape", cast(g, self, dtype), g.const([-1, num_dims], _I64))
    bounds: list[tuple[float, float] | None] = [None] * num_dims
    if flat_range is not None:
        bounds = [(float(flat_range[2 * d]), float(flat_range[2 * d + 1]))
                  for d in range(num_dims)]
    hist, edges = _histogram(g, points, bins, bounds, weight, density, dtype)
    return hist, edges


@register(aten.histogramdd.default)
def aten_histogramdd(g: GraphBuilder, self: Tensor, bins: Sequence[int],
                     range: Sequence[float] | None = None, weight: Tensor | None = None,
                     density: bool = False) -> tuple[Tensor, list[Tensor]]:
    """histogramdd(Tensor self, int[] bins, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor[] bin_edges)"""  # noqa: E501
    return _histogramdd(g, self, list(bins), range, weight, density)


@register(aten.histogramdd.int_bins)
def aten_histogramdd_int_bins(g: GraphBuilder, self: Tensor, bins: int,
                              range: Sequence[float] | None = None, weight: Tensor | None = None,
                              density: bool = False) -> tuple[Tensor, list[Tensor]]:
    """histogramdd.int_bins(Tensor self, int bins, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor[] bin_edges)"""  # noqa: E501
    shape = static_shape(self)
    num_dims = shape[-1] if shape else 0
    return _histogramdd(g, self, [bins] * num_dims, range, weight, density)


@register(aten.histogramdd.TensorList_bins)
def aten_histogramdd_tensorlist_bins(g: GraphBuilder, self: Tensor, bins: Sequence[Tensor],
                                     range: Sequence[float] | None = None,
                                     weight: Tensor | None = None,
                                     density: bool = False) -> tuple[Tensor, list[Tensor]]:
    """histogramdd.TensorList_bins(Tensor self, Tensor[] bins, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor[] bin_edges)"""  # noqa: E501
    return _histogramdd(g, self, list(bins), range, weight, density)
