"""FoldConstantsPass: a multiplication by a constant 1 is its other operand, exactly."""

from __future__ import annotations

import torch

import onnxport
from onnxport.passes import FoldConstantsPass
from tests.passes.fusion_helpers import assert_same, ops


class Scaled(torch.nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor
        self.w = torch.nn.Parameter(torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.cos() * self.factor          # a module constant (a rotary's attention_scaling)
        z = x.sin() / self.factor
        return y + z * 1.0 + self.w * torch.ones(8)    # ones of 8 elements: kept


def _program(factor: float) -> onnxport.ONNXProgram:
    model = Scaled(factor).eval()
    return onnxport.export(model, (torch.randn(3, 8),), optimize=False)


def test_unit_factors_are_dropped() -> None:
    before = _program(1.0)
    after = _program(1.0)
    assert FoldConstantsPass()(after.model).modified
    assert ops(before)["Mul"] - ops(after)["Mul"] == 2 and ops(after)["Div"] == 0
    assert ops(after)["Mul"] == 1                 # w * ones(8)
    model = Scaled(1.0).eval()
    assert_same(model, (torch.randn(3, 8),), before, after)


def test_other_factors_stay() -> None:
    program = _program(2.0)
    counts = ops(program)
    FoldConstantsPass()(program.model)
    assert ops(program)["Div"] == counts["Div"] == 1 and ops(program)["Mul"] >= 2


class ZeroPad(torch.nn.Module):
    """Swin's window padding at a size its windows divide: F.pad by zeros, an Identity."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.nn.functional.pad(x.relu(), (0, 0, 0, 0))
        return y.sigmoid(), torch.nn.functional.pad(x, (0, 0))   # the second: a graph output


def test_identity_is_dropped_unless_a_graph_output() -> None:
    model, args = ZeroPad().eval(), (torch.randn(2, 4, 4),)
    before = onnxport.export(model, args, optimize=False)
    after = onnxport.export(model, args, optimize=False)
    assert ops(before)["Identity"] == 2
    assert FoldConstantsPass()(after.model).modified
    assert ops(after)["Identity"] == 1
    (kept,) = [n for n in after.model.graph if n.op_type == "Identity"]
    assert kept.outputs[0].is_graph_output()
    assert_same(model, args, before, after)
    assert ops(onnxport.export(model, args))["Identity"] == 1
