"""Translations for matrix products: mm, bmm, addmm, matmul, linear."""

from __future__ import annotations

from onnxport.ops._helpers import rank
from onnxport.translate import GraphBuilder, Tensor, aten, register


@register(aten.linear.default)
def aten_linear(g: GraphBuilder, input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    if rank(input) == 2 and rank(weight) == 2 and input.dtype is not None \
            and input.dtype.is_floating_point():
        return g.op("Gemm", input, weight, bias, transB=1)
    out = g.op("MatMul", input, g.op("Transpose", weight, perm=[1, 0]) if rank(weight) == 2 else weight)
    return out if bias is None else g.op("Add", out, bias)


@register(aten.addmm.default)
def aten_addmm(g: GraphBuilder, self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1,
               alpha: float = 1) -> Tensor:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    # torch ignores `self` when beta == 0, so NaN/inf in it must not reach the output.
    bias = None if beta == 0 else self
    if mat1.dtype is not None and mat1.dtype.is_floating_point():
        return g.op("Gemm", mat1, mat2, bias, alpha=float(alpha), beta=float(beta))
    # ONNX Runtime has no integer Gemm kernel; MatMul, Mul and Add all take integers.
    out = g.op("MatMul", mat1, mat2)
    if alpha != 1:
        out = g.op("Mul", out, g.const(alpha, like=out))
    if bias is None:
        return out
    if beta != 1:
        bias = g.op("Mul", bias, g.const(beta, like=bias))
    return g.op("Add", out, bias)


@register(aten.mm.default, aten.bmm.default, aten.matmul.default)
def aten_mm(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return g.op("MatMul", self, other)
