"""Integer arithmetic: gcd, lcm, bit shifts, bincount.

Everything is computed in int64 and cast to the output dtype at the end: a cast from int64
to a narrower integer type keeps the low bits (two's-complement wrap-around), which is what
torch's fixed-width integer arithmetic gives, and ONNX Runtime has int64 kernels for every op
used here (several lack int8/int16 ones).
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from onnxport.ops._helpers import cast
from onnxport.translate import GraphBuilder, Tensor, aten, prims, register

_I64 = ir.DataType.INT64
_U64 = ir.DataType.UINT64
_BOOL = ir.DataType.BOOL

# Euclid's algorithm needs the most steps on consecutive Fibonacci numbers; F(93) > 2**63, so
# no pair of int64 magnitudes needs more than 92 remainder steps.
_EUCLID_STEPS = 93


def _bits(dtype: ir.DataType) -> int:
    return int(8 * dtype.itemsize)


def _any_nonzero(g: GraphBuilder, x: Tensor) -> Tensor:
    """A bool scalar: does x hold a nonzero element (False for an empty x)."""
    nonzero = g.op("Cast", g.op("Not", g.op("Equal", x, g.const(0, _I64))), to=_I64)
    return g.op("Greater", g.op("ReduceSum", nonzero, keepdims=0), g.const(0, _I64))


def _gcd64(g: GraphBuilder, self: Any, other: Any) -> Tensor:
    """gcd(|a|, |b|) in int64, by Euclid's algorithm in a Loop (gcd(0, 0) = 0)."""
    a = g.op("Abs", cast(g, self, _I64))
    b = g.op("Abs", cast(g, other, _I64))
    # Broadcast both once, so the loop-carried values keep one shape.
    shape = g.op("Shape", g.op("Add", a, b))
    a, b = g.op("Expand", a, shape), g.op("Expand", b, shape)
    body = g.subgraph([], "gcd_body")
    iteration = ir.Value(name=g.unique_name("gcd_i"), type=ir.TensorType(_I64), shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name("gcd_cond"), type=ir.TensorType(_BOOL),
                         shape=ir.Shape([]))
    a_in = ir.Value(name=g.unique_name("gcd_a"), type=ir.TensorType(_I64))
    b_in = ir.Value(name=g.unique_name("gcd_b"), type=ir.TensorType(_I64))
    body.graph.inputs.extend([iteration, condition, a_in, b_in])
    # One step on the lanes whose b is nonzero: (a, b) -> (b, a mod b); finished lanes stay.
    active = body.op("Not", body.op("Equal", b_in, body.const(0, _I64)))
    remainder = body.op("Mod", a_in, body.op("Where", active, b_in, body.const(1, _I64)))
    a_out = body.op("Where", active, b_in, a_in)
    b_out = body.op("Where", active, remainder, body.const(0, _I64))
    body.graph.outputs.extend([_any_nonzero(body, b_out), a_out, b_out])
    result, _ = g.op("Loop", g.const(_EUCLID_STEPS, _I64), _any_nonzero(g, b), a, b,
                     body=body.graph, outputs=2)
    result.dtype = _I64
    return result


@register(aten.gcd.default, prims.gcd.default)
def aten_gcd(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """gcd(Tensor self, Tensor other) -> Tensor"""
    # torch's gcd is non-negative, except gcd(INT_MIN, 0) = INT_MIN (|INT_MIN| wraps), which
    # the int64 Abs and the wrapping cast reproduce.
    return cast(g, _gcd64(g, self, other), g.out_dtype())


@register(aten.lcm.default)
def aten_lcm(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """lcm(Tensor self, Tensor other) -> Tensor"""
    # torch: |a / gcd(a, b) * b| in the output dtype (wrapping), 0 when either is 0.
    dtype = g.out_dtype()
    a, b = cast(g, self, _I64), cast(g, other, _I64)
    divisor = _gcd64(g, a, b)
    is_zero = g.op("Equal", divisor, g.const(0, _I64))
    quotient = g.op("Div", a, g.op("Where", is_zero, g.const(1, _I64), divisor))
    product = cast(g, g.op("Mul", quotient, b), dtype)  # wraps like torch's multiply
    return cast(g, g.op("Abs", cast(g, product, _I64)), dtype)


# -- shifts -----------------------------------------------------------------------------------
def _shift(g: GraphBuilder, self: Any, other: Any, left: bool) -> Tensor:
    """x << s or x >> s (arithmetic) with torch's rules for the output dtype T of B bits.

    A shift count outside [0, B) gives 0 for a left shift, and the sign (0 or -1) for a right
    shift. ONNX BitShift takes only unsigned types: left shifts run on the two's-complement
    bits as uint64; right shifts of a negative x use x >> s = ~(~x >> s), where ~x >= 0.
    """
    dtype = g.out_dtype()
    x = cast(g, self, _I64)
    count = cast(g, other, _I64)
    valid = g.op("And", g.op("GreaterOrEqual", count, g.const(0, _I64)),
                 g.op("Less", count, g.const(_bits(dtype), _I64)))
    if left:
        amount = cast(g, g.op("Where", valid, count, g.const(0, _I64)), _U64)
        shifted = g.op("BitShift", cast(g, x, _U64), amount, direction="LEFT")
        out = g.op("Where", valid, cast(g, shifted, _I64), g.const(0, _I64))
        return cast(g, out, dtype)  # keeps the low B bits, as torch's shift does
    negative = g.op("Less", x, g.const(0, _I64))
    minus_one = g.const(-1, _I64)
    magnitude = g.op("Where", negative, g.op("Sub", minus_one, x), x)  # ~x for x < 0
    # 63 shifts every bit of a non-negative int64 out, like a count >= B does in torch.
    amount = cast(g, g.op("Where", valid, count, g.const(63, _I64)), _U64)
    shifted = cast(g, g.op("BitShift", cast(g, magnitude, _U64), amount, direction="RIGHT"), _I64)
    return cast(g, g.op("Where", negative, g.op("Sub", minus_one, shifted), shifted), dtype)


@register(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
          aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar,
          prims.shift_left.default)
def aten_bitwise_left_shift(g: GraphBuilder, self: Any, other: Any) -> Tensor:
    """bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _shift(g, self, other, left=True)


@register(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
          aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar,
          prims.shift_right_arithmetic.default)
def aten_bitwise_right_shift(g: GraphBuilder, self: Any, other: Any) -> Tensor:
    """bitwise_right_shift.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _shift(g, self, other, left=False)


# -- bincount ---------------------------------------------------------------------------------
@register(aten.bincount.default)
def aten_bincount(g: GraphBuilder, self: Tensor, weights: Tensor | None = None,
                  minlength: Any = 0) -> Tensor:
    """bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor"""
    # Output length max(max(self) + 1, minlength) is data-dependent: torch.export gives it an
    # unbacked size, here it is computed. An empty self counts as max(self) = -1.
    index = g.op("Reshape", cast(g, self, _I64), g.const([-1], _I64))
    largest = g.op("ReduceMax", g.op("Concat", index, g.const([-1], _I64), axis=0), keepdims=1)
    length = g.op("Max", g.op("Add", largest, g.const([1], _I64)),
                  g.op("Reshape", cast(g, minlength, _I64), g.const([1], _I64)))
    # Counts add in int64; weights (float output) add in float64, ScatterElements' add.
    accumulate = _I64 if weights is None else ir.DataType.DOUBLE
    if weights is None:
        updates = g.op("Expand", g.const(1, _I64), g.op("Shape", index))
    else:
        updates = g.op("Reshape", cast(g, weights, accumulate), g.const([-1], _I64))
    zeros = g.op("Expand", g.const(0, accumulate), length)
    counts = g.op("ScatterElements", zeros, index, updates, axis=0, reduction="add")
    return cast(g, counts, g.out_dtype())
