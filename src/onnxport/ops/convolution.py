"""Convolution and transposed convolution (conv1d/2d/3d, conv_transpose, aten.convolution).

Half-precision inputs run in float32 (ONNX Runtime's Conv kernels); integer and float64
inputs with static sizes run exactly as gathered windows (`_layers._window_index`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.ops._layers import (
    _add_batch, _channel_shape, _compute_dtype, _drop_batch, _gather_windows, _gathered_dtype,
    _ints, _static_sizes, _window_index,
)
from onnxport.translate import GraphBuilder, Tensor, aten, register


# -- exact integer convolution ---------------------------------------------------------------

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
