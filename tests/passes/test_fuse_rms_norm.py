"""FuseRMSNormPass on RMSNorms exported from real modules: RMSNormalization at opset 23, the
form ONNX Runtime fuses (SimplifiedLayerNormalization) below."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from onnxport.passes import FuseRMSNormPass
from tests.passes.fusion_helpers import (Wrap, assert_same, fuse, nodes_of, ops, ort_optimized_ops,
                                         unfused)


class HandRMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _llama() -> torch.nn.Module:
    norm = LlamaRMSNorm(16, eps=1e-5)
    with torch.no_grad():
        norm.weight.normal_()
    return norm


MODULES = {
    "llama": _llama,                                        # Pow/ReduceSum/Div/.../Reciprocal
    "hand": lambda: HandRMSNorm(16),                        # the same, written by hand
    "nn.RMSNorm": lambda: torch.nn.RMSNorm(16, eps=1e-6),   # aten.rms_norm below 23: Mul/ReduceMean
}
WRITTEN_OUT_AT_23 = ["llama", "hand"]   # aten.rms_norm is RMSNormalization at 23 already
X = (torch.randn(2, 5, 16),)


@pytest.mark.parametrize("name", WRITTEN_OUT_AT_23)
def test_opset23_one_rms_normalization(name: str) -> None:
    model = Wrap(MODULES[name]())
    before = unfused(model, X, opset=23)
    assert ops(before)["RMSNormalization"] == 0 and ops(before)["Sqrt"] == 1
    after = fuse(before, FuseRMSNormPass())
    assert dict(ops(after)) == {"RMSNormalization": 1}
    node = nodes_of(after, "RMSNormalization")[0]
    assert node.name == "/norm/RMSNormalization"
    assert node.metadata_props["pkg.onnxport.module"] == "norm"
    assert "pkg.onnxport.source" in node.metadata_props
    assert node.attributes["axis"].as_int() == -1
    assert node.inputs[1].name == "norm.weight"           # the weight is the scale
    assert_same(model, X, before, after)


@pytest.mark.parametrize("name", list(MODULES))
def test_below_23_the_form_ort_fuses(name: str) -> None:
    model = Wrap(MODULES[name]())
    before = unfused(model, X)
    assert ort_optimized_ops(before)["SimplifiedLayerNormalization"] == 0
    after = fuse(before, FuseRMSNormPass())
    assert dict(ops(after)) == {"Pow": 1, "ReduceMean": 1, "Add": 1, "Sqrt": 1, "Div": 1, "Mul": 1}
    assert all(n.metadata_props["pkg.onnxport.module"] == "norm"
               for n in after.model.graph if n.op_type != "Constant")
    assert dict(ort_optimized_ops(after)) == {"SimplifiedLayerNormalization": 1}
    assert_same(model, X, before, after)
    # Already in ORT's form: nothing more to do.
    assert not FuseRMSNormPass()(after.model).modified


class TwoAxesNoWeight(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean([-2, -1], keepdim=True) + 1e-5)


def test_without_weight_and_over_two_axes() -> None:
    model = Wrap(TwoAxesNoWeight())
    x = (torch.randn(3, 4, 16),)
    before = unfused(model, x, opset=23)
    after = fuse(before, FuseRMSNormPass())
    node = nodes_of(after, "RMSNormalization")[0]
    assert node.attributes["axis"].as_int() == -2
    assert_same(model, x, before, after)


def test_llama_decoder_norms_all_fused() -> None:
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=50, use_cache=False)
    model = LlamaModel(cfg).eval()
    ids = (torch.randint(0, 50, (1, 7)),)
    before = unfused(model, ids, opset=23)
    after = fuse(before, FuseRMSNormPass())
    assert ops(after)["RMSNormalization"] == 5               # 2 per layer + the final norm
    assert {n.name for n in nodes_of(after, "RMSNormalization")} >= {
        "/layers.0/input_layernorm/RMSNormalization", "/norm/RMSNormalization"}
    with torch.no_grad():
        expected = model(*ids).last_hidden_state
    torch.testing.assert_close(after(*ids)[0], expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(after(*ids)[0], before(*ids)[0], rtol=1e-5, atol=1e-5)


class NotTrailing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)


class StatisticReused(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ms = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(ms + 1e-6), ms


@pytest.mark.parametrize("model", [NotTrailing(), StatisticReused()], ids=lambda m: type(m).__name__)
def test_not_fused_where_it_would_change_the_result(model: torch.nn.Module) -> None:
    before = unfused(model, X, opset=23)
    after = fuse(before, FuseRMSNormPass())
    assert ops(after)["RMSNormalization"] == 0
    assert ops(after) == ops(before)
