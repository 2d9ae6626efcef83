"""FuseAttentionPass: eager attention -> Attention at opset 23, repeat_kv and the head
reshapes around Attention absorbed (GQA, 3-D inputs), merged Transposes at every opset."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import onnxport
from onnxport.passes import FuseAttentionPass
from onnxport.passes import _fusion as f
from tests.passes.fusion_helpers import Wrap, assert_same, fuse, nodes_of, ops, unfused

B, S, HID, H = 2, 6, 32, 4
D = HID // H


class EagerAttention(torch.nn.Module):
    """A hand-written multi-head self-attention: q/k/v Linear, head split, softmax(QKᵀ·s + mask)V,
    head merge. `mask`: "add" (float, HF style), "bool" (masked_fill -inf), None. `kv_heads`
    below H repeats K/V heads as transformers' repeat_kv."""

    def __init__(self, mask: str | None = "add", kv_heads: int = H, scale_on: str = "scores") -> None:
        super().__init__()
        self.q = torch.nn.Linear(HID, HID)
        self.k = torch.nn.Linear(HID, kv_heads * D)
        self.v = torch.nn.Linear(HID, kv_heads * D)
        self.o = torch.nn.Linear(HID, HID)
        self.mask, self.kv_heads, self.scale_on = mask, kv_heads, scale_on

    def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, H, D).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, D).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, D).transpose(1, 2)
        if self.kv_heads != H:
            n = H // self.kv_heads
            k = k[:, :, None].expand(b, self.kv_heads, n, s, D).reshape(b, H, s, D)
            v = v[:, :, None].expand(b, self.kv_heads, n, s, D).reshape(b, H, s, D)
        if self.scale_on == "scores":
            scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)
        else:
            scores = torch.matmul(q * D ** -0.5, k.transpose(2, 3))
        if self.mask == "add":
            scores = scores + m
        elif self.mask == "bool":
            scores = scores.masked_fill(~m, torch.finfo(torch.float32).min)
        elif self.mask == "-inf":
            scores = scores.masked_fill(~m, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        y = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, HID)
        return self.o(y)


def _mask(kind: str | None) -> torch.Tensor:
    keep = torch.ones(B, 1, S, S, dtype=torch.bool).tril()
    if kind in ("bool", "-inf"):
        return keep
    return torch.zeros(B, 1, S, S).masked_fill(~keep, torch.finfo(torch.float32).min)


CASES = [("add", H, "scores"), ("bool", H, "scores"), (None, H, "query"), ("add", 2, "scores")]


@pytest.mark.parametrize("mask,kv_heads,scale_on", CASES,
                         ids=["additive-mask", "bool-mask", "no-mask-scaled-query", "gqa"])
def test_eager_attention_to_one_3d_attention(mask, kv_heads, scale_on) -> None:  # type: ignore[no-untyped-def]
    model = Wrap(EagerAttention(mask, kv_heads, scale_on))
    args = (torch.randn(B, S, HID), _mask(mask))
    before = unfused(model, args, opset=23)
    assert ops(before)["Softmax"] == 1 and ops(before)["Attention"] == 0
    after = fuse(before, FuseAttentionPass())
    got = ops(after)
    assert got["Attention"] == 1 and got["Softmax"] == 0
    assert got["Reshape"] == got["Expand"] == 0                          # 3-D in, 3-D out
    assert all(len(n.attributes["perm"].as_ints()) == 2 for n in nodes_of(after, "Transpose"))
    node = nodes_of(after, "Attention")[0]
    assert node.attributes["q_num_heads"].as_int() == H
    assert node.attributes["kv_num_heads"].as_int() == kv_heads
    assert node.metadata_props["pkg.onnxport.module"] == "norm"
    if mask is None:
        assert len(node.inputs) == 3
    assert_same(model, args, before, after)


def test_wrong_transpose_not_fused() -> None:
    """Q·K (no transpose of K's last two axes) is not attention."""

    class NotAttention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.softmax(q @ k.transpose(1, 2) * 0.3, dim=-1) @ v

    args = tuple(torch.randn(1, 4, 4, 4) for _ in range(3))
    before = unfused(NotAttention(), args, opset=23)
    after = fuse(before, FuseAttentionPass())
    assert ops(after)["Attention"] == 0
    assert_same(NotAttention(), args, before, after)


def test_minus_inf_fill_without_zero_rows_not_fused() -> None:
    """masked_fill(-inf) alone gives NaN rows where every key is masked; Attention gives 0."""
    model = EagerAttention("-inf")
    args = (torch.randn(B, S, HID), _mask("-inf"))
    before = unfused(model, args, opset=23)
    after = fuse(before, FuseAttentionPass())
    assert ops(after)["Attention"] == 0 and ops(after)["Softmax"] == 1


class SDPA(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3)


def test_opset_18_sdpa_lowering_with_zero_rows() -> None:
    """onnxport's own opset-18 lowering (Where -inf, Softmax, IsNaN/Where 0), declared at 23:
    one Attention with the boolean mask, equal on a fully masked row too."""
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    m = torch.rand(2, 1, 5, 5) > 0.4
    m[0, 0, 1] = False                                  # a row where every key is masked
    args = (q, k, v, m)
    before = unfused(Wrap(SDPA()), args)
    assert ops(before)["IsNaN"] == 1
    before.model.opset_imports[""] = 23
    before.model.graph.opset_imports[""] = 23
    after = fuse(before, FuseAttentionPass())
    assert dict(ops(after)) == {"Attention": 1}
    node = nodes_of(after, "Attention")[0]
    assert abs(node.attributes["scale"].as_float() - 0.3) < 1e-6
    assert node.inputs[3].is_graph_input()                # the boolean mask itself
    assert_same(Wrap(SDPA()), args, before, after)


def test_probabilities_reused_not_fused() -> None:
    class Returned(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):  # type: ignore[no-untyped-def]
            p = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
            return p @ v, p

    args = tuple(torch.randn(1, 2, 4, 8) for _ in range(3))
    before = unfused(Returned(), args, opset=23)
    after = fuse(before, FuseAttentionPass())
    assert ops(after)["Attention"] == 0
    assert_same(Returned(), args, before, after)


def _hf(kind: str, attn: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    if kind == "llama":
        from transformers import LlamaConfig, LlamaModel
        cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                          use_cache=False, attn_implementation=attn)
        return LlamaModel(cfg).eval(), {"input_ids": torch.randint(0, 100, (1, 16))}
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, vocab_size=100, attn_implementation=attn)
    ids = torch.randint(0, 100, (1, 16))
    return BertModel(cfg).eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@pytest.mark.parametrize("kind", ["bert", "llama"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_transformers_models_at_opset_23(kind: str, attn: str) -> None:
    model, inputs = _hf(kind, attn)
    program = onnxport.export(model, (), kwargs=inputs, opset_version=23)
    got = ops(program)
    assert got["Attention"] == 2 and got["Softmax"] == 0 and got["Expand"] == 0
    for node in nodes_of(program, "Attention"):
        # q/k/v straight from the Linears (Llama: rotated in 3-D), output straight to o_proj
        assert node.attributes["q_num_heads"].as_int() == 4
        assert node.attributes["kv_num_heads"].as_int() == (4 if kind == "bert" else 2)
        assert all(f.rank(v) == 3 for v in node.inputs[:3])
    if kind == "llama":
        rotations = nodes_of(program, "RotaryEmbedding")
        assert len(rotations) == 4
        assert all(len(n.attributes["perm"].as_ints()) == 2 for n in nodes_of(program, "Transpose"))
        assert {n.attributes["num_heads"].as_int() for n in rotations} == {4, 2}
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
    torch.testing.assert_close(program(**inputs)[0], expected, rtol=1e-4, atol=1e-4)


def test_opset_18_merges_the_key_transposes() -> None:
    model, inputs = _hf("bert", "sdpa")
    before = onnxport.export(model, (), kwargs=inputs, optimize=False)
    from onnxport.passes import default_passes, run_passes
    run_passes(before.model, [p for p in default_passes() if not isinstance(p, FuseAttentionPass)])
    after = fuse(before, FuseAttentionPass())
    assert ops(before)["Transpose"] - ops(after)["Transpose"] == 2      # one per layer
    perms = {tuple(n.attributes["perm"].as_ints()) for n in nodes_of(after, "Transpose")}
    assert (0, 2, 3, 1) in perms
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
    torch.testing.assert_close(after(**inputs)[0], expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(after(**inputs)[0], before(**inputs)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask", ["add", "bool", None])
def test_opset_18_grouped_heads_without_repeat(mask: str | None) -> None:
    """Below opset 23, GQA attention multiplies the query, viewed as (B, Hkv, n * S, D), by
    the kv heads themselves: repeat_kv's Unsqueeze/Expand/Reshape go, a causal mask is tiled
    once along the query axis."""
    torch.manual_seed(0)
    model = EagerAttention(mask, kv_heads=2)
    args = (torch.randn(B, S, HID), _mask(mask) if mask else torch.zeros(B, 1, S, S))
    before = unfused(model, args)
    assert ops(before)["Expand"] == 2
    after = fuse(before, FuseAttentionPass())
    got = ops(after)
    assert got["Expand"] == 0 and got["Unsqueeze"] == 0 and got["Tile"] == (mask is not None)
    assert got["Reshape"] == ops(before)["Reshape"]     # two views in, two repeat_kv out
    assert_same(model, args, before, after)


def test_opset_18_grouped_heads_dynamic_and_empty_batch() -> None:
    """The query view has no -1 (ONNX Runtime cannot infer it for an empty batch): dynamic
    batch and sequence, and a batch of 0, still equal eager."""
    torch.manual_seed(0)
    model = EagerAttention("add", kv_heads=2).eval()
    args = (torch.randn(B, S, HID), torch.zeros(B, 1, S, S))
    program = onnxport.export(model, args, dynamic_shapes=({0: "b", 1: "s"},
                                                           {0: "b", 2: "s", 3: "s"}))
    assert ops(program)["Expand"] == 0 and ops(program)["Tile"] == 1   # the (B, 1, S, S) mask
    for b, s in [(0, 3), (1, 4), (3, 7)]:
        x, m = torch.randn(b, s, HID), torch.randn(b, 1, s, s)
        with torch.no_grad():
            expected = model(x, m)
        torch.testing.assert_close(program(x, m)[0], expected, rtol=1e-5, atol=1e-5)


def test_opset_18_per_head_mask_keeps_repeat() -> None:
    """A mask that differs per query head cannot be shared by a kv head's group: unchanged."""
    torch.manual_seed(0)
    model = EagerAttention("add", kv_heads=2)
    args = (torch.randn(B, S, HID), torch.randn(B, H, S, S))
    before = unfused(model, args)
    after = fuse(before, FuseAttentionPass())
    assert ops(after)["Expand"] == 2
    assert_same(model, args, before, after)


def _repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    b, h, s, d = x.shape
    return x if n == 1 else x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_opset_18_zero_rows_by_a_multiply(kv_heads: int) -> None:
    """Below opset 23, a boolean mask known only at run time: the additive mask's fill is the
    lowest float32 (not -inf) and the IsNaN/Where on the probabilities becomes one Mul of the
    output by the rows that keep a key (computed once): equal to eager on a fully masked row
    (zeros) and on the others, for two attentions sharing the mask."""

    class Twice(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k2: torch.Tensor,
                    v2: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
            sdpa = torch.nn.functional.scaled_dot_product_attention
            k, v, k2, v2 = (_repeat_kv(t, q.shape[1] // t.shape[1]) for t in (k, v, k2, v2))
            y = sdpa(q, k, v, attn_mask=m)
            return sdpa(y, k2, v2, attn_mask=m)

    torch.manual_seed(0)
    q = torch.randn(2, 4, 5, 8)
    k, v, k2, v2 = (torch.randn(2, kv_heads, 5, 8) for _ in range(4))
    m = torch.rand(2, 1, 5, 5) > 0.4
    m[:, :, :, 0] = True
    m[0, 0, 1] = False                                  # a row where every key is masked
    args = (q, k, v, k2, v2, m)
    before = unfused(Wrap(Twice()), args)
    assert ops(before)["IsNaN"] == 2
    after = fuse(before, FuseAttentionPass())
    got = ops(after)
    assert got["IsNaN"] == 0 and got["ReduceMax"] == 1 and got["Softmax"] == 2
    values = [n.attributes["value"].as_tensor().numpy() for n in nodes_of(after, "Constant")
              if n.outputs[0].uses()]
    assert not any(np.isinf(x).any() for x in values if x.dtype == np.float32)
    assert_same(Wrap(Twice()), args, before, after)
    with torch.no_grad():
        expected = Twice()(*args)
    out = after(*args)[0]
    assert (out[0, :, 1] == 0).all() and (expected[0, :, 1] == 0).all()


@pytest.mark.parametrize("family,position_ids", [("llama", False), ("qwen2", False),
                                                 ("llama", True)])
def test_cache_as_past_inputs_at_opset_23(family: str, position_ids: bool) -> None:
    """A decoder with a KV cache: each layer is one 3-D Attention reading the cache as
    past_key / past_value (its presents are the graph's), the rotations in 3-D, and the
    decode steps of a left-padded batch equal eager."""
    from onnxport import llm
    from tests.passes.test_fuse_group_query_attention import _decode_equals_eager, _model

    model = _model(family)
    program = llm.export_decoder_with_cache(model, opset_version=23,
                                            with_position_ids=position_ids)
    attentions = nodes_of(program, "Attention")
    assert len(attentions) == 2
    outputs = {v.name for v in program.model.graph.outputs}
    inputs = {v.name for v in program.model.graph.inputs}
    for i, node in enumerate(attentions):
        assert [v.name for v in node.inputs[4:]] == [f"past_key_values.{i}.key",
                                                     f"past_key_values.{i}.value"]
        assert node.inputs[4].name in inputs
        assert [v.name for v in node.outputs[1:]] == [f"present.{i}.key", f"present.{i}.value"]
        assert {v.name for v in node.outputs[1:]} <= outputs
        assert all(f.rank(v) == 3 for v in node.inputs[:3]) and f.rank(node.outputs[0]) == 3
    assert not any(any(v is not None and v.name in inputs for v in n.inputs)
                   for n in nodes_of(program, "Concat"))          # no cache Concat left
    assert {n.attributes["num_heads"].as_int() for n in nodes_of(program, "RotaryEmbedding")} \
        == {4, 2}
    _decode_equals_eager(model, program, position_ids=position_ids)
    if not position_ids:    # a graph reading a cache: its norms are gated as decode steps
        from onnxport.passes.onnxruntime.fuse_skip_norm import FuseSkipNormPass
        FuseSkipNormPass(max_elements=512, layer_norm=False, decode_rows=True)(program.model)
        assert ops(program)["SkipSimplifiedLayerNormalization"] == 4
        _decode_equals_eager(model, program)


class PackedAttention(torch.nn.Module):
    """timm's ViT Attention: one qkv Linear, reshape (B, N, 3, H, D), permute (2, 0, 3, 1, 4),
    unbind(0), F.scaled_dot_product_attention without a mask, head merge, proj."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(HID, 3 * HID)
        self.proj = torch.nn.Linear(HID, HID)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


def test_unmasked_sdpa_loses_the_zero_rows_guard() -> None:
    """No mask: no NaN row from finite scores, so the IsNaN/Where after the Softmax goes
    (ViT-S/16 and DeiT-S/16 of timm, benchmarks/bench_latency.py --vision)."""
    model = Wrap(PackedAttention())
    args = (torch.randn(B, S, HID),)
    before = unfused(model, args, opset=20)
    assert ops(before)["IsNaN"] == 1
    after = fuse(before, FuseAttentionPass())
    assert ops(after)["IsNaN"] == 0 and ops(after)["Where"] == 0 and ops(after)["Softmax"] == 1
    assert_same(model, args, before, after)


def test_masked_sdpa_keeps_the_zero_rows_guard() -> None:
    """A runtime boolean mask may mask every key of a row: its zero rows stay (as a Mul)."""
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    m = torch.rand(2, 1, 5, 5) > 0.4
    m[0, 0, 1] = False
    args = (q, k, v, m)
    before = unfused(Wrap(SDPA()), args, opset=20)
    after = fuse(before, FuseAttentionPass())
    assert ops(after)["ReduceMax"] == 1
    assert_same(Wrap(SDPA()), args, before, after)


@pytest.mark.parametrize("opset", [20, 23])
def test_packed_heads_split_as_separate_projections(opset: int) -> None:
    """timm's qkv -> reshape (B, N, 3, H, D) -> permute (2, 0, 3, 1, 4) -> unbind: a Split of
    the projection into three head splits, no 5-D Transpose; at opset 23 one 3-D Attention."""
    model = Wrap(PackedAttention())
    args = (torch.randn(1, S, HID),)
    before = unfused(model, args, opset=opset)
    assert ops(before)["Squeeze"] == 3
    after = fuse(before, FuseAttentionPass())
    got = ops(after)
    assert got["Squeeze"] == 0 and got["Split"] == 1
    assert all(len(n.attributes["perm"].as_ints()) < 5 for n in nodes_of(after, "Transpose"))
    if opset == 23:
        node = nodes_of(after, "Attention")[0]
        assert got["Attention"] == 1 and all(f.rank(v) == 3 for v in node.inputs[:3])
    assert_same(model, args, before, after)
