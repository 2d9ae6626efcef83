"""Mixture-of-experts LLMs (issue 28): the grouped products, every family, the KV cache.

transformers' MoE layers sort the (token, expert) pairs by expert and multiply each expert's
row block with `transformers::grouped_mm_fallback` (or torch's `_grouped_mm`); onnxport
translates both into a Loop over the experts (ops/grouped_mm.py). Each family below is built
from a tiny config (tests/models/moe.py), exported with a dynamic batch and sequence, and
run in ONNX Runtime at two sizes against eager; three families also with a KV cache, where
greedy generation in ORT must give `generate`'s tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

# (importing transformers.integrations.moe defines transformers::grouped_mm_fallback)
pytest.importorskip("transformers.integrations.moe")

import onnxport  # noqa: E402
from onnxport import llm  # noqa: E402
from tests.models import moe  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4


def _ort(program: Any, **inputs: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(program(**inputs)[0])


# -- the grouped products ---------------------------------------------------------------------

class _Fallback(torch.nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, weight, offs)


@pytest.mark.parametrize("ends", [
    [2, 5, 5, 9],     # an empty group in the middle
    [0, 0, 9, 9],     # every row in one group, empty first and last groups
    [3, 4, 6, 7],     # rows past offs[-1]: zeros, as the fallback writes them
    [9, 9, 9, 9],     # all in the first group
], ids=["empty-middle", "one-group", "tail-rows", "first-only"])
def test_grouped_mm_fallback(ends: list[int]) -> None:
    torch.manual_seed(0)
    x, weight = torch.randn(9, 6), torch.randn(4, 6, 5)
    offs = torch.tensor(ends, dtype=torch.int32)
    program = onnxport.export(_Fallback(), (x, weight, offs),
                              dynamic_shapes=({0: "rows"}, None, None))
    assert program is not None
    assert "Loop" in [n.op_type for n in program.model.graph]
    torch.testing.assert_close(_ort(program, x=x, weight=weight, offs=offs),
                               _Fallback()(x, weight, offs), rtol=1e-5, atol=1e-5)
    # Another number of rows through the same graph.
    x2 = torch.randn(13, 6)
    offs2 = torch.tensor([1, 7, 7, 12], dtype=torch.int32)
    torch.testing.assert_close(_ort(program, x=x2, weight=weight, offs=offs2),
                               _Fallback()(x2, weight, offs2), rtol=1e-5, atol=1e-5)


class _GroupedMM(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch._grouped_mm(a, b, offs=offs)


class _BatchedGroupedMM(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch._grouped_mm(a, b)


# torch's meta kernel (what torch.export traces with) takes bfloat16 only; its CPU kernel
# wants 16-byte aligned strides (multiples of 8); offs ends at the jagged dim's length, since the kernel leaves
# rows past offs[-1] unwritten. ORT computes the products in float32 and rounds once (torch's
# default bfloat16 tolerances).
@pytest.mark.parametrize("a_shape, b_shape, ends", [
    ((12, 8), (3, 8, 8), [4, 4, 12]),      # 2-D x 3-D: rows grouped (MoE)
    ((3, 8, 8), (8, 24), [8, 8, 24]),      # 3-D x 2-D: columns grouped
    ((8, 24), (24, 8), [8, 8, 24]),        # 2-D x 2-D: contraction grouped
], ids=["2d-3d", "3d-2d", "2d-2d"])
def test_aten_grouped_mm(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                         ends: list[int]) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(a_shape).bfloat16(), torch.randn(b_shape).bfloat16()
    offs = torch.tensor(ends, dtype=torch.int32)
    program = onnxport.export(_GroupedMM(), (a, b, offs))
    assert program is not None
    actual = _ort(program, a=a, b=b, offs=offs)
    assert actual.dtype == torch.bfloat16
    torch.testing.assert_close(actual, _GroupedMM()(a, b, offs))


def test_aten_grouped_mm_batched() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(3, 8, 8).bfloat16(), torch.randn(3, 8, 8).bfloat16()
    program = onnxport.export(_BatchedGroupedMM(), (a, b))
    assert program is not None
    assert "MatMul" in [n.op_type for n in program.model.graph]
    torch.testing.assert_close(_ort(program, a=a, b=b), _BatchedGroupedMM()(a, b))


# -- the families -----------------------------------------------------------------------------

@pytest.mark.parametrize("family", list(moe.FAMILIES))
def test_family_dynamic_batch_and_sequence(family: str) -> None:
    moe.check_dynamic_batch_and_sequence(moe.build(family))


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3"])
def test_family_kv_cache_generation(family: str) -> None:
    model = moe.build(family, use_cache=True)
    program = llm.export_decoder_with_cache(model)
    prompt = torch.randint(3, moe.COMMON["vocab_size"], (2, 5),
                           generator=torch.Generator().manual_seed(1))
    eos = model.config.eos_token_id
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                  do_sample=False, max_new_tokens=10)
    actual = llm.greedy_generate(program, prompt, max_new_tokens=10, eos_token_id=eos,
                                 pad_token_id=model.config.pad_token_id)
    assert actual.tolist() == expected.tolist()


# -- the ONNX Runtime target: com.microsoft.MoE ------------------------------------------------

def _op_count(program: Any, op_type: str) -> int:
    return sum(1 for n in program.model.graph if n.op_type == op_type)


# mixtral and granitemoe renormalize the top-2 weights; qwen3_moe, olmoe and qwen2_moe take
# them from the softmax as they are (their configs' norm_topk_prob=False:
# normalize_routing_weights=0); qwen2_moe adds a shared expert outside the fused layer.
@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "olmoe", "qwen2_moe", "granitemoe"])
def test_ort_target_fuses_each_layer_into_one_moe_node(family: str) -> None:
    model = moe.build(family)
    program = onnxport.export(model, (), kwargs=moe.inputs(2, 8), dynamic_shapes=moe.DYNAMIC,
                              dynamo=True, target="onnxruntime")
    assert program is not None
    layers = model.config.num_hidden_layers
    assert _op_count(program, "MoE") == layers
    assert _op_count(program, "Loop") == 0
    expected_normalize = int(getattr(model.config, "norm_topk_prob", True))
    for node in program.model.graph:
        if node.op_type == "MoE":
            assert node.domain == "com.microsoft"
            assert node.attributes["k"].value == 2
            assert node.attributes["activation_type"].value == "swiglu"
            assert node.attributes["normalize_routing_weights"].value == expected_normalize
    for batch, sequence in [(2, 8), (3, 5), (1, 1)]:
        inputs = moe.inputs(batch, sequence)
        with torch.no_grad():
            expected = model(**inputs).logits
        torch.testing.assert_close(_ort(program, **inputs), expected, rtol=RTOL, atol=ATOL)


# Semantics ORT's MoE does not have: PhiMoE's sparse mixer, gpt-oss's expert biases and clamped
# SwiGLU, DeepSeek-V3's grouped sigmoid routing with a bias. The layer keeps its standard graph.
@pytest.mark.parametrize("family", ["phimoe", "gpt_oss", "deepseek_v3"])
def test_ort_target_keeps_layers_whose_routing_moe_lacks(family: str) -> None:
    model = moe.build(family)
    program = onnxport.export(model, (), kwargs=moe.inputs(2, 8), dynamic_shapes=moe.DYNAMIC,
                              dynamo=True, target="onnxruntime")
    assert program is not None
    assert _op_count(program, "MoE") == 0
    assert _op_count(program, "Loop") > 0
    inputs = moe.inputs(3, 5)
    with torch.no_grad():
        expected = model(**inputs).logits
    torch.testing.assert_close(_ort(program, **inputs), expected, rtol=RTOL, atol=ATOL)


def test_ort_target_kv_cache_generation_with_moe_nodes() -> None:
    model = moe.build("mixtral", use_cache=True)
    program = llm.export_decoder_with_cache(model, target="onnxruntime")
    assert _op_count(program, "MoE") == model.config.num_hidden_layers
    prompt = torch.randint(3, moe.COMMON["vocab_size"], (2, 5),
                           generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                  do_sample=False, max_new_tokens=10)
    actual = llm.greedy_generate(program, prompt, max_new_tokens=10,
                                 eos_token_id=model.config.eos_token_id,
                                 pad_token_id=model.config.pad_token_id)
    assert actual.tolist() == expected.tolist()


def test_deepseek_config_error_says_eager_fails_too() -> None:
    # DeepSeek's latent attention makes keys for every head; transformers' sdpa path then
    # repeats them num_heads / num_key_value_heads times: eager fails on such a config, and
    # the capture error says so with eager's own (concrete) message.
    model = moe.build("deepseek_v3", num_key_value_heads=2)
    with pytest.raises(onnxport.ForwardError) as info:
        onnxport.export(model, (), kwargs=moe.inputs(2, 8), dynamic_shapes=moe.DYNAMIC,
                        dynamo=True)
    message = str(info.value)
    assert "eager PyTorch fails on these inputs too" in message
    assert "must match the size of tensor b (8)" in message
