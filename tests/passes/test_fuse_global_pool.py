"""FuseGlobalPoolPass: a keepdims mean over every spatial axis -> GlobalAveragePool."""

from __future__ import annotations

import torch

import onnxport
from onnxport.passes.fuse_global_pool import FuseGlobalPoolPass
from tests.passes.fusion_helpers import Wrap, assert_same, fuse, nodes_of, ops, ort_optimized_ops, unfused


class SqueezeExcite(torch.nn.Module):
    """timm's SE block: `x.mean((2, 3), keepdim=True)`, two 1x1 convs, a sigmoid gate."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.reduce = torch.nn.Conv2d(channels, 4, 1)
        self.expand = torch.nn.Conv2d(4, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        s = x.mean((2, 3), keepdim=True)
        return x * self.expand(self.reduce(s).relu()).sigmoid()


class Means(torch.nn.Module):
    def forward(self, x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x.mean((-1, -2), keepdim=True) + 1,   # negative axes: pooled
                v.mean(2, keepdim=True) * 2,          # 3-D: a norm's mean, stays
                x.mean((2, 3)),                       # no keepdim: (N, C), stays
                x.mean((1, 2, 3), keepdim=True),      # the channels too: stays
                x.mean(3, keepdim=True))              # one of two spatial axes: stays


def test_squeeze_excite_pools_in_nchwc() -> None:
    model, args = Wrap(SqueezeExcite()).eval(), (torch.randn(2, 16, 12, 12),)
    before = unfused(model, args)
    after = fuse(before, FuseGlobalPoolPass())
    assert ops(before)["ReduceMean"] == 1 and ops(after)["ReduceMean"] == 0
    (pool,) = nodes_of(after, "GlobalAveragePool")
    assert pool.name == "/norm/GlobalAveragePool"
    assert pool.metadata_props["pkg.onnxport.module"] == "norm"
    assert_same(model, args, before, after)
    # What the pass is for: ONNX Runtime keeps the block in its NCHWc layout (fewer reorders).
    reorders = [sum(n for op, n in ort_optimized_ops(p).items() if "Reorder" in op)
                for p in (before, after)]
    assert reorders[1] < reorders[0], reorders


def test_which_means_pool() -> None:
    model, args = Means().eval(), (torch.randn(2, 3, 5, 7), torch.randn(2, 3, 6))
    before = unfused(model, args)
    after = fuse(before, FuseGlobalPoolPass())
    assert ops(before)["ReduceMean"] == 5
    assert ops(after)["GlobalAveragePool"] == 1 and ops(after)["ReduceMean"] == 4
    assert_same(model, args, before, after)


def test_dynamic_batch_and_default_list() -> None:
    model = SqueezeExcite().eval()
    program = onnxport.export(model, (torch.randn(2, 16, 8, 10),),
                              dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert ops(program)["GlobalAveragePool"] == 1 and ops(program)["ReduceMean"] == 0
    x = torch.randn(3, 16, 8, 10)
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)


def test_dynamic_image_size_keeps_its_mean() -> None:
    """With H and W dynamic the mean is ReduceSum / count (an empty image's mean is NaN, where
    ONNX Runtime's GlobalAveragePool fails): not rewritten."""
    model = SqueezeExcite().eval()
    h, w = torch.export.Dim("h", min=4), torch.export.Dim("w", min=4)
    program = onnxport.export(model, (torch.randn(1, 16, 8, 10),), dynamic_shapes=({2: h, 3: w},))
    assert ops(program)["GlobalAveragePool"] == 0 and ops(program)["ReduceSum"] == 1
