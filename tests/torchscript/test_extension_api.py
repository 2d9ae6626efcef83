"""Every code example and public name of the TorchScript exporter's docs (../shared/reference/003)
with `onnxport` in place of `torch.onnx`: symbolic functions, autograd.Functions, custom ops,
export_to_pretty_string, unconvertible_ops, and the small helpers."""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport import symbolic_helper
from onnxport.translate import symbolic as _symbolic


def _export(model: Any, args: Any, **kwargs: Any) -> onnx.ModelProto:
    buf = io.BytesIO()
    assert onnxport.export(model, args, buf, dynamo=False, **kwargs) is None
    return onnx.load_from_string(buf.getvalue())


def _run(proto: onnx.ModelProto, *inputs: torch.Tensor) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: t.detach().numpy() for n, t in zip(names, inputs)})


def _ops(proto: onnx.ModelProto) -> list[str]:
    """The op types of the graph's nodes, constants left out."""
    return [n.op_type for n in proto.graph.node if n.op_type != "Constant"]


# -- Example: AlexNet from PyTorch to ONNX ---------------------------------------------------

class AlexNet(torch.nn.Module):
    """torchvision's AlexNet architecture (random weights, narrower to keep the test quick)."""

    def __init__(self, num_classes: int = 1000, w: int = 16) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, w, kernel_size=11, stride=4, padding=2), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(kernel_size=3, stride=2),
            torch.nn.Conv2d(w, 3 * w, kernel_size=5, padding=2), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(kernel_size=3, stride=2),
            torch.nn.Conv2d(3 * w, 6 * w, kernel_size=3, padding=1), torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(6 * w, 4 * w, kernel_size=3, padding=1), torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(4 * w, 4 * w, kernel_size=3, padding=1), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = torch.nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = torch.nn.Sequential(
            torch.nn.Dropout(), torch.nn.Linear(4 * w * 6 * 6, 64 * w), torch.nn.ReLU(inplace=True),
            torch.nn.Dropout(), torch.nn.Linear(64 * w, 64 * w), torch.nn.ReLU(inplace=True),
            torch.nn.Linear(64 * w, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def test_alexnet_example(tmp_path: Any, capsys: Any) -> None:
    dummy_input = torch.randn(10, 3, 224, 224)
    model = AlexNet().eval()
    input_names = ["actual_input_1"] + ["learned_%d" % i for i in range(16)]
    output_names = ["output1"]
    path = str(tmp_path / "alexnet.onnx")
    onnxport.export(model, dummy_input, path, verbose=True, input_names=input_names,
                    output_names=output_names, dynamo=False)
    assert "graph(" in capsys.readouterr().out  # verbose prints the graph
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    onnx.helper.printable_graph(proto.graph)
    ort_session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outputs = ort_session.run(None, {"actual_input_1": dummy_input.numpy()})
    assert [o.name for o in proto.graph.output] == ["output1"]
    torch.testing.assert_close(torch.from_numpy(outputs[0]), model(dummy_input),
                               rtol=1e-4, atol=1e-4)


# -- Avoiding pitfalls -----------------------------------------------------------------------

def test_pitfall_examples() -> None:
    class Cat(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.cat((x, y), dim=1)

    class Reshape(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.reshape(y, -1)

    class Model(torch.nn.Module):
        def forward(self, states: torch.Tensor) -> Any:
            batch_size, seq_length = states.shape[:2]
            real_seq_length = seq_length
            real_seq_length = real_seq_length + 2
            return real_seq_length + seq_length

    x, y = torch.randn(1, 2), torch.randn(1, 2)
    (out,) = _run(_export(Cat(), (x, y)), x, y)
    torch.testing.assert_close(torch.from_numpy(out), torch.cat((x, y), dim=1))
    x = torch.randn(4, 3)
    (out,) = _run(_export(Reshape(), (x, torch.tensor(2))), x, torch.tensor(2))
    assert out.shape == (2, 6)
    states = torch.randn(2, 5, 3)
    (out,) = _run(_export(Model(), (states,)), states)
    assert int(out) == 12


# -- ATen operators: the ELU example ---------------------------------------------------------

def test_elu_symbolic_example() -> None:
    graph = torch.jit.trace(torch.nn.ELU(), torch.ones(1)).graph
    assert "aten::elu" in str(graph)

    calls = []

    def elu(g: Any, input: Any, alpha: Any, inplace: bool = False) -> Any:
        calls.append(alpha)
        return g.op("Elu", input, alpha_f=alpha)

    onnxport.register_custom_op_symbolic("aten::elu", elu, 9)
    x = torch.randn(3, 4)
    proto = _export(torch.nn.ELU(alpha=0.5), (x,), opset_version=9)
    assert calls == [0.5]
    assert _ops(proto) == ["Elu"]
    assert {o.domain: o.version for o in proto.opset_import}[""] == 9
    (out,) = _run(proto, x)
    torch.testing.assert_close(torch.from_numpy(out), torch.nn.functional.elu(x, 0.5))
    # Registered at 9: applies to 9 and above, not below.
    assert calls and _ops(_export(torch.nn.ELU(), (x,), opset_version=17)) == ["Elu"]
    assert len(calls) == 2
    _export(torch.nn.ELU(), (x,), opset_version=8)
    assert len(calls) == 2
    onnxport.unregister_custom_op_symbolic("aten::elu", 9)
    _export(torch.nn.ELU(), (x,), opset_version=17)
    assert len(calls) == 2


def test_symbolic_overrides_builtin_and_inplace_variant() -> None:
    def relu_as_abs(g: Any, input: Any) -> Any:
        return g.op("Abs", input)

    onnxport.register_custom_op_symbolic("aten::relu", relu_as_abs, 13)

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + torch.relu_(x * 2)

    x = torch.randn(5)
    proto = _export(M(), (x,))
    assert "Relu" not in _ops(proto) and _ops(proto).count("Abs") == 2
    (out,) = _run(proto, x)
    torch.testing.assert_close(torch.from_numpy(out), x.abs() + (x * 2).abs())
    # The dynamo flavour keeps its own op library (the symbolics are TorchScript-only).
    program = onnxport.export(M(), (x,))
    assert "Relu" in [n.op_type for n in program.model.graph]


def test_multi_output_symbolic_and_attribute_suffixes() -> None:
    def topk_like(g: Any, input: Any, k: Any, dim: Any, largest: Any, sorted: Any) -> Any:
        values, indices = g.op("TopK", input, g.op("Constant", value_t=torch.tensor([k])),
                               axis_i=dim, largest_i=int(largest), sorted_i=int(sorted),
                               outputs=2)
        return values, indices

    onnxport.register_custom_op_symbolic("aten::topk", topk_like, 11)

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return torch.topk(x, 2)

    x = torch.randn(3, 5)
    proto = _export(M(), (x,))
    values, indices = _run(proto, x)
    expected = torch.topk(x, 2)
    torch.testing.assert_close(torch.from_numpy(values), expected.values)
    assert indices.dtype == np.int64


# -- torch.autograd.Functions ------------------------------------------------------------------

class MyRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def symbolic(g: Any, input: Any) -> Any:
        return g.op("Clip", input, g.op("Constant", value_t=torch.tensor(0, dtype=torch.float)))


class MyLogExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(input)
        h = input.exp()
        return h.log().log()


class _Apply(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn.apply(x)


def test_static_symbolic_method() -> None:
    x = torch.randn(2, 3)
    proto = _export(_Apply(MyRelu), (x,))
    assert _ops(proto) == ["Clip"]
    (out,) = _run(proto, x)
    torch.testing.assert_close(torch.from_numpy(out), x.clamp(min=0))


def test_inline_autograd_function() -> None:
    x = torch.rand(1) + 1.5
    proto = _export(_Apply(MyLogExp), (x,))
    assert _ops(proto) == ["Exp", "Log", "Log"]
    (out,) = _run(proto, x)
    torch.testing.assert_close(torch.from_numpy(out), x.exp().log().log())


def test_autograd_inlining_false_and_fallthrough() -> None:
    x = torch.rand(1) + 1.5
    with pytest.raises(onnxport.UnsupportedOperatorError, match="MyLogExp"):
        _export(_Apply(MyLogExp), (x,), autograd_inlining=False)
    for export_type in (onnxport.OperatorExportTypes.ONNX_FALLTHROUGH,
                        onnxport.OperatorExportTypes.ONNX_ATEN_FALLBACK):
        proto = _export(_Apply(MyLogExp), (x,), operator_export_type=export_type)
        (node,) = proto.graph.node
        assert (node.domain, node.op_type) == ("prim", "PythonOp")
        assert onnx.helper.get_attribute_value(node.attribute[0]) == b"MyLogExp"
    # A Function with a symbolic uses it whatever autograd_inlining says.
    assert _ops(_export(_Apply(MyRelu), (x,), autograd_inlining=False)) == ["Clip"]


# -- Custom operators ----------------------------------------------------------------------

def test_onnxscript_selu_example() -> None:
    onnxscript = pytest.importorskip("onnxscript")
    from onnxscript.onnx_opset import opset15 as op

    opset_version = 15
    x = torch.randn(1, 2, 3, 4, requires_grad=True)
    model = torch.nn.SELU()
    custom_opset = onnxscript.values.Opset(domain="onnx-script", version=1)

    @onnxscript.script(custom_opset)
    def Selu(X):  # noqa: N802, N803  (the documented example)
        alpha = 1.67326  # auto wrapped as Constants
        gamma = 1.0507
        alphaX = op.CastLike(alpha, X)  # noqa: N806
        gammaX = op.CastLike(gamma, X)  # noqa: N806
        neg = gammaX * (alphaX * op.Exp(X) - alphaX)
        pos = gammaX * X
        zero = op.CastLike(0, X)
        return op.Where(X <= zero, neg, pos)

    def custom_selu(g: Any, X: Any) -> Any:  # noqa: N803
        return g.onnxscript_op(Selu, X).setType(X.type())

    onnxport.register_custom_op_symbolic(symbolic_name="aten::selu", symbolic_fn=custom_selu,
                                         opset_version=opset_version)
    buf = io.BytesIO()
    onnxport.export(model, x, buf, opset_version=opset_version,
                    custom_opsets={"onnx-script": 2}, dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    (node,) = proto.graph.node
    assert (node.domain, node.op_type) == ("onnx-script", "Selu")
    assert [f.name for f in proto.functions] == ["Selu"]
    opsets = {o.domain: o.version for o in proto.opset_import}
    assert opsets["onnx-script"] == 2 and opsets[""] == 15
    assert proto.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    (out,) = _run(proto, x)
    torch.testing.assert_close(torch.from_numpy(out), model(x).detach(), rtol=1e-4, atol=1e-4)


@torch.library.custom_op("custom_ops::foo_forward", mutates_args=())
def _foo_forward(input1: torch.Tensor, input2: torch.Tensor, attr1: float, attr2: int
                 ) -> torch.Tensor:
    """The documented C++ op, defined in Python (same schema, same TorchScript node)."""
    return input1 * attr1 + input2 * attr2


@_foo_forward.register_fake
def _(input1: torch.Tensor, input2: torch.Tensor, attr1: float, attr2: int) -> torch.Tensor:
    return torch.empty_like(input1)


def test_custom_cpp_op_example() -> None:
    @symbolic_helper.parse_args("v", "v", "f", "i")
    def symbolic_foo_forward(g: Any, input1: Any, input2: Any, attr1: Any, attr2: Any) -> Any:
        return g.op("custom_domain::Foo", input1, input2, attr1_f=attr1, attr2_i=attr2)

    onnxport.register_custom_op_symbolic("custom_ops::foo_forward", symbolic_foo_forward, 9)

    class FooModel(torch.nn.Module):
        def __init__(self, attr1: float, attr2: int) -> None:
            super().__init__()
            self.attr1 = attr1
            self.attr2 = attr2

        def forward(self, input1: torch.Tensor, input2: torch.Tensor) -> torch.Tensor:
            return torch.ops.custom_ops.foo_forward(input1, input2, self.attr1, self.attr2)

    attr1, attr2 = 0.5, 3
    example_input1 = torch.randn(2, 3)
    model = FooModel(attr1, attr2)
    buf = io.BytesIO()
    onnxport.export(model, (example_input1, example_input1), buf,
                    custom_opsets={"custom_domain": 2}, dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    (node,) = proto.graph.node
    assert (node.domain, node.op_type) == ("custom_domain", "Foo")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"attr1": pytest.approx(0.5), "attr2": 3}
    assert {o.domain: o.version for o in proto.opset_import}["custom_domain"] == 2
    # The output keeps the traced dtype and shape.
    tensor_type = proto.graph.output[0].type.tensor_type
    assert tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in tensor_type.shape.dim] == [2, 3]
    # Without the symbolic, the op is reported as unsupported.
    onnxport.unregister_custom_op_symbolic("custom_ops::foo_forward", 9)
    with pytest.raises(onnxport.UnsupportedOperatorError, match="foo_forward"):
        _export(model, (example_input1, example_input1))


def test_parse_args_codes() -> None:
    seen: dict[str, Any] = {}

    @symbolic_helper.parse_args("v", "is", "b", "none")
    def sum_dims(g: Any, input: Any, dims: Any, keepdim: Any, dtype: Any) -> Any:
        seen.update(dims=dims, keepdim=keepdim, dtype=dtype)
        return g.op("ReduceSum", input, g.op("Constant", value_t=torch.tensor(dims)),
                    keepdims_i=int(keepdim))

    onnxport.register_custom_op_symbolic("aten::sum", sum_dims, 13)

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum(dim=[0, 2], keepdim=True)

    x = torch.randn(2, 3, 4)
    proto = _export(M(), (x,))
    assert seen == {"dims": [0, 2], "keepdim": True, "dtype": None}
    (out,) = _run(proto, x)
    torch.testing.assert_close(torch.from_numpy(out), x.sum(dim=[0, 2], keepdim=True))
    # Each code on constants given as graph values too.
    g = onnxport.translate.GraphBuilder(__import__("onnx_ir").Graph([], [], nodes=[]), 17)
    assert _symbolic.parse_arg(g.const(3), "i") == 3
    assert _symbolic.parse_arg(g.const(2.5), "f") == 2.5
    assert _symbolic.parse_arg(g.const([1, 2]), "is") == [1, 2]
    assert _symbolic.parse_arg([g.const(1), 4], "is") == [1, 4]
    assert _symbolic.parse_arg(g.const([0.5, 1.5]), "fs") == [0.5, 1.5]
    assert _symbolic.parse_arg(g.const(True), "b") is True
    assert _symbolic.parse_arg("mean", "s") == "mean"
    assert torch.equal(_symbolic.parse_arg(g.const([1.0, 2.0]), "t"), torch.tensor([1.0, 2.0]))
    assert _symbolic.parse_arg(None, "i") is None


def test_register_validates_names() -> None:
    with pytest.raises(ValueError, match="<domain>::<op>"):
        onnxport.register_custom_op_symbolic("relu", lambda g, x: x, 9)
    onnxport.unregister_custom_op_symbolic("aten::not_registered", 9)  # no error


# -- Discovering all unconvertible ATen ops at once -----------------------------------------

def test_unconvertible_ops() -> None:
    class Bad(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = torch.special.entr(x)
            b = torch.special.entr(x + 1)
            return torch.special.sinc(a * b).relu()

    model, args, opset_version = Bad(), (torch.rand(3),), 17
    torch_script_graph, unconvertible_ops = onnxport.utils.unconvertible_ops(
        model, args, opset_version=opset_version)
    assert isinstance(torch_script_graph, torch._C.Graph)
    assert unconvertible_ops == ["aten::special_entr", "aten::special_entr",
                                 "aten::special_sinc"]
    assert set(unconvertible_ops) == {"aten::special_entr", "aten::special_sinc"}
    # A registered symbolic makes an op convertible.
    onnxport.register_custom_op_symbolic("aten::special_sinc", lambda g, x: x, 9)
    _, ops = onnxport.utils.unconvertible_ops(model, args)
    assert set(ops) == {"aten::special_entr"}


# -- Python API ----------------------------------------------------------------------------

def test_export_to_pretty_string() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    x = torch.randn(2, 3)
    text = onnxport.export_to_pretty_string(model, (x,), input_names=["x"])
    assert "Gemm" in text and "Relu" in text and "<" in text.splitlines()[0]
    google = onnxport.export_to_pretty_string(model, (x,), google_printer=True)
    assert 'op_type: "Relu"' in google and "\n  node {" in google
    assert "name: " in google.split("node {")[1].split("}")[0]
    unnamed = onnxport.export_to_pretty_string(model, (x,), google_printer=True,
                                                add_node_names=False)
    node_text = unnamed.split("node {")[1].split("op_type")[0]
    assert "  name: " not in node_text
    assert onnxport.utils.export_to_pretty_string is onnxport.export_to_pretty_string


def test_select_model_mode_for_export() -> None:
    model = torch.nn.Dropout()
    model.train()
    with onnxport.select_model_mode_for_export(model, onnxport.TrainingMode.EVAL):
        assert not model.training
    assert model.training
    model.eval()
    with onnxport.select_model_mode_for_export(model, onnxport.TrainingMode.TRAINING):
        assert model.training
    assert not model.training
    with onnxport.select_model_mode_for_export(model, onnxport.TrainingMode.PRESERVE):
        assert not model.training


def test_is_in_onnx_export_during_torchscript_export() -> None:
    seen = []

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(onnxport.is_in_onnx_export())
            return x + 1

    assert not onnxport.is_in_onnx_export()
    _export(M(), (torch.randn(2),))
    assert seen and all(seen)
    assert not onnxport.is_in_onnx_export()


def test_enable_disable_log(caplog: Any) -> None:
    onnxport.enable_log()
    try:
        with caplog.at_level(logging.INFO, logger="onnxport"):
            _export(torch.nn.ReLU(), (torch.randn(2),))
        assert any("translated" in r.getMessage() for r in caplog.records)
    finally:
        onnxport.disable_log()
    caplog.clear()
    _export(torch.nn.ReLU(), (torch.randn(2),))
    assert not [r for r in caplog.records if r.name.startswith("onnxport")
                and r.levelno < logging.WARNING]


def test_jit_scalar_type() -> None:
    from onnxport import JitScalarType

    assert JitScalarType.from_value(torch.zeros(2, dtype=torch.float16)) == JitScalarType.HALF
    assert JitScalarType.FLOAT.onnx_type() == onnx.TensorProto.FLOAT
    assert JitScalarType.INT64.dtype() is torch.int64
    assert JitScalarType.INT64.scalar_name() == "Long"
    assert JitScalarType.from_dtype(torch.bool) == JitScalarType.BOOL
    assert JitScalarType.from_value(None, JitScalarType.FLOAT) == JitScalarType.FLOAT
    seen = []

    def relu(g: Any, input: Any) -> Any:
        seen.append((JitScalarType.from_value(input), input.type().scalarType(),
                     input.type().sizes()))
        return g.op("Relu", input)

    onnxport.register_custom_op_symbolic("aten::relu", relu, 9)
    _export(torch.nn.ReLU(), (torch.randn(2, 3),))
    assert seen == [(JitScalarType.FLOAT, "Float", [2, 3])]


def test_errors_are_public() -> None:
    assert issubclass(onnxport.CheckerError, onnxport.OnnxExporterError)
    assert issubclass(onnxport.UnsupportedOperatorError, onnxport.OnnxExporterError)


# -- export_modules_as_functions ------------------------------------------------------------

class Block(torch.nn.Module):
    scale: float  # an annotated attribute: exported as a function attribute

    def __init__(self, n: int) -> None:
        super().__init__()
        self.scale = 2.0
        self.lin = torch.nn.Linear(n, n)
        self.act = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x)) * self.scale


class TwoBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Block(4)
        self.b = Block(4)
        self.out = torch.nn.Linear(4, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.b(self.a(x)))


@pytest.mark.parametrize("which", [True, {Block}])
def test_export_modules_as_functions(which: Any) -> None:
    model, x = TwoBlocks().eval(), torch.randn(3, 4)
    proto = _export(model, (x,), opset_version=15, export_modules_as_functions=which)
    onnx.checker.check_model(proto, full_check=True)
    calls = [(n.domain, n.op_type) for n in proto.graph.node]
    block = (f"pkg.{Block.__module__}", "Block")
    assert calls[:2] == [block, block]  # one function, called twice
    functions = {(f.domain, f.name): f for f in proto.functions}
    assert [a.name for a in functions[block].attribute_proto] == ["scale"]
    assert [onnx.helper.get_attribute_value(a) for a in proto.graph.node[0].attribute] == [2.0]
    if which is True:
        # Every module call: Linear with and without bias are two functions.
        assert calls[2] == ("pkg.torch.nn.modules.linear", "Linear_1")
        assert [n.op_type for n in functions[block].node] == ["Constant", "Linear", "ReLU", "Mul"]
        linear = functions[("pkg.torch.nn.modules.linear", "Linear")]
        assert [a.name for a in linear.attribute_proto] == ["in_features", "out_features"]
    else:
        assert calls[2] == ("", "Gemm")
        assert [n.op_type for n in functions[block].node] == ["Constant", "Gemm", "Relu", "Mul"]
    (out,) = _run(proto, x)
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


def test_export_modules_as_functions_needs_opset_15() -> None:
    with pytest.raises(ValueError, match="opset_version >= 15"):
        _export(TwoBlocks(), (torch.randn(3, 4),), opset_version=14,
                export_modules_as_functions=True)
