"""Runtime assertions (nodes with no outputs) and the float8 / float4 dtypes (issue #18, 3-4).

Every model is exported by onnxport and by torch.onnx (dynamo=True) in the same test; both
are run in ONNX Runtime and compared with eager PyTorch, or their refusals are compared.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator
from torch.export import Dim

import onnxport
from onnxport.errors import OnnxExporterError, TranslationError
from tests.helpers import check_model, op_types

aten = torch.ops.aten


def _torch_onnx(model: Any, args: tuple[Any, ...], **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(model, args, dynamo=True, verbose=False, **kwargs)


def _eager(model: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(*args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _same(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    """Equal dtypes and shapes, and bit for bit equal values (any NaN equals any NaN)."""
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected):
        if a.dtype != e.dtype or a.shape != e.shape:
            return False
        if a.dtype.is_floating_point:
            a, e = a.float(), e.float()  # exact for every float8 value
            if not torch.equal(a.isnan(), e.isnan()):
                return False
            keep = ~a.isnan()
            if not torch.equal(a[keep].view(torch.int32), e[keep].view(torch.int32)):
                return False  # (int32 view: -0.0 and 0.0 differ)
        elif not torch.equal(a, e):
            return False
    return True


# -- runtime assertions ---------------------------------------------------------------------

class AssertAsyncMsg(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert_async((x > -100).all(), "x is too small")
        return x + 1


class AssertAsync(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert_async((x > -100).all())
        return x + 1


class ItemIsSize(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k = n.item()
        torch._check_is_size(k)
        torch._check(k <= x.shape[0])
        return x[:k] * 2


class ConstrainForSize(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k = n.item()
        torch.sym_constrain_range_for_size(k, min=1, max=5)
        return torch.ones(k) * x.sum()


class NonzeroSized(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.nonzero(x > 0)
        n = idx.shape[0]
        torch._check(n <= x.numel())
        return idx.sum(0), x.reshape(-1)[:n] * torch.ones(n)


class ToDouble(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64) + 1


ASSERTION_MODELS = {
    # name: (model, export args, dynamic shapes, run args, the assertion op in the graph)
    "assert_async_msg": (AssertAsyncMsg(), (torch.randn(4, 3),), None, (torch.randn(4, 3),),
                         aten._assert_async.msg),
    "assert_async": (AssertAsync(), (torch.randn(4, 3),), None, (torch.randn(4, 3),),
                     aten._assert_async.default),
    "item_check_is_size": (ItemIsSize(), (torch.randn(6, 3), torch.tensor(3)), None,
                           (torch.randn(6, 3), torch.tensor(5)), aten._assert_scalar.default),
    "sym_constrain_range_for_size": (ConstrainForSize(), (torch.randn(3), torch.tensor(4)), None,
                                     (torch.randn(3), torch.tensor(2)), aten._assert_scalar.default),
    "nonzero_dynamic": (NonzeroSized(), (torch.randn(4, 3),), {"x": {0: Dim.DYNAMIC}},
                        (torch.randn(7, 3),), aten._assert_scalar.default),
    "assert_tensor_metadata": (ToDouble(), (torch.randn(4),), None, (torch.randn(4),),
                               aten._assert_tensor_metadata.default),
}


@pytest.mark.parametrize("name", list(ASSERTION_MODELS))
def test_assertions_are_dropped_like_torch_onnx(name: str) -> None:
    model, args, dynamic_shapes, run_args, assertion = ASSERTION_MODELS[name]
    ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes)
    assert assertion in {n.target for n in ep.graph.nodes}, "the model no longer tests the op"
    expected = _eager(model, run_args)

    ours = onnxport.export(model, args, dynamic_shapes=dynamic_shapes)
    check_model(ours)
    assert _same(ours(*run_args), expected)
    theirs = _torch_onnx(model, args, dynamic_shapes=dynamic_shapes)
    assert _same(list(theirs(*run_args)), expected)


def test_assert_async_condition_is_dead_code() -> None:
    """Only the arithmetic is left: the dropped check's condition is removed too."""
    model, args = AssertAsyncMsg(), (torch.randn(4, 3),)
    assert sorted(op_types(onnxport.export(model, args))) == ["Add", "Constant"]  # (the 1)
    assert [n.op_type for n in _torch_onnx(model, args).model.graph] == ["Add"]


class ShapeCheck(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.shape[0] % 2 == 0)
        return x * 2


def test_deferred_runtime_asserts_in_exported_program() -> None:
    """`prefer_deferred_runtime_asserts_over_guards` turns torch._check into graph nodes."""
    ep = torch.export.export(ShapeCheck(), (torch.randn(4, 3),),
                             dynamic_shapes={"x": {0: Dim.DYNAMIC}},
                             prefer_deferred_runtime_asserts_over_guards=True)
    assert aten._assert_scalar.default in {n.target for n in ep.graph.nodes}
    x = torch.randn(6, 3)
    expected = _eager(ShapeCheck(), (x,))
    ours = onnxport.export(ep)
    check_model(ours)
    assert _same(ours(x), expected)
    assert _same(list(_torch_onnx(ep, ()).__call__(x)), expected)


def _insert_before_output(ep: torch.export.ExportedProgram, target: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> None:
    graph = ep.graph
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        graph.call_function(target, args, kwargs)
    ep.graph_module.recompile()


@pytest.mark.parametrize("target", [aten.sym_constrain_range.default,
                                    aten.sym_constrain_range_for_size.default], ids=str)
def test_sym_constrain_range_nodes(target: Any) -> None:
    """torch 2.13 rewrites these into _assert_scalar while exporting; a graph written or
    transformed by hand can still hold them."""
    model, args = ConstrainForSize(), (torch.randn(3), torch.tensor(4))
    ep = torch.export.export(model, args)
    item = next(n for n in ep.graph.nodes
                if n.target in (aten.item.default, aten._local_scalar_dense.default))
    _insert_before_output(ep, target, (item,), {"min": 0, "max": 10})
    run_args = (torch.randn(3), torch.tensor(2))
    expected = _eager(model, run_args)
    assert target in {n.target for n in ep.graph.nodes}
    ours = onnxport.export(ep)
    check_model(ours)
    assert _same(ours(*run_args), expected)
    assert _same(list(_torch_onnx(ep, ())(*run_args)), expected)


class FunctionalAssert(torch.nn.Module):
    """The functional checks of torch's _FunctionalizeSideEffectfulOpsPass, with their token."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        token = aten._make_dep_token()
        token = aten._functional_assert_async.msg((x > -100).all(), "x is too small", token)
        token = aten._functional_sym_constrain_range(x.shape[0], 1, 10, token)
        token = aten._functional_sym_constrain_range_for_size(x.shape[0], 1, 10, token)
        return x + 1, token


class Print(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        aten._print("forward")
        return x + 1


@pytest.mark.parametrize("model", [FunctionalAssert(), Print()], ids=lambda m: type(m).__name__)
def test_functional_assertions_and_print(model: torch.nn.Module) -> None:
    x = torch.randn(4, 3)
    ep = torch.export.export(model, (x,))
    assert any(str(n.target).startswith(("aten._functional", "aten._print"))
               for n in ep.graph.nodes)
    ours = onnxport.export(model, (x,))
    check_model(ours)
    actual, expected = ours(x), _eager(model, (x,))
    assert _same(actual[:1], expected[:1])
    if len(expected) == 2:
        # The token is torch.empty([]) in eager: only its dtype and shape mean anything.
        assert (actual[1].dtype, actual[1].shape) == (expected[1].dtype, expected[1].shape)
    # torch.onnx has no translation for these.
    with pytest.raises(Exception, match="_make_dep_token|_functional_assert_async|_print"):
        _torch_onnx(model, (x,))


# -- float8 ---------------------------------------------------------------------------------

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
# Zeros, subnormals, rounding ties, each type's largest value and overflow, inf and NaN.
EDGES = [0.0, -0.0, 1.0, -1.5, 0.1, -0.3, 1e-9, 1e-3, 2e-3, 1.5e-5, 3e-5, -7e-6, 0.0009765625,
         0.00146484375, 240.0, 247.0, 248.0, 300.0, 448.0, 464.0, 465.0, 480.0, 500.0, -1000.0,
         57344.0, 61439.0, 61440.0, 61441.0, 65504.0, 1e6, -3e5, float("inf"), float("-inf"),
         float("nan")]


def _edges(dtype: torch.dtype) -> torch.Tensor:
    x = torch.tensor(EDGES, dtype=torch.float64)
    torch.manual_seed(0)
    x = torch.cat([x, torch.randn(500, dtype=torch.float64) * torch.exp2(
        torch.randint(-24, 18, (500,)).double())])
    return x.to(dtype)


class To(torch.nn.Module):
    def __init__(self, dtype: torch.dtype, then: torch.dtype | None = None) -> None:
        super().__init__()
        self.dtype, self.then = dtype, then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.to(self.dtype)
        return y if self.then is None else y.to(self.then)


def _compare_with_torch_onnx(model: torch.nn.Module, args: tuple[Any, ...],
                             opset: int = 19) -> tuple[bool, bool]:
    """(onnxport matches eager, torch.onnx matches eager), both run in ONNX Runtime."""
    expected = _eager(model, args)
    ours = onnxport.export(model, args, opset_version=opset)
    check_model(ours)
    theirs = _torch_onnx(model, args, opset_version=opset)
    return _same(ours(*args), expected), _same(list(theirs(*args)), expected)


@pytest.mark.parametrize("source", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=str)
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_cast_to_float8_rounds_like_torch(dtype: torch.dtype, source: torch.dtype) -> None:
    """x.to(float8) as a graph output, bit for bit: e4m3fn saturates (Cast saturate=1), the
    others overflow to inf (e5m2) or NaN (fnuz) (saturate=0)."""
    ours_ok, theirs_ok = _compare_with_torch_onnx(To(dtype), (_edges(source),))
    assert ours_ok
    # torch.onnx casts with ONNX's default saturate=1 for every float8 type.
    assert theirs_ok == (dtype == torch.float8_e4m3fn)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float32_float8_float32_round_trip(dtype: torch.dtype) -> None:
    ours_ok, theirs_ok = _compare_with_torch_onnx(To(dtype, torch.float32), (_edges(torch.float32),))
    assert ours_ok
    assert theirs_ok == (dtype == torch.float8_e4m3fn)


@pytest.mark.parametrize("target", [torch.float32, torch.float16, torch.float64, torch.int64,
                                    torch.int32, torch.uint8, torch.bool], ids=str)
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_graph_input_cast_out(dtype: torch.dtype, target: torch.dtype) -> None:
    """A float8 graph input, fed and cast by ONNXProgram.__call__ through OrtValues."""
    x = torch.tensor([0.0, 1.5, -2.75, 100.0, -100.0, 200.0, 0.4, -0.4, 3.0, -7.0]).to(dtype)
    ours_ok, theirs_ok = _compare_with_torch_onnx(To(target), (x,))
    assert ours_ok and theirs_ok


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_to_float8_and_integers_to_float8(dtype: torch.dtype) -> None:
    """float8 -> float8 and int64 -> float8 go through float32 like PyTorch; int64 values
    from 61440 up are inf in e5m2 (ONNX Runtime's saturate=0 Cast makes them NaN)."""
    other = torch.float8_e5m2 if dtype != torch.float8_e5m2 else torch.float8_e4m3fn
    x8 = torch.tensor([0.0, 1.0, -3.5, 240.0, 448.0, -57344.0, float("nan")]).to(other)
    ours_ok, _ = _compare_with_torch_onnx(To(dtype), (x8,))
    assert ours_ok
    ints = torch.tensor([0, 1, -7, 255, 448, 500, 57344, 61439, 61440, 65536, -70000, 2**40])
    ours_ok, theirs_ok = _compare_with_torch_onnx(To(dtype), (ints,))
    assert ours_ok
    assert theirs_ok == (dtype == torch.float8_e4m3fn)


class Float8Weights(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.5, -2.0, 3.0, 1e-3]).to(dtype))
        self.weight = torch.nn.Parameter(torch.linspace(-3, 3, 4).to(dtype), requires_grad=False)
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        const = torch.tensor([1.0, 2.5, -0.75, 7.0], dtype=self.dtype)   # a lifted constant
        small = torch.full((3,), 1e6).to(self.dtype)                       # a folded constant
        return (x * self.scale.float() + self.weight.float() + const.float(), small,
                self.scale)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_initializers_and_constants(dtype: torch.dtype) -> None:
    model, x = Float8Weights(dtype), torch.randn(4)
    ours = onnxport.export(model, (x,), opset_version=19)
    inits = {name: v.const_value.numpy() for name, v in ours.model.graph.initializers.items()}
    assert inits["scale"].dtype.name == str(dtype).removeprefix("torch.")
    ours_ok, theirs_ok = _compare_with_torch_onnx(model, (x,))
    assert ours_ok
    # torch.onnx folds the 1e6 constant with saturation for every type.
    assert theirs_ok == (dtype == torch.float8_e4m3fn)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_needs_opset_19(dtype: torch.dtype) -> None:
    x = torch.randn(3)
    with pytest.raises(TranslationError, match=r"needs opset 19 or higher.*opset 18") as info:
        onnxport.export(To(dtype), (x,), opset_version=18)
    assert str(dtype) in str(info.value) and isinstance(info.value, OnnxExporterError)
    # torch.onnx writes the Cast at opset 18, which the ONNX checker rejects.
    theirs = _torch_onnx(To(dtype), (x,), opset_version=18)
    with pytest.raises((onnx.checker.ValidationError, onnx.shape_inference.InferenceError),
                       match="unsupported type tensor\\(float8"):
        onnx.checker.check_model(theirs.model_proto, full_check=True)


# -- float4 ---------------------------------------------------------------------------------

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _fp4_values(packed: torch.Tensor) -> np.ndarray:
    """The FP4 values a float4_e2m1fn_x2 tensor holds, low nibble first (the spec's table)."""
    bits = packed.view(torch.uint8).numpy().astype(np.int64)
    nibbles = np.stack([bits & 0xF, bits >> 4], axis=-1).reshape(*bits.shape[:-1], -1)
    return np.where(nibbles & 8, -1.0, 1.0) * np.asarray(E2M1)[nibbles & 7]


class Float4Buffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        packed = torch.randint(0, 256, (3, 5), dtype=torch.uint8)
        self.register_buffer("w", packed.view(torch.float4_e2m1fn_x2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.w, x + 1


def _float4_outputs(proto: onnx.ModelProto, x: torch.Tensor) -> list[np.ndarray]:
    # ONNX Runtime 1.32 has no CPU kernel taking FLOAT4E2M1 (not even Identity).
    return [np.asarray(o).astype(np.float64)
            for o in ReferenceEvaluator(proto).run(None, {"x": x.numpy()})]


def test_float4_buffer_unpacked_like_torch_onnx() -> None:
    model, x = Float4Buffer(), torch.randn(2)
    expected = _fp4_values(model.w)
    assert expected.shape == (3, 10)
    ours = onnxport.export(model, (x,), opset_version=23)
    theirs = _torch_onnx(model, (x,), opset_version=23)
    for proto in (ours.model_proto, theirs.model_proto):
        onnx.checker.check_model(proto, full_check=True)
        (w,) = [i for i in proto.graph.initializer if i.name == "w"]
        assert w.data_type == onnx.TensorProto.FLOAT4E2M1 and list(w.dims) == [3, 10]
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(w).astype(np.float64), expected)
        out = proto.graph.output[0].type.tensor_type
        assert out.elem_type == onnx.TensorProto.FLOAT4E2M1
        assert [d.dim_value for d in out.shape.dim] == [3, 10]
        w_out, y = _float4_outputs(proto, x)
        np.testing.assert_array_equal(w_out, expected)
        np.testing.assert_array_equal(y, (x + 1).numpy())


def test_float4_needs_opset_23() -> None:
    model, x = Float4Buffer(), torch.randn(2)
    with pytest.raises(TranslationError, match=r"float4_e2m1fn_x2 \(ONNX FLOAT4E2M1\) needs opset 23"):
        onnxport.export(model, (x,), opset_version=22)
    # torch.onnx writes FLOAT4E2M1 into an opset-22 model.
    theirs = _torch_onnx(model, (x,), opset_version=22)
    assert theirs.model_proto.opset_import[0].version == 22
    assert theirs.model_proto.graph.initializer[0].data_type == onnx.TensorProto.FLOAT4E2M1
