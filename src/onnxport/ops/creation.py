"""Tensor creation: arange, full/zeros/ones/empty (+ _like, new_), linspace, eye, fill.

The dtype comes from the node's metadata (`g.out_dtype()`), which already resolves
`dtype=None` to torch's default or inferred dtype. Layout, device and memory format do
not exist in ONNX and are ignored. `empty` is zero-filled: its contents are undefined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.ops._helpers import cast, int_list
from onnxport.ops.shape import shape_of
from onnxport.translate import GraphBuilder, Tensor, aten, register


def _filled(g: GraphBuilder, shape: Tensor, value: Any, dtype: ir.DataType) -> Tensor:
    """A tensor of `shape` filled with `value` (a Python number or a scalar value)."""
    if isinstance(value, ir.Value):
        scalar = g.op("Reshape", cast(g, value, dtype), g.const([], ir.DataType.INT64))
        return g.op("Expand", scalar, shape)
    return g.op("Expand", g.const(value, dtype), shape)


@register(aten.full.default)
def aten_full(g: GraphBuilder, size: Sequence[Any], fill_value: Any, *, dtype: Any = None,
              layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), fill_value, g.out_dtype())


@register(aten.zeros.default)
def aten_zeros(g: GraphBuilder, size: Sequence[Any], *, dtype: Any = None, layout: Any = None,
               device: Any = None, pin_memory: Any = None) -> Tensor:
    """zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 0, g.out_dtype())


@register(aten.ones.default)
def aten_ones(g: GraphBuilder, size: Sequence[Any], *, dtype: Any = None, layout: Any = None,
              device: Any = None, pin_memory: Any = None) -> Tensor:
    """ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 1, g.out_dtype())


@register(aten.empty.memory_format)
def aten_empty(g: GraphBuilder, size: Sequence[Any], *, dtype: Any = None, layout: Any = None,
               device: Any = None, pin_memory: Any = None, memory_format: Any = None) -> Tensor:
    """empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 0, g.out_dtype())


@register(aten.empty_strided.default)
def aten_empty_strided(g: GraphBuilder, size: Sequence[Any], stride: Sequence[Any], *,
                       dtype: Any = None, layout: Any = None, device: Any = None,
                       pin_memory: Any = None) -> Tensor:
    """empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 0, g.out_dtype())


@register(aten.empty_permuted.default)
def aten_empty_permuted(g: GraphBuilder, size: Sequence[Any], physical_layout: Sequence[int], *,
                        dtype: Any = None, layout: Any = None, device: Any = None,
                        pin_memory: Any = None) -> Tensor:
    """empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    # The layout only orders memory; ONNX tensors have none.
    return _filled(g, int_list(g, size), 0, g.out_dtype())


@register(aten.full_like.default)
def aten_full_like(g: GraphBuilder, self: Tensor, fill_value: Any, *, dtype: Any = None,
                   layout: Any = None, device: Any = None, pin_memory: Any = None,
                   memory_format: Any = None) -> Tensor:
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _filled(g, shape_of(g, self), fill_value, g.out_dtype())


@register(aten.zeros_like.default)
def aten_zeros_like(g: GraphBuilder, self: Tensor, *, dtype: Any = None, layout: Any = None,
                    device: Any = None, pin_memory: Any = None,
                    memory_format: Any = None) -> Tensor:
    """zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _filled(g, shape_of(g, self), 0, g.out_dtype())


@register(aten.ones_like.default)
def aten_ones_like(g: GraphBuilder, self: Tensor, *, dtype: Any = None, layout: Any = None,
                   device: Any = None, pin_memory: Any = None,
                   memory_format: Any = None) -> Tensor:
    """ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _filled(g, shape_of(g, self), 1, g.out_dtype())


@register(aten.empty_like.default)
def aten_empty_like(g: GraphBuilder, self: Tensor, *, dtype: Any = None, layout: Any = None,
                    device: Any = None, pin_memory: Any = None,
                    memory_format: Any = None) -> Tensor:
    """empty_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    return _filled(g, shape_of(g, self), 0, g.out_dtype())


@register(aten.new_zeros.default)
def aten_new_zeros(g: GraphBuilder, self: Tensor, size: Sequence[Any], *, dtype: Any = None,
                   layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 0, g.out_dtype())


@register(aten.new_ones.default)
def aten_new_ones(g: GraphBuilder, self: Tensor, size: Sequence[Any], *, dtype: Any = None,
                  layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 1, g.out_dtype())


@register(aten.new_empty.default)
def aten_new_empty(g: GraphBuilder, self: Tensor, size: Sequence[Any], *, dtype: Any = None,
                   layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """new_empty(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 0, g.out_dtype())


@register(aten.new_empty_strided.default)
def aten_new_empty_strided(g: GraphBuilder, self: Tensor, size: Sequence[Any],
                           stride: Sequence[Any], *, dtype: Any = None, layout: Any = None,
                           device: Any = None, pin_memory: Any = None) -> Tensor:
    """new_empty_strided(Tensor self, SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), 0, g.out_dtype())


@register(aten.new_full.default)
def aten_new_full(g: GraphBuilder, self: Tensor, size: Sequence[Any], fill_value: Any, *,
                  dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> Tensor:
    """new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, int_list(g, size), fill_value, g.out_dtype())


@register(aten.scalar_tensor.default)
def aten_scalar_tensor(g: GraphBuilder, s: Any, *, dtype: Any = None, layout: Any = None,
                       device: Any = None, pin_memory: Any = None) -> Tensor:
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _filled(g, g.const([], ir.DataType.INT64), s, g.out_dtype())


@register(aten.fill.Scalar)
def aten_fill(g: GraphBuilder, self: Tensor, value: Any) -> Tensor:
    """fill.Scalar(Tensor self, Scalar value) -> Tensor"""
    return _filled(g, shape_of(g, self), value, g.out_dtype())


@register(aten.fill.Tensor)
def aten_fill_tensor(g: GraphBuilder, self: Tensor, value: Tensor) -> Tensor:
    """fill.Tensor(Tensor self, Tensor value) -> Tensor"""
    return _filled(g, shape_of(g, self), value, g.out_dtype())


@register(aten.zero.default)
def aten_zero(g: GraphBuilder, self: Tensor) -> Tensor:
    """zero(Tensor self) -> Tensor"""
    return _filled(g, shape_of(g, self), 0, g.out_dtype())


# -- ranges ----------------------------------------------------------------------------------------
def _arange(g: GraphBuilder, start: Any, end: Any, step: Any) -> Tensor:
    dtype = g.out_dtype()
    numbers = [start, end, step]
    if any(isinstance(v, ir.Value) for v in numbers):
        if any(isinstance(v, float) for v in numbers):
            raise ValueError("arange with symbolic bounds and a floating-point step or bound")
        # Integer bounds: Range counts ceil((end - start) / step) elements, as torch does.
        bounds = [g.op("Reshape", cast(g, v, ir.DataType.INT64), g.const([], ir.DataType.INT64))
                  if isinstance(v, ir.Value) else g.const(int(v), ir.DataType.INT64)
                  for v in numbers]
        return cast(g, g.op("Range", *bounds), dtype)
    count, first, delta, acc = _arange_plan(start, end, step, dtype)
    index = g.op("Range", g.const(0, ir.DataType.INT64), g.const(count, ir.DataType.INT64),
                 g.const(1, ir.DataType.INT64))
    values = g.op("Add", g.op("Mul", cast(g, index, acc), g.const(delta, acc)), g.const(first, acc))
    return cast(g, values, dtype)


def _arange_plan(start: Any, end: Any, step: Any,
                 dtype: ir.DataType) -> tuple[int, Any, Any, ir.DataType]:
    """torch's element count, and start and step in its accumulation type.

    The count is what the installed torch's own meta kernel says: torch 2.14 changed it for
    int64 with fractional bounds (2.13 counted from the truncated bounds, 2.14 counts
    ceil((end - start) / step) as for the other dtypes). Integer outputs accumulate in int64
    from truncated start and step; float16/bfloat16 accumulate in float32, other floats in
    double.
    """
    count = torch.arange(start, end, step, dtype=_dtypes.to_torch(dtype), device="meta").numel()
    if dtype.is_integer():
        return count, int(start), int(step), ir.DataType.INT64
    acc = ir.DataType.FLOAT if dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16) \
        else ir.DataType.DOUBLE
    return count, float(start), float(step), acc


@register(aten.arange.default)
def aten_arange(g: GraphBuilder, end: Any, *, dtype: Any = None, layout: Any = None,
                device: Any = None, pin_memory: Any = None) -> Tensor:
    """arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _arange(g, 0, end, 1)


@register(aten.arange.start)
def aten_arange_start(g: GraphBuilder, start: Any, end: Any, *, dtype: Any = None,
                      layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _arange(g, start, end, 1)


@register(aten.arange.start_step)
def aten_arange_start_step(g: GraphBuilder, start: Any, end: Any, step: Any = 1, *,
                           dtype: Any = None, layout: Any = None, device: Any = None,
                           pin_memory: Any = None) -> Tensor:
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _arange(g, start, end, step)


@register(aten.linspace.default)
def aten_linspace(g: GraphBuilder, start: Any, end: Any, steps: int, *, dtype: Any = None,
                  layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    dtype = g.out_dtype()
    if not isinstance(start, ir.Value) and not isinstance(end, ir.Value):
        return g.const(_linspace_values(float(start), float(end), steps, dtype), dtype)
    if steps == 0:
        return g.const(np.zeros((0,), dtype=dtype.numpy()))
    if steps == 1:
        return g.op("Reshape", cast(g, start, dtype), g.const([1], ir.DataType.INT64))
    # Symbolic bounds: torch walks from `start` for the first half and back from `end` for
    # the second; this computes in float32 (or the float output type) throughout.
    work = dtype if dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE) else ir.DataType.FLOAT
    a, b = cast(g, start, work), cast(g, end, work)
    step = g.op("Div", g.op("Sub", b, a), g.const(steps - 1, work))
    index = cast(g, g.op("Range", g.const(0, ir.DataType.INT64), g.const(steps, ir.DataType.INT64),
                         g.const(1, ir.DataType.INT64)), work)
    forward = g.op("Add", a, g.op("Mul", step, index))
    backward = g.op("Sub", b, g.op("Mul", step, g.op("Sub", g.const(steps - 1, work), index)))
    first_half = g.op("Less", index, g.const(steps // 2, work))
    return cast(g, g.op("Where", first_half, forward, backward), dtype)


def _linspace_values(start: float, end: float, steps: int, dtype: ir.DataType) -> np.ndarray:
    """torch's linspace for constant bounds, with its arithmetic types.

    Integer outputs truncate the bounds, step in double and truncate each value; float
    outputs do every operation in the output type (numpy rounds float16 per operation,
    as c10::Half does).
    """
    out_type = dtype.numpy()
    index = np.arange(steps)
    halfway = steps // 2
    if steps == 1:
        return np.asarray([int(start) if dtype.is_integer() else start]).astype(out_type)
    if dtype.is_integer():
        a, b = float(int(start)), float(int(end))
        step = (b - a) / (steps - 1)
        values = np.where(index < halfway, a + step * index, b - step * (steps - index - 1))
        return np.trunc(values).astype(out_type)
    work = out_type.type if dtype in (ir.DataType.FLOAT16, ir.DataType.FLOAT,
                                      ir.DataType.DOUBLE) else np.float32
    a, b = work(start), work(end)
    step = (b - a) / work(steps - 1)
    i = index.astype(work)
    values = np.where(index < halfway, a + step * i, b - step * (work(steps - 1) - i))
    return values.astype(work).astype(out_type)


def _triangle_indices(g: GraphBuilder, row: int, col: int, offset: int, upper: bool) -> Tensor:
    # Row-major order, as torch lists them.
    rows, cols = np.triu_indices(row, offset, col) if upper else np.tril_indices(row, offset, col)
    return g.const(np.stack([rows, cols]).astype(g.out_dtype().numpy()).reshape(2, -1),
                   g.out_dtype())


@register(aten.tril_indices.default)
def aten_tril_indices(g: GraphBuilder, row: int, col: int, offset: int = 0, *, dtype: Any = 4,
                      layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """tril_indices(int row, int col, int offset=0, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _triangle_indices(g, row, col, offset, upper=False)


@register(aten.triu_indices.default)
def aten_triu_indices(g: GraphBuilder, row: int, col: int, offset: int = 0, *, dtype: Any = 4,
                      layout: Any = None, device: Any = None, pin_memory: Any = None) -> Tensor:
    """triu_indices(int row, int col, int offset=0, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _triangle_indices(g, row, col, offset, upper=True)


def _scalar_i64(g: GraphBuilder, x: Any) -> Tensor:
    if isinstance(x, ir.Value):
        return g.op("Reshape", cast(g, x, ir.DataType.INT64), g.const([], ir.DataType.INT64))
    return g.const(int(x), ir.DataType.INT64)


def _eye(g: GraphBuilder, n: Any, m: Any) -> Tensor:
    zero, one = g.const(0, ir.DataType.INT64), g.const(1, ir.DataType.INT64)
    rows = g.op("Range", zero, _scalar_i64(g, n), one)
    cols = g.op("Range", zero, _scalar_i64(g, m), one)
    is_diagonal = g.op("Equal", g.op("Unsqueeze", rows, g.const([1], ir.DataType.INT64)), cols)
    return cast(g, is_diagonal, g.out_dtype())


@register(aten.eye.default)
def aten_eye(g: GraphBuilder, n: Any, *, dtype: Any = None, layout: Any = None,
             device: Any = None, pin_memory: Any = None) -> Tensor:
    """eye(SymInt n, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _eye(g, n, n)


@register(aten.eye.m)
def aten_eye_m(g: GraphBuilder, n: Any, m: Any, *, dtype: Any = None, layout: Any = None,
               device: Any = None, pin_memory: Any = None) -> Tensor:
    """eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""  # noqa: E501
    return _eye(g, n, m)

