"""Normalization: batch_norm (eval, training, functional running-statistics updates),
layer_norm, group_norm, instance_norm, rms_norm and _weight_norm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list, rank
from onnxport.ops._layers import _channel_shape, _compute_dtype, _dim, _div, _HALF, _mul
from onnxport.translate import GraphBuilder, Tensor, aten, register


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
    # ORT's LayerNormalization refuses an empty normalized slice; the decomposition gives
    # the empty output (and the statistics) as ATen does.
    if g.opset >= 17 and all(isinstance(d, int) and d > 0 for d in normalized_shape):
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


@register(aten._weight_norm.default)
def aten__weight_norm(g: GraphBuilder, v: Tensor, g_: Tensor, dim: int = 0) -> Tensor:
    """_weight_norm(Tensor v, Tensor g, int dim=0) -> Tensor"""
    # v * g / ||v||, the norm taken over every dim but `dim` (dim=-1: over all of v).
    r = rank(v)
    axes = list(range(r)) if dim == -1 else [a for a in range(r) if a != dim % r]
    norm = g.op("Sqrt", g.op("ReduceSum", g.op("Mul", v, v), g.const(axes, ir.DataType.INT64),
                             keepdims=1))
    return g.op("Mul", v, g.op("Div", g_, norm))
