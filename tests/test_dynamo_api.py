"""The PyTorch 2.1 dynamo API: dynamo_export, ExportOptions, enable_fake_mode (reference 001)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

import onnxport


class MyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)

    def forward(self, x, bias=None):  # type: ignore[no-untyped-def]
        out = self.linear(x)
        out = out + bias
        return out


def test_dynamo_export_with_python_scalar_kwarg(tmp_path: Path) -> None:
    model = MyModel()
    kwargs = {"bias": 3.0}
    args = (torch.randn(2, 2, 2),)
    onnx_program = onnxport.dynamo_export(model, *args, **kwargs).save(
        str(tmp_path / "my_simple_model.onnx"))
    assert onnx_program is None
    saved = onnx.load(str(tmp_path / "my_simple_model.onnx"))
    assert [i.name for i in saved.graph.input] == ["x"]
    program = onnxport.dynamo_export(model, *args, **kwargs)
    torch.testing.assert_close(program(*args, **kwargs)[0], model(*args, **kwargs).detach())


def test_export_options_dynamic_shapes_runs_at_other_shapes(tmp_path: Path) -> None:
    model = MyModel()
    kwargs = {"bias": 3.0}
    args = (torch.randn(2, 2, 2),)
    export_options = onnxport.ExportOptions(dynamic_shapes=True)
    onnx_program = onnxport.dynamo_export(model, *args, **kwargs, export_options=export_options)
    onnx_program.save(str(tmp_path / "my_dynamic_model.onnx"))
    dims = onnx_program.model.graph.inputs[0].shape
    assert not dims[0].__class__ is int and str(dims[0]) == "x_dim_0"
    for shape in [(5, 3, 2), (1, 7, 2)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(onnx_program(x, bias=3.0)[0], model(x, 3.0).detach())


def test_export_options_registry_and_diagnostics_defaults() -> None:
    options = onnxport.ExportOptions()
    assert options.dynamic_shapes is None and options.fake_context is None
    assert options.diagnostic_options.verbosity_level == 20
    assert options.diagnostic_options.warnings_as_errors is False


def test_fake_mode_example(tmp_path: Path) -> None:
    class Model(torch.nn.Module):  # Model with a parameter
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.tensor(42.0))

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.weight + x

    with onnxport.enable_fake_mode():
        my_nn_module = Model()
        arg1 = torch.randn(2, 2, 2)
    onnx_program = onnxport.export(my_nn_module, (arg1,), dynamo=True)
    without = tmp_path / "my_model_without_initializers.onnx"
    onnx_program.save(str(without), include_initializers=False, keep_initializers_as_inputs=True)
    saved = onnx.load(str(without))
    assert [i.name for i in saved.graph.input] == ["x", "weight"]
    assert len(saved.graph.initializer) == 0
    with pytest.raises(onnxport.OnnxExporterError, match="fake mode"):
        onnx_program.save(str(tmp_path / "too_early.onnx"))
    assert not (tmp_path / "too_early.onnx").exists()
    onnx_program.apply_weights({"weight": torch.tensor(42.0)})
    onnx_program.save(str(tmp_path / "my_model_with_initializers.onnx"))
    x = torch.randn(2, 2, 2)
    torch.testing.assert_close(onnx_program(x)[0], x + 42.0)


def test_fake_context_in_export_options() -> None:
    with onnxport.enable_fake_mode() as fake_context:
        model = MyModel()
        x = torch.randn(3, 2)
    options = onnxport.ExportOptions(fake_context=fake_context)
    program = onnxport.dynamo_export(model, x, bias=1.0, export_options=options)
    assert sorted(program.model.graph.initializers) == ["linear.bias", "linear.weight"]
    real = MyModel()
    program.apply_weights(real.state_dict())
    x = torch.randn(3, 2)
    torch.testing.assert_close(program(x, bias=1.0)[0], real(x, 1.0).detach())
