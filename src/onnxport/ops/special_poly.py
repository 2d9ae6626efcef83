"""Orthogonal polynomials of torch.special: Chebyshev T/U/V/W (plain and shifted), Hermite H/He,
Laguerre L and Legendre P, evaluated at (x, n) with either one a tensor or a scalar.

ATen's semantics, read off by experiment (torch 2.13, CPU):
- x and n are promoted to the output dtype, then n is truncated toward zero to an integer; a NaN,
  infinite or out-of-int64-range n behaves as a negative one. n < 0 gives 0, n == 0 gives 1.
- P_n is otherwise the three-term recurrence from P_0 = 1 and P_1, except where ATen switches to a
  closed form: at |x| == 1 for Chebyshev and Legendre (x == 0 for Laguerre), and for Chebyshev
  the trigonometric form when |x| < 1 and n passes a threshold that differs per polynomial.
- In float32 ATen's compiled recurrence contracts `a * q - b * p` into one fused multiply-add;
  the recurrence here forms that product in float64 (exact for float32 operands) and rounds once,
  which reproduces eager float32 bit for bit. The trigonometric form rounds its angle and
  arguments to float32 where ATen does, but evaluates acos/sin/cos in float64: ATen's float32
  acos is glibc's, which is up to one ulp off, so for large n near |x| = 1 eager float32 itself
  is off by more than float32 tolerance from the true value.

Tensor n runs the recurrence in an ONNX Loop up to the largest n that needs it, keeping each
element's value at its own n with Where, and stopping early once every element is done or NaN
(as ATen's loop stops at NaN); a Python-int n is unrolled when small.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.ops._helpers import cast
from onnxport.translate import GraphBuilder, Tensor, aten, register

FLOAT = ir.DataType.FLOAT
DOUBLE = ir.DataType.DOUBLE
INT64 = ir.DataType.INT64
BOOL = ir.DataType.BOOL

# A Python-int n up to this is unrolled; larger ones go through the Loop.
_MAX_UNROLL = 32


@dataclasses.dataclass(frozen=True)
class _Poly:
    """One polynomial family: its recurrence and where ATen uses a closed form instead."""

    kind: str  # "T", "U", "V", "W", "H", "He", "L", "P"
    is_shifted: bool = False
    # The trigonometric form is used when |x| < 1 and n > trig_after (Chebyshev only).
    trig_after: int | None = None


_POLYS: dict[str, _Poly] = {
    "chebyshev_polynomial_t": _Poly("T", trig_after=6),
    "chebyshev_polynomial_u": _Poly("U", trig_after=8),
    "chebyshev_polynomial_v": _Poly("V", trig_after=8),
    "chebyshev_polynomial_w": _Poly("W", trig_after=8),
    "shifted_chebyshev_polynomial_t": _Poly("T", is_shifted=True, trig_after=6),
    "shifted_chebyshev_polynomial_u": _Poly("U", is_shifted=True, trig_after=6),
    "shifted_chebyshev_polynomial_v": _Poly("V", is_shifted=True, trig_after=6),
    "shifted_chebyshev_polynomial_w": _Poly("W", is_shifted=True, trig_after=4),
    "hermite_polynomial_h": _Poly("H"),
    "hermite_polynomial_he": _Poly("He"),
    "laguerre_polynomial_l": _Poly("L"),
    "legendre_polynomial_p": _Poly("P"),
}

_CHEBYSHEV = ("T", "U", "V", "W")


@dataclasses.dataclass
class _Args:
    """The operands of one evaluation, already in the compute dtype and broadcast."""

    poly: _Poly
    dtype: ir.DataType  # compute dtype: float32 or float64
    x: Tensor  # x, broadcast to the result shape
    arg: Tensor  # the recurrence's variable: x, or 2x - 1 for shifted Chebyshev
    twice: Tensor  # arg + arg


def _fma(g: GraphBuilder, dtype: ir.DataType, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """a * b + c rounded once, as ATen's contracted float32 kernels compute it."""
    if dtype != FLOAT:
        return g.op("Add", g.op("Mul", a, b), c)
    wide = [cast(g, v, DOUBLE) for v in (a, b, c)]
    return cast(g, g.op("Add", g.op("Mul", wide[0], wide[1]), wide[2]), FLOAT)


def _first(g: GraphBuilder, a: _Args) -> Tensor:
    """P_1."""
    one = g.const(1.0, a.dtype)
    kind = a.poly.kind
    if kind == "T":
        return a.arg
    if kind == "U":
        return a.twice
    if kind in ("V", "W"):
        return g.op("Sub" if kind == "V" else "Add", a.twice, one)
    if kind == "H":
        return g.op("Add", a.x, a.x)
    if kind == "L":
        return g.op("Sub", one, a.x)
    return a.x  # He, P


def _step(g: GraphBuilder, a: _Args, k: Tensor, p: Tensor, q: Tensor) -> Tensor:
    """P_{k+1} from p = P_{k-1} and q = P_k; `k` is a scalar of the compute dtype."""
    kind, dtype = a.poly.kind, a.dtype
    if kind in _CHEBYSHEV:
        return _fma(g, dtype, a.twice, q, g.op("Neg", p))
    if kind == "H":
        twice_k_p = g.op("Mul", g.op("Add", k, k), p)
        return _fma(g, dtype, g.op("Add", a.x, a.x), q, g.op("Neg", twice_k_p))
    if kind == "He":
        return _fma(g, dtype, a.x, q, g.op("Neg", g.op("Mul", k, p)))
    one = g.const(1.0, dtype)
    if kind == "L":
        # 2k + (1 - x), grouped as ATen's float32 results show.
        factor = g.op("Add", g.op("Add", k, k), g.op("Sub", one, a.x))
    else:
        factor = g.op("Mul", g.op("Add", g.op("Add", k, k), one), a.x)
    total = _fma(g, dtype, factor, q, g.op("Neg", g.op("Mul", k, p)))
    return g.op("Div", total, g.op("Add", k, one))


def _unrolled(g: GraphBuilder, a: _Args, n: int) -> Tensor:
    """P_n for a known n >= 0."""
    p, q = g.const(1.0, a.dtype), _first(g, a)
    if n == 0:
        return g.op("Expand", p, g.op("Shape", a.x))
    for k in range(1, n):
        p, q = q, _step(g, a, g.const(float(k), a.dtype), p, q)
    return q


def _looped(g: GraphBuilder, a: _Args, n: Tensor, todo: Tensor) -> Tensor:
    """P_n per element of the int64 tensor `n` (broadcast like x), by recurrence in a Loop.

    Only elements where `todo` holds need the recurrence; the Loop runs up to their largest n.
    """
    zero_i = g.const(0, INT64)
    n_todo = g.op("Where", todo, n, zero_i)
    flat = g.op("Concat", g.op("Reshape", n_todo, g.const([-1], INT64)), g.const([1], INT64),
                axis=0)
    trips = g.op("Sub", g.op("ReduceMax", flat, keepdims=0), g.const(1, INT64))
    ones = g.op("Expand", g.const(1.0, a.dtype), g.op("Shape", a.x))
    first = _first(g, a)
    start = g.op("Where", g.op("Equal", n, zero_i), ones, first)

    body = g.subgraph([], "polynomial_recurrence")
    iteration = ir.Value(name=g.unique_name("poly_iteration"), type=ir.TensorType(INT64),
                         shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name("poly_condition"), type=ir.TensorType(BOOL),
                         shape=ir.Shape([]))
    p_in, q_in, out_in = (ir.Value(name=g.unique_name(f"poly_{name}"), type=ir.TensorType(a.dtype))
                          for name in ("p", "q", "out"))
    body.graph.inputs.extend([iteration, condition, p_in, q_in, out_in])
    k_int = body.op("Add", iteration, body.const(1, INT64))
    r = _step(body, a, body.op("Cast", k_int, to=a.dtype), p_in, q_in)
    target = body.op("Add", k_int, body.const(1, INT64))
    # Like ATen's loop, stop once every element still to be computed has turned NaN; such an
    # element takes its NaN now, as it would keep it to its own n.
    is_nan = body.op("IsNaN", r)
    is_final = body.op("Or", body.op("Equal", n, target),
                       body.op("And", is_nan, body.op("Greater", n, target)))
    out = body.op("Where", is_final, r, out_in)
    pending = body.op("Where", is_nan, body.const(0, INT64), n_todo)
    again = body.op("Greater", body.op("ReduceMax", pending, keepdims=0), target)
    body.graph.outputs.extend([again, _owned(body, q_in), r, out])
    _, _, result = g.op("Loop", trips, g.const(True), ones, first, start, body=body.graph,
                        outputs=3)
    result.dtype = a.dtype  # the builder leaves Loop outputs untyped
    return result


def _owned(sub: GraphBuilder, value: Tensor) -> Tensor:
    """A body output that is a body input must pass through a node of its own."""
    return sub.op("Identity", value)


def _acos(g: GraphBuilder, x: Tensor) -> Tensor:
    """acos of a float64 tensor.

    ONNX Runtime has Acos only for float32, so start from that and correct twice by the angle
    between (cos t, sin t) and (x, sqrt(1 - x^2)), which stays exact near |x| = 1.
    """
    one = g.const(1.0, DOUBLE)
    sine = g.op("Sqrt", g.op("Mul", g.op("Sub", one, x), g.op("Add", one, x)))
    angle = cast(g, g.op("Acos", cast(g, x, FLOAT)), DOUBLE)
    for _ in range(2):
        error = g.op("Sub", g.op("Mul", sine, g.op("Cos", angle)),
                     g.op("Mul", x, g.op("Sin", angle)))
        angle = g.op("Add", angle, error)
    return angle


def _closed_forms(g: GraphBuilder, a: _Args, n: Tensor) -> tuple[Tensor | None, Tensor | None]:
    """(where, value) of the closed forms ATen uses instead of the recurrence, or (None, None)."""
    kind, dtype = a.poly.kind, a.dtype
    one = g.const(1.0, dtype)
    if kind == "L":
        return g.op("Equal", a.x, g.const(0.0, dtype)), g.op("Expand", one, g.op("Shape", a.x))
    if kind not in (*_CHEBYSHEV, "P"):
        return None, None
    n_f = g.op("Cast", n, to=dtype)
    is_odd = g.op("Equal", g.op("Mod", n, g.const(2, INT64)), g.const(1, INT64))
    sign = g.op("Where", is_odd, g.const(-1.0, dtype), one)
    count = g.op("Add", n_f, one)  # n + 1
    odd_count = g.op("Add", g.op("Add", n_f, n_f), one)  # 2n + 1
    at_plus, at_minus = {
        "T": (one, sign), "P": (one, sign),
        "U": (count, g.op("Mul", sign, count)),
        "V": (one, g.op("Mul", sign, odd_count)),
        "W": (odd_count, sign),
    }[kind]
    is_edge = g.op("Equal", g.op("Abs", a.arg), one)
    value = g.op("Where", g.op("Greater", a.arg, g.const(0.0, dtype)), at_plus, at_minus)
    if a.poly.trig_after is None:
        return is_edge, value
    is_trig = g.op("And", g.op("Less", g.op("Abs", a.arg), one),
                   g.op("Greater", n, g.const(a.poly.trig_after, INT64)))
    where = g.op("Or", is_edge, is_trig)
    return where, g.op("Where", is_trig, _trigonometric(g, a, n, sign, odd_count), value)


def _trigonometric(g: GraphBuilder, a: _Args, n: Tensor, sign: Tensor, odd_count: Tensor) -> Tensor:
    """Chebyshev T/U/V/W at x = cos(t), |x| < 1: cos(n t), sin((n+1) t) / sin t,
    cos((n+1/2) t) / cos(t/2), sin((n+1/2) t) / sin(t/2); computed in float64, rounded to float32
    wherever ATen's float32 kernel holds a float32 value."""
    kind = a.poly.kind

    def rounded(v: Tensor) -> Tensor:
        return cast(g, cast(g, v, FLOAT), DOUBLE) if a.dtype == FLOAT else v

    angle = rounded(_acos(g, cast(g, a.arg, DOUBLE)))
    n_f = rounded(g.op("Cast", n, to=DOUBLE))
    scale = {"T": n_f, "U": g.op("Add", n_f, g.const(1.0, DOUBLE))}.get(
        kind, g.op("Add", n_f, g.const(0.5, DOUBLE)))
    outer = rounded(g.op("Mul", scale, angle))
    if kind == "T":
        return cast(g, g.op("Cos", outer), a.dtype)
    inner = angle if kind == "U" else g.op("Mul", angle, g.const(0.5, DOUBLE))
    is_cos = kind == "V"
    num = rounded(g.op("Cos" if is_cos else "Sin", outer))
    den = rounded(g.op("Cos" if is_cos else "Sin", inner))
    value = cast(g, g.op("Div", num, den), a.dtype)
    if kind == "U":
        return value
    # Where the half angle's other trig function rounds to 1 (x within rounding of -1 for V, of
    # +1 for W), ATen returns the value at that end point instead; shifted W returns (-1)^n there.
    other = rounded(g.op("Sin" if is_cos else "Cos", inner))
    at_end = g.op("Equal", other, g.const(1.0, DOUBLE))
    if kind == "V":
        end_value = g.op("Mul", sign, odd_count)
    else:
        end_value = sign if a.poly.is_shifted else odd_count
    return g.op("Where", at_end, end_value, value)


def _n_as_int(g: GraphBuilder, n: Tensor, dtype: ir.DataType) -> Tensor:
    """n in the compute dtype truncated to int64; NaN, inf and out-of-range become -1."""
    n = cast(g, n, dtype)
    if not dtype.is_floating_point():
        return cast(g, n, INT64)
    in_range = g.op("Less", g.op("Abs", n), g.const(2.0**63, dtype))
    return g.op("Cast", g.op("Where", in_range, n, g.const(-1.0, dtype)), to=INT64)


def _scalar_n(n: Any, dtype: ir.DataType) -> int:
    """A Python n as ATen sees it: rounded to the compute dtype, then truncated."""
    if isinstance(n, bool) or isinstance(n, int):
        return int(n)
    value = float(n)
    if dtype == FLOAT:
        value = float(np.float32(value))
    if not math.isfinite(value) or abs(value) >= 2.0**63:
        return -1
    return int(value)


def _evaluate(g: GraphBuilder, poly: _Poly, x: Any, n: Any) -> Tensor:
    out_dtype = g.out_dtype()
    dtype = out_dtype if out_dtype in (FLOAT, DOUBLE) else FLOAT
    x = cast(g, x, dtype)
    if isinstance(n, ir.Value):
        n_int = _n_as_int(g, n, dtype)
        n_int = g.op("Expand", n_int, g.op("Shape", x))
        x = g.op("Expand", x, g.op("Shape", n_int))
    args = _args(g, poly, dtype, x)
    if not isinstance(n, ir.Value):
        value = _for_scalar_n(g, args, _scalar_n(n, dtype))
        if value is not None:
            return cast(g, value, out_dtype)
        n_int = g.op("Expand", g.const(_scalar_n(n, dtype), INT64), g.op("Shape", x))
    closed_where, closed = _closed_forms(g, args, n_int)
    todo = g.op("Greater", n_int, g.const(1, INT64))
    if closed_where is not None:
        todo = g.op("And", todo, g.op("Not", closed_where))
    value = _looped(g, args, n_int, todo)
    if closed_where is not None:
        value = g.op("Where", closed_where, closed, value)
    value = g.op("Where", g.op("Less", n_int, g.const(0, INT64)), g.const(0.0, dtype), value)
    return cast(g, value, out_dtype)


def _for_scalar_n(g: GraphBuilder, a: _Args, n: int) -> Tensor | None:
    """P_n for a known n, or None when n is too large to unroll."""
    if n < 0:
        return g.op("Expand", g.const(0.0, a.dtype), g.op("Shape", a.x))
    if n > _MAX_UNROLL:
        return None
    value = _unrolled(g, a, n)
    n_int = g.op("Expand", g.const(n, INT64), g.op("Shape", a.x))
    closed_where, closed = _closed_forms(g, a, n_int)
    if closed_where is None or n < 2:
        return value
    return g.op("Where", closed_where, closed, value)


def _args(g: GraphBuilder, poly: _Poly, dtype: ir.DataType, x: Tensor) -> _Args:
    arg = x
    if poly.is_shifted:
        arg = g.op("Sub", g.op("Add", x, x), g.const(1.0, dtype))
    return _Args(poly, dtype, x, arg, g.op("Add", arg, arg))


def _schema_line(target: Any) -> str:
    return str(target._schema).removeprefix("aten::")


def _translation(poly: _Poly, target: Any) -> Callable[..., Tensor]:
    def translate(g: GraphBuilder, x: Any, n: Any) -> Tensor:
        return _evaluate(g, poly, x, n)

    name = target._schema.name.split("::")[1]
    overload = target._overloadname
    translate.__name__ = f"aten_{name}" if overload == "default" else f"aten_{name}_{overload}"
    translate.__doc__ = _schema_line(target)
    return translate


for _name, _poly in _POLYS.items():
    _packet = getattr(aten, f"special_{_name}")
    for _overload in ("default", "x_scalar", "n_scalar"):
        _target = getattr(_packet, _overload)
        register(_target)(_translation(_poly, _target))
