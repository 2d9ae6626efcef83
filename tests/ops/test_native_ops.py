"""Native ONNX ops at the opset asked for: GroupNormalization (21), Attention (23), and
scaled_dot_product_attention with dropout as a Dropout node. Each case runs in ONNX Runtime
against eager PyTorch, and where stated side by side with torch.onnx.export(dynamo=True).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import onnxport
from tests.helpers import Fn, count, export_and_compare, op_types


def _torch_onnx_types(model: torch.nn.Module, args: tuple[Any, ...], opset: int) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, dynamo=True, opset_version=opset)
    return [n.op_type for n in program.model.graph.all_nodes()]


# -- group norm --------------------------------------------------------------------------------

@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_opset_21_is_group_normalization(affine: bool) -> None:
    torch.manual_seed(0)
    gn = torch.nn.GroupNorm(3, 6, affine=affine, eps=1e-3)
    if affine:
        torch.nn.init.normal_(gn.weight)
        torch.nn.init.normal_(gn.bias)
    x = torch.randn(2, 6, 4, 5)
    program = export_and_compare(gn, (x,), opset_version=21)
    ours = [t for t in op_types(program) if t != "Constant"]
    assert ours == ["GroupNormalization"], ours
    assert "GroupNormalization" in _torch_onnx_types(gn, (x,), 21)


def test_group_norm_below_21_is_decomposed() -> None:
    torch.manual_seed(0)
    gn = torch.nn.GroupNorm(2, 4)
    x = torch.randn(2, 4, 3, 5)
    program = export_and_compare(gn, (x,), opset_version=20)
    assert count(program, "GroupNormalization") == 0
    assert "GroupNormalization" not in _torch_onnx_types(gn, (x,), 20)


def test_group_norm_opset_21_dynamic_batch_3d_input() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 8, 7)
    class GN(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.group_norm(x, 4)

    m = GN()
    batch = torch.export.Dim("batch")
    program = export_and_compare(m, (x,), opset_version=21, dynamic_shapes=({0: batch},))
    assert count(program, "GroupNormalization") == 1
    other = torch.randn(5, 8, 7)
    torch.testing.assert_close(program(other)[0], F.group_norm(other, 4))


def test_native_group_norm_opset_21_with_statistics_read_keeps_decomposition() -> None:
    """GroupNormalization has no mean/rstd outputs: where they are read, the decomposition
    stays; where only y is read, one node."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 6, 5), torch.randn(6), torch.randn(6)
    stats = Fn(lambda x, w, b: torch.ops.aten.native_group_norm(x, w, b, 2, 6, 5, 3, 1e-5))
    program = export_and_compare(stats, (x, w, b), opset_version=21)
    assert count(program, "GroupNormalization") == 0
    only_y = Fn(lambda x, w, b: torch.ops.aten.native_group_norm(x, w, b, 2, 6, 5, 3, 1e-5)[0])
    program = export_and_compare(only_y, (x, w, b), opset_version=21)
    assert count(program, "GroupNormalization") == 1


def test_group_norm_opset_21_float16() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 5).half()
    m = Fn(lambda x, w, b: F.group_norm(x, 2, w, b))
    w, b = torch.randn(4).half(), torch.randn(4).half()
    program = onnxport.export(m, (x, w, b), opset_version=21)
    assert count(program, "GroupNormalization") == 1
    got = program(x, w, b)[0]
    assert got.dtype == torch.float16
    # ORT computes in float32 (as torch's CPU kernel does); compare with a float32 reference.
    torch.testing.assert_close(got, F.group_norm(x.float(), 2, w.float(), b.float()).half())


def test_group_norm_opset_21_float64_keeps_float64_statistics() -> None:
    """GroupNormalization keeps its statistics in float32 (stash_type); float64 stays on the
    decomposition so that it matches torch at float64 tolerances."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 5, dtype=torch.float64) * 100 + 1000
    program = export_and_compare(Fn(lambda x: F.group_norm(x, 2)), (x,), opset_version=21)
    assert count(program, "GroupNormalization") == 0


# -- scaled_dot_product_attention -> Attention (opset 23) ------------------------------------

def _qkv(hq: int, hkv: int, lq: int = 5, lkv: int = 7) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(2, hq, lq, 8), torch.randn(2, hkv, lkv, 8), torch.randn(2, hkv, lkv, 8)


_MASK = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) > 0.4
_MASK[:, 0] = True

SDPA_CASES = {
    "plain": (dict(), 4, 4),
    "gqa": (dict(enable_gqa=True), 6, 2),
    "mqa_causal": (dict(enable_gqa=True, is_causal=True), 4, 1),
    "bool_mask": (dict(attn_mask=_MASK), 4, 4),
    "float_mask": (dict(attn_mask=torch.randn(2, 1, 5, 7, generator=torch.Generator().manual_seed(2))), 4, 4),
    "scale": (dict(scale=0.11), 4, 4),
    "gqa_bool_mask_scale": (dict(enable_gqa=True, attn_mask=_MASK, scale=0.3), 4, 2),
}


@pytest.mark.parametrize("case", sorted(SDPA_CASES))
def test_sdpa_opset_23_is_one_attention_node_like_torch_onnx(case: str) -> None:
    kwargs, hq, hkv = SDPA_CASES[case]
    q, k, v = _qkv(hq, hkv)
    m = Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs))
    program = export_and_compare(m, (q, k, v), opset_version=23)
    assert [t for t in op_types(program) if t != "Constant"] == ["Attention"], op_types(program)
    theirs = _torch_onnx_types(m, (q, k, v), 23)
    assert theirs.count("Attention") == 1, theirs


def test_sdpa_opset_23_3d_inputs_decomposed() -> None:
    """ONNX Attention's 3-D form is (B, S, hidden); sdpa's 3-D form is (B, S, E) with no
    heads axis, so it stays decomposed (torch.onnx refuses non-4-D inputs at opset 23)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    m = Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    program = export_and_compare(m, (q, k, v), opset_version=23)
    assert count(program, "Attention") == 0


# -- scaled_dot_product_attention with dropout ------------------------------------------------

@pytest.mark.parametrize("opset", [18, 23])
def test_sdpa_dropout_exports_a_dropout_node(opset: int) -> None:
    """dropout_p > 0 (even in eval mode sdpa drops) exports with a Dropout node on the
    attention weights, ratio dropout_p, and a UserWarning; ONNX Runtime (inference) matches
    eager with dropout_p=0."""
    q, k, v = _qkv(4, 2)
    model = Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.3,
                                                              is_causal=True, enable_gqa=True)).eval()
    with pytest.warns(UserWarning, match="training mode"):
        program = onnxport.export(model, (q, k, v), opset_version=opset)
    dropouts = [n for n in program.model.graph.all_nodes() if n.op_type == "Dropout"]
    assert len(dropouts) == 1
    ratio = dropouts[0].inputs[1]
    assert ratio is not None and ratio.const_value is not None
    assert float(ratio.const_value.numpy()) == pytest.approx(0.3)
    assert count(program, "Attention") == 0  # ONNX Attention has no dropout
    expected = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(program(q, k, v)[0], expected)
    # torch.onnx emits the same Dropout(weights, ratio) before its optimizer drops it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(model, (q, k, v), dynamo=True, opset_version=opset, optimize=False)
    assert [n.op_type for n in theirs.model.graph.all_nodes()].count("Dropout") == 1
