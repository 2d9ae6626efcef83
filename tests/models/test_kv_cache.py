"""Decoder-only LMs exported with a key/value cache (onnxport.llm), and greedy decoding in ORT.

Tiny Llama and GPT-2 from configs (random weights, no downloads). Single steps are compared
with eager at rtol=1e-3, atol=1e-4, as in test_transformers_models.py (tens of chained
matmuls, norms and softmaxes accumulate in another order in ORT); generation must produce
exactly the tokens of eager `model.generate(do_sample=False)`.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from onnxport import llm
from tests.helpers import check_model

RTOL, ATOL = 1e-3, 1e-4
VOCAB = 99
NUM_LAYERS = 2


def _llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=NUM_LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(config).eval()


def _gpt2() -> Any:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=NUM_LAYERS, n_head=4, n_positions=128,
        bos_token_id=0, eos_token_id=0, pad_token_id=0, attn_implementation="eager")
    return transformers.GPT2LMHeadModel(config).eval()


MODELS = {"llama": _llama, "gpt2": _gpt2}
# GPT-2's absolute position embeddings need generate's positions for left-padded batches.
WITH_POSITION_IDS = {"llama": False, "gpt2": True}
# (kv_heads, head_dim) of each model's cache.
GEOMETRY = {"llama": (2, 8), "gpt2": (4, 8)}


@pytest.fixture(scope="module", params=list(MODELS))
def exported(request: Any) -> tuple[str, Any, Any]:
    torch.manual_seed(0)
    model = MODELS[request.param]()
    program = llm.export_decoder_with_cache(
        model, with_position_ids=WITH_POSITION_IDS[request.param])
    return request.param, model, program


def test_names_and_dims(exported: tuple[str, Any, Any]) -> None:
    name, _, program = exported
    check_model(program)
    graph = program.model.graph
    assert [v.name for v in graph.inputs] == llm.cache_input_names(
        NUM_LAYERS, with_position_ids=WITH_POSITION_IDS[name])
    assert [v.name for v in graph.outputs] == llm.cache_output_names(NUM_LAYERS)
    heads, head_dim = GEOMETRY[name]
    shapes = {v.name: [str(d) for d in v.shape] for v in [*graph.inputs, *graph.outputs]}
    assert shapes["input_ids"] == ["batch", "sequence"]
    assert shapes["attention_mask"] == ["batch", "total_sequence"]
    assert shapes["past_key_values.1.value"] == ["batch", str(heads), "past_sequence", str(head_dim)]
    assert shapes["logits"] == ["batch", "sequence", str(VOCAB)]
    assert shapes["present.0.key"] == ["batch", str(heads), "past_sequence + sequence",
                                       str(head_dim)]
    # The weights stay initializers under the model's own state_dict keys.
    _, model, _ = exported
    assert len(graph.initializers) > 0
    # (plus non-persistent buffers such as rotary inv_freq, which state_dict leaves out).
    assert set(graph.initializers) <= set(model.state_dict()) | {n for n, _ in model.named_buffers()}


@pytest.mark.parametrize(("batch", "sequence", "past_sequence"),
                         [(2, 3, 4), (1, 6, 0), (3, 1, 9)])
def test_step_matches_eager(exported: tuple[str, Any, Any], batch: int, sequence: int,
                            past_sequence: int) -> None:
    """One forward step at shapes other than the export's, an empty past included."""
    name, model, program = exported
    input_ids = torch.randint(0, VOCAB, (batch, sequence))
    mask = torch.ones(batch, past_sequence + sequence, dtype=torch.long)
    past = [(torch.randn(k.shape), torch.randn(v.shape))
            for k, v in llm.empty_past(model.config, batch, past_sequence)]
    args: tuple[Any, ...] = (input_ids, mask, past)
    if WITH_POSITION_IDS[name]:
        args += (torch.arange(past_sequence, past_sequence + sequence).repeat(batch, 1),)
    wrapper = llm.DecoderWithCache(model)
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(wrapper(*args))
    actual = program(*args)
    assert len(actual) == 1 + 2 * NUM_LAYERS
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=RTOL, atol=ATOL)


def test_greedy_generation_matches_generate(exported: tuple[str, Any, Any]) -> None:
    _, model, program = exported
    prompt = torch.randint(3, VOCAB, (2, 5))
    # No stop token: all 20 steps run, whatever tokens the random weights favour.
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                  max_new_tokens=20, eos_token_id=None,
                                  pad_token_id=model.config.pad_token_id)
    actual = llm.greedy_generate(program, prompt, max_new_tokens=20)
    assert actual.shape == (2, 25)
    assert torch.equal(actual, expected)


def test_greedy_generation_left_padded(exported: tuple[str, Any, Any]) -> None:
    _, model, program = exported
    prompt = torch.randint(3, VOCAB, (2, 6))
    mask = torch.ones_like(prompt)
    prompt[1, :2] = model.config.pad_token_id
    mask[1, :2] = 0
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=mask, do_sample=False, max_new_tokens=20,
                                  eos_token_id=None, pad_token_id=model.config.pad_token_id)
    actual = llm.greedy_generate(program, prompt, max_new_tokens=20, attention_mask=mask)
    assert torch.equal(actual, expected)


def test_greedy_generation_with_stop_token(exported: tuple[str, Any, Any]) -> None:
    """Stop on a token the model produces, so finished rows are padded as transformers does."""
    _, model, program = exported
    prompt = torch.randint(3, VOCAB, (2, 5))
    free = llm.greedy_generate(program, prompt, max_new_tokens=20)
    eos = int(free[0, 8])  # the fourth generated token of the first row
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                  max_new_tokens=20, eos_token_id=eos, pad_token_id=1)
    actual = llm.greedy_generate(program, prompt, max_new_tokens=20, eos_token_id=eos,
                                 pad_token_id=1)
    assert torch.equal(actual, expected)


def test_names_helpers() -> None:
    assert llm.cache_input_names(2)[2:] == [
        "past_key_values.0.key", "past_key_values.0.value",
        "past_key_values.1.key", "past_key_values.1.value"]
    assert llm.cache_input_names(1, with_position_ids=True)[-1] == "position_ids"
    assert llm.cache_output_names(1) == ["logits", "present.0.key", "present.0.value"]
