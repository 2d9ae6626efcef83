"""FoldBatchNormPass: Conv + inference BatchNormalization with constant weights -> one Conv."""

from __future__ import annotations

import onnx_ir.passes.common as common
import torch
from torch import nn

import onnxport
from onnxport.passes import run_passes
from onnxport.passes.fold_batch_norm import FoldBatchNormPass
from tests.passes.fusion_helpers import assert_same, fuse, ops


def _stats(model: nn.Module) -> nn.Module:
    """Non-trivial statistics, so a fold that dropped or misplaced one would show."""
    torch.manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        # bias-free and grouped (a depthwise conv), as ResNets and MobileNets write them
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, groups=8, bias=False), nn.BatchNorm2d(8))
        self.c = nn.Conv2d(8, 4, 1)
        self.norm_c = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.c(self.b(self.a(x)))
        return self.norm_c(y), y.sum()       # c's output is also read elsewhere: not folded


class Net1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv1d(4, 6, 3, bias=False), nn.BatchNorm1d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


def _fold(model: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[onnxport.ONNXProgram,
                                                                      onnxport.ONNXProgram]:
    before = onnxport.export(model, args)
    after = fuse(before, FoldBatchNormPass(), common.RemoveUnusedNodesPass())
    return before, after


def test_conv_batch_norm_folds() -> None:
    model, args = _stats(Net()), (torch.randn(2, 3, 10, 10),)
    before, after = _fold(model, args)
    assert ops(before)["BatchNormalization"] == 3
    assert ops(after)["BatchNormalization"] == 1 and ops(after)["Conv"] == 3
    inits = after.model.graph.initializers
    assert "a.0.weight.bn_folded" in inits and "a.0.bias.bn_folded" in inits
    assert "b.0.bias.bn_folded" in inits                 # the bias-free conv gains one
    assert "a.1.running_mean" not in inits and "a.0.weight" not in inits
    assert "c.weight" in inits and "norm_c.running_var" in inits
    assert after.model.graph.node(0).name == "/a/0/Conv"
    # float32 weights computed in float64: within rounding of the unfolded graph and eager.
    assert_same(model, args, before, after, rtol=1e-5, atol=1e-5)


def test_conv1d_and_batch_norm_output() -> None:
    model, args = _stats(Net1d()), (torch.randn(2, 4, 9),)
    before, after = _fold(model, args)
    assert ops(after) == {"Conv": 1}
    assert [v.name for v in after.model.graph.outputs] == [v.name for v in before.model.graph.outputs]
    assert_same(model, args, before, after, rtol=1e-5, atol=1e-5)


def test_not_default_and_fake_weights_stay() -> None:
    model, args = _stats(Net1d()), (torch.randn(2, 4, 9),)
    assert ops(onnxport.export(model, args))["BatchNormalization"] == 1
    with torch.device("meta"):
        fake = Net1d().eval()
    program = onnxport.export(fake, (torch.randn(2, 4, 9, device="meta"),))
    run_passes(program.model, [FoldBatchNormPass()])
    assert ops(program)["BatchNormalization"] == 1
