"""Activation functions and softmax: relu family, gelu, silu, shrinks, glu, (log_)softmax.

ONNX's activation ops are float-only in ONNX Runtime (several lack float16 or double
kernels); each place that computes in another dtype says why.
"""

from __future__ import annotations

import math

import onnx_ir as ir
import torch

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, normalize_dim, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

FLOAT = ir.DataType.FLOAT


def _activation(op_type: str, **attrs: float):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor) -> Tensor:
        return g.op(op_type, self, **attrs)

    translate.__name__ = f"aten_{op_type.lower()}"
    translate.__doc__ = f"{op_type.lower()}(Tensor self) -> Tensor"
    return translate


_SAME_AS_ONNX = {
    aten.selu.default: _activation("Selu"),  # ONNX's defaults are ATen's constants
    aten.hardswish.default: _activation("HardSwish"),
    aten.hardsigmoid.default: _activation("HardSigmoid", alpha=1 / 6, beta=0.5),
    aten.mish.default: _activation("Mish"),
}
for _target, _translate in _SAME_AS_ONNX.items():
    register(_target)(_translate)


@register(aten.relu.default)
def aten_relu(g: GraphBuilder, self: Tensor) -> Tensor:
    """relu(Tensor self) -> Tensor"""
    if self.dtype is not None and self.dtype.is_floating_point():
        return g.op("Relu", self)
    # ORT's Relu has no int64 kernel; Max has every integer one.
    return g.op("Max", self, g.const(0, like=self))


@register(aten.relu6.default)
def aten_relu6(g: GraphBuilder, self: Tensor) -> Tensor:
    """relu6(Tensor self) -> Tensor"""
    return g.op("Clip", self, g.const(0, like=self), g.const(6, like=self))


@register(aten.hardtanh.default)
def aten_hardtanh(g: GraphBuilder, self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"""
    # Clip keeps NaN, as ATen's hardtanh does.
    return g.op("Clip", self, g.const(min_val, like=self), g.const(max_val, like=self))


@register(aten.leaky_relu.default)
def aten_leaky_relu(g: GraphBuilder, self: Tensor, negative_slope: float = 0.01) -> Tensor:
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"""
    return g.op("LeakyRelu", self, alpha=float(negative_slope))


@register(aten.elu.default)
def aten_elu(g: GraphBuilder, self: Tensor, alpha: float = 1, scale: float = 1,
             input_scale: float = 1) -> Tensor:
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"""
    if scale == 1 and input_scale == 1:
        return g.op("Elu", self, alpha=float(alpha))
    # ATen: x * scale for x > 0, else (exp(x * input_scale) - 1) * alpha * scale.
    negative = g.op("Sub", g.op("Exp", g.op("Mul", self, g.const(input_scale, like=self))),
                    g.const(1, like=self))
    negative = g.op("Mul", negative, g.const(alpha * scale, like=self))
    positive = g.op("Mul", self, g.const(scale, like=self))
    return g.op("Where", g.op("Greater", self, g.const(0, like=self)), positive, negative)


@register(aten.celu.default)
def aten_celu(g: GraphBuilder, self: Tensor, alpha: float = 1.0) -> Tensor:
    """celu(Tensor self, Scalar alpha=1.) -> Tensor"""
    # ORT's Celu has a float32 kernel only.
    return cast(g, g.op("Celu", cast(g, self, FLOAT), alpha=float(alpha)), self.dtype)


@register(aten.gelu.default)
def aten_gelu(g: GraphBuilder, self: Tensor, *, approximate: str = "none") -> Tensor:
    """gelu(Tensor self, *, str approximate="none") -> Tensor"""
    half = g.const(0.5, like=self)
    one = g.const(1, like=self)
    if approximate == "tanh":
        # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
        cube = g.op("Mul", g.op("Mul", self, self), self)
        inner = g.op("Add", self, g.op("Mul", cube, g.const(0.044715, like=self)))
        inner = g.op("Mul", inner, g.const(math.sqrt(2 / math.pi), like=self))
        gate = g.op("Add", one, g.op("Tanh", inner))
        return g.op("Mul", g.op("Mul", self, half), gate)
    # (x * (erf(x / sqrt(2)) + 1)) * 0.5: Div -> Erf -> Add -> Mul -> Mul is the form ONNX
    # Runtime's GeluFusion turns into its one-kernel Gelu (it does not match Mul by 1/sqrt(2)).
    gate = g.op("Add", g.op("Erf", g.op("Div", self, g.const(math.sqrt(2.0), like=self))), one)
    return g.op("Mul", g.op("Mul", self, gate), half)


@register(aten.gelu.default, since_opset=20)
def aten_gelu_opset20(g: GraphBuilder, self: Tensor, *, approximate: str = "none") -> Tensor:
    """gelu(Tensor self, *, str approximate="none") -> Tensor"""
    return g.op("Gelu", self, approximate=approximate)


@register(aten.silu.default)
def aten_silu(g: GraphBuilder, self: Tensor) -> Tensor:
    """silu(Tensor self) -> Tensor"""
    return g.op("Mul", self, g.op("Sigmoid", self))


@register(aten.softplus.default)
def aten_softplus(g: GraphBuilder, self: Tensor, beta: float = 1, threshold: float = 20) -> Tensor:
    """softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor"""
    # ATen: x where x * beta > threshold, else log1p(exp(x * beta)) / beta.
    scaled = self if beta == 1 else g.op("Mul", self, g.const(beta, like=self))
    soft = g.op("Softplus", scaled)
    if beta != 1:
        soft = g.op("Div", soft, g.const(beta, like=self))
    return g.op("Where", g.op("Greater", scaled, g.const(threshold, like=self)), self, soft)


@register(aten.hardshrink.default)
def aten_hardshrink(g: GraphBuilder, self: Tensor, lambd: float = 0.5) -> Tensor:
    """hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    # Not ONNX Shrink: it maps NaN to 0, ATen keeps it.
    inside = g.op("LessOrEqual", g.op("Abs", self), g.const(lambd, like=self))
    return g.op("Where", inside, g.const(0, like=self), self)


@register(aten.softshrink.default)
def aten_softshrink(g: GraphBuilder, self: Tensor, lambd: float = 0.5) -> Tensor:
    """softshrink(Tensor self, Scalar lambd=0.5) -> Tensor"""
    # ATen: x - l above l, x + l below -l, else x * 0 (so NaN stays NaN, unlike ONNX Shrink).
    lam = g.const(lambd, like=self)
    inner = g.op("Where", g.op("Less", self, g.op("Neg", lam)), g.op("Add", self, lam),
                 g.op("Mul", self, g.const(0, like=self)))
    return g.op("Where", g.op("Greater", self, lam), g.op("Sub", self, lam), inner)


@register(aten.threshold.default)
def aten_threshold(g: GraphBuilder, self: Tensor, threshold: float, value: float) -> Tensor:
    """threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor"""
    # ATen: value where x <= threshold, else x (NaN stays NaN).
    below = g.op("LessOrEqual", self, g.const(threshold, like=self))
    return g.op("Where", below, g.const(value, like=self), self)


@register(aten.prelu.default, aten._prelu_kernel.default)
def aten_prelu(g: GraphBuilder, self: Tensor, weight: Tensor) -> Tensor:
    """prelu(Tensor self, Tensor weight) -> Tensor"""
    # The weight is per channel (dim 1); ONNX PRelu broadcasts the slope from the right.
    r = rank(self)
    if r >= 2 and rank(weight) == 1:
        weight = g.op("Reshape", weight, g.const([-1] + [1] * (r - 2), ir.DataType.INT64))
    elif r == 0:
        # A scalar input takes the single weight as a scalar, so the result stays 0-d.
        weight = g.op("Reshape", weight, g.const([], ir.DataType.INT64))
    return g.op("PRelu", self, weight)


@register(aten.glu.default)
def aten_glu(g: GraphBuilder, self: Tensor, dim: int = -1) -> Tensor:
    """glu(Tensor self, int dim=-1) -> Tensor"""
    if g.opset < 18:
        raise TranslationError(f"glu needs Split's num_outputs (opset 18), not opset {g.opset}")
    a, b = g.op("Split", self, axis=normalize_dim(dim, rank(self)), num_outputs=2, outputs=2)
    return g.op("Mul", a, g.op("Sigmoid", b))


@register(aten.log_sigmoid.default)
def aten_log_sigmoid(g: GraphBuilder, self: Tensor) -> Tensor:
    """log_sigmoid(Tensor self) -> Tensor"""
    # log(sigmoid(x)) = -softplus(-x); ORT's Softplus is stable for large |x|.
    return g.op("Neg", g.op("Softplus", g.op("Neg", self)))


@register(aten.log_sigmoid_forward.default)
def aten_log_sigmoid_forward(g: GraphBuilder, self: Tensor) -> tuple[Tensor, Tensor]:
    """log_sigmoid_forward(Tensor self) -> (Tensor output, Tensor buffer)"""
    # ATen's CPU buffer (kept for the backward pass) is exp(-|x|).
    buffer = g.op("Exp", g.op("Neg", g.op("Abs", self)))
    return aten_log_sigmoid(g, self), buffer


def _softmax(g: GraphBuilder, op_type: str, self: Tensor, dim: int) -> Tensor:
    dtype = g.out_dtype()
    # ATen accumulates half types in float32 and rounds once at the end.
    x = cast(g, self, FLOAT if dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16) else dtype)
    r = rank(self)
    if r == 0:
        # ONNX Softmax needs an axis; a scalar is a one-element vector here.
        axes = g.const([0], ir.DataType.INT64)
        out = g.op("Squeeze", g.op(op_type, g.op("Unsqueeze", x, axes), axis=0), axes)
    else:
        out = g.op(op_type, x, axis=normalize_dim(dim, r))
    return cast(g, out, dtype)


@register(aten.softmax.int)
def aten_softmax(g: GraphBuilder, self: Tensor, dim: int,
                 dtype: torch.dtype | None = None) -> Tensor:
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    return _softmax(g, "Softmax", self, dim)


@register(aten._softmax.default)
def aten__softmax(g: GraphBuilder, self: Tensor, dim: int, half_to_float: bool) -> Tensor:
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _softmax(g, "Softmax", self, dim)


@register(aten.log_softmax.int)
def aten_log_softmax(g: GraphBuilder, self: Tensor, dim: int,
                     dtype: torch.dtype | None = None) -> Tensor:
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    return _softmax(g, "LogSoftmax", self, dim)


@register(aten._log_softmax.default)
def aten__log_softmax(g: GraphBuilder, self: Tensor, dim: int, half_to_float: bool) -> Tensor:
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _softmax(g, "LogSoftmax", self, dim)
