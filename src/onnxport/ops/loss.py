"""Losses: soft_margin_loss (to round as ATen does), the chunked linear_cross_entropy custom ops.

`F.linear_cross_entropy(..., options=...)` calls two `torch_nn::` custom ops that compute the
logits batch-chunk by chunk (to bound memory in eager mode). In ONNX the chunking has no
purpose: the loss is the same cross entropy over `input @ linear_weight.T + linear_bias`.
The ops are defined (and so can be registered) only once their module is imported.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import torch
import torch.nn.modules.linear_cross_entropy  # noqa: F401  (defines the torch_nn:: ops)

from onnxport import _dtypes
from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast
from onnxport.ops.reduction import logsumexp
from onnxport.translate import GraphBuilder, Tensor, aten, register

torch_nn = torch.ops.torch_nn
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


@register(aten.soft_margin_loss.default)
def aten_soft_margin_loss(g: GraphBuilder, self: Tensor, target: Tensor,
                          reduction: int = 1) -> Tensor:
    """soft_margin_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor"""
    out = g.out_dtype()
    # ATen evaluates log1p(exp(-self * target)) op by op in the input dtype: for half types each
    # step is rounded to it (exp overflows to inf beyond 11.1 in float16). ORT has no float16
    # kernels for these ops and would run the whole chain in float32 unrounded, so compute in
    # float (double for log1p, which loses small arguments in float32) and round explicitly.
    compute = ir.DataType.FLOAT if out in _HALF else out

    def rounded(v: Tensor) -> Tensor:
        return cast(g, cast(g, v, out), compute) if out in _HALF else v

    z = rounded(g.op("Mul", g.op("Neg", cast(g, self, compute)), cast(g, target, compute)))
    e = rounded(g.op("Exp", z))
    wide = ir.DataType.DOUBLE if compute != ir.DataType.DOUBLE else compute
    e_wide = cast(g, e, wide)
    loss = cast(g, g.op("Log", g.op("Add", e_wide, g.const(1.0, wide))), out)
    if reduction == 0:
        return loss
    # ATen reduces half types with a float accumulator.
    loss = cast(g, loss, compute)
    reduced = g.op("ReduceMean" if reduction == 1 else "ReduceSum", loss, keepdims=0)
    return cast(g, reduced, out)


def _per_sample_loss(g: GraphBuilder, input: Tensor, linear_weight: Tensor, target: Tensor,
                     linear_bias: Tensor | None, weight: Tensor | None, ignore_index: int,
                     compute: ir.DataType) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(weighted loss per sample, its weight w[target] (0 where target == ignore_index),
    the logits, the target with ignored entries read as class 0)."""
    logits = g.op("MatMul", cast(g, input, compute),
                  g.op("Transpose", cast(g, linear_weight, compute), perm=[1, 0]))
    if linear_bias is not None:
        logits = g.op("Add", logits, cast(g, linear_bias, compute))
    is_kept = g.op("Not", g.op("Equal", target, g.const(ignore_index, ir.DataType.INT64)))
    # An ignored target may be any number (-100): read class 0 there, then mask it out.
    safe = g.op("Where", is_kept, target, g.const(0, ir.DataType.INT64))
    picked = g.op("GatherElements", logits, g.op("Unsqueeze", safe, g.const([1], ir.DataType.INT64)),
                  axis=1)
    picked = g.op("Squeeze", picked, g.const([1], ir.DataType.INT64))
    nll = g.op("Sub", logsumexp(g, logits, [1], False), picked)
    zero = g.const(0.0, compute)
    if weight is None:
        w = g.op("Where", is_kept, g.const(1.0, compute), zero)
    else:
        w = g.op("Where", is_kept, g.op("Gather", cast(g, weight, compute), safe, axis=0), zero)
    return g.op("Mul", nll, w), w, logits, safe


def _gradients(g: GraphBuilder, input: Tensor, linear_weight: Tensor, logits: Tensor,
               target: Tensor, scaled_w: Tensor, compute: ir.DataType
               ) -> tuple[Tensor, Tensor, Tensor]:
    """d loss / d (input, linear_weight, linear_bias), with d loss / d logits[i] =
    scaled_w[i] * (softmax(logits[i]) - onehot(target[i]))."""
    probs = g.op("Softmax", logits, axis=1)
    classes = g.op("Shape", logits, start=1, end=2)
    onehot = g.op("Equal", g.op("Unsqueeze", target, g.const([1], ir.DataType.INT64)),
                  g.op("Range", g.const(0, ir.DataType.INT64),
                       g.op("Squeeze", classes, g.const([0], ir.DataType.INT64)),
                       g.const(1, ir.DataType.INT64)))
    d_logits = g.op("Mul", g.op("Sub", probs, cast(g, onehot, compute)),
                    g.op("Unsqueeze", scaled_w, g.const([1], ir.DataType.INT64)))
    grad_input = g.op("MatMul", d_logits, cast(g, linear_weight, compute))
    grad_weight = g.op("MatMul", g.op("Transpose", d_logits, perm=[1, 0]), cast(g, input, compute))
    grad_bias = g.op("ReduceSum", d_logits, g.const([0], ir.DataType.INT64), keepdims=0)
    return grad_input, grad_weight, grad_bias


def _acc_dtype(input: Tensor, acc_dtype: torch.dtype | None) -> ir.DataType:
    """The wider of the input's dtype and the accumulation dtype torch's loop uses."""
    assert input.dtype is not None
    if acc_dtype is None:
        return input.dtype
    acc = _dtypes.to_ir(acc_dtype)
    return acc if acc.itemsize > input.dtype.itemsize else input.dtype


@register(torch_nn._linear_cross_entropy_batch_chunked.default)
def torch_nn_linear_cross_entropy_batch_chunked(
        g: GraphBuilder, input: Tensor, linear_weight: Tensor, target: Tensor,
        linear_bias: Tensor | None, weight: Tensor | None, reduction: str, ignore_index: int,
        label_smoothing: float, batch_chunk_size: int, acc_policy: str, acc_dtype: torch.dtype,
        allow_retain_graph: bool, compute_input_grad: bool, compute_linear_weight_grad: bool,
        compute_linear_bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """_linear_cross_entropy_batch_chunked(Tensor input, Tensor linear_weight, Tensor target, Tensor? linear_bias, Tensor? weight, str reduction, SymInt ignore_index, float label_smoothing, SymInt batch_chunk_size, str acc_policy, ScalarType acc_dtype, bool allow_retain_graph, bool compute_input_grad, bool compute_linear_weight_grad, bool compute_linear_bias_grad) -> (Tensor, Tensor, Tensor, Tensor)"""
    if label_smoothing != 0.0 or reduction not in ("mean", "sum"):
        raise TranslationError(f"chunked linear_cross_entropy with reduction={reduction!r}, "
                               f"label_smoothing={label_smoothing}")
    compute = _acc_dtype(input, acc_dtype)
    loss, w, logits, safe = _per_sample_loss(g, input, linear_weight, target, linear_bias, weight,
                                             int(ignore_index), compute)
    total = g.op("ReduceSum", loss, keepdims=0)
    if reduction == "mean":
        # torch divides by the summed target weights: NaN when every target is ignored.
        denominator = g.op("ReduceSum", w, keepdims=0)
        total = g.op("Div", total, denominator)
        w = g.op("Div", w, denominator)
    # The op also returns the gradients autograd would need (when an input requires grad at
    # trace time); the ones not asked for are empty placeholders.
    flags = (compute_input_grad, compute_linear_weight_grad, compute_linear_bias_grad)
    grads: tuple[Tensor, ...] = ()
    if any(flags):
        grads = _gradients(g, input, linear_weight, logits, safe, w, compute)
    outputs = [cast(g, total, g.out_dtype(0))]
    for i, is_wanted in enumerate(flags):
        if is_wanted:
            outputs.append(cast(g, grads[i], g.out_dtype(i + 1)))
        else:
            shape = tuple(int(d) for d in g.out_vals[i + 1].shape)
            outputs.append(g.const(np.zeros(shape), g.out_dtype(i + 1)))
    return tuple(outputs)  # type: ignore[return-value]


@register(torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default)
def torch_nn_linear_cross_entropy_batch_chunked_no_reduction(
        g: GraphBuilder, input: Tensor, linear_weight: Tensor, target: Tensor,
        linear_bias: Tensor | None, weight: Tensor | None, ignore_index: int,
        batch_chunk_size: int, acc_policy: str, acc_dtype: torch.dtype) -> Tensor:
    """_linear_cross_entropy_batch_chunked_no_reduction(Tensor input, Tensor linear_weight, Tensor target, Tensor? linear_bias, Tensor? weight, SymInt ignore_index, SymInt batch_chunk_size, str acc_policy, ScalarType acc_dtype) -> Tensor"""
    compute = _acc_dtype(input, acc_dtype)
    loss = _per_sample_loss(g, input, linear_weight, target, linear_bias, weight,
                            int(ignore_index), compute)[0]
    return cast(g, loss, g.out_dtype())
