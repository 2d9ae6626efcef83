"""Tiny mixture-of-experts LLMs from transformers, for tests and benchmarks.

transformers 5 runs every MoE family's experts through one implementation; during export (and
on CPU with float32 weights) it calls its own custom op, `transformers::grouped_mm_fallback`,
which onnxport translates (ops/grouped_mm.py). Configs: hidden 32, 2 layers, 4 experts, top-2,
random weights.
"""

from __future__ import annotations

from typing import Any

import torch

COMMON = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              use_cache=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)

FAMILIES: dict[str, dict[str, Any]] = {
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, head_dim=8),
    "olmoe": dict(num_experts=4, num_experts_per_tok=2),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, head_dim=8, sliding_window=32,
                    layer_types=["sliding_attention", "full_attention"]),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                      shared_expert_intermediate_size=32),
    "granitemoe": dict(num_local_experts=4, num_experts_per_tok=2),
    "phimoe": dict(num_local_experts=4, num_experts_per_tok=2),
    # DeepSeek's multi-head latent attention makes keys and values for every head: its config
    # needs num_key_value_heads == num_attention_heads (else eager fails too).
    "deepseek_v3": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                        n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16,
                        q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                        n_group=2, topk_group=1, num_key_value_heads=4),
}

DYNAMIC = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}


def config(family: str, **overrides: Any) -> Any:
    import transformers

    return transformers.AutoConfig.for_model(family, **{**COMMON, **FAMILIES[family], **overrides})


def build(family: str, **overrides: Any) -> torch.nn.Module:
    """The tiny causal LM of `family`, eval mode, seeded random weights."""
    import transformers

    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config(family, **overrides)).eval()


def inputs(batch: int, sequence: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(batch * 100 + sequence)
    return {"input_ids": torch.randint(3, 99, (batch, sequence), generator=g),
            "attention_mask": torch.ones(batch, sequence, dtype=torch.long)}


def check_dynamic_batch_and_sequence(model: torch.nn.Module) -> None:
    """Export `model` with a dynamic batch and sequence; ONNX Runtime equals eager at two sizes
    (rtol 1e-3, atol 1e-4)."""
    import onnxport

    program = onnxport.export(model, (), kwargs=inputs(2, 8), dynamic_shapes=DYNAMIC, dynamo=True)
    assert program is not None
    names = [[str(d) for d in v.shape] for v in program.model.graph.inputs]
    assert names == [["batch", "sequence"], ["batch", "sequence"]]
    for batch, sequence in [(2, 8), (3, 5)]:
        feeds = inputs(batch, sequence)
        with torch.no_grad():
            expected = model(**feeds).logits
        actual = torch.as_tensor(program(**feeds)[0])
        torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-4)
