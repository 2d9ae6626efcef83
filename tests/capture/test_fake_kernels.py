"""capture/fake_kernels.py: each shape-only kernel gives the stock computation's output metadata
(sizes, strides, dtype) on fake tensors of symbolic sizes, falls back to it where it does not
apply, and whole captured programs are the same node by node with and without the kernels;
the ONNX model matches eager at other sizes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._decomp import decomposition_table
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import onnxport
from onnxport.capture import fake_kernels, kernels
from onnxport.capture.kernels import capture_kernels

aten = torch.ops.aten
_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def _facts(out: Any) -> list[tuple[str, str, torch.dtype, str]]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [(str(t.shape), str(t.stride()), t.dtype, t.device.type) for t in outs]


def _symbolic(mode: FakeTensorMode, t: torch.Tensor, dynamic: tuple[int, ...]) -> torch.Tensor:
    sizes = [DimDynamic.DYNAMIC if d in dynamic else DimDynamic.STATIC for d in range(t.dim())]
    return mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes))


def _channels_last(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(memory_format=torch.channels_last)


def _bn(dtype: torch.dtype = torch.float32, stats: torch.dtype = torch.float32) -> list[Any]:
    return [torch.randn(4, dtype=stats), torch.randn(4, dtype=stats),
            torch.randn(4, dtype=stats), torch.rand(4, dtype=stats) + 0.5, 0.1, 1e-5]


# (op, stock computation, inputs (tensors become fake), dims made symbolic, shape kernel taken)
_CASES: list[tuple[str, Any, list[Any], tuple[int, ...], bool]] = [
    ("bn contiguous", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(2, 4, 5, 6), *_bn()], (0,), True),
    ("bn channels-last", aten._native_batch_norm_legit_no_training.default,
     [_channels_last(2, 4, 5, 6), *_bn()], (0, 2, 3), True),
    ("bn 1d", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(3, 4, 7), *_bn()], (0, 2), True),
    ("bn 2d input", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(3, 4), *_bn()], (0,), True),
    ("bn no affine", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(2, 4, 5, 6), None, None, *_bn()[2:]], (0,), True),
    ("bn strided input (stock)", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(2, 6, 5, 4).transpose(1, 3), *_bn()], (0,), False),
    ("bn float64", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(2, 4, 3, 3, dtype=torch.float64), *_bn(stats=torch.float64)], (0,), True),
    ("bn float16 with float32 stats (stock)", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(2, 4, 3, 3).half(), *_bn()], (0,), False),
    ("layer norm", aten.native_layer_norm.default,
     [torch.randn(2, 7, 8), [8], torch.randn(8), torch.randn(8), 1e-5], (0, 1), True),
    ("layer norm two dims", aten.native_layer_norm.default,
     [torch.randn(2, 7, 8), [7, 8], None, None, 1e-5], (0,), True),
    ("layer norm transposed (stock)", aten.native_layer_norm.default,
     [torch.randn(2, 8, 7).transpose(1, 2), [8], torch.randn(8), torch.randn(8), 1e-5], (0, 1),
     False),
    ("layer norm bfloat16 (stock)", aten.native_layer_norm.default,
     [torch.randn(2, 7, 8).bfloat16(), [8], None, None, 1e-5], (0,), False),
    ("bn static sizes (stock)", aten._native_batch_norm_legit_no_training.default,
     [torch.randn(2, 4, 5, 6), *_bn()], (), False),
    ("relu", aten.relu.default, [torch.randn(2, 3, 4)], (0, 1), True),
    ("relu static sizes (stock)", aten.relu.default, [torch.randn(2, 3, 4)], (), False),
    ("grid sampler", aten.grid_sampler_2d.default,
     [torch.randn(2, 3, 5, 6), torch.rand(2, 4, 7, 2), 0, 0, False], (0,), True),
    ("relu channels-last", aten.relu.default, [_channels_last(2, 3, 4, 5)], (0,), True),
    ("relu strided", aten.relu.default, [torch.randn(4, 6)[:, ::2]], (0,), True),
    ("relu channels-last with 1x1 spatial (stock)", aten.relu.default,
     [_channels_last(2, 4, 1, 1)], (0,), False),
    ("relu channels-last with one channel (stock)", aten.relu.default,
     [_channels_last(2, 1, 3, 3)], (0, 2, 3), False),
    ("relu odd strides of size-1 dims (stock)", aten.relu.default,
     [torch.empty_strided((2, 4, 1, 1), (4, 1, 7, 9)).normal_()], (0,), False),
    ("relu sliced", aten.relu.default, [torch.randn(2, 4, 6, 6)[:, :, 1:4, 2:5]], (0,), True),
    ("bn channels-last with 1x1 spatial (stock)",
     aten._native_batch_norm_legit_no_training.default,
     [_channels_last(2, 4, 1, 1), *_bn()], (0,), False),
    ("bn odd strides of size-1 dims (stock)", aten._native_batch_norm_legit_no_training.default,
     [torch.empty_strided((2, 4, 1, 1), (4, 1, 7, 9)).normal_(), *_bn()], (0,), False),
    ("layer norm size-1 dim (stock)", aten.native_layer_norm.default,
     [torch.randn(2, 1, 8), [8], None, None, 1e-5], (0,), False),
    ("clamp channels-last with 1x1 spatial (stock)", aten.clamp.default,
     [_channels_last(2, 4, 1, 1), -1.0, 1.0], (0,), False),
    ("linear size-1 dim of odd stride", aten.linear.default,
     [torch.randn(2, 3, 5)[:, 1:2], torch.randn(4, 5), torch.randn(4)], (0,), True),
    ("relu int (stock)", aten.relu.default, [torch.arange(6).reshape(2, 3)], (0,), False),
    ("clamp", aten.clamp.default, [torch.randn(2, 3), -0.5, 0.5], (0,), True),
    ("clamp min only", aten.clamp.default, [torch.randn(2, 3, 4), 0.0], (0, 2), True),
    ("clamp int bounds", aten.clamp.default, [torch.randn(2, 3), -1, 1], (0,), True),
    ("clamp of int (stock)", aten.clamp.default, [torch.arange(6).reshape(2, 3), 0.5, 3.5], (0,),
     False),
    ("linear 2d", aten.linear.default, [torch.randn(3, 5), torch.randn(4, 5), torch.randn(4)],
     (0,), True),
    ("linear 3d", aten.linear.default, [torch.randn(2, 3, 5), torch.randn(4, 5), torch.randn(4)],
     (0, 1), True),
    ("linear 4d no bias", aten.linear.default, [torch.randn(2, 3, 6, 5), torch.randn(4, 5)],
     (0, 2), True),
    ("linear transposed input", aten.linear.default,
     [torch.randn(2, 5, 3).transpose(1, 2), torch.randn(4, 5), torch.randn(4)], (0, 1), True),
    ("linear 1d input (stock)", aten.linear.default, [torch.randn(5), torch.randn(4, 5)], (),
     False),
    ("linear float16 (stock)", aten.linear.default,
     [torch.randn(3, 5).half(), torch.randn(4, 5).half()], (0,), False),
]


@pytest.mark.parametrize("case", _CASES, ids=[c[0] for c in _CASES])
def test_kernel_gives_stock_metadata(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    _, op, inputs, dynamic, shape_only = case
    stock_calls: list[bool] = []
    if op in fake_kernels.COMPOSITE_SHAPE_KERNELS:
        def stock(*a: Any) -> Any:
            return op._op_dk(_CIA, *a)

        shape = fake_kernels.COMPOSITE_SHAPE_KERNELS[op]
    else:
        stock, shape = decomposition_table[op], fake_kernels.FAKE_KERNELS[op]
    kernel = fake_kernels.standing_in_for(lambda *a: stock_calls.append(True) or stock(*a),
                                          shape)
    with FakeTensorMode(shape_env=ShapeEnv()) as mode, torch.no_grad():
        args = [_symbolic(mode, a, dynamic) if isinstance(a, torch.Tensor) and a.dim() > 1
                else mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in inputs]
        expected = _facts(stock(*args))
        got = _facts(kernel(*args))
    assert got == expected
    assert not stock_calls == shape_only


def test_torch_picks_the_kernel_as_it_picks_the_decomposition() -> None:
    """A kernel carries its decomposition's name and module, by which torch decides whether
    to run a decomposition at static sizes."""
    from torch._subclasses.fake_tensor import torch_decomp_decompositions

    before = {op: torch_decomp_decompositions(op) for op in fake_kernels.FAKE_KERNELS}
    with capture_kernels():
        assert {op: torch_decomp_decompositions(op) for op in fake_kernels.FAKE_KERNELS} == before
        assert decomposition_table[aten.relu.default].__wrapped__ is not None


def test_real_tensors_take_the_stock_kernels() -> None:
    """On real tensors every kernel computes (ATen's values), inside capture_kernels too."""
    x, w, b = torch.randn(3, 5), torch.randn(4, 5), torch.randn(4)
    with capture_kernels():
        torch.testing.assert_close(torch.nn.functional.linear(x, w, b), x @ w.T + b)
        torch.testing.assert_close(torch.relu(x), x.clamp(min=0))
        norm = torch.nn.functional.layer_norm(x, [5])
    torch.testing.assert_close(norm, torch.nn.functional.layer_norm(x, [5]))
    assert aten.linear.default.py_kernels.get(_CIA) is None


class _Mixed(torch.nn.Module):
    """Every op the shape kernels cover, at a dynamic batch and length, plus a channels-last
    branch and inputs they do not cover."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.bn1d = torch.nn.BatchNorm1d(8)
        self.proj = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 4, bias=False)

    def forward(self, image: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.bn(self.conv(image)).relu()
        last = self.bn(self.conv(image.to(memory_format=torch.channels_last))).relu()
        pooled = self.bn1d(h.flatten(2)).mean(-1)
        t = self.norm(self.proj(tokens)).clamp(-2.0, 2.0)
        t = t + self.proj(pooled)[:, None, :]
        strided = torch.relu(t[:, :, ::2])
        return self.head(t).clamp(min=0), last.sum((2, 3)), strided, (tokens.long() + 1).relu()


def _program_facts(program: torch.export.ExportedProgram) -> list[tuple]:
    facts = []
    for node in program.graph.nodes:
        vals = node.meta.get("val")
        vals = vals if isinstance(vals, (tuple, list)) else (vals,)
        facts.append((node.op, str(node.target), [
            (str(v.shape), str(v.stride()), v.dtype) for v in vals if isinstance(v, torch.Tensor)],
            node.meta.get("stack_trace")))
    return facts


def _inputs(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch, 3, 6, 5), torch.randn(batch, length, 8)


_SHAPES = ({0: torch.export.Dim("batch")}, {0: torch.export.Dim("batch"),
                                            1: torch.export.Dim("length")})


def _capture(model: torch.nn.Module) -> torch.export.ExportedProgram:
    from onnxport.capture import capture

    with torch.no_grad():
        return capture(model, _inputs(2, 7), None, dynamic_shapes=_SHAPES,
                       has_translation=lambda target: True).exported_program


def test_same_program_with_and_without_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = _Mixed().eval()
    used = {op: 0 for op in (*fake_kernels.FAKE_KERNELS, *fake_kernels.COMPOSITE_SHAPE_KERNELS)}
    real_pointwise = fake_kernels._pointwise
    monkeypatch.setattr(fake_kernels, "_pointwise", lambda *a: used.__setitem__(
        aten.relu.default, used[aten.relu.default] + 1) or real_pointwise(*a))
    with_kernels = _capture(model)
    monkeypatch.setattr(fake_kernels, "_pointwise", real_pointwise)
    monkeypatch.setattr(kernels, "FAKE_KERNELS", {})
    monkeypatch.setattr(kernels, "COMPOSITE_SHAPE_KERNELS", {})
    stock = _capture(model)
    assert _program_facts(with_kernels) == _program_facts(stock)
    assert str(with_kernels.range_constraints) == str(stock.range_constraints)
    assert used[aten.relu.default] > 0  # the shape kernels did run


def test_export_matches_eager_at_other_sizes() -> None:
    torch.manual_seed(0)
    model = _Mixed().eval()
    program = onnxport.export(model, _inputs(2, 7), dynamic_shapes=_SHAPES, dynamo=True)
    for batch, length in ((1, 3), (5, 11)):
        inputs = _inputs(batch, length)
        with torch.no_grad():
            expected = model(*inputs)
        got = program(*inputs)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(torch.as_tensor(g), e, rtol=1e-4, atol=1e-5)
