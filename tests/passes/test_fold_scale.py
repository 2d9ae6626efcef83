"""FoldScaleIntoGemmPass: attention's query scale as the query Gemm's alpha, through the head
split and the rotary embedding; not where another reader would see the scaled values."""

from __future__ import annotations

import pytest
import torch

import onnxport
from onnxport.passes import FoldScaleIntoGemmPass, default_passes, run_passes
from tests.passes.fusion_helpers import nodes_of, ops


def _hf(kind: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    import transformers as t
    ids = torch.randint(0, 100, (1, 16))
    if kind == "bert":
        cfg = t.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=128, vocab_size=100)
        return t.BertModel(cfg).eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if kind == "llama":
        cfg = t.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                            use_cache=False)
        return t.LlamaModel(cfg).eval(), {"input_ids": ids}
    cfg = t.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100, use_cache=False)
    return t.GPT2Model(cfg).eval(), {"input_ids": ids}


def _programs(kind: str) -> tuple[torch.nn.Module, dict, onnxport.ONNXProgram, onnxport.ONNXProgram]:
    model, inputs = _hf(kind)
    before = onnxport.export(model, (), kwargs=inputs, optimize=False)
    run_passes(before.model, [p for p in default_passes()
                              if not isinstance(p, FoldScaleIntoGemmPass)])
    after = onnxport.export(model, (), kwargs=inputs)
    return model, inputs, before, after


def _alphas(program: onnxport.ONNXProgram) -> list[float]:
    return [n.attributes["alpha"].as_float() for n in nodes_of(program, "Gemm")
            if "alpha" in n.attributes and n.attributes["alpha"].as_float() != 1.0]


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_query_scale_into_the_query_gemm(kind: str) -> None:
    """One Mul a layer fewer (Llama: through the head split and the rotate_half rotation),
    the scale 1/sqrt(16) on the two query Gemms, and the outputs equal eager and unfused."""
    model, inputs, before, after = _programs(kind)
    assert ops(before)["Mul"] - ops(after)["Mul"] == 2
    assert sorted(_alphas(after)) == pytest.approx([0.25, 0.25])
    for node in nodes_of(after, "Gemm"):
        if "alpha" in node.attributes and node.attributes["alpha"].as_float() != 1.0:
            assert "q_proj" in node.name or "query" in node.name
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
    got_before, got_after = before(**inputs)[0], after(**inputs)[0]
    torch.testing.assert_close(got_after, got_before, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_after, expected, rtol=1e-5, atol=1e-5)


def test_packed_projection_keeps_its_scale() -> None:
    """GPT-2's c_attn makes q, k and v in one Gemm: scaling it would scale k and v too."""
    _, _, before, after = _programs("gpt2")
    assert ops(before)["Mul"] == ops(after)["Mul"] and not _alphas(after)


def test_a_factor_that_reads_the_chain_blocks_it() -> None:
    """Mul(y, sigmoid(y)) * s is not linear in the Gemm's output: nothing moves."""
    class SiluScaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            return torch.nn.functional.silu(y) * 0.5

    model, args = SiluScaled().eval(), (torch.randn(4, 8),)
    program = onnxport.export(model, args, optimize=False)
    run_passes(program.model, [p for p in default_passes()
                               if not isinstance(p, FoldScaleIntoGemmPass)])
    assert not FoldScaleIntoGemmPass()(program.model).modified
