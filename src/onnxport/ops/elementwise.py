"""Elementwise math: arithmetic, comparisons, logic, rounding and unary functions.

Type promotion follows ATen: arithmetic casts its operands to the node's output dtype
(`g.out_dtype()`), comparisons to the common dtype from `result_dtype`, so a Python
scalar never widens a tensor. Where ATen computes float16 in float32 (its opmath type) or
ONNX Runtime's CPU kernels lack a dtype, the op is computed in a wider dtype and cast back;
each such place says so.
"""

from __future__ import annotations

import math
from typing import Any

import onnx_ir as ir
import torch

from onnxport.ops._helpers import cast, result_dtype, torch_dtype_of
from onnxport.translate import GraphBuilder, Tensor, aten, prims, register

BOOL = ir.DataType.BOOL
FLOAT = ir.DataType.FLOAT
DOUBLE = ir.DataType.DOUBLE
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def _is_float(dtype: ir.DataType | None) -> bool:
    return dtype is not None and dtype.is_floating_point()


def _opmath(dtype: ir.DataType) -> ir.DataType:
    """The dtype ATen computes in on CPU: float32 for half types (its `opmath_type`)."""
    return FLOAT if dtype in _HALF else dtype


def _schema_line(target: Any) -> str:
    """The docstring of a generated translation: its schema line, as written ones have."""
    return str(target._schema).removeprefix("aten::")


def _rounded_op(g: GraphBuilder, op_type: str, dtype: ir.DataType, *inputs: Any) -> Tensor:
    """`op_type` on `inputs` as ATen computes it in `dtype`: half types in float32, rounded once.

    ONNX Runtime lacks float16 kernels for most ops and runs them in float32, dropping the
    float16 rounding between consecutive ones (even a Cast to float16 feeding such an op).
    Explicit float32 compute with a Cast back to `dtype` after each op keeps ATen's rounding:
    ORT does not remove a float32 -> float16 -> float32 Cast pair it did not insert.
    """
    compute = _opmath(dtype)
    out = g.op(op_type, *(cast(g, x, compute) for x in inputs))
    return cast(g, out, dtype)


def _unary(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor) -> Tensor:
        return _rounded_op(g, op_type, g.out_dtype(), self)

    translate.__name__ = f"aten_{op_type.lower()}"
    return translate


# Integer inputs of the float functions are cast to the output dtype (float) first.
_SAME_AS_ONNX = {
    aten.abs.default: "Abs",
    aten.neg.default: "Neg",
    aten.exp.default: "Exp",
    aten.log.default: "Log",
    aten.sqrt.default: "Sqrt",
    aten.reciprocal.default: "Reciprocal",
    aten.sin.default: "Sin",
    aten.cos.default: "Cos",
    aten.tan.default: "Tan",
    aten.asin.default: "Asin",
    aten.acos.default: "Acos",
    aten.atan.default: "Atan",
    aten.sinh.default: "Sinh",
    aten.cosh.default: "Cosh",
    aten.asinh.default: "Asinh",
    aten.acosh.default: "Acosh",
    aten.atanh.default: "Atanh",
    aten.erf.default: "Erf",
    aten.sigmoid.default: "Sigmoid",
    aten.tanh.default: "Tanh",
}
for _target, _op_type in _SAME_AS_ONNX.items():
    _fn = _unary(_op_type)
    _fn.__doc__ = _schema_line(_target)
    register(_target)(_fn)

# Rounding leaves integer tensors unchanged in ATen; ONNX Round/Floor/Ceil are float-only.
_ROUNDING = {
    aten.floor.default: "Floor",
    aten.ceil.default: "Ceil",
    aten.round.default: "Round",  # both round half to even
}


def _rounding(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor) -> Tensor:
        if not _is_float(self.dtype):
            return self
        return g.op(op_type, self)

    translate.__name__ = f"aten_{op_type.lower()}"
    return translate


for _target, _op_type in _ROUNDING.items():
    _fn = _rounding(_op_type)
    _fn.__doc__ = _schema_line(_target)
    register(_target)(_fn)


# -- arithmetic ----------------------------------------------------------------------------
def _scaled(g: GraphBuilder, x: Tensor, alpha: Any) -> Tensor:
    return x if alpha == 1 else g.op("Mul", x, g.const(alpha, like=x))


def _axpy(g: GraphBuilder, op_type: str, x: Any, y: Any, alpha: Any) -> Tensor:
    """x + alpha * y (or x - alpha * y) in the output dtype, as ATen computes it."""
    dtype = g.out_dtype()
    # ATen rounds alpha * y to the output dtype before adding (float16 included).
    y = cast(g, y, dtype)
    if alpha != 1:
        y = _rounded_op(g, "Mul", dtype, y, g.const(alpha, dtype))
    return _rounded_op(g, op_type, dtype, x, y)


@register(aten.add.Tensor)
def aten_add(g: GraphBuilder, self: Tensor, other: Any, *, alpha: float = 1) -> Tensor:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    if g.out_dtype() == BOOL:
        # bool + bool is logical or in ATen (alpha must be a bool too).
        a, b = cast(g, self, BOOL), cast(g, other, BOOL)
        return g.op("Or", a, b) if alpha else a
    return _axpy(g, "Add", self, other, alpha)


@register(aten.add.Scalar)
def aten_add_scalar(g: GraphBuilder, self: Tensor, other: Any, alpha: float = 1) -> Tensor:
    """add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"""
    return aten_add(g, self, other, alpha=alpha)


@register(aten.sub.Tensor)
def aten_sub(g: GraphBuilder, self: Tensor, other: Any, *, alpha: float = 1) -> Tensor:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return _axpy(g, "Sub", self, other, alpha)


@register(aten.sub.Scalar)
def aten_sub_scalar(g: GraphBuilder, self: Tensor, other: Any, alpha: float = 1) -> Tensor:
    """sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"""
    return aten_sub(g, self, other, alpha=alpha)


@register(aten.rsub.Tensor)
def aten_rsub(g: GraphBuilder, self: Tensor, other: Any, *, alpha: float = 1) -> Tensor:
    """rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return _axpy(g, "Sub", other, self, alpha)


@register(aten.rsub.Scalar)
def aten_rsub_scalar(g: GraphBuilder, self: Tensor, other: Any, alpha: float = 1) -> Tensor:
    """rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"""
    return aten_rsub(g, self, other, alpha=alpha)


@register(aten.mul.Tensor, aten.mul.Scalar)
def aten_mul(g: GraphBuilder, self: Tensor, other: Any) -> Tensor:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = g.out_dtype()
    a, b = cast(g, self, dtype), cast(g, other, dtype)
    # bool * bool is logical and in ATen; ONNX Mul has no bool kernel.
    return g.op("And", a, b) if dtype == BOOL else _rounded_op(g, "Mul", dtype, a, b)


@register(aten.square.default)
def aten_square(g: GraphBuilder, self: Tensor) -> Tensor:
    """square(Tensor self) -> Tensor"""
    x = cast(g, self, g.out_dtype())
    return g.op("Mul", x, x)


@register(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, aten.true_divide.Scalar)
def aten_div(g: GraphBuilder, self: Tensor, other: Any) -> Tensor:
    """div.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = g.out_dtype()
    return _rounded_op(g, "Div", dtype, cast(g, self, dtype), cast(g, other, dtype))


def _trunc_float(g: GraphBuilder, x: Tensor) -> Tensor:
    # ONNX has no Trunc: ceil below zero, floor above (keeps -0.0, inf and NaN).
    return g.op("Where", g.op("Less", x, g.const(0, like=x)), g.op("Ceil", x), g.op("Floor", x))


def _floor_div_int(g: GraphBuilder, a: Tensor, b: Tensor) -> Tensor:
    q = g.op("Div", a, b)
    # ONNX integer Div truncates; step down where the signs differ and there is a remainder.
    has_rem = g.op("Not", g.op("Equal", g.op("Mod", a, b, fmod=1), g.const(0, like=a)))
    zero = g.const(0, like=a)
    signs_differ = g.op("Xor", g.op("Less", a, zero), g.op("Less", b, zero))
    return g.op("Sub", q, g.op("Cast", g.op("And", has_rem, signs_differ), to=q.dtype))


def _floor_div_float(g: GraphBuilder, a: Tensor, b: Tensor) -> Tensor:
    # ATen's div_floor_floating, step by step: floor((a - fmod(a, b)) / b) with its corrections,
    # which is not floor(a / b) (e.g. 1.0 // 0.1 == 9.0).
    zero, one = g.const(0, like=a), g.const(1, like=a)
    true_div = g.op("Div", a, b)
    mod = g.op("Mod", a, b, fmod=1)
    div = g.op("Div", g.op("Sub", a, mod), b)
    fix = g.op("And", g.op("Not", g.op("Equal", mod, zero)),
               g.op("Xor", g.op("Less", b, zero), g.op("Less", mod, zero)))
    div = g.op("Where", fix, g.op("Sub", div, one), div)
    floor = g.op("Floor", div)
    floor = g.op("Where", g.op("Greater", g.op("Sub", div, floor), g.const(0.5, like=a)),
                 g.op("Add", floor, one), floor)
    # A zero quotient takes the sign of a / b; division by zero gives IEEE a / b.
    floor = g.op("Where", g.op("Equal", div, zero), g.op("Mul", true_div, zero), floor)
    return g.op("Where", g.op("Equal", b, zero), true_div, floor)


def _div_mode(g: GraphBuilder, self: Any, other: Any, rounding_mode: str | None) -> Tensor:
    dtype = g.out_dtype()
    if not _is_float(dtype):
        a, b = cast(g, self, dtype), cast(g, other, dtype)
        if rounding_mode == "floor":
            return _floor_div_int(g, a, b)
        return g.op("Div", a, b)  # ONNX integer Div truncates, as ATen's trunc mode does
    compute = _opmath(dtype)
    a, b = cast(g, self, compute), cast(g, other, compute)
    if rounding_mode is None:
        out = g.op("Div", a, b)
    elif rounding_mode == "trunc":
        # ATen truncates the quotient after rounding it to the input dtype (Half / Half is Half).
        out = _trunc_float(g, cast(g, cast(g, g.op("Div", a, b), dtype), compute))
    else:
        out = _floor_div_float(g, a, b)
    return cast(g, out, dtype)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def aten_div_tensor_mode(g: GraphBuilder, self: Tensor, other: Any, *,
                         rounding_mode: str | None = None) -> Tensor:
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor"""
    return _div_mode(g, self, other, rounding_mode)


@register(aten.floor_divide.default, aten.floor_divide.Scalar)
def aten_floor_divide(g: GraphBuilder, self: Tensor, other: Any) -> Tensor:
    """floor_divide(Tensor self, Tensor other) -> Tensor"""
    return _div_mode(g, self, other, "floor")


@register(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def aten_remainder(g: GraphBuilder, self: Any, other: Any) -> Tensor:
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = g.out_dtype()
    if not _is_float(dtype):
        # ONNX integer Mod with fmod=0 takes the divisor's sign, as Python and ATen do.
        return g.op("Mod", cast(g, self, dtype), cast(g, other, dtype), fmod=0)
    compute = _opmath(dtype)
    a, b = cast(g, self, compute), cast(g, other, compute)
    # ONNX float Mod must be fmod; ATen adds the divisor where the signs differ.
    mod = g.op("Mod", a, b, fmod=1)
    zero = g.const(0, like=mod)
    fix = g.op("And", g.op("Not", g.op("Equal", mod, zero)),
               g.op("Xor", g.op("Less", b, zero), g.op("Less", mod, zero)))
    return cast(g, g.op("Where", fix, g.op("Add", mod, b), mod), dtype)


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def aten_fmod(g: GraphBuilder, self: Tensor, other: Any) -> Tensor:
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = g.out_dtype()
    return g.op("Mod", cast(g, self, dtype), cast(g, other, dtype), fmod=1)


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def aten_pow(g: GraphBuilder, self: Any, exponent: Any) -> Tensor:
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor"""
    dtype = g.out_dtype()
    if dtype == BOOL:
        # bool ** bool: only False ** True is False; ONNX Pow has no bool kernel.
        return g.op("Or", cast(g, self, BOOL), g.op("Not", cast(g, exponent, BOOL)))
    base, power = cast(g, self, dtype), cast(g, exponent, dtype)
    out = g.op("Pow", base, power)
    if _is_float(dtype):
        return out
    # ATen's integer pow gives 0 for 0 ** negative; ORT computes inf and casts it to INT64_MIN.
    zero = g.const(0, dtype)
    pole = g.op("And", g.op("Equal", base, zero), g.op("Less", power, zero))
    return g.op("Where", pole, zero, out)


@register(aten.exp2.default)
def aten_exp2(g: GraphBuilder, self: Tensor) -> Tensor:
    """exp2(Tensor self) -> Tensor"""
    x = cast(g, self, g.out_dtype())
    return g.op("Pow", g.const(2.0, like=x), x)


def _in_double(g: GraphBuilder, self: Tensor) -> tuple[Tensor, ir.DataType]:
    dtype = g.out_dtype()
    return cast(g, self, DOUBLE if dtype in (FLOAT, *_HALF) else dtype), dtype


@register(aten.expm1.default)
def aten_expm1(g: GraphBuilder, self: Tensor) -> Tensor:
    """expm1(Tensor self) -> Tensor"""
    # exp(x) - 1 cancels near 0; computing it in double keeps float32 results exact.
    x, dtype = _in_double(g, self)
    return cast(g, g.op("Sub", g.op("Exp", x), g.const(1, like=x)), dtype)


@register(aten.log1p.default)
def aten_log1p(g: GraphBuilder, self: Tensor) -> Tensor:
    """log1p(Tensor self) -> Tensor"""
    # log(1 + x) loses x below float32 epsilon; computing it in double keeps it.
    x, dtype = _in_double(g, self)
    return cast(g, g.op("Log", g.op("Add", x, g.const(1, like=x))), dtype)


@register(aten.log2.default)
def aten_log2(g: GraphBuilder, self: Tensor) -> Tensor:
    """log2(Tensor self) -> Tensor"""
    x = cast(g, self, g.out_dtype())
    return g.op("Div", g.op("Log", x), g.const(math.log(2.0), like=x))


@register(aten.log10.default)
def aten_log10(g: GraphBuilder, self: Tensor) -> Tensor:
    """log10(Tensor self) -> Tensor"""
    x = cast(g, self, g.out_dtype())
    return g.op("Div", g.op("Log", x), g.const(math.log(10.0), like=x))


@register(aten.rsqrt.default)
def aten_rsqrt(g: GraphBuilder, self: Tensor) -> Tensor:
    """rsqrt(Tensor self) -> Tensor"""
    return g.op("Reciprocal", g.op("Sqrt", cast(g, self, g.out_dtype())))


@register(aten.trunc.default)
def aten_trunc(g: GraphBuilder, self: Tensor) -> Tensor:
    """trunc(Tensor self) -> Tensor"""
    return _trunc_float(g, self) if _is_float(self.dtype) else self


@register(aten.frac.default)
def aten_frac(g: GraphBuilder, self: Tensor) -> Tensor:
    """frac(Tensor self) -> Tensor"""
    return g.op("Sub", self, _trunc_float(g, self))


@register(aten.round.decimals)
def aten_round_decimals(g: GraphBuilder, self: Tensor, *, decimals: int = 0) -> Tensor:
    """round.decimals(Tensor self, *, int decimals) -> Tensor"""
    dtype = self.dtype
    if not _is_float(dtype):
        return self
    # ATen: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d,
    # in float32 for half types.
    x = cast(g, self, _opmath(dtype))
    scale = g.const(10.0 ** abs(decimals), like=x)
    if decimals >= 0:
        out = g.op("Div", g.op("Round", g.op("Mul", x, scale)), scale)
    else:
        out = g.op("Mul", g.op("Round", g.op("Div", x, scale)), scale)
    return cast(g, out, dtype)


@register(aten.sign.default, aten.sgn.default)
def aten_sign(g: GraphBuilder, self: Tensor) -> Tensor:
    """sign(Tensor self) -> Tensor"""
    if self.dtype == BOOL:
        return self
    if not _is_float(self.dtype):
        return g.op("Sign", self)
    # ATen's sign is (0 < x) - (x < 0), so sign(NaN) == 0 where ONNX Sign gives NaN.
    zero = g.const(0, like=self)
    return g.op("Sub", g.op("Cast", g.op("Greater", self, zero), to=self.dtype),
                g.op("Cast", g.op("Less", self, zero), to=self.dtype))


def _isinf(g: GraphBuilder, x: Tensor, sign: int = 0) -> Tensor:
    # Not ONNX IsInf: it has no float16 support before opset 20; comparing with inf works for all.
    inf = g.const(math.inf, like=x)
    if sign > 0:
        return g.op("Equal", x, inf)
    if sign < 0:
        return g.op("Equal", x, g.op("Neg", inf))
    return g.op("Equal", g.op("Abs", x), inf)


def _signbit(g: GraphBuilder, x: Tensor) -> Tensor:
    negative = g.op("Less", x, g.const(0, like=x))
    if not _is_float(x.dtype):
        return negative
    # -0.0 is the one negative number not below zero; its reciprocal is -inf.
    return g.op("Or", negative, g.op("Less", g.op("Reciprocal", x), g.const(0, like=x)))


@register(aten.signbit.default)
def aten_signbit(g: GraphBuilder, self: Tensor) -> Tensor:
    """signbit(Tensor self) -> Tensor"""
    if self.dtype == BOOL:
        return g.op("Not", g.op("Equal", self, self))
    return _signbit(g, self)


@register(aten.atan2.default)
def aten_atan2(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """atan2(Tensor self, Tensor other) -> Tensor"""
    dtype = g.out_dtype()
    compute = _opmath(dtype)
    y, x = cast(g, self, compute), cast(g, other, compute)
    pi = g.const(math.pi, like=y)
    y_negative = _signbit(g, y)
    x_negative = _signbit(g, x)
    pi_signed = g.op("Where", y_negative, g.op("Neg", pi), pi)
    # atan(y / x), moved by +-pi for x < 0 (or -0.0); ±inf/±0 quotients give the right limits.
    out = g.op("Add", g.op("Atan", g.op("Div", y, x)),
               g.op("Where", x_negative, pi_signed, g.const(0, like=y)))
    # 0/0 and inf/inf are NaN in the quotient but defined for atan2.
    zero = g.const(0, like=y)
    both_zero = g.op("And", g.op("Equal", y, zero), g.op("Equal", x, zero))
    out = g.op("Where", both_zero, g.op("Where", x_negative, pi_signed, y), out)
    both_inf = g.op("And", _isinf(g, y), _isinf(g, x))
    quarter = g.op("Where", x_negative, g.const(0.75 * math.pi, like=y),
                   g.const(0.25 * math.pi, like=y))
    out = g.op("Where", both_inf, g.op("Where", y_negative, g.op("Neg", quarter), quarter), out)
    return cast(g, out, dtype)


@register(aten.hypot.default)
def aten_hypot(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """hypot(Tensor self, Tensor other) -> Tensor"""
    # sqrt(a^2 + b^2) in a wider dtype cannot overflow or underflow where std::hypot does not.
    dtype = g.out_dtype()
    compute = DOUBLE if dtype == FLOAT else _opmath(dtype)
    a, b = cast(g, self, compute), cast(g, other, compute)
    out = g.op("Sqrt", g.op("Add", g.op("Mul", a, a), g.op("Mul", b, b)))
    return cast(g, out, dtype)


@register(aten.logit.default)
def aten_logit(g: GraphBuilder, self: Tensor, eps: float | None = None) -> Tensor:
    """logit(Tensor self, float? eps=None) -> Tensor"""
    dtype = g.out_dtype()
    x = cast(g, self, dtype)
    if eps is not None:
        x = g.op("Clip", x, g.const(eps, like=x), g.const(1 - eps, like=x))
    # ATen's kernel rounds 1 - x and x / (1 - x) to the dtype (float16 included) before Log.
    ratio = _rounded_op(g, "Div", dtype, x, _rounded_op(g, "Sub", dtype, g.const(1, dtype), x))
    return _rounded_op(g, "Log", dtype, ratio)


@register(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
def aten_xlogy(g: GraphBuilder, self: Any, other: Any) -> Tensor:
    """xlogy.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype = g.out_dtype()
    x, y = cast(g, self, dtype), cast(g, other, dtype)
    zero = g.const(0, dtype)
    # ATen: NaN if y is NaN, else 0 where x == 0 (even for y == 0), else x * log(y).
    out = g.op("Where", g.op("Equal", x, zero), zero, g.op("Mul", x, g.op("Log", y)))
    return g.op("Where", g.op("IsNaN", y), y, out)


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(g: GraphBuilder, w: Tensor, coefficients: tuple[float, ...]) -> Tensor:
    p = g.const(coefficients[0], like=w)
    for c in coefficients[1:]:
        p = g.op("Add", g.op("Mul", p, w), g.const(c, like=w))
    return p


@register(aten.erfinv.default)
def aten_erfinv(g: GraphBuilder, self: Tensor) -> Tensor:
    """erfinv(Tensor self) -> Tensor"""
    dtype = g.out_dtype()
    y = cast(g, self, FLOAT)  # ORT's Erf has float kernels only
    one = g.const(1.0, FLOAT)
    w = g.op("Neg", g.op("Log", g.op("Mul", g.op("Sub", one, y), g.op("Add", one, y))))
    central = _horner(g, g.op("Sub", w, g.const(2.5, FLOAT)), _ERFINV_CENTRAL)
    tail = _horner(g, g.op("Sub", g.op("Sqrt", w), g.const(3.0, FLOAT)), _ERFINV_TAIL)
    x = g.op("Mul", g.op("Where", g.op("Less", w, g.const(5.0, FLOAT)), central, tail), y)
    # One Newton step on erf(x) = y: x -= (erf(x) - y) / (2/sqrt(pi) * exp(-x^2)).
    gaussian = g.op("Exp", g.op("Neg", g.op("Mul", x, x)))
    slope = g.op("Mul", g.const(2 / math.sqrt(math.pi), FLOAT), gaussian)
    step = g.op("Div", g.op("Sub", g.op("Erf", x), y), slope)
    x = g.op("Sub", x, step)
    # The approximation does not reach the poles: erfinv(+-1) = +-inf.
    pole = g.op("Equal", g.op("Abs", y), one)
    x = g.op("Where", pole, g.op("Mul", y, g.const(math.inf, FLOAT)), x)
    return cast(g, x, dtype)


# -- comparisons and logic -----------------------------------------------------------------
def _compare(op_type: str, negate: bool = False):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor, other: Any) -> Tensor:
        dtype = result_dtype(self, other)
        if dtype == BOOL and op_type != "Equal":
            dtype = ir.DataType.UINT8  # ONNX Less/Greater have no bool kernels
        out = g.op(op_type, cast(g, self, dtype), cast(g, other, dtype))
        return g.op("Not", out) if negate else out

    translate.__name__ = f"aten_{op_type.lower()}"
    return translate


_COMPARISONS = {
    aten.eq: ("Equal", False),
    aten.ne: ("Equal", True),
    aten.lt: ("Less", False),
    aten.le: ("LessOrEqual", False),
    aten.gt: ("Greater", False),
    aten.ge: ("GreaterOrEqual", False),
}
for _packet, (_op_type, _negate) in _COMPARISONS.items():
    _fn = _compare(_op_type, _negate)
    _fn.__name__ = f"aten_{_packet.__name__.split('.')[-1]}"
    _fn.__doc__ = _schema_line(_packet.Tensor)
    register(_packet.Tensor, _packet.Scalar)(_fn)


def _logical(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
        # Nonzero (NaN included) is true, as in ATen.
        return cast(g, g.op(op_type, cast(g, self, BOOL), cast(g, other, BOOL)), g.out_dtype())

    translate.__name__ = f"aten_logical_{op_type.lower()}"
    return translate


for _target, _op_type in {aten.logical_and.default: "And", aten.logical_or.default: "Or",
                          aten.logical_xor.default: "Xor"}.items():
    _fn = _logical(_op_type)
    _fn.__doc__ = _schema_line(_target)
    register(_target)(_fn)


@register(aten.logical_not.default)
def aten_logical_not(g: GraphBuilder, self: Tensor) -> Tensor:
    """logical_not(Tensor self) -> Tensor"""
    return cast(g, g.op("Not", cast(g, self, BOOL)), g.out_dtype())


def _bitwise(op_type: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Any, other: Any) -> Tensor:
        dtype = g.out_dtype()
        a, b = cast(g, self, dtype), cast(g, other, dtype)
        if dtype == BOOL:
            return g.op(op_type, a, b)
        return g.op(f"Bitwise{op_type}", a, b)

    translate.__name__ = f"aten_bitwise_{op_type.lower()}"
    return translate


for _name, _op_type in {"and": "And", "or": "Or", "xor": "Xor"}.items():
    _bitwise_packet = getattr(aten, f"bitwise_{_name}")
    _dunder_packet = getattr(aten, f"__{_name}__")
    _fn = _bitwise(_op_type)
    _fn.__doc__ = _schema_line(_bitwise_packet.Tensor)
    register(_bitwise_packet.Tensor, _bitwise_packet.Scalar, _bitwise_packet.Scalar_Tensor,
             _dunder_packet.Tensor, _dunder_packet.Scalar)(_fn)


@register(aten.bitwise_not.default)
def aten_bitwise_not(g: GraphBuilder, self: Tensor) -> Tensor:
    """bitwise_not(Tensor self) -> Tensor"""
    return g.op("Not" if self.dtype == BOOL else "BitwiseNot", self)


@register(aten.isnan.default)
def aten_isnan(g: GraphBuilder, self: Tensor) -> Tensor:
    """isnan(Tensor self) -> Tensor"""
    if _is_float(self.dtype):
        return g.op("IsNaN", self)
    return g.op("Not", g.op("Equal", self, self))  # all false, in self's shape


@register(aten.isinf.default)
def aten_isinf(g: GraphBuilder, self: Tensor) -> Tensor:
    """isinf(Tensor self) -> Tensor"""
    if _is_float(self.dtype):
        return _isinf(g, self)
    return g.op("Not", g.op("Equal", self, self))


@register(aten.isfinite.default)
def aten_isfinite(g: GraphBuilder, self: Tensor) -> Tensor:
    """isfinite(Tensor self) -> Tensor"""
    if _is_float(self.dtype):
        return g.op("Not", g.op("Or", g.op("IsNaN", self), _isinf(g, self)))
    return g.op("Equal", self, self)  # all true, in self's shape


@register(aten.nan_to_num.default)
def aten_nan_to_num(g: GraphBuilder, self: Tensor, nan: float | None = None,
                    posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor"""
    if not _is_float(self.dtype):
        return self
    info = torch.finfo(torch_dtype_of(self))
    x = g.op("Where", g.op("IsNaN", self), g.const(0.0 if nan is None else nan, like=self), self)
    x = g.op("Where", _isinf(g, x, 1),
             g.const(info.max if posinf is None else posinf, like=self), x)
    return g.op("Where", _isinf(g, x, -1),
                g.const(info.min if neginf is None else neginf, like=self), x)


# -- selection -----------------------------------------------------------------------------
def _where(g: GraphBuilder, condition: Tensor, a: Any, b: Any, dtype: ir.DataType) -> Tensor:
    """Where(condition, a, b) in `dtype`; ORT's Where has no bool kernel, so bools go via uint8."""
    compute = ir.DataType.UINT8 if dtype == BOOL else dtype
    out = g.op("Where", cast(g, condition, BOOL), cast(g, a, compute), cast(g, b, compute))
    return cast(g, out, dtype)


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def aten_where(g: GraphBuilder, condition: Tensor, self: Any, other: Any) -> Tensor:
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor"""
    return _where(g, condition, self, other, g.out_dtype())


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def aten_masked_fill(g: GraphBuilder, self: Tensor, mask: Tensor, value: Any) -> Tensor:
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor"""
    return _where(g, mask, value, self, g.out_dtype())


def _clamp(g: GraphBuilder, self: Tensor, min: Any, max: Any) -> Tensor:
    dtype = g.out_dtype()
    x = cast(g, self, dtype)
    # ORT's Max/Min propagate NaN from either side, as ATen's clamp does; min > max gives max.
    # ONNX Max/Min have no bool kernels: on bools max is Or and min is And.
    if min is not None:
        x = g.op("Or" if dtype == BOOL else "Max", x, cast(g, min, dtype))
    if max is not None:
        x = g.op("And" if dtype == BOOL else "Min", x, cast(g, max, dtype))
    return x


@register(aten.clamp.default)
def aten_clamp(g: GraphBuilder, self: Tensor, min: float | None = None,
               max: float | None = None) -> Tensor:
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor"""
    return _clamp(g, self, min, max)


@register(aten.clamp.Tensor)
def aten_clamp_tensor(g: GraphBuilder, self: Tensor, min: Tensor | None = None,
                      max: Tensor | None = None) -> Tensor:
    """clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor"""
    return _clamp(g, self, min, max)


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def aten_clamp_min(g: GraphBuilder, self: Tensor, min: Any) -> Tensor:
    """clamp_min(Tensor self, Scalar min) -> Tensor"""
    return _clamp(g, self, min, None)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def aten_clamp_max(g: GraphBuilder, self: Tensor, max: Any) -> Tensor:
    """clamp_max(Tensor self, Scalar max) -> Tensor"""
    return _clamp(g, self, None, max)


def _extremum(op_type: str, bool_op: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
        dtype = g.out_dtype()
        a, b = cast(g, self, dtype), cast(g, other, dtype)
        # ONNX Max/Min have no bool kernels: max is or, min is and.
        return g.op(bool_op if dtype == BOOL else op_type, a, b)

    translate.__name__ = f"aten_{op_type.lower()}imum"
    return translate


def _nan_ignoring(op_type: str, bool_op: str):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
        out = _extremum(op_type, bool_op)(g, self, other)
        dtype = g.out_dtype()
        if not _is_float(dtype):
            return out
        # fmax/fmin take the other operand where one is NaN (NaN only if both are).
        a, b = cast(g, self, dtype), cast(g, other, dtype)
        out = g.op("Where", g.op("IsNaN", a), b, out)
        return g.op("Where", g.op("IsNaN", b), a, out)

    translate.__name__ = f"aten_f{op_type.lower()}"
    return translate


for _target, _fn in {aten.maximum.default: _extremum("Max", "Or"),
                     aten.minimum.default: _extremum("Min", "And"),
                     aten.max.other: _extremum("Max", "Or"),
                     aten.min.other: _extremum("Min", "And"),
                     aten.fmax.default: _nan_ignoring("Max", "Or"),
                     aten.fmin.default: _nan_ignoring("Min", "And")}.items():
    _fn.__doc__ = _schema_line(_target)
    register(_target)(_fn)


# -- fused arithmetic ----------------------------------------------------------------------
def _lerp(g: GraphBuilder, self: Tensor, end: Tensor, weight: Any) -> Tensor:
    dtype = g.out_dtype()
    compute = _opmath(dtype)
    a, b = cast(g, self, compute), cast(g, end, compute)
    diff = g.op("Sub", b, a)
    w = cast(g, weight, compute)
    # ATen picks the form that is exact at its nearer end: |w| < 0.5 starts from self.
    from_self = g.op("Add", a, g.op("Mul", w, diff))
    from_end = g.op("Sub", b, g.op("Mul", diff, g.op("Sub", g.const(1, like=w), w)))
    if isinstance(weight, ir.Value):
        small = g.op("Less", g.op("Abs", w), g.const(0.5, like=w))
        out = g.op("Where", small, from_self, from_end)
    else:
        out = from_self if abs(weight) < 0.5 else from_end
    return cast(g, out, dtype)


@register(aten.lerp.Scalar)
def aten_lerp(g: GraphBuilder, self: Tensor, end: Tensor, weight: float) -> Tensor:
    """lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor"""
    return _lerp(g, self, end, weight)


@register(aten.lerp.Tensor)
def aten_lerp_tensor(g: GraphBuilder, self: Tensor, end: Tensor, weight: Tensor) -> Tensor:
    """lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor"""
    return _lerp(g, self, end, weight)


@register(aten.addcmul.default)
def aten_addcmul(g: GraphBuilder, self: Tensor, tensor1: Tensor, tensor2: Tensor, *,
                 value: float = 1) -> Tensor:
    """addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    dtype = g.out_dtype()
    compute = _opmath(dtype)
    a, t1, t2 = (cast(g, t, compute) for t in (self, tensor1, tensor2))
    if dtype == BOOL:
        return g.op("Or", a, g.op("And", g.op("And", t1, t2), cast(g, bool(value), BOOL)))
    # ATen's order, in float32 for half types: self + (value * tensor1) * tensor2.
    return cast(g, g.op("Add", a, g.op("Mul", _scaled(g, t1, value), t2)), dtype)


@register(aten.addcdiv.default)
def aten_addcdiv(g: GraphBuilder, self: Tensor, tensor1: Tensor, tensor2: Tensor, *,
                 value: float = 1) -> Tensor:
    """addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"""
    dtype = g.out_dtype()
    compute = _opmath(dtype)
    a, t1, t2 = (cast(g, t, compute) for t in (self, tensor1, tensor2))
    # ATen's order, in float32 for half types: self + value * (tensor1 / tensor2).
    return cast(g, g.op("Add", a, _scaled(g, g.op("Div", t1, t2), value)), dtype)


@register(aten.addr.default)
def aten_addr(g: GraphBuilder, self: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1,
              alpha: Any = 1) -> Tensor:
    """addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    dtype = g.out_dtype()
    column = g.op("Unsqueeze", cast(g, vec1, dtype), g.const([1], ir.DataType.INT64))
    row = cast(g, vec2, dtype)
    if dtype == BOOL:
        # ATen: (beta && self) || (alpha && vec1 && vec2).
        outer = g.op("And", g.op("And", column, row), g.const(bool(alpha), BOOL))
        if not beta:
            return outer
        return g.op("Or", cast(g, self, BOOL), outer)
    # ATen's kernel, each step rounded to the dtype (beta and alpha too):
    # beta * self + (alpha * vec1) * vec2, and self is not read at all when beta == 0.
    outer = _rounded_op(g, "Mul", dtype,
                        _rounded_op(g, "Mul", dtype, g.const(alpha, dtype), column), row)
    if not beta:
        return outer
    scaled = _rounded_op(g, "Mul", dtype, g.const(beta, dtype), cast(g, self, dtype))
    return _rounded_op(g, "Add", dtype, scaled, outer)


@register(aten.erfc.default, prims.erfc.default)
def aten_erfc(g: GraphBuilder, self: Tensor) -> Tensor:
    """erfc(Tensor self) -> Tensor"""
    x = cast(g, self, g.out_dtype())
    return g.op("Sub", g.const(1.0, like=x), g.op("Erf", x))
