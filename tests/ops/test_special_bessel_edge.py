"""Edge cases of the Bessel-type special functions that OpInfo samples miss.

Special values (0, -0, negative x for Y and K, +-inf, nan, overflow and underflow), the
switch points between series and asymptotic branches, shapes, dtypes and the prims overloads.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from tests.helpers import Fn, count, export_and_compare

NAN, INF = math.nan, math.inf
S = torch.special

FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "i0": torch.i0,
    "i0e": S.i0e,
    "i1": S.i1,
    "i1e": S.i1e,
    "bessel_j0": S.bessel_j0,
    "bessel_j1": S.bessel_j1,
    "bessel_y0": S.bessel_y0,
    "bessel_y1": S.bessel_y1,
    "modified_bessel_i0": S.modified_bessel_i0,
    "modified_bessel_i1": S.modified_bessel_i1,
    "modified_bessel_k0": S.modified_bessel_k0,
    "modified_bessel_k1": S.modified_bessel_k1,
    "scaled_modified_bessel_k0": S.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": S.scaled_modified_bessel_k1,
    "spherical_bessel_j0": S.spherical_bessel_j0,
    "airy_ai": S.airy_ai,
}

# Avoids 2 < |x| < 13, where eager float64 J/Y are less accurate than float64's tolerance.
SPECIAL = [-INF, -100.0, -30.0, -1.5, -1.0, -1e-30, -0.0, 0.0, 1e-30, 1e-5, 0.5, 1.0, 1.5,
           20.0, 30.0, 100.0, INF, NAN]
# Each side of every branch switch: I at 20, K at 2 and 18, J/Y at 13, Airy at -7, 1 and 9.
SWITCHES = [-20.001, -19.999, -13.001, -12.999, -9.0, -7.001, -6.999, 0.999, 1.001, 1.999,
            2.001, 8.999, 9.001, 12.999, 13.001, 17.999, 18.001, 19.999, 20.001]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_special_values(name: str, dtype: torch.dtype) -> None:
    export_and_compare(Fn(FUNCTIONS[name]), (torch.tensor(SPECIAL, dtype=dtype),))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_branch_switch_points(name: str) -> None:
    x = torch.tensor(SWITCHES, dtype=torch.float64)
    if name.startswith("bessel_"):
        # eager float64 J/Y are accurate to ~1e-8 only around 9 and 13: compare in float32.
        x = x.float()
    export_and_compare(Fn(FUNCTIONS[name]), (x,))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_integer_and_bool_inputs_give_float32(name: str) -> None:
    program = export_and_compare(Fn(FUNCTIONS[name]), (torch.arange(-12, 13),))
    assert program(torch.arange(-12, 13))[0].dtype == torch.float32
    export_and_compare(Fn(FUNCTIONS[name]), (torch.tensor([True, False, True]),))


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_float16(name: str) -> None:
    x = torch.tensor([-9.0, -2.5, -0.5, 0.0, 0.25, 1.0, 3.0, 10.0, 11.0, 12.0], dtype=torch.float16)
    export_and_compare(Fn(FUNCTIONS[name]), (x,))


def test_shapes_empty_and_zero_dim() -> None:
    model = Fn(lambda x: (S.bessel_j0(x), S.modified_bessel_k1(x), S.airy_ai(x), torch.i0(x)))
    export_and_compare(model, (torch.empty(0, 3),))
    export_and_compare(model, (torch.tensor(0.75),))
    export_and_compare(model, (torch.rand(2, 3, 4) * 10,))


def test_overflow_and_underflow_match_eager() -> None:
    # I0/I1 overflow to inf where exp(x) does (float32 near 89, float64 near 709.8);
    # K0/K1 and Ai underflow to 0.
    model = Fn(lambda x: (torch.i0(x), S.i1(x), S.i0e(x), S.modified_bessel_k0(x),
                          S.modified_bessel_k1(x), S.scaled_modified_bessel_k1(x), S.airy_ai(x)))
    export_and_compare(model, (torch.tensor([80.0, 88.0, 89.0, 90.0, 100.0, 1e4]),))
    export_and_compare(model, (torch.tensor([100.0, 700.0, 709.0, 710.0, 720.0, 1e4],
                                            dtype=torch.float64),))


def test_dense_grid_float32() -> None:
    x = torch.linspace(-50, 50, 4001)
    for fn in FUNCTIONS.values():
        export_and_compare(Fn(fn), (x,))


def test_prims_overloads() -> None:
    prims = torch.ops.prims
    model = Fn(lambda x: (prims.bessel_i0(x), prims.bessel_i0e(x), prims.bessel_i1(x),
                          prims.bessel_i1e(x), prims.bessel_j0(x), prims.bessel_j1(x),
                          prims.spherical_bessel_j0(x)))
    export_and_compare(model, (torch.linspace(-25, 25, 101),))
    export_and_compare(model, (torch.tensor(SPECIAL, dtype=torch.float64),))


def test_computed_in_float64_and_cast_once() -> None:
    program = export_and_compare(Fn(S.bessel_y1), (torch.linspace(0.1, 30, 50),))
    assert count(program, "Cast") == 2
