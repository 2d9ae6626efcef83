"""OpInfo cases for the orthogonal polynomials of torch.special."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool)

_NAMES = (
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
)

CASES = [
    OpTest(f"special.{name}", covers=(getattr(aten, f"special_{name}").default,), dtypes=_DTYPES)
    for name in _NAMES
]
