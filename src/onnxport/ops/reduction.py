"""Reductions: sum, mean, prod, max/min, arg-max/min, var/std, logsumexp, norms, any/all.

ONNX ReduceSum takes its axes as an input from opset 13, the other Reduce* ops from opset
18; below that they take an `axes` attribute. `_reduce` hides the difference. A missing
`axes` reduces every dimension. ONNX Runtime's CPU reductions lack float16/bfloat16 and
small-integer kernels, so those are computed in float32/int32 (torch also accumulates
half-precision sums in float32).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnxport.ops._helpers import cast, normalize_dim, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_SMALL_INT = (ir.DataType.BOOL, ir.DataType.INT8, ir.DataType.INT16, ir.DataType.UINT8,
              ir.DataType.UINT16)


def _float_compute(dtype: ir.DataType) -> ir.DataType:
    """float32 for half types (no ORT kernels, and torch accumulates them in float32)."""
    return ir.DataType.FLOAT if dtype in _HALF else dtype


def _minmax_compute(dtype: ir.DataType) -> ir.DataType:
    """A dtype with ORT ReduceMax/ReduceMin/ArgMax kernels holding every value of `dtype`."""
    if dtype in _HALF:
        return ir.DataType.FLOAT
    if dtype in _SMALL_INT:
        return ir.DataType.INT32
    if dtype == ir.DataType.INT64:
        # ORT ArgMax/ArgMin have no int64 kernel; float64 is exact below 2**53.
        return ir.DataType.DOUBLE
    return dtype


def _axes(dims: Any, r: int) -> list[int] | None:
    """Normalized axes, or None for 'every dimension' (None or [] in ATen)."""
    if dims is None:
        return None
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0 or r == 0:
        return None
    return sorted({normalize_dim(d, r) for d in dims})


def _reduce(g: GraphBuilder, op_type: str, x: Tensor, axes: Sequence[int] | None,
            keepdim: bool) -> Tensor:
    """`op_type` over `axes` (None: all); axes as an input or an attribute per the opset."""
    keep = int(bool(keepdim))
    if axes is None:
        return g.op(op_type, x, keepdims=keep)
    if op_type == "ReduceSum" and g.opset >= 13 or g.opset >= 18:
        return g.op(op_type, x, g.const(list(axes), ir.DataType.INT64), keepdims=keep)
    return g.op(op_type, x, axes=list(axes), keepdims=keep)


def _reduced_count(g: GraphBuilder, x: Tensor, axes: Sequence[int] | None, dtype: ir.DataType) -> Any:
    """How many elements each output element reduces over, as a constant when static."""
    shape = x.shape
    dims = list(shape) if shape is not None else None
    picked = dims if axes is None else ([dims[a] for a in axes] if dims is not None else None)
    if picked is not None and all(isinstance(d, int) for d in picked):
        return g.const(float(math.prod(picked)), dtype)
    sizes = g.op("Shape", x)
    if axes is not None:
        sizes = g.op("Gather", sizes, g.const(list(axes), ir.DataType.INT64), axis=0)
    return g.op("Cast", g.op("ReduceProd", sizes, keepdims=0), to=dtype)


def _sum(g: GraphBuilder, x: Tensor, dims: Any, keepdim: bool, r: int | None = None) -> Tensor:
    r = rank(x) if r is None else r
    out = g.out_dtype()
    compute = _float_compute(out)
    if compute in _SMALL_INT:
        compute = ir.DataType.INT64
    y = _reduce(g, "ReduceSum", cast(g, x, compute), _axes(dims, r), keepdim)
    return cast(g, y, out)


@register(aten.sum.default)
def aten_sum(g: GraphBuilder, self: Tensor, *, dtype: Any = None) -> Tensor:
    """sum(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _sum(g, self, None, False)


@register(aten.sum.dim_IntList)
def aten_sum_dim(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None, keepdim: bool = False,
                 *, dtype: Any = None) -> Tensor:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _sum(g, self, dim, keepdim)


@register(aten.nansum.default)
def aten_nansum(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None = None,
                keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = self
    if x.dtype is not None and x.dtype.is_floating_point():
        x = g.op("Where", g.op("IsNaN", x), g.const(0, like=x), x)
    return _sum(g, x, dim, keepdim, rank(self))


def _static_count(x: Tensor, axes: Sequence[int] | None) -> int | None:
    """How many elements each output element reduces over, when the shape says it."""
    if x.shape is None:
        return None
    dims = list(x.shape) if axes is None else [x.shape[a] for a in axes]
    return math.prod(dims) if all(isinstance(d, int) for d in dims) else None


def _mean(g: GraphBuilder, x: Tensor, dims: Any, keepdim: bool) -> Tensor:
    out = g.out_dtype()
    # ATen's CPU mean of float16/bfloat16 sums in float32, divides, and rounds once to the
    # half type: computed in float32 and cast, as here.
    compute = _float_compute(out)
    axes = _axes(dims, rank(x))
    count = _static_count(x, axes)
    x = cast(g, x, compute)
    if count:
        # One ReduceMean when the slices are known not to be empty (ORT's ReduceMean gives 0
        # for an empty slice, torch NaN).
        return cast(g, _reduce(g, "ReduceMean", x, axes, keepdim), out)
    total = _reduce(g, "ReduceSum", x, axes, keepdim)
    return cast(g, g.op("Div", total, _reduced_count(g, x, axes, compute)), out)


@register(aten.mean.default)
def aten_mean(g: GraphBuilder, self: Tensor, *, dtype: Any = None) -> Tensor:
    """mean(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _mean(g, self, None, False)


@register(aten.mean.dim)
def aten_mean_dim(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None, keepdim: bool = False,
                  *, dtype: Any = None) -> Tensor:
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _mean(g, self, dim, keepdim)


def _prod(g: GraphBuilder, x: Tensor, dims: Any, keepdim: bool) -> Tensor:
    out = g.out_dtype()
    compute = _float_compute(out)
    if compute in _SMALL_INT:
        compute = ir.DataType.INT64
    y = _reduce(g, "ReduceProd", cast(g, x, compute), _axes(dims, rank(x)), keepdim)
    return cast(g, y, out)


@register(aten.prod.default)
def aten_prod(g: GraphBuilder, self: Tensor, *, dtype: Any = None) -> Tensor:
    """prod(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _prod(g, self, None, False)


@register(aten.prod.dim_int)
def aten_prod_dim_int(g: GraphBuilder, self: Tensor, dim: int, keepdim: bool = False, *,
                      dtype: Any = None) -> Tensor:
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _prod(g, self, dim, keepdim)


def _extreme(g: GraphBuilder, op_type: str, x: Tensor, dims: Any, keepdim: bool) -> Tensor:
    dtype = x.dtype
    assert dtype is not None
    compute = _minmax_compute(dtype)
    if compute == ir.DataType.DOUBLE and dtype == ir.DataType.INT64:
        compute = dtype  # ReduceMax/ReduceMin do have int64 kernels
    axes = _axes(dims, rank(x))
    xc = cast(g, x, compute)
    y = _reduce(g, op_type, xc, axes, keepdim)
    if compute.is_floating_point():
        # torch propagates NaN; ORT's ReduceMax/ReduceMin may skip it. The sum of the NaNs
        # (0 when there are none) added to the result restores it.
        nans = g.op("Where", g.op("IsNaN", xc), xc, g.const(0.0, compute))
        y = g.op("Add", y, _reduce(g, "ReduceSum", nans, axes, keepdim))
    return cast(g, y, dtype)


@register(aten.amax.default)
def aten_amax(g: GraphBuilder, self: Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> Tensor:
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _extreme(g, "ReduceMax", self, dim, keepdim)


@register(aten.amin.default)
def aten_amin(g: GraphBuilder, self: Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> Tensor:
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _extreme(g, "ReduceMin", self, dim, keepdim)


@register(aten.max.default)
def aten_max(g: GraphBuilder, self: Tensor) -> Tensor:
    """max(Tensor self) -> Tensor"""
    return _extreme(g, "ReduceMax", self, None, False)


@register(aten.min.default)
def aten_min(g: GraphBuilder, self: Tensor) -> Tensor:
    """min(Tensor self) -> Tensor"""
    return _extreme(g, "ReduceMin", self, None, False)


@register(aten.aminmax.default)
def aten_aminmax(g: GraphBuilder, self: Tensor, *, dim: int | None = None,
                 keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)"""
    if dim is None and keepdim:
        # torch keeps every dimension as size 1
        return (_extreme(g, "ReduceMin", self, None, True), _extreme(g, "ReduceMax", self, None, True))
    return (_extreme(g, "ReduceMin", self, dim, keepdim), _extreme(g, "ReduceMax", self, dim, keepdim))


def _arg(g: GraphBuilder, op_type: str, x: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    """ArgMax/ArgMin; torch returns the first index among ties, as select_last_index=0 does."""
    dtype = x.dtype
    assert dtype is not None
    r = rank(x)
    x = cast(g, x, _minmax_compute(dtype))
    if dim is None or r == 0:
        x = g.op("Reshape", x, g.const([-1], ir.DataType.INT64))
        y = _arg_nan_first(g, op_type, x, 0, False)
        if keepdim and r > 0:
            return g.op("Reshape", y, g.const([1] * r, ir.DataType.INT64))
        return y
    return _arg_nan_first(g, op_type, x, normalize_dim(dim, r), keepdim)


def _arg_nan_first(g: GraphBuilder, op_type: str, x: Tensor, axis: int, keepdim: bool) -> Tensor:
    """ArgMax/ArgMin where, as in torch, the first NaN wins over every number."""
    y = g.op(op_type, x, axis=axis, keepdims=int(keepdim))
    if x.dtype is None or not x.dtype.is_floating_point():
        return y
    is_nan = g.op("Cast", g.op("IsNaN", x), to=ir.DataType.INT32)
    first_nan = g.op("ArgMax", is_nan, axis=axis, keepdims=int(keepdim))
    has_nan = g.op("Cast", g.op("ReduceMax", is_nan, g.const([axis], ir.DataType.INT64),
                                keepdims=int(keepdim)) if g.opset >= 18 else
                   g.op("ReduceMax", is_nan, axes=[axis], keepdims=int(keepdim)), to=ir.DataType.BOOL)
    return g.op("Where", has_nan, first_nan, y)


@register(aten.argmax.default)
def aten_argmax(g: GraphBuilder, self: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(g, "ArgMax", self, dim, keepdim)


@register(aten.argmin.default)
def aten_argmin(g: GraphBuilder, self: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(g, "ArgMin", self, dim, keepdim)


@register(aten.max.dim)
def aten_max_dim(g: GraphBuilder, self: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _extreme(g, "ReduceMax", self, dim, keepdim), _arg(g, "ArgMax", self, dim, keepdim)


@register(aten.min.dim)
def aten_min_dim(g: GraphBuilder, self: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _extreme(g, "ReduceMin", self, dim, keepdim), _arg(g, "ArgMin", self, dim, keepdim)


# -- variance and standard deviation ---------------------------------------------------------

def _var_mean(g: GraphBuilder, x: Tensor, dims: Any, correction: float,
              keepdim: bool) -> tuple[Tensor, Tensor, ir.DataType]:
    """(var, mean) in the compute dtype, and the output dtype."""
    out = g.out_dtype()
    compute = _float_compute(out)
    axes = _axes(dims, rank(x))
    count = _reduced_count(g, x, axes, compute)
    x = cast(g, x, compute)
    # sum / count rather than ReduceMean: ORT gives 0 for an empty slice, torch NaN
    mean_kept = g.op("Div", _reduce(g, "ReduceSum", x, axes, True), count)
    diff = g.op("Sub", x, mean_kept)
    sq_sum = _reduce(g, "ReduceSum", g.op("Mul", diff, diff), axes, keepdim)
    # torch divides by max(0, N - correction): a zero or negative count gives inf/nan
    denom = g.op("Max", g.op("Sub", count, g.const(float(correction), compute)), g.const(0.0, compute))
    var = g.op("Div", sq_sum, denom)
    mean = mean_kept if keepdim else g.op("Div", _reduce(g, "ReduceSum", x, axes, False), count)
    return var, mean, out


def _correction(correction: Any, unbiased: bool = True) -> float:
    if correction is None:
        return 1.0 if unbiased else 0.0
    return float(correction)


@register(aten.var.correction)
def aten_var_correction(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None = None, *,
                        correction: float | None = None, keepdim: bool = False) -> Tensor:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    var, _, out = _var_mean(g, self, dim, _correction(correction), keepdim)
    return cast(g, var, out)


@register(aten.var.dim)
def aten_var_dim(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None, unbiased: bool = True,
                 keepdim: bool = False) -> Tensor:
    """var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor"""
    var, _, out = _var_mean(g, self, dim, _correction(None, unbiased), keepdim)
    return cast(g, var, out)


@register(aten.var.default)
def aten_var(g: GraphBuilder, self: Tensor, unbiased: bool = True) -> Tensor:
    """var(Tensor self, bool unbiased=True) -> Tensor"""
    var, _, out = _var_mean(g, self, None, _correction(None, unbiased), False)
    return cast(g, var, out)


@register(aten.std.correction)
def aten_std_correction(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None = None, *,
                        correction: float | None = None, keepdim: bool = False) -> Tensor:
    """std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    var, _, out = _var_mean(g, self, dim, _correction(correction), keepdim)
    return cast(g, g.op("Sqrt", var), out)


@register(aten.std.dim)
def aten_std_dim(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None, unbiased: bool = True,
                 keepdim: bool = False) -> Tensor:
    """std.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor"""
    var, _, out = _var_mean(g, self, dim, _correction(None, unbiased), keepdim)
    return cast(g, g.op("Sqrt", var), out)


@register(aten.std.default)
def aten_std(g: GraphBuilder, self: Tensor, unbiased: bool = True) -> Tensor:
    """std(Tensor self, bool unbiased=True) -> Tensor"""
    var, _, out = _var_mean(g, self, None, _correction(None, unbiased), False)
    return cast(g, g.op("Sqrt", var), out)


@register(aten.var_mean.correction)
def aten_var_mean_correction(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None = None, *,
                             correction: float | None = None,
                             keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    var, mean, out = _var_mean(g, self, dim, _correction(correction), keepdim)
    return cast(g, var, out), cast(g, mean, out)


@register(aten.var_mean.dim)
def aten_var_mean_dim(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None, unbiased: bool = True,
                      keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """var_mean.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> (Tensor, Tensor)"""
    var, mean, out = _var_mean(g, self, dim, _correction(None, unbiased), keepdim)
    return cast(g, var, out), cast(g, mean, out)


@register(aten.std_mean.correction)
def aten_std_mean_correction(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None = None, *,
                             correction: float | None = None,
                             keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    var, mean, out = _var_mean(g, self, dim, _correction(correction), keepdim)
    return cast(g, g.op("Sqrt", var), out), cast(g, mean, out)


@register(aten.std_mean.dim)
def aten_std_mean_dim(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None, unbiased: bool = True,
                      keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """std_mean.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> (Tensor, Tensor)"""
    var, mean, out = _var_mean(g, self, dim, _correction(None, unbiased), keepdim)
    return cast(g, g.op("Sqrt", var), out), cast(g, mean, out)


# -- logsumexp and norms ---------------------------------------------------------------------

def logsumexp(g: GraphBuilder, x: Tensor, axes: Sequence[int] | None, keepdim: bool) -> Tensor:
    """log(sum(exp(x))) shifted by the max; an all -inf (or +inf) slice keeps torch's result."""
    m = _reduce(g, "ReduceMax", x, axes, True)
    # An infinite max would make x - m NaN; torch shifts by 0 there.
    m = g.op("Where", g.op("IsInf", m), g.const(0.0, like=m), m)
    s = _reduce(g, "ReduceSum", g.op("Exp", g.op("Sub", x, m)), axes, keepdim)
    if not keepdim:
        m = _reduce(g, "ReduceMax", m, axes, False)
    return g.op("Add", g.op("Log", s), m)


@register(aten.logsumexp.default)
def aten_logsumexp(g: GraphBuilder, self: Tensor, dim: Sequence[int], keepdim: bool = False) -> Tensor:
    """logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"""
    out = g.out_dtype()
    axes = _axes(dim, rank(self))
    return cast(g, logsumexp(g, cast(g, self, _float_compute(out)), axes, keepdim), out)


def _vector_norm(g: GraphBuilder, x: Tensor, ord: float, axes: Sequence[int] | None,
                 keepdim: bool) -> Tensor:
    if ord == 2:
        return g.op("Sqrt", _reduce(g, "ReduceSum", g.op("Mul", x, x), axes, keepdim))
    ax = g.op("Abs", x)
    if ord == 1:
        return _reduce(g, "ReduceSum", ax, axes, keepdim)
    if ord == math.inf:
        return _extreme(g, "ReduceMax", ax, axes, keepdim)  # NaN-propagating, as torch
    if ord == -math.inf:
        return _extreme(g, "ReduceMin", ax, axes, keepdim)
    if ord == 0:
        nonzero = g.op("Cast", g.op("Not", g.op("Equal", x, g.const(0.0, like=x))), to=x.dtype)
        return _reduce(g, "ReduceSum", nonzero, axes, keepdim)
    p = g.const(float(ord), like=x)
    total = _reduce(g, "ReduceSum", g.op("Pow", ax, p), axes, keepdim)
    return g.op("Pow", total, g.const(1.0 / float(ord), like=x))


@register(aten.linalg_vector_norm.default)
def aten_linalg_vector_norm(g: GraphBuilder, self: Tensor, ord: float = 2,
                            dim: Sequence[int] | None = None, keepdim: bool = False, *,
                            dtype: Any = None) -> Tensor:
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    out = g.out_dtype()
    axes = _axes(dim, rank(self))
    return cast(g, _vector_norm(g, cast(g, self, _float_compute(out)), float(ord), axes, keepdim), out)


@register(aten.norm.ScalarOpt_dim)
def aten_norm_scalar_opt_dim(g: GraphBuilder, self: Tensor, p: float | None, dim: Sequence[int],
                             keepdim: bool = False) -> Tensor:
    """norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False) -> Tensor"""
    out = g.out_dtype()
    axes = _axes(dim, rank(self))
    x = cast(g, self, _float_compute(out))
    return cast(g, _vector_norm(g, x, 2.0 if p is None else float(p), axes, keepdim), out)


@register(aten.norm.Scalar)
def aten_norm_scalar(g: GraphBuilder, self: Tensor, p: float = 2) -> Tensor:
    """norm.Scalar(Tensor self, Scalar p=2) -> Tensor"""
    out = g.out_dtype()
    x = cast(g, self, _float_compute(out))
    return cast(g, _vector_norm(g, x, float(p), None, False), out)


# -- any, all, count_nonzero -----------------------------------------------------------------

def _count_true(g: GraphBuilder, mask: Tensor, dims: Any, keepdim: bool, r: int) -> Tensor:
    """How many True in `mask` (of rank `r`) over `dims`; a sum, so an empty slice counts 0."""
    return _reduce(g, "ReduceSum", g.op("Cast", mask, to=ir.DataType.INT64), _axes(dims, r), keepdim)


def _is_nonzero(g: GraphBuilder, x: Tensor) -> Tensor:
    if x.dtype == ir.DataType.BOOL:
        return x
    return g.op("Not", g.op("Equal", x, g.const(0, like=x)))


def _any(g: GraphBuilder, x: Tensor, dims: Any, keepdim: bool) -> Tensor:
    count = _count_true(g, _is_nonzero(g, x), dims, keepdim, rank(x))
    return cast(g, g.op("Greater", count, g.const(0, ir.DataType.INT64)), g.out_dtype())


def _all(g: GraphBuilder, x: Tensor, dims: Any, keepdim: bool) -> Tensor:
    zeros = g.op("Not", _is_nonzero(g, x))
    count = _count_true(g, zeros, dims, keepdim, rank(x))
    return cast(g, g.op("Equal", count, g.const(0, ir.DataType.INT64)), g.out_dtype())


@register(aten.any.default)
def aten_any(g: GraphBuilder, self: Tensor) -> Tensor:
    """any(Tensor self) -> Tensor"""
    return _any(g, self, None, False)


@register(aten.any.dim)
def aten_any_dim(g: GraphBuilder, self: Tensor, dim: int, keepdim: bool = False) -> Tensor:
    """any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor"""
    return _any(g, self, dim, keepdim)


@register(aten.any.dims)
def aten_any_dims(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None = None,
                  keepdim: bool = False) -> Tensor:
    """any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
    return _any(g, self, dim, keepdim)


@register(aten.all.default)
def aten_all(g: GraphBuilder, self: Tensor) -> Tensor:
    """all(Tensor self) -> Tensor"""
    return _all(g, self, None, False)


@register(aten._is_all_true.default)
def aten__is_all_true(g: GraphBuilder, self: Tensor) -> Tensor:
    """_is_all_true(Tensor self) -> Tensor"""
    # (a bool tensor's all(); torch._check on a tensor condition, D-FINE's attention)
    return _all(g, self, None, False)


@register(aten.all.dim)
def aten_all_dim(g: GraphBuilder, self: Tensor, dim: int, keepdim: bool = False) -> Tensor:
    """all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor"""
    return _all(g, self, dim, keepdim)


@register(aten.all.dims)
def aten_all_dims(g: GraphBuilder, self: Tensor, dim: Sequence[int] | None = None,
                  keepdim: bool = False) -> Tensor:
    """all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"""
    return _all(g, self, dim, keepdim)


@register(aten.count_nonzero.default)
def aten_count_nonzero(g: GraphBuilder, self: Tensor, dim: int | None = None) -> Tensor:
    """count_nonzero(Tensor self, int? dim=None) -> Tensor"""
    return _count_true(g, _is_nonzero(g, self), dim, False, rank(self))


@register(aten.count_nonzero.dim_IntList)
def aten_count_nonzero_dim_intlist(g: GraphBuilder, self: Tensor, dim: Sequence[int]) -> Tensor:
    """count_nonzero.dim_IntList(Tensor self, int[] dim) -> Tensor"""
    if len(dim) == 0:
        # an empty dim list reduces nothing here (unlike sum): a 0/1 per element
        return g.op("Cast", _is_nonzero(g, self), to=ir.DataType.INT64)
    return _count_true(g, _is_nonzero(g, self), dim, False, rank(self))
