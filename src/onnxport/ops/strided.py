"""Storage-level ops on values: as_strided, strides, scalars, select/masked scatter, im2col and
col2im.

ONNX values have no storage, so every tensor is treated as a fresh contiguous (row-major)
buffer: `as_strided` indexes the flattened input, `sym_stride` is the contiguous stride.
That matches torch exactly whenever the input of as_strided is contiguous with no storage
offset of its own, which is what torch.export produces for the models seen in practice
(views of views are already composed into one as_strided on the base).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list, normalize_dim, rank
from onnxport.ops.elementwise import _where, aten_atan2
from onnxport.ops.shape import shape_of, static_shape
from onnxport.translate import GraphBuilder, Tensor, aten, prims, register

_I64 = ir.DataType.INT64


def _flat(g: GraphBuilder, x: Tensor) -> Tensor:
    return g.op("Reshape", x, g.const([-1], _I64))


def _arg_layout(g: GraphBuilder, index: int) -> tuple[list[int], list[int], int] | None:
    """(shape, strides, storage offset) of the FX node's `index`-th argument, if static.

    A graph input may be a view into a larger storage (torch.export keeps the example's
    strides and offset in its metadata); ONNX receives only the view's elements.
    """
    node = g.fx_node
    if node is None or len(node.args) <= index:
        return None
    arg = node.args[index]
    return _layout(arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None)


def _layout(val: Any) -> tuple[list[int], list[int], int] | None:
    if not isinstance(val, torch.Tensor) or val.is_complex():
        return None
    items = [*val.shape, *val.stride(), val.storage_offset()]
    if any(not isinstance(v, int) for v in items):
        return None
    return list(val.shape), list(val.stride()), int(val.storage_offset())


def _strided_index(size: Sequence[Any], stride: Sequence[Any], offset: int) -> np.ndarray:
    """Storage position of each element of as_strided(size, stride, offset), row-major."""
    index = np.full([int(n) for n in size], int(offset), dtype=np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        axis_shape = [1] * len(size)
        axis_shape[d] = int(n)
        index = index + np.arange(int(n), dtype=np.int64).reshape(axis_shape) * int(st)
    return index


def _storage_to_flat(positions: np.ndarray, layout: tuple[list[int], list[int], int] | None
                     ) -> np.ndarray:
    """The row-major element index of a tensor with `layout` at each storage position.

    Without a layout the tensor is taken as contiguous from storage position 0.
    """
    if layout is None:
        return positions
    shape, strides, offset = layout
    owned = _strided_index(shape, strides, offset).reshape(-1)
    order = np.argsort(owned, kind="stable")
    owned_sorted = owned[order]
    at = np.clip(np.searchsorted(owned_sorted, positions), 0, max(len(owned) - 1, 0))
    found = owned_sorted[at] == positions if len(owned) else np.zeros(positions.shape, bool)
    if not found.all():
        missing = int(positions[~found].reshape(-1)[0])
        raise TranslationError(
            f"as_strided reaches storage position {missing}, outside the elements of its input "
            f"(a view with strides {strides} at storage offset {offset}); an exported input "
            "holds only the view's own elements")
    return order[at]


@register(aten.as_strided.default)
def aten_as_strided(g: GraphBuilder, self: Tensor, size: Sequence[Any], stride: Sequence[Any],
                    storage_offset: Any = None) -> Tensor:
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)"""  # noqa: E501
    flat = _flat(g, self)
    items = [*size, *stride, 0 if storage_offset is None else storage_offset]
    if all(not isinstance(v, ir.Value) for v in items):
        # Element i of the result reads storage[offset + sum_d index_d * stride_d]; the
        # default offset is the input's own.
        layout = _arg_layout(g, 0)
        offset = storage_offset if storage_offset is not None else (
            layout[2] if layout is not None else 0)
        index = _storage_to_flat(_strided_index(size, stride, int(offset)), layout)
        return g.op("Gather", flat, g.const(index, _I64), axis=0)
    # Symbolic sizes: the same sum, built from Range per dim and broadcasting adds.
    offset = 0 if storage_offset is None else storage_offset
    r = len(size)
    total: Tensor = cast(g, offset, _I64) if isinstance(offset, ir.Value) \
        else g.const(int(offset), _I64)
    for d, (n, st) in enumerate(zip(size, stride)):
        n_v = cast(g, n, _I64) if isinstance(n, ir.Value) else g.const(int(n), _I64)
        st_v = cast(g, st, _I64) if isinstance(st, ir.Value) else g.const(int(st), _I64)
        steps = g.op("Mul", g.op("Range", g.const(0, _I64), n_v, g.const(1, _I64)), st_v)
        axis_shape = [1] * r
        axis_shape[d] = -1
        total = g.op("Add", total, g.op("Reshape", steps, g.const(axis_shape, _I64)))
    # A dim of size 1 never broadcasts above, so expand to the full size explicitly.
    total = g.op("Expand", total, int_list(g, size)) if r else total
    return g.op("Gather", flat, total, axis=0)


@register(aten.as_strided_scatter.default)
def aten_as_strided_scatter(g: GraphBuilder, self: Tensor, src: Tensor, size: Sequence[Any],
                            stride: Sequence[Any], storage_offset: Any = None) -> Tensor:
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor"""  # noqa: E501
    items = [*size, *stride, 0 if storage_offset is None else storage_offset]
    if any(isinstance(v, ir.Value) for v in items):
        raise TranslationError("as_strided_scatter with symbolic sizes, strides or offset")
    # torch writes src into a clone of self (self's strides, storage offset 0) through
    # as_strided(size, stride, storage_offset) of that clone.
    layout = _layout(g.out_vals[0]) if g.out_vals else None
    offset = 0 if storage_offset is None else int(storage_offset)
    index = _storage_to_flat(_strided_index(size, stride, offset), layout)
    flat = _flat(g, self)
    updates = _flat(g, cast(g, src, self.dtype))  # type: ignore[arg-type]
    out = g.op("ScatterElements", flat, g.const(index.reshape(-1), _I64), updates, axis=0)
    return g.op("Reshape", out, g.op("Shape", self))  # type: ignore[no-any-return]


@register(prims.as_strided_scatter.default)
def prims_as_strided_scatter(g: GraphBuilder, self: Tensor, src: Tensor, size: Sequence[Any],
                             stride: Sequence[Any], storage_offset: Any) -> Tensor:
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt storage_offset) -> Tensor"""  # noqa: E501
    return aten_as_strided_scatter(g, self, src, size, stride, storage_offset)


def _contiguous_stride(g: GraphBuilder, self: Tensor, dim: int) -> Any:
    r = rank(self)
    d = normalize_dim(dim, r)
    shape = static_shape(self)
    if shape is not None:
        return g.const(int(np.prod(shape[d + 1:], dtype=np.int64)), _I64)
    tail = g.op("Shape", self, start=d + 1) if d + 1 < r else g.const([], _I64)
    # ReduceProd of an empty list is 1, the stride of the last dim.
    return g.op("ReduceProd", tail, keepdims=0)


@register(aten.sym_stride.int)
def aten_sym_stride_int(g: GraphBuilder, self: Tensor, dim: int) -> Tensor:
    """sym_stride.int(Tensor self, int dim) -> SymInt"""
    return _contiguous_stride(g, self, dim)  # type: ignore[no-any-return]


@register(aten.sym_is_contiguous.default)
def aten_sym_is_contiguous(g: GraphBuilder, self: Tensor, memory_format: Any = 0) -> Tensor:
    """sym_is_contiguous(Tensor self, MemoryFormat memory_format=0) -> SymBool"""
    if memory_format not in (0, None, torch.contiguous_format, torch.preserve_format):
        raise TranslationError(f"sym_is_contiguous for memory format {memory_format}: ONNX "
                               "values have no layout")
    return g.const(True)


@register(aten._local_scalar_dense.default, aten.item.default)
def aten__local_scalar_dense(g: GraphBuilder, self: Tensor) -> Tensor:
    """_local_scalar_dense(Tensor self) -> Scalar"""
    # The scalar is a rank-0 value of the Python type's dtype (int64, float or bool).
    scalar = g.op("Reshape", self, g.const([], _I64))
    return cast(g, scalar, g.out_dtype())  # type: ignore[no-any-return]


@register(aten.atan2.out)
def aten_atan2_out(g: GraphBuilder, self: Tensor, other: Tensor, *, out: Tensor) -> Tensor:
    """atan2.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    # ONNX values are immutable: the result is returned and `out`'s old contents are unused.
    return aten_atan2(g, self, other)


@register(aten.select_scatter.default)
def aten_select_scatter(g: GraphBuilder, self: Tensor, src: Tensor, dim: int, index: Any) -> Tensor:
    """select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor"""
    r = rank(self)
    axis = normalize_dim(dim, r)
    n = g.op("Gather", shape_of(g, self), g.const(axis, _I64), axis=0)
    idx = cast(g, index, _I64) if isinstance(index, ir.Value) else g.const(int(index), _I64)
    # torch accepts a negative index counted from the end.
    idx = g.op("Where", g.op("Less", idx, g.const(0, _I64)), g.op("Add", idx, n), idx)
    positions = g.op("Range", g.const(0, _I64), n, g.const(1, _I64))
    axis_shape = [1] * r
    axis_shape[axis] = -1
    hit = g.op("Reshape", g.op("Equal", positions, idx), g.const(axis_shape, _I64))
    # src lacks `dim`; unsqueezed there, it broadcasts along it.
    spread = g.op("Unsqueeze", src, g.const([axis], _I64))
    return _where(g, hit, spread, self, self.dtype)  # type: ignore[arg-type]


@register(aten.masked_scatter.default)
def aten_masked_scatter(g: GraphBuilder, self: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor"""
    # self and mask broadcast to a common shape; the k-th True position (row-major) takes
    # source.flatten()[k].
    # Expand broadcasts both ways, so this is the common shape of mask and self.
    shape = g.op("Shape", g.op("Expand", cast(g, mask, _I64), g.op("Shape", self)))
    x = g.op("Expand", self, shape)
    m = g.op("Expand", mask, shape)
    flat_mask = _flat(g, m)
    order = g.op("Sub", g.op("CumSum", cast(g, flat_mask, _I64), g.const(0, _I64)),
                 g.const(1, _I64))
    order = g.op("Max", order, g.const(0, _I64))
    # One trailing pad element keeps Gather in range when source is empty (and mask all False).
    src = g.op("Concat", _flat(g, cast(g, source, self.dtype)),  # type: ignore[arg-type]
               g.const([0], self.dtype), axis=0)
    picked = g.op("Reshape", g.op("Gather", src, order, axis=0), shape)
    return _where(g, m, picked, x, self.dtype)  # type: ignore[arg-type]


@register(aten.col2im.default)
def aten_col2im(g: GraphBuilder, self: Tensor, output_size: Sequence[Any],
                kernel_size: Sequence[int], dilation: Sequence[int], padding: Sequence[int],
                stride: Sequence[int]) -> Tensor:
    """col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""  # noqa: E501
    if any(isinstance(v, ir.Value) for v in output_size):
        raise TranslationError("col2im with a symbolic output_size")
    h, w = (int(v) for v in output_size)
    kh, kw = kernel_size
    dh, dw = dilation
    ph, pw = padding
    sh, sw = stride
    hp, wp = h + 2 * ph, w + 2 * pw
    bh = (hp - (dh * (kh - 1) + 1)) // sh + 1
    bw = (wp - (dw * (kw - 1) + 1)) // sw + 1
    # Column (ki, kj) of block (bi, bj) adds into padded pixel (bi*sh + ki*dh, bj*sw + kj*dw).
    ki = np.arange(kh).reshape(kh, 1, 1, 1)
    kj = np.arange(kw).reshape(1, kw, 1, 1)
    bi = np.arange(bh).reshape(1, 1, bh, 1)
    bj = np.arange(bw).reshape(1, 1, 1, bw)
    target = ((bi * sh + ki * dh) * wp + (bj * sw + kj * dw)).reshape(-1).astype(np.int64)
    is_batched = rank(self) == 3
    x = self if is_batched else g.op("Unsqueeze", self, g.const([0], _I64))
    assert self.dtype is not None
    # ORT's ScatterElements add-reduction lacks float16/bfloat16 kernels.
    dtype = ir.DataType.FLOAT if self.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16) \
        else self.dtype
    x = cast(g, x, dtype)
    n = g.op("Shape", x, start=0, end=1)
    k = kh * kw
    channels = g.op("Div", g.op("Shape", x, start=1, end=2), g.const([k], _I64))
    nc = g.op("Concat", n, channels, axis=0)
    updates = g.op("Reshape", x, g.op("Concat", nc, g.const([k * bh * bw], _I64), axis=0))
    index = g.op("Expand", g.const(target, _I64), g.op("Shape", updates))
    zeros = g.op("Expand", g.const(0, dtype), g.op("Concat", nc, g.const([hp * wp], _I64), axis=0))
    out = g.op("ScatterElements", zeros, index, updates, axis=2, reduction="add")
    out = g.op("Reshape", out, g.op("Concat", nc, g.const([hp, wp], _I64), axis=0))
    if ph or pw:
        out = g.op("Slice", out, g.const([ph, pw], _I64), g.const([ph + h, pw + w], _I64),
                   g.const([2, 3], _I64))
    if not is_batched:
        out = g.op("Squeeze", out, g.const([0], _I64))
    return cast(g, out, self.dtype)  # type: ignore[no-any-return]


@register(aten.im2col.default)
def aten_im2col(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                dilation: Sequence[int], padding: Sequence[int],
                stride: Sequence[int]) -> Tensor:
    """im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""  # noqa: E501
    # Column c*kh*kw + ki*kw + kj of block (bi, bj) is padded pixel (bi*sh + ki*dh,
    # bj*sw + kj*dw): one strided Slice per kernel offset, with static bounds whatever the
    # image size (the end is counted from the back: the last window's extent).
    kh, kw = (int(v) for v in kernel_size)
    dh, dw = (int(v) for v in dilation)
    ph, pw = (int(v) for v in padding)
    sh, sw = (int(v) for v in stride)
    is_batched = rank(self) == 4
    x = self if is_batched else g.op("Unsqueeze", self, g.const([0], _I64))
    if ph or pw:
        x = g.op("Pad", x, g.const([0, 0, ph, pw, 0, 0, ph, pw], _I64))
    last = np.iinfo(np.int64).max
    pieces = []
    for ki in range(kh):
        for kj in range(kw):
            end_h = ki * dh - dh * (kh - 1)
            end_w = kj * dw - dw * (kw - 1)
            piece = g.op("Slice", x, g.const([ki * dh, kj * dw], _I64),
                         g.const([end_h or last, end_w or last], _I64),
                         g.const([2, 3], _I64), g.const([sh, sw], _I64))
            pieces.append(g.op("Unsqueeze", piece, g.const([2], _I64)))
    stacked = pieces[0] if len(pieces) == 1 else g.op("Concat", *pieces, axis=2)
    shape = g.op("Shape", stacked)
    blocks = g.op("Mul", g.op("Slice", shape, g.const([3], _I64), g.const([4], _I64)),
                  g.op("Slice", shape, g.const([4], _I64), g.const([5], _I64)))
    out = g.op("Reshape", stacked, g.op("Concat", g.op("Slice", shape, g.const([0], _I64),
                                                      g.const([1], _I64)),
                                        g.const([-1], _I64), blocks, axis=0))
    if not is_batched:
        out = g.op("Squeeze", out, g.const([0], _I64))
    return out  # type: ignore[no-any-return]


def _resize(g: GraphBuilder, self: Tensor, size: Sequence[Any]) -> Tensor:
    flat = _flat(g, self)
    target = int_list(g, size)
    old = static_shape(self)
    if old is not None and all(not isinstance(s, ir.Value) for s in size):
        new_numel = int(np.prod([int(s) for s in size], dtype=np.int64))
        old_numel = int(np.prod(old, dtype=np.int64))
        if new_numel == old_numel:
            return g.op("Reshape", flat, target, allowzero=1)  # type: ignore[no-any-return]
        if new_numel < old_numel:
            kept = g.op("Slice", flat, g.const([0], _I64), g.const([new_numel], _I64))
            return g.op("Reshape", kept, target, allowzero=1)  # type: ignore[no-any-return]
    # Growing: torch leaves the new elements uninitialized; they are zeros here.
    new_numel_v = g.op("ReduceProd", target, keepdims=1)
    extra = g.op("Max", g.op("Sub", new_numel_v, g.op("Size", flat)), g.const([0], _I64))
    padded = g.op("Pad", flat, g.op("Concat", g.const([0], _I64), extra, axis=0))
    kept = g.op("Slice", padded, g.const([0], _I64), new_numel_v)
    return g.op("Reshape", kept, target, allowzero=1)  # type: ignore[no-any-return]


@register(aten.resize_.default)
def aten_resize_(g: GraphBuilder, self: Tensor, size: Sequence[Any], *,
                 memory_format: Any = None) -> Tensor:
    """resize_(Tensor(a!) self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor(a!)"""
    # A contiguous tensor keeps its leading elements in row-major order.
    return _resize(g, self, size)


@register(aten.resize.default)
def aten_resize(g: GraphBuilder, self: Tensor, size: Sequence[Any], *,
                memory_format: Any = None) -> Tensor:
    """resize(Tensor self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor"""
    return _resize(g, self, size)
