"""FuseSkipNormPass (ONNX Runtime target): residual Add [+ bias] + norm -> SkipLayerNormalization /
SkipSimplifiedLayerNormalization, on graphs exported from real modules, checked in ORT against
the unfused graph and eager."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from onnxport.passes import default_passes
from onnxport.passes.onnxruntime import CONTRIB_DOMAIN, onnxruntime_passes
from onnxport.passes.onnxruntime.fuse_skip_norm import FuseSkipNormPass
from tests.passes.fusion_helpers import assert_same, fuse, nodes_of, ops, unfused

import onnxport

H = 16
ALL = FuseSkipNormPass()   # no gate: every match


class PostNorm(torch.nn.Module):
    """BERT's output block: LayerNorm(dense(h) + residual) (the Linear's bias Add feeds the sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(H, H)
        self.norm = torch.nn.LayerNorm(H, eps=1e-12)
        with torch.no_grad():
            self.norm.weight.normal_()
            self.norm.bias.normal_()

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(self.dense(h) + residual)


class PreNorm(torch.nn.Module):
    """GPT-2/Llama residual stream: s = x + f(r) is normalized and also carried on."""

    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.inner = torch.nn.Linear(H, H, bias=False)
        self.proj = torch.nn.Linear(H, H, bias=False)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        s = x + self.inner(r)
        return s + self.proj(self.norm(s))


def _rms() -> torch.nn.Module:
    norm = LlamaRMSNorm(H, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
    return norm


def _program(model: torch.nn.Module, args: tuple[torch.Tensor, ...], opset: int
             ) -> onnxport.ONNXProgram:
    model.eval()
    return onnxport.export(model, args, opset_version=opset)   # the default passes, target onnx


def _args(rows: int = 5, batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch, rows, H), torch.randn(batch, rows, H)


def test_post_norm_layer_norm_with_bias() -> None:
    """Without the default fusions the Linear's bias is an Add before the residual Add (with
    them it is inside a Gemm, and the sum is Add(Gemm, residual): the case below)."""
    model, args = PostNorm(), _args()
    before = unfused(model, args)
    assert ops(before)["LayerNormalization"] == 1 and ops(before)["SkipLayerNormalization"] == 0
    after = fuse(before, ALL)
    assert ops(after)["LayerNormalization"] == 0 and ops(after)["Add"] == 0
    (node,) = nodes_of(after, "SkipLayerNormalization")
    assert node.domain == CONTRIB_DOMAIN
    assert [v.name if v is not None else None for v in node.inputs][2:] == \
        ["norm.weight", "norm.bias", "dense.bias"]          # gamma, beta, the Linear's bias
    assert node.attributes["epsilon"].as_float() == pytest.approx(1e-12)
    assert node.metadata_props["pkg.onnxport.module"] == "norm"
    assert after.model.opset_imports[CONTRIB_DOMAIN] == 1
    assert_same(model, args, before, after)


@pytest.mark.parametrize("opset", [18, 23])
def test_pre_norm_rms_keeps_the_sum(opset: int) -> None:
    """Below 23 the RMS form the default passes write (Pow/ReduceMean/Add/Sqrt/Div, Mul by w),
    at 23 RMSNormalization: both become SkipSimplifiedLayerNormalization whose fourth output
    (input_skip_bias_sum) carries the residual stream on."""
    model, args = PreNorm(_rms()), _args()
    before = _program(model, args, opset)
    after = fuse(before, ALL)
    (node,) = nodes_of(after, "SkipSimplifiedLayerNormalization")
    assert len(node.outputs) == 4 and node.outputs[3].uses()
    assert node.inputs[2].name == "norm.weight"
    assert ops(after)["ReduceMean"] == ops(after)["RMSNormalization"] == 0
    # The first residual is the C of the inner Linear's Gemm (default passes): taken back out.
    assert ops(after)["Add"] == 0 and ops(after)["Gemm"] == 2
    assert_same(model, args, before, after)


def test_post_norm_after_default_passes() -> None:
    """After the default passes (the Linear is a 2-D Gemm with its bias): Add + LayerNorm."""
    model, args = PostNorm(), _args()
    before = _program(model, args, 18)
    assert ops(before)["Gemm"] == 1
    after = fuse(before, ALL)
    (node,) = nodes_of(after, "SkipLayerNormalization")
    assert ops(after)["LayerNormalization"] == 0 and ops(after)["Add"] == 0
    assert_same(model, args, before, after)


def test_pre_norm_layer_norm_keeps_the_sum() -> None:
    model, args = PreNorm(torch.nn.LayerNorm(H)), _args()
    before = _program(model, args, 18)
    after = fuse(before, ALL)
    (node,) = nodes_of(after, "SkipLayerNormalization")
    assert len(node.outputs) == 4 and node.outputs[3].uses()
    assert_same(model, args, before, after)


def test_two_d_and_weightless() -> None:
    """2-D inputs, and an RMSNorm without weight (gamma: ones)."""
    model = PreNorm(torch.nn.RMSNorm(H, elementwise_affine=False))
    args = (torch.randn(7, H), torch.randn(7, H))
    before = _program(model, args, 23)
    after = fuse(before, ALL)
    assert ops(after)["SkipSimplifiedLayerNormalization"] == 1
    assert_same(model, args, before, after)


class Broadcast(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(H)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.norm(x + r)


@pytest.mark.parametrize("case", ["broadcast", "rank4", "not_last_axis"])
def test_not_matched(case: str) -> None:
    """The kernels take same-shape 2-D/3-D input and skip and normalize the last axis only."""
    if case == "broadcast":
        model, args = Broadcast(), (torch.randn(2, 5, H), torch.randn(1, 5, H))
    elif case == "rank4":
        model, args = Broadcast(), (torch.randn(2, 3, 5, H), torch.randn(2, 3, 5, H))
    else:
        model = Broadcast()
        model.norm = torch.nn.LayerNorm([5, H])
        args = _args()
    before = _program(model, args, 18)
    after = fuse(before, ALL)
    assert ops(after)["SkipLayerNormalization"] == 0
    assert ops(after) == ops(before)


def test_gate() -> None:
    """The target's instance fuses RMS norms of <= 512 elements only (ORT 1.32's CPU kernels
    are slower than Add + norm otherwise; docs/benchmarks.md)."""
    (gated,) = [p for p in onnxruntime_passes() if isinstance(p, FuseSkipNormPass)]
    one_row = _args(rows=1, batch=1)
    model = PreNorm(_rms())
    assert ops(fuse(_program(model, one_row, 23), gated))["SkipSimplifiedLayerNormalization"] == 1
    assert ops(fuse(_program(model, _args(rows=40, batch=1), 23), gated))[   # 640 elements
        "SkipSimplifiedLayerNormalization"] == 0
    assert ops(fuse(_program(PreNorm(torch.nn.LayerNorm(H)), one_row, 18), gated))[
        "SkipLayerNormalization"] == 0
    # dynamic rows count as one only in a graph with a KV cache (a GroupQueryAttention)
    model.eval()
    rows = torch.export.Dim("rows")
    dynamic = onnxport.export(model, _args(rows=2, batch=1), opset_version=23,
                              dynamic_shapes=({1: rows}, {1: rows}))
    assert ops(fuse(dynamic, gated))["SkipSimplifiedLayerNormalization"] == 0


def test_target_export_runs_the_pass() -> None:
    """`export(..., target="onnxruntime")` on a decode-shaped block: the fused graph equals
    the default target's and eager in ORT."""
    model, args = PreNorm(_rms()), _args(rows=1, batch=1)
    model.eval()
    plain = onnxport.export(model, args)
    ort_target = onnxport.export(model, args, target="onnxruntime")
    assert ops(ort_target)["SkipSimplifiedLayerNormalization"] == 1
    assert len(default_passes()) > 0
    assert_same(model, args, plain, ort_target)
