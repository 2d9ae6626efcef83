"""The TorchScript-based flavour: onnxport.export(model, args, f, dynamo=False, ...)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport.verify.compare import flatten_outputs


def _export(model: Any, args: Any, **kwargs: Any) -> onnx.ModelProto:
    buf = io.BytesIO()
    assert onnxport.export(model, args, buf, dynamo=False, **kwargs) is None
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _run(proto: onnx.ModelProto, *inputs: torch.Tensor) -> list[torch.Tensor]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert len(names) == len(inputs), names
    outputs = session.run(None, {n: t.detach().numpy() for n, t in zip(names, inputs)})
    return [torch.from_numpy(np.asarray(o)) for o in outputs]


def _compare(model: Any, args: Any, *, run_inputs: tuple[torch.Tensor, ...] | None = None,
             eager: Any = None, **kwargs: Any) -> onnx.ModelProto:
    """Export, run in ONNX Runtime, compare with eager PyTorch."""
    if isinstance(model, torch.nn.Module):
        model.eval()
    proto = _export(model, args, **kwargs)
    inputs = run_inputs if run_inputs is not None else (
        (args,) if isinstance(args, torch.Tensor) else tuple(a for a in args if isinstance(a, torch.Tensor)))
    with torch.no_grad():
        expected = flatten_outputs(eager(*inputs) if eager is not None else model(*inputs))
    actual = _run(proto, *inputs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
    return proto


def _op_types(proto: onnx.ModelProto) -> list[str]:
    out = []

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            out.append(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(proto.graph)
    return out


def _dims(value: onnx.ValueInfoProto) -> list[Any]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class SmallAlexNet(torch.nn.Module):
    """AlexNet's structure at a small size."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, kernel_size=11, stride=4, padding=2), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(kernel_size=3, stride=2),
            torch.nn.Conv2d(16, 32, kernel_size=5, padding=2), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(kernel_size=3, stride=2),
            torch.nn.Conv2d(32, 32, kernel_size=3, padding=1), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = torch.nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = torch.nn.Sequential(
            torch.nn.Dropout(), torch.nn.Linear(32 * 6 * 6, 64), torch.nn.ReLU(inplace=True),
            torch.nn.Dropout(), torch.nn.Linear(64, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def test_mlp() -> None:
    proto = _compare(MLP(), (torch.randn(3, 8),))
    assert [i.name for i in proto.graph.input] == ["x"]
    assert {i.name for i in proto.graph.initializer} == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert proto.opset_import[0].version == 20     # torch.onnx 2.13's default (2.1-2.6: 17)


def test_conv2d_reference_example() -> None:
    # The reference's Conv2d example, with dynamo=False.
    class MyModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 128, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.conv1(x))

    proto = _compare(MyModel(), (torch.randn(1, 1, 128, 128),))
    assert "Conv" in _op_types(proto)
    assert {n.name for n in proto.graph.node if n.op_type == "Conv"} == {"/conv1/Conv"}


def test_alexnet_like_with_names_and_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    model = SmallAlexNet().eval()
    x = torch.randn(2, 3, 127, 127)
    proto = _compare(model, x, input_names=["actual_input_1"], output_names=["output1"], verbose=True)
    assert [i.name for i in proto.graph.input] == ["actual_input_1"]
    assert [o.name for o in proto.graph.output] == ["output1"]
    assert "features.0.weight" in {i.name for i in proto.graph.initializer}
    assert "graph(" in capsys.readouterr().out
    assert "Dropout" not in _op_types(proto)


def test_transformer_encoder_layer() -> None:
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    _compare(layer, (torch.randn(2, 5, 16),))


@pytest.mark.parametrize("opset", [11, 12, 14, 16])
def test_transformer_encoder_layer_old_opsets(opset: int) -> None:
    # LayerNormalization (17) is expanded; ReduceMean goes through opset 13 on the way down.
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    proto = _compare(layer, (torch.randn(2, 5, 16),), opset_version=opset)
    assert "LayerNormalization" not in _op_types(proto)


def test_lstm_and_upsample_opset_11() -> None:
    _compare(torch.nn.LSTM(4, 8, num_layers=2, batch_first=True), (torch.randn(2, 5, 4),),
             opset_version=11)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.GroupNorm(2, 8),
                                torch.nn.Upsample(scale_factor=2, mode="bilinear"))
    _compare(model, (torch.randn(1, 4, 8, 8),), opset_version=11)


def test_transformer_encoder_layer_dynamic_axes() -> None:
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32,
                                             batch_first=True).eval()
    proto = _export(layer, (torch.randn(2, 5, 16),), input_names=["src"], output_names=["out"],
                    dynamic_axes={"src": {0: "batch", 1: "seq"}, "out": {0: "batch", 1: "seq"}})
    assert _dims(proto.graph.input[0]) == ["batch", "seq", 16]
    assert _dims(proto.graph.output[0]) == ["batch", "seq", 16]
    for shape in ((2, 5, 16), (3, 7, 16), (1, 1, 16)):
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(_run(proto, x)[0], layer(x))


def test_write_through_index() -> None:
    class Setter(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.clone()
            y[:, 0] = 0
            y[1:, 2:].mul_(3)
            return y + 1

    _compare(Setter(), (torch.randn(3, 4),))


# In-place ops and the views that share their memory (fuzz seeds 109, 320, 2158): each case
# returns the mutated tensors, so a write that misses one of its aliases changes an output.
def _base_seen_by_an_earlier_view(x: torch.Tensor) -> Any:
    y = x.abs()
    v = y[..., ::2]
    y.clamp_(0, 0.5)  # seed 2158: v, taken before the write, sees it
    return v.flatten(1)


def _write_through_flatten(x: torch.Tensor) -> Any:
    y = x * 2
    f = y.flatten(1)
    f[:, 0] = 0  # seed 109: a write through select of flatten reaches y
    return y, f


def _write_into_base_of_flatten_and_narrow(x: torch.Tensor) -> Any:
    y = torch.nn.functional.gelu(x)
    n = y.flatten(1).narrow(1, 1, y.shape[1] * y.shape[2] - 1)
    y.mul_(-1.25)  # seed 320: the views made before see it
    return n.flatten(1), y.mean(1)


def _write_through_transpose_and_permute(x: torch.Tensor) -> Any:
    y = x * 2
    y.transpose(1, 2).add_(1)
    t = y.permute(2, 0, 1)
    t[0] = 5
    return y, t


def _reshape_that_copies(x: torch.Tensor) -> Any:
    y = (x * 2).transpose(1, 2)
    r = y.reshape(2, -1)  # not viewable with y's strides: a copy, the write stays in r
    r.add_(1)
    return y, r


def _write_through_split_unbind_chunk(x: torch.Tensor) -> Any:
    y = x * 2
    a, _ = y.split(3, 2)
    a.mul_(3)
    y.unbind(1)[0].mul_(-1)
    y.chunk(2, 2)[1].add_(1)
    return y


def _write_through_diagonal_and_chain(x: torch.Tensor) -> Any:
    y = x * 2
    y.diagonal(0, 1, 2).mul_(3)
    v = y.view(6, 4)
    y.add_(1)
    w = v.unsqueeze(0)
    w.mul_(2)
    y[:, 1][:, 1:3].zero_()
    return y, v, w


def _same_dtype_to_and_contiguous(x: torch.Tensor) -> Any:
    y = x * 2
    y.to(torch.float32).add_(1)
    y.contiguous().add_(1)
    w = y.transpose(0, 1).contiguous()  # a copy
    w.add_(1)
    return y, w


@pytest.mark.parametrize("fn", [
    _base_seen_by_an_earlier_view, _write_through_flatten,
    _write_into_base_of_flatten_and_narrow, _write_through_transpose_and_permute,
    _reshape_that_copies, _write_through_split_unbind_chunk, _write_through_diagonal_and_chain,
    _same_dtype_to_and_contiguous])
def test_inplace_ops_reach_every_alias(fn: Any) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return fn(x)

    x = torch.randn(2, 3, 4)
    _compare(Model(), (x,), eager=lambda t: fn(t.clone()))


def _setitem_on_a_dynamic_batch(x: torch.Tensor) -> Any:
    y = x * 2
    f = y.flatten(1)
    f[:, 0] = 0  # traced as a slice of all of dim 0, then select
    y[:, 1][:, 1:3].zero_()
    return y, f


@pytest.mark.parametrize("fn", [_setitem_on_a_dynamic_batch, _base_seen_by_an_earlier_view,
                                _write_through_split_unbind_chunk])
def test_inplace_ops_reach_every_alias_with_a_dynamic_batch(fn: Any) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return fn(x)

    proto = _export(Model(), (torch.randn(2, 3, 4),), input_names=["x"],
                    dynamic_axes={"x": {0: "batch"}})
    x = torch.randn(3, 3, 4)
    for actual, expected in zip(_run(proto, x), flatten_outputs(fn(x.clone()))):
        torch.testing.assert_close(actual, expected)


def test_dict_holding_a_list_output() -> None:
    """torch.jit.trace refuses a dict whose value is a list (the fuzz suite's nested outputs,
    ~15% of its cases); traced as the flat tuple of its tensors, the ONNX outputs' order."""
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return x + 1, {"inner": [x * 2, x.sum(0)], "other": x.relu()}

    proto = _compare(Model(), (torch.randn(2, 3),), output_names=["a", "b", "c", "d"],
                     input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    assert [o.name for o in proto.graph.output] == ["a", "b", "c", "d"]
    x = torch.randn(4, 3)
    for actual, expected in zip(_run(proto, x), flatten_outputs(Model()(x))):
        torch.testing.assert_close(actual, expected)


def test_inplace_write_into_a_view_it_cannot_invert_is_a_typed_error() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 2
            y.movedim(1, 2).add_(1)
            return y

    with pytest.raises(onnxport.errors.TranslationError, match=r"aten::add_.*aten::movedim"):
        _export(Model(), (torch.randn(2, 3, 4),))


def test_args_forms() -> None:
    class TwoInputs(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor | None = None, scale: float = 2.0,
                    z: torch.Tensor | None = None) -> torch.Tensor:
            out = x * scale
            if y is not None:
                out = out + y
            if z is not None:
                out = out - z
            return out

    x, y = torch.randn(2, 3), torch.randn(2, 3)
    model = TwoInputs()
    # A tensor.
    proto = _compare(model, x)
    assert [i.name for i in proto.graph.input] == ["x"]
    # A tuple; the float is baked in.
    proto = _compare(model, (x, y, 3.0), eager=lambda a, b: model(a, b, 3.0))
    assert [i.name for i in proto.graph.input] == ["x", "y"]
    # A tuple ending in a dict of named arguments; `y` takes its default (None).
    proto = _compare(model, (x, {"z": y}), run_inputs=(x, y), eager=lambda a, b: model(a, z=b))
    assert [i.name for i in proto.graph.input] == ["x", "z"]


def test_args_positional_dict_with_empty_dict() -> None:
    class DictInput(torch.nn.Module):
        def forward(self, x: torch.Tensor, d: dict[str, torch.Tensor]) -> torch.Tensor:
            return x + d["a"]

    x, a = torch.randn(2), torch.randn(2)
    proto = _compare(DictInput(), (x, {"a": a}, {}), run_inputs=(x, a),
                     eager=lambda p, q: DictInput()(p, {"a": q}))
    assert len(proto.graph.input) == 2


def test_dynamic_axes_reference_example() -> None:
    class SumModule(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sum(x, dim=1)

    proto = _export(SumModule(), (torch.ones(2, 2),), input_names=["x"], output_names=["sum"])
    assert _dims(proto.graph.input[0]) == [2, 2]
    assert _dims(proto.graph.output[0]) == [2]
    proto = _export(SumModule(), (torch.ones(2, 2),), input_names=["x"], output_names=["sum"],
                    dynamic_axes={"x": {0: "my_custom_axis_name"}, "sum": [0]})
    assert proto.graph.input[0].name == "x" and proto.graph.output[0].name == "sum"
    assert _dims(proto.graph.input[0]) == ["my_custom_axis_name", 2]
    assert _dims(proto.graph.output[0]) == ["sum_dynamic_axes_1"]
    x = torch.randn(5, 2)
    torch.testing.assert_close(_run(proto, x)[0], x.sum(1))


def test_dynamic_axes_view_by_size() -> None:
    class Flatten(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(x.size(0), -1) * 2

    proto = _export(Flatten(), (torch.randn(2, 3, 4),), input_names=["x"],
                    dynamic_axes={"x": [0]})
    assert _dims(proto.graph.input[0]) == ["x_dynamic_axes_1", 3, 4]
    x = torch.randn(7, 3, 4)
    torch.testing.assert_close(_run(proto, x)[0], x.view(7, -1) * 2)


def test_keep_initializers_as_inputs() -> None:
    proto = _export(MLP(), (torch.randn(3, 8),), keep_initializers_as_inputs=True)
    assert [i.name for i in proto.graph.input][:1] == ["x"]
    assert {i.name for i in proto.graph.input} >= {"fc1.weight", "fc2.bias"}
    proto = _export(MLP(), (torch.randn(3, 8),))
    assert [i.name for i in proto.graph.input] == ["x"]


def test_export_params_false() -> None:
    model = MLP()
    proto = _export(model, (torch.randn(3, 8),), export_params=False)
    assert not proto.graph.initializer
    # The model takes its parameters as inputs, in state_dict order.
    assert [i.name for i in proto.graph.input] == ["x", *model.state_dict()]


def test_file_path(tmp_path: Any) -> None:
    path = tmp_path / "mlp.onnx"
    assert onnxport.export(MLP(), (torch.randn(3, 8),), str(path), dynamo=False) is None
    onnx.checker.check_model(onnx.load(str(path)))


@pytest.mark.parametrize("opset", range(11, 19))
def test_opsets(opset: int) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5), torch.nn.Softmax(-1))
    proto = _compare(model, (torch.randn(2, 3, 8, 8),), opset_version=opset)
    assert proto.opset_import[0].version == opset


def test_training_mode_keeps_dropout() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    model.eval()
    proto = _export(model, (torch.randn(2, 4),), training=onnxport.TrainingMode.TRAINING)
    # Training-mode dropout draws a random mask.
    assert {"Dropout", "RandomUniform", "RandomUniformLike", "Bernoulli"} & set(_op_types(proto))
    assert not model.training  # restored
    proto = _export(model, (torch.randn(2, 4),))
    assert not {"Dropout", "RandomUniform", "RandomUniformLike", "Bernoulli"} & set(_op_types(proto))


class ScriptedControlFlow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            y = self.lin(x)
        else:
            y = x * 2
        for i in range(x.size(0)):
            y = y + i
        return y


@pytest.mark.parametrize("opset", [11, 15, 17, 18])
def test_scripted_if_and_loop(opset: int) -> None:
    model = torch.jit.script(ScriptedControlFlow().eval())
    proto = _export(model, (torch.ones(3, 4),), input_names=["x"], dynamic_axes={"x": [0]},
                    opset_version=opset)
    assert {"If", "Loop"} <= set(_op_types(proto))
    for x in (torch.ones(3, 4), -torch.ones(3, 4), torch.randn(5, 4).abs(), -torch.randn(1, 4).abs(),
              torch.randn(0, 4)):
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(_run(proto, x)[0], expected)


def test_scripted_while_loop_with_counter() -> None:
    @torch.jit.script
    def halve_until_small(x: torch.Tensor) -> tuple[torch.Tensor, int]:
        steps = 0
        while bool(x.abs().max() > 1.0):
            x = x / 2
            steps += 1
        return x, steps

    proto = _export(halve_until_small, (torch.tensor([10.0, 3.0]),), input_names=["x"],
                    dynamic_axes={"x": [0]})
    assert "Loop" in _op_types(proto)
    for x in (torch.tensor([10.0, 3.0]), torch.tensor([0.5]), torch.tensor([100.0, -7.0, 2.0])):
        out, steps = _run(proto, x)
        expected, expected_steps = halve_until_small(x)
        torch.testing.assert_close(out, expected)
        assert int(steps) == expected_steps


def test_scripted_list_appended_in_data_dependent_loop_is_a_sequence() -> None:
    @torch.jit.script
    def running_tanh(x: torch.Tensor) -> torch.Tensor:
        outs: list[torch.Tensor] = []
        h = torch.zeros(x.size(1))
        for i in range(x.size(0)):
            h = torch.tanh(h + x[i])
            outs.append(h)
        return torch.stack(outs, 0)

    proto = _export(running_tanh, (torch.randn(4, 3),), input_names=["x"], dynamic_axes={"x": [0]})
    assert {"Loop", "SequenceInsert", "ConcatFromSequence"} <= set(_op_types(proto))
    for n in (4, 7, 1):
        x = torch.randn(n, 3)
        torch.testing.assert_close(_run(proto, x)[0], running_tanh(x))


def test_scripted_module_with_submodule_loop_and_int_output() -> None:
    class Repeat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
            for _ in range(3):
                x = torch.tanh(self.lin(x))
            return x, x.shape[0]

    model = torch.jit.script(Repeat().eval())
    proto = _export(model, (torch.randn(2, 4),), input_names=["x"], dynamic_axes={"x": [0]})
    for n in (2, 5):
        x = torch.randn(n, 4)
        out, size = _run(proto, x)
        expected, expected_size = model(x)
        torch.testing.assert_close(out, expected)
        assert int(size) == expected_size


def test_scripted_int_arithmetic_on_sizes() -> None:
    @torch.jit.script
    def halves(x: torch.Tensor) -> torch.Tensor:
        n = x.size(0) // 2
        m = -x.size(1) // 3
        return x[:n] * m

    proto = _export(halves, (torch.randn(6, 4),), input_names=["x"], dynamic_axes={"x": [0, 1]})
    for shape in ((6, 4), (7, 5), (1, 3)):
        x = torch.randn(shape)
        torch.testing.assert_close(_run(proto, x)[0], halves(x))


def test_autograd_function_inlined_or_symbolic() -> None:
    class MyLogExp(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, input: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(input)
            return input.exp().log().log()

    class MyRelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, input: torch.Tensor) -> torch.Tensor:
            return input.clamp(min=0)

        @staticmethod
        def symbolic(g: Any, input: Any) -> Any:
            return g.op("Relu", input)

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return MyRelu.apply(MyLogExp.apply(x) - 0.5)

    proto = _compare(Model(), (torch.rand(3) + 1.5,))
    assert _op_types(proto).count("Log") == 2 and "Relu" in _op_types(proto)


class OptionalAndLists(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> list[torch.Tensor]:
        out = torch.zeros(x.size(0), 2) + x[:, :2]
        if y is not None:
            out = out + y
        res = [out, out.sum(dim=1)]
        if bool(out.mean() > 0):
            res = [out * 2, out.max(dim=1)[0]]
        return res


@pytest.mark.parametrize("with_y", [False, True])
def test_scripted_optional_input_and_list_from_if(with_y: bool) -> None:
    model = torch.jit.script(OptionalAndLists())
    args = (torch.randn(3, 4), torch.randn(3, 2)) if with_y else (torch.randn(3, 4),)
    names = ["x", "y"][:len(args)]
    proto = _export(model, args, input_names=names, dynamic_axes={n: [0] for n in names})
    assert "If" in _op_types(proto)
    for n, sign in ((3, 1.0), (5, -1.0), (2, 1.0)):
        inputs = (sign * torch.rand(n, 4) + sign, sign * torch.rand(n, 2))[:len(args)]
        for a, e in zip(_run(proto, *inputs), model(*inputs)):
            torch.testing.assert_close(a, e)


def test_unsupported_ops_listed_at_once() -> None:
    class Bad(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.entr(x) + torch.special.sinc(x)

    with pytest.raises(onnxport.UnsupportedOperatorError) as info:
        _export(Bad(), (torch.rand(3) + 1,))
    message = str(info.value)
    assert "entr" in message and "sinc" in message
    assert "test_export.py" in message


def test_translation_error_names_node_and_source_line() -> None:
    # (chunk along a dynamic dim exports since it takes split's symbolic form; tensor_split
    # into sections of a symbolic size still has no translation)
    class TensorSplit(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = x.tensor_split(2, dim=0)
            return a * b

    buf = io.BytesIO()
    with pytest.raises(onnxport.TranslationError) as info:
        onnxport.export(TensorSplit(), (torch.randn(4, 3),), buf, dynamo=False,
                        input_names=["x"], dynamic_axes={"x": [0]})
    assert "aten::tensor_split" in str(info.value) and "test_export.py" in str(info.value)
    assert info.value.source and "forward" in info.value.source
    assert not buf.getvalue()  # nothing written on failure


def test_chunk_along_a_dynamic_dim() -> None:
    class Chunk(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = x.chunk(2, dim=0)
            return a * b

    buf = io.BytesIO()
    onnxport.export(Chunk(), (torch.randn(4, 3),), buf, dynamo=False, input_names=["x"],
                    dynamic_axes={"x": [0]})
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    for batch in (4, 6, 10):
        x = torch.randn(batch, 3)
        np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], Chunk()(x).numpy(),
                                   rtol=1e-6, atol=1e-6)


def test_aten_fallback() -> None:
    class Bad(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.entr(x) * x

    buf = io.BytesIO()
    onnxport.export(Bad(), (torch.rand(3),), buf, dynamo=False,
                    operator_export_type=onnxport.OperatorExportTypes.ONNX_ATEN_FALLBACK)
    proto = onnx.load_from_string(buf.getvalue())
    aten = [n for n in proto.graph.node if n.op_type == "ATen"]
    assert aten and aten[0].domain == "org.pytorch.aten"
    assert {a.name: a.s for a in aten[0].attribute}["operator"] == b"special_entr"
    assert "Mul" in _op_types(proto)
    # Not ONNX: the weights are inputs too by default.
    buf = io.BytesIO()
    onnxport.export(Bad(), (torch.rand(3),), buf, dynamo=False, custom_opsets={"aten": 2},
                    operator_export_type=onnxport.OperatorExportTypes.ONNX_FALLTHROUGH)
    proto = onnx.load_from_string(buf.getvalue())
    assert any(n.domain == "aten" and n.op_type == "special_entr" for n in proto.graph.node)
    assert {o.domain: o.version for o in proto.opset_import}["aten"] == 2


def test_shared_weight_is_one_initializer() -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)
            self.b.weight = self.a.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    proto = _compare(Tied(), (torch.randn(2, 4),))
    assert sorted(i.name for i in proto.graph.initializer) == ["a.bias", "a.weight", "b.bias"]


def test_scripted_training_flag_follows_training_mode() -> None:
    class Flag(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                return x + 1
            return x - 1

    model = torch.jit.script(Flag())
    model.train()
    x = torch.randn(3)
    torch.testing.assert_close(_run(_export(model, (x,)), x)[0], x - 1)
    torch.testing.assert_close(
        _run(_export(model, (x,), training=onnxport.TrainingMode.PRESERVE), x)[0], x + 1)
    assert model.training


def test_bert_dict_args_and_dict_output_dynamic_axes() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    proto = _export(model, (ids, {"attention_mask": mask}), input_names=["input_ids", "attention_mask"],
                    dynamic_axes={"input_ids": axes, "attention_mask": axes})
    assert [i.name for i in proto.graph.input] == ["input_ids", "attention_mask"]
    for b, s in ((2, 7), (3, 4)):
        ids = torch.randint(0, 100, (b, s))
        mask = torch.ones(b, s, dtype=torch.long)
        mask[0, -1] = 0
        with torch.no_grad():
            expected = model(ids, attention_mask=mask)
        # The dict output becomes the sequence of its values.
        last, pooled = _run(proto, ids, mask)
        torch.testing.assert_close(last, expected.last_hidden_state)
        torch.testing.assert_close(pooled, expected.pooler_output)


def test_dynamic_axes_with_an_empty_example_dim(tmp_path: Any) -> None:
    """A batch-0 example: the batch must stay dynamic, not fold to 0 (fuzz seed 1104)."""
    import onnxruntime as ort

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1) + x.shape[0]

    path = str(tmp_path / "m.onnx")
    onnxport.export(Model(), (torch.randn(0, 2, 3),), path, dynamo=False, input_names=["x"],
                    dynamic_axes={"x": {0: "batch"}})
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = torch.randn(3, 2, 3)
    (out,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), Model()(x))
