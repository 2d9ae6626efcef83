"""Hugging Face transformers models: tiny configs, random weights, no downloads.

Each model is built from its config (hidden size 32-64, 2 layers), put in eval mode,
exported with onnxport, run in ONNX Runtime and compared with eager PyTorch at
rtol=1e-3, atol=1e-4: these models chain tens of matmuls, layer norms and softmaxes,
and ORT's float32 kernels accumulate in another order than ATen's.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.helpers import check_model, count, export_and_compare  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
VOCAB = 99


def _eval(model: Any) -> Any:
    model.eval()
    return model


def _ids(batch: int = 2, seq: int = 12) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), dtype=torch.long)


def _initializer_names(program: Any) -> set[str]:
    return set(program.model.graph.initializers)


# -- BERT (encoder) ----------------------------------------------------------------------------

def _bert(attn: str) -> Any:
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
        attn_implementation=attn,
    )
    return _eval(transformers.BertModel(config))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert(attn: str) -> None:
    model = _bert(attn)
    input_ids = _ids()
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = 0  # the second sequence is padded
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 6:] = 1
    program = export_and_compare(
        model, (input_ids,),
        {"attention_mask": attention_mask, "token_type_ids": token_type_ids},
        rtol=RTOL, atol=ATOL)
    names = _initializer_names(program)
    assert "embeddings.word_embeddings.weight" in names
    assert "encoder.layer.1.attention.self.query.weight" in names
    assert [v.name for v in program.model.graph.inputs][:1] == ["input_ids"]
    # last_hidden_state and pooler_output.
    assert len(program.model.graph.outputs) == 2


def test_bert_input_ids_only() -> None:
    export_and_compare(_bert("eager"), (_ids(1, 9),), rtol=RTOL, atol=ATOL)


# -- GPT-2 (decoder) ---------------------------------------------------------------------------

def _gpt2(attn: str) -> Any:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False,
        bos_token_id=0, eos_token_id=0, attn_implementation=attn,
    )
    return _eval(transformers.GPT2LMHeadModel(config))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_lm_head(attn: str) -> None:
    model = _gpt2(attn)
    input_ids = _ids()
    program = export_and_compare(model, (input_ids,), {"use_cache": False}, rtol=RTOL, atol=ATOL)
    names = _initializer_names(program)
    assert "transformer.h.1.attn.c_attn.weight" in names
    # Only the logits: no key/value cache outputs with use_cache=False.
    (logits,) = program.model.graph.outputs
    assert list(logits.shape) == [2, 12, VOCAB]
    check_model(program)


def test_gpt2_with_attention_mask() -> None:
    model = _gpt2("eager")
    input_ids = _ids()
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0  # left padding
    export_and_compare(model, (input_ids,), {"attention_mask": attention_mask, "use_cache": False},
                       rtol=RTOL, atol=ATOL)


# -- DistilBERT --------------------------------------------------------------------------------

def test_distilbert() -> None:
    config = transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = _eval(transformers.DistilBertModel(config))
    input_ids = _ids()
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 10:] = 0
    program = export_and_compare(model, (input_ids,), {"attention_mask": attention_mask},
                                 rtol=RTOL, atol=ATOL)
    assert "transformer.layer.0.attention.q_lin.weight" in _initializer_names(program)


# -- Llama (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention) -----------------------

def test_llama_for_causal_lm() -> None:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        use_cache=False, attn_implementation="eager",
    )
    model = _eval(transformers.LlamaForCausalLM(config))
    input_ids = _ids()
    program = export_and_compare(model, (input_ids,), {"use_cache": False}, rtol=RTOL, atol=ATOL)
    assert "model.layers.1.self_attn.q_proj.weight" in _initializer_names(program)
    assert count(program, "MatMul") + count(program, "Gemm") > 0


# -- ViT (patch embedding convolution, CLS token) ----------------------------------------------

def test_vit() -> None:
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, attn_implementation="eager",
    )
    model = _eval(transformers.ViTModel(config, add_pooling_layer=True))
    pixel_values = torch.rand(2, 3, 32, 32)
    program = export_and_compare(model, (pixel_values,), rtol=RTOL, atol=ATOL)
    assert count(program, "Conv") == 1
    assert [v.name for v in program.model.graph.inputs] == ["pixel_values"]
