"""FuseGeluPass on GELUs exported from real modules: Gelu at opset >= 20, ORT's fusable erf
form below."""

from __future__ import annotations

import math

import onnx_ir as ir
import pytest
import torch

from onnxport.passes import FuseGeluPass
from tests.passes.fusion_helpers import (Wrap, assert_same, fuse, nodes_of, ops, ort_optimized_ops,
                                         unfused)


class NewGELU(torch.nn.Module):
    """GPT-2's `gelu_new` (transformers' NewGELUActivation), written by hand."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class ErfGELU(torch.nn.Module):
    """BERT's original `gelu`: x * 0.5 * (1 + erf(x / sqrt(2)))."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


X = (torch.randn(2, 5, 16) * 3,)


def _retarget(program, opset: int):  # type: ignore[no-untyped-def]
    """The opset-18 graph declared at `opset` (its Mul/Erf/Tanh/Add/Pow mean the same there)."""
    program.model.opset_imports[""] = opset
    program.model.graph.opset_imports[""] = opset
    return program


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_nn_gelu_decomposition_to_gelu(approximate: str) -> None:
    model = Wrap(torch.nn.GELU(approximate))
    before = _retarget(unfused(model, X), 20)       # nn.GELU is written out below opset 20
    assert ops(before)["Gelu"] == 0
    after = fuse(before, FuseGeluPass())
    assert dict(ops(after)) == {"Gelu": 1}
    node = nodes_of(after, "Gelu")[0]
    assert node.attributes["approximate"].as_string() == approximate
    assert node.name == "/norm/Gelu"
    assert node.metadata_props["pkg.onnxport.module"] == "norm"
    assert_same(model, X, before, after)


@pytest.mark.parametrize("module,approximate", [(NewGELU(), "tanh"), (ErfGELU(), "none")],
                         ids=["gelu_new", "erf"])
def test_hand_written_at_opset_23(module: torch.nn.Module, approximate: str) -> None:
    model = Wrap(module)
    before = unfused(model, X, opset=23)
    assert ops(before)["Gelu"] == 0
    after = fuse(before, FuseGeluPass())
    assert dict(ops(after)) == {"Gelu": 1}
    assert nodes_of(after, "Gelu")[0].attributes["approximate"].as_string() == approximate
    assert_same(model, X, before, after)


@pytest.mark.parametrize("module", [torch.nn.GELU(), ErfGELU()], ids=["nn.GELU", "erf"])
def test_erf_below_20_the_form_ort_fuses(module: torch.nn.Module) -> None:
    model = Wrap(module)
    before = unfused(model, X)
    after = fuse(before, FuseGeluPass())
    assert dict(ops(after)) == {"Div": 1, "Erf": 1, "Add": 1, "Mul": 2}
    assert dict(ort_optimized_ops(after)) == {"com.microsoft.Gelu": 1}
    assert_same(model, X, before, after)
    assert not FuseGeluPass()(after.model).modified   # already in ORT's form


def test_tanh_below_20_unchanged() -> None:
    before = unfused(Wrap(NewGELU()), X)
    assert not FuseGeluPass()(ir.from_proto(before.model_proto)).modified


class WrongConstant(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.8 * (x + 0.044715 * torch.pow(x, 3.0))))


class GateReused(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate = 1.0 + torch.erf(x / math.sqrt(2.0))
        return x * 0.5 * gate, gate


class OtherInput(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


@pytest.mark.parametrize("model,args", [(WrongConstant(), X), (GateReused(), X),
                                        (OtherInput(), (X[0], X[0] + 1))],
                         ids=["wrong-constant", "gate-reused", "other-input"])
def test_not_fused_where_it_would_change_the_result(model: torch.nn.Module, args) -> None:  # type: ignore[no-untyped-def]
    before = unfused(model, args, opset=23)
    after = fuse(before, FuseGeluPass())
    assert ops(after) == ops(before)
