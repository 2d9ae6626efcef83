"""HeadLayoutPass: a batch-of-one head split as an (S, 1, H, D) view, whose Transpose ONNX
Runtime folds into the MatMul reading it."""

from __future__ import annotations

import torch

import onnxport
from onnxport.passes import default_passes, run_passes
from onnxport.passes.head_layout import HeadLayoutPass
from tests.passes.fusion_helpers import assert_same, fuse, ops, ort_optimized_ops
from tests.passes.test_fuse_attention import HID, S, EagerAttention, PackedAttention


def _default(model: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> onnxport.ONNXProgram:
    """The default pipeline without HeadLayoutPass."""
    model.eval()
    program = onnxport.export(model, args, optimize=False)
    run_passes(program.model, [p for p in default_passes() if not isinstance(p, HeadLayoutPass)])
    return program


def test_batch_of_one_head_splits_fold_into_the_products() -> None:
    model = EagerAttention("add")
    m = torch.zeros(1, 1, S, S).masked_fill(~torch.ones(1, 1, S, S, dtype=torch.bool).tril(),
                                             torch.finfo(torch.float32).min)
    args = (torch.randn(1, S, HID), m)
    before = _default(model, args)
    after = fuse(before, HeadLayoutPass())
    assert ops(after)["Transpose"] == ops(before)["Transpose"]      # the same nodes, new perms
    ran_before, ran_after = ort_optimized_ops(before), ort_optimized_ops(after)
    # Q, V and the merged K transposes run inside FusedMatMul; the head merge stays
    assert ran_before["Transpose"] == 4 and ran_after["Transpose"] == 1
    assert ran_after["com.microsoft.FusedMatMul"] == 2 and ran_after["MatMul"] == 0
    assert_same(model, args, before, after)


def test_scaled_query_of_a_packed_projection() -> None:
    """timm's packed qkv (unbind, no mask): the query's scale Mul stays between."""
    model = PackedAttention()
    args = (torch.randn(1, S, HID),)
    before = _default(model, args)
    after = fuse(before, HeadLayoutPass())
    assert_same(model, args, before, after)
    assert ort_optimized_ops(after)["Transpose"] <= ort_optimized_ops(before)["Transpose"]


def test_batch_of_two_unchanged() -> None:
    model = EagerAttention(None)
    args = (torch.randn(2, S, HID), torch.zeros(2, 1, S, S))
    before = _default(model, args)
    after = fuse(before, HeadLayoutPass())
    perms = lambda p: sorted(tuple(n.attributes["perm"].as_ints())  # noqa: E731
                             for n in p.model.graph.all_nodes() if n.op_type == "Transpose")
    assert perms(after) == perms(before)


class CachedAttention(torch.nn.Module):
    """A decoder step's attention over a key/value cache it returns (presents)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(HID, 3 * HID)

    def forward(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor):  # type: ignore[no-untyped-def]
        q, k, v = (t.view(1, S, 4, HID // 4).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        y = torch.softmax(q @ k.transpose(2, 3) * 0.3, -1) @ v
        return y, k, v


def test_graph_with_a_cache_unchanged() -> None:
    """The ONNX Runtime target's GroupQueryAttention matcher reads a decoder's head splits."""
    past = torch.randn(1, 4, 3, HID // 4)
    before = _default(CachedAttention(), (torch.randn(1, S, HID), past, past.clone()))
    assert ops(before)["Transpose"] >= 1
    assert not HeadLayoutPass()(before.model).modified
