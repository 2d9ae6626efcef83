"""FuseRotaryPass on rotary embeddings exported from real modules: transformers' Llama
`apply_rotary_pos_emb` (cos/sin computed from position_ids) and the older form that gathers
cos/sin rows of a constant cache by position_ids -> RotaryEmbedding at opset 23."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from onnxport.passes.fuse_rotary import FuseRotaryPass
from tests.passes.fusion_helpers import assert_same, fuse, nodes_of, ops, unfused


class LlamaRope(torch.nn.Module):
    """transformers' Llama rotary: cos/sin = cos/sin(cat(f, f)), f = position_ids x inv_freq."""

    def __init__(self) -> None:
        super().__init__()
        self.rope = LlamaRotaryEmbedding(LlamaConfig(hidden_size=64, num_attention_heads=4,
                                                     num_key_value_heads=2))

    def forward(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cos, sin = self.rope(q, pos)
        return apply_rotary_pos_emb(q, k, cos, sin)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class CachedRope(torch.nn.Module):
    """Rows of constant cos/sin caches gathered by position_ids (older transformers models)."""

    def __init__(self, d: int = 16, positions: int = 32) -> None:
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(positions).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    def forward(self, q: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_cached[pos].unsqueeze(1), self.sin_cached[pos].unsqueeze(1)
        return q * cos + _rotate_half(q) * sin


class LearnedCos(torch.nn.Module):
    """Looks like rotary, but cos/sin halves differ: RotaryEmbedding would be wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.c = torch.nn.Parameter(torch.randn(2, 5, 16))
        self.s = torch.nn.Parameter(torch.randn(2, 5, 16))

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return q * self.c.unsqueeze(1) + _rotate_half(q) * self.s.unsqueeze(1)


Q, K = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16)
POS = torch.tensor([[0, 1, 2, 3, 4], [3, 4, 5, 6, 7]])


def test_llama_rotate_half_opset23() -> None:
    model, args = LlamaRope(), (Q, K, POS)
    before = unfused(model, args, opset=23)
    assert ops(before)["Neg"] == 2 and ops(before)["RotaryEmbedding"] == 0
    after = fuse(before, FuseRotaryPass())
    got = ops(after)
    assert got["RotaryEmbedding"] == 2 and got["Neg"] == 0 and got["Add"] == 0
    for node in nodes_of(after, "RotaryEmbedding"):
        assert node.attributes["interleaved"].as_int() == 0
        assert list(node.inputs[1].shape) == [2, 5, 8]      # (batch, seq, d/2), no position_ids
        assert len(node.inputs) == 3
    # q and k share one half-cos and one half-sin Slice
    assert nodes_of(after, "RotaryEmbedding")[0].inputs[1] is nodes_of(after, "RotaryEmbedding")[1].inputs[1]
    assert_same(model, args, before, after)


def test_gathered_cache_opset23() -> None:
    model, args = CachedRope(), (Q, POS)
    before = unfused(model, args, opset=23)
    after = fuse(before, FuseRotaryPass())
    assert ops(after)["RotaryEmbedding"] == 1 and ops(after)["Neg"] == 0
    assert_same(model, args, before, after)


@pytest.mark.parametrize("make", [LlamaRope, CachedRope, LearnedCos], ids=["llama", "cache", "learned"])
def test_below_23_negation_folded_into_the_sine(make) -> None:  # type: ignore[no-untyped-def]
    """Below opset 23 no RotaryEmbedding: rotate_half's Neg goes into one signed sine shared
    by q and k, its two Slices become one Split; exact, whatever the cos/sin halves hold."""
    model = make()
    args = {LlamaRope: (Q, K, POS), CachedRope: (Q, POS), LearnedCos: (Q,)}[make]
    rotations = 2 if make is LlamaRope else 1
    before = unfused(model, args, opset=18)
    assert ops(before)["Neg"] == rotations and ops(before)["Slice"] >= 2 * rotations
    after = fuse(before, FuseRotaryPass())
    got = ops(after)
    assert got["RotaryEmbedding"] == 0 and got["Neg"] == 0 and got["Split"] == rotations
    assert got["Slice"] == ops(before)["Slice"] - 2 * rotations
    if make is LlamaRope:    # one signed sine for q and k
        assert got["Mul"] == ops(before)["Mul"] + 1
    assert_same(model, args, before, after)
    for a, b in zip(after(*args), before(*args)):     # bit for bit: a sign flip is exact
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_unequal_halves_not_fused() -> None:
    model, args = LearnedCos(), (Q,)
    before = unfused(model, args, opset=23)
    after = fuse(before, FuseRotaryPass())
    assert ops(after)["RotaryEmbedding"] == 0 and ops(after)["Neg"] == 1
    assert_same(model, args, before, after)


def test_positions_shared_by_the_batch_expanded() -> None:
    """Llama without position_ids: cos/sin of shape (1, seq, d), expanded to x's batch."""
    model, args = LlamaRope(), (Q, K, POS[:1])
    before = unfused(model, args, opset=23)
    after = fuse(before, FuseRotaryPass())
    assert ops(after)["RotaryEmbedding"] == 2 and ops(after)["Neg"] == 0
    assert ops(after)["Expand"] == 2                        # one for cos, one for sin
    assert list(nodes_of(after, "RotaryEmbedding")[0].inputs[1].shape) == [2, 5, 8]
    assert_same(model, args, before, after)


class InterleavedRope(torch.nn.Module):
    """GPT-J's rotate_every_two: pairs (x[2i], x[2i+1]) rotated, cos/sin repeated in pairs."""

    def __init__(self, d: int = 16, positions: int = 32, pairs: bool = True) -> None:
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(positions).float(), inv)
        spread = (lambda t: t.repeat_interleave(2, -1)) if pairs else (lambda t: torch.cat((t, t), -1))
        self.register_buffer("cos_cached", spread(freqs.cos()))
        self.register_buffer("sin_cached", spread(freqs.sin()))

    def forward(self, q: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_cached[pos].unsqueeze(1), self.sin_cached[pos].unsqueeze(1)
        rot = torch.stack((-q[..., 1::2], q[..., ::2]), dim=-1).flatten(-2)
        return q * cos + rot * sin


def test_interleaved_opset23() -> None:
    model, args = InterleavedRope(), (Q, POS)
    before = unfused(model, args, opset=23)
    after = fuse(before, FuseRotaryPass())
    assert ops(after)["RotaryEmbedding"] == 1 and ops(after)["Neg"] == 0
    assert nodes_of(after, "RotaryEmbedding")[0].attributes["interleaved"].as_int() == 1
    assert_same(model, args, before, after)


def test_interleaved_rotation_with_half_layout_cache_not_fused() -> None:
    """Pairs rotated but cos/sin laid out in halves: neither RotaryEmbedding form computes it."""
    model, args = InterleavedRope(pairs=False), (Q, POS)
    before = unfused(model, args, opset=23)
    after = fuse(before, FuseRotaryPass())
    assert ops(after)["RotaryEmbedding"] == 0
    assert_same(model, args, before, after)


def test_default_passes_llama_decoder_with_cache_opset23() -> None:
    """In the default pipeline at opset 23: every q/k rotation of a Llama decoder with a KV
    cache (dynamic shapes) becomes RotaryEmbedding, and greedy tokens equal generate()."""
    import transformers

    from onnxport import llm

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).eval()
    program = llm.export_decoder_with_cache(model, opset_version=23)
    assert ops(program)["RotaryEmbedding"] == 4 and ops(program)["Neg"] == 0
    prompt = torch.randint(3, 99, (2, 5))
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                  max_new_tokens=8, eos_token_id=None, pad_token_id=0)
    assert torch.equal(llm.greedy_generate(program, prompt, max_new_tokens=8), expected)
