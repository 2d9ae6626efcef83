"""Bessel-type special functions: i0/i1 (plain and scaled), J0/J1, Y0/Y1, K0/K1, j0, Airy Ai.

ONNX has no Bessel ops, so each function is built from elementwise nodes. Every function
is computed in float64 (ONNX Runtime's CPU kernels for Add/Mul/Div/Exp/Log/Sqrt/Sin/Cos/Where
take double) and cast back to the output dtype once, so float32 results are within about
one rounding of the true value. The numerics come from the mathematics, with coefficients
generated here from their closed forms:

- small |x|: the power (Maclaurin) series, with its logarithmic terms for Y and K;
- large |x|: the Hankel/asymptotic expansions in 1/x, whose smallest term is about
  exp(-2|x|), so they reach double precision beyond the switch points used here;
- K (and Airy Ai, through K_{1/3}) in between: K_nu(x) = integral_0^inf exp(-x cosh t)
  cosh(nu t) dt by the trapezoidal rule, which converges geometrically for this
  doubly-exponentially decaying even integrand.

Branches are chosen with Where; an unselected branch may hold inf or nan (Where selects,
it does not propagate). Values at 0, at negative x (nan for Y and K), at +-inf and nan match
eager PyTorch's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir

from onnxport.ops._helpers import cast
from onnxport.translate import GraphBuilder, Tensor, aten, prims, register

_F64 = ir.DataType.DOUBLE
_EULER_GAMMA = 0.5772156649015329
_NAN = math.nan
_INF = math.inf
_LOG_FLOAT32_MAX = math.log((2 - 2**-23) * 2.0**127)

# Switch points (in |x|) between the branches; each side is accurate there (checked against
# mpmath over a dense grid: I, K, j0 to a few ulp in float64, J, Y, Ai to about 1e-11).
_I_SWITCH = 20.0
_JY_SWITCH = 13.0
_K_SERIES_MAX = 2.0
_K_ASYMPTOTIC_MIN = 18.0
# Series terms are dropped once they are below this fraction of the largest one in range.
_TINY = 1e-17


# -- building blocks -------------------------------------------------------------------------
def _horner(g: GraphBuilder, z: Tensor, coeffs: Sequence[float], z_max: float) -> Tensor:
    """sum(coeffs[k] * z**k) by Horner's rule in z / z_max, for |z| <= z_max.

    Scaling keeps the constants far from float32's range limits: with unscaled series
    coefficients below ~1e-45, ONNX Runtime 1.31 evaluated the chain wrongly (by up to 3e-7
    relative) unless its NoopElimination pass was disabled.
    """
    scaled = [c * z_max**k for k, c in enumerate(coeffs)]
    u = g.op("Mul", z, 1.0 / z_max)
    acc: Tensor = g.op("Add", g.op("Mul", u, scaled[-1]), scaled[-2])
    for c in reversed(scaled[:-2]):
        acc = g.op("Add", g.op("Mul", u, acc), c)
    return acc


def _truncate(coeffs: Sequence[float], z_max: float, *, is_asymptotic: bool = False) -> list[float]:
    """The leading coefficients whose terms matter for |z| <= z_max.

    A power series is cut once its terms fall below `_TINY` of the largest one. An asymptotic
    series' terms first shrink then grow, so it is also cut at its smallest term (the optimal
    truncation).
    """
    out: list[float] = []
    largest, previous = 0.0, math.inf
    for k, c in enumerate(coeffs):
        size = abs(c) * z_max**k
        if size < _TINY * largest or (is_asymptotic and size > previous):
            break
        out.append(c)
        largest, previous = max(largest, size), size
    return out


def _series_i(nu: int, y_max: float) -> list[float]:
    """Coefficients of I_nu(x) / (x/2)**nu = sum y**k / (k! (k+nu)!) in y = x**2 / 4."""
    terms = [1.0 / (math.factorial(k) * math.factorial(k + nu)) for k in range(80)]
    return _truncate(terms, y_max)


def _asymptotic(nu: float, count: int = 80) -> list[float]:
    """a_k(nu) = prod_{j<=k} (4 nu**2 - (2j - 1)**2) / (8 j): the Hankel expansion coefficients."""
    coeffs = [1.0]
    for j in range(1, count):
        coeffs.append(coeffs[-1] * (4 * nu * nu - (2 * j - 1) ** 2) / (8 * j))
    return coeffs


def _harmonic(k: int) -> float:
    return math.fsum(1.0 / j for j in range(1, k + 1))


def _prepare(g: GraphBuilder, x: Tensor) -> Tensor:
    """The input as float64 (integers and bool included): all the numerics run in double."""
    return cast(g, x, _F64)


def _odd(g: GraphBuilder, x: Tensor, value: Tensor) -> Tensor:
    """f(x) for an odd f from value = f(|x|)."""
    return g.op("Where", g.op("Less", x, 0.0), g.op("Neg", value), value)


def _where_negative_nan(g: GraphBuilder, x: Tensor, value: Tensor) -> Tensor:
    """nan for x < 0 (Y and K are real only for x >= 0; -0.0 counts as 0, as in PyTorch)."""
    return g.op("Where", g.op("Less", x, 0.0), g.const(_NAN, _F64), value)


# -- modified Bessel functions of the first kind -------------------------------------------
_I_SERIES = {nu: _series_i(nu, _I_SWITCH**2 / 4) for nu in (0, 1)}
# I_nu(x) ~ e^x / sqrt(2 pi x) * sum (-1)^k a_k(nu) / x^k
_I_ASYMPTOTIC = {nu: _truncate([(-1) ** k * c for k, c in enumerate(_asymptotic(nu))],
                               1 / _I_SWITCH, is_asymptotic=True) for nu in (0, 1)}


def _bessel_i(g: GraphBuilder, a: Tensor, nu: int, *, scaled: bool) -> Tensor:
    """I_nu(a), or exp(-a) I_nu(a) when `scaled`, for a = |x| >= 0."""
    y = g.op("Mul", g.op("Mul", a, a), 0.25)
    small = _horner(g, y, _I_SERIES[nu], _I_SWITCH**2 / 4)
    if nu == 1:
        small = g.op("Mul", small, g.op("Mul", a, 0.5))
    if scaled:
        small = g.op("Mul", small, g.op("Exp", g.op("Neg", a)))
    tail = _horner(g, g.op("Reciprocal", a), _I_ASYMPTOTIC[nu], 1 / _I_SWITCH)
    large = g.op("Div", tail, g.op("Sqrt", g.op("Mul", a, 2 * math.pi)))
    if not scaled:
        # exp(a) overflows for a > log(DBL_MAX) (and gives inf * 0 = nan at a = inf), as
        # PyTorch's I0/I1 do.
        large = g.op("Mul", g.op("Exp", a), large)
        if g.out_dtype() != _F64:
            # PyTorch computes the other dtypes in float32, where exp(a) already overflows
            # for a > log(FLT_MAX) although I_nu(a) itself fits up to a ~ 91 (times inf keeps
            # the nan at a = inf).
            large = g.op("Where", g.op("Greater", a, _LOG_FLOAT32_MAX),
                         g.op("Mul", large, _INF), large)
    return g.op("Where", g.op("LessOrEqual", a, _I_SWITCH), small, large)


def _i0(g: GraphBuilder, self: Tensor, *, scaled: bool) -> Tensor:
    x = _prepare(g, self)
    return cast(g, _bessel_i(g, g.op("Abs", x), 0, scaled=scaled), g.out_dtype())


def _i1(g: GraphBuilder, self: Tensor, *, scaled: bool) -> Tensor:
    x = _prepare(g, self)
    return cast(g, _odd(g, x, _bessel_i(g, g.op("Abs", x), 1, scaled=scaled)), g.out_dtype())


@register(aten.i0.default, aten.special_modified_bessel_i0.default, prims.bessel_i0.default)
def aten_i0(g: GraphBuilder, self: Tensor) -> Tensor:
    """i0(Tensor self) -> Tensor"""
    return _i0(g, self, scaled=False)


@register(aten.special_i0e.default, prims.bessel_i0e.default)
def aten_special_i0e(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_i0e(Tensor self) -> Tensor"""
    return _i0(g, self, scaled=True)


@register(aten.special_i1.default, aten.special_modified_bessel_i1.default,
          prims.bessel_i1.default)
def aten_special_i1(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_i1(Tensor self) -> Tensor"""
    return _i1(g, self, scaled=False)


@register(aten.special_i1e.default, prims.bessel_i1e.default)
def aten_special_i1e(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_i1e(Tensor self) -> Tensor"""
    return _i1(g, self, scaled=True)


# -- modified Bessel functions of the second kind --------------------------------------------
_K_Y_MAX = _K_SERIES_MAX**2 / 4
# K_0(x) = -(log(x/2) + gamma) I_0(x) + sum_{k>=1} H_k y^k / (k!)^2
_K0_SERIES = _truncate([_harmonic(k) / math.factorial(k) ** 2 for k in range(40)], _K_Y_MAX)
# K_1(x) = 1/x + log(x/2) I_1(x) - x/4 sum_k (psi(k+1) + psi(k+2)) y^k / (k! (k+1)!)
_K1_SERIES = _truncate([(_harmonic(k) + _harmonic(k + 1) - 2 * _EULER_GAMMA)
                        / (math.factorial(k) * math.factorial(k + 1)) for k in range(40)],
                       _K_Y_MAX)
_K_SMALL_I = {nu: _series_i(nu, _K_Y_MAX) for nu in (0, 1)}
# K_nu(x) ~ sqrt(pi / (2x)) e^-x sum a_k(nu) / x^k
_K_ASYMPTOTIC = {nu: _truncate(_asymptotic(nu), 1 / _K_ASYMPTOTIC_MIN, is_asymptotic=True)
                 for nu in (0, 1)}


def _trapezoid_nodes(x_min: float, x_max: float, nu: float) -> tuple[float, list[float]]:
    """Step and abscissas t_j = j h of the trapezoidal rule for exp(x) K_nu(x) on [x_min, x_max].

    The integrand exp(-x (cosh t - 1)) cosh(nu t) is even and analytic in the strip
    |Im t| < pi/2, so the rule's error is about exp(-2 pi d / h + x (1 - cos d)) for any
    d < pi/2: h is chosen so that this is below 1e-17 at x_max. The sum stops where the
    integrand is below 1e-18 of its peak at x_min.
    """
    def error_exponent(h: float) -> float:
        return min(-2 * math.pi * d / h + x_max * (1 - math.cos(d))
                   for d in (i * math.pi / 200 for i in range(1, 100)))

    h = 0.5
    while error_exponent(h) > math.log(1e-17):
        h *= 0.95
    ts, t = [], 0.0
    while -x_min * (math.cosh(t) - 1) + nu * t > math.log(1e-18):
        ts.append(t)
        t += h
    return h, ts


def _scaled_k_integral(g: GraphBuilder, x: Tensor, nu: float, x_min: float,
                       x_max: float) -> Tensor:
    """exp(x) K_nu(x) = integral_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt, for x_min <= x <= x_max."""
    h, ts = _trapezoid_nodes(x_min, x_max, nu)
    terms = [g.op("Mul", g.op("Exp", g.op("Mul", x, 1 - math.cosh(t))), h * math.cosh(nu * t))
             for t in ts[1:]]
    # The node t = 0 has integrand 1 and half weight.
    total: Tensor = g.op("Add", terms[0], h / 2)
    for term in terms[1:]:
        total = g.op("Add", total, term)
    return total


def _bessel_k(g: GraphBuilder, x: Tensor, nu: int, *, scaled: bool) -> Tensor:
    """K_nu(x), or exp(x) K_nu(x) when `scaled`, for float64 x (nan for x < 0)."""
    y = g.op("Mul", g.op("Mul", x, x), 0.25)
    log_half = g.op("Log", g.op("Mul", x, 0.5))
    i_small = _horner(g, y, _K_SMALL_I[nu], _K_Y_MAX)
    if nu == 0:
        small = g.op("Sub", _horner(g, y, _K0_SERIES, _K_Y_MAX),
                     g.op("Mul", g.op("Add", log_half, _EULER_GAMMA), i_small))
    else:
        i1 = g.op("Mul", i_small, g.op("Mul", x, 0.5))
        series = g.op("Mul", _horner(g, y, _K1_SERIES, _K_Y_MAX), g.op("Mul", x, 0.25))
        small = g.op("Sub", g.op("Add", g.op("Reciprocal", x), g.op("Mul", log_half, i1)), series)
        # K_1(0) = +inf; the series would give inf - inf there.
        small = g.op("Where", g.op("Equal", x, 0.0), g.const(_INF, _F64), small)
    middle = _scaled_k_integral(g, x, nu, _K_SERIES_MAX, _K_ASYMPTOTIC_MIN)
    tail = _horner(g, g.op("Reciprocal", x), _K_ASYMPTOTIC[nu], 1 / _K_ASYMPTOTIC_MIN)
    large = g.op("Mul", g.op("Sqrt", g.op("Div", math.pi / 2, x)), tail)
    if scaled:
        small = g.op("Mul", small, g.op("Exp", x))
    else:
        exp_neg = g.op("Exp", g.op("Neg", x))
        middle = g.op("Mul", middle, exp_neg)
        large = g.op("Mul", large, exp_neg)
    out = g.op("Where", g.op("LessOrEqual", x, _K_ASYMPTOTIC_MIN), middle, large)
    out = g.op("Where", g.op("LessOrEqual", x, _K_SERIES_MAX), small, out)
    return _where_negative_nan(g, x, out)


def _k_translation(target: Any, nu: int, *,
                   scaled: bool) -> Callable[[GraphBuilder, Tensor], Tensor]:
    # One tensor argument, which ATen calls `self` in the plain forms and `x` in the scaled ones.
    def translate(g: GraphBuilder, *args: Tensor) -> Tensor:
        (x,) = args
        return cast(g, _bessel_k(g, _prepare(g, x), nu, scaled=scaled), g.out_dtype())

    translate.__name__ = f"aten_{target._schema.name.removeprefix('aten::')}"
    translate.__doc__ = str(target._schema).removeprefix("aten::")
    return translate


for _target, _nu, _scaled in ((aten.special_modified_bessel_k0.default, 0, False),
                              (aten.special_modified_bessel_k1.default, 1, False),
                              (aten.special_scaled_modified_bessel_k0.default, 0, True),
                              (aten.special_scaled_modified_bessel_k1.default, 1, True)):
    register(_target)(_k_translation(_target, _nu, scaled=_scaled))


# -- Bessel functions of the first and second kind ------------------------------------------
_JY_Y_MAX = _JY_SWITCH**2 / 4
# J_nu(x) / (x/2)^nu = sum (-1)^k y^k / (k! (k+nu)!)
_J_SERIES = {nu: _truncate([(-1) ** k / (math.factorial(k) * math.factorial(k + nu))
                            for k in range(80)], _JY_Y_MAX) for nu in (0, 1)}
# Y_0(x) = 2/pi [(log(x/2) + gamma) J_0(x) + sum_{k>=1} (-1)^(k+1) H_k y^k / (k!)^2]
_Y0_SERIES = _truncate([(-1) ** (k + 1) * _harmonic(k) / math.factorial(k) ** 2
                        for k in range(80)], _JY_Y_MAX)
# Y_1(x) = -2/(pi x) + 2/pi log(x/2) J_1(x)
#          - x/(2 pi) sum (psi(k+1) + psi(k+2)) (-y)^k / (k! (k+1)!)
_Y1_SERIES = _truncate([(-1) ** k * (_harmonic(k) + _harmonic(k + 1) - 2 * _EULER_GAMMA)
                        / (math.factorial(k) * math.factorial(k + 1)) for k in range(80)],
                       _JY_Y_MAX)
# Hankel: J = sqrt(2/(pi x)) (P cos w - Q sin w), Y = sqrt(2/(pi x)) (P sin w + Q cos w),
# w = x - (2 nu + 1) pi/4, P = sum (-1)^m a_2m / x^2m, Q = sum (-1)^m a_2m+1 / x^(2m+1).
_HANKEL_P = {nu: _truncate([(-1) ** m * c for m, c in enumerate(_asymptotic(nu)[0::2])],
                           _JY_SWITCH**-2, is_asymptotic=True) for nu in (0, 1)}
_HANKEL_Q = {nu: _truncate([(-1) ** m * c for m, c in enumerate(_asymptotic(nu)[1::2])],
                           _JY_SWITCH**-2, is_asymptotic=True) for nu in (0, 1)}


def _bessel_jy(g: GraphBuilder, a: Tensor, nu: int, *, second_kind: bool) -> Tensor:
    """J_nu(a) or Y_nu(a) for a >= 0."""
    y = g.op("Mul", g.op("Mul", a, a), 0.25)
    j_small = _horner(g, y, _J_SERIES[nu], _JY_Y_MAX)
    if nu == 1:
        j_small = g.op("Mul", j_small, g.op("Mul", a, 0.5))
    if not second_kind:
        small = j_small
    else:
        log_half = g.op("Log", g.op("Mul", a, 0.5))
        if nu == 0:
            small = g.op("Add", g.op("Mul", g.op("Add", log_half, _EULER_GAMMA), j_small),
                         _horner(g, y, _Y0_SERIES, _JY_Y_MAX))
            small = g.op("Mul", small, 2 / math.pi)
        else:
            series = g.op("Mul", _horner(g, y, _Y1_SERIES, _JY_Y_MAX), g.op("Mul", a, 0.25))
            small = g.op("Sub", g.op("Mul", log_half, j_small), g.op("Reciprocal", a))
            small = g.op("Mul", g.op("Sub", small, series), 2 / math.pi)
            # Y_1(0) = -inf; the series would give -inf + log(0) * 0 = nan there.
            small = g.op("Where", g.op("Equal", a, 0.0), g.const(-_INF, _F64), small)
    inv = g.op("Reciprocal", a)
    w = g.op("Mul", inv, inv)
    p = _horner(g, w, _HANKEL_P[nu], _JY_SWITCH**-2)
    q = g.op("Mul", _horner(g, w, _HANKEL_Q[nu], _JY_SWITCH**-2), inv)
    # cos/sin(a - phase) from cos a and sin a: no rounding of a - phase for large a.
    phase = (2 * nu + 1) * math.pi / 4
    cos_a, sin_a = g.op("Cos", a), g.op("Sin", a)
    cos_w = g.op("Add", g.op("Mul", cos_a, math.cos(phase)), g.op("Mul", sin_a, math.sin(phase)))
    sin_w = g.op("Sub", g.op("Mul", sin_a, math.cos(phase)), g.op("Mul", cos_a, math.sin(phase)))
    if second_kind:
        wave = g.op("Add", g.op("Mul", p, sin_w), g.op("Mul", q, cos_w))
    else:
        wave = g.op("Sub", g.op("Mul", p, cos_w), g.op("Mul", q, sin_w))
    large = g.op("Mul", wave, g.op("Sqrt", g.op("Mul", inv, 2 / math.pi)))
    return g.op("Where", g.op("LessOrEqual", a, _JY_SWITCH), small, large)


@register(aten.special_bessel_j0.default, prims.bessel_j0.default)
def aten_special_bessel_j0(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_bessel_j0(Tensor self) -> Tensor"""
    x = _prepare(g, self)
    return cast(g, _bessel_jy(g, g.op("Abs", x), 0, second_kind=False), g.out_dtype())


@register(aten.special_bessel_j1.default, prims.bessel_j1.default)
def aten_special_bessel_j1(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_bessel_j1(Tensor self) -> Tensor"""
    x = _prepare(g, self)
    j1 = _bessel_jy(g, g.op("Abs", x), 1, second_kind=False)
    return cast(g, _odd(g, x, j1), g.out_dtype())


@register(aten.special_bessel_y0.default)
def aten_special_bessel_y0(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_bessel_y0(Tensor self) -> Tensor"""
    x = _prepare(g, self)
    y0 = _bessel_jy(g, g.op("Abs", x), 0, second_kind=True)
    return cast(g, _where_negative_nan(g, x, y0), g.out_dtype())


@register(aten.special_bessel_y1.default)
def aten_special_bessel_y1(g: GraphBuilder, self: Tensor) -> Tensor:
    """special_bessel_y1(Tensor self) -> Tensor"""
    x = _prepare(g, self)
    y1 = _bessel_jy(g, g.op("Abs", x), 1, second_kind=True)
    return cast(g, _where_negative_nan(g, x, y1), g.out_dtype())


# -- spherical Bessel j0 ---------------------------------------------------------------------
# sin(x)/x = sum (-1)^k x^2k / (2k+1)!, used for |x| < 1 where the quotient loses 0/0.
_SINC_SERIES = _truncate([(-1) ** k / math.factorial(2 * k + 1) for k in range(30)], 1.0)


def _spherical_bessel_j0(g: GraphBuilder, x: Tensor) -> Tensor:
    x = _prepare(g, x)
    a = g.op("Abs", x)
    small = _horner(g, g.op("Mul", x, x), _SINC_SERIES, 1.0)
    large = g.op("Div", g.op("Sin", x), x)
    out = g.op("Where", g.op("Less", a, 1.0), small, large)
    # PyTorch gives 0 at +-inf, where sin(x)/x is nan.
    out = g.op("Where", g.op("IsInf", x), g.const(0.0, _F64), out)
    return cast(g, out, g.out_dtype())


@register(aten.special_spherical_bessel_j0.default)
def aten_special_spherical_bessel_j0(g: GraphBuilder, x: Tensor) -> Tensor:
    """special_spherical_bessel_j0(Tensor x) -> Tensor"""
    return _spherical_bessel_j0(g, x)


@register(prims.spherical_bessel_j0.default)
def prims_spherical_bessel_j0(g: GraphBuilder, self: Tensor) -> Tensor:
    """spherical_bessel_j0(Tensor self) -> Tensor"""
    return _spherical_bessel_j0(g, self)


# -- Airy Ai ---------------------------------------------------------------------------------
_AIRY_SERIES_MIN = -7.0  # Maclaurin series on [_AIRY_SERIES_MIN, _AIRY_SERIES_MAX]
_AIRY_SERIES_MAX = 1.0
_AIRY_ASYMPTOTIC_MIN = 9.0  # x > 0: K_{1/3} integral below this, asymptotic expansion above
_AIRY_U_MAX = max(-_AIRY_SERIES_MIN, _AIRY_SERIES_MAX) ** 3
# Ai(0) = 3^(-2/3) / Gamma(2/3) and -Ai'(0) = 3^(-1/3) / Gamma(1/3).
_AI0 = 3 ** (-2 / 3) / math.gamma(2 / 3)
_AI0_SLOPE = 3 ** (-1 / 3) / math.gamma(1 / 3)


def _airy_maclaurin() -> tuple[list[float], list[float]]:
    """Ai(x) = Ai(0) f(x) + Ai'(0) x g(x), f and g power series in u = x^3 (from Ai'' = x Ai)."""
    f, gx = [1.0], [1.0]
    for k in range(1, 60):
        f.append(f[-1] / ((3 * k - 1) * (3 * k)))
        gx.append(gx[-1] / ((3 * k) * (3 * k + 1)))
    return _truncate(f, _AIRY_U_MAX), _truncate(gx, _AIRY_U_MAX)


_AIRY_F, _AIRY_G = _airy_maclaurin()


def _airy_u() -> list[float]:
    """u_k of the Airy asymptotic expansions: u_k = (6k-5)(6k-3)(6k-1) / (216 k (2k-1)) u_k-1."""
    u = [1.0]
    for k in range(1, 80):
        u.append(u[-1] * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / (216 * k * (2 * k - 1)))
    return u


_ZETA_NEG_MIN = 2 / 3 * (-_AIRY_SERIES_MIN) ** 1.5
_ZETA_POS_MIN = 2 / 3 * _AIRY_ASYMPTOTIC_MIN**1.5
# x > 0: Ai(x) ~ exp(-zeta) / (2 sqrt(pi) x^(1/4)) sum (-1)^k u_k / zeta^k
_AIRY_DECAY = _truncate([(-1) ** k * u for k, u in enumerate(_airy_u())], 1 / _ZETA_POS_MIN,
                        is_asymptotic=True)
# x < 0: Ai(-a) ~ (cos(zeta - pi/4) P + sin(zeta - pi/4) Q) / (sqrt(pi) a^(1/4)),
# P = sum (-1)^k u_2k / zeta^2k, Q = sum (-1)^k u_2k+1 / zeta^(2k+1)
_AIRY_P = _truncate([(-1) ** k * u for k, u in enumerate(_airy_u()[0::2])], _ZETA_NEG_MIN**-2,
                    is_asymptotic=True)
_AIRY_Q = _truncate([(-1) ** k * u for k, u in enumerate(_airy_u()[1::2])], _ZETA_NEG_MIN**-2,
                    is_asymptotic=True)


@register(aten.special_airy_ai.default)
def aten_special_airy_ai(g: GraphBuilder, x: Tensor) -> Tensor:
    """special_airy_ai(Tensor x) -> Tensor"""
    x = _prepare(g, x)
    a = g.op("Abs", x)
    u = g.op("Mul", g.op("Mul", x, x), x)
    series = g.op("Sub", g.op("Mul", _horner(g, u, _AIRY_F, _AIRY_U_MAX), _AI0),
                  g.op("Mul", g.op("Mul", _horner(g, u, _AIRY_G, _AIRY_U_MAX), x), _AI0_SLOPE))
    sqrt_a = g.op("Sqrt", a)
    zeta = g.op("Mul", g.op("Mul", a, sqrt_a), 2 / 3)
    inv_zeta = g.op("Reciprocal", zeta)
    quarter_root = g.op("Sqrt", sqrt_a)
    # x > 0, moderate: Ai(x) = sqrt(x/3)/pi K_{1/3}(zeta)
    zeta_lo = 2 / 3 * _AIRY_SERIES_MAX**1.5
    k_third = _scaled_k_integral(g, zeta, 1 / 3, zeta_lo, _ZETA_POS_MIN)
    decay = g.op("Exp", g.op("Neg", zeta))
    middle = g.op("Mul", g.op("Mul", k_third, decay),
                  g.op("Mul", g.op("Sqrt", g.op("Mul", x, 1 / 3)), 1 / math.pi))
    tail = _horner(g, inv_zeta, _AIRY_DECAY, 1 / _ZETA_POS_MIN)
    right = g.op("Div", g.op("Mul", tail, decay),
                 g.op("Mul", quarter_root, 2 * math.sqrt(math.pi)))
    # PyTorch gives nan at +inf (where the expansion gives 0).
    right = g.op("Where", g.op("IsInf", x), g.const(_NAN, _F64), right)
    # x < 0, large: oscillating asymptotic form.
    w = g.op("Mul", inv_zeta, inv_zeta)
    p = _horner(g, w, _AIRY_P, _ZETA_NEG_MIN**-2)
    q = g.op("Mul", _horner(g, w, _AIRY_Q, _ZETA_NEG_MIN**-2), inv_zeta)
    cos_z, sin_z = g.op("Cos", zeta), g.op("Sin", zeta)
    # cos(zeta - pi/4) = (cos + sin)/sqrt 2, sin(zeta - pi/4) = (sin - cos)/sqrt 2
    wave = g.op("Add", g.op("Mul", p, g.op("Add", cos_z, sin_z)),
                g.op("Mul", q, g.op("Sub", sin_z, cos_z)))
    left = g.op("Div", wave, g.op("Mul", quarter_root, math.sqrt(2 * math.pi)))
    out = g.op("Where", g.op("Greater", x, _AIRY_ASYMPTOTIC_MIN), right, middle)
    out = g.op("Where", g.op("LessOrEqual", x, _AIRY_SERIES_MAX), series, out)
    out = g.op("Where", g.op("Less", x, _AIRY_SERIES_MIN), left, out)
    return cast(g, out, g.out_dtype())
