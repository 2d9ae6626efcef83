"""OnnxRegistry (reference 001): queries, register_op with onnxscript and plain functions."""

from __future__ import annotations

import onnx
import onnxscript
import pytest
import torch
from onnxscript import FLOAT
from onnxscript import opset18 as op

import onnxport
from tests.helpers import count

custom = onnxscript.values.Opset("custom.domain", 1)


@onnxscript.script(custom)
def custom_relu(self: FLOAT) -> FLOAT:
    return op.Max(self, op.CastLike(0.0, self))


@onnxscript.script(custom)
def custom_leaky(self: FLOAT, negative_slope: float = 0.01) -> FLOAT:
    return op.Where(op.Greater(self, op.CastLike(0.0, self)), self,
                    op.Mul(self, op.CastLike(negative_slope, self)))


def test_registry_queries() -> None:
    registry = onnxport.OnnxRegistry()
    assert registry.opset_version == 18
    assert registry.is_registered_op("aten", "relu")
    assert registry.is_registered_op("aten", "add", "Tensor")
    assert not registry.is_registered_op("aten", "add", "no_such_overload")
    functions = registry.get_op_functions("aten", "relu")
    assert functions and all(not f.is_custom for f in functions)
    assert registry.get_op_functions("nosuchns", "op") is None


def test_register_op_rejects_malformed_names() -> None:
    registry = onnxport.OnnxRegistry()
    with pytest.raises(ValueError):
        registry.register_op(custom_relu, "aten", "relu::bad")
    with pytest.raises(ValueError):
        registry.register_op(custom_relu, "", "relu")


def test_onnxscript_function_replaces_builtin_for_that_registry_only() -> None:
    registry = onnxport.OnnxRegistry()
    registry.register_op(custom_relu, "aten", "relu")
    functions = registry.get_op_functions("aten", "relu")
    assert functions is not None and functions[-1].is_custom

    model = torch.nn.ReLU()
    x = torch.randn(3, 4)
    program = onnxport.export(model, (x,), registry=registry)
    assert program is not None
    nodes = list(program.model.graph)
    assert [(n.domain, n.op_type) for n in nodes] == [("custom.domain", "custom_relu")]
    assert program.model.graph.opset_imports["custom.domain"] == 1
    assert [f.name for f in program.model.functions.values()] == ["custom_relu"]
    onnx.checker.check_model(program.model_proto, full_check=True)
    torch.testing.assert_close(program(x)[0], model(x))
    plain = onnxport.export(model, (x,))
    assert plain is not None and count(plain, "Relu") == 1


def test_onnxscript_attributes_bind_from_aten_arguments() -> None:
    registry = onnxport.OnnxRegistry()
    registry.register_op(custom_leaky, "aten", "leaky_relu")
    model = torch.nn.LeakyReLU(0.2)
    x = torch.randn(5)
    program = onnxport.export(model, (x,), registry=registry)
    assert program is not None
    node = next(iter(program.model.graph))
    assert node.op_type == "custom_leaky" and node.attributes["negative_slope"].value == pytest.approx(0.2)
    torch.testing.assert_close(program(x)[0], model(x))


def test_custom_torch_library_op_dispatches_to_registered_function() -> None:
    @torch.library.custom_op("onnxport_test::scaled_relu", mutates_args=())
    def scaled_relu(x: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.relu(x) * scale

    @scaled_relu.register_fake
    def _(x: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.empty_like(x)

    def translation(g, x, scale):  # type: ignore[no-untyped-def]
        return g.op("Mul", g.op("Relu", x), scale)

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return scaled_relu(x, 2.5) + 1

    registry = onnxport.OnnxRegistry()
    registry.register_op(translation, "onnxport_test", "scaled_relu")
    x = torch.randn(4)
    program = onnxport.export(M(), (x,), registry=registry)
    assert program is not None
    torch.testing.assert_close(program(x)[0], M()(x))
    # Without the registration, the op's own body (plain torch) is inlined in its place.
    inlined = onnxport.export(M(), (x,))
    assert "Relu" in [n.op_type for n in inlined.model.graph]
    torch.testing.assert_close(inlined(x)[0], M()(x))


def _sigmoid_gelu(self):  # type: ignore[no-untyped-def]
    return op.Mul(self, op.Sigmoid(op.Mul(self, op.Constant(value_float=1.702))))


def test_traced_onnxscript_function_is_inlined() -> None:
    traced = onnxscript.values.TracedOnnxFunction(custom, _sigmoid_gelu)
    registry = onnxport.OnnxRegistry()
    registry.register_op(traced, "aten", "sigmoid")
    x = torch.randn(6)
    program = onnxport.export(torch.nn.Sigmoid(), (x,), registry=registry)
    assert program is not None
    assert [n.op_type for n in program.model.graph] == ["Constant", "Mul", "Sigmoid", "Mul"]
    torch.testing.assert_close(program(x)[0], x * torch.sigmoid(1.702 * x))
