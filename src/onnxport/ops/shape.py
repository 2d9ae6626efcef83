"""Shape manipulation: views, reshapes, transposes, broadcasting, concatenation and splits.

Sizes known at export time become constants; symbolic sizes (SymInt values) are computed
from `Shape` in the graph. Every op here is a pure data movement, so all dtypes work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.ops._helpers import cast, int_list, normalize_dim, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


# -- helpers shared with indexing.py and creation.py ------------------------------------------
def static_shape(x: Tensor) -> list[int] | None:
    """The shape of `x` as ints, or None if unknown or symbolic."""
    if x.shape is None:
        return None
    if not all(isinstance(d, int) for d in x.shape):
        return None
    return [int(d) for d in x.shape]  # type: ignore[call-overload]


def out_shape(g: GraphBuilder, index: int = 0) -> list[int] | None:
    """The static shape PyTorch gives output `index` of the node, or None if symbolic."""
    val = g.out_vals[index] if index < len(g.out_vals) else None
    shape = getattr(val, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return [int(d) for d in shape]


def shape_of(g: GraphBuilder, x: Tensor) -> Tensor:
    """`Shape(x)` (a constant when the shape of `x` is static)."""
    shape = static_shape(x)
    if shape is not None:
        return g.const(shape, ir.DataType.INT64)
    return g.op("Shape", x)


def dim_size(g: GraphBuilder, x: Tensor, dim: int) -> int | Tensor:
    """The size of `x` along `dim`: an int when static, else an int64 scalar value."""
    assert x.shape is not None
    d = x.shape[dim]
    if isinstance(d, int):
        return d
    return g.op("Gather", g.op("Shape", x), g.const(dim, ir.DataType.INT64), axis=0)


def shape_slice(g: GraphBuilder, x: Tensor, start: int, end: int) -> Tensor:
    """`Shape(x)[start:end]` as a 1-D int64 tensor."""
    shape = static_shape(x)
    if shape is not None:
        return g.const(shape[start:end], ir.DataType.INT64)
    return g.op("Shape", x, start=start, end=end)


def reshape(g: GraphBuilder, x: Tensor, shape: Any) -> Tensor:
    """Reshape with torch's meaning of 0 (a zero-size dim, never "copy the input dim")."""
    target = int_list(g, shape) if not isinstance(shape, ir.Value) else shape
    has_minus_one = not isinstance(shape, ir.Value) and any(
        isinstance(s, int) and s == -1 for s in shape)
    # allowzero=1 forbids -1 together with 0; torch rejects that pair as ambiguous anyway.
    return g.op("Reshape", x, target, allowzero=0 if has_minus_one else 1)


def to_out_shape(g: GraphBuilder, x: Tensor, fallback: Any) -> Tensor:
    """Reshape `x` to the node's static output shape, or to `fallback` when it is symbolic."""
    shape = out_shape(g)
    if shape is not None:
        if static_shape(x) == shape:
            return x
        return g.op("Reshape", x, g.const(shape, ir.DataType.INT64), allowzero=1)
    return reshape(g, x, fallback)


def transpose(g: GraphBuilder, x: Tensor, perm: Sequence[int]) -> Tensor:
    """Transpose, or `x` itself for the identity permutation."""
    perm = [int(p) for p in perm]
    if perm == list(range(len(perm))):
        return x
    return g.op("Transpose", x, perm=perm)


def _swap(g: GraphBuilder, x: Tensor, dim0: int, dim1: int) -> Tensor:
    r = rank(x)
    if r < 2:
        return x
    perm = list(range(r))
    a, b = normalize_dim(dim0, r), normalize_dim(dim1, r)
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(g, x, perm)


# -- reshapes ---------------------------------------------------------------------------------
@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def aten_view(g: GraphBuilder, self: Tensor, size: Sequence[Any]) -> Tensor:
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)"""
    return to_out_shape(g, self, size)


@register(aten.view_as.default, aten.reshape_as.default)
def aten_view_as(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """view_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    return to_out_shape(g, self, g.op("Shape", other))


@register(aten.flatten.using_ints)
def aten_flatten(g: GraphBuilder, self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"""
    r = rank(self)
    if r == 0:
        return g.op("Reshape", self, g.const([1], ir.DataType.INT64))
    start, end = normalize_dim(start_dim, r), normalize_dim(end_dim, r)
    if start == end:
        return self
    shape = out_shape(g)
    if shape is not None:
        return to_out_shape(g, self, shape)
    # The merged size is a product of input dims, not -1: -1 is ambiguous for empty tensors.
    merged = g.op("ReduceProd", shape_slice(g, self, start, end + 1), keepdims=1)
    target = g.op("Concat", shape_slice(g, self, 0, start), merged,
                  shape_slice(g, self, end + 1, r), axis=0)
    return g.op("Reshape", self, target, allowzero=1)


@register(aten.unflatten.int)
def aten_unflatten(g: GraphBuilder, self: Tensor, dim: int, sizes: Sequence[Any]) -> Tensor:
    """unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)"""
    r = rank(self)
    d = normalize_dim(dim, r)
    shape = out_shape(g)
    if shape is not None:
        return to_out_shape(g, self, shape)
    if any(isinstance(s, int) and s == -1 for s in sizes):
        # Reshape resolves -1 only against the whole shape; compute it from the split dim.
        known = [s for s in sizes if not (isinstance(s, int) and s == -1)]
        one = g.const([1], ir.DataType.INT64)
        prod = g.op("ReduceProd", int_list(g, known), keepdims=1) if known else one
        full = dim_size(g, self, d)
        inferred = g.op("Div", int_list(g, [full]), prod)
        sizes = [inferred if (isinstance(s, int) and s == -1) else s for s in sizes]
    sizes_value = int_list(g, sizes)
    target = g.op("Concat", shape_slice(g, self, 0, d), sizes_value,
                  shape_slice(g, self, d + 1, r), axis=0)
    return g.op("Reshape", self, target, allowzero=1)


# -- transposes -------------------------------------------------------------------------------
@register(aten.permute.default)
def aten_permute(g: GraphBuilder, self: Tensor, dims: Sequence[int]) -> Tensor:
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    r = rank(self)
    return transpose(g, self, [normalize_dim(d, r) for d in dims])


@register(aten.transpose.int)
def aten_transpose(g: GraphBuilder, self: Tensor, dim0: int, dim1: int) -> Tensor:
    """transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    return _swap(g, self, dim0, dim1)


@register(aten.swapaxes.default)
def aten_swapaxes(g: GraphBuilder, self: Tensor, axis0: int, axis1: int) -> Tensor:
    """swapaxes(Tensor(a) self, int axis0, int axis1) -> Tensor(a)"""
    return _swap(g, self, axis0, axis1)


@register(aten.swapdims.default)
def aten_swapdims(g: GraphBuilder, self: Tensor, dim0: int, dim1: int) -> Tensor:
    """swapdims(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    return _swap(g, self, dim0, dim1)


@register(aten.t.default)
def aten_t(g: GraphBuilder, self: Tensor) -> Tensor:
    """t(Tensor(a) self) -> Tensor(a)"""
    return _swap(g, self, 0, 1)


@register(aten.mT.default)
def aten_mt(g: GraphBuilder, self: Tensor) -> Tensor:
    """mT(Tensor(a) self) -> Tensor(a)"""
    return _swap(g, self, -2, -1)


@register(aten.numpy_T.default)
def aten_numpy_t(g: GraphBuilder, self: Tensor) -> Tensor:
    """numpy_T(Tensor(a) self) -> Tensor(a)"""
    return transpose(g, self, list(reversed(range(rank(self)))))


@register(aten.movedim.intlist)
def aten_movedim(g: GraphBuilder, self: Tensor, source: Sequence[int],
                 destination: Sequence[int]) -> Tensor:
    """movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)"""
    r = rank(self)
    src = [normalize_dim(s, r) for s in source]
    dst = [normalize_dim(d, r) for d in destination]
    perm: list[int | None] = [None] * r
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(r) if i not in src)
    return transpose(g, self, [p if p is not None else next(rest) for p in perm])


@register(aten.movedim.int)
def aten_movedim_int(g: GraphBuilder, self: Tensor, source: int, destination: int) -> Tensor:
    """movedim.int(Tensor(a) self, int source, int destination) -> Tensor(a)"""
    return aten_movedim(g, self, [source], [destination])


# -- broadcasting ------------------------------------------------------------------------------
@register(aten.expand.default)
def aten_expand(g: GraphBuilder, self: Tensor, size: Sequence[Any], *,
                implicit: bool = False) -> Tensor:
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"""
    shape = out_shape(g)
    if shape is not None:
        target: Any = shape
    else:
        # -1 keeps the input's size; Expand's broadcasting does the same with 1.
        target = [1 if isinstance(s, int) and s == -1 else s for s in size]
    if shape is not None and static_shape(self) == shape:
        return self
    return g.op("Expand", self, int_list(g, target))


@register(aten.broadcast_to.default)
def aten_broadcast_to(g: GraphBuilder, self: Tensor, size: Sequence[Any]) -> Tensor:
    """broadcast_to(Tensor(a) self, SymInt[] size) -> Tensor(a)"""
    return aten_expand(g, self, size)


@register(aten.expand_as.default)
def aten_expand_as(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """expand_as(Tensor(a) self, Tensor other) -> Tensor(a)"""
    if static_shape(self) is not None and static_shape(self) == static_shape(other):
        return self
    return g.op("Expand", self, shape_of(g, other))


# -- squeeze / unsqueeze ------------------------------------------------------------------------
def _squeeze_dims(g: GraphBuilder, self: Tensor, dims: Sequence[int]) -> Tensor:
    r = rank(self)
    if r == 0:
        return self
    assert self.shape is not None
    axes = [normalize_dim(d, r) for d in dims]
    # torch leaves dims whose size is not 1 in place; which ones are 1 is in the metadata.
    axes = sorted({a for a in axes if self.shape[a] == 1})
    out = out_shape(g)
    out_rank = len(g.out_vals[0].shape)
    if len(axes) != r - out_rank:
        if out is not None:
            return g.op("Reshape", self, g.const(out, ir.DataType.INT64), allowzero=1)
        raise ValueError(f"cannot tell which of the symbolic dims {list(dims)} are squeezed")
    if not axes:
        return self
    return g.op("Squeeze", self, g.const(axes, ir.DataType.INT64))


@register(aten.squeeze.default)
def aten_squeeze(g: GraphBuilder, self: Tensor) -> Tensor:
    """squeeze(Tensor(a) self) -> Tensor(a)"""
    return _squeeze_dims(g, self, list(range(rank(self))))


@register(aten.squeeze.dim)
def aten_squeeze_dim(g: GraphBuilder, self: Tensor, dim: int) -> Tensor:
    """squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)"""
    return _squeeze_dims(g, self, [dim])


@register(aten.squeeze.dims)
def aten_squeeze_dims(g: GraphBuilder, self: Tensor, dim: Sequence[int]) -> Tensor:
    """squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)"""
    return _squeeze_dims(g, self, dim)


@register(aten.unsqueeze.default)
def aten_unsqueeze(g: GraphBuilder, self: Tensor, dim: int) -> Tensor:
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    axis = dim % (rank(self) + 1)
    return g.op("Unsqueeze", self, g.const([axis], ir.DataType.INT64))


# -- concatenation ------------------------------------------------------------------------------
def _concat(g: GraphBuilder, tensors: Sequence[Tensor], dim: int) -> Tensor:
    dtype = g.out_dtype()
    out_rank = len(g.out_vals[0].shape)
    # torch skips legacy 1-D empty tensors when concatenating tensors of another rank.
    kept = [t for t in tensors if not (t.shape is not None and len(t.shape) == 1
                                       and t.shape[0] == 0 and out_rank != 1)]
    if not kept:
        return cast(g, tensors[0], dtype)
    values = [cast(g, t, dtype) for t in kept]
    if len(values) == 1:
        return values[0]
    return g.op("Concat", *values, axis=normalize_dim(dim, out_rank))


@register(aten.cat.default)
def aten_cat(g: GraphBuilder, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """cat(Tensor[] tensors, int dim=0) -> Tensor"""
    return _concat(g, tensors, dim)


@register(aten.concat.default)
def aten_concat(g: GraphBuilder, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """concat(Tensor[] tensors, int dim=0) -> Tensor"""
    return _concat(g, tensors, dim)


@register(aten.stack.default)
def aten_stack(g: GraphBuilder, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """stack(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = g.out_dtype()
    axis = dim % (rank(tensors[0]) + 1)
    axes = g.const([axis], ir.DataType.INT64)
    values = [g.op("Unsqueeze", cast(g, t, dtype), axes) for t in tensors]
    return values[0] if len(values) == 1 else g.op("Concat", *values, axis=axis)


def _at_least(g: GraphBuilder, x: Tensor, r: int) -> Tensor:
    if rank(x) >= r:
        return x
    shape = static_shape(x)
    if shape is not None:
        return g.op("Reshape", x, g.const([1] * (r - len(shape)) + shape, ir.DataType.INT64))
    return g.op("Unsqueeze", x, g.const(list(range(r - rank(x))), ir.DataType.INT64))


def _at_least_nd(g: GraphBuilder, x: Tensor, n: int) -> Tensor:
    r = rank(x)
    if r >= n:
        return x
    # torch's layouts: 1-D (N) -> (1, N) -> (1, N, 1); 2-D (M, N) -> (M, N, 1).
    axes = {1: [0], 2: [0, 1], 3: [0, 1, 2]}[n] if r == 0 else (
        [0] if n == 2 else ([0, 2] if r == 1 else [2]))
    return g.op("Unsqueeze", x, g.const(axes, ir.DataType.INT64))


@register(aten.atleast_1d.default)
def aten_atleast_1d(g: GraphBuilder, self: Tensor) -> Tensor:
    """atleast_1d(Tensor self) -> Tensor"""
    return _at_least_nd(g, self, 1)


@register(aten.atleast_2d.default)
def aten_atleast_2d(g: GraphBuilder, self: Tensor) -> Tensor:
    """atleast_2d(Tensor self) -> Tensor"""
    return _at_least_nd(g, self, 2)


@register(aten.atleast_3d.default)
def aten_atleast_3d(g: GraphBuilder, self: Tensor) -> Tensor:
    """atleast_3d(Tensor self) -> Tensor"""
    return _at_least_nd(g, self, 3)


@register(aten.atleast_1d.Sequence)
def aten_atleast_1d_sequence(g: GraphBuilder, tensors: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """atleast_1d.Sequence(Tensor[] tensors) -> Tensor[]"""
    return tuple(_at_least_nd(g, t, 1) for t in tensors)


@register(aten.atleast_2d.Sequence)
def aten_atleast_2d_sequence(g: GraphBuilder, tensors: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """atleast_2d.Sequence(Tensor[] tensors) -> Tensor[]"""
    return tuple(_at_least_nd(g, t, 2) for t in tensors)


@register(aten.atleast_3d.Sequence)
def aten_atleast_3d_sequence(g: GraphBuilder, tensors: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """atleast_3d.Sequence(Tensor[] tensors) -> Tensor[]"""
    return tuple(_at_least_nd(g, t, 3) for t in tensors)


@register(aten.hstack.default)
def aten_hstack(g: GraphBuilder, tensors: Sequence[Tensor]) -> Tensor:
    """hstack(Tensor[] tensors) -> Tensor"""
    values = [_at_least(g, t, 1) for t in tensors]
    return _concat(g, values, 0 if rank(values[0]) == 1 else 1)


@register(aten.vstack.default)
def aten_vstack(g: GraphBuilder, tensors: Sequence[Tensor]) -> Tensor:
    """vstack(Tensor[] tensors) -> Tensor"""
    return _concat(g, [_at_least(g, t, 2) for t in tensors], 0)


# -- splits --------------------------------------------------------------------------------------
def _split(g: GraphBuilder, x: Tensor, sizes: Sequence[Any], dim: int) -> tuple[Tensor, ...]:
    axis = normalize_dim(dim, rank(x))
    if len(sizes) == 1:
        return (x,)
    return tuple(g.op("Split", x, int_list(g, sizes), axis=axis, outputs=len(sizes)))


@register(aten.split.Tensor)
def aten_split(g: GraphBuilder, self: Tensor, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"""
    count = len(g.out_vals)
    n = dim_size(g, self, normalize_dim(dim, rank(self)))
    if isinstance(n, int) and isinstance(split_size, int):
        sizes = [min(split_size, n - i * split_size) for i in range(count)]
        return _split(g, self, sizes, dim)
    # Symbolic: every piece is split_size but the last, which takes what is left.
    last = g.op("Sub", int_list(g, [n]), g.op("Mul", int_list(g, [split_size]),
                                             g.const([count - 1], ir.DataType.INT64)))
    sizes_value = g.op("Concat", int_list(g, [split_size] * (count - 1)), last, axis=0) \
        if count > 1 else last
    if count == 1:
        return (self,)
    axis = normalize_dim(dim, rank(self))
    return tuple(g.op("Split", self, sizes_value, axis=axis, outputs=count))


@register(aten.split_with_sizes.default)
def aten_split_with_sizes(g: GraphBuilder, self: Tensor, split_sizes: Sequence[Any],
                          dim: int = 0) -> tuple[Tensor, ...]:
    """split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]"""
    return _split(g, self, split_sizes, dim)


@register(aten.chunk.default)
def aten_chunk(g: GraphBuilder, self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]"""
    axis = normalize_dim(dim, rank(self))
    n = dim_size(g, self, axis)
    if not isinstance(n, int):
        # torch.export fixed the number of pieces (the node's outputs); their size is
        # ceil(n / chunks), the last takes what is left: split's symbolic form.
        i64 = ir.DataType.INT64
        size = g.op("Div", g.op("Add", n, g.const(chunks - 1, i64)), g.const(chunks, i64))
        return aten_split(g, self, size, dim)
    step = -(-n // chunks)
    if step == 0:
        return (self,)
    return _split(g, self, [min(step, n - i * step) for i in range(len(g.out_vals))], axis)


@register(aten.unsafe_chunk.default)
def aten_unsafe_chunk(g: GraphBuilder, self: Tensor, chunks: int,
                      dim: int = 0) -> tuple[Tensor, ...]:
    """unsafe_chunk(Tensor self, int chunks, int dim=0) -> Tensor[]"""
    return aten_chunk(g, self, chunks, dim)


@register(aten.unsafe_split.Tensor)
def aten_unsafe_split(g: GraphBuilder, self: Tensor, split_size: Any,
                      dim: int = 0) -> tuple[Tensor, ...]:
    """unsafe_split.Tensor(Tensor self, SymInt split_size, int dim=0) -> Tensor[]"""
    return aten_split(g, self, split_size, dim)


@register(aten.unbind.int)
def aten_unbind(g: GraphBuilder, self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"""
    axis = normalize_dim(dim, rank(self))
    count = len(g.out_vals)
    axes = g.const([axis], ir.DataType.INT64)
    if count == 0:
        return ()
    if count == 1:
        return (g.op("Squeeze", self, axes),)
    parts = g.op("Split", self, g.const([1] * count, ir.DataType.INT64), axis=axis, outputs=count)
    return tuple(g.op("Squeeze", p, axes) for p in parts)


def _slice(g: GraphBuilder, x: Tensor, axis: int, start: Any, end: Any, step: Any = 1) -> Tensor:
    return g.op("Slice", x, int_list(g, [start]), int_list(g, [end]),
                g.const([axis], ir.DataType.INT64), int_list(g, [step]))


@register(aten.tensor_split.sections)
def aten_tensor_split_sections(g: GraphBuilder, self: Tensor, sections: int,
                               dim: int = 0) -> tuple[Tensor, ...]:
    """tensor_split.sections(Tensor(a -> *) self, SymInt sections, int dim=0) -> Tensor(a)[]"""
    axis = normalize_dim(dim, rank(self))
    n = dim_size(g, self, axis)
    if not isinstance(n, int) or not isinstance(sections, int):
        raise ValueError("tensor_split into sections of a symbolic size")
    # The first n % sections pieces get one extra element.
    base, extra = divmod(n, sections)
    return _split(g, self, [base + (1 if i < extra else 0) for i in range(sections)], axis)


@register(aten.tensor_split.indices)
def aten_tensor_split_indices(g: GraphBuilder, self: Tensor, indices: Sequence[Any],
                              dim: int = 0) -> tuple[Tensor, ...]:
    """tensor_split.indices(Tensor(a -> *) self, SymInt[] indices, int dim=0) -> Tensor(a)[]"""
    axis = normalize_dim(dim, rank(self))
    bounds = [0, *indices, INT64_MAX]
    # Slice clamps out-of-range bounds and yields empty pieces, as torch does.
    return tuple(_slice(g, self, axis, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1))


@register(aten.tensor_split.tensor_indices_or_sections)
def aten_tensor_split_tensor(g: GraphBuilder, self: Tensor, tensor_indices_or_sections: Tensor,
                             dim: int = 0) -> tuple[Tensor, ...]:
    """tensor_split.tensor_indices_or_sections(Tensor(a -> *) self, Tensor tensor_indices_or_sections, int dim=0) -> Tensor(a)[]"""  # noqa: E501
    if rank(tensor_indices_or_sections) == 0:
        raise ValueError("tensor_split into a tensor-valued number of sections")
    axis = normalize_dim(dim, rank(self))
    indices = cast(g, tensor_indices_or_sections, ir.DataType.INT64)
    count = len(g.out_vals)
    bounds = [0, *[g.op("Gather", indices, g.const(i, ir.DataType.INT64), axis=0)
                   for i in range(count - 1)], INT64_MAX]
    return tuple(_slice(g, self, axis, bounds[i], bounds[i + 1]) for i in range(count))


def _split_at(g: GraphBuilder, x: Tensor, dim: int, sections_or_indices: Any) -> tuple[Tensor, ...]:
    if isinstance(sections_or_indices, int):
        return aten_tensor_split_sections(g, x, sections_or_indices, dim)
    return aten_tensor_split_indices(g, x, sections_or_indices, dim)


@register(aten.hsplit.int, aten.hsplit.array)
def aten_hsplit(g: GraphBuilder, self: Tensor, sections: Any) -> tuple[Tensor, ...]:
    """hsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]"""
    return _split_at(g, self, 1 if rank(self) > 1 else 0, sections)


@register(aten.vsplit.int, aten.vsplit.array)
def aten_vsplit(g: GraphBuilder, self: Tensor, sections: Any) -> tuple[Tensor, ...]:
    """vsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]"""
    return _split_at(g, self, 0, sections)


@register(aten.dsplit.int, aten.dsplit.array)
def aten_dsplit(g: GraphBuilder, self: Tensor, sections: Any) -> tuple[Tensor, ...]:
    """dsplit.int(Tensor(a -> *) self, int sections) -> Tensor(a)[]"""
    return _split_at(g, self, 2, sections)


# -- slicing ------------------------------------------------------------------------------------
@register(aten.slice.Tensor)
def aten_slice(g: GraphBuilder, self: Tensor, dim: int = 0, start: Any = None, end: Any = None,
               step: Any = 1) -> Tensor:
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"""  # noqa: E501
    axis = normalize_dim(dim, rank(self))
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    if isinstance(start, int) and start == 0 and isinstance(end, int) and step == 1:
        n = self.shape[axis] if self.shape is not None else None
        if end == INT64_MAX or (isinstance(n, int) and end >= n):
            return self
    return _slice(g, self, axis, start, end, step)


@register(aten.select.int)
def aten_select(g: GraphBuilder, self: Tensor, dim: int, index: Any) -> Tensor:
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    axis = normalize_dim(dim, rank(self))
    idx = index if isinstance(index, ir.Value) else g.const(int(index), ir.DataType.INT64)
    return g.op("Gather", self, cast(g, idx, ir.DataType.INT64), axis=axis)


def _narrow(g: GraphBuilder, self: Tensor, dim: int, start: Any, length: Any) -> Tensor:
    axis = normalize_dim(dim, rank(self))
    n = dim_size(g, self, axis)
    if isinstance(start, int):
        if isinstance(n, int):
            start = start % n if n > 0 and start < 0 else start
        elif start < 0:
            start = g.op("Add", g.const(start, ir.DataType.INT64), n)
    else:
        start = g.op("Reshape", cast(g, start, ir.DataType.INT64), g.const([], ir.DataType.INT64))
        # A negative start counts from the end, as in torch.
        start = g.op("Where", g.op("Less", start, g.const(0, ir.DataType.INT64)),
                     g.op("Add", start, int_list(g, [n]) if isinstance(n, int) else n), start)
    if isinstance(start, int) and isinstance(length, int):
        end: Any = start + length
    else:
        end = g.op("Add", cast(g, start, ir.DataType.INT64) if isinstance(start, ir.Value)
                   else g.const(start, ir.DataType.INT64),
                   cast(g, length, ir.DataType.INT64) if isinstance(length, ir.Value)
                   else g.const(length, ir.DataType.INT64))
    return _slice(g, self, axis, start, end)


@register(aten.narrow.default)
def aten_narrow(g: GraphBuilder, self: Tensor, dim: int, start: Any, length: Any) -> Tensor:
    """narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"""
    return _narrow(g, self, dim, start, length)


@register(aten.narrow_copy.default)
def aten_narrow_copy(g: GraphBuilder, self: Tensor, dim: int, start: Any, length: Any) -> Tensor:
    """narrow_copy(Tensor self, int dim, SymInt start, SymInt length) -> Tensor"""
    return _narrow(g, self, dim, start, length)


@register(aten.narrow.Tensor)
def aten_narrow_tensor(g: GraphBuilder, self: Tensor, dim: int, start: Tensor,
                       length: Any) -> Tensor:
    """narrow.Tensor(Tensor(a) self, int dim, Tensor start, SymInt length) -> Tensor(a)"""
    return _narrow(g, self, dim, start, length)


# -- reorderings ----------------------------------------------------------------------------------
@register(aten.flip.default)
def aten_flip(g: GraphBuilder, self: Tensor, dims: Sequence[int]) -> Tensor:
    """flip(Tensor self, int[] dims) -> Tensor"""
    r = rank(self)
    axes = sorted({normalize_dim(d, r) for d in dims})
    if r == 0 or not axes:
        return self
    return g.op("Slice", self, g.const([-1] * len(axes), ir.DataType.INT64),
                g.const([INT64_MIN] * len(axes), ir.DataType.INT64),
                g.const(axes, ir.DataType.INT64), g.const([-1] * len(axes), ir.DataType.INT64))


@register(aten.roll.default)
def aten_roll(g: GraphBuilder, self: Tensor, shifts: Sequence[Any],
              dims: Sequence[int] = ()) -> Tensor:
    """roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"""
    if not dims:
        flat = g.op("Reshape", self, g.const([-1], ir.DataType.INT64))
        shape = static_shape(self)
        numel: Any = g.op("Size", self) if shape is None else int(np.prod(shape))
        rolled = _roll_one(g, flat, shifts[0], 0, numel)
        return g.op("Reshape", rolled, shape_of(g, self), allowzero=1)
    out = self
    for shift, dim in zip(shifts, dims):
        axis = normalize_dim(dim, rank(self))
        out = _roll_one(g, out, shift, axis, dim_size(g, self, axis))
    return out


def _roll_one(g: GraphBuilder, x: Tensor, shift: Any, axis: int, n: int | Tensor) -> Tensor:
    if isinstance(n, int) and isinstance(shift, int):
        if n == 0 or shift % n == 0:
            return x
        cut: Any = n - shift % n
    else:
        n_value = int_list(g, [n])
        cut = g.op("Sub", n_value, g.op("Mod", int_list(g, [shift]), n_value, fmod=0))
    head = _slice(g, x, axis, cut, INT64_MAX)
    tail = _slice(g, x, axis, 0, cut)
    return g.op("Concat", head, tail, axis=axis)
