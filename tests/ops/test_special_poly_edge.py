"""Edge cases for torch.special's orthogonal polynomials beyond OpInfo's samples.

OpInfo draws n from [-9, 9), so it never reaches the Loop's large-n path, the trigonometric
forms of U/V/W, the end points |x| == 1, scalar overloads, or NaN/inf n.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import onnxport
from tests.helpers import Fn, count, export_and_compare

NAN = float("nan")
INF = float("inf")

NAMES = [
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
    "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
    "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
]


def check(fn: Callable[..., Any], *args: Any) -> onnxport.ONNXProgram:
    return export_and_compare(Fn(fn), args, optimize=False)


def special(name: str) -> Callable[..., torch.Tensor]:
    fn: Callable[..., torch.Tensor] = getattr(torch.special, name)
    return fn


def dispatched(program: onnxport.ONNXProgram) -> set[Any]:
    return {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}


def points(dtype: torch.dtype) -> torch.Tensor:
    """End points, values just inside them, and a spread over [-3, 3] with full mantissas."""
    edge = torch.tensor([-1.0, 1.0, 0.0, 0.5, -0.5, 0.999, -0.999, 2.0, -2.0], dtype=torch.float64)
    spread = torch.rand(64, dtype=torch.float64) * 6 - 3
    return torch.cat([edge, spread]).to(dtype)


@pytest.mark.parametrize("name", NAMES)
def test_tensor_n_negative_fractional_nan_inf(name: str) -> None:
    # n truncates toward zero; n < 0, NaN and inf all give 0.
    x = points(torch.float32)[:, None]
    n = torch.tensor([-3.0, -0.5, 0.0, 0.7, 1.0, 1.9, 2.0, 5.5, 8.0, NAN, INF, -INF])
    check(special(name), x, n)


@pytest.mark.parametrize("name", NAMES)
def test_large_tensor_n_float64(name: str) -> None:
    # Past the Chebyshev thresholds, so the trigonometric forms and the Loop both run.
    x = points(torch.float64)
    n = torch.randint(0, 40, x.shape).double()
    check(special(name), x, n)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [-2, 0, 1, 2, 7, 9, 40])
def test_n_scalar(name: str, n: int) -> None:
    dtype = torch.float64 if n > 6 else torch.float32
    program = check(lambda x: special(name)(x, n), points(dtype))
    assert getattr(torch.ops.aten, f"special_{name}").n_scalar in dispatched(program)
    if 0 <= n <= 9:
        assert count(program, "Loop") == 0


@pytest.mark.parametrize("name", NAMES)
def test_n_scalar_float_truncates(name: str) -> None:
    check(lambda x: special(name)(x, 3.7), points(torch.float32))
    check(lambda x: special(name)(x, -0.5), points(torch.float32))


@pytest.mark.parametrize("name", NAMES)
def test_x_scalar(name: str) -> None:
    n = torch.tensor([[0, 1, 2], [3, 5, 8]])
    program = check(lambda n: special(name)(0.25, n), n)
    assert getattr(torch.ops.aten, f"special_{name}").x_scalar in dispatched(program)
    check(lambda n: special(name)(-1, n), n)


@pytest.mark.parametrize("name", NAMES)
def test_integer_and_bool_inputs(name: str) -> None:
    x = torch.tensor([[-2, -1, 0, 1, 3]])
    n = torch.tensor([[0], [1], [4], [6]])
    check(special(name), x, n)
    check(special(name), x.bool(), n.bool())


@pytest.mark.parametrize("name", NAMES)
def test_broadcast_and_mixed_dtypes(name: str) -> None:
    x = torch.rand(2, 1, 3) * 4 - 2
    n = torch.randint(0, 6, (4, 1)).double()
    check(special(name), x, n)  # float32 x with float64 n computes in float64
    check(special(name), x, torch.tensor(3.0, dtype=torch.float64))  # 0-dim n stays weak


@pytest.mark.parametrize("name", NAMES)
def test_empty(name: str) -> None:
    check(special(name), torch.zeros(0, 3), torch.ones(3))
    check(lambda x: special(name)(x, 3), torch.zeros(2, 0))


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "shifted_chebyshev_polynomial_w",
                                  "legendre_polynomial_p", "hermite_polynomial_h"])
def test_tensor_n_uses_one_loop(name: str) -> None:
    program = check(special(name), torch.tensor([0.3, 2.0, -1.0]), torch.tensor([3.0, 4.0, 12.0]))
    assert count(program, "Loop") == 1


def test_huge_n_at_closed_forms_skips_the_recurrence() -> None:
    # ATen answers |x| == 1 and |x| < 1 for Chebyshev T in closed form, however large n is;
    # a Loop run to n = 10^8 would time out.
    x = torch.tensor([1.0, -1.0, 0.5, -0.25], dtype=torch.float64)
    n = torch.tensor([1e8, 1e8 + 1, 1e8, 12345.0], dtype=torch.float64)
    check(special("chebyshev_polynomial_t"), x, n)
    check(special("legendre_polynomial_p"), x[:2], n[:2])


def test_overflow_to_nan_stops_early() -> None:
    # Hermite overflows to NaN long before n = 10^7; ATen's loop (and ours) stops there.
    x = torch.tensor([0.5, 3.0], dtype=torch.float64)
    n = torch.tensor([1e7, 1e7], dtype=torch.float64)
    check(special("hermite_polynomial_h"), x, n)


@pytest.mark.parametrize("name", ["chebyshev_polynomial_v", "chebyshev_polynomial_w",
                                  "shifted_chebyshev_polynomial_v",
                                  "shifted_chebyshev_polynomial_w"])
def test_float32_half_angle_end_points(name: str) -> None:
    # Within float32 rounding of an end point ATen's trigonometric form returns the end value
    # (and shifted W returns (-1)^n there).
    x = torch.tensor([0.99999994, 0.9999999, -0.99999994, -0.9999999, 3e-8, 6e-8])
    check(special(name), x, torch.tensor([[20.0], [21.0]]))
