"""Gradient ops of core ATen: pooling, convolution, embedding and normalization backward.

They appear when a training step (or a model that calls autograd formulas by hand) is
exported. Each is written from the forward op's adjoint: pooling backward spreads the
gradient over the window with static matrices or a scatter-add, convolution backward is a
transposed convolution (input) and a convolution over the batch (weight), and the norm
backwards use the closed-form gradient of (x - mean) * rstd. Outputs whose `output_mask`
entry is False are None, as in PyTorch. ORT's CPU Conv/ConvTranspose and scatter-add
kernels lack half types, so half inputs are computed in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.ops.shape import static_shape
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def _compute(dtype: ir.DataType | None) -> ir.DataType:
    assert dtype is not None
    return ir.DataType.FLOAT if dtype in _HALF else dtype


def _static(x: Tensor, what: str) -> list[int]:
    shape = static_shape(x)
    if shape is None:
        raise TranslationError(f"{what} with symbolic sizes")
    return shape


def _pair(value: Any) -> list[int]:
    items = [value] if isinstance(value, int) else list(value)
    if any(isinstance(v, ir.Value) for v in items):
        raise TranslationError("a dynamic (SymInt) kernel, stride or padding")
    return [int(v) for v in items] * 2 if len(items) == 1 else [int(v) for v in items]


def _spread(g: GraphBuilder, grad: Tensor, rows: np.ndarray, cols: np.ndarray,
            dtype: ir.DataType) -> Tensor:
    """rows^T @ grad @ cols over the last two dims: a separable window-to-pixel spread."""
    compute = _compute(dtype)
    out = g.op("MatMul", g.const(rows.T.copy(), compute), cast(g, grad, compute))
    out = g.op("MatMul", out, g.const(cols, compute))
    return cast(g, out, dtype)  # type: ignore[no-any-return]


# -- pooling ---------------------------------------------------------------------------------
def _adaptive_weights(out_size: int, in_size: int) -> np.ndarray:
    """W[i, h] = 1/len(window i) when h is in adaptive window i (torch's start/end rule)."""
    w = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        start = (i * in_size) // out_size
        end = -((-(i + 1) * in_size) // out_size)
        w[i, start:end] = 1.0 / (end - start)
    return w


@register(aten._adaptive_avg_pool2d_backward.default)
def aten__adaptive_avg_pool2d_backward(g: GraphBuilder, grad_output: Tensor,
                                       self: Tensor) -> Tensor:
    """_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor"""
    h, w = _static(self, "_adaptive_avg_pool2d_backward")[-2:]
    oh, ow = _static(grad_output, "_adaptive_avg_pool2d_backward")[-2:]
    assert self.dtype is not None
    return _spread(g, grad_output, _adaptive_weights(oh, h), _adaptive_weights(ow, w), self.dtype)


def _avg_weights(in_size: int, out_size: int, k: int, s: int, p: int,
                 count_include_pad: bool, divisor: int | None) -> np.ndarray:
    """W[i, h] = 1/divisor_i when h is in window i (per-dim factor of torch's divisor)."""
    w = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        start = i * s - p
        end = min(start + k, in_size + p)
        padded_len = end - start
        start, end = max(start, 0), min(end, in_size)
        if end <= start:
            continue
        length = padded_len if count_include_pad else end - start
        w[i, start:end] = 1.0 if divisor is not None else 1.0 / length
    return w


@register(aten.avg_pool2d_backward.default)
def aten_avg_pool2d_backward(g: GraphBuilder, grad_output: Tensor, self: Tensor,
                             kernel_size: Sequence[int], stride: Sequence[int],
                             padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
                             divisor_override: int | None) -> Tensor:
    """avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor"""  # noqa: E501
    h, w = _static(self, "avg_pool2d_backward")[-2:]
    oh, ow = _static(grad_output, "avg_pool2d_backward")[-2:]
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride) if stride else (kh, kw)
    ph, pw = _pair(padding)
    # torch's divisor is (window rows) * (window cols), with or without padding: separable.
    rows = _avg_weights(h, oh, kh, sh, ph, count_include_pad, divisor_override)
    cols = _avg_weights(w, ow, kw, sw, pw, count_include_pad, divisor_override)
    if divisor_override is not None:
        rows = rows / float(divisor_override)
    assert self.dtype is not None
    return _spread(g, grad_output, rows, cols, self.dtype)


@register(aten.max_pool2d_with_indices_backward.default)
def aten_max_pool2d_with_indices_backward(g: GraphBuilder, grad_output: Tensor, self: Tensor,
                                          kernel_size: Sequence[int], stride: Sequence[int],
                                          padding: Sequence[int], dilation: Sequence[int],
                                          ceil_mode: bool, indices: Tensor) -> Tensor:
    """max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor"""  # noqa: E501
    # `indices` are flat positions within each (H, W) plane: scatter-add the gradient there.
    assert self.dtype is not None
    dtype = _compute(self.dtype)
    r = rank(self)
    plane = g.op("Shape", self, start=0, end=r - 2)
    flat_shape = g.op("Concat", plane, g.const([-1], _I64), axis=0)
    grad = g.op("Reshape", cast(g, grad_output, dtype), flat_shape)
    index = g.op("Reshape", cast(g, indices, _I64), flat_shape)
    zeros = g.op("Reshape", g.op("Expand", g.const(0, dtype), g.op("Shape", self)), flat_shape)
    out = g.op("ScatterElements", zeros, index, grad, axis=r - 2, reduction="add")
    out = g.op("Reshape", out, g.op("Shape", self))
    return cast(g, out, self.dtype)  # type: ignore[no-any-return]


# -- embedding -------------------------------------------------------------------------------
@register(aten.embedding_dense_backward.default)
def aten_embedding_dense_backward(g: GraphBuilder, grad_output: Tensor, indices: Tensor,
                                  num_weights: Any, padding_idx: Any,
                                  scale_grad_by_freq: bool) -> Tensor:
    """embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor"""  # noqa: E501
    assert grad_output.dtype is not None
    dtype = _compute(grad_output.dtype)
    width = g.op("Shape", grad_output, start=-1)
    rows = g.op("Reshape", cast(g, indices, _I64), g.const([-1, 1], _I64))
    updates = g.op("Reshape", cast(g, grad_output, dtype),
                   g.op("Concat", g.const([-1], _I64), width, axis=0))
    num = cast(g, num_weights, _I64) if isinstance(num_weights, ir.Value) \
        else g.const(int(num_weights), _I64)
    num = g.op("Reshape", num, g.const([1], _I64))
    if scale_grad_by_freq:
        # Each row's gradient is divided by how often its index occurs.
        ones = g.op("Expand", g.const(1, dtype), g.op("Shape", rows, start=0, end=1))
        counts = g.op("ScatterND", g.op("Expand", g.const(0, dtype), num), rows, ones,
                      reduction="add")
        updates = g.op("Div", updates, g.op("Gather", counts, rows, axis=0))
    if not (isinstance(padding_idx, int) and padding_idx < 0):
        # Rows of padding_idx get no gradient (torch: padding_idx = -1 means none).
        pad = cast(g, padding_idx, _I64) if isinstance(padding_idx, ir.Value) \
            else g.const(int(padding_idx), _I64)
        updates = g.op("Where", g.op("Equal", rows, pad), g.const(0, dtype), updates)
    zeros = g.op("Expand", g.const(0, dtype), g.op("Concat", num, width, axis=0))
    out = g.op("ScatterND", zeros, rows, updates, reduction="add")
    return cast(g, out, grad_output.dtype)  # type: ignore[no-any-return]


# -- convolution -----------------------------------------------------------------------------
def _conv_input_grad(g: GraphBuilder, grad: Tensor, weight: Tensor, out_spatial: list[int],
                     strides: list[int], pads: list[int], dilations: list[int],
                     groups: int) -> Tensor:
    """The gradient of Conv(x, weight) w.r.t. x: ConvTranspose with the same weight."""
    n = len(strides)
    kernel = _static(weight, "convolution_backward")[2:]
    in_spatial = _static(grad, "convolution_backward")[2:]
    # ConvTranspose's natural size can fall short of x's by the strided conv's floor remainder.
    extra = [out_spatial[i] - ((in_spatial[i] - 1) * strides[i] - 2 * pads[i]
                               + dilations[i] * (kernel[i] - 1) + 1) for i in range(n)]
    out = g.op("ConvTranspose", grad, weight, strides=strides, pads=pads * 2,
               dilations=dilations, group=groups, output_padding=extra)
    return out  # type: ignore[no-any-return]


def _conv_weight_grad(g: GraphBuilder, x: Tensor, grad: Tensor, kernel: list[int],
                      strides: list[int], pads: list[int], dilations: list[int],
                      groups: int) -> Tensor:
    """The gradient of Conv(x, w) w.r.t. w: a convolution of x by grad over the batch axis.

    dW[o, i, k] = sum_{n, y} grad[n, o, y] * x_pad[n, i, y * stride + k * dilation], which is
    Conv(x^T, grad^T) with batch and channels swapped and stride and dilation swapped.
    """
    n = len(strides)
    swap = [1, 0, *range(2, n + 2)]
    c_in = _static(x, "convolution_backward")[1]
    c_out = _static(grad, "convolution_backward")[1]
    parts = []
    for group in range(groups):
        xs, gs = x, grad
        if groups > 1:
            i0, o0 = group * (c_in // groups), group * (c_out // groups)
            xs = g.op("Slice", x, g.const([i0], _I64), g.const([i0 + c_in // groups], _I64),
                      g.const([1], _I64))
            gs = g.op("Slice", grad, g.const([o0], _I64), g.const([o0 + c_out // groups], _I64),
                      g.const([1], _I64))
        dw = g.op("Conv", g.op("Transpose", xs, perm=swap), g.op("Transpose", gs, perm=swap),
                  strides=dilations, dilations=strides, pads=pads * 2)
        # (C_in/g, C_out/g, k'), where k' >= k: rows past the kernel read only the floor
        # remainder that the forward conv never used.
        dw = g.op("Slice", dw, g.const([0] * n, _I64), g.const(kernel, _I64),
                  g.const(list(range(2, n + 2)), _I64))
        parts.append(g.op("Transpose", dw, perm=swap))
    if len(parts) == 1:
        return parts[0]  # type: ignore[no-any-return]
    return g.op("Concat", *parts, axis=0)  # type: ignore[no-any-return]


@register(aten.convolution_backward.default)
def aten_convolution_backward(g: GraphBuilder, grad_output: Tensor, input: Tensor, weight: Tensor,
                              bias_sizes: Sequence[Any] | None, stride: Sequence[int],
                              padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                              output_padding: Sequence[int], groups: int,
                              output_mask: Sequence[bool]) -> tuple[Any, Any, Any]:
    """convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""  # noqa: E501
    n = rank(weight) - 2
    if isinstance(groups, ir.Value):
        raise TranslationError("a dynamic (SymInt) number of groups")

    def ints(v: Any) -> list[int]:
        items = list(v)
        if any(isinstance(i, ir.Value) for i in items):
            raise TranslationError("a dynamic (SymInt) stride, padding or dilation")
        return [int(i) for i in items] * n if len(items) == 1 else [int(i) for i in items]

    strides, pads, dilations = ints(stride), ints(padding), ints(dilation)
    groups = int(groups)
    assert input.dtype is not None
    dtype = _compute(input.dtype)
    go, x, w = cast(g, grad_output, dtype), cast(g, input, dtype), cast(g, weight, dtype)
    grad_input = grad_weight = grad_bias = None
    in_spatial = _static(input, "convolution_backward")[2:]
    kernel = _static(weight, "convolution_backward")[2:]
    if output_mask[0]:
        if transposed:
            # conv_transpose is the adjoint of conv, so its input gradient is a plain Conv.
            grad_input = g.op("Conv", go, w, strides=strides, pads=pads * 2,
                              dilations=dilations, group=groups)
        else:
            grad_input = _conv_input_grad(g, go, w, in_spatial, strides, pads, dilations, groups)
        grad_input = cast(g, grad_input, input.dtype)
    if output_mask[1]:
        # For conv_transpose the roles of input and grad_output swap (weight is (C_in, C_out/g)).
        pair = (go, x) if transposed else (x, go)
        grad_weight = cast(g, _conv_weight_grad(g, *pair, kernel, strides, pads, dilations, groups),
                           weight.dtype)  # type: ignore[arg-type]
    if output_mask[2]:
        axes = [0, *range(2, n + 2)]
        grad_bias = cast(g, g.op("ReduceSum", go, g.const(axes, _I64), keepdims=0),
                         grad_output.dtype)  # type: ignore[arg-type]
    return grad_input, grad_weight, grad_bias


# -- normalization ---------------------------------------------------------------------------
def _norm_input_grad(g: GraphBuilder, dy: Tensor, x_hat: Tensor, rstd: Tensor,
                     axes: Tensor) -> Tensor:
    """rstd * (dy - mean(dy) - x_hat * mean(dy * x_hat)) over the normalized axes."""
    mean_dy = g.op("ReduceMean", dy, axes, keepdims=1)
    mean_dy_xhat = g.op("ReduceMean", g.op("Mul", dy, x_hat), axes, keepdims=1)
    inner = g.op("Sub", g.op("Sub", dy, mean_dy), g.op("Mul", x_hat, mean_dy_xhat))
    return g.op("Mul", rstd, inner)  # type: ignore[no-any-return]


def _sum_over(g: GraphBuilder, x: Tensor, axes: list[int]) -> Tensor:
    if not axes:
        return x
    return g.op("ReduceSum", x, g.const(axes, _I64), keepdims=0)  # type: ignore[no-any-return]


@register(aten.native_layer_norm_backward.default)
def aten_native_layer_norm_backward(g: GraphBuilder, grad_out: Tensor, input: Tensor,
                                    normalized_shape: Sequence[Any], mean: Tensor, rstd: Tensor,
                                    weight: Tensor | None, bias: Tensor | None,
                                    output_mask: Sequence[bool]) -> tuple[Any, Any, Any]:
    """native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""  # noqa: E501
    r, k = rank(input), len(normalized_shape)
    assert input.dtype is not None
    dtype = _compute(input.dtype)
    x, dy = cast(g, input, dtype), cast(g, grad_out, dtype)
    mean_c, rstd_c = cast(g, mean, dtype), cast(g, rstd, dtype)
    x_hat = g.op("Mul", g.op("Sub", x, mean_c), rstd_c)
    batch_axes = list(range(r - k))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        dy_w = dy if weight is None else g.op("Mul", dy, cast(g, weight, dtype))
        axes = g.const(list(range(r - k, r)), _I64)
        grad_input = cast(g, _norm_input_grad(g, dy_w, x_hat, rstd_c, axes), input.dtype)
    if output_mask[1] and weight is not None:
        grad_weight = cast(g, _sum_over(g, g.op("Mul", dy, x_hat), batch_axes),
                           weight.dtype)  # type: ignore[arg-type]
    if output_mask[2] and bias is not None:
        grad_bias = cast(g, _sum_over(g, dy, batch_axes), bias.dtype)  # type: ignore[arg-type]
    return grad_input, grad_weight, grad_bias


@register(aten.native_group_norm_backward.default)
def aten_native_group_norm_backward(g: GraphBuilder, grad_out: Tensor, input: Tensor, mean: Tensor,
                                    rstd: Tensor, weight: Tensor | None, N: Any, C: Any, HxW: Any,
                                    group: int,
                                    output_mask: Sequence[bool]) -> tuple[Any, Any, Any]:
    """native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""  # noqa: E501
    assert input.dtype is not None
    dtype = _compute(input.dtype)
    shape = g.op("Shape", input)
    batch = g.op("Shape", input, start=0, end=1)
    # (N, C, HxW) for per-channel work, (N, G, C/G * HxW) for per-group statistics.
    per_channel = g.op("Concat", g.op("Shape", input, start=0, end=2), g.const([-1], _I64), axis=0)
    per_group = g.op("Concat", batch, g.const([group, -1], _I64), axis=0)
    x = g.op("Reshape", cast(g, input, dtype), per_channel)
    dy = g.op("Reshape", cast(g, grad_out, dtype), per_channel)
    stat_shape = g.op("Concat", batch, g.const([group, 1], _I64), axis=0)
    mean_g = g.op("Reshape", cast(g, mean, dtype), stat_shape)
    rstd_g = g.op("Reshape", cast(g, rstd, dtype), stat_shape)
    x_hat = g.op("Reshape", g.op("Mul", g.op("Sub", g.op("Reshape", x, per_group), mean_g), rstd_g),
                 per_channel)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        dy_w = dy if weight is None else g.op(
            "Mul", dy, g.op("Reshape", cast(g, weight, dtype), g.const([-1, 1], _I64)))
        axes = g.const([2], _I64)
        gi = _norm_input_grad(g, g.op("Reshape", dy_w, per_group),
                              g.op("Reshape", x_hat, per_group), rstd_g, axes)
        grad_input = cast(g, g.op("Reshape", gi, shape), input.dtype)
    if output_mask[1] and weight is not None:
        grad_weight = cast(g, _sum_over(g, g.op("Mul", dy, x_hat), [0, 2]),
                           weight.dtype)  # type: ignore[arg-type]
    if output_mask[2]:
        grad_bias = cast(g, _sum_over(g, dy, [0, 2]), input.dtype)
    return grad_input, grad_weight, grad_bias
