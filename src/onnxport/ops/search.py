"""Searching and order statistics: bucketize, searchsorted, unique, kthvalue, median, mode,
cummax/cummin and logcumsumexp.

Running scans (cummax, cummin, logcumsumexp) are loop-free: an (i, j) "j <= i" mask is put
next to the scanned dim and reduced over j, which is O(n^2) in the scanned length but needs
no Loop or Scan.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list, normalize_dim, rank
from onnxport.ops.indexing import _sort_key, sort_order
from onnxport.ops.shape import dim_size
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
_I32 = ir.DataType.INT32
_F32 = ir.DataType.FLOAT
_BOOL = ir.DataType.BOOL


def _is_float(x: Tensor) -> bool:
    return x.dtype is not None and x.dtype.is_floating_point()


def _compare_dtype(*xs: Tensor) -> ir.DataType:
    # ONNX Runtime's Less/LessOrEqual/Equal kernels cover float, double, int32 and int64;
    # every torch float or integer value compares exactly as double / int64.
    if any(_is_float(x) for x in xs):
        return ir.DataType.DOUBLE if any(x.dtype == ir.DataType.DOUBLE for x in xs) else _F32
    return _I64


def _key_dtype(g: GraphBuilder, x: Tensor) -> ir.DataType:
    """The dtype `x` is compared and reduced in (see indexing._sort_key)."""
    dtype = _sort_key(g, x).dtype
    if dtype is None:
        raise TranslationError(f"value {x.name} has no known dtype")
    return dtype


def _keyed(g: GraphBuilder, x: Tensor) -> tuple[ir.DataType, Tensor]:
    """The dtype `x` is compared in, and `x` cast to it."""
    work = _key_dtype(g, x)
    return work, cast(g, x, work)


def _axis_len(g: GraphBuilder, x: Tensor, axis: int) -> Any:
    return dim_size(g, x, axis)


def _arange(g: GraphBuilder, n: Any) -> Tensor:
    end = g.op("Reshape", cast(g, n, _I64), g.const([], _I64)) if isinstance(n, ir.Value) \
        else g.const(int(n), _I64)
    return g.op("Range", g.const(0, _I64), end, g.const(1, _I64))


def _along(g: GraphBuilder, v: Tensor, axis: int, r: int) -> Tensor:
    """A 1-D `v` reshaped to broadcast along `axis` of a rank-`r` tensor."""
    trailing = list(range(1, r - axis))
    leading = list(range(axis))
    out = g.op("Unsqueeze", v, g.const(trailing, _I64)) if trailing else v
    return g.op("Unsqueeze", out, g.const(leading, _I64)) if leading else out


# -- bucketize / searchsorted ---------------------------------------------------------------------
def _count_below(g: GraphBuilder, seq: Tensor, values: Tensor, right: bool,
                 batched: bool, values_rank: int) -> Tensor:
    """For each value, how many entries of the sorted last dim of `seq` lie before it."""
    work = _compare_dtype(seq, values)
    s, v = cast(g, seq, work), cast(g, values, work)
    if batched:
        # seq [..., m] against values [..., n]: compare as [..., n, 1] with [..., 1, m].
        s = g.op("Unsqueeze", s, g.const([-2], _I64))
    v = g.op("Unsqueeze", v, g.const([-1], _I64))
    # right: first index with seq > v, i.e. count seq <= v; left: count seq < v.
    # torch sorts NaN last, so a NaN value lands after every entry: NOT(v < seq) / NOT(v <= seq).
    before = cast(g, g.op("Not", g.op("Less" if right else "LessOrEqual", v, s)), _I64)
    # ONNX Runtime's ReduceSum returns an empty input unchanged rather than reducing it, so
    # one zero column is appended (an empty seq sums to 0) and the result is reshaped to the
    # values' shape (no values gives no output).
    r = values_rank + 1
    before = g.op("Pad", before, g.const([0] * r + [0] * (r - 1) + [1], _I64))
    out = g.op("ReduceSum", before, g.const([-1], _I64), keepdims=0)
    return g.op("Reshape", out, g.op("Shape", values))


@register(aten.bucketize.Tensor)
def aten_bucketize(g: GraphBuilder, self: Tensor, boundaries: Tensor, *, out_int32: bool = False,
                   right: bool = False) -> Tensor:
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor"""
    out = _count_below(g, boundaries, self, right, batched=False, values_rank=rank(self))
    return cast(g, out, _I32 if out_int32 else _I64)


@register(aten.bucketize.Scalar)
def aten_bucketize_scalar(g: GraphBuilder, self: Any, boundaries: Tensor, *,
                          out_int32: bool = False, right: bool = False) -> Tensor:
    """bucketize.Scalar(Scalar self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor"""
    return aten_bucketize(g, g.const(self, like=boundaries), boundaries, out_int32=out_int32,
                          right=right)


@register(aten.searchsorted.Tensor)
def aten_searchsorted(g: GraphBuilder, sorted_sequence: Tensor, self: Tensor, *,
                      out_int32: bool = False, right: bool = False, side: str | None = None,
                      sorter: Tensor | None = None) -> Tensor:
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor"""
    if side is not None:
        right = side == "right"
    seq = sorted_sequence
    if sorter is not None:
        seq = g.op("GatherElements", seq, cast(g, sorter, _I64), axis=rank(seq) - 1)
    batched = rank(sorted_sequence) > 1
    values = self
    if rank(self) == 0:
        values = g.op("Reshape", self, g.const([1], _I64))
    out = _count_below(g, seq, values, right, batched,
                       values_rank=rank(sorted_sequence) if batched else max(rank(self), 1))
    if rank(self) == 0:
        out = g.op("Reshape", out, g.const([], _I64))
    return cast(g, out, _I32 if out_int32 else _I64)


@register(aten.searchsorted.Scalar)
def aten_searchsorted_scalar(g: GraphBuilder, sorted_sequence: Tensor, self: Any, *,
                             out_int32: bool = False, right: bool = False,
                             side: str | None = None, sorter: Tensor | None = None) -> Tensor:
    """searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor"""
    value = g.const(self, like=sorted_sequence)
    if rank(sorted_sequence) > 1:
        raise TranslationError("searchsorted with a scalar value needs a 1-D sorted_sequence")
    return aten_searchsorted(g, sorted_sequence, value, out_int32=out_int32, right=right,
                             side=side, sorter=sorter)


# -- running max / min / logsumexp ----------------------------------------------------------------
def _upto_mask(g: GraphBuilder, n: Any, axis: int, r: int) -> tuple[Tensor, Tensor]:
    """(mask, steps): mask[i, j] = j <= i laid out as dims (axis, axis+1) of a rank r+1 tensor."""
    steps = _arange(g, n)
    upto = g.op("LessOrEqual", g.op("Unsqueeze", steps, g.const([0], _I64)),
                g.op("Unsqueeze", steps, g.const([1], _I64)))
    if r - axis - 1:
        upto = g.op("Unsqueeze", upto, g.const(list(range(2, r - axis + 1)), _I64))
    return upto, steps


def _extreme(dtype: ir.DataType, is_max: bool) -> Any:
    np_dtype = dtype.numpy()
    if np.issubdtype(np_dtype, np.floating):
        return -np.inf if is_max else np.inf
    info = np.iinfo(np_dtype)
    return int(info.min) if is_max else int(info.max)


def _cum_extreme(g: GraphBuilder, self: Tensor, dim: int, is_max: bool) -> tuple[Tensor, Tensor]:
    if rank(self) == 0:
        return self, g.const(0, _I64)
    r = rank(self)
    axis = normalize_dim(dim, r)
    # ReduceMax/Min kernels: float, double, int32, int64 (float16 and small types widened).
    work, x = _keyed(g, self)
    n = _axis_len(g, self, axis)
    upto, steps = _upto_mask(g, n, axis, r)
    xj = g.op("Unsqueeze", x, g.const([axis], _I64))            # dims: ..., 1(i), n(j), ...
    spread = g.op("Where", upto, xj, g.const(_extreme(work, is_max), work))
    values = g.op("ReduceMax" if is_max else "ReduceMin", spread, g.const([axis + 1], _I64),
                  keepdims=0)
    if _is_float(x):
        # torch propagates NaN: once one is seen, the running value is NaN.
        nan_seen = g.op("ReduceMax", cast(g, g.op("And", upto, g.op("IsNaN", xj)), _I32),
                        g.const([axis + 1], _I64), keepdims=0)
        values = g.op("Where", cast(g, nan_seen, _BOOL), g.const(np.nan, work), values)
    # The index is the last j <= i holding the running value (a NaN matches a NaN).
    vi = g.op("Unsqueeze", values, g.const([axis + 1], _I64))   # dims: ..., n(i), 1(j), ...
    match = g.op("Equal", xj, vi)
    if _is_float(x):
        match = g.op("Or", match, g.op("And", g.op("IsNaN", xj), g.op("IsNaN", vi)))
    j = g.op("Unsqueeze", _along(g, steps, axis, r), g.const([axis], _I64))
    index = g.op("Where", g.op("And", upto, match), j, g.const(-1, _I64))
    indices = g.op("ReduceMax", index, g.const([axis + 1], _I64), keepdims=0)
    return cast(g, values, g.out_dtype(0)), indices


@register(aten.cummax.default)
def aten_cummax(g: GraphBuilder, self: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cum_extreme(g, self, dim, is_max=True)


@register(aten.cummin.default)
def aten_cummin(g: GraphBuilder, self: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cum_extreme(g, self, dim, is_max=False)


@register(aten.logcumsumexp.default)
def aten_logcumsumexp(g: GraphBuilder, self: Tensor, dim: int) -> Tensor:
    """logcumsumexp(Tensor self, int dim) -> Tensor"""
    out_dtype = g.out_dtype()
    # Exp/Log/ReduceMax kernels: float and double; float16 is computed in float.
    work = ir.DataType.DOUBLE if out_dtype == ir.DataType.DOUBLE else _F32
    if rank(self) == 0:
        return cast(g, self, out_dtype)
    r = rank(self)
    axis = normalize_dim(dim, r)
    x = cast(g, self, work)
    upto, _ = _upto_mask(g, _axis_len(g, self, axis), axis, r)
    spread = g.op("Where", upto, g.op("Unsqueeze", x, g.const([axis], _I64)),
                  g.const(-np.inf, work))
    # Shift by the running max so exp cannot overflow; an infinite max shifts by 0 instead
    # (all -inf gives log(0) = -inf, a +inf gives +inf, as torch does).
    top = g.op("ReduceMax", spread, g.const([axis + 1], _I64), keepdims=1)
    top = g.op("Where", g.op("IsInf", top), g.const(0.0, work), top)
    total = g.op("ReduceSum", g.op("Exp", g.op("Sub", spread, top)), g.const([axis + 1], _I64),
                 keepdims=0)
    out = g.op("Add", g.op("Log", total), g.op("Squeeze", top, g.const([axis + 1], _I64)))
    return cast(g, out, out_dtype)


# -- order statistics -----------------------------------------------------------------------------
def _sorted_with_nan_last(g: GraphBuilder, x: Tensor, axis: int) -> tuple[Tensor, Tensor]:
    """A stable ascending sort of `x` along `axis` with NaN after everything (torch's order)."""
    indices = sort_order(g, x, _axis_len(g, x, axis), axis, largest=False)
    return g.op("GatherElements", x, indices, axis=axis), indices


def _pick(g: GraphBuilder, values: Tensor, indices: Tensor, position: Tensor, axis: int,
          keepdim: bool) -> tuple[Tensor, Tensor]:
    """values/indices at `position` (same rank as values, size 1 on axis)."""
    v = g.op("GatherElements", values, position, axis=axis)
    i = g.op("GatherElements", indices, position, axis=axis)
    if not keepdim:
        v = g.op("Squeeze", v, g.const([axis], _I64))
        i = g.op("Squeeze", i, g.const([axis], _I64))
    return v, i


@register(aten.kthvalue.default)
def aten_kthvalue(g: GraphBuilder, self: Tensor, k: Any, dim: int = -1,
                  keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    if rank(self) == 0:
        return self, g.const(0, _I64)
    axis = normalize_dim(dim, rank(self))
    values, indices = _sorted_with_nan_last(g, self, axis)
    start = g.op("Sub", int_list(g, [k]), g.const([1], _I64))
    v = g.op("Slice", values, start, g.op("Add", start, g.const([1], _I64)), g.const([axis], _I64))
    i = g.op("Slice", indices, start, g.op("Add", start, g.const([1], _I64)),
             g.const([axis], _I64))
    if not keepdim:
        v = g.op("Squeeze", v, g.const([axis], _I64))
        i = g.op("Squeeze", i, g.const([axis], _I64))
    return v, i


def _median(g: GraphBuilder, self: Tensor, dim: int, keepdim: bool,
            ignore_nan: bool) -> tuple[Tensor, Tensor]:
    if rank(self) == 0:
        return self, g.const(0, _I64)
    axis = normalize_dim(dim, rank(self))
    values, indices = _sorted_with_nan_last(g, self, axis)
    n = g.op("Reshape", cast(g, _axis_len(g, self, axis), _I64), g.const([], _I64))
    if _is_float(self):
        nan = cast(g, g.op("IsNaN", self), _I64)
        num_nan = g.op("ReduceSum", nan, g.const([axis], _I64), keepdims=1)
    else:
        num_nan = None
    if ignore_nan and num_nan is not None:
        # The lower median of the non-NaN entries (NaN sorts last); all-NaN picks position 0.
        count = g.op("Sub", n, num_nan)
        position = g.op("Max", g.op("Div", g.op("Sub", count, g.const(1, _I64)),
                                    g.const(2, _I64)), g.const(0, _I64))
    else:
        position = g.op("Div", g.op("Sub", n, g.const(1, _I64)), g.const(2, _I64))
        shape = g.op("Shape", self)
        ones = g.op("ScatterElements", shape, g.const([axis], _I64), g.const([1], _I64))
        position = g.op("Expand", g.op("Reshape", position, g.const([1], _I64)), ones)
        if num_nan is not None:
            # Any NaN makes the median NaN, reported at the first NaN: sorted position n - num_nan.
            position = g.op("Where", g.op("Greater", num_nan, g.const(0, _I64)),
                            g.op("Sub", n, num_nan), position)
    return _pick(g, values, indices, position, axis, keepdim)


@register(aten.median.dim)
def aten_median_dim(g: GraphBuilder, self: Tensor, dim: int,
                    keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _median(g, self, dim, keepdim, ignore_nan=False)


@register(aten.nanmedian.dim)
def aten_nanmedian_dim(g: GraphBuilder, self: Tensor, dim: int,
                       keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _median(g, self, dim, keepdim, ignore_nan=True)


def _flat(g: GraphBuilder, self: Tensor) -> Tensor:
    return g.op("Reshape", self, g.const([-1], _I64))


def _median_all(g: GraphBuilder, self: Tensor, ignore_nan: bool) -> Tensor:
    """The median of every element (the overloads without `dim`)."""
    flat = _flat(g, self)
    flat.shape = ir.Shape([None])
    values, _ = _median(g, flat, 0, False, ignore_nan=ignore_nan)
    return values


@register(aten.median.default)
def aten_median(g: GraphBuilder, self: Tensor) -> Tensor:
    """median(Tensor self) -> Tensor"""
    return _median_all(g, self, ignore_nan=False)


@register(aten.nanmedian.default)
def aten_nanmedian(g: GraphBuilder, self: Tensor) -> Tensor:
    """nanmedian(Tensor self) -> Tensor"""
    return _median_all(g, self, ignore_nan=True)


@register(aten.mode.default)
def aten_mode(g: GraphBuilder, self: Tensor, dim: int = -1,
              keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    if rank(self) == 0:
        return self, g.const(0, _I64)
    r = rank(self)
    axis = normalize_dim(dim, r)
    work, x = _keyed(g, self)
    # counts[i] = how many j have x[j] == x[i], from an (i, j) comparison next to `axis`.
    xi = g.op("Unsqueeze", x, g.const([axis + 1], _I64))
    xj = g.op("Unsqueeze", x, g.const([axis], _I64))
    counts = g.op("ReduceSum", cast(g, g.op("Equal", xi, xj), _I64), g.const([axis + 1], _I64),
                  keepdims=0)
    best = g.op("ReduceMax", counts, g.const([axis], _I64), keepdims=1)
    # Ties between values go to the smallest value, and its last occurrence gives the index.
    candidates = g.op("Where", g.op("Equal", counts, best), x,
                      g.const(_extreme(work, is_max=False), work))
    value = g.op("ReduceMin", candidates, g.const([axis], _I64), keepdims=1)
    steps = _along(g, _arange(g, _axis_len(g, self, axis)), axis, r)
    index = g.op("ReduceMax", g.op("Where", g.op("Equal", x, value), steps, g.const(-1, _I64)),
                 g.const([axis], _I64), keepdims=1)
    if not keepdim:
        value = g.op("Squeeze", value, g.const([axis], _I64))
        index = g.op("Squeeze", index, g.const([axis], _I64))
    return cast(g, value, g.out_dtype(0)), index


# -- unique ---------------------------------------------------------------------------------------
def _unique_dtype(x: Tensor) -> ir.DataType:
    # ONNX Runtime's Unique kernel covers float, double, int8, int64 and string.
    if x.dtype in (_F32, ir.DataType.DOUBLE, _I64, ir.DataType.INT8):
        return x.dtype
    if _is_float(x):
        return _F32
    return _I64


def _empty_i64(g: GraphBuilder) -> Tensor:
    return g.const(np.zeros((0,), dtype=np.int64), _I64)


@register(aten._unique2.default)
def aten__unique2(g: GraphBuilder, self: Tensor, sorted: bool = True, return_inverse: bool = False,
                  return_counts: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)"""
    # torch's CPU kernel returns sorted values even when sorted=False; ONNX sorts on request.
    x = cast(g, _flat(g, self), _unique_dtype(self))
    values, _, inverse, counts = g.op("Unique", x, sorted=1, outputs=4)
    values = cast(g, values, g.out_dtype(0))
    inverse = g.op("Reshape", inverse, g.op("Shape", self)) if return_inverse else _empty_i64(g)
    return values, inverse, counts if return_counts else _empty_i64(g)


@register(aten.unique_dim.default)
def aten_unique_dim(g: GraphBuilder, self: Tensor, dim: int, sorted: bool = True,
                    return_inverse: bool = False,
                    return_counts: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """unique_dim(Tensor self, int dim, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)"""
    axis = normalize_dim(dim, rank(self))
    x = cast(g, self, _unique_dtype(self))
    values, _, inverse, counts = g.op("Unique", x, axis=axis, sorted=1, outputs=4)
    values = cast(g, values, g.out_dtype(0))
    return (values, inverse if return_inverse else _empty_i64(g),
            counts if return_counts else _empty_i64(g))


@register(aten.unique_consecutive.default)
def aten_unique_consecutive(g: GraphBuilder, self: Tensor, return_inverse: bool = False,
                            return_counts: bool = False,
                            dim: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None) -> (Tensor, Tensor, Tensor)"""
    x = _flat(g, self) if dim is None or rank(self) == 0 else self
    r = 1 if dim is None or rank(self) == 0 else rank(self)
    axis = 0 if dim is None else normalize_dim(dim, r)
    n = g.op("Reshape", g.op("Gather", g.op("Shape", x), g.const([axis], _I64)),
             g.const([1], _I64))
    work = cast(g, x, _compare_dtype(x))
    tail = g.op("Slice", work, g.const([1], _I64), n, g.const([axis], _I64))
    head = g.op("Slice", work, g.const([0], _I64), g.op("Sub", n, g.const([1], _I64)),
                g.const([axis], _I64))
    changed = cast(g, g.op("Not", g.op("Equal", tail, head)), _I32)
    others = [a for a in range(r) if a != axis]
    if others:
        changed = g.op("ReduceMax", changed, g.const(others, _I64), keepdims=0)
    # mark[i]: slice i starts a new run (the first always does, when there is one).
    first = g.op("Min", n, g.const([1], _I64))
    mark = g.op("Concat", g.op("Expand", g.const([1], _I32), first), changed, axis=0)
    values = g.op("Compress", x, cast(g, mark, _BOOL), axis=axis)
    run = g.op("Sub", g.op("CumSum", cast(g, mark, _I64), g.const(0, _I64)), g.const(1, _I64))
    inverse = _empty_i64(g)
    if return_inverse:
        inverse = g.op("Reshape", run, g.op("Shape", self)) if dim is None else run
    counts = _empty_i64(g)
    if return_counts:
        starts = g.op("Compress", _arange(g, g.op("Squeeze", n, g.const([0], _I64))),
                      cast(g, mark, _BOOL), axis=0)
        ends = g.op("Concat", g.op("Slice", starts, g.const([1], _I64),
                                   g.const([np.iinfo(np.int64).max], _I64)), n, axis=0)
        counts = g.op("Sub", ends, starts)
    return values, inverse, counts


# -- histc ----------------------------------------------------------------------------------------
@register(aten.histc.default)
def aten_histc(g: GraphBuilder, self: Tensor, bins: int = 100, min: float = 0,
               max: float = 0) -> Tensor:
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor"""
    out_dtype = g.out_dtype()
    work = ir.DataType.DOUBLE if out_dtype == ir.DataType.DOUBLE else _F32
    x = g.op("Reshape", cast(g, self, work), g.const([-1], _I64))
    if min == max:
        # torch takes the range from the data, widened by 1 on each side if it is a point.
        padded = g.op("Concat", x, g.const([np.nan], work), axis=0)
        finite = g.op("Not", g.op("IsNaN", padded))
        low = g.op("ReduceMin", g.op("Where", finite, padded, g.const(np.inf, work)), keepdims=0)
        high = g.op("ReduceMax", g.op("Where", finite, padded, g.const(-np.inf, work)),
                    keepdims=0)
        empty = g.op("IsInf", low)
        low = g.op("Where", empty, g.const(float(min), work), low)
        high = g.op("Where", empty, g.const(float(max), work), high)
        point = g.op("Equal", low, high)
        low = g.op("Where", point, g.op("Sub", low, g.const(1.0, work)), low)
        high = g.op("Where", point, g.op("Add", high, g.const(1.0, work)), high)
    else:
        low, high = g.const(float(min), work), g.const(float(max), work)
    inside = g.op("And", g.op("GreaterOrEqual", x, low), g.op("LessOrEqual", x, high))
    # bin = (x - min) * bins / (max - min), truncated; x == max goes to the last bin.
    position = g.op("Div", g.op("Mul", g.op("Sub", x, low), g.const(float(bins), work)),
                    g.op("Sub", high, low))
    index = g.op("Min", cast(g, g.op("Floor", g.op("Where", inside, position,
                                                   g.const(0.0, work))), _I64),
                 g.const(bins - 1, _I64))
    hits = g.op("And", g.op("Equal", g.op("Unsqueeze", index, g.const([1], _I64)),
                            g.op("Unsqueeze", _arange(g, bins), g.const([0], _I64))),
                g.op("Unsqueeze", inside, g.const([1], _I64)))
    # One extra row of zeros keeps ReduceSum from meeting an empty input (ORT returns those).
    counts = g.op("ReduceSum", g.op("Pad", cast(g, hits, work), g.const([0, 0, 1, 0], _I64)),
                  g.const([0], _I64), keepdims=0)
    return cast(g, counts, out_dtype)
