"""Helpers shared by the layer families (convolution, pooling, normalization, resampling,
padding): kernel dtypes, the batch axis, static sizes, exact integer windows, registration per
dimensionality and separable per-axis products.

ONNX Conv/Pool/Resize/normalization kernels in ONNX Runtime's CPU provider are float32 and
float64 only (some have float16, not all): half-precision inputs are computed in float32 and
cast back, which is also what torch's CPU kernels do internally. Unbatched inputs (torch
accepts `(C, H, W)` where ONNX needs `(N, C, H, W)`) get a leading batch axis and lose it again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.translate import GraphBuilder, Tensor, register

_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
# ONNX Runtime CPU kernels (of those used here) that have a float64 implementation
_DOUBLE_KERNELS = frozenset({"MaxPool"})


def _compute_dtype(x: Tensor, op: str = "Conv") -> ir.DataType:
    """The dtype to run ONNX Runtime's CPU kernel `op` (Conv, ConvTranspose, a pool, ...) in.

    float32 for half types, which those kernels mostly lack. Integer types have no kernels at
    all: MaxPool runs in float64 (exact for |x| < 2**53); Conv, ConvTranspose and AveragePool
    exist only for float32, where integers are exact only while every value, product and window
    sum stays below 2**24, so integer inputs with static spatial sizes take the exact int64
    path instead (_int_conv, _avg_pool) and only dynamic ones run in float32.
    """
    assert x.dtype is not None
    if x.dtype in _HALF:
        return ir.DataType.FLOAT
    if x.dtype.is_integer():
        return ir.DataType.DOUBLE if op in _DOUBLE_KERNELS else ir.DataType.FLOAT
    return x.dtype


def _gathered_dtype(x: Tensor) -> ir.DataType | None:
    """int64 for integer inputs, float64 for float64 ones: the dtypes whose Conv/ConvTranspose/
    AveragePool run as gathered windows (ORT has float32 kernels only); None otherwise."""
    assert x.dtype is not None
    if x.dtype.is_integer():
        return ir.DataType.INT64
    return ir.DataType.DOUBLE if x.dtype == ir.DataType.DOUBLE else None


def _ints(value: Any, n: int) -> list[int]:
    """An int or a 1- or n-element list, as n ints (ATen's int[2] arguments accept both)."""
    if isinstance(value, ir.Value):
        raise TranslationError("a dynamic (SymInt) kernel, stride, padding or dilation")
    if isinstance(value, (int, np.integer)):
        return [int(value)] * n
    items = list(value)
    if any(isinstance(v, ir.Value) for v in items):
        raise TranslationError("a dynamic (SymInt) kernel, stride, padding or dilation")
    if len(items) == 1:
        return [int(items[0])] * n
    return [int(v) for v in items]


def _dim(g: GraphBuilder, x: Tensor, i: int) -> int | Tensor:
    """Size of dimension `i` of x: an int when static, else an int64 scalar value."""
    if x.shape is not None and isinstance(x.shape[i], int):
        return int(x.shape[i])
    return g.op("Gather", g.op("Shape", x), g.const(i, ir.DataType.INT64), axis=0)


def _mul(g: GraphBuilder, a: int | Tensor, b: int | Tensor) -> int | Tensor:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return g.op("Mul", cast(g, a, ir.DataType.INT64), cast(g, b, ir.DataType.INT64))


def _div(g: GraphBuilder, a: int | Tensor, b: int | Tensor) -> int | Tensor:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return g.op("Div", cast(g, a, ir.DataType.INT64), cast(g, b, ir.DataType.INT64))


def _add_batch(g: GraphBuilder, x: Tensor, num_spatial: int) -> tuple[Tensor, bool]:
    """x with a batch axis, and whether one was added (x was unbatched)."""
    if rank(x) == num_spatial + 1:
        return g.op("Unsqueeze", x, g.const([0], ir.DataType.INT64)), True
    return x, False


def _drop_batch(g: GraphBuilder, y: Tensor, was_unbatched: bool) -> Tensor:
    return g.op("Squeeze", y, g.const([0], ir.DataType.INT64)) if was_unbatched else y


def _channel_shape(num_spatial: int) -> list[int]:
    """Shape that broadcasts a per-channel vector over (N, C, *spatial): (C, 1, ..., 1)."""
    return [-1] + [1] * num_spatial


# -- exact integer windows -------------------------------------------------------------------
# ONNX Runtime has no integer Conv/ConvTranspose/AveragePool kernel, and float32 (its only
# kernel) is exact only below 2**24. With static spatial sizes, integer convolution and
# average pooling are instead computed exactly in int64 (wrapping like torch's integer
# arithmetic): a Gather collects every window (a precomputed index per output position and
# kernel offset) and an Einsum or ReduceSum combines it.

def _static_sizes(x: Tensor, n: int) -> list[int] | None:
    """The last n (spatial) sizes of x when all are static, else None."""
    if x.shape is None or len(x.shape) < n:
        return None
    sizes = [x.shape[len(x.shape) - n + i] for i in range(n)]
    return [int(v) for v in sizes] if all(isinstance(v, int) for v in sizes) else None


def _window_index(sizes: list[int], outs: list[int], kernel: list[int], strides: list[int],
                  dilations: list[int], pads: list[int], transposed: bool) -> np.ndarray:
    """(prod(outs), prod(kernel)) flat input positions each output reads per kernel offset.

    A read of padding (or, transposed, of no input) gets position prod(sizes): a zero appended
    to the flattened input. A convolution reads input o*s - p + k*d; a transposed one the
    input i with i*s - p + k*d = o.
    """
    n = len(sizes)
    flat = np.zeros([*outs, *kernel], dtype=np.int64)
    valid = np.ones([*outs, *kernel], dtype=bool)
    step = 1
    for j in reversed(range(n)):
        o = np.arange(outs[j]).reshape([-1 if a == j else 1 for a in range(2 * n)])
        k = np.arange(kernel[j]).reshape([-1 if a == n + j else 1 for a in range(2 * n)])
        if transposed:
            t = o + pads[j] - k * dilations[j]
            i = t // strides[j]
            ok = (t % strides[j] == 0) & (i >= 0) & (i < sizes[j])
        else:
            i = o * strides[j] - pads[j] + k * dilations[j]
            ok = (i >= 0) & (i < sizes[j])
        flat = flat + i * step
        valid = valid & ok
        step *= sizes[j]
    flat = np.where(valid, flat, step)
    return flat.reshape(math.prod(outs), math.prod(kernel))


def _gather_windows(g: GraphBuilder, x: Tensor, sizes: list[int], index: np.ndarray) -> Tensor:
    """(N, C, *sizes) -> (N, C, L, K): the input at every window position of `index`."""
    flat = g.op("Reshape", x, g.const([0, 0, math.prod(sizes)], ir.DataType.INT64))
    flat = g.op("Pad", flat, g.const([0, 0, 0, 0, 0, 1], ir.DataType.INT64))
    return g.op("Gather", flat, g.const(index, ir.DataType.INT64), axis=2)


# -- registration per dimensionality -------------------------------------------------------

def _schema_doc(target: Any) -> str:
    return str(target._schema).removeprefix("aten::")


def _per_dimensionality(targets: Sequence[Any], make: Any) -> None:
    """Register `make(n)` for the 1-d, 2-d and 3-d overloads of one op."""
    for n, target in enumerate(targets, start=1):
        fn = make(n)
        fn.__doc__ = _schema_doc(target)
        fn.__name__ = fn.__qualname__ = f"{fn.__name__}{n}d"
        register(target)(fn)


# -- separable per-axis products -------------------------------------------------------------

def _separable(g: GraphBuilder, x: Tensor, sizes: list[int], matrices: Sequence[np.ndarray | None],
               compute: ir.DataType) -> Tensor:
    """y[n, c, o_1, ..] = sum over i of x[n, c, i_1, ..] * M_1[i_1, o_1] * ..; a None M is identity.

    The last axis is a MatMul; earlier axes are reshaped to (N, C, before, v, after) and
    contracted by an Einsum: ORT fuses Transpose+MatMul into a FusedMatMul, and a MatMul whose
    left operand broadcasts, that both fail on an empty batch ("cannot broadcast on dim 0").
    """
    n = len(sizes)
    y = x
    current = list(sizes)
    for axis, matrix in enumerate(matrices):
        if matrix is None:
            continue
        v, o = matrix.shape
        if axis == n - 1:
            y = g.op("MatMul", y, g.const(matrix, compute))
        else:
            before, after = math.prod(current[:axis]), math.prod(current[axis + 1:])
            y = g.op("Reshape", y, g.const([0, 0, before, v, after], ir.DataType.INT64))
            y = g.op("Einsum", g.const(matrix, compute), y, equation="vo,ncbva->ncboa")
        current[axis] = o
        if axis != n - 1:
            y = g.op("Reshape", y, g.const([0, 0, *current], ir.DataType.INT64))
    return y
