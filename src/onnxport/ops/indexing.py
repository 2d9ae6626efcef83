"""Indexing: advanced indexing, gather/scatter, repeats, triangles, sorting and scans.

Index tensors may be negative in torch; ONNX's ND gather/scatter ops are given
non-negative indices (normalized here) so that no kernel's bounds rules matter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.ops._helpers import cast, int_list, normalize_dim, rank
from onnxport.ops.shape import (
    INT64_MAX,
    dim_size,
    out_shape,
    shape_of,
    shape_slice,
    static_shape,
    to_out_shape,
    transpose,
)
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
_BOOL = ir.DataType.BOOL


def _scalar_i64(g: GraphBuilder, x: Any) -> Tensor:
    if isinstance(x, ir.Value):
        return g.op("Reshape", cast(g, x, _I64), g.const([], _I64))
    return g.const(int(x), _I64)


def _non_negative(g: GraphBuilder, idx: Tensor, size: int | Tensor) -> Tensor:
    """`idx` with negative entries counted from the end of a dim of `size`."""
    n = g.const(size, _I64) if isinstance(size, int) else size
    return g.op("Where", g.op("Less", idx, g.const(0, _I64)), g.op("Add", idx, n), idx)


def _same_shape(value: Tensor, like: Tensor) -> Tensor:
    """`value`, recorded as having the shape of `like` (rank checks read it)."""
    if value.shape is None and like.shape is not None:
        value.shape = like.shape
    return value


def _reduction_dtype(dtype: ir.DataType, reduction: str | None) -> ir.DataType:
    # ONNX Runtime's ScatterElements/ScatterND lack float16 and bool kernels for reductions.
    # Bools reduce as 0/1 int32 and cast back (nonzero is True): add and max are Or, mul and
    # min are And, as ATen's bool kernels give.
    if reduction is not None and dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return ir.DataType.FLOAT
    if reduction is not None and dtype == _BOOL:
        return ir.DataType.INT32
    return dtype


def _as_rank1(g: GraphBuilder, x: Tensor) -> Tensor:
    return g.op("Reshape", x, g.const([1], _I64)) if rank(x) == 0 else x


# -- advanced indexing -------------------------------------------------------------------------
class _Indexing:
    """x[indices] as GatherND/ScatterND on `x` with the indexed dims moved to the front.

    `stacked` has shape (*B, k): B is the broadcast shape of the k index tensors. The
    gathered layout is (*B, *rest); torch's layout puts B where the indexed dims were when
    they are adjacent, and in front otherwise: `to_torch` permutes gathered into torch's.
    """

    def __init__(self, g: GraphBuilder, x: Tensor, indices: Sequence[Tensor | None]) -> None:
        r = rank(x)
        entries: list[tuple[int, Tensor, list[int] | None]] = []
        positions: list[int] = []
        dim = 0
        for i, idx in enumerate(indices):
            if idx is None:
                dim += 1
                continue
            positions.append(i)
            if idx.dtype in (_BOOL, ir.DataType.UINT8):
                k = rank(idx)
                if k == 0:
                    raise ValueError("indexing with a 0-d boolean mask")
                nonzero = g.op("NonZero", cast(g, idx, _BOOL))
                for j in range(k):
                    row = g.op("Gather", nonzero, g.const(j, _I64), axis=0)
                    entries.append((dim + j, row, None))
                dim += k
            else:
                index = _non_negative(g, cast(g, idx, _I64), dim_size(g, x, dim))
                entries.append((dim, index, static_shape(idx)))
                dim += 1
        self.dims = [d for d, _, _ in entries]
        self.rest = [d for d in range(r) if d not in self.dims]
        is_adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
        shapes = [s for _, _, s in entries]
        if all(s is not None for s in shapes):
            b_tuple = np.broadcast_shapes(*[tuple(s) for s in shapes])  # type: ignore[misc]
            b_shape: list[int] | None = [int(d) for d in b_tuple]
            b = g.const(b_shape, _I64)
            self.num_b = len(b_shape)  # type: ignore[arg-type]
        else:
            b_shape = None
            total = entries[0][1]
            for _, v, _ in entries[1:]:
                total = g.op("Add", total, v)
            b = g.op("Shape", total)
            self.num_b = max(1 if s is None else len(s) for s in shapes)
        last = g.const([-1], _I64)
        self.stacked = g.op("Concat", *[g.op("Unsqueeze", g.op("Expand", v, b), last)
                                        for _, v, _ in entries], axis=-1)
        self.x_front = transpose(g, x, self.dims + self.rest)
        before = [d for d in self.rest if d < self.dims[0]] if is_adjacent else []
        nb, nr = self.num_b, len(self.rest)
        self.to_torch = [nb + i for i in range(len(before))] + list(range(nb)) + \
            [nb + i for i in range(len(before), nr)]
        x_shape = static_shape(x)
        self.gathered_shape: list[int] | None = None
        if b_shape is not None and x_shape is not None:
            self.gathered_shape = [*b_shape, *[x_shape[d] for d in self.rest]]

    def gathered_shape_value(self, g: GraphBuilder) -> Tensor:
        if self.gathered_shape is not None:
            return g.const(self.gathered_shape, _I64)
        return g.op("Concat", g.op("Shape", self.stacked, end=-1),
                    g.op("Shape", self.x_front, start=len(self.dims)), axis=0)


@register(aten.index.Tensor)
def aten_index(g: GraphBuilder, self: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"""
    real = [(i, t) for i, t in enumerate(indices) if t is not None]
    if not real:
        return self
    if len(real) == 1 and real[0][1].dtype not in (_BOOL, ir.DataType.UINT8):
        # One integer index: Gather already lays out the result as torch does.
        dim, idx = real[0]
        return g.op("Gather", self, cast(g, idx, _I64), axis=dim)
    plan = _Indexing(g, self, indices)
    gathered = g.op("GatherND", plan.x_front, plan.stacked)
    return transpose(g, gathered, plan.to_torch)


@register(aten.index_put.default)
def aten_index_put(g: GraphBuilder, self: Tensor, indices: Sequence[Tensor | None],
                   values: Tensor, accumulate: bool = False) -> Tensor:
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"""
    if all(t is None for t in indices):
        raise ValueError("index_put without any index tensor")
    assert self.dtype is not None
    dtype = _reduction_dtype(self.dtype, "add" if accumulate else None)
    plan = _Indexing(g, _same_shape(cast(g, self, dtype), self), indices)
    values = cast(g, values, dtype)
    # values broadcast against x[indices] in torch's layout, then move to the gathered layout.
    perm = plan.to_torch
    if plan.gathered_shape is not None:
        torch_shape: Tensor = g.const([plan.gathered_shape[p] for p in perm], _I64)
    else:
        torch_shape = g.op("Gather", plan.gathered_shape_value(g), g.const(perm, _I64), axis=0)
    updates = g.op("Expand", values, torch_shape)
    inverse = [perm.index(i) for i in range(len(perm))]
    updates = transpose(g, updates, inverse)
    out = g.op("ScatterND", plan.x_front, plan.stacked, updates,
               reduction="add" if accumulate else None)
    order = plan.dims + plan.rest
    return cast(g, transpose(g, out, [order.index(i) for i in range(len(order))]), self.dtype)


# -- gather / scatter ---------------------------------------------------------------------------
@register(aten.index_select.default)
def aten_index_select(g: GraphBuilder, self: Tensor, dim: int, index: Tensor) -> Tensor:
    """index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    flat = g.op("Reshape", cast(g, index, _I64), g.const([-1], _I64))
    if rank(self) == 0:
        return to_out_shape(g, g.op("Gather", _as_rank1(g, self), flat, axis=0), [])
    return g.op("Gather", self, flat, axis=normalize_dim(dim, rank(self)))


@register(aten.gather.default)
def aten_gather(g: GraphBuilder, self: Tensor, dim: int, index: Tensor, *,
                sparse_grad: bool = False) -> Tensor:
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    shape = static_shape(index)
    if shape is not None and 0 in shape:
        # torch lets an empty index have any shape; the result is empty.
        return g.op("Expand", g.const(0, self.dtype), g.const(shape, _I64))
    index = _same_shape(cast(g, index, _I64), index)
    if rank(index) == 0 or rank(self) == 0:
        out = g.op("GatherElements", _as_rank1(g, self), _as_rank1(g, index), axis=0)
        return to_out_shape(g, out, [])
    return g.op("GatherElements", self, index, axis=normalize_dim(dim, rank(self)))


@register(aten.embedding.default)
def aten_embedding(g: GraphBuilder, weight: Tensor, indices: Tensor, padding_idx: Any = -1,
                   scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"""  # noqa: E501
    # padding_idx only changes the gradient; the forward pass is a plain row lookup.
    return g.op("Gather", weight, cast(g, indices, _I64), axis=0)


@register(aten.embedding_renorm.default)
def aten_embedding_renorm(g: GraphBuilder, self: Tensor, indices: Tensor, max_norm: float,
                          norm_type: float) -> Tensor:
    """embedding_renorm(Tensor self, Tensor indices, float max_norm, float norm_type) -> Tensor"""
    # Rows that `indices` reads and whose p-norm exceeds max_norm are scaled down to it,
    # with torch's 1e-7 guard in the divisor.
    axes = g.const([1], _I64)
    magnitude = g.op("Abs", self)
    if norm_type == 1:
        norm = g.op("ReduceSum", magnitude, axes, keepdims=1)
    elif norm_type == 2:
        norm = g.op("ReduceL2", self, axes, keepdims=1)
    elif norm_type == float("inf"):
        norm = g.op("ReduceMax", magnitude, axes, keepdims=1)
    else:
        powered = g.op("Pow", magnitude, g.const(norm_type, like=self))
        norm = g.op("Pow", g.op("ReduceSum", powered, axes, keepdims=1),
                    g.const(1.0 / norm_type, like=self))
    rows = g.op("Range", g.const(0, _I64), _scalar_i64(g, dim_size(g, self, 0)), g.const(1, _I64))
    flat = g.op("Reshape", cast(g, indices, _I64), g.const([-1, 1], _I64))
    is_read = g.op("ReduceMax", cast(g, g.op("Equal", flat, rows), _I64), g.const([0], _I64),
                   keepdims=0)
    is_read = g.op("Unsqueeze", cast(g, is_read, _BOOL), axes)
    too_long = g.op("And", is_read, g.op("Greater", norm, g.const(max_norm, like=self)))
    scale = g.op("Div", g.const(max_norm, like=self), g.op("Add", norm, g.const(1e-7, like=self)))
    return g.op("Mul", self, g.op("Where", too_long, scale, g.const(1.0, like=self)))


@register(aten.take_along_dim.default)
def aten_take_along_dim(g: GraphBuilder, self: Tensor, indices: Tensor,
                        dim: int | None = None) -> Tensor:
    """take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor"""
    flat = g.const([-1], _I64)
    if dim is None:
        return g.op("GatherElements", g.op("Reshape", self, flat), g.op("Reshape", indices, flat),
                    axis=0)
    r = rank(self)
    axis = normalize_dim(dim, r)
    # torch broadcasts self and indices in every dim but `dim`.
    xs, ids = static_shape(self), static_shape(indices)
    if xs is not None and ids is not None:
        common = [max(a, b) if min(a, b) != 0 or max(a, b) == 1 else 0 for a, b in zip(xs, ids)]
        x_target: Any = [xs[i] if i == axis else common[i] for i in range(r)]
        i_target: Any = [ids[i] if i == axis else common[i] for i in range(r)]
        x_b = self if x_target == xs else g.op("Expand", self, g.const(x_target, _I64))
        i_b = indices if i_target == ids else g.op("Expand", indices, g.const(i_target, _I64))
    else:
        x_shape, i_shape = g.op("Shape", self), g.op("Shape", indices)
        common_v = g.op("Max", x_shape, i_shape)
        is_axis = g.const([i == axis for i in range(r)], _BOOL)
        x_b = g.op("Expand", self, g.op("Where", is_axis, x_shape, common_v))
        i_b = g.op("Expand", indices, g.op("Where", is_axis, i_shape, common_v))
    return g.op("GatherElements", x_b, i_b, axis=axis)


def _scatter(g: GraphBuilder, self: Tensor, dim: int, index: Tensor, src: Any,
             reduction: str | None) -> Tensor:
    r = max(rank(self), 1)
    index_shape = static_shape(index)
    src_shape = static_shape(src) if isinstance(src, ir.Value) else None
    assert self.dtype is not None
    dtype = _reduction_dtype(self.dtype, reduction)
    x = cast(g, _as_rank1(g, self), dtype)
    index = cast(g, _as_rank1(g, index), _I64)
    axis = normalize_dim(dim, r)
    if isinstance(src, ir.Value):
        src = cast(g, _as_rank1(g, src), dtype)
        # torch reads only the index-shaped corner of src; ScatterElements wants equal shapes.
        if src_shape is None or src_shape != index_shape:
            src = g.op("Slice", src, g.const([0] * r, _I64), g.op("Shape", index),
                       g.const(list(range(r)), _I64))
    else:
        src = g.op("Expand", g.const(src, dtype), g.op("Shape", index))
    out = g.op("ScatterElements", x, index, src, axis=axis, reduction=reduction)
    out = g.op("Reshape", out, g.const([], _I64)) if rank(self) == 0 else out
    return _same_shape(cast(g, out, self.dtype), self)


_SCATTER_REDUCE = {"add": "add", "multiply": "mul", "sum": "add", "prod": "mul",
                   "amax": "max", "amin": "min"}


def _scatter_positions(g: GraphBuilder, self: Tensor, src: Tensor, axis: int,
                       positions: np.ndarray) -> Tensor:
    """self with src written at `positions` along `axis` (src has len(positions) there)."""
    r = rank(self)
    shape = [1] * r
    shape[axis] = -1
    index = g.op("Expand", g.const(positions.astype(np.int64).reshape(shape), _I64),
                 shape_of(g, src))
    return g.op("ScatterElements", self, index, cast(g, src, self.dtype), axis=axis)  # type: ignore[arg-type]


@register(aten.slice_scatter.default)
def aten_slice_scatter(g: GraphBuilder, self: Tensor, src: Tensor, dim: int = 0,
                       start: Any = None, end: Any = None, step: Any = 1) -> Tensor:
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor"""  # noqa: E501
    axis = normalize_dim(dim, rank(self))
    n = dim_size(g, self, axis)
    if all(isinstance(v, int) or v is None for v in (n, start, end, step)):
        positions = np.arange(n)[slice(start, end, step)]  # type: ignore[arg-type]
        if positions.size == 0:
            return self
        return _scatter_positions(g, self, src, axis, positions)
    # Symbolic bounds: the positions are Slice(Range(0, n)), which counts negative bounds
    # from the end and clamps out-of-range ones as Python slicing (and so torch) does.
    arange = g.const(np.arange(n, dtype=np.int64), _I64) if isinstance(n, int) else \
        g.op("Range", g.const(0, _I64), n, g.const(1, _I64))
    positions = g.op("Slice", arange, int_list(g, [0 if start is None else start]),
                     int_list(g, [INT64_MAX if end is None else end]),
                     g.const([0], _I64), int_list(g, [step]))
    shape = [1] * rank(self)
    shape[axis] = -1
    index = g.op("Expand", g.op("Reshape", positions, g.const(shape, _I64)), shape_of(g, src))
    return g.op("ScatterElements", self, index, cast(g, src, self.dtype), axis=axis)  # type: ignore[arg-type]


@register(aten.diagonal_scatter.default)
def aten_diagonal_scatter(g: GraphBuilder, self: Tensor, src: Tensor, offset: int = 0,
                          dim1: int = 0, dim2: int = 1) -> Tensor:
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor"""
    r = rank(self)
    d1, d2 = normalize_dim(dim1, r), normalize_dim(dim2, r)
    a, b = dim_size(g, self, d1), dim_size(g, self, d2)
    if not isinstance(a, int) or not isinstance(b, int):
        raise ValueError("diagonal_scatter on symbolic-size dims")
    # As in diagonal: the two dims go last and merge; src lands on the diagonal's positions.
    others = [d for d in range(r) if d not in (d1, d2)]
    perm = others + [d1, d2]
    x = transpose(g, self, perm)
    length = max(0, min(a, b - offset) if offset >= 0 else min(a + offset, b))
    if length == 0:
        return self
    flat_positions = (np.arange(length) + max(-offset, 0)) * b + np.arange(length) + max(offset, 0)
    batch = g.op("Gather", shape_of(g, self), g.const(others, _I64), axis=0) if others \
        else g.const([], _I64)
    flat = g.op("Reshape", x, g.op("Concat", batch, g.const([a * b], _I64), axis=0), allowzero=1)
    flat.shape = ir.Shape([*(self.shape[d] for d in others), a * b])  # type: ignore[index]
    out = _scatter_positions(g, flat, src, len(others), flat_positions)
    out = g.op("Reshape", out, g.op("Concat", batch, g.const([a, b], _I64), axis=0), allowzero=1)
    return transpose(g, out, [perm.index(i) for i in range(r)])


@register(aten.scatter.src)
def aten_scatter_src(g: GraphBuilder, self: Tensor, dim: int, index: Tensor,
                     src: Tensor) -> Tensor:
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter(g, self, dim, index, src, None)


@register(aten.scatter.value)
def aten_scatter_value(g: GraphBuilder, self: Tensor, dim: int, index: Tensor,
                       value: Any) -> Tensor:
    """scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor"""
    return _scatter(g, self, dim, index, value, None)


@register(aten.scatter.reduce)
def aten_scatter_reduce(g: GraphBuilder, self: Tensor, dim: int, index: Tensor, src: Tensor, *,
                        reduce: str) -> Tensor:
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor"""
    return _scatter(g, self, dim, index, src, _SCATTER_REDUCE[reduce])


@register(aten.scatter.value_reduce)
def aten_scatter_value_reduce(g: GraphBuilder, self: Tensor, dim: int, index: Tensor,
                              value: Any, *, reduce: str) -> Tensor:
    """scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, str reduce) -> Tensor"""  # noqa: E501
    return _scatter(g, self, dim, index, value, _SCATTER_REDUCE[reduce])


@register(aten.scatter_add.default)
def aten_scatter_add(g: GraphBuilder, self: Tensor, dim: int, index: Tensor,
                     src: Tensor) -> Tensor:
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter(g, self, dim, index, src, "add")


def _reduce_identity(reduce: str, dtype: ir.DataType) -> Any:
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point():
        return -np.inf if reduce == "amax" else np.inf
    if dtype == _BOOL:
        return reduce == "amin"
    info = np.iinfo(dtype.numpy())
    return int(info.min) if reduce == "amax" else int(info.max)


def _floor_divide(g: GraphBuilder, a: Tensor, b: Tensor) -> Tensor:
    q = g.op("Div", a, b)
    # ONNX integer Div truncates; torch's integer mean rounds down.
    has_rest = g.op("Not", g.op("Equal", g.op("Mul", q, b), a))
    is_negative = g.op("Less", a, g.const(0, like=a))
    assert a.dtype is not None
    return g.op("Sub", q, cast(g, g.op("And", has_rest, is_negative), a.dtype))


@register(aten.scatter_reduce.two)
def aten_scatter_reduce_two(g: GraphBuilder, self: Tensor, dim: int, index: Tensor, src: Tensor,
                            reduce: str, *, include_self: bool = True) -> Tensor:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor"""  # noqa: E501
    dtype = self.dtype
    assert dtype is not None
    base = self
    if not include_self:
        # The scattered positions start from the reduction's identity instead of self.
        base = _scatter(g, self, dim, index, _reduce_identity(reduce, dtype), None)
    if reduce != "mean":
        return _scatter(g, base, dim, index, src, _SCATTER_REDUCE[reduce])
    total = _scatter(g, base, dim, index, src, "add")
    start = _same_shape(g.op("Expand", g.const(1 if include_self else 0, dtype),
                             shape_of(g, self)), self)
    count = _scatter(g, start, dim, index, 1, "add")
    count = g.op("Max", count, g.const(1, dtype))
    if dtype.is_floating_point():
        return g.op("Div", total, count)
    return _floor_divide(g, total, count)


@register(aten.index_add.default)
def aten_index_add(g: GraphBuilder, self: Tensor, dim: int, index: Tensor, source: Tensor, *,
                   alpha: Any = 1) -> Tensor:
    """index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor"""
    assert self.dtype is not None
    dtype = _reduction_dtype(self.dtype, "add")
    source_rank = rank(source)
    source_shape = shape_of(g, source)
    source = cast(g, source, dtype)
    if alpha != 1:
        source = g.op("Mul", source, g.const(alpha, dtype))
    if source_rank == 0:
        source = g.op("Reshape", source, g.const([1], _I64))
    r = max(rank(self), 1)
    axis = normalize_dim(dim, r)
    n = dim_size(g, self, axis) if rank(self) > 0 else 1
    index = _non_negative(g, g.op("Reshape", cast(g, index, _I64), g.const([-1], _I64)), n)
    # Each source slice i goes to row index[i]: spread index over source's shape.
    spread = g.op("Reshape", index, g.const([1] * axis + [-1] + [1] * (r - axis - 1), _I64))
    spread = g.op("Expand", spread, source_shape if source_rank else g.const([1], _I64))
    out = g.op("ScatterElements", cast(g, _as_rank1(g, self), dtype), spread, source, axis=axis,
               reduction="add")
    out = g.op("Reshape", out, g.const([], _I64)) if rank(self) == 0 else out
    return cast(g, out, self.dtype)


@register(aten.masked_select.default)
def aten_masked_select(g: GraphBuilder, self: Tensor, mask: Tensor) -> Tensor:
    """masked_select(Tensor self, Tensor mask) -> Tensor"""
    # Expand broadcasts both ways, so this is the broadcast of mask and self.
    mask_b = g.op("Expand", cast(g, mask, _BOOL), shape_of(g, self))
    self_b = g.op("Expand", self, g.op("Shape", mask_b))
    flat = g.const([-1], _I64)
    return g.op("Compress", g.op("Reshape", self_b, flat), g.op("Reshape", mask_b, flat), axis=0)


# -- repeats --------------------------------------------------------------------------------------
def _tile(g: GraphBuilder, x: Tensor, repeats: Sequence[Any]) -> Tensor:
    r = rank(x)
    if len(repeats) > r:
        x = g.op("Unsqueeze", x, g.const(list(range(len(repeats) - r)), _I64))
    if all(isinstance(n, int) and n == 1 for n in repeats):
        return x
    return g.op("Tile", x, int_list(g, repeats))


@register(aten.repeat.default)
def aten_repeat(g: GraphBuilder, self: Tensor, repeats: Sequence[Any]) -> Tensor:
    """repeat(Tensor self, SymInt[] repeats) -> Tensor"""
    return _tile(g, self, repeats)


@register(aten.tile.default)
def aten_tile(g: GraphBuilder, self: Tensor, dims: Sequence[Any]) -> Tensor:
    """tile(Tensor self, SymInt[] dims) -> Tensor"""
    r = rank(self)
    return _tile(g, self, [1] * (r - len(dims)) + list(dims))


@register(aten.repeat_interleave.self_int)
def aten_repeat_interleave_self_int(g: GraphBuilder, self: Tensor, repeats: Any,
                                    dim: int | None = None, *,
                                    output_size: Any = None) -> Tensor:
    """repeat_interleave.self_int(Tensor self, SymInt repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor"""  # noqa: E501
    x = self
    if dim is None:
        x = g.op("Reshape", self, g.const([-1], _I64))
        axis = 0
        r = 1
    else:
        r = max(rank(self), 1)
        x = _as_rank1(g, self)
        axis = normalize_dim(dim, r)
    # Each element gets a new axis of `repeats` copies right after it, then the two merge.
    spread = g.op("Unsqueeze", x, g.const([axis + 1], _I64))
    copies = [1] * (axis + 1) + [repeats] + [1] * (r - axis - 1)
    spread = g.op("Expand", spread, int_list(g, copies))
    shape = out_shape(g)
    if shape is not None:
        return g.op("Reshape", spread, g.const(shape, _I64), allowzero=1)
    merged = g.op("Mul", int_list(g, [dim_size(g, x, axis) if x.shape is not None
                                      else g.op("Size", x)]), int_list(g, [repeats]))
    target = g.op("Concat", shape_slice(g, x, 0, axis) if x.shape is not None
                  else g.const([], _I64), merged,
                  shape_slice(g, x, axis + 1, r) if x.shape is not None else g.const([], _I64),
                  axis=0)
    return g.op("Reshape", spread, target, allowzero=1)


def _interleave_index(g: GraphBuilder, repeats: Tensor, n: int | Tensor | None) -> Tensor:
    """For repeats (n,), the source position of each output element (sum(repeats),)."""
    reps = cast(g, repeats, _I64)
    if n is not None:
        reps = g.op("Expand", g.op("Reshape", reps, g.const([-1], _I64)), int_list(g, [n]))
    ends = g.op("CumSum", reps, g.const(0, _I64))
    total = g.op("ReduceSum", reps, keepdims=0)
    positions = g.op("Range", g.const(0, _I64), total, g.const(1, _I64))
    # Output j comes from the first i whose running total exceeds j.
    passed = g.op("LessOrEqual", g.op("Unsqueeze", ends, g.const([0], _I64)),
                  g.op("Unsqueeze", positions, g.const([1], _I64)))
    return g.op("ReduceSum", cast(g, passed, _I64), g.const([1], _I64), keepdims=0)


@register(aten.repeat_interleave.self_Tensor)
def aten_repeat_interleave_self_tensor(g: GraphBuilder, self: Tensor, repeats: Tensor,
                                       dim: int | None = None, *,
                                       output_size: Any = None) -> Tensor:
    """repeat_interleave.self_Tensor(Tensor self, Tensor repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor"""  # noqa: E501
    if dim is None:
        x = g.op("Reshape", self, g.const([-1], _I64))
        axis = 0
        shape = static_shape(self)
        n: int | Tensor = int(np.prod(shape)) if shape is not None else g.op("Size", self)
    else:
        x = _as_rank1(g, self)
        axis = normalize_dim(dim, rank(x))
        n = dim_size(g, x, axis) if rank(self) > 0 else 1
    return g.op("Gather", x, _interleave_index(g, repeats, n), axis=axis)


@register(aten.repeat_interleave.Tensor)
def aten_repeat_interleave_tensor(g: GraphBuilder, repeats: Tensor, *,
                                  output_size: Any = None) -> Tensor:
    """repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor"""
    return cast(g, _interleave_index(g, repeats, None), g.out_dtype())


# -- triangles and diagonals ----------------------------------------------------------------------
def _trilu(g: GraphBuilder, x: Tensor, diagonal: Any, upper: int) -> Tensor:
    k = _scalar_i64(g, diagonal)
    dtype = x.dtype
    # ONNX Runtime's Trilu kernel covers float, double, int64 and bool only.
    if dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE, _I64, _BOOL):
        return g.op("Trilu", x, k, upper=upper)
    n, m = dim_size(g, x, -2), dim_size(g, x, -1)
    rows = g.op("Range", g.const(0, _I64), _scalar_i64(g, n), g.const(1, _I64))
    cols = g.op("Range", g.const(0, _I64), _scalar_i64(g, m), g.const(1, _I64))
    offset = g.op("Sub", cols, g.op("Unsqueeze", rows, g.const([1], _I64)))
    keep = g.op("GreaterOrEqual" if upper else "LessOrEqual", offset, k)
    return g.op("Where", keep, x, g.const(0, dtype))


@register(aten.tril.default)
def aten_tril(g: GraphBuilder, self: Tensor, diagonal: Any = 0) -> Tensor:
    """tril(Tensor self, SymInt diagonal=0) -> Tensor"""
    return _trilu(g, self, diagonal, 0)


@register(aten.triu.default)
def aten_triu(g: GraphBuilder, self: Tensor, diagonal: Any = 0) -> Tensor:
    """triu(Tensor self, SymInt diagonal=0) -> Tensor"""
    return _trilu(g, self, diagonal, 1)


@register(aten.diagonal.default)
def aten_diagonal(g: GraphBuilder, self: Tensor, offset: int = 0, dim1: int = 0,
                  dim2: int = 1) -> Tensor:
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)"""
    r = rank(self)
    d1, d2 = normalize_dim(dim1, r), normalize_dim(dim2, r)
    a, b = dim_size(g, self, d1), dim_size(g, self, d2)
    if not isinstance(a, int) or not isinstance(b, int):
        raise ValueError("diagonal of symbolic-size dims")
    # Move the two dims last, flatten them, and gather the diagonal's flat positions.
    x = transpose(g, self, [d for d in range(r) if d not in (d1, d2)] + [d1, d2])
    length = max(0, min(a, b - offset) if offset >= 0 else min(a + offset, b))
    rows = np.arange(length) + max(-offset, 0)
    cols = np.arange(length) + max(offset, 0)
    flat_shape = g.op("Concat", shape_slice(g, self, 0, 0) if r == 2 else
                      g.op("Gather", shape_of(g, self),
                           g.const([d for d in range(r) if d not in (d1, d2)], _I64), axis=0),
                      g.const([a * b], _I64), axis=0)
    flat = g.op("Reshape", x, flat_shape, allowzero=1)
    return g.op("Gather", flat, g.const((rows * b + cols).astype(np.int64), _I64), axis=-1)


@register(aten.one_hot.default)
def aten_one_hot(g: GraphBuilder, self: Tensor, num_classes: int = -1) -> Tensor:
    """one_hot(Tensor self, int num_classes=-1) -> Tensor"""
    index = cast(g, self, _I64)
    if num_classes == -1:
        depth = g.op("Add", g.op("ReduceMax", index, keepdims=0), g.const(1, _I64))
    else:
        depth = g.const(num_classes, _I64)
    classes = g.op("Range", g.const(0, _I64), depth, g.const(1, _I64))
    hit = g.op("Equal", g.op("Unsqueeze", index, g.const([-1], _I64)), classes)
    return cast(g, hit, g.out_dtype())


@register(aten.meshgrid.default)
def aten_meshgrid(g: GraphBuilder, tensors: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """meshgrid(Tensor[] tensors) -> Tensor[]"""
    return aten_meshgrid_indexing(g, tensors, indexing="ij")


@register(aten.meshgrid.indexing)
def aten_meshgrid_indexing(g: GraphBuilder, tensors: Sequence[Tensor], *,
                           indexing: str) -> tuple[Tensor, ...]:
    """meshgrid.indexing(Tensor[] tensors, *, str indexing) -> Tensor[]"""
    count = len(tensors)
    axes = list(range(count))
    if indexing == "xy" and count >= 2:
        # "xy" swaps the first two output dims (Cartesian rather than matrix indexing).
        axes[0], axes[1] = 1, 0
    flat = [g.op("Reshape", t, g.const([-1], _I64)) for t in tensors]
    sizes: list[Any] = [None] * count
    for t, axis in zip(tensors, axes):
        shape = static_shape(t)
        sizes[axis] = int(np.prod(shape)) if shape is not None else g.op("Size", t)
    full = int_list(g, sizes)
    outs = []
    for t, axis in zip(flat, axes):
        layout = [1] * count
        layout[axis] = -1
        outs.append(g.op("Expand", g.op("Reshape", t, g.const(layout, _I64)), full))
    return tuple(outs)


# -- nonzero --------------------------------------------------------------------------------------
@register(aten.nonzero.default, aten.argwhere.default)
def aten_nonzero(g: GraphBuilder, self: Tensor) -> Tensor:
    """nonzero(Tensor self) -> Tensor"""
    if rank(self) == 0:
        # One row per hit, with no columns: keep NonZero's count, drop its single row.
        hits = g.op("NonZero", cast(g, g.op("Reshape", self, g.const([1], _I64)), _BOOL))
        empty = g.op("Slice", hits, g.const([0], _I64), g.const([0], _I64), g.const([0], _I64))
        return g.op("Transpose", empty, perm=[1, 0])
    return g.op("Transpose", g.op("NonZero", cast(g, self, _BOOL)), perm=[1, 0])


@register(aten.nonzero_numpy.default, aten.where.default)
def aten_nonzero_numpy(g: GraphBuilder, self: Tensor) -> tuple[Tensor, ...]:
    """nonzero_numpy(Tensor self) -> Tensor[]"""
    if rank(self) == 0:
        # A 0-d input behaves as one element: index 0 once if it is nonzero.
        hits = g.op("NonZero", cast(g, g.op("Reshape", self, g.const([1], _I64)), _BOOL))
        return (g.op("Reshape", hits, g.const([-1], _I64)),)
    nonzero = g.op("NonZero", cast(g, self, _BOOL))
    return tuple(g.op("Gather", nonzero, g.const(i, _I64), axis=0) for i in range(rank(self)))


# -- sorting --------------------------------------------------------------------------------------
def _sort_key(g: GraphBuilder, x: Tensor) -> Tensor:
    # ONNX Runtime's TopK covers float, double, int32 and int64; the rest sorts exactly as
    # float32 (float16, bfloat16) or int32 (bool and small ints).
    if x.dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.INT32, _I64):
        return x
    if x.dtype is not None and x.dtype.is_floating_point():
        return cast(g, x, ir.DataType.FLOAT)
    return cast(g, x, ir.DataType.INT32)


def sort_order(g: GraphBuilder, x: Tensor, k: Any, axis: int, largest: bool) -> Tensor:
    """Indices of the first `k` of a stable sort of `x` along `axis` (ascending unless `largest`).

    TopK breaks ties by the lower index first, in both directions: a stable sort. TopK's
    NaN order is unspecified, while torch orders NaN above everything (last ascending, first
    descending): floats sort with NaN as +inf, then NaN-ness sorts the result once more.
    """
    key = _sort_key(g, x)
    k_list = int_list(g, [k])
    if key.dtype is None or not key.dtype.is_floating_point():
        _, order = g.op("TopK", key, k_list, axis=axis, largest=int(largest), sorted=1, outputs=2)
        return order
    n = int_list(g, [dim_size(g, x, axis)])
    is_nan = g.op("IsNaN", key)
    key = g.op("Where", is_nan, g.const(np.inf, key.dtype), key)
    _, order = g.op("TopK", key, n, axis=axis, largest=int(largest), sorted=1, outputs=2)
    nan_key = g.op("GatherElements", cast(g, is_nan, ir.DataType.INT32), order, axis=axis)
    _, reorder = g.op("TopK", nan_key, k_list, axis=axis, largest=int(largest), sorted=1,
                      outputs=2)
    return g.op("GatherElements", order, reorder, axis=axis)


def _topk(g: GraphBuilder, x: Tensor, k: Any, dim: int, largest: bool) -> tuple[Tensor, Tensor]:
    if rank(x) == 0:
        return x, g.const(0, _I64)
    axis = normalize_dim(dim, rank(x))
    indices = sort_order(g, x, k, axis, largest)
    # Values are read back from x so they keep x's dtype and bits.
    return g.op("GatherElements", x, indices, axis=axis), indices


@register(aten.sort.default)
def aten_sort(g: GraphBuilder, self: Tensor, dim: int = -1,
              descending: bool = False) -> tuple[Tensor, Tensor]:
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    n = dim_size(g, self, normalize_dim(dim, rank(self))) if rank(self) else 1
    return _topk(g, self, n, dim, descending)


@register(aten.sort.stable)
def aten_sort_stable(g: GraphBuilder, self: Tensor, *, stable: bool | None, dim: int = -1,
                     descending: bool = False) -> tuple[Tensor, Tensor]:
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""  # noqa: E501
    # sort_order is stable whatever `stable` says (an unstable sort may order ties any way).
    return aten_sort(g, self, dim, descending)


@register(aten.argsort.default)
def aten_argsort(g: GraphBuilder, self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor"""
    return aten_sort(g, self, dim, descending)[1]


@register(aten.argsort.stable)
def aten_argsort_stable(g: GraphBuilder, self: Tensor, *, stable: bool, dim: int = -1,
                        descending: bool = False) -> Tensor:
    """argsort.stable(Tensor self, *, bool stable, int dim=-1, bool descending=False) -> Tensor"""
    return aten_sort(g, self, dim, descending)[1]


@register(aten.topk.default)
def aten_topk(g: GraphBuilder, self: Tensor, k: Any, dim: int = -1, largest: bool = True,
              sorted: bool = True) -> tuple[Tensor, Tensor]:
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""  # noqa: E501
    # Any order is valid when sorted=False; TopK always sorts.
    return _topk(g, self, k, dim, largest)


# -- scans ----------------------------------------------------------------------------------------
def _scan_dtype(dtype: ir.DataType) -> ir.DataType:
    # ONNX Runtime's CumSum and ReduceProd kernels cover float, double, int32 and int64.
    if dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return ir.DataType.FLOAT
    return dtype


@register(aten.cumsum.default)
def aten_cumsum(g: GraphBuilder, self: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = g.out_dtype()
    x = cast(g, _as_rank1(g, self), _scan_dtype(out_dtype))
    out = g.op("CumSum", x, g.const(normalize_dim(dim, max(rank(self), 1)), _I64))
    if rank(self) == 0:
        out = g.op("Reshape", out, g.const([], _I64))
    return cast(g, out, out_dtype)


@register(aten.cumprod.default)
def aten_cumprod(g: GraphBuilder, self: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    out_dtype = g.out_dtype()
    work = _scan_dtype(out_dtype)
    x = cast(g, _as_rank1(g, self), work)
    r = max(rank(self), 1)
    axis = normalize_dim(dim, r)
    n = dim_size(g, self, axis) if rank(self) else 1
    # No ONNX cumulative product: out[i] = prod over j of (x[j] if j <= i else 1), with the
    # i axis inserted before dim and the j axis reduced.
    steps = g.op("Range", g.const(0, _I64), _scalar_i64(g, n), g.const(1, _I64))
    upto = g.op("LessOrEqual", g.op("Unsqueeze", steps, g.const([0], _I64)),
                g.op("Unsqueeze", steps, g.const([1], _I64)))
    if r - axis - 1:
        upto = g.op("Unsqueeze", upto, g.const(list(range(2, r - axis + 1)), _I64))
    spread = g.op("Where", upto, g.op("Unsqueeze", x, g.const([axis], _I64)), g.const(1, work))
    out = g.op("ReduceProd", spread, g.const([axis + 1], _I64), keepdims=0)
    if rank(self) == 0:
        out = g.op("Reshape", out, g.const([], _I64))
    return cast(g, out, out_dtype)
