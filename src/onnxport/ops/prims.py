"""Translations of FX plumbing: getitem and symbolic-int (SymInt) arithmetic.

A SymInt is an int64 scalar tensor; SymFloat a float scalar; SymBool a bool scalar.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import onnx_ir as ir
import torch

from onnxport.ops._helpers import cast
from onnxport.ops.conversion import convert_dtype
from onnxport.translate import GraphBuilder, Tensor, aten, prims, register


@register(operator.getitem)
def getitem(g: GraphBuilder, seq: Any, index: int) -> Any:
    """operator.getitem on a multi-output node's tuple."""
    if isinstance(seq, ir.Value):
        return g.op("SequenceAt", seq, g.const(index, ir.DataType.INT64))
    return seq[index]


@register(aten.sym_size.int)
def aten_sym_size_int(g: GraphBuilder, self: Tensor, dim: int) -> Tensor:
    """sym_size.int(Tensor self, int dim) -> SymInt"""
    shape = g.op("Shape", self)
    return g.op("Gather", shape, g.const(dim, ir.DataType.INT64), axis=0)


@register(aten.sym_numel.default)
def aten_sym_numel(g: GraphBuilder, self: Tensor) -> Tensor:
    """sym_numel(Tensor self) -> SymInt"""
    return g.op("Size", self)


@register(aten.sym_storage_offset.default)
def aten_sym_storage_offset(g: GraphBuilder, self: Tensor) -> Tensor:
    """sym_storage_offset(Tensor self) -> SymInt"""
    return g.const(0, ir.DataType.INT64)


def _sym_binary(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, a: Any, b: Any) -> Any:
        dtype = g.out_dtype()
        return g.op(op_type, cast(g, a, dtype), cast(g, b, dtype))

    return translate


def _sym_compare(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, a: Any, b: Any) -> Any:
        dtype = ir.DataType.FLOAT if any(
            isinstance(x, float) or (isinstance(x, ir.Value) and x.dtype == ir.DataType.FLOAT)
            for x in (a, b)) else ir.DataType.INT64
        return g.op(op_type, cast(g, a, dtype), cast(g, b, dtype))

    return translate


for _target, _op in {operator.add: "Add", operator.sub: "Sub", operator.mul: "Mul",
                     operator.pow: "Pow", torch.sym_max: "Max", torch.sym_min: "Min"}.items():
    register(_target)(_sym_binary(_op))

for _target, _op in {operator.eq: "Equal", operator.lt: "Less", operator.gt: "Greater",
                     operator.le: "LessOrEqual", operator.ge: "GreaterOrEqual"}.items():
    register(_target)(_sym_compare(_op))


@register(operator.ne)
def sym_ne(g: GraphBuilder, a: Any, b: Any) -> Any:
    """operator.ne on symbolic ints."""
    return g.op("Not", _sym_compare("Equal")(g, a, b))


@register(operator.floordiv)
def sym_floordiv(g: GraphBuilder, a: Any, b: Any) -> Any:
    """operator.floordiv on symbolic ints: floor, not ONNX's truncation."""
    dtype = g.out_dtype()
    a, b = cast(g, a, dtype), cast(g, b, dtype)
    if dtype.is_floating_point():
        return g.op("Floor", g.op("Div", a, b))
    return _floor_div_int(g, a, b)


def _floor_div_int(g: GraphBuilder, a: Tensor, b: Tensor) -> Tensor:
    q = g.op("Div", a, b)
    # ONNX Div truncates; step down where the signs differ and there is a remainder.
    remainder = g.op("Sub", a, g.op("Mul", q, b))
    has_rem = g.op("Not", g.op("Equal", remainder, g.const(0, like=remainder)))
    signs_differ = g.op("Xor", g.op("Less", a, g.const(0, like=a)), g.op("Less", b, g.const(0, like=b)))
    fix = g.op("Cast", g.op("And", has_rem, signs_differ), to=q.dtype)
    return g.op("Sub", q, fix)


@register(operator.mod)
def sym_mod(g: GraphBuilder, a: Any, b: Any) -> Any:
    """operator.mod on symbolic ints (Python's sign rule: the divisor's)."""
    dtype = g.out_dtype()
    return g.op("Mod", cast(g, a, dtype), cast(g, b, dtype), fmod=0)


@register(operator.neg)
def sym_neg(g: GraphBuilder, a: Any) -> Any:
    """operator.neg on symbolic numbers."""
    return g.op("Neg", a)


@register(operator.truediv)
def sym_truediv(g: GraphBuilder, a: Any, b: Any) -> Any:
    """operator.truediv on symbolic numbers."""
    dtype = g.out_dtype()
    return g.op("Div", cast(g, a, dtype), cast(g, b, dtype))


@register(torch.sym_float)
def sym_float(g: GraphBuilder, a: Any) -> Any:
    """torch.sym_float."""
    return cast(g, a, ir.DataType.FLOAT)


@register(torch.sym_not)
def sym_not(g: GraphBuilder, a: Any) -> Any:
    """torch.sym_not."""
    return g.op("Not", cast(g, a, ir.DataType.BOOL))


@register(math.ceil)
def sym_ceil(g: GraphBuilder, a: Any) -> Any:
    """math.ceil on a symbolic float."""
    return cast(g, g.op("Ceil", cast(g, a, ir.DataType.FLOAT)), ir.DataType.INT64)


@register(math.floor)
def sym_floor(g: GraphBuilder, a: Any) -> Any:
    """math.floor on a symbolic float."""
    return cast(g, g.op("Floor", cast(g, a, ir.DataType.FLOAT)), ir.DataType.INT64)


@register(math.trunc)
def sym_trunc(g: GraphBuilder, a: Any) -> Any:
    """math.trunc on a symbolic float (`int(x)`): toward zero, as ONNX's float-to-int Cast."""
    return cast(g, cast(g, a, ir.DataType.FLOAT), ir.DataType.INT64)


@register(torch.sym_ite)
def sym_ite(g: GraphBuilder, b: Any, t: Any, f: Any) -> Any:
    """torch.sym_ite(b, t, f): t if b else f, on symbolic values."""
    dtype = g.out_dtype()
    return g.op("Where", cast(g, b, ir.DataType.BOOL), cast(g, t, dtype), cast(g, f, dtype))


@register(prims.convert_element_type.default)
def prims_convert_element_type(g: GraphBuilder, a: Tensor, dtype: torch.dtype) -> Tensor:
    """convert_element_type(Tensor a, ScalarType dtype) -> Tensor"""
    # A plain dtype conversion; the output dtype is `dtype` (also FX's metadata).
    return convert_dtype(g, a, g.out_dtype())


def _sym_logical(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, a: Any, b: Any) -> Any:
        dtype = g.out_dtype()
        if dtype == ir.DataType.BOOL:
            return g.op(op_type, cast(g, a, dtype), cast(g, b, dtype))
        return g.op(f"Bitwise{op_type}", cast(g, a, dtype), cast(g, b, dtype))

    return translate


# SymBool `or`/`and` (a run-time assert's condition), bitwise on SymInts.
for _target, _op in {operator.or_: "Or", operator.and_: "And"}.items():
    register(_target)(_sym_logical(_op))
