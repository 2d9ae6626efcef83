"""Edge cases of the special-function translations that OpInfo samples miss: poles, infinities,
nan, signed zeros, subnormals, extreme arguments, broadcasting, empty tensors and dtypes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from onnxport.translate import aten
from tests.helpers import Fn, export_and_compare

NAN, INF = math.nan, math.inf
FLOATS = [torch.float32, torch.float64]

# Poles, signed zeros, infinities, nan, tiny and huge magnitudes, and ordinary points.
SPECIAL = [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 0.5, -0.5, INF, -INF, NAN, 1e-30, -1e-30,
           1e-40, 1e10, 1e30, -1e10 + 0.5, 100.0, -100.5, 3.0e38, -3.0e38, 1.4616321, -7.3]


def targets(program: Any) -> set[Any]:
    return {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}


def wide(dtype: torch.dtype) -> torch.Tensor:
    return torch.cat([torch.linspace(-30, 30, 601), torch.logspace(-10, 30, 81),
                      -torch.logspace(-10, 10, 41), torch.tensor(SPECIAL)]).to(dtype)


UNARY: dict[str, Callable[[torch.Tensor], Any]] = {
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    "polygamma_2": lambda x: torch.polygamma(2, x),
    "polygamma_3": lambda x: torch.polygamma(3, x),
    "erfcx": torch.special.erfcx,
    "log_ndtr": torch.special.log_ndtr,
    "frexp": torch.frexp,
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_special_values_and_wide_range(name: str, dtype: torch.dtype) -> None:
    export_and_compare(Fn(UNARY[name]), (wide(dtype),))


@pytest.mark.parametrize("dtype", FLOATS)
def test_trigamma_reflection_matches_torch_rounding(dtype: torch.dtype) -> None:
    # Away from the exact poles, where float64 torch returns 1/sin(pi*n)^2 of a rounding residue.
    x = torch.cat([torch.linspace(-30.05, 30.05, 601), torch.tensor([INF, -INF, NAN, 1e-30])])
    export_and_compare(Fn(lambda t: torch.polygamma(1, t)), (x.to(dtype),))


def test_trigamma_float32_poles_are_finite_like_torch() -> None:
    # PyTorch forms pi x in float32, so sin(pi x) is not 0 at negative integers.
    export_and_compare(Fn(lambda t: torch.polygamma(1, t)), (torch.tensor([-1.0, -2.0, -30.0]),))


def test_polygamma_far_left_uses_reflection() -> None:
    x = torch.tensor([-109042.046875, -122382.4921875, -1e6 - 0.25, -3.5, -0.25])
    export_and_compare(Fn(lambda t: torch.polygamma(4, t)), (x.double(),))


@pytest.mark.parametrize("dtype", FLOATS)
def test_ndtri_tails_and_domain(dtype: torch.dtype) -> None:
    smallest = -38 if dtype == torch.float32 else -300
    p = torch.cat([torch.rand(200), torch.logspace(smallest, -1, 100), 1 - torch.logspace(-7, -1, 30),
                   torch.tensor([0.0, 1.0, 0.5, -0.1, 1.1, NAN, 1e-45])]).to(dtype)
    export_and_compare(Fn(torch.special.ndtri), (p,))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", [torch.igamma, torch.igammac])
def test_incomplete_gamma_special_values(op: Callable[..., Any], dtype: torch.dtype) -> None:
    a = [0.0, 0.0, 1.0, -1.0, 1.0, INF, INF, 2.0, 2.0, NAN, 1.0, 0.5, 1e-3, 100.0, 100.0, 1e4, 1e3]
    x = [0.0, 1.0, 0.0, 1.0, -1.0, 1.0, INF, INF, -0.0, 1.0, NAN, 3.0, 1e-3, 100.0, 120.0, 1e4 + 50,
         900.0]
    export_and_compare(Fn(op), (torch.tensor(a, dtype=dtype), torch.tensor(x, dtype=dtype)))


def test_incomplete_gamma_broadcasts_and_handles_empty() -> None:
    a = torch.rand(3, 1) * 5
    x = torch.rand(4) * 8
    export_and_compare(Fn(torch.igamma), (a, x))
    export_and_compare(Fn(torch.igammac), (torch.rand(0, 3), torch.rand(2, 1, 3)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_zeta_domain_rules(dtype: torch.dtype) -> None:
    s = [1.0, 0.5, 2.0, 2.0, 2.5, 3.0, 3.0, INF, 2.0, 2.0, -1.0, 1.5, 4.0, NAN, 2.0, INF, INF]
    q = [1.0, 1.0, 0.0, -2.0, -2.5, -2.5, -0.5, 1.0, INF, 1e-30, 2.0, 0.0, -35.25, 1.0, NAN, 0.5, 2.0]
    export_and_compare(Fn(torch.special.zeta), (torch.tensor(s, dtype=dtype),
                                                torch.tensor(q, dtype=dtype)))


def test_zeta_scalar_overloads() -> None:
    q = torch.rand(5) * 10 - 4
    program = export_and_compare(Fn(lambda t: torch.special.zeta(3.0, t)), (q,))
    assert aten.special_zeta.self_scalar in targets(program)
    s = torch.rand(5) * 6 + 1.5
    program = export_and_compare(Fn(lambda t: torch.special.zeta(t, 2.5)), (s,))
    assert aten.special_zeta.other_scalar in targets(program)


def test_zeta_broadcast_and_empty() -> None:
    export_and_compare(Fn(torch.special.zeta), (torch.rand(3, 1) * 5 + 1.5, torch.rand(4) * 20 - 10))
    export_and_compare(Fn(torch.special.zeta), (torch.rand(0, 2), torch.rand(3, 1, 2)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_nextafter_special_values(dtype: torch.dtype) -> None:
    info = torch.finfo(dtype)
    x = [0.0, 0.0, 1.0, 1.0, INF, -INF, NAN, 1.0, -0.0, info.tiny, info.tiny, 2.0, -2.0, info.max,
         -info.max, info.smallest_normal * 0.5, 1.5, -1.5, 3.0]
    y = [1.0, -1.0, 2.0, 0.0, 0.0, 0.0, 1.0, NAN, 0.0, 0.0, 1.0, 0.0, 0.0, INF, -INF, 0.0, 1.5,
         -2.0, -3.0]
    export_and_compare(Fn(torch.nextafter), (torch.tensor(x, dtype=dtype),
                                             torch.tensor(y, dtype=dtype)))


def test_nextafter_subnormals_float32() -> None:
    x = torch.tensor([1e-45, 1e-45, 2.8e-45, 1.1754942e-38, 1.17549435e-38, -1e-45])
    y = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    export_and_compare(Fn(torch.nextafter), (x, y))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_frexp_special_values_and_subnormals(dtype: torch.dtype) -> None:
    info = torch.finfo(dtype)
    x = torch.tensor([0.0, -0.0, INF, -INF, NAN, 1.0, 0.5, 3.0, -3.0, info.max, -info.max,
                      info.tiny, info.tiny / 4, -info.tiny / 8], dtype=dtype)
    program = export_and_compare(Fn(torch.frexp), (x,))
    assert aten.frexp.Tensor in targets(program)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64, torch.int64])
def test_copysign_signed_zeros_and_scalars(dtype: torch.dtype) -> None:
    a = torch.tensor([1, -2, 3, -4, 5, 0, 7, -8]).to(dtype)
    b = torch.tensor([-0.0, 0.0, -1.0, 1.0, -INF, -5.0, INF, 0.0])
    export_and_compare(Fn(torch.copysign), (a, b))
    program = export_and_compare(Fn(lambda t: torch.copysign(t, -0.0)), (a,))
    assert aten.copysign.Scalar in targets(program)
    export_and_compare(Fn(lambda t: torch.copysign(t, 2)), (a,))


def test_copysign_broadcast_and_empty() -> None:
    export_and_compare(Fn(torch.copysign), (torch.randn(3, 1), torch.randn(4)))
    export_and_compare(Fn(torch.copysign), (torch.randn(0, 4), torch.randn(4)))


@pytest.mark.parametrize("p", [1, 2, 4, 7])
def test_mvlgamma_orders_and_dtypes(p: int) -> None:
    x = torch.rand(2, 3, dtype=torch.float64) * 30 + (p - 1) / 2 + 0.01
    export_and_compare(Fn(lambda t: torch.mvlgamma(t, p)), (x,))
    export_and_compare(Fn(lambda t: torch.mvlgamma(t, p)), (torch.arange(p, p + 6),))


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfcx", "log_ndtr"])
def test_integer_and_bool_inputs(name: str) -> None:
    fn = UNARY[name]
    export_and_compare(Fn(fn), (torch.arange(-10, 12),))
    export_and_compare(Fn(fn), (torch.tensor([True, False]),))


def test_empty_inputs() -> None:
    empty = torch.rand(2, 0, 3)
    for fn in (*UNARY.values(), torch.special.ndtri, lambda t: torch.polygamma(1, t),
               lambda t: torch.mvlgamma(t, 3)):
        export_and_compare(Fn(fn), (empty,))
