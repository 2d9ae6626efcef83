"""FuseMoEPass (target="onnxruntime"): a mixture-of-experts layer -> com.microsoft.MoE.

The layers here are written in plain torch, with routing glue unlike transformers' (argsort
instead of sort, one-hot counts instead of histc, index_add instead of an inverse permutation,
up before gate): the pass matches the computation, not one library's module. The grouped
products are transformers' float32 op (`torch._grouped_mm` traces in bfloat16 only).
transformers' own families are in tests/models/test_moe.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers.integrations.moe")  # defines transformers::grouped_mm_fallback

import onnxport  # noqa: E402

HIDDEN, INNER, EXPERTS, K = 16, 8, 4, 2


def _grouped(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


class _Layer(torch.nn.Module):
    def __init__(self, routing: str = "softmax", activation: str = "swiglu_up_gate",
                 renormalize: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.routing, self.activation, self.renormalize = routing, activation, renormalize
        width = 2 * INNER if activation.startswith("swiglu") else INNER
        self.router = torch.nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(EXPERTS, HIDDEN, width) * 0.3)
        self.w2 = torch.nn.Parameter(torch.randn(EXPERTS, INNER, HIDDEN) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router(x)
        scores = logits.softmax(-1) if self.routing == "softmax" else logits.sigmoid()
        weights, experts = scores.topk(K, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        flat = experts.reshape(-1)
        order = flat.argsort(stable=True)
        tokens = order // K
        counts = F.one_hot(flat, EXPERTS).sum(0)
        offs = counts.cumsum(0).to(torch.int32)
        h = _grouped(x[tokens], self.w1, offs)
        if self.activation == "swiglu_up_gate":
            up, gate = h.chunk(2, dim=-1)
            h = up * F.silu(gate)
        else:
            h = F.relu(h)
        h = _grouped(h, self.w2, offs)
        h = h * weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(x).index_add(0, tokens, h)


def _export(layer: torch.nn.Module) -> onnxport.ONNXProgram:
    program = onnxport.export(layer, (torch.randn(10, HIDDEN),),
                              dynamic_shapes={"x": {0: "tokens"}}, dynamo=True,
                              target="onnxruntime")
    assert program is not None
    return program


def _moe_nodes(program: onnxport.ONNXProgram) -> list:
    return [n for n in program.model.graph if n.op_type == "MoE"]


def _check_against_eager(layer: torch.nn.Module, program: onnxport.ONNXProgram) -> None:
    for tokens in (10, 3, 1):
        x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(tokens))
        with torch.no_grad():
            expected = layer(x)
        torch.testing.assert_close(torch.as_tensor(program(x)[0]), expected,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("renormalize", [True, False])
def test_layer_with_other_glue_becomes_one_moe_node(renormalize: bool) -> None:
    layer = _Layer(renormalize=renormalize).eval()
    program = _export(layer)
    nodes = _moe_nodes(program)
    assert len(nodes) == 1
    attrs = {k: v.value for k, v in nodes[0].attributes.items()}
    assert attrs["k"] == K and attrs["activation_type"] == "swiglu"
    assert attrs["normalize_routing_weights"] == int(renormalize)
    assert not any(n.op_type == "Loop" for n in program.model.graph)
    _check_against_eager(layer, program)


def test_plain_activation() -> None:
    layer = _Layer(activation="relu").eval()
    program = _export(layer)
    nodes = _moe_nodes(program)
    assert [n.attributes["activation_type"].value for n in nodes] == ["relu"]
    _check_against_eager(layer, program)


def test_sigmoid_routing_keeps_the_standard_graph() -> None:
    # ORT's MoE routes by softmax; sigmoid scores pick the same experts but weigh them
    # otherwise, which the pass's check finds.
    layer = _Layer(routing="sigmoid", renormalize=False).eval()
    program = _export(layer)
    assert _moe_nodes(program) == []
    _check_against_eager(layer, program)


def test_default_target_never_emits_moe() -> None:
    layer = _Layer().eval()
    program = onnxport.export(layer, (torch.randn(10, HIDDEN),), dynamo=True)
    assert program is not None and _moe_nodes(program) == []
