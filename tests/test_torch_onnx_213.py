"""torch.onnx 2.13's export surface, side by side: the same call through torch.onnx and onnxport.

Each test makes one call both ways and compares graph input names, named dims and ONNX
Runtime outputs (or the errors, where both refuse).
"""

from __future__ import annotations

import glob
import os
import warnings
from typing import Any

import pytest
import torch
from torch.export import Dim

import onnxport


def _both(model: torch.nn.Module, args: tuple[Any, ...], **options: Any) -> tuple[Any, Any]:
    ours = onnxport.export(model, args, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(model, args, dynamo=True, **options)
    return ours, theirs


def _inputs(program: Any) -> dict[str, list[Any]]:
    return {v.name: [d if isinstance(d, int) else str(d) for d in v.shape]
            for v in program.model.graph.inputs}


def _run_both(ours: Any, theirs: Any, *args: Any, **kwargs: Any) -> None:
    expected = theirs(*args, **kwargs)
    actual = ours(*args, **kwargs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


class AddMul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 + y


class Optional3(torch.nn.Module):
    """Called with keyword inputs that skip forward's first parameters."""

    def forward(self, input_ids: Any = None, attention_mask: Any = None,
                pixel_values: Any = None) -> torch.Tensor:
        return pixel_values.mean(dim=(2, 3)) * 3


# -- dynamic_shapes forms ------------------------------------------------------------------------

def test_string_dims_name_the_onnx_dims_like_torch_onnx() -> None:
    x, y = torch.randn(2, 5), torch.randn(2, 5)
    spec = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
    ours, theirs = _both(AddMul(), (x, y), dynamic_shapes=spec)
    assert _inputs(ours) == _inputs(theirs) == {"x": ["batch", "seq"], "y": ["batch", "seq"]}
    _run_both(ours, theirs, torch.randn(3, 7), torch.randn(3, 7))


@pytest.mark.parametrize("form", ["strings", "dims", "hints", "list"])
def test_every_dim_form(form: str) -> None:
    x, y = torch.randn(2, 5), torch.randn(2, 5)
    batch = Dim("batch")
    spec: Any = {
        "strings": {"x": {0: "batch"}, "y": {0: "batch"}},
        "dims": {"x": {0: batch}, "y": {0: batch}},
        "hints": {"x": {0: Dim.DYNAMIC, 1: Dim.STATIC}, "y": {0: Dim.AUTO, 1: None}},
        "list": (["batch", 5], ["batch", None]),
    }[form]
    ours, theirs = _both(AddMul(), (x, y), dynamic_shapes=spec)
    assert [isinstance(d, int) for d in ours.model.graph.inputs[0].shape] == \
        [isinstance(d, int) for d in theirs.model.graph.inputs[0].shape] == [False, True]
    if form in ("strings", "dims", "list"):
        assert _inputs(ours) == _inputs(theirs)
    _run_both(ours, theirs, torch.randn(4, 5), torch.randn(4, 5))


def test_nested_inputs_take_nested_specs() -> None:
    class Nested(torch.nn.Module):
        def forward(self, xs: list[torch.Tensor], d: dict[str, torch.Tensor]) -> torch.Tensor:
            return xs[0] + xs[1] * d["scale"]

    xs = [torch.randn(2, 4), torch.randn(2, 4)]
    d = {"scale": torch.randn(2, 4)}
    spec = {"xs": [{0: "batch"}, {0: "batch"}], "d": {"scale": {0: "batch"}}}
    # (an empty dict last: the dict before it is a positional input, not the keyword inputs)
    ours, theirs = _both(Nested(), (xs, d, {}), dynamic_shapes=spec)
    assert _inputs(ours) == _inputs(theirs)
    assert all(shape[0] == "batch" for shape in _inputs(ours).values())
    _run_both(ours, theirs, [torch.randn(5, 4), torch.randn(5, 4)], {"scale": torch.randn(5, 4)})


def test_dynamic_axes_follow_keyword_inputs_by_name() -> None:
    """Only pixel_values is given: its axes must not go to input_ids (forward's first).

    torch.onnx 2.13 turns dynamic_axes into positional inputs in forward's order, which hands
    pixel_values to input_ids; its dynamic_shapes form gets it right and is the reference.
    """
    pixels = torch.randn(2, 3, 8, 8)
    axes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
    ours = onnxport.export(Optional3(), (), kwargs={"pixel_values": pixels}, dynamic_axes=axes,
                           input_names=["pixel_values"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="'NoneType' object has no attribute 'mean'"):
            torch.onnx.export(Optional3(), (), kwargs={"pixel_values": pixels}, dynamo=True,
                              dynamic_axes=axes, input_names=["pixel_values"])
        theirs = torch.onnx.export(Optional3(), (), kwargs={"pixel_values": pixels}, dynamo=True,
                                   dynamic_shapes={"pixel_values": axes["pixel_values"]})
    assert _inputs(ours) == {"pixel_values": ["batch", 3, "height", "width"]}
    assert _inputs(theirs) == _inputs(ours)
    bigger = torch.randn(3, 3, 10, 12)
    torch.testing.assert_close(ours(pixel_values=bigger)[0], Optional3()(pixel_values=bigger))


def test_trailing_dict_in_args_holds_keyword_inputs() -> None:
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    axes = {"x": {0: "batch"}, "y": {0: "batch"}}
    ours, theirs = _both(AddMul(), (x, {"y": y}), dynamic_axes=axes, input_names=["x", "y"])
    assert _inputs(ours) == _inputs(theirs) == {"x": ["batch", 3], "y": ["batch", 3]}
    _run_both(ours, theirs, torch.randn(4, 3), y=torch.randn(4, 3))


def test_trailing_dict_in_args_torchscript_flavour(tmp_path: Any) -> None:
    import onnx

    x, y = torch.randn(2, 3), torch.randn(2, 3)
    paths = {}
    for name, exporter in (("ours", onnxport.export), ("theirs", torch.onnx.export)):
        paths[name] = str(tmp_path / f"{name}.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exporter(AddMul(), (x, {"y": y}), paths[name], dynamo=False, input_names=["x", "y"],
                     dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    shapes = {name: [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
                     for i in onnx.load(path).graph.input] for name, path in paths.items()}
    assert shapes["ours"] == shapes["theirs"] == [["batch", 3], ["batch", 3]]


def test_size_one_example_stays_dynamic_with_a_warning() -> None:
    x, y = torch.randn(1, 4), torch.randn(1, 4)
    with pytest.warns(UserWarning, match=r"input 'x' axis 0 \(size 1\)"):
        ours = onnxport.export(AddMul(), (x, y), dynamic_shapes={"x": {0: "b"}, "y": {0: "b"}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(AddMul(), (x, y), dynamo=True,
                                   dynamic_shapes={"x": {0: "b"}, "y": {0: "b"}})
    assert _inputs(ours) == _inputs(theirs) == {"x": ["b", 4], "y": ["b", 4]}
    _run_both(ours, theirs, torch.randn(6, 4), torch.randn(6, 4))


def test_rejected_spec_is_refined_from_torch_suggested_fixes() -> None:
    """Two Dims the model forces equal: torch.export suggests `c = b`; both exporters retry."""
    b, c = Dim("b"), Dim("c")
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    with pytest.warns(UserWarning, match=r"dynamic_shapes=\{'x': \{0: Dim\('b'\)\}, "
                                         r"'y': \{0: Dim\('b'\)\}\}"):
        ours = onnxport.export(AddMul(), (x, y), dynamic_shapes={"x": {0: b}, "y": {0: c}},
                               report=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(AddMul(), (x, y), dynamo=True,
                                   dynamic_shapes={"x": {0: b}, "y": {0: c}})
    assert _inputs(ours) == _inputs(theirs) == {"x": ["b", 4], "y": ["b", 4]}
    assert any(d.rule.id == "OPX010" for d in ours.diagnostics)
    _run_both(ours, theirs, torch.randn(5, 4), torch.randn(5, 4))


@pytest.mark.parametrize("spec, match", [
    ({"z": {0: "batch"}}, r"dynamic_shapes names 'z'.*\(x, y\)"),
    ({"x": {2: "batch"}, "y": None}, r"input 'x' names axis 2, but the input has 2 dims"),
    ((None,), r"dynamic_shapes has 1 entries, but 2 inputs were given"),
    ({"x": {0: 3.5}, "y": None}, r"input 'x' axis 0: expected a Dim"),
])
def test_malformed_specs_name_the_input(spec: Any, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        onnxport.export(AddMul(), (torch.randn(2, 3), torch.randn(2, 3)), dynamic_shapes=spec)


def test_dynamic_axes_naming_an_unknown_input() -> None:
    with pytest.raises(ValueError, match=r"dynamic_axes names 'q'.*x, y"):
        onnxport.export(AddMul(), (torch.randn(2, 3), torch.randn(2, 3)),
                        dynamic_axes={"q": {0: "batch"}})


# -- the other 2.13 arguments ------------------------------------------------------------------

def test_custom_translation_table_takes_onnxscript_and_our_functions() -> None:
    import onnxscript
    from onnxscript import opset18 as op

    @onnxscript.script()
    def relu_as_max(x):  # noqa: ANN001, ANN202
        return op.Max(x, op.CastLike(0.0, x))

    def gelu_as_sigmoid(g: Any, self: Any, approximate: str = "none") -> Any:
        return g.op("Mul", self, g.op("Sigmoid", g.op("Mul", self, g.const(1.702, self.dtype))))

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(torch.relu(x))

    x = torch.randn(3, 4)
    table = {torch.ops.aten.relu.default: relu_as_max, torch.ops.aten.gelu.default: gelu_as_sigmoid}
    program = onnxport.export(Model(), (x,), custom_translation_table=table)
    ops = [n.op_type for n in program.model.graph.all_nodes()]
    # the onnxscript function lands as an ONNX function of that name (its body holds the Max)
    assert "Relu" not in ops and "relu_as_max" in ops and "Sigmoid" in ops
    assert ["Max" in [n.op_type for n in f] for f in program.model.functions.values()] == [True]
    expected = torch.relu(x) * torch.sigmoid(1.702 * torch.relu(x))
    torch.testing.assert_close(program(x)[0], expected)
    # torch.onnx 2.13 takes the same table but fails in its own opset conversion pass, which
    # cannot inline the function; onnxport keeps it as an ONNX function, which ORT runs.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="InlinePass"):
            torch.onnx.export(Model(), (x,), dynamo=True,
                              custom_translation_table={torch.ops.aten.relu.default: relu_as_max})
    # the default library is untouched
    again = onnxport.export(Model(), (x,))
    assert "Relu" in [n.op_type for n in again.model.graph.all_nodes()]


def test_profile_and_dump_exported_program(tmp_path: Any) -> None:
    program = onnxport.export(AddMul(), (torch.randn(2, 3), torch.randn(2, 3)), profile=True,
                              dump_exported_program=True, artifacts_dir=tmp_path, report=True)
    assert {"capture", "translate", "passes", "total"} <= set(program.profile)
    profiles = glob.glob(os.path.join(tmp_path, "onnxport_profile_*.txt"))
    assert len(profiles) == 1 and "cumulative" in open(profiles[0]).read()
    dumps = glob.glob(os.path.join(tmp_path, "onnx_export_*.pt2"))
    assert len(dumps) == 1
    loaded = torch.export.load(dumps[0])
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(loaded.module()(x, y), AddMul()(x, y))
    report = open(glob.glob(os.path.join(tmp_path, "onnxport_report_*.md"))[0]).read()
    assert "captured by: torch.export (non-strict)" in report
    assert program.capture_strategy == "non-strict"


def test_fallback_to_torchscript_says_why(tmp_path: Any) -> None:
    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = int(x.abs().sum().item() > 0)  # a Python int from data: torch.export refuses
            return x * 2 if n else x

    x = torch.randn(2, 3)
    path = str(tmp_path / "m.onnx")
    with pytest.raises(onnxport.OnnxExporterError):
        onnxport.export(DataDependent(), (x,), path, dynamic_shapes={"x": {0: "batch"}})
    assert not os.path.exists(path)
    with pytest.warns(UserWarning, match="falling back to the TorchScript flavour"):
        program = onnxport.export(DataDependent(), (x,), path, fallback=True,
                                  dynamic_shapes={"x": {0: "batch"}})
    assert program.capture_strategy == "torchscript (fallback)"
    assert os.path.exists(path)
    assert _inputs(program)["x"][0] == "batch"
    x2 = torch.randn(4, 3)
    torch.testing.assert_close(program(x2)[0], x2 * 2)


def test_exportable_module_supplies_its_own_inputs() -> None:
    class Doubler(onnxport.ExportableModule):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        def example_arguments(self) -> Any:
            return (torch.randn(2, 3),), None

        def dynamic_shapes(self) -> Any:
            return ({0: "batch"},)

        def input_names(self) -> Any:
            return ["image"]

        def output_names(self) -> Any:
            return ["doubled"]

    program = Doubler().to_onnx()
    assert _inputs(program) == {"image": ["batch", 3]}
    assert [v.name for v in program.model.graph.outputs] == ["doubled"]
    torch.testing.assert_close(program(torch.ones(5, 3))[0], torch.full((5, 3), 2.0))

    class TheirDoubler(torch.onnx.ExportableModule):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        def example_arguments(self) -> Any:
            return (torch.randn(2, 3),), None

        def dynamic_shapes(self) -> Any:
            return ({0: "batch"},)

    ours = onnxport.export(TheirDoubler())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(TheirDoubler())
    assert _inputs(ours) == _inputs(theirs) == {"x": ["batch", 3]}
