"""avg_pool in ceil mode at sizes where ceil mode adds no window: one AveragePool, as floor mode
(timm's avg-down shortcut, `AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)` on even
sizes, was Pad/AveragePool/Mul/Div; benchmarks/bench_vision_graphs.py --suite-counts)."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F

import onnxport
from tests.helpers import Fn


def _ops(program: onnxport.ONNXProgram) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in program.model.graph if n.op_type != "Constant")


@pytest.mark.parametrize("size,k,s,p,include,single", [
    (8, 2, 2, 0, False, True),     # timm's avg-down on an even size
    (9, 3, 3, 0, True, True),
    (11, 3, 2, 1, False, True),    # (11 + 2 - 3) / 2 whole: no overhanging window
    (9, 2, 2, 0, False, False),    # odd size: the last window overhangs (divisor 1, not 2)
    (10, 3, 2, 1, True, False),
])
def test_ceil_mode(size: int, k: int, s: int, p: int, include: bool, single: bool) -> None:
    m = Fn(lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=True, count_include_pad=include))
    x = torch.randn(2, 3, size, size + 2 * s)    # the same decision on both axes
    program = onnxport.export(m, (x,))
    ops = _ops(program)
    assert (ops == {"AveragePool": 1}) == single, ops
    torch.testing.assert_close(program(x)[0], m(x), rtol=1e-5, atol=1e-6)


class AvgDown(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 2, 2, ceil_mode=True, count_include_pad=False)


def test_dynamic_size_keeps_the_general_form() -> None:
    m = AvgDown()
    h = torch.export.Dim("h", min=4)
    program = onnxport.export(m, (torch.randn(1, 3, 8, 8),), dynamic_shapes=({2: h},))
    for size in (8, 9):
        x = torch.randn(1, 3, size, 8)
        torch.testing.assert_close(program(x)[0], m(x), rtol=1e-5, atol=1e-6)
