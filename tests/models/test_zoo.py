"""The model zoo (tests/models/zoo.py), exported with static and with dynamic shapes.

Static: exported at the example inputs, run in ONNX Runtime at the same inputs.
Dynamic: exported with the entry's dynamic shapes in one of the forms torch.onnx takes (`Dim`
objects, string dim names, the legacy `dynamic_axes`; the forms take turns along the zoo, so
each is tested on a third of the models), then run at inputs of another batch size and
sequence length (or image size); the graph inputs must carry the user's dim names. Every
model in every form is `benchmarks/bench_dynamic_forms.py`'s sweep.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import onnxport
from onnxport.verify.compare import flatten_outputs
from tests.helpers import check_model
from tests.models.zoo import ZOO, Positional, ZooModel


FORMS = ("dims", "strings", "dynamic_axes")


def _params(mode: str) -> list[Any]:
    params = []
    for i, entry in enumerate(ZOO):
        reason = entry.xfail_static if mode == "static" else entry.xfail_dynamic
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        if mode == "static":
            params.append(pytest.param(entry, id=f"{entry.name}-{mode}", marks=marks))
        else:
            form = FORMS[i % len(FORMS)]
            params.append(pytest.param(entry, form, id=f"{entry.name}-{mode}-{form}", marks=marks))
    return params


def spec_forms(shapes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The entry's spec in each form, as export keyword arguments, and the names each gives:
    {form: (export kwargs, {input: {axis: dim name}})}. A Dim.AUTO axis stays unnamed in the
    first two forms; dynamic_axes names it `<input>_dim_<axis>`."""
    named = _dim_names(shapes)
    strings = {name: {axis: (dim.__name__ if axis in named.get(name, {}) else dim)
                      for axis, dim in (axes or {}).items()} for name, axes in shapes.items()}
    axes_names = {name: {axis: named.get(name, {}).get(axis, f"{name}_dim_{axis}")
                         for axis in (axes or {})} for name, axes in shapes.items()}
    return {
        "dims": ({"dynamic_shapes": shapes}, named),
        "strings": ({"dynamic_shapes": strings}, named),
        "dynamic_axes": ({"dynamic_axes": axes_names}, axes_names),
    }


def _compare(program: onnxport.ONNXProgram, model: torch.nn.Module, inputs: dict[str, Any],
             tolerance: tuple[float, float]) -> None:
    with torch.no_grad():
        expected = flatten_outputs(model(**inputs))
    actual = program(**inputs)
    assert len(actual) == len(expected)
    rtol, atol = tolerance
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m, i=i: f"output {i}: {m}")


def _dim_names(shapes: dict[str, Any]) -> dict[str, dict[int, str]]:
    """{input: {axis: name}} for the named Dims (a Dim times k is named after the Dim too)."""
    out: dict[str, dict[int, str]] = {}
    for name, axes in shapes.items():
        for axis, dim in (axes or {}).items():
            if type(dim).__name__ == "Dim":
                out.setdefault(name, {})[axis] = dim.__name__
    return out


@pytest.mark.parametrize("entry", _params("static"))
def test_static(entry: ZooModel) -> None:
    model = entry.factory()
    inputs = entry.example_inputs()
    program = onnxport.export(model, (), kwargs=inputs)
    assert program is not None
    check_model(program)
    for value in program.model.graph.inputs:
        assert all(isinstance(d, int) for d in value.shape), (value.name, value.shape)
    _compare(program, model, inputs, entry.tolerance)


@pytest.mark.parametrize("entry,form", _params("dynamic"))
def test_dynamic(entry: ZooModel, form: str) -> None:
    model = entry.factory()
    inputs = entry.example_inputs()
    spec, names = spec_forms(entry.dynamic_shapes)[form]
    program = onnxport.export(model, (), kwargs=inputs, **spec)
    assert program is not None
    check_model(program)
    graph_inputs = {v.name: v for v in program.model.graph.inputs}
    for input_name, axes in entry.dynamic_shapes.items():
        for axis in axes or {}:  # every dim asked for stays symbolic, Dim.AUTO's included
            assert not isinstance(graph_inputs[input_name].shape[axis], int), (input_name, axis)
    for input_name, axes in names.items():
        shape = graph_inputs[input_name].shape
        for axis, dim_name in axes.items():
            assert str(shape[axis]) == dim_name, (input_name, axis, shape)
    second = entry.second_inputs()
    assert any(second[k].shape != inputs[k].shape for k in inputs)
    _compare(program, model, second, entry.tolerance)


TORCHSCRIPT_SAMPLE = ("bert", "gpt2", "llama", "t5", "vit", "resnet")


@pytest.mark.parametrize("entry", [e for e in ZOO if e.name in TORCHSCRIPT_SAMPLE],
                         ids=lambda e: e.name)
def test_torchscript_flavour(entry: ZooModel, tmp_path: Any) -> None:
    """A sample of the zoo through `dynamo=False` with the entry's dims as `dynamic_axes`,
    run at the second inputs (the whole zoo in both flavours: benchmarks/bench_models.py)."""
    model = entry.factory()
    inputs = entry.example_inputs()
    names = list(inputs)
    _, axes = spec_forms(entry.dynamic_shapes)["dynamic_axes"]
    path = tmp_path / f"{entry.name}.onnx"
    onnxport.export(Positional(model, names).eval(), tuple(inputs.values()), str(path),
                    dynamo=False, input_names=names, dynamic_axes=axes)
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    second = entry.second_inputs()
    feeds = {i.name: second[i.name].numpy() for i in session.get_inputs()}
    actual = session.run(None, feeds)
    with torch.no_grad():
        expected = flatten_outputs(model(**second))
    assert len(actual) == len(expected)
    rtol, atol = entry.tolerance
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(torch.from_numpy(a), e, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m, i=i: f"output {i}: {m}")
