"""torch.onnx.ops (attention, rotary_embedding, symbolic, symbolic_multi_out) export.

At opset 23 each becomes the ONNX node it stands for; at opset 18 Attention and
RotaryEmbedding are decomposed. Every case runs in ONNX Runtime and is compared with eager
PyTorch at torch's default tolerances.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import onnx
import pytest
import torch
import torch.nn.functional as F
import torch.onnx.ops  # noqa: F401  (defines torch.ops.onnx.* and torch.ops.onnx_symbolic.*)

import onnxport
from tests.helpers import Fn, count, export_and_compare, op_types

OPSETS = [18, 23]


def _attention(**kwargs: Any) -> Fn:
    return Fn(lambda *a: torch.onnx.ops.attention(*a, **kwargs))


def _check_node(program: onnxport.ONNXProgram, opset: int, op_type: str) -> None:
    if opset >= 23:
        assert op_types(program) == [op_type], op_types(program)
    else:
        assert count(program, op_type) == 0


def _qkv(hq: int = 4, hkv: int = 4, lq: int = 5, lkv: int = 7, e: int = 8) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(2, hq, lq, e), torch.randn(2, hkv, lkv, e), torch.randn(2, hkv, lkv, e)


# -- Attention -----------------------------------------------------------------------------------

def test_attention_opset_23_is_one_attention_node_and_matches_eager() -> None:
    """The done-bar: one Attention node, same outputs as eager in ONNX Runtime."""
    q, k, v = _qkv()
    program = export_and_compare(_attention(), (q, k, v), opset_version=23)
    assert op_types(program) == ["Attention"]
    node = next(iter(program.model.graph))
    assert len(node.outputs) == 4
    assert program.model.opset_imports[""] == 23


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_4d_gqa_causal(opset: int) -> None:
    q, k, v = _qkv(hq=6, hkv=2, lq=7, lkv=7)
    program = export_and_compare(_attention(is_causal=True), (q, k, v), opset_version=opset)
    _check_node(program, opset, "Attention")


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_mqa_cross_lengths_and_scale(opset: int) -> None:
    q, k, v = _qkv(hq=4, hkv=1, lq=3, lkv=9)
    program = export_and_compare(_attention(scale=0.2), (q, k, v), opset_version=opset)
    _check_node(program, opset, "Attention")


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_3d_with_head_counts(opset: int) -> None:
    torch.manual_seed(0)
    # (v_head_size = head_size: torch's fake kernel gives present_value and a 3-D Y the key's
    # head size, so a different v_head_size would carry wrong FX shapes.)
    q, k, v = torch.randn(2, 5, 32), torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    program = export_and_compare(_attention(q_num_heads=4, kv_num_heads=2), (q, k, v),
                                 opset_version=opset)
    _check_node(program, opset, "Attention")
    node = next(n for n in program.model.graph if n.op_type == "Attention") if opset >= 23 else None
    if node is not None:
        assert node.attributes["q_num_heads"].as_int() == 4
        assert node.attributes["kv_num_heads"].as_int() == 2


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_bool_mask_with_fully_masked_row(opset: int) -> None:
    q, k, v = _qkv(hq=4, hkv=2)
    mask = torch.rand(5, 7) > 0.4
    mask[:, 0] = True
    mask[3] = False  # a fully masked row: zeros, in eager and in the ONNX definition
    program = export_and_compare(_attention(), (q, k, v, mask), opset_version=opset)
    _check_node(program, opset, "Attention")


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_float_mask(opset: int) -> None:
    q, k, v = _qkv()
    mask = torch.randn(2, 1, 5, 7)
    program = export_and_compare(_attention(), (q, k, v, mask), opset_version=opset)
    _check_node(program, opset, "Attention")


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_past_key_value(opset: int) -> None:
    q, k, v = _qkv(hq=4, hkv=2, lq=3, lkv=3)
    past_k, past_v = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    program = export_and_compare(_attention(), (q, k, v, None, past_k, past_v), opset_version=opset)
    _check_node(program, opset, "Attention")


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_past_with_causal_follows_the_onnx_definition(opset: int) -> None:
    """With past_key, ONNX-23 aligns the causal mask to the end of the cache: query i attends
    key j iff j <= i + past_length. (torch's eager kernel for this op aligns it top-left, i.e.
    disagrees with the spec and ONNX Runtime; the reference is eager with the spec's mask.)"""
    q, k, v = _qkv(hq=4, hkv=2, lq=3, lkv=3)
    past_k, past_v = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    program = onnxport.export(_attention(is_causal=True), (q, k, v, None, past_k, past_v),
                              opset_version=opset)
    _check_node(program, opset, "Attention")
    spec_mask = torch.arange(9)[None, :] <= torch.arange(3)[:, None] + 6
    expected = torch.onnx.ops.attention(q, k, v, spec_mask, past_k, past_v)
    for got, want in zip(program(q, k, v, None, past_k, past_v), expected):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_softcap_and_qk_softmax_output(opset: int) -> None:
    """softcap without a mask (torch's eager kernel applies it after the mask, ONNX-23
    before; without a mask both agree) and qk_matmul_output_mode=3 (the softmax)."""
    q, k, v = _qkv()
    program = export_and_compare(_attention(softcap=2.5, qk_matmul_output_mode=3), (q, k, v),
                                 opset_version=opset)
    _check_node(program, opset, "Attention")


@pytest.mark.parametrize("opset", OPSETS)
def test_attention_only_output_read(opset: int) -> None:
    q, k, v = _qkv()
    program = export_and_compare(Fn(lambda q, k, v: torch.onnx.ops.attention(q, k, v)[0] * 2),
                                 (q, k, v), opset_version=opset)
    if opset >= 23:
        node = next(n for n in program.model.graph if n.op_type == "Attention")
        assert len(node.outputs) == 1


# -- RotaryEmbedding -----------------------------------------------------------------------------

def _caches(positions: int, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    theta = torch.arange(positions)[:, None] * (10000 ** (-torch.arange(half) / half))[None]
    return theta.cos(), theta.sin()


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_4d_position_ids(opset: int, interleaved: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 8)
    cos, sin = _caches(16, 4)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 9, 11, 13, 15]])
    m = Fn(lambda x, c, s, p: torch.onnx.ops.rotary_embedding(x, c, s, p, interleaved=interleaved))
    program = export_and_compare(m, (x, cos, sin, pos), opset_version=opset)
    _check_node(program, opset, "RotaryEmbedding")


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_3d_partial_without_position_ids(opset: int, interleaved: bool) -> None:
    """3-D input with num_heads, rotary_embedding_dim < head size, (B, S, R/2) caches."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 4 * 10)
    cos, sin = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    m = Fn(lambda x, c, s: torch.onnx.ops.rotary_embedding(
        x, c, s, interleaved=interleaved, num_heads=4, rotary_embedding_dim=6))
    program = export_and_compare(m, (x, cos, sin), opset_version=opset)
    _check_node(program, opset, "RotaryEmbedding")
    if opset >= 23:
        node = next(iter(program.model.graph))
        assert node.attributes["num_heads"].as_int() == 4
        assert node.attributes["rotary_embedding_dim"].as_int() == 6


def test_rotary_then_attention_at_opset_23() -> None:
    torch.manual_seed(0)
    q, k, v = _qkv(hq=4, hkv=2, lq=6, lkv=6)
    cos, sin = _caches(6, 4)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(6).expand(2, 6)
        q = torch.onnx.ops.rotary_embedding(q, cos, sin, pos)
        k = torch.onnx.ops.rotary_embedding(k, cos, sin, pos)
        return torch.onnx.ops.attention(q, k, v, is_causal=True)[0]

    program = export_and_compare(Fn(fn), (q, k, v), opset_version=23)
    assert count(program, "RotaryEmbedding") == 2 and count(program, "Attention") == 1


# -- symbolic ------------------------------------------------------------------------------------

def test_symbolic_standard_op_runs_in_ort() -> None:
    """symbolic("Gelu", approximate="tanh") is a Gelu node (opset 20); the eager op returns
    zeros, so the reference is F.gelu."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.onnx.ops.symbolic("Gelu", (x + 1,), {"approximate": "tanh"}, dtype=x.dtype,
                                    shape=x.shape, version=20, metadata_props={"k": "v"})
        return y * 2

    program = onnxport.export(Fn(fn), (x,), opset_version=20)
    node = next(n for n in program.model.graph if n.op_type == "Gelu")
    assert node.domain == "" and node.attributes["approximate"].as_string() == "tanh"
    assert node.metadata_props["k"] == "v"
    onnx.checker.check_model(program.model_proto, full_check=True)
    torch.testing.assert_close(program(x)[0], F.gelu(x + 1, approximate="tanh") * 2)


def test_symbolic_attribute_kinds_and_optional_inputs() -> None:
    """Int, float, string, int-list and bool attributes; a None input in the middle; an
    attribute name ending like a legacy suffix (`axes_i`) is kept verbatim."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.onnx.ops.symbolic("LeakyRelu", (x,), {"alpha": 0.25}, dtype=x.dtype, shape=x.shape)
        z = torch.onnx.ops.symbolic("Transpose", (y,), {"perm": [2, 0, 1]}, dtype=x.dtype,
                                    shape=(3, 2, 6))
        w = torch.onnx.ops.symbolic("ReduceSum", (z, None), {"keepdims": False}, dtype=x.dtype,
                                    shape=())
        return z, w

    program = onnxport.export(Fn(fn), (x,), opset_version=18)
    y = F.leaky_relu(x, 0.25).permute(2, 0, 1)
    got = program(x)
    torch.testing.assert_close(got[0], y)
    torch.testing.assert_close(got[1], y.sum())
    reduce = next(n for n in program.model.graph if n.op_type == "ReduceSum")
    assert reduce.attributes["keepdims"].as_int() == 0


def test_symbolic_custom_domain_multi_out() -> None:
    """A custom-domain node with two outputs: domain, op type, attributes, output count and
    dtypes/shapes from the FX metadata; the opset import of the domain takes `version`."""
    x = torch.randn(2, 3)

    def fn(x: torch.Tensor) -> Any:
        a, b = torch.onnx.ops.symbolic_multi_out(
            "custom.domain::Split2", (x,), {"names": ["p", "q"], "axes_i": 1, "ratios": [0.5, 0.5]},
            dtypes=(x.dtype, torch.int64), shapes=(x.shape, [4]), version=3)
        return a, b

    program = onnxport.export(Fn(fn), (x,), opset_version=18)
    node = next(n for n in program.model.graph if n.op_type == "Split2")
    assert node.domain == "custom.domain" and len(node.outputs) == 2
    assert list(node.attributes["names"].as_strings()) == ["p", "q"]
    assert node.attributes["axes_i"].as_int() == 1
    assert list(node.attributes["ratios"].as_floats()) == [0.5, 0.5]
    assert program.model.opset_imports["custom.domain"] == 3
    outs = program.model.graph.outputs
    assert outs[0].dtype == onnx_ir_float() and list(outs[0].shape) == [2, 3]
    assert list(outs[1].shape) == [4]


def onnx_ir_float() -> Any:
    import onnx_ir as ir
    return ir.DataType.FLOAT


def test_symbolic_standard_op_multi_out_runs_in_ort() -> None:
    """symbolic_multi_out("TopK") gives both outputs, values and int64 indices."""
    torch.manual_seed(0)
    x = torch.randn(3, 7)

    def fn(x: torch.Tensor) -> Any:
        k = torch.tensor([2])
        return torch.onnx.ops.symbolic_multi_out("TopK", (x, k), {"axis": 1}, dtypes=(x.dtype, torch.int64),
                                                 shapes=((3, 2), (3, 2)))

    program = onnxport.export(Fn(fn), (x,), opset_version=18)
    values, indices = program(x)
    ref = torch.topk(x, 2, dim=1)
    torch.testing.assert_close(values, ref.values)
    torch.testing.assert_close(indices, ref.indices)


def test_registered_before_torch_onnx_is_imported() -> None:
    """The onnx:: operators exist only after torch.onnx.ops is imported; the translations are
    registered by name, so an export works even when onnxport loaded its registry first."""
    code = textwrap.dedent("""
        import sys
        import torch
        import onnxport
        from onnxport.translate import default_registry
        default_registry()
        assert "torch.onnx" not in sys.modules
        import torch.onnx.ops
        class M(torch.nn.Module):
            def forward(self, q):
                return torch.onnx.ops.attention(q, q, q, is_causal=True)[0]
        q = torch.randn(1, 2, 4, 8)
        p = onnxport.export(M(), (q,), opset_version=23)
        assert [n.op_type for n in p.model.graph] == ["Attention"]
        torch.testing.assert_close(p(q)[0], M()(q))
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


# -- side by side with torch.onnx ----------------------------------------------------------------

def test_same_nodes_as_torch_onnx_at_opset_23() -> None:
    torch.manual_seed(0)
    q, k, v = _qkv(hq=4, hkv=2)
    x = torch.randn(2, 3, 5, 8)
    cos, sin = _caches(8, 4)
    pos = torch.arange(5).expand(2, 5)

    class M(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor,
                    pos: torch.Tensor) -> Any:
            y = torch.onnx.ops.attention(q, k, v, is_causal=True)[0]
            r = torch.onnx.ops.rotary_embedding(x, cos, sin, pos, interleaved=True)
            s = torch.onnx.ops.symbolic("Relu", (x,), dtype=x.dtype, shape=x.shape)
            return y, r, s

    args = (q, k, v, x, pos)
    ours = onnxport.export(M(), args, opset_version=23)
    theirs = torch.onnx.export(M(), args, dynamo=True, opset_version=23)
    wanted = {"Attention", "RotaryEmbedding", "Relu"}
    assert sorted(t for t in op_types(ours) if t in wanted) == \
        sorted(n.op_type for n in theirs.model.graph.all_nodes() if n.op_type in wanted) == \
        ["Attention", "Relu", "RotaryEmbedding"]
    for a, b in zip(ours(*args), theirs(*args)):
        torch.testing.assert_close(a, b)
