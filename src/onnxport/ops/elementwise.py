"""Elementwise math: arithmetic, comparisons, unary functions and activations."""

from __future__ import annotations

from typing import Any

from onnxport.ops._helpers import cast
from onnxport.translate import GraphBuilder, Tensor, aten, register


def _unary(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor) -> Tensor:
        return g.op(op_type, cast(g, self, g.out_dtype()))

    translate.__name__ = f"aten_{op_type.lower()}"
    return translate


_SAME_AS_ONNX = {
    aten.relu.default: "Relu",
    aten.sigmoid.default: "Sigmoid",
    aten.tanh.default: "Tanh",
}
for _target, _op_type in _SAME_AS_ONNX.items():
    register(_target)(_unary(_op_type))


@register(aten.add.Tensor, aten.add.Scalar)
def aten_add(g: GraphBuilder, self: Tensor, other: Any, *, alpha: float = 1) -> Tensor:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    dtype = g.out_dtype()
    a, b = cast(g, self, dtype), cast(g, other, dtype)
    if alpha != 1:
        b = g.op("Mul", b, g.const(alpha, dtype))
    return g.op("Add", a, b)
