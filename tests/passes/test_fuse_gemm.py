"""FuseGemmPass: 2-D MatMul (or C-less Gemm) + Add -> Gemm, and only where it means the same."""

from __future__ import annotations

import pytest
import torch

from onnxport.passes import FuseGemmPass
from tests.passes.fusion_helpers import Wrap, assert_same, fuse, nodes_of, ops, unfused


class MatMulAdd(torch.nn.Module):
    def __init__(self, transposed: bool = False, bias_first: bool = False) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 16) if transposed else torch.randn(16, 8))
        self.bias = torch.nn.Parameter(torch.randn(8))
        self.transposed, self.bias_first = transposed, bias_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ (self.weight.t() if self.transposed else self.weight)
        return self.bias + y if self.bias_first else y + self.bias


class LinearThenBias(torch.nn.Module):
    """A 2-D nn.Linear without bias (a C-less Gemm) and the bias added after it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 8, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.bias


X2 = (torch.randn(4, 16),)


@pytest.mark.parametrize("model,trans_b", [
    (MatMulAdd(), 0), (MatMulAdd(bias_first=True), 0), (MatMulAdd(transposed=True), 1),
    (LinearThenBias(), 1),
], ids=["x@w+b", "b+x@w", "x@w.t()+b", "linear-then-bias"])
def test_one_gemm(model: torch.nn.Module, trans_b: int) -> None:
    model = Wrap(model)
    before = unfused(model, X2)
    after = fuse(before, FuseGemmPass())
    assert dict(ops(after)) == {"Gemm": 1}
    node = nodes_of(after, "Gemm")[0]
    assert node.name == "/norm/Gemm"
    assert node.metadata_props["pkg.onnxport.module"] == "norm"
    transb = node.attributes.get("transB")
    assert (transb.as_int() if transb is not None else 0) == trans_b
    assert node.inputs[2].name.endswith("bias")
    assert_same(model, X2, before, after)


def test_three_d_linear_not_fused() -> None:
    """MatMul of a 3-D input batches: Gemm would not take it."""
    before = unfused(Wrap(torch.nn.Linear(16, 8)), (torch.randn(2, 4, 16),))
    assert ops(before)["MatMul"] == 1
    assert ops(fuse(before, FuseGemmPass())) == ops(before)


class BiasWidens(torch.nn.Module):
    """(1, 8) + (4, 8): the Add broadcasts the product, which Gemm's C cannot do."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 8))
        self.bias = torch.nn.Parameter(torch.randn(4, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class ProductReused(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x @ self.weight
        return y + 1.0, y


class IntegerProduct(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w + 3


@pytest.mark.parametrize("model,args", [
    (BiasWidens(), (torch.randn(1, 16),)),
    (ProductReused(), X2),
    (IntegerProduct(), (torch.randint(0, 5, (4, 16)), torch.randint(0, 5, (16, 8)))),
], ids=["bias-widens", "product-reused", "int64"])
def test_not_fused_where_it_would_change_the_result(model: torch.nn.Module, args) -> None:  # type: ignore[no-untyped-def]
    before = unfused(model, args)
    after = fuse(before, FuseGemmPass())
    assert ops(after) == ops(before)
    assert_same(model, args, before, after)
