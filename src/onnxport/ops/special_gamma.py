"""Special functions: the gamma family, incomplete gamma, Hurwitz zeta, erfcx and the normal
distribution, plus the float-bit functions frexp, nextafter and copysign.

ONNX has none of these, so each is evaluated from its mathematics in float64 inside the graph
(ONNX Runtime's CPU kernels for the arithmetic used here all take double) and cast back to the
output dtype, which keeps float32 results within about an ulp of PyTorch's. Series lengths and
iteration counts are fixed where a bound covers all inputs; the incomplete gamma and the shift
of the Hurwitz zeta use an ONNX Loop that runs until every element has converged. Special
values (poles, infinities, domain errors) follow what eager PyTorch returns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast
from onnxport.ops.elementwise import _signbit
from onnxport.translate import GraphBuilder, Tensor, aten, register

DOUBLE = ir.DataType.DOUBLE
BOOL = ir.DataType.BOOL
_INF = math.inf
_NAN = math.nan
_LOG_PI = math.log(math.pi)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _bernoulli(count: int) -> list[Fraction]:
    """B_0 .. B_{count-1}, exactly, from sum_{k<=m} C(m+1, k) B_k = 0."""
    numbers = [Fraction(1)]
    for m in range(1, count):
        total = sum((math.comb(m + 1, k) * numbers[k] for k in range(m)), Fraction(0))
        numbers.append(-total / (m + 1))
    return numbers


_B = _bernoulli(30)
# Stirling series of lgamma: sum_k B_2k / (2k (2k-1) z^(2k-1)).
_LGAMMA_SERIES = [float(_B[2 * k] / (2 * k * (2 * k - 1))) for k in range(1, 9)]
# Asymptotic series of digamma: log z - 1/(2z) - sum_k B_2k / (2k z^2k).
_DIGAMMA_SERIES = [float(_B[2 * k] / (2 * k)) for k in range(1, 9)]
# Euler-Maclaurin correction terms of the Hurwitz zeta: B_2j / (2j)!.
_ZETA_SERIES = [float(_B[2 * j] / math.factorial(2 * j)) for j in range(1, 13)]

# erfcx(t) for 0 <= t < _ERFCX_SPLIT: exp(t^2) - 2/sqrt(pi) t sum_n (2 t^2)^n / (2n+1)!!, a
# series of positive terms; above it the continued fraction of erfc, which converges fast there.
_ERFCX_SPLIT = 2.5
_ERFCX_TERMS = 40
_ERFCX_DEPTH = 32
_ERFCX_COEFFICIENTS = [2.0**n / math.prod(range(1, 2 * n + 2, 2)) for n in range(_ERFCX_TERMS)]

# The Hurwitz zeta sums its first terms directly until the argument reaches _ZETA_SHIFT, then
# applies Euler-Maclaurin; the direct sum runs in a Loop capped at _MAX_TRIPS iterations.
_ZETA_SHIFT = 12.0
_MAX_TRIPS = 1_000_000
# Convergence threshold of the incomplete gamma series and continued fraction: a few ulps, as
# rounding keeps the continued fraction's steps from reaching exactly 1.
_EPS = 1e-15
# The incomplete gamma's iterations stop there; a relative step still above _UNFINISHED
# at that point means the element has not converged.
_IGAMMA_TRIPS = 100_000
_UNFINISHED = 1e-13
_TINY = 1e-300


# -- small graph helpers ---------------------------------------------------------------------
def _f64(g: GraphBuilder, x: Any) -> Tensor:
    return cast(g, x, DOUBLE)


def _where(g: GraphBuilder, condition: Tensor, a: Any, b: Any) -> Tensor:
    """Where(condition, a, b); Python numbers take the other operand's dtype, else double."""
    like = b if isinstance(b, ir.Value) else a
    dtype = (like.dtype if isinstance(like, ir.Value) else None) or DOUBLE
    return g.op("Where", condition, cast(g, a, dtype), cast(g, b, dtype))


def _and(g: GraphBuilder, *conditions: Tensor) -> Tensor:
    out = conditions[0]
    for c in conditions[1:]:
        out = g.op("And", out, c)
    return out


def _or(g: GraphBuilder, *conditions: Tensor) -> Tensor:
    out = conditions[0]
    for c in conditions[1:]:
        out = g.op("Or", out, c)
    return out


def _isnan(g: GraphBuilder, x: Tensor) -> Tensor:
    return g.op("Not", g.op("Equal", x, x))


def _isinf(g: GraphBuilder, x: Tensor) -> Tensor:
    return g.op("Equal", g.op("Abs", x), _INF)


def _isfinite(g: GraphBuilder, x: Tensor) -> Tensor:
    return g.op("Less", g.op("Abs", x), _INF)


def _polynomial(g: GraphBuilder, w: Tensor, coefficients: Sequence[float]) -> Tensor:
    """sum_i coefficients[i] w^i, by Horner's rule."""
    p = g.const(coefficients[-1], like=w)
    for c in reversed(coefficients[:-1]):
        p = g.op("Add", g.op("Mul", p, w), c)
    return p


def _broadcast(g: GraphBuilder, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Both operands broadcast to their common shape (Loop-carried values need it).

    Where with a true condition rather than Expand: ORT's Expand mis-sizes a broadcast to an
    empty dimension (a later node then fails on a {2,0,3} vs {2,1,3} buffer).
    """
    true = g.const(True)
    return g.op("Where", true, a, b), g.op("Where", true, b, a)


def _max_over_all(g: GraphBuilder, x: Tensor) -> Tensor:
    """Max over every element as a scalar, 0 for an empty tensor."""
    flat = g.op("Concat", g.op("Reshape", x, [-1]), g.const(np.zeros(1), DOUBLE), axis=0)
    return g.op("ReduceMax", flat, keepdims=0)


def _loop(g: GraphBuilder, name: str, trips: Tensor, initial: Sequence[Tensor],
          body: Any) -> tuple[Tensor, ...]:
    """An ONNX Loop of at most `trips` iterations over `initial`.

    `body(sub, k, state)` builds the body in `sub` from the iteration number `k` (double) and
    returns (continue condition, new state).
    """
    sub = g.subgraph([], name)
    iteration = ir.Value(name=g.unique_name(f"{name}_iteration"),
                         type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name(f"{name}_condition"), type=ir.TensorType(BOOL),
                         shape=ir.Shape([]))
    state_in = [ir.Value(name=g.unique_name(f"{name}_state"), type=ir.TensorType(DOUBLE))
                for _ in initial]
    sub.graph.inputs.extend([iteration, condition, *state_in])
    again, state_out = body(sub, sub.op("Cast", iteration, to=DOUBLE), state_in)
    sub.graph.outputs.extend([again, *state_out])
    outs = g.op("Loop", trips, g.const(True), *initial, body=sub.graph, outputs=len(initial))
    return outs if isinstance(outs, tuple) else (outs,)


# -- gamma and digamma -----------------------------------------------------------------------
def _lgamma_positive(g: GraphBuilder, z: Tensor) -> Tensor:
    """log Gamma(z) for z > 0: Stirling's series at z + 8 when z < 8, shifted back."""
    is_small = g.op("Less", z, 8.0)
    product = z
    for k in range(1, 8):
        product = g.op("Mul", product, g.op("Add", z, float(k)))
    shifted = _where(g, is_small, g.op("Add", z, 8.0), z)
    w = g.op("Reciprocal", shifted)
    series = g.op("Mul", w, _polynomial(g, g.op("Mul", w, w), _LGAMMA_SERIES))
    stirling = g.op("Add", g.op("Sub", g.op("Mul", g.op("Sub", shifted, 0.5), g.op("Log", shifted)),
                                shifted), g.op("Add", series, _HALF_LOG_2PI))
    return g.op("Sub", stirling, _where(g, is_small, g.op("Log", product), 0.0))


def _lgamma(g: GraphBuilder, x: Tensor) -> Tensor:
    """log|Gamma(x)| for double x; +inf at the poles and at +-inf, as std::lgamma."""
    is_reflected = g.op("Less", x, 0.5)
    positive = _lgamma_positive(g, _where(g, is_reflected, g.op("Sub", 1.0, x), x))
    # Gamma(x) Gamma(1-x) = pi / sin(pi x); x - round(x) keeps the sine's argument exact.
    offset = g.op("Sub", x, g.op("Round", x))
    sine = g.op("Abs", g.op("Sin", g.op("Mul", offset, math.pi)))
    reflected = g.op("Sub", g.op("Log", g.op("Div", math.pi, sine)), positive)
    out = _where(g, is_reflected, reflected, positive)
    return _where(g, _isinf(g, x), _INF, out)


def _digamma_positive(g: GraphBuilder, z: Tensor) -> Tensor:
    """digamma(z) for z >= 0.5: the recurrence up to z + 10 when z < 10, then the asymptotic series."""
    is_small = g.op("Less", z, 10.0)
    recurrence = g.op("Reciprocal", z)
    for k in range(1, 10):
        recurrence = g.op("Add", recurrence, g.op("Reciprocal", g.op("Add", z, float(k))))
    shifted = _where(g, is_small, g.op("Add", z, 10.0), z)
    w = g.op("Reciprocal", shifted)
    w2 = g.op("Mul", w, w)
    series = g.op("Mul", w2, _polynomial(g, w2, _DIGAMMA_SERIES))
    asymptotic = g.op("Sub", g.op("Sub", g.op("Log", shifted), g.op("Mul", w, 0.5)), series)
    return g.op("Sub", asymptotic, _where(g, is_small, recurrence, 0.0))


def _digamma(g: GraphBuilder, x: Tensor) -> Tensor:
    """digamma for double x, with PyTorch's values at the poles: -inf at +0, +inf at -0, nan at
    negative integers."""
    is_reflected = g.op("Less", x, 0.5)
    positive = _digamma_positive(g, _where(g, is_reflected, g.op("Sub", 1.0, x), x))
    # digamma(x) = digamma(1 - x) - pi cot(pi x); cot has period pi, so reduce x exactly first.
    offset = g.op("Sub", x, g.op("Round", x))
    angle = g.op("Mul", offset, math.pi)
    # ORT's Tan has no double kernel; cos/sin does the same.
    cot = g.op("Div", g.op("Mul", g.op("Cos", angle), math.pi), g.op("Sin", angle))
    out = _where(g, is_reflected, g.op("Sub", positive, cot), positive)
    is_pole = g.op("And", g.op("Less", x, 0.0), g.op("Equal", offset, 0.0))
    out = _where(g, is_pole, _NAN, out)
    zero_value = _where(g, _signbit(g, x), _INF, -_INF)
    return _where(g, g.op("Equal", x, 0.0), zero_value, out)


# -- Hurwitz zeta ----------------------------------------------------------------------------
def _hurwitz_zeta(g: GraphBuilder, s: Tensor, q: Tensor) -> Tensor:
    """zeta(s, q) = sum_{k>=0} (q + k)^-s for double s, q, with PyTorch's domain rules."""
    s, q = _broadcast(g, s, q)
    is_integer_s = g.op("Equal", s, g.op("Floor", s))
    is_integer_q = g.op("Equal", q, g.op("Floor", q))
    is_pole = g.op("And", g.op("LessOrEqual", q, 0.0), is_integer_q)
    # Negative q is only defined for integer s, where (q + k)^-s is real.
    is_domain_error = _or(g, g.op("Less", s, 1.0),
                          g.op("And", g.op("Less", q, 0.0), g.op("Not", is_integer_s)),
                          g.op("Not", _isfinite(g, q)))
    is_summed = _and(g, g.op("Greater", s, 1.0), _isfinite(g, s), _isfinite(g, q),
                     g.op("Not", is_pole), g.op("Not", is_domain_error))
    # Sum the first terms directly until q + m >= _ZETA_SHIFT, for each element its own m.
    needed = g.op("Clip", g.op("Ceil", g.op("Sub", _ZETA_SHIFT, q)), g.const(0.0, DOUBLE),
                  g.const(float(_MAX_TRIPS), DOUBLE))
    # Beyond the cap the sum cannot be finished: nan rather than a wrong number.
    is_too_far = g.op("Less", q, _ZETA_SHIFT - _MAX_TRIPS)
    is_summed = g.op("And", is_summed, g.op("Not", is_too_far))
    shift = _where(g, is_summed, needed, 0.0)
    trips = g.op("Cast", _max_over_all(g, shift), to=ir.DataType.INT64)
    neg_s = g.op("Neg", s)

    def body(sub: GraphBuilder, k: Tensor, state: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        term = sub.op("Pow", sub.op("Add", q, k), neg_s)
        total = sub.op("Add", state[0], _where(sub, sub.op("Less", k, shift), term, 0.0))
        return sub.op("Identity", sub.const(True)), [total]

    (direct,) = _loop(g, "zeta_shift", trips, [g.op("Mul", q, 0.0)], body)
    # Euler-Maclaurin at a = q + m: a^(1-s)/(s-1) + a^-s/2 + sum_j B_2j/(2j)! s(s+1)..(s+2j-2) a^(1-s-2j).
    a = _where(g, is_summed, g.op("Add", q, shift), _ZETA_SHIFT)
    s_ok = _where(g, is_summed, s, 2.0)
    power = g.op("Pow", a, g.op("Neg", s_ok))
    tail = g.op("Add", g.op("Div", g.op("Mul", power, a), g.op("Sub", s_ok, 1.0)),
                g.op("Mul", power, 0.5))
    inverse_a2 = g.op("Reciprocal", g.op("Mul", a, a))
    factor = g.op("Div", g.op("Mul", s_ok, power), a)
    for j, coefficient in enumerate(_ZETA_SERIES, start=1):
        tail = g.op("Add", tail, g.op("Mul", factor, coefficient))
        rising = g.op("Mul", g.op("Add", s_ok, float(2 * j - 1)), g.op("Add", s_ok, float(2 * j)))
        factor = g.op("Mul", factor, g.op("Mul", rising, inverse_a2))
    out = g.op("Add", direct, tail)
    # zeta(inf, q): PyTorch gives q^-inf below and at 1, and nan above (its series hits 0 * inf).
    at_infinite_s = _where(g, g.op("Less", q, 1.0), _INF,
                           _where(g, g.op("Equal", q, 1.0), 1.0, _NAN))
    out = _where(g, g.op("Equal", s, _INF), at_infinite_s, out)
    out = _where(g, is_pole, _INF, out)
    out = _where(g, g.op("Or", is_domain_error, is_too_far), _NAN, out)
    out = _where(g, g.op("Equal", s, 1.0), _INF, out)
    return _where(g, _or(g, _isnan(g, s), _isnan(g, q)), _NAN, out)


def _cot_derivative(n: int) -> list[int]:
    """Coefficients of P_n with d^n/dx^n cot(x) = P_n(cot x): P_0 = c, P_(k+1) = -(1 + c^2) P_k'."""
    p = [0, 1]
    for _ in range(n):
        derivative = [i * p[i] for i in range(1, len(p))] or [0]
        p = [0] * (len(derivative) + 2)
        for i, d in enumerate(derivative):
            p[i] -= d
            p[i + 2] -= d
    return p


def _trigamma(g: GraphBuilder, x: Tensor, dtype: ir.DataType) -> Tensor:
    """polygamma(1, x) the way PyTorch computes it: reflected below 1/2, where
    trigamma(x) = pi^2 / sin^2(pi x) - trigamma(1 - x)."""
    is_reflected = g.op("Less", x, 0.5)
    two = g.const(2.0, DOUBLE)
    positive = _hurwitz_zeta(g, two, _where(g, is_reflected, g.op("Sub", 1.0, x), x))
    # PyTorch takes the sine of pi x formed in the output's precision (float32 for float32 and
    # narrower): near the poles that rounding moves float32 results by up to ~1e-5 relative, and
    # at the poles it gives large finite values rather than inf, so the graph rounds the same way.
    compute = DOUBLE if dtype == DOUBLE else ir.DataType.FLOAT
    angle = cast(g, g.op("Mul", cast(g, x, compute), g.const(math.pi, compute)), DOUBLE)
    sine = g.op("Sin", angle)
    reflection = g.op("Div", math.pi**2, g.op("Mul", sine, sine))
    out = _where(g, is_reflected, g.op("Sub", reflection, positive), positive)
    # PyTorch's trigamma tends to 0 at +inf (the zeta it uses for higher orders gives nan).
    return _where(g, g.op("Equal", x, _INF), 0.0, out)


def _polygamma(g: GraphBuilder, n: int, x: Tensor, dtype: ir.DataType) -> Tensor:
    if n == 0:
        return _digamma(g, x)
    if n == 1:
        return _trigamma(g, x, dtype)
    # polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x). Below zero, the reflection
    # polygamma(n, x) = -pi^(n+1) P_n(cot(pi x)) - n! zeta(n + 1, 1 - x) avoids summing the
    # |x| terms between x and 0 directly.
    is_reflected = g.op("Less", x, 0.0)
    factorial = float(math.factorial(n))
    zeta = _hurwitz_zeta(g, g.const(float(n + 1), DOUBLE),
                         _where(g, is_reflected, g.op("Sub", 1.0, x), x))
    direct = g.op("Mul", zeta, (-1.0) ** (n + 1) * factorial)
    angle = g.op("Mul", g.op("Sub", x, g.op("Round", x)), math.pi)
    cot = g.op("Div", g.op("Cos", angle), g.op("Sin", angle))
    coefficients = [float(c) * math.pi ** (n + 1) for c in _cot_derivative(n)]
    reflected = g.op("Sub", g.op("Neg", _polynomial(g, cot, coefficients)),
                     g.op("Mul", zeta, factorial))
    out = _where(g, is_reflected, reflected, direct)
    # At the poles (non-positive integers) PyTorch's zeta gives inf, times the sign.
    is_pole = g.op("And", g.op("LessOrEqual", x, 0.0), g.op("Equal", x, g.op("Floor", x)))
    return _where(g, is_pole, (-1.0) ** (n + 1) * _INF, out)


# -- incomplete gamma ------------------------------------------------------------------------
def _incomplete_gamma(g: GraphBuilder, a: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """The regularized incomplete gammas (P, Q) of double a, x, with PyTorch's special values.

    P by its power series where x < a + 1, Q by Legendre's continued fraction elsewhere (modified
    Lentz); each runs in a Loop until all of its elements have converged.
    """
    a, x = _broadcast(g, a, x)
    is_regular = _and(g, g.op("Greater", a, 0.0), g.op("Greater", x, 0.0),
                      _isfinite(g, a), _isfinite(g, x))
    a = _where(g, is_regular, a, 1.0)
    x = _where(g, is_regular, x, 1.0)
    is_series = g.op("Less", x, g.op("Add", a, 1.0))
    # x^a e^-x / Gamma(a), the factor both forms share. For a >= 8, where lgamma is Stirling's
    # series S, its log is a (log1p(t) - t) + log(a / 2pi)/2 - S(a) with t = x/a - 1: this keeps
    # the cancellation between a log x, x and lgamma(a), each of size ~a, out of large a.
    direct = g.op("Sub", g.op("Sub", g.op("Mul", a, g.op("Log", x)), x), _lgamma_positive(g, a))
    t = g.op("Div", g.op("Sub", x, a), a)
    w = g.op("Reciprocal", a)
    series_s = g.op("Mul", w, _polynomial(g, g.op("Mul", w, w), _LGAMMA_SERIES))
    balanced = g.op("Sub", g.op("Add", g.op("Mul", a, g.op("Sub", _log1p(g, t), t)),
                                g.op("Mul", g.op("Log", g.op("Div", a, 2 * math.pi)), 0.5)),
                    series_s)
    prefactor = g.op("Exp", _where(g, g.op("Less", a, 8.0), direct, balanced))
    trips = g.const(np.array(_IGAMMA_TRIPS, dtype=np.int64))

    # P = prefactor * sum_k x^k / (a (a+1) ... (a+k)).
    def series_body(sub: GraphBuilder, k: Tensor,
                    state: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        term = sub.op("Mul", state[0], sub.op("Div", x, sub.op("Add", a, sub.op("Add", k, 1.0))))
        total = sub.op("Add", state[1], term)
        error = _where(sub, is_series, sub.op("Div", term, total), 0.0)
        return sub.op("Greater", _max_over_all(sub, error), _EPS), [term, total, error]

    first = g.op("Reciprocal", a)
    _, series, series_error = _loop(g, "igamma_series", trips, [first, first, first],
                                    series_body)
    p_series = g.op("Mul", prefactor, series)

    # Q = prefactor / (b0 + a1/(b1 + a2/(b2 + ...))), b_i = x - a + 2i + 1, a_i = i (a - i).
    b0 = _where(g, is_series, 1.0, g.op("Add", g.op("Sub", x, a), 1.0))

    def fraction_body(sub: GraphBuilder, k: Tensor,
                      state: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        f, c, d = state[:3]
        i = sub.op("Add", k, 1.0)
        an = sub.op("Mul", i, sub.op("Sub", a, i))
        bn = sub.op("Add", sub.op("Add", sub.op("Sub", x, a), sub.op("Mul", i, 2.0)), 1.0)
        d = sub.op("Add", bn, sub.op("Mul", an, d))
        d = _where(sub, sub.op("Less", sub.op("Abs", d), _TINY), _TINY, d)
        c = sub.op("Add", bn, sub.op("Div", an, c))
        c = _where(sub, sub.op("Less", sub.op("Abs", c), _TINY), _TINY, c)
        d = sub.op("Reciprocal", d)
        delta = sub.op("Mul", c, d)
        f = sub.op("Mul", f, delta)
        error = _where(sub, is_series, 0.0, sub.op("Abs", sub.op("Sub", delta, 1.0)))
        return sub.op("Greater", _max_over_all(sub, error), _EPS), [f, c, d, error]

    fraction, _, _, fraction_error = _loop(
        g, "igamma_fraction", trips, [b0, b0, g.op("Mul", b0, 0.0), b0], fraction_body)
    q_fraction = g.op("Div", prefactor, fraction)
    p = _where(g, is_series, p_series, g.op("Sub", 1.0, q_fraction))
    q = _where(g, is_series, g.op("Sub", 1.0, p_series), q_fraction)
    # Elements still far from converged after the last iteration (a beyond ~1e8 near x = a,
    # where PyTorch switches to an asymptotic expansion) are nan rather than a wrong number.
    is_unfinished = g.op("Greater", _where(g, is_series, series_error, fraction_error),
                         _UNFINISHED)
    p = _where(g, is_unfinished, _NAN, p)
    q = _where(g, is_unfinished, _NAN, q)
    return p, q


def _incomplete_gamma_edges(g: GraphBuilder, a: Tensor, x: Tensor, out: Tensor,
                            is_upper: bool) -> Tensor:
    """PyTorch's values where a or x is 0, negative, infinite or nan."""
    zero, one = (1.0, 0.0) if is_upper else (0.0, 1.0)
    out = _where(g, g.op("Equal", x, 0.0), zero, out)
    out = _where(g, g.op("Equal", a, _INF), zero, out)
    out = _where(g, g.op("Equal", x, _INF), one, out)
    out = _where(g, g.op("Equal", a, 0.0), one, out)
    is_nan = _or(g, g.op("Less", a, 0.0), g.op("Less", x, 0.0), _isnan(g, a), _isnan(g, x),
                 g.op("And", g.op("Equal", a, 0.0), g.op("Equal", x, 0.0)),
                 g.op("And", g.op("Equal", a, _INF), g.op("Equal", x, _INF)))
    return _where(g, is_nan, _NAN, out)


# -- erfcx and the normal distribution -------------------------------------------------------
def _erfcx_nonnegative(g: GraphBuilder, t: Tensor) -> Tensor:
    """exp(t^2) erfc(t) for double t >= 0 (ORT's Erf has no double kernel)."""
    t2 = g.op("Mul", t, t)
    sum_ = _polynomial(g, t2, _ERFCX_COEFFICIENTS)
    series = g.op("Sub", g.op("Exp", t2), g.op("Mul", g.op("Mul", t, sum_), 2 / math.sqrt(math.pi)))
    # erfc(t) = exp(-t^2)/sqrt(pi) / (t + (1/2)/(t + 1/(t + (3/2)/(t + ...)))).
    depth = t
    for k in range(_ERFCX_DEPTH, 0, -1):
        depth = g.op("Add", t, g.op("Div", k / 2, depth))
    fraction = g.op("Div", 1 / math.sqrt(math.pi), depth)
    return _where(g, g.op("Less", t, _ERFCX_SPLIT), series, fraction)


def _erfcx(g: GraphBuilder, x: Tensor, dtype: ir.DataType = DOUBLE) -> Tensor:
    nonnegative = _erfcx_nonnegative(g, g.op("Abs", x))
    # erfcx(-t) = 2 exp(t^2) - erfcx(t). PyTorch squares x in float32 for float32 outputs, and
    # exp magnifies that rounding to ~1e-5 relative for large |x|: the graph squares the same way.
    compute = DOUBLE if dtype == DOUBLE else ir.DataType.FLOAT
    x_compute = cast(g, x, compute)
    square = cast(g, g.op("Mul", x_compute, x_compute), DOUBLE)
    negative = g.op("Sub", g.op("Mul", g.op("Exp", square), 2.0), nonnegative)
    return _where(g, g.op("Less", x, 0.0), negative, nonnegative)


def _log1p(g: GraphBuilder, y: Tensor) -> Tensor:
    """log(1 + y) without losing small y (ORT has no Log1p): log(u) y / (u - 1), u = 1 + y."""
    u = g.op("Add", y, 1.0)
    corrected = g.op("Mul", g.op("Log", u), g.op("Div", y, g.op("Sub", u, 1.0)))
    return _where(g, g.op("Equal", u, 1.0), y, corrected)


def _log_ndtr(g: GraphBuilder, x: Tensor) -> Tensor:
    v = g.op("Mul", x, 1 / math.sqrt(2))
    v2 = g.op("Mul", v, v)
    e = _erfcx_nonnegative(g, g.op("Abs", v))
    # Far left tail: ndtr(x) = erfcx(-v) exp(-v^2) / 2, so its log needs no exp at all.
    tail = g.op("Sub", g.op("Log", g.op("Mul", e, 0.5)), v2)
    # Elsewhere ndtr(x) = 1 - c with c = erfc(v) / 2 = ndtr(-x).
    half_erfc_abs = g.op("Mul", g.op("Mul", e, g.op("Exp", g.op("Neg", v2))), 0.5)
    c = _where(g, g.op("Less", v, 0.0), g.op("Sub", 1.0, half_erfc_abs), half_erfc_abs)
    body = _log1p(g, g.op("Neg", c))
    return _where(g, g.op("Less", x, -1.0), tail, body)


def _ndtri(g: GraphBuilder, p: Tensor) -> Tensor:
    """The inverse of the normal CDF: a rough start in the lower half, then two Halley steps."""
    q = g.op("Min", p, g.op("Sub", 1.0, p))  # exact in double for float32 p
    q_safe = _where(g, g.op("And", g.op("Greater", q, 0.0), g.op("LessOrEqual", q, 0.5)), q, 0.25)
    log_q = g.op("Log", q_safe)
    # Near the median, the Taylor series of the inverse in u = sqrt(2 pi)(q - 1/2).
    u = g.op("Mul", g.op("Sub", q_safe, 0.5), math.sqrt(2 * math.pi))
    central = g.op("Mul", u, _polynomial(g, g.op("Mul", u, u), [1.0, 1 / 6, 7 / 120, 127 / 5040]))
    # In the tail, q ~ phi(x)/|x|: iterate y^2 = -2 log q - 2 log y - log(2 pi).
    y = g.op("Sqrt", g.op("Mul", log_q, -2.0))
    for _ in range(3):
        y2 = g.op("Sub", g.op("Sub", g.op("Mul", log_q, -2.0), g.op("Mul", g.op("Log", y), 2.0)),
                  math.log(2 * math.pi))
        y = g.op("Sqrt", g.op("Max", y2, g.const(0.01, DOUBLE)))
    x = _where(g, g.op("Greater", q_safe, 0.15), central, g.op("Neg", y))
    for _ in range(2):
        # Newton step of Phi(x) = q is Phi/phi - q/phi = sqrt(2 pi)(erfcx(-x/sqrt2)/2 - q e^(x^2/2));
        # Halley's correction uses Phi''/Phi' = -x.
        e = _erfcx(g, g.op("Mul", x, -1 / math.sqrt(2)))
        scaled_q = g.op("Exp", g.op("Add", g.op("Mul", g.op("Mul", x, x), 0.5), log_q))
        step = g.op("Mul", g.op("Sub", g.op("Mul", e, 0.5), scaled_q), math.sqrt(2 * math.pi))
        x = g.op("Sub", x, g.op("Div", step, g.op("Add", g.op("Mul", g.op("Mul", x, step), 0.5), 1.0)))
    x = _where(g, g.op("Greater", p, 0.5), g.op("Neg", x), x)
    x = _where(g, g.op("Equal", q, 0.0), _where(g, g.op("Equal", p, 0.0), -_INF, _INF), x)
    is_nan = _or(g, g.op("Less", p, 0.0), g.op("Greater", p, 1.0), _isnan(g, p))
    return _where(g, is_nan, _NAN, x)


# -- float bits ------------------------------------------------------------------------------
# (explicit mantissa bits, exponent of the smallest normal number, largest finite number)
_FLOAT_FORMATS = {
    ir.DataType.FLOAT16: (10, -14, 65504.0),
    ir.DataType.BFLOAT16: (7, -126, 3.3895313892515355e38),
    ir.DataType.FLOAT: (23, -126, 3.4028234663852886e38),
    ir.DataType.DOUBLE: (52, -1022, 1.7976931348623157e308),
}


def _exponent(g: GraphBuilder, magnitude: Tensor) -> Tensor:
    """floor(log2(m)) for finite m > 0, exactly: Log's rounding is corrected against 2^e."""
    e = g.op("Floor", g.op("Div", g.op("Log", magnitude), math.log(2)))
    e = _where(g, g.op("GreaterOrEqual", g.op("Div", magnitude, _pow2(g, e)), 2.0),
               g.op("Add", e, 1.0), e)
    return _where(g, g.op("Less", g.op("Div", magnitude, _pow2(g, e)), 1.0), g.op("Sub", e, 1.0), e)


def _pow2(g: GraphBuilder, e: Tensor) -> Tensor:
    """2^e for an integer-valued double e (exact: powers of two are representable)."""
    return g.op("Pow", g.const(2.0, DOUBLE), e)


def _is_regular(g: GraphBuilder, x: Tensor) -> Tensor:
    """x is finite and non-zero."""
    return g.op("And", _isfinite(g, x), g.op("Not", g.op("Equal", x, 0.0)))


# -- translations ----------------------------------------------------------------------------
@register(aten.lgamma.default)
def aten_lgamma(g: GraphBuilder, self: Tensor) -> Tensor:
    """lgamma(Tensor self) -> Tensor"""
    return cast(g, _lgamma(g, _f64(g, self)), g.out_dtype())


@register(aten.digamma.default)
def aten_digamma(g: GraphBuilder, self: Tensor) -> Tensor:
    """digamma(Tensor self) -> Tensor"""
    return cast(g, _digamma(g, _f64(g, self)), g.out_dtype())


@register(aten.polygamma.default)
def aten_polygamma(g: GraphBuilder, n: int, self: Tensor) -> Tensor:
    """polygamma(int n, Tensor self) -> Tensor"""
    return cast(g, _polygamma(g, n, _f64(g, self), g.out_dtype()), g.out_dtype())


@register(aten.mvlgamma.default)
def aten_mvlgamma(g: GraphBuilder, self: Tensor, p: int) -> Tensor:
    """mvlgamma(Tensor self, int p) -> Tensor"""
    # log Gamma_p(x) = p(p-1)/4 log(pi) + sum_{j<p} lgamma(x - j/2), all p terms at once.
    x = g.op("Unsqueeze", _f64(g, self), [-1])
    offsets = g.const(np.array([-j / 2 for j in range(p)], dtype=np.float64), DOUBLE)
    terms = _lgamma(g, g.op("Add", x, offsets))
    # Gathers and Adds sum the last axis: ORT's ReduceSum and MatMul mishandle empty inputs.
    total = g.const(p * (p - 1) / 4 * _LOG_PI, DOUBLE)
    for j in range(p):
        total = g.op("Add", total, g.op("Gather", terms, g.const(np.array(j, dtype=np.int64)), axis=-1))
    out = total
    return cast(g, out, g.out_dtype())


@register(aten.igamma.default)
def aten_igamma(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """igamma(Tensor self, Tensor other) -> Tensor"""
    a, x = _f64(g, self), _f64(g, other)
    p, _ = _incomplete_gamma(g, a, x)
    return cast(g, _incomplete_gamma_edges(g, a, x, p, is_upper=False), g.out_dtype())


@register(aten.igammac.default)
def aten_igammac(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """igammac(Tensor self, Tensor other) -> Tensor"""
    a, x = _f64(g, self), _f64(g, other)
    _, q = _incomplete_gamma(g, a, x)
    return cast(g, _incomplete_gamma_edges(g, a, x, q, is_upper=True), g.out_dtype())


@register(aten.special_zeta.default)
def aten_special_zeta(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """special_zeta(Tensor self, Tensor other) -> Tensor"""
    return cast(g, _hurwitz_zeta(g, _f64(g, self), _f64(g, other)), g.out_dtype())


@register(aten.special_zeta.other_scalar)
def aten_special_zeta_other_scalar(g: GraphBuilder, self: Tensor, other: float) -> Tensor:
    """special_zeta.other_scalar(Tensor self, Scalar other) -> Tensor"""
    return cast(g, _hurwitz_zeta(g, _f64(g, self), _f64(g, other)), g.out_dtype())


@register(aten.special_zeta.self_scalar)
def aten_special_zeta_self_scalar(g: GraphBuilder, self: float, other: Tensor) -> Tensor:
    """special_zeta.self_scalar(Scalar self, Tensor other) -> Tensor"""
    return cast(g, _hurwitz_zeta(g, _f64(g, self), _f64(g, other)), g.out_dtype())


@register(aten.special_erfcx.default)
def aten_special_erfcx(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_erfcx(Tensor self) -> Tensor"""
    return cast(g, _erfcx(g, _f64(g, self), g.out_dtype()), g.out_dtype())


@register(aten.special_log_ndtr.default)
def aten_special_log_ndtr(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_log_ndtr(Tensor self) -> Tensor"""
    return cast(g, _log_ndtr(g, _f64(g, self)), g.out_dtype())


@register(aten.special_ndtri.default)
def aten_special_ndtri(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_ndtri(Tensor self) -> Tensor"""
    return cast(g, _ndtri(g, _f64(g, self)), g.out_dtype())


@register(aten.frexp.Tensor)
def aten_frexp(g: GraphBuilder, self: Tensor) -> tuple[Tensor, Tensor]:
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)"""
    x = _f64(g, self)
    is_regular = _is_regular(g, x)
    magnitude = _where(g, is_regular, g.op("Abs", x), 1.0)
    e = g.op("Add", _exponent(g, magnitude), 1.0)
    # Two halves, so that 2^e cannot overflow for the largest doubles (e = 1024).
    low = g.op("Floor", g.op("Mul", e, 0.5))
    mantissa = g.op("Div", g.op("Div", x, _pow2(g, low)), _pow2(g, g.op("Sub", e, low)))
    # frexp leaves zeros, infinities and nan as they are, with exponent 0.
    mantissa = _where(g, is_regular, mantissa, x)
    exponent = _where(g, is_regular, e, 0.0)
    return (cast(g, mantissa, g.out_dtype(0)),
            g.op("Cast", exponent, to=g.out_dtype(1)))


@register(aten.nextafter.default)
def aten_nextafter(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """nextafter(Tensor self, Tensor other) -> Tensor"""
    dtype = g.out_dtype()
    if dtype not in _FLOAT_FORMATS:
        raise TranslationError(f"nextafter of {dtype}")
    mantissa_bits, min_exponent, largest = _FLOAT_FORMATS[dtype]
    # Every value involved is representable in double and each step is one exact addition.
    x, y = _f64(g, self), _f64(g, other)
    magnitude = _where(g, _is_regular(g, x), g.op("Abs", x), 1.0)
    # Below the smallest normal number the spacing stays that of the smallest binade.
    e = g.op("Max", _exponent(g, magnitude), g.const(float(min_exponent), DOUBLE))
    spacing = _pow2(g, g.op("Sub", e, float(mantissa_bits)))
    # Just below a power of two the spacing halves.
    is_binade_start = g.op("And", g.op("Equal", magnitude, _pow2(g, e)),
                           g.op("Greater", e, float(min_exponent)))
    spacing_below = _where(g, is_binade_start, g.op("Mul", spacing, 0.5), spacing)
    is_growing = g.op("Equal", g.op("Greater", y, x), g.op("Greater", x, 0.0))
    step = _where(g, is_growing, g.op("Add", magnitude, spacing),
                  g.op("Sub", magnitude, spacing_below))
    out = _where(g, g.op("Less", x, 0.0), g.op("Neg", step), step)
    smallest = 2.0 ** (min_exponent - mantissa_bits)
    out = _where(g, g.op("Equal", x, 0.0), _where(g, g.op("Greater", y, x), smallest, -smallest), out)
    out = _where(g, _isinf(g, x), _where(g, g.op("Greater", x, 0.0), largest, -largest), out)
    out = _where(g, g.op("Equal", x, y), y, out)
    out = _where(g, _or(g, _isnan(g, x), _isnan(g, y)), _NAN, out)
    return cast(g, out, dtype)


def _copysign_dtype(g: GraphBuilder) -> ir.DataType:
    # ORT's CPU Neg and Reciprocal lack half kernels; the result is exact in float32 anyway.
    dtype = g.out_dtype()
    return ir.DataType.FLOAT if dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16) else dtype


def _copysign(g: GraphBuilder, self: Tensor, is_negative: Tensor) -> Tensor:
    magnitude = g.op("Abs", cast(g, self, _copysign_dtype(g)))
    return cast(g, g.op("Where", is_negative, g.op("Neg", magnitude), magnitude), g.out_dtype())


@register(aten.copysign.Tensor)
def aten_copysign(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor"""
    # The sign of a nan `other` cannot be read without a bitcast; it counts as positive.
    return _copysign(g, self, _signbit(g, cast(g, other, _copysign_dtype(g))))


@register(aten.copysign.Scalar)
def aten_copysign_scalar(g: GraphBuilder, self: Tensor, other: float) -> Tensor:
    """copysign.Scalar(Tensor self, Scalar other) -> Tensor"""
    return _copysign(g, self, g.const(math.copysign(1.0, float(other)) < 0))
