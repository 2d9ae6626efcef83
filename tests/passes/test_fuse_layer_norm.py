"""FuseLayerNormPass on LayerNorms written out in elementary ops by real modules."""

from __future__ import annotations

import pytest
import torch
from torch._refs import native_layer_norm

from onnxport.passes import FuseLayerNormPass
from onnxport.passes.convert_opset import _expand_layer_norm
from tests.passes.fusion_helpers import Wrap, assert_same, fuse, nodes_of, ops, unfused


class HandLayerNorm(torch.nn.Module):
    """The BERT-TF / ConvNeXt style LayerNorm: `(x - u) / sqrt(s + eps)` twice written."""

    def __init__(self, dim: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(dim))
        self.bias = torch.nn.Parameter(torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return self.weight * ((x - u) / torch.sqrt(s + self.eps)) + self.bias


class DecomposedLayerNorm(torch.nn.LayerNorm):
    """nn.LayerNorm as torch's own reference decomposition (var_mean, rsqrt, sub, mul, add)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return native_layer_norm(x, list(self.normalized_shape), self.weight, self.bias, self.eps)[0]


def _decomposed(shape: int | list[int] = 16) -> torch.nn.Module:
    norm = DecomposedLayerNorm(shape)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return norm


X = (torch.randn(2, 5, 16),)


@pytest.mark.parametrize("make", [lambda: HandLayerNorm(16), _decomposed],
                         ids=["hand-written", "torch-decomposition"])
def test_one_layer_normalization(make) -> None:  # type: ignore[no-untyped-def]
    model = Wrap(make())
    before = unfused(model, X)
    assert ops(before)["LayerNormalization"] == 0 and ops(before)["Sqrt"] == 1
    after = fuse(before, FuseLayerNormPass())
    assert dict(ops(after)) == {"LayerNormalization": 1}
    node = nodes_of(after, "LayerNormalization")[0]
    assert node.name == "/norm/LayerNormalization"
    assert node.metadata_props["pkg.onnxport.module"] == "norm"
    assert "pkg.onnxport.source" in node.metadata_props
    assert [v.name for v in node.inputs[1:]] == ["norm.weight", "norm.bias"]
    assert_same(model, X, before, after)


def test_expanded_nn_layer_norm_round_trip() -> None:
    """nn.LayerNorm expanded as the opset < 17 conversion writes it, fused back."""
    model = Wrap(torch.nn.LayerNorm([5, 16]))
    before = unfused(model, X)
    _expand_layer_norm(before.model.graph)
    assert ops(before)["LayerNormalization"] == 0
    after = fuse(before, FuseLayerNormPass())
    assert dict(ops(after)) == {"LayerNormalization": 1}
    assert nodes_of(after, "LayerNormalization")[0].attributes["axis"].as_int() == -2
    assert_same(model, X, before, after)


def test_without_affine() -> None:
    model = Wrap(DecomposedLayerNorm(16, elementwise_affine=False))
    before = unfused(model, X)
    after = fuse(before, FuseLayerNormPass())
    assert dict(ops(after)) == {"LayerNormalization": 1}
    assert_same(model, X, before, after)


class NotTrailing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        return (x - u) / torch.sqrt((x - u).pow(2).mean(1, keepdim=True) + 1e-5)


class DifferentAxes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(-1, keepdim=True)
        return (x - u) / torch.sqrt((x - u).pow(2).mean([-2, -1], keepdim=True) + 1e-5)


class VarianceReused(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return (x - u) / torch.sqrt(s + 1e-5), s


@pytest.mark.parametrize("model", [NotTrailing(), DifferentAxes(), VarianceReused()],
                         ids=lambda m: type(m).__name__)
def test_not_fused_where_it_would_change_the_result(model: torch.nn.Module) -> None:
    before = unfused(model, X)
    after = fuse(before, FuseLayerNormPass())
    assert ops(after) == ops(before)


@pytest.mark.parametrize("shape, normalized", [((2, 0), [0]), ((3, 0, 4), [0, 4]), ((0, 5), [5])])
def test_empty_normalized_slice_runs(shape: tuple[int, ...], normalized: list[int]) -> None:
    """ORT's LayerNormalization / RMSNormalization refuse an empty normalized slice: neither the
    translation nor the fusions may emit them there (fuzz seeds 2040, 2202, ...)."""
    import onnxport

    x = torch.randn(*shape)
    for module in (torch.nn.LayerNorm(normalized), torch.nn.RMSNorm(normalized)):
        module.eval()
        program = onnxport.export(module, (x,))
        ops = {n.op_type for n in program.model.graph}
        if 0 in normalized:
            assert not ops & {"LayerNormalization", "RMSNormalization"}, ops
        torch.testing.assert_close(program(x)[0], module(x).detach())
