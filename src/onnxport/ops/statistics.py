"""Covariance and correlation: aten.cov and aten.corrcoef.

Both ops stay whole in the captured graph (capture/kernels.py gives torch.export a kernel
without ATen's data-dependent checks), and are computed here in the output's float dtype:
variables are rows, observations columns; weights are `fweights * aweights`.
"""

from __future__ import annotations


import onnx_ir as ir

from onnxport.ops._helpers import cast, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

_INT64 = ir.DataType.INT64


def _covariance(g: GraphBuilder, x: Tensor, correction: int, fweights: Tensor | None,
                aweights: Tensor | None, dtype: ir.DataType) -> Tensor:
    """(variables, variables) covariance of the rows of 2-D `x`."""
    x = cast(g, x, dtype)
    n = cast(g, g.op("Shape", x, start=1, end=2), dtype)
    weights = None
    for w in (fweights, aweights):
        if w is not None:
            w = cast(g, w, dtype)
            weights = w if weights is None else g.op("Mul", weights, w)
    one = g.const([1], _INT64)
    if weights is None:
        mean = g.op("ReduceMean", x, one, keepdims=1)
        norm = g.op("Sub", n, g.const(float(correction), dtype))
    else:
        w_sum = g.op("ReduceSum", weights, keepdims=1)
        mean = g.op("Div", g.op("ReduceSum", g.op("Mul", x, weights), one, keepdims=1), w_sum)
        if correction == 0:
            norm = w_sum
        elif aweights is None:
            norm = g.op("Sub", w_sum, g.const(float(correction), dtype))
        else:
            weighted = g.op("ReduceSum", g.op("Mul", weights, cast(g, aweights, dtype)), keepdims=1)
            norm = g.op("Sub", w_sum, g.op("Mul", g.const(float(correction), dtype),
                                           g.op("Div", weighted, w_sum)))
    # ATen clamps a non-positive norm to 0 (with a warning): the result is then inf or nan.
    norm = g.op("Max", norm, g.const(0.0, dtype))
    centred = g.op("Sub", x, mean)
    left = centred if weights is None else g.op("Mul", centred, weights)
    products = g.op("MatMul", left, g.op("Transpose", centred, perm=[1, 0]))
    return g.op("Div", products, g.op("Reshape", norm, g.const([], _INT64)))


def _as_rows(g: GraphBuilder, x: Tensor) -> Tensor:
    return x if rank(x) == 2 else g.op("Reshape", x, g.const([1, -1], _INT64))


def _squeezed(g: GraphBuilder, c: Tensor, x: Tensor) -> Tensor:
    """ATen squeezes a 1x1 result to 0-D (one variable)."""
    shape = x.shape
    one_variable = rank(x) < 2 or (shape is not None and shape[0] == 1)
    return g.op("Reshape", c, g.const([], _INT64)) if one_variable else c


@register(aten.cov.default)
def aten_cov(g: GraphBuilder, self: Tensor, *, correction: int = 1, fweights: Tensor | None = None,
             aweights: Tensor | None = None) -> Tensor:
    """cov(Tensor self, *, int correction=1, Tensor? fweights=None, Tensor? aweights=None) -> Tensor"""  # noqa: E501
    dtype = g.out_dtype()
    c = _covariance(g, _as_rows(g, self), correction, fweights, aweights, dtype)
    return _squeezed(g, c, self)


@register(aten.corrcoef.default)
def aten_corrcoef(g: GraphBuilder, self: Tensor) -> Tensor:
    """corrcoef(Tensor self) -> Tensor"""
    dtype = g.out_dtype()
    c = _covariance(g, _as_rows(g, self), 1, None, None, dtype)
    # c_ij / sqrt(c_ii c_jj), clipped to [-1, 1] as ATen does.
    variances = g.op("ReduceSum", g.op("Mul", c, g.op("EyeLike", c)), g.const([1], _INT64),
                     keepdims=1)
    std = g.op("Sqrt", variances)
    r = g.op("Div", g.op("Div", c, std), g.op("Transpose", std, perm=[1, 0]))
    r = g.op("Clip", r, g.const(-1.0, dtype), g.const(1.0, dtype))
    if _squeezed(g, c, self) is not c:
        # One variable: ATen returns c / c (1, or nan for a zero or undefined variance).
        return g.op("Reshape", g.op("Div", c, c), g.const([], _INT64))
    return r


