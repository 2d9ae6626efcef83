"""Neural-network layers: convolution, pooling, normalization, upsampling, padding, pixel shuffle,
bilinear, 3-D grid sampling.

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
from onnxport.ops._helpers import cast, int_list, rank
from onnxport.ops.linalg import _einsum_dtype
from onnxport.translate import GraphBuilder, Tensor, aten, register

_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_INT_MAX = 2**62
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


def _int_conv(g: GraphBuilder, x: Tensor, w: Tensor, b: Tensor | None, sizes: list[int],
              kernel: list[int], strides: list[int], dilations: list[int], pads: list[int],
              transposed: bool, extra: list[int], groups: int) -> Tensor:
    """Exact int64 convolution of batched x (see above); pads are begin + end."""
    n = len(sizes)
    begin, end = pads[:n], pads[n:]
    if transposed:
        outs = [(v - 1) * s - p + d * (k - 1) + e + 1 - q for v, s, p, q, d, k, e
                in zip(sizes, strides, begin, end, dilations, kernel, extra)]
    else:
        outs = [(v + p + q - d * (k - 1) - 1) // s + 1 for v, s, p, q, d, k
                in zip(sizes, strides, begin, end, dilations, kernel)]
    index = _window_index(sizes, outs, kernel, strides, dilations, begin, transposed)
    cols = _gather_windows(g, x, sizes, index)
    assert w.shape is not None
    in_per_group = int(w.shape[0]) // groups if transposed else int(w.shape[1])
    out_channels = int(w.shape[1]) * groups if transposed else int(w.shape[0])
    cols = g.op("Reshape", cols, g.const([0, groups, in_per_group, *index.shape], ir.DataType.INT64))
    per_group = [in_per_group, out_channels // groups]
    if transposed:  # weight (C_in, C_out / groups, *kernel)
        w = g.op("Reshape", w, g.const([groups, *per_group, index.shape[1]], ir.DataType.INT64))
        y = g.op("Einsum", cols, w, equation="ngclk,gcok->ngol")
    else:  # weight (C_out, C_in / groups, *kernel)
        w = g.op("Reshape", w, g.const([groups, *per_group[::-1], index.shape[1]], ir.DataType.INT64))
        y = g.op("Einsum", cols, w, equation="ngclk,gock->ngol")
    y = g.op("Reshape", y, g.const([0, out_channels, *outs], ir.DataType.INT64))
    if b is not None:
        y = g.op("Add", y, g.op("Reshape", b, g.const(_channel_shape(n), ir.DataType.INT64)))
    return y


# -- convolution -----------------------------------------------------------------------------

def _conv(g: GraphBuilder, input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any,
          padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: Any) -> Tensor:
    n = rank(weight) - 2
    if isinstance(groups, ir.Value):
        raise TranslationError("a dynamic (SymInt) number of groups")
    out_dtype = g.out_dtype()
    sizes, kernel_sizes = _static_sizes(input, n), _static_sizes(weight, n)
    # ORT's Conv/ConvTranspose have float32 kernels only: integer and float64 inputs with
    # static sizes take the gathered-windows Einsum path (_int_conv) in int64 / float64.
    exact = _gathered_dtype(input) is not None and sizes is not None and kernel_sizes is not None
    compute = _gathered_dtype(input) if exact else _compute_dtype(input)
    x, unbatched = _add_batch(g, input, n)
    x = cast(g, x, compute)
    w = cast(g, weight, compute)
    b = None if bias is None else cast(g, bias, compute)
    strides, dilations = _ints(stride, n), _ints(dilation, n)
    if isinstance(padding, str):
        if padding == "valid":
            pads = [0] * (2 * n)
        elif padding == "same":
            kernel = [weight.shape[2 + i] for i in range(n)] if weight.shape is not None else []
            if not all(isinstance(k, int) for k in kernel) or len(kernel) != n:
                raise TranslationError("padding='same' with a dynamic kernel size")
            total = [d * (k - 1) for d, k in zip(dilations, kernel)]
            # torch puts the odd extra pixel at the end, like ONNX SAME_UPPER
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            raise TranslationError(f"unknown padding mode {padding!r}")
    else:
        pads = _ints(padding, n) * 2
    attrs: dict[str, Any] = {"strides": strides, "dilations": dilations, "pads": pads,
                             "group": int(groups)}
    if exact:
        assert sizes is not None and kernel_sizes is not None
        y = _int_conv(g, x, w, b, sizes, kernel_sizes, strides, dilations, pads, transposed,
                      _ints(output_padding, n) if transposed else [0] * n, int(groups))
    elif transposed:
        extra = _ints(output_padding, n)
        if all(e < s for e, s in zip(extra, strides)):
            y = g.op("ConvTranspose", x, w, b, output_padding=extra, **attrs)
        else:
            # torch allows output_padding < max(stride, dilation), ORT only < stride. The extra
            # output rows are the ones `padding` crops at the end: crop less there, and only
            # past that (output_padding > padding) are they zeros plus the bias.
            begin, end = pads[:n], pads[n:]
            zeros = [max(e - p, 0) for e, p in zip(extra, end)]
            attrs["pads"] = begin + [max(p - e, 0) for e, p in zip(extra, end)]
            y = g.op("ConvTranspose", x, w, None if any(zeros) else b, **attrs)
            if any(zeros):
                y = g.op("Pad", y, g.const([0] * (n + 2) + [0, 0] + zeros, ir.DataType.INT64))
                if b is not None:
                    y = g.op("Add", y, g.op("Reshape", b, g.const(_channel_shape(n), ir.DataType.INT64)))
    else:
        y = g.op("Conv", x, w, b, **attrs)
    return cast(g, _drop_batch(g, y, unbatched), out_dtype)


@register(aten.convolution.default)
def aten_convolution(g: GraphBuilder, input: Tensor, weight: Tensor, bias: Tensor | None,
                     stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                     transposed: bool, output_padding: Sequence[int], groups: int) -> Tensor:
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor"""
    return _conv(g, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@register(aten._convolution.default)
def aten__convolution(g: GraphBuilder, input: Tensor, weight: Tensor, bias: Tensor | None,
                      stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                      transposed: bool, output_padding: Sequence[int], groups: int, benchmark: bool,
                      deterministic: bool, cudnn_enabled: bool, allow_tf32: bool) -> Tensor:
    """_convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool benchmark, bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor"""
    return _conv(g, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@register(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
          aten.conv1d.padding, aten.conv2d.padding, aten.conv3d.padding)
def aten_conv(g: GraphBuilder, input: Tensor, weight: Tensor, bias: Tensor | None = None,
              stride: Sequence[int] = (1,), padding: Any = (0,), dilation: Sequence[int] = (1,),
              groups: int = 1) -> Tensor:
    """conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor"""
    return _conv(g, input, weight, bias, stride, padding, dilation, False, 0, groups)


@register(aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv_transpose3d.input)
def aten_conv_transpose(g: GraphBuilder, input: Tensor, weight: Tensor, bias: Tensor | None = None,
                        stride: Sequence[int] = (1,), padding: Sequence[int] = (0,),
                        output_padding: Sequence[int] = (0,), groups: int = 1,
                        dilation: Sequence[int] = (1,)) -> Tensor:
    """conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] output_padding=[0, 0], SymInt groups=1, SymInt[2] dilation=[1, 1]) -> Tensor"""
    return _conv(g, input, weight, bias, stride, padding, dilation, True, output_padding, groups)


# -- pooling ---------------------------------------------------------------------------------

def _schema_doc(target: Any) -> str:
    return str(target._schema).removeprefix("aten::")


def _per_dimensionality(targets: Sequence[Any], make: Any) -> None:
    """Register `make(n)` for the 1-d, 2-d and 3-d overloads of one op."""
    for n, target in enumerate(targets, start=1):
        fn = make(n)
        fn.__doc__ = _schema_doc(target)
        fn.__name__ = fn.__qualname__ = f"{fn.__name__}{n}d"
        register(target)(fn)


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _pool_params(kernel_size: Any, stride: Any, padding: Any,
                 n: int) -> tuple[list[int], list[int], list[int]]:
    kernel = _ints(kernel_size, n)
    is_empty = not isinstance(stride, (int, ir.Value)) and len(stride) == 0
    strides = kernel if stride is None or is_empty else _ints(stride, n)
    return kernel, strides, _ints(padding, n)


def _plane_indices(g: GraphBuilder, self: Tensor, indices: Tensor, n: int) -> Tensor:
    """ONNX MaxPool indices count over the whole (N, C, *spatial) tensor; torch's over one plane."""
    r = rank(self)
    plane: int | Tensor = 1
    for i in range(r - n, r):
        plane = _mul(g, plane, _dim(g, self, i))
    return g.op("Mod", indices, cast(g, plane, ir.DataType.INT64))


def _max_pool(g: GraphBuilder, self: Tensor, kernel: list[int], strides: list[int], pads: list[int],
              dilations: list[int], ceil_mode: bool, n: int, with_indices: bool) -> Any:
    dtype = self.dtype
    assert dtype is not None
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, _compute_dtype(self, "MaxPool"))
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads * 2,
             "dilations": dilations, "ceil_mode": int(bool(ceil_mode))}
    if not with_indices:
        return cast(g, _drop_batch(g, g.op("MaxPool", x, **attrs), unbatched), dtype)
    y, idx = g.op("MaxPool", x, outputs=2, **attrs)
    idx = _plane_indices(g, self, idx, n)
    return cast(g, _drop_batch(g, y, unbatched), dtype), _drop_batch(g, idx, unbatched)


def _make_max_pool(n: int, with_indices: bool) -> Any:
    def aten_max_pool(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                      stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                      dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> Any:
        kernel, strides, pads = _pool_params(kernel_size, stride, padding, n)
        return _max_pool(g, self, kernel, strides, pads, _ints(dilation, n), ceil_mode, n,
                         with_indices)

    if with_indices:
        aten_max_pool.__name__ = "aten_max_pool_with_indices"
    return aten_max_pool


_per_dimensionality((aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default),
                    lambda n: _make_max_pool(n, False))
_per_dimensionality((aten.max_pool1d_with_indices.default, aten.max_pool2d_with_indices.default,
                     aten.max_pool3d_with_indices.default), lambda n: _make_max_pool(n, True))


def _pool_out_size(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """torch's pooling output size: in ceil mode the last window must start inside input+left pad."""
    span = size + 2 * p - k
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _avg_divisors(sizes: list[int], kernel: list[int], strides: list[int], pads: list[int],
                  ceil_mode: bool, count_include_pad: bool) -> np.ndarray:
    """torch's avg_pool divisor per output position (windows clipped to the padded input)."""
    per_axis = []
    for size, k, s, p in zip(sizes, kernel, strides, pads):
        counts = []
        for o in range(_pool_out_size(size, k, s, p, ceil_mode)):
            start = o * s - p
            end = min(start + k, size + p)
            if not count_include_pad:
                start, end = max(start, 0), min(end, size)
            counts.append(end - start)
        per_axis.append(np.asarray(counts, dtype=np.float64))
    out = per_axis[0]
    for axis in per_axis[1:]:
        out = np.multiply.outer(out, axis)
    return out


def _avg_pool(g: GraphBuilder, self: Tensor, kernel: list[int], strides: list[int], pads: list[int],
              ceil_mode: bool, count_include_pad: bool, divisor_override: int | None, n: int) -> Tensor:
    dtype = self.dtype
    assert dtype is not None
    # integers with static sizes: exact int64 window sums, below; else float (_compute_dtype)
    exact = _gathered_dtype(self) is not None and _static_sizes(self, n) is not None
    compute = _gathered_dtype(self) if exact else _compute_dtype(self, "AveragePool")
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, compute)
    if not ceil_mode and divisor_override is None and not exact:
        # Without ceil mode every window lies in the padded input, where ONNX's divisor
        # (kernel size, or the valid count without count_include_pad) equals torch's.
        y = g.op("AveragePool", x, kernel_shape=kernel, strides=strides, pads=pads * 2,
                 count_include_pad=int(bool(count_include_pad)))
        return cast(g, _drop_batch(g, y, unbatched), dtype)
    # Otherwise: window sums (an average over zero-padded input times the kernel size, with
    # the ceil-mode overhang padded too) divided by torch's own divisor.
    sizes = [self.shape[rank(self) - n + i] for i in range(n)] if self.shape is not None else []
    if len(sizes) != n or not all(isinstance(v, int) for v in sizes):
        raise TranslationError("avg_pool with ceil_mode or divisor_override on dynamic spatial sizes")
    outs = [_pool_out_size(v, k, s, p, ceil_mode) for v, k, s, p in zip(sizes, kernel, strides, pads)]
    extra = [max(0, (o - 1) * s + k - (v + 2 * p)) for o, v, k, s, p in zip(outs, sizes, kernel, strides, pads)]
    if divisor_override is not None:
        divisors: Any = float(divisor_override)
    else:
        divisors = _avg_divisors(sizes, kernel, strides, pads, ceil_mode, count_include_pad)
    if exact:
        # Exact int64 window sums (see _window_index), divided with truncation toward zero
        # like torch's integer avg_pool (ONNX integer Div truncates too).
        index = _window_index(sizes, outs, kernel, strides, [1] * n, pads, False)
        cols = _gather_windows(g, x, sizes, index)
        total = g.op("ReduceSum", cols, g.const([-1], ir.DataType.INT64), keepdims=0)
        total = g.op("Reshape", total, g.const([0, 0, *outs], ir.DataType.INT64))
        quotient = g.op("Div", total, g.const(np.asarray(divisors), compute))
        return cast(g, _drop_batch(g, quotient, unbatched), dtype)
    zero_pads = [0, 0, *pads, 0, 0, *[p + e for p, e in zip(pads, extra)]]
    padded = g.op("Pad", x, g.const(zero_pads, ir.DataType.INT64), g.const(0, compute))
    mean = g.op("AveragePool", padded, kernel_shape=kernel, strides=strides)
    total = g.op("Mul", mean, g.const(float(math.prod(kernel)), compute))
    divisor = g.const(np.asarray(divisors, dtype=np.float64), compute)
    return cast(g, _drop_batch(g, g.op("Div", total, divisor), unbatched), dtype)


def _make_avg_pool(n: int) -> Any:
    if n == 1:
        def aten_avg_pool(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                          stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                          ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
            kernel, strides, pads = _pool_params(kernel_size, stride, padding, n)
            return _avg_pool(g, self, kernel, strides, pads, ceil_mode, count_include_pad, None, n)

        return aten_avg_pool

    def aten_avg_pool_nd(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                         stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                         ceil_mode: bool = False, count_include_pad: bool = True,
                         divisor_override: int | None = None) -> Tensor:
        kernel, strides, pads = _pool_params(kernel_size, stride, padding, n)
        return _avg_pool(g, self, kernel, strides, pads, ceil_mode, count_include_pad,
                         divisor_override, n)

    aten_avg_pool_nd.__name__ = "aten_avg_pool"
    return aten_avg_pool_nd


_per_dimensionality((aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default),
                    _make_avg_pool)


def _adaptive_windows(g: GraphBuilder, self: Tensor, output_size: Any, n: int) -> tuple[list[int], list[int]] | None:
    """(input sizes, output sizes) of the spatial dims, or None if some is dynamic."""
    outs = _as_list(output_size)
    if len(outs) == 1 and n > 1:
        outs = outs * n
    r = rank(self)
    sizes = [self.shape[r - n + i] for i in range(n)] if self.shape is not None else []
    if any(isinstance(v, ir.Value) or v is None for v in outs) or not all(isinstance(v, int) for v in sizes):
        return None
    return [int(v) for v in sizes], [int(v) for v in outs]


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


def _adaptive_avg_pool(g: GraphBuilder, self: Tensor, output_size: Any, n: int) -> Tensor:
    dtype = self.dtype
    assert dtype is not None
    compute = _compute_dtype(self)
    windows = _adaptive_windows(g, self, output_size, n)
    outs = _as_list(output_size)
    is_global = all(isinstance(o, int) and o == 1 for o in outs)
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, compute)
    if is_global:
        y = g.op("GlobalAveragePool", x)
    elif windows is None:
        raise TranslationError("adaptive_avg_pool with dynamic sizes and an output size other than 1")
    else:
        sizes, outs_i = windows
        if all(v % o == 0 for v, o in zip(sizes, outs_i)):
            kernel = [v // o for v, o in zip(sizes, outs_i)]
            y = g.op("AveragePool", x, kernel_shape=kernel, strides=kernel)
        else:
            # torch's windows [floor(i*in/out), ceil((i+1)*in/out)) overlap and differ in size;
            # the average is separable, so each axis is a product with a constant matrix.
            matrices: list[np.ndarray | None] = []
            for v, o in zip(sizes, outs_i):
                matrix = np.zeros((v, o), dtype=np.float64)
                for i in range(o):
                    start, end = (i * v) // o, -(-((i + 1) * v) // o)
                    matrix[start:end, i] = 1.0 / (end - start)
                matrices.append(None if v == o else matrix)
            y = _separable(g, x, sizes, matrices, compute)
    return cast(g, _drop_batch(g, y, unbatched), dtype)


def _make_adaptive_avg_pool(n: int) -> Any:
    def aten_adaptive_avg_pool(g: GraphBuilder, self: Tensor, output_size: Sequence[int]) -> Tensor:
        return _adaptive_avg_pool(g, self, output_size, n)

    return aten_adaptive_avg_pool


_per_dimensionality((aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default,
                     aten.adaptive_avg_pool3d.default), _make_adaptive_avg_pool)
for _n, _target in ((2, aten._adaptive_avg_pool2d.default), (3, aten._adaptive_avg_pool3d.default)):
    _fn = _make_adaptive_avg_pool(_n)
    _fn.__doc__ = _schema_doc(_target)
    _fn.__name__ = _fn.__qualname__ = f"aten__adaptive_avg_pool{_n}d"
    register(_target)(_fn)


def _adaptive_max_pool_windows(g: GraphBuilder, self: Tensor, sizes: list[int],
                               outs: list[int]) -> tuple[Tensor, Tensor]:
    """adaptive_max_pool for any sizes: each output's window gathered from the flattened plane.

    torch's window for output i of an axis is [floor(i*in/out), ceil((i+1)*in/out)); windows
    overlap and differ in size. Every window is gathered as `k` plane positions (k the largest
    window), a short window repeating its last position, which changes neither the max nor
    which position holds it first (ArgMax returns the first, as torch keeps the first max).
    """
    n = len(sizes)
    axis_windows = []
    for v, o in zip(sizes, outs):
        starts = [(i * v) // o for i in range(o)]
        ends = [-(-((i + 1) * v) // o) for i in range(o)]
        k = max(e - s for s, e in zip(starts, ends))
        axis_windows.append(np.minimum(np.asarray(starts)[:, None] + np.arange(k)[None, :],
                                       np.asarray(ends)[:, None] - 1))
    # positions[o_1, .., o_n, j_1, .., j_n]: the flat plane index of window element j.
    strides = [math.prod(sizes[i + 1:]) for i in range(n)]
    positions = np.zeros([*outs, *[w.shape[1] for w in axis_windows]], dtype=np.int64)
    for i, (w, stride) in enumerate(zip(axis_windows, strides)):
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = w.shape
        positions = positions + (w * stride).reshape(shape)
    k = math.prod(positions.shape[n:])
    positions = positions.reshape(math.prod(outs), k)
    dtype = self.dtype
    assert dtype is not None
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, _compute_dtype(self))
    plane = g.op("Reshape", x, g.const([0, 0, -1], ir.DataType.INT64))
    windows = g.op("Gather", plane, g.const(positions.reshape(-1), ir.DataType.INT64), axis=2)
    windows = g.op("Reshape", windows, g.const([0, 0, *outs, k], ir.DataType.INT64))
    y = g.op("ReduceMax", windows, g.const([-1], ir.DataType.INT64), keepdims=0)
    j = g.op("ArgMax", windows, axis=-1, keepdims=0)
    # the chosen window element's plane index: positions[output, j]
    flat = g.op("Add", j, g.const(np.arange(math.prod(outs)).reshape(outs) * k, ir.DataType.INT64))
    idx = g.op("Gather", g.const(positions.reshape(-1), ir.DataType.INT64), flat, axis=0)
    return cast(g, _drop_batch(g, y, unbatched), dtype), _drop_batch(g, idx, unbatched)


def _make_adaptive_max_pool(n: int) -> Any:
    def aten_adaptive_max_pool(g: GraphBuilder, self: Tensor,
                               output_size: Sequence[int]) -> tuple[Tensor, Tensor]:
        windows = _adaptive_windows(g, self, output_size, n)
        if windows is None:
            raise TranslationError("adaptive_max_pool with dynamic spatial sizes")
        sizes, outs = windows
        if not all(v % o == 0 for v, o in zip(sizes, outs)) or any(v == 0 for v in sizes):
            return _adaptive_max_pool_windows(g, self, sizes, outs)
        kernel = [v // o for v, o in zip(sizes, outs)]
        return _max_pool(g, self, kernel, kernel, [0] * n, [1] * n, False, n, True)  # type: ignore[no-any-return]

    return aten_adaptive_max_pool


_per_dimensionality((aten.adaptive_max_pool1d.default, aten.adaptive_max_pool2d.default,
                     aten.adaptive_max_pool3d.default), _make_adaptive_max_pool)


# -- normalization ---------------------------------------------------------------------------

def _ones_or(g: GraphBuilder, t: Tensor | None, shape: Sequence[int], value: float,
             dtype: ir.DataType) -> Tensor:
    """`t` cast to dtype, or a constant filled with `value` (for an omitted weight or bias)."""
    if t is not None:
        return cast(g, t, dtype)
    return g.const(np.full(list(shape), value), dtype)


def _channels(x: Tensor) -> int:
    if x.shape is None or len(x.shape) < 2 or not isinstance(x.shape[1], int):
        raise TranslationError("normalization needs a static channel dimension")
    return int(x.shape[1])


def _affine(g: GraphBuilder, y: Tensor, weight: Tensor | None, bias: Tensor | None, r: int,
            dtype: ir.DataType) -> Tensor:
    """y * weight[c] + bias[c] over dim 1 of a rank-r tensor."""
    shape = g.const(_channel_shape(r - 2), ir.DataType.INT64)
    if weight is not None:
        y = g.op("Mul", y, g.op("Reshape", cast(g, weight, dtype), shape))
    if bias is not None:
        y = g.op("Add", y, g.op("Reshape", cast(g, bias, dtype), shape))
    return y


def _batch_norm_eval(g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
                     running_mean: Tensor, running_var: Tensor, eps: float) -> Tensor:
    compute = _compute_dtype(input)
    if rank(input) < 2:
        # a 1-D input is one sample of C features: ONNX BatchNormalization needs (N, C, ...)
        rstd = g.op("Reciprocal", g.op("Sqrt", g.op("Add", cast(g, running_var, compute),
                                                      g.const(float(eps), compute))))
        y = g.op("Mul", g.op("Sub", cast(g, input, compute), cast(g, running_mean, compute)), rstd)
        if weight is not None:
            y = g.op("Mul", y, cast(g, weight, compute))
        if bias is not None:
            y = g.op("Add", y, cast(g, bias, compute))
        return cast(g, y, g.out_dtype())
    c = _channels(input)
    y = g.op("BatchNormalization", cast(g, input, compute), _ones_or(g, weight, [c], 1.0, compute),
             _ones_or(g, bias, [c], 0.0, compute), cast(g, running_mean, compute),
             cast(g, running_var, compute), epsilon=float(eps))
    return cast(g, y, g.out_dtype())


def _batch_stats_norm(g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
                      axes: list[int], eps: float, round_stats: bool = False
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Normalize with the batch's own statistics over `axes` (biased variance, as torch).

    Returns (normalized output in compute dtype, mean, 1/std, variance), the last three with
    kept dims.
    """
    compute = _compute_dtype(input)
    x = cast(g, input, compute)
    axes_v = g.const(axes, ir.DataType.INT64)
    mean = g.op("ReduceMean", x, axes_v, keepdims=1) if g.opset >= 18 else g.op(
        "ReduceMean", x, axes=axes, keepdims=1)
    diff = g.op("Sub", x, mean)
    sq = g.op("Mul", diff, diff)
    var = g.op("ReduceMean", sq, axes_v, keepdims=1) if g.opset >= 18 else g.op(
        "ReduceMean", sq, axes=axes, keepdims=1)
    rstd = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(float(eps), compute))))
    if round_stats and input.dtype in _HALF:
        # ATen's CPU batch norm rounds the float statistics to the input dtype (the dtype of
        # save_mean/save_invstd) before normalizing with them in float: do the same.
        stat_mean = cast(g, cast(g, mean, input.dtype), compute)
        stat_rstd = cast(g, cast(g, rstd, input.dtype), compute)
        return g.op("Mul", g.op("Sub", x, stat_mean), stat_rstd), mean, rstd, var
    return g.op("Mul", diff, rstd), mean, rstd, var


def _batch_norm_train(g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
                      eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(output, mean, 1/std, biased variance), the statistics per channel."""
    r = rank(input)
    y, mean, rstd, var = _batch_stats_norm(g, input, weight, bias, [0, *range(2, r)], eps,
                                           round_stats=True)
    y = _affine(g, y, weight, bias, r, _compute_dtype(input))
    flat = g.const([-1], ir.DataType.INT64)
    return y, g.op("Reshape", mean, flat), g.op("Reshape", rstd, flat), g.op("Reshape", var, flat)


def _empty_stat(g: GraphBuilder, index: int) -> Tensor:
    """The (0,)-shaped save_mean/save_invstd that eval-mode batch norm returns."""
    return g.const(np.zeros((0,)), g.out_dtype(index))


@register(aten.batch_norm.default)
def aten_batch_norm(g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
                    running_mean: Tensor | None, running_var: Tensor | None, training: bool,
                    momentum: float, eps: float, cudnn_enabled: bool) -> Tensor:
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if training or running_mean is None or running_var is None:
        y = _batch_norm_train(g, input, weight, bias, eps)[0]
        return cast(g, y, g.out_dtype())
    return _batch_norm_eval(g, input, weight, bias, running_mean, running_var, eps)


@register(aten._native_batch_norm_legit_no_training.default)
def aten__native_batch_norm_legit_no_training(
        g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
        running_mean: Tensor, running_var: Tensor, momentum: float,
        eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    y = _batch_norm_eval(g, input, weight, bias, running_mean, running_var, eps)
    return y, _empty_stat(g, 1), _empty_stat(g, 2)


@register(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def aten_native_batch_norm(g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
                           running_mean: Tensor | None, running_var: Tensor | None, training: bool,
                           momentum: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    if training or running_mean is None or running_var is None:
        y, mean, rstd, var = _batch_norm_train(g, input, weight, bias, eps)
        return cast(g, y, g.out_dtype()), cast(g, mean, g.out_dtype(1)), cast(g, rstd, g.out_dtype(2))
    y = _batch_norm_eval(g, input, weight, bias, running_mean, running_var, eps)
    return y, _empty_stat(g, 1), _empty_stat(g, 2)


@register(aten._native_batch_norm_legit.no_stats)
def aten__native_batch_norm_legit_no_stats(g: GraphBuilder, input: Tensor, weight: Tensor | None,
                                           bias: Tensor | None, training: bool, momentum: float,
                                           eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    y, mean, rstd, var = _batch_norm_train(g, input, weight, bias, eps)
    return cast(g, y, g.out_dtype()), cast(g, mean, g.out_dtype(1)), cast(g, rstd, g.out_dtype(2))


def _running_update(g: GraphBuilder, input: Tensor, mean: Tensor, var: Tensor,
                    running_mean: Tensor, running_var: Tensor, momentum: float,
                    index: int) -> tuple[Tensor, Tensor]:
    """torch's running-statistics update: (1 - m) * running + m * batch (unbiased variance).

    Outputs `index` and `index + 1` of the node are the updated mean and variance.
    """
    compute = _compute_dtype(input)
    r = rank(input)
    n = 1
    for i in [0, *range(2, r)]:
        size = input.shape[i] if input.shape is not None else None
        if not isinstance(size, int):
            raise TranslationError("training-mode batch_norm statistics with dynamic sizes")
        n *= size
    var = g.op("Mul", var, g.const(n / max(n - 1, 1), compute))
    m = g.const(float(momentum), compute)
    keep = g.const(1.0 - float(momentum), compute)
    new_mean = g.op("Add", g.op("Mul", cast(g, running_mean, compute), keep), g.op("Mul", mean, m))
    new_var = g.op("Add", g.op("Mul", cast(g, running_var, compute), keep), g.op("Mul", var, m))
    return cast(g, new_mean, g.out_dtype(index)), cast(g, new_var, g.out_dtype(index + 1))


@register(aten._native_batch_norm_legit_functional.default)
def aten__native_batch_norm_legit_functional(
        g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
        running_mean: Tensor, running_var: Tensor, training: bool, momentum: float,
        eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    if not training:
        y = _batch_norm_eval(g, input, weight, bias, running_mean, running_var, eps)
        return y, _empty_stat(g, 1), _empty_stat(g, 2), running_mean, running_var
    y, mean, rstd, var = _batch_norm_train(g, input, weight, bias, eps)
    new_mean, new_var = _running_update(g, input, mean, var, running_mean, running_var,
                                        momentum, 3)
    return (cast(g, y, g.out_dtype()), cast(g, mean, g.out_dtype(1)), cast(g, rstd, g.out_dtype(2)),
            new_mean, new_var)


def _reserve(g: GraphBuilder) -> Tensor:
    """The `reserve` output of the _batch_norm_* ops: cuDNN's workspace, empty on CPU."""
    shape = tuple(int(d) for d in g.out_vals[3].shape)
    return g.const(np.zeros(shape), g.out_dtype(3))


@register(aten._batch_norm_with_update_functional.default)
def aten__batch_norm_with_update_functional(
        g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
        running_mean: Tensor, running_var: Tensor, momentum: float,
        eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """_batch_norm_with_update_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    y, mean, rstd, var = _batch_norm_train(g, input, weight, bias, eps)
    new_mean, new_var = _running_update(g, input, mean, var, running_mean, running_var,
                                        momentum, 4)
    return (cast(g, y, g.out_dtype()), cast(g, mean, g.out_dtype(1)), cast(g, rstd, g.out_dtype(2)),
            _reserve(g), new_mean, new_var)


@register(aten._batch_norm_no_update.default)
def aten__batch_norm_no_update(
        g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
        running_mean: Tensor | None, running_var: Tensor | None, momentum: float,
        eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """_batch_norm_no_update(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)"""
    if running_mean is None or running_var is None:
        # without running statistics torch normalizes with the batch's own
        y, mean, rstd, var = _batch_norm_train(g, input, weight, bias, eps)
        return (cast(g, y, g.out_dtype()), cast(g, mean, g.out_dtype(1)),
                cast(g, rstd, g.out_dtype(2)), _reserve(g))
    y = _batch_norm_eval(g, input, weight, bias, running_mean, running_var, eps)
    return y, _empty_stat(g, 1), _empty_stat(g, 2), _reserve(g)


def _layer_norm(g: GraphBuilder, input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None,
                bias: Tensor | None, eps: float, num_outputs: int) -> Any:
    r = rank(input)
    k = len(normalized_shape)
    compute = _compute_dtype(input)
    x = cast(g, input, compute)
    if g.opset >= 17 and all(isinstance(d, int) for d in normalized_shape):
        scale = _ones_or(g, weight, normalized_shape, 1.0, compute)
        b = None if bias is None else cast(g, bias, compute)
        outs = g.op("LayerNormalization", x, scale, b, axis=r - k, epsilon=float(eps),
                    outputs=num_outputs)
        outs = outs if num_outputs > 1 else (outs,)
    else:
        axes = list(range(r - k, r))
        y, mean, rstd, _ = _batch_stats_norm(g, input, None, None, axes, eps)
        if weight is not None:
            y = g.op("Mul", y, cast(g, weight, compute))
        if bias is not None:
            y = g.op("Add", y, cast(g, bias, compute))
        outs = (y, mean, rstd)[:num_outputs]
    result = tuple(cast(g, v, g.out_dtype(i)) for i, v in enumerate(outs))
    return result if num_outputs > 1 else result[0]


@register(aten.layer_norm.default)
def aten_layer_norm(g: GraphBuilder, input: Tensor, normalized_shape: Sequence[int],
                    weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-05,
                    cudnn_enable: bool = True) -> Tensor:
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enable=True) -> Tensor"""
    return _layer_norm(g, input, normalized_shape, weight, bias, eps, 1)  # type: ignore[no-any-return]


@register(aten.native_layer_norm.default)
def aten_native_layer_norm(g: GraphBuilder, input: Tensor, normalized_shape: Sequence[int],
                           weight: Tensor | None, bias: Tensor | None,
                           eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)"""
    return _layer_norm(g, input, normalized_shape, weight, bias, eps, 3)  # type: ignore[no-any-return]


def _group_norm(g: GraphBuilder, input: Tensor, groups: int, weight: Tensor | None,
                bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd) in compute dtype; mean and rstd are (N, groups)."""
    compute = _compute_dtype(input)
    # (N, G, rest) without -1, and allowzero=1, so that an empty batch reshapes too
    rest: int | Tensor = _div(g, _dim(g, input, 1), int(groups))
    for i in range(2, rank(input)):
        rest = _mul(g, rest, _dim(g, input, i))
    grouped = g.op("Reshape", cast(g, input, compute),
                   int_list(g, [_dim(g, input, 0), int(groups), rest]), allowzero=1)
    y, mean, rstd, _ = _batch_stats_norm(g, grouped, None, None, [2], eps)
    y = g.op("Reshape", y, g.op("Shape", input), allowzero=1)
    y = _affine(g, y, weight, bias, rank(input), compute)
    axis = g.const([2], ir.DataType.INT64)
    return y, g.op("Squeeze", mean, axis), g.op("Squeeze", rstd, axis)


def _group_normalization(g: GraphBuilder, input: Tensor, groups: int, weight: Tensor | None,
                         bias: Tensor | None, eps: float) -> Tensor | None:
    """One GroupNormalization node (opset 21: per-channel scale and bias), or None where the
    node does not apply (rank < 3, an empty input, or float64, whose statistics the node keeps
    in float32 (stash_type): kept on the decomposition)."""
    if g.opset < 21 or input.shape is None or len(input.shape) < 3 \
            or input.dtype == ir.DataType.DOUBLE \
            or any(isinstance(d, int) and d == 0 for d in input.shape):
        return None
    compute = _compute_dtype(input)
    channels = _dim(g, input, 1)
    if isinstance(channels, int):
        ones: Any = g.const(np.ones(channels), compute)
        zeros: Any = g.const(np.zeros(channels), compute)
    else:
        c = g.op("Shape", input, start=1, end=2)
        ones = g.op("ConstantOfShape", c, value=ir.tensor(np.ones(1, compute.numpy())))
        zeros = g.op("ConstantOfShape", c, value=ir.tensor(np.zeros(1, compute.numpy())))
    scale = ones if weight is None else cast(g, weight, compute)
    shift = zeros if bias is None else cast(g, bias, compute)
    return g.op("GroupNormalization", cast(g, input, compute), scale, shift,  # type: ignore[no-any-return]
                num_groups=int(groups), epsilon=float(eps))


@register(aten.group_norm.default)
def aten_group_norm(g: GraphBuilder, input: Tensor, num_groups: int, weight: Tensor | None = None,
                    bias: Tensor | None = None, eps: float = 1e-05,
                    cudnn_enabled: bool = True) -> Tensor:
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enabled=True) -> Tensor"""
    y = _group_normalization(g, input, num_groups, weight, bias, eps)
    if y is None:
        y = _group_norm(g, input, num_groups, weight, bias, eps)[0]
    return cast(g, y, g.out_dtype())


@register(aten.native_group_norm.default)
def aten_native_group_norm(g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
                           N: int, C: int, HxW: int, group: int,
                           eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)"""
    if not g.out_is_read(1) and not g.out_is_read(2):
        # GroupNormalization has no mean/rstd outputs: only when nothing reads them.
        y1 = _group_normalization(g, input, group, weight, bias, eps)
        if y1 is not None:
            return cast(g, y1, g.out_dtype()), None, None  # type: ignore[return-value]
    y, mean, rstd = _group_norm(g, input, group, weight, bias, eps)
    return cast(g, y, g.out_dtype()), cast(g, mean, g.out_dtype(1)), cast(g, rstd, g.out_dtype(2))


@register(aten.instance_norm.default)
def aten_instance_norm(g: GraphBuilder, input: Tensor, weight: Tensor | None, bias: Tensor | None,
                       running_mean: Tensor | None, running_var: Tensor | None,
                       use_input_stats: bool, momentum: float, eps: float,
                       cudnn_enabled: bool) -> Tensor:
    """instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if not use_input_stats and running_mean is not None and running_var is not None:
        return _batch_norm_eval(g, input, weight, bias, running_mean, running_var, eps)
    r = rank(input)
    compute = _compute_dtype(input)
    # (ATen runs instance norm as a batch norm over (1, N*C, ...))
    y, _, _, _ = _batch_stats_norm(g, input, None, None, list(range(2, r)), eps, round_stats=True)
    return cast(g, _affine(g, y, weight, bias, r, compute), g.out_dtype())


def _rms_eps(eps: float | None, dtype: ir.DataType) -> float:
    """torch's default eps is the input dtype's machine epsilon."""
    if eps is not None:
        return float(eps)
    return float(np.finfo(dtype.numpy()).eps) if dtype != ir.DataType.BFLOAT16 else 2.0**-7


@register(aten.rms_norm.default)
def aten_rms_norm(g: GraphBuilder, input: Tensor, normalized_shape: Sequence[int],
                  weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    assert input.dtype is not None
    r = rank(input)
    k = len(normalized_shape)
    compute = _compute_dtype(input)
    x = cast(g, input, compute)
    axes = list(range(r - k, r))
    sq = g.op("Mul", x, x)
    ms = g.op("ReduceMean", sq, g.const(axes, ir.DataType.INT64), keepdims=1) if g.opset >= 18 \
        else g.op("ReduceMean", sq, axes=axes, keepdims=1)
    eps_v = g.const(_rms_eps(eps, input.dtype), compute)
    y = g.op("Mul", x, g.op("Reciprocal", g.op("Sqrt", g.op("Add", ms, eps_v))))
    if weight is not None:
        y = g.op("Mul", y, cast(g, weight, compute))
    return cast(g, y, g.out_dtype())


@register(aten.rms_norm.default, since_opset=23)
def aten_rms_norm_23(g: GraphBuilder, input: Tensor, normalized_shape: Sequence[int],
                     weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    assert input.dtype is not None
    if not all(isinstance(d, int) for d in normalized_shape):
        return aten_rms_norm(g, input, normalized_shape, weight, eps)
    compute = _compute_dtype(input)
    scale = _ones_or(g, weight, normalized_shape, 1.0, compute)
    y = g.op("RMSNormalization", cast(g, input, compute), scale,
             axis=rank(input) - len(normalized_shape), epsilon=_rms_eps(eps, input.dtype))
    return cast(g, y, g.out_dtype())


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


# -- padding ---------------------------------------------------------------------------------

def _pad_pairs(pad: Sequence[Any], r: int) -> tuple[list[Any], list[Any]]:
    """torch's (last-dim-first) pad pairs as per-dim ONNX begins and ends."""
    if len(pad) % 2 != 0 or len(pad) // 2 > r:
        raise TranslationError(f"pad of length {len(pad)} for a rank-{r} tensor")
    begins: list[Any] = [0] * r
    ends: list[Any] = [0] * r
    for i in range(len(pad) // 2):
        begins[r - 1 - i] = pad[2 * i]
        ends[r - 1 - i] = pad[2 * i + 1]
    return begins, ends


def _crop_negative(g: GraphBuilder, x: Tensor, begins: list[Any], ends: list[Any]) -> tuple[Tensor, list[Any], list[Any]]:
    """Slice away negative (static) pads, which torch allows; return the non-negative rest."""
    axes, starts, stops = [], [], []
    for axis, (b, e) in enumerate(zip(begins, ends)):
        if isinstance(b, int) and b < 0 or isinstance(e, int) and e < 0:
            axes.append(axis)
            starts.append(-b if isinstance(b, int) and b < 0 else 0)
            stops.append(e if isinstance(e, int) and e < 0 else _INT_MAX)
    if axes:
        x = g.op("Slice", x, g.const(starts, ir.DataType.INT64), g.const(stops, ir.DataType.INT64),
                 g.const(axes, ir.DataType.INT64))
        begins = [max(b, 0) if isinstance(b, int) else b for b in begins]
        ends = [max(e, 0) if isinstance(e, int) else e for e in ends]
    return x, begins, ends


def _replicate_negative(g: GraphBuilder, x: Tensor, begins: list[Any],
                        ends: list[Any]) -> tuple[Tensor, list[Any], list[Any]]:
    """Replicate-pad each axis with a negative pad as a Gather: out[i] = x[clamp(i - begin)].

    Cropping first would be wrong there: torch clamps into the whole input, not the crop.
    """
    begins, ends = list(begins), list(ends)
    for axis, (b, e) in enumerate(zip(begins, ends)):
        if not (isinstance(b, int) and isinstance(e, int) and (b < 0 or e < 0)):
            continue
        size = x.shape[axis] if x.shape is not None else None
        if not isinstance(size, int):
            raise TranslationError("replicate padding with a negative pad on a dynamic dimension")
        index = np.clip(np.arange(size + b + e) - b, 0, size - 1)
        x_shape = x.shape
        x = g.op("Gather", x, g.const(index, ir.DataType.INT64), axis=axis)
        x.shape = ir.Shape([len(index) if i == axis else d for i, d in enumerate(x_shape)])
        begins[axis], ends[axis] = 0, 0
    return x, begins, ends


def _pad(g: GraphBuilder, self: Tensor, pad: Sequence[Any], mode: str, value: float | None) -> Tensor:
    r = rank(self)
    begins, ends = _pad_pairs(pad, r)
    x = self
    if mode == "replicate":
        x, begins, ends = _replicate_negative(g, x, begins, ends)
    x, begins, ends = _crop_negative(g, x, begins, ends)
    if all(isinstance(v, int) and v == 0 for v in begins + ends):
        return x if x is not self else g.op("Identity", x)
    dtype = self.dtype
    assert dtype is not None
    if mode == "circular":
        return _pad_circular(g, x, begins, ends)
    pads = int_list(g, [*begins, *ends])
    if mode == "constant":
        fill = g.const(0 if value is None else value, dtype)
        return g.op("Pad", x, pads, fill, mode="constant")
    onnx_mode = {"reflect": "reflect", "replicate": "edge"}.get(mode)
    if onnx_mode is None:
        raise TranslationError(f"unknown padding mode {mode!r}")
    # ORT's reflect/edge Pad kernels are float32/float64/int32/int64/uint8/int8/bool only
    compute = ir.DataType.FLOAT if dtype in _HALF else dtype
    return cast(g, g.op("Pad", cast(g, x, compute), pads, mode=onnx_mode), dtype)


def _pad_circular(g: GraphBuilder, x: Tensor, begins: list[Any], ends: list[Any]) -> Tensor:
    """Wrap-around padding as Slice + Concat per axis (ONNX 'wrap' needs opset 19)."""
    i64 = ir.DataType.INT64
    for axis, (b, e) in enumerate(zip(begins, ends)):
        if isinstance(b, ir.Value) or isinstance(e, ir.Value):
            raise TranslationError("circular padding by a dynamic (SymInt) amount")
        if b == 0 and e == 0:
            continue
        parts = []
        if b > 0:
            parts.append(g.op("Slice", x, g.const([-b], i64), g.const([_INT_MAX], i64), g.const([axis], i64)))
        parts.append(x)
        if e > 0:
            parts.append(g.op("Slice", x, g.const([0], i64), g.const([e], i64), g.const([axis], i64)))
        x = g.op("Concat", *parts, axis=axis)
    return x


@register(aten.constant_pad_nd.default)
def aten_constant_pad_nd(g: GraphBuilder, self: Tensor, pad: Sequence[int], value: float = 0) -> Tensor:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    return _pad(g, self, pad, "constant", value)


@register(aten.pad.default)
def aten_pad(g: GraphBuilder, self: Tensor, pad: Sequence[int], mode: str = "constant",
             value: float | None = None) -> Tensor:
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    return _pad(g, self, pad, mode, value)


@register(aten._pad_circular.default)
def aten__pad_circular(g: GraphBuilder, self: Tensor, pad: Sequence[int]) -> Tensor:
    """_pad_circular(Tensor self, SymInt[] pad) -> Tensor"""
    return _pad(g, self, pad, "circular", None)


def _make_pad(mode: str) -> Any:
    def aten_pad_mode(g: GraphBuilder, self: Tensor, padding: Sequence[int]) -> Tensor:
        return _pad(g, self, padding, mode, None)

    aten_pad_mode.__name__ = f"aten_{mode}_pad"
    return aten_pad_mode


for _mode, _prefix in (("reflect", "reflection_pad"), ("replicate", "replication_pad")):
    _per_dimensionality([getattr(aten, f"{_prefix}{_n}d").default for _n in (1, 2, 3)],
                        lambda n, m=_mode: _make_pad(m))


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


@register(aten._weight_norm.default)
def aten__weight_norm(g: GraphBuilder, v: Tensor, g_: Tensor, dim: int = 0) -> Tensor:
    """_weight_norm(Tensor v, Tensor g, int dim=0) -> Tensor"""
    # v * g / ||v||, the norm taken over every dim but `dim` (dim=-1: over all of v).
    r = rank(v)
    axes = list(range(r)) if dim == -1 else [a for a in range(r) if a != dim % r]
    norm = g.op("Sqrt", g.op("ReduceSum", g.op("Mul", v, v), g.const(axes, ir.DataType.INT64),
                             keepdims=1))
    return g.op("Mul", v, g.op("Div", g_, norm))


# -- bilinear --------------------------------------------------------------------------------

def _letters(count: int, skip: str = "") -> str:
    return "".join(c for c in "abcdefghklmnpqrstuvwxyz" if c not in skip)[:count]


@register(aten.bilinear.default)
def aten_bilinear(g: GraphBuilder, input1: Tensor, input2: Tensor, weight: Tensor,
                  bias: Tensor | None = None) -> Tensor:
    """bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias=None) -> Tensor"""
    out_dtype = g.out_dtype()
    work = _einsum_dtype(out_dtype)
    batch = _letters(rank(input1) - 1, skip="oij")
    # y[..., o] = sum_ij x1[..., i] * W[o, i, j] * x2[..., j] (+ b[o])
    y = g.op("Einsum", cast(g, input1, work), cast(g, weight, work), cast(g, input2, work),
             equation=f"{batch}i,oij,{batch}j->{batch}o")
    if bias is not None:
        y = g.op("Add", y, cast(g, bias, work))
    return cast(g, y, out_dtype)


@register(aten._trilinear.default)
def aten__trilinear(g: GraphBuilder, i1: Tensor, i2: Tensor, i3: Tensor, expand1: Sequence[int],
                    expand2: Sequence[int], expand3: Sequence[int], sumdim: Sequence[int],
                    unroll_dim: int = 1) -> Tensor:
    """_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim, int unroll_dim=1) -> Tensor"""
    # Each input is unsqueezed at its expand dims to a common rank; the product of the three
    # is summed over sumdim. unroll_dim only chooses torch's loop order.
    out_dtype = g.out_dtype()
    work = _einsum_dtype(out_dtype)
    r = rank(i1) + len(expand1)
    letters = _letters(r)
    terms = []
    for expand in (expand1, expand2, expand3):
        dropped = {d % r for d in expand}
        terms.append("".join(letters[d] for d in range(r) if d not in dropped))
    summed = {d % r for d in sumdim}
    present = set("".join(terms))
    kept = [d for d in range(r) if d not in summed]
    y = g.op("Einsum", cast(g, i1, work), cast(g, i2, work), cast(g, i3, work),
             equation=f"{','.join(terms)}->{''.join(letters[d] for d in kept if letters[d] in present)}")
    # a kept dim that every input expanded has size 1 in torch's result
    missing = [i for i, d in enumerate(kept) if letters[d] not in present]
    if missing:
        y = g.op("Unsqueeze", y, g.const(missing, ir.DataType.INT64))
    return cast(g, y, out_dtype)


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
