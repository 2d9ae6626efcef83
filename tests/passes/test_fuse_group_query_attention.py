"""FuseGroupQueryAttentionPass (ONNX Runtime target): decoders exported with a KV cache run
their attention as com.microsoft.GroupQueryAttention (rotary inside) and equal eager, including
a left-padded batch; attention whose mask is not provably causal is left alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers

import onnxport
from onnxport import llm
from onnxport.passes.onnxruntime import CONTRIB_DOMAIN
from onnxport.passes.onnxruntime.fuse_group_query_attention import FuseGroupQueryAttentionPass
from tests.passes.fusion_helpers import ops

SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def _model(family: str) -> Any:
    torch.manual_seed(0)
    if family == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL))
    else:   # Qwen2: q/k/v projections with a bias
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL))
    with torch.no_grad():     # weights of a realistic scale: logits far from flat
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model.eval()


def _session(program: onnxport.ONNXProgram) -> ort.InferenceSession:
    return ort.InferenceSession(program.model_proto.SerializeToString(),
                                providers=["CPUExecutionProvider"])


def _decode_equals_eager(model: Any, program: onnxport.ONNXProgram, steps: int = 3,
                         position_ids: bool = False) -> None:
    """Prefill of a left-padded batch of 2 (prompt lengths 7 and 4) and `steps` decode steps,
    each feeding the previous present keys/values: ORT's logits equal eager's at every real
    (unpadded) position within 1e-4, the present keys/values too, and the greedy tokens agree.
    With `position_ids`, positions count the unmasked tokens (transformers' generate)."""
    session = _session(program)
    names = [o.name for o in session.get_outputs()]
    wrapper = llm.DecoderWithCache(model).eval()
    torch.manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :3] = 0
    past = llm.empty_past(model.config, 2)
    past_np = {f"past_key_values.{i}.{kind}": t.numpy() for i, kv in enumerate(past)
               for kind, t in zip(("key", "value"), kv)}
    step = ids
    for _ in range(steps + 1):
        feed = {"input_ids": step.numpy(), "attention_mask": mask.numpy(), **past_np}
        positions = None
        if position_ids:
            positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -step.shape[1]:]
            feed["position_ids"] = positions.numpy()
        got = dict(zip(names, session.run(None, feed)))
        with torch.no_grad():
            logits, present = wrapper(step, mask, past, positions)
        real = mask[:, -step.shape[1]:].bool().numpy()
        np.testing.assert_allclose(got["logits"][real], logits.numpy()[real], atol=1e-4,
                                   rtol=1e-4)
        cols = mask.bool().numpy()
        for i, t in enumerate(present):
            name = f"present.{i // 2}.{'key' if i % 2 == 0 else 'value'}"
            for b in range(2):
                np.testing.assert_allclose(got[name][b][:, cols[b]], t.numpy()[b][:, cols[b]],
                                           atol=1e-4, rtol=1e-4)
        tokens = got["logits"][:, -1].argmax(-1)
        assert (tokens == logits[:, -1].argmax(-1).numpy()).all()
        step = torch.from_numpy(tokens[:, None])
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], dim=1)
        past = [(present[2 * i], present[2 * i + 1]) for i in range(len(present) // 2)]
        past_np = {f"past_key_values.{i}.{kind}": got[f"present.{i}.{kind}"]
                   for i in range(len(past)) for kind in ("key", "value")}


def _assert_fused(program: onnxport.ONNXProgram, layers: int, rotary: bool = True) -> None:
    counts = ops(program)
    assert counts["GroupQueryAttention"] == layers
    # qkv (packed), o, gate, up, down a layer, lm_head; q, k, v apart when rotated outside
    assert counts["MatMul"] == (5 if rotary else 7) * layers + 1
    # every residual Add + RMS norm but the first layer's input norm, though the rows are
    # dynamic: a graph with a KV cache is gated by its decode steps (fuse_skip_norm.py)
    assert counts["SkipSimplifiedLayerNormalization"] == 2 * layers
    # attention, its mask, the cache Concats, repeat_kv and the rotations are all gone
    for op in ("Attention", "Softmax", "IsNaN", "GatherND", "And", "LessOrEqual",
               *(("RotaryEmbedding", "Neg") if rotary else ())):
        assert counts[op] == 0, op
    inputs = {v.name for v in program.model.graph.inputs}
    assert not any(n.op_type == "Concat" and any(v is not None and v.name in inputs
                                                 for v in n.inputs)
                   for n in program.model.graph)       # no cache Concat left
    assert program.model.opset_imports[CONTRIB_DOMAIN] == 1
    # once-per-step work: the query length comes from its Range limit, so the query positions
    # are no longer computed; the one Range left is the cos/sin caches' Range(0, T)
    assert counts["Range"] == (1 if rotary else 0)
    for node in program.model.graph:
        if node.op_type == "GroupQueryAttention":
            assert node.domain == CONTRIB_DOMAIN
            if rotary:
                assert node.attributes["do_rotary"].as_int() == 1
            else:
                assert "do_rotary" not in node.attributes
            assert node.attributes["num_heads"].as_int() == 4
            assert node.attributes["kv_num_heads"].as_int() == 2
            assert node.inputs[10] is not None          # the padding bias
            if not rotary:
                continue
            # Q, K, V packed: one MatMul(x, Concat(Wq^T, Wk^T, Wv^T)) [+ Concat(biases)]
            assert node.inputs[1] is None and node.inputs[2] is None
            packed = node.inputs[0].producer()
            if packed.op_type == "Add":
                packed = packed.inputs[0].producer()
            assert packed.op_type == "MatMul"
            assert packed.inputs[1].producer().op_type == "Concat"
            assert "self_attn" in node.metadata_props["pkg.onnxport.module"]


@pytest.mark.parametrize("family,opset,position_ids", [
    ("llama", 18, False),     # MatMul/Softmax attention, Where(M, 0, -inf), unfused rotary
    ("qwen2", 23, False),     # Attention, RotaryEmbedding; q/k/v Linears with a bias
    ("llama", 23, True),      # positions from an input: the RotaryEmbeddings stay before GQA
])
def test_decoder_with_cache(family: str, opset: int, position_ids: bool) -> None:
    """Each layer's attention ends as one GQA node, equal to eager over a left-padded batch."""
    model = _model(family)
    program = llm.export_decoder_with_cache(model, target="onnxruntime", opset_version=opset,
                                            with_position_ids=position_ids)
    _assert_fused(program, layers=2, rotary=not position_ids)
    if position_ids:
        assert ops(program)["RotaryEmbedding"] == 4
    _decode_equals_eager(model, program, position_ids=position_ids)
    counts = ops(program)          # a second run finds nothing more to fuse
    assert not FuseGroupQueryAttentionPass()(program.model).modified and ops(program) == counts
    if not position_ids:
        _generate_equals_transformers(model, program)


def test_constant_rotary_tables() -> None:
    """max_positions=N: GQA's cos/sin caches are constant (N, D/2) tables computed at export,
    nothing computes them per step, and the decode still equals eager (left-padded batch)."""
    model = _model("llama")
    program = llm.export_decoder_with_cache(model, opset_version=23)
    assert FuseGroupQueryAttentionPass(max_positions=128)(program.model).modified
    counts = ops(program)
    assert counts["GroupQueryAttention"] == 2
    assert counts["Cos"] == counts["Sin"] == counts["Range"] == 0
    for node in program.model.graph:
        if node.op_type == "GroupQueryAttention":
            for cache in node.inputs[7:9]:
                assert cache.producer().op_type == "Constant"
                assert cache.const_value.numpy().shape == (128, 8)
    # GQA's lengths and bias read attention_mask's columns up to P + S by a Slice (which
    # clamps to the mask's length): no Min; a mask longer than P + S gives the same logits
    # (its first P + S columns, as the unfused graph's gather reads them)
    assert counts["Min"] == 0
    total = next(n for n in program.model.graph if n.op_type == "GroupQueryAttention").inputs[6]
    shape = total.producer().inputs[0].producer()
    assert shape.op_type == "Shape" and shape.inputs[0].producer().op_type == "Slice"
    session = _session(program)
    rng = np.random.default_rng(5)
    past = {i.name: rng.standard_normal((2, 2, 3, 16)).astype(np.float32)
            for i in session.get_inputs() if i.name.startswith("past_key_values.")}
    ids = rng.integers(3, 96, (2, 2))
    mask = np.ones((2, 5), np.int64)
    mask[0, 0] = 0
    exact = session.run(["logits"], {"input_ids": ids, "attention_mask": mask, **past})[0]
    longer = np.concatenate([mask, np.zeros((2, 3), np.int64)], axis=1)
    got = session.run(["logits"], {"input_ids": ids, "attention_mask": longer, **past})[0]
    np.testing.assert_array_equal(got, exact)
    _decode_equals_eager(model, program)


def _generate_equals_transformers(model: Any, program: onnxport.ONNXProgram) -> None:
    """Tokens of `llm.greedy_generate` (ORT, fused) equal transformers' generate()."""
    torch.manual_seed(2)
    ids = torch.randint(3, 96, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :2] = 0
    got = llm.greedy_generate(program, ids, 8, attention_mask=mask)
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8,
                                  eos_token_id=None, pad_token_id=0)
    assert torch.equal(got, expected)


class CacheAttention(torch.nn.Module):
    """One attention over a key/value cache. Its mask: the padding only ("padding",
    bidirectional over the cache, which GQA's causal mask would change), the padding AND a
    causal triangle written as a lower-right tril of ones ("tril", not recognized), or the
    padding AND the triangle from positions ("positions": arange(T) <= arange(S) + past, the
    triangle GQA applies; the padding is not transformers' gather, so the bias is the mask)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.q, self.k, self.v = (torch.nn.Linear(32, 32, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, past_k: torch.Tensor,
                past_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 4, 8).transpose(1, 2)
        k = torch.cat([past_k, self.k(x).view(b, s, 4, 8).transpose(1, 2)], dim=2)
        v = torch.cat([past_v, self.v(x).view(b, s, 4, 8).transpose(1, 2)], dim=2)
        keep = mask.bool()[:, None, None, :]
        t = k.shape[2]
        if self.mode == "tril":
            keep = keep & torch.ones(s, t, dtype=torch.bool).tril(t - s)
        elif self.mode == "positions":
            positions = torch.arange(s) + past_k.shape[2]
            keep = keep & (torch.arange(t)[None, None, None, :] <= positions[None, None, :, None])
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return y.transpose(1, 2).reshape(b, s, 32), k, v


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("mode", ["padding", "tril", "positions"])
def test_cache_attention_masks(opset: int, mode: str) -> None:
    """Only the mask whose causal triangle is provably GQA's is fused; the fused graph equals
    eager on a left-padded batch with a cache."""
    torch.manual_seed(0)
    model = CacheAttention(mode).eval()
    b, s, p = 2, 3, 4
    args = (torch.randn(b, s, 32), torch.ones(b, p + s, dtype=torch.long),
            torch.randn(b, 4, p, 8), torch.randn(b, 4, p, 8))
    batch, seq, past = torch.export.Dim("batch"), torch.export.Dim("seq"), torch.export.Dim("past")
    shapes = {"x": {0: batch, 1: seq}, "mask": {0: batch, 1: torch.export.Dim.AUTO},
              "past_k": {0: batch, 2: past}, "past_v": {0: batch, 2: past}}
    program = onnxport.export(model, args, dynamic_shapes=shapes, opset_version=opset)
    before = ops(program)
    result = FuseGroupQueryAttentionPass()(program.model)
    if mode != "positions":
        assert not result.modified
        assert ops(program) == before and before["GroupQueryAttention"] == 0
        return
    counts = ops(program)
    assert result.modified and counts["GroupQueryAttention"] == 1
    assert counts["Attention"] + counts["Softmax"] == 0 and counts["MatMul"] == 1  # packed qkv
    x, mask = torch.randn(2, 2, 32), torch.ones(2, 7, dtype=torch.long)
    mask[1, :3] = 0
    past_k, past_v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    got = _session(program).run(None, {"x": x.numpy(), "mask": mask.numpy(),
                                       "past_k": past_k.numpy(), "past_v": past_v.numpy()})
    with torch.no_grad():
        expected = model(x, mask, past_k, past_v)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e.numpy(), atol=1e-5, rtol=1e-5)


def test_encoder_is_unchanged() -> None:
    """A BERT-like encoder (bidirectional attention, no cache) under the ORT target: no GQA."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=4, intermediate_size=64)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 64, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    program = onnxport.export(model, (ids, mask), opset_version=23)
    before = ops(program)
    result = FuseGroupQueryAttentionPass()(program.model)
    assert not result.modified and ops(program) == before
    assert before["Attention"] + before["Softmax"] >= 1


@pytest.mark.parametrize("heads", [4, 8])   # head size 16: rotary inside GQA; 8: before it
def test_shared_kv_buffer(heads: int) -> None:
    """onnxruntime-genai's past_present_share_buffer: each step feeds one max-length buffer
    (garbage past the tokens seen) as the past and gets it back, the new keys/values written
    in place; the attention mask has the length of the tokens seen. Logits and the valid part
    of the cache equal eager's at every step, and the graph is marked shareable for
    genai_config.json."""
    from onnxport.tasks.genai import shares_kv_buffer

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        **{**SMALL, "num_attention_heads": heads})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    program = llm.export_decoder_with_cache(model, target="onnxruntime")
    assert ops(program)["GroupQueryAttention"] == 2
    assert shares_kv_buffer(program.model_proto)
    session = _session(program)
    names = [o.name for o in session.get_outputs()]
    wrapper = llm.DecoderWithCache(model).eval()
    head = 64 // heads
    size = 16                                           # the buffer's (max) length
    rng = np.random.default_rng(3)
    buffers = {f"past_key_values.{i}.{kind}": rng.standard_normal((1, 2, size, head),
                                                                  dtype=np.float32) * 50
               for i in range(2) for kind in ("key", "value")}
    past = llm.empty_past(model.config, 1)
    step = torch.randint(3, 96, (1, 5))
    seen = 0
    for _ in range(4):
        seen += step.shape[1]
        mask = torch.ones(1, seen, dtype=torch.long)
        got = dict(zip(names, session.run(None, {"input_ids": step.numpy(),
                                                 "attention_mask": mask.numpy(), **buffers})))
        with torch.no_grad():
            logits, present = wrapper(step, mask, past)
        np.testing.assert_allclose(got["logits"], logits.numpy(), atol=1e-4, rtol=1e-4)
        for i, t in enumerate(present):
            name = f"present.{i // 2}.{'key' if i % 2 == 0 else 'value'}"
            assert got[name].shape == (1, 2, size, head)
            np.testing.assert_allclose(got[name][:, :, :seen], t.numpy(), atol=1e-4, rtol=1e-4)
        buffers = {name: got[name.replace("past_key_values", "present")] for name in buffers}
        past = [(present[2 * i], present[2 * i + 1]) for i in range(2)]
        step = torch.from_numpy(got["logits"][:, -1].argmax(-1)[:, None].astype(np.int64))
