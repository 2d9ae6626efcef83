"""Python numbers passed to scripted models are graph inputs (issue 27 item 6).

A torch.jit.script'ed model's int / float / bool argument is an input of its graph: torch.onnx
(dynamo=False) makes it a 0-d graph input (INT64 / DOUBLE / BOOL) and control flow and
arithmetic on it follow the value given at run time. onnxport does the same; a traced model
keeps baking Python numbers in as constants (torch.jit.trace has no input for them). Each test
makes the same call through torch.onnx and onnxport and compares graph inputs, node types and
ONNX Runtime outputs against eager.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import onnxport


class IntLoop(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for i in range(n):
            x = x + 1
        if n > 2:
            x = x * 2
        return x


class FloatScale(torch.nn.Module):
    def forward(self, x: torch.Tensor, s: float) -> torch.Tensor:
        if s > 0.5:
            x = x * s
        return x + s


class BoolSwitch(torch.nn.Module):
    def forward(self, x: torch.Tensor, b: bool) -> torch.Tensor:
        if b:
            x = x * 2
        return x


class RangeFrom(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for i in range(1, n, 2):
            x = x + i
        return x


class SumOver(torch.nn.Module):
    def forward(self, x: torch.Tensor, d: int) -> torch.Tensor:
        return x.sum(d)


_NUMPY = {int: np.int64, float: np.float64, bool: np.bool_}
_TYPES = {"int": onnx.TensorProto.INT64, "float": onnx.TensorProto.DOUBLE,
          "bool": onnx.TensorProto.BOOL}


def _export(exporter: Any, model: Any, args: tuple[Any, ...], **options: Any) -> onnx.ModelProto:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        if exporter is torch.onnx.export:
            # "no signature found for <ScriptFunction>, skipping _decide_input_format"
            warnings.simplefilter("ignore", UserWarning)
        exporter(model, args, buf, dynamo=False, **options)
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _both(model: Any, args: tuple[Any, ...], **options: Any
          ) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    return _export(onnxport.export, model, args, **options), \
        _export(torch.onnx.export, model, args, **options)


def _inputs(proto: onnx.ModelProto) -> list[tuple[str, int, list[int]]]:
    return [(i.name, i.type.tensor_type.elem_type,
             [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in proto.graph.input]


def _ops(proto: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


def _run(proto: onnx.ModelProto, *inputs: Any) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert len(names) == len(inputs), names
    feeds = {n: (v.numpy() if isinstance(v, torch.Tensor) else np.array(v, _NUMPY[type(v)]))
             for n, v in zip(names, inputs)}
    return session.run(None, feeds)


CASES = [
    pytest.param(IntLoop, 3, [0, 1, 3, 5], "int", id="int"),
    pytest.param(FloatScale, 0.75, [0.25, 0.75, 2.5, -1.0], "float", id="float"),
    pytest.param(BoolSwitch, True, [True, False], "bool", id="bool"),
]


@pytest.mark.parametrize(("cls", "example", "values", "kind"), CASES)
@pytest.mark.parametrize("names", [["x", "n"], None], ids=["input_names", "no_names"])
def test_scripted_number_is_a_graph_input_like_torch_onnx(
        cls: type, example: Any, values: list[Any], kind: str, names: list[str] | None) -> None:
    model = torch.jit.script(cls())
    x = torch.randn(2, 3)
    ours, theirs = _both(model, (x, example), input_names=names)
    # Same input types and shapes: x float[2, 3], the number a 0-d INT64 / DOUBLE / BOOL.
    assert [i[1:] for i in _inputs(ours)] == [i[1:] for i in _inputs(theirs)] == \
        [(onnx.TensorProto.FLOAT, [2, 3]), (_TYPES[kind], [])]
    if names is not None:
        assert [i[0] for i in _inputs(ours)] == [i[0] for i in _inputs(theirs)] == names
    else:
        # Documented difference: onnxport names inputs after forward's parameters, torch.onnx
        # after the graph's debug names ("x.1", "n.1").
        param = {"int": "n", "float": "s", "bool": "b"}[kind]
        assert [i[0] for i in _inputs(ours)] == ["x", param]
        assert [i[0].split(".")[0] for i in _inputs(theirs)] == ["x", param]
    assert "If" in _ops(ours) and "If" in _ops(theirs)
    if cls is IntLoop:
        assert "Loop" in _ops(ours) and "Loop" in _ops(theirs)
        assert _ops(theirs) == ["Constant", "Loop", "Constant", "Greater", "Cast", "If"]
    for value in values:
        for y in (x, torch.randn(2, 3)):
            expected = model(y, value)
            (got,) = _run(ours, y, value)
            (reference,) = _run(theirs, y, value)
            torch.testing.assert_close(torch.from_numpy(got), expected)
            torch.testing.assert_close(torch.from_numpy(reference), expected)


def test_issue_27_call_no_longer_refused(tmp_path: Any) -> None:
    model = torch.jit.script(IntLoop())
    f = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        onnxport.export(model, (torch.randn(2, 3), 3), f, input_names=["x", "n"], dynamo=False)
    proto = onnx.load(f)
    assert _inputs(proto) == [("x", onnx.TensorProto.FLOAT, [2, 3]),
                              ("n", onnx.TensorProto.INT64, [])]
    assert _ops(proto) == ["Constant", "Loop", "Constant", "Greater", "If"]


def test_scripted_function_number_argument() -> None:
    @torch.jit.script
    def scaled(x: torch.Tensor, n: int) -> torch.Tensor:
        while n > 0:
            x = x * 2
            n -= 1
        return x

    x = torch.randn(3)
    ours, theirs = _both(scaled, (x, 2), input_names=["x", "n"])
    assert [i[:2] for i in _inputs(ours)] == [i[:2] for i in _inputs(theirs)]
    for n in (0, 1, 4):
        torch.testing.assert_close(torch.from_numpy(_run(ours, x, n)[0]), scaled(x, n))


def test_range_with_start_and_step_follows_the_input() -> None:
    model = torch.jit.script(RangeFrom())
    x = torch.randn(2, 3)
    ours, theirs = _both(model, (x, 4))
    assert "Loop" in _ops(ours)
    for n in (0, 1, 2, 5, 8):
        expected = model(x, n)
        torch.testing.assert_close(torch.from_numpy(_run(ours, x, n)[0]), expected)
        torch.testing.assert_close(torch.from_numpy(_run(theirs, x, n)[0]), expected)


def test_input_names_too_many_for_a_scripted_model_still_refused() -> None:
    model = torch.jit.script(IntLoop())
    with pytest.raises(ValueError, match=r"input_names has 3 names .* make 2 graph inputs "
                                         r"\(one per tensor in args and kwargs, and per "
                                         r"int/float/bool argument of the scripted model\)"):
        onnxport.export(model, (torch.randn(2, 3), 3), io.BytesIO(),
                        input_names=["x", "n", "z"], dynamo=False)


def test_number_a_translation_needs_constant_is_baked_with_a_warning() -> None:
    """`x.sum(d)` needs `d` at export time in onnxport's op library: the graph is translated
    with `d` as a constant and a UserWarning says so (torch.onnx makes `d` an input)."""
    model = torch.jit.script(SumOver())
    x = torch.randn(2, 3)
    buf = io.BytesIO()
    with pytest.warns(UserWarning, match=r"d=1 are exported as constants"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            onnxport.export(model, (x, 1), buf, input_names=["x", "d"], dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    assert _inputs(proto) == [("x", onnx.TensorProto.FLOAT, [2, 3])]
    torch.testing.assert_close(torch.from_numpy(_run(proto, x)[0]), model(x, 1))


# -- traced models: Python numbers stay constants ------------------------------------------------

def test_traced_int_argument_stays_a_constant() -> None:
    model = IntLoop()
    x = torch.randn(2, 3)
    ours, theirs = _both(model, (x, 3), input_names=["x"])
    assert [i[:2] for i in _inputs(ours)] == [i[:2] for i in _inputs(theirs)] == \
        [("x", onnx.TensorProto.FLOAT)]
    assert "Loop" not in _ops(ours) and "If" not in _ops(ours)
    torch.testing.assert_close(torch.from_numpy(_run(ours, x)[0]), model(x, 3))
    # Without names both have one input (torch.onnx names it "onnx::Add_0", onnxport "x").
    ours, theirs = _both(model, (x, 3))
    assert len(ours.graph.input) == len(theirs.graph.input) == 1


def test_traced_int_argument_cannot_be_named() -> None:
    """Difference: torch.onnx ignores the name it has no input for; onnxport refuses it."""
    model = IntLoop()
    x = torch.randn(2, 3)
    theirs = _export(torch.onnx.export, model, (x, 3), input_names=["x", "n"])
    assert [i.name for i in theirs.graph.input] == ["x"]
    with pytest.raises(ValueError, match=r"input_names has 2 names \('x', 'n'\), but the inputs "
                                         r"given make 1 graph input .*torch.jit.trace bakes the "
                                         r"Python numbers"):
        onnxport.export(model, (x, 3), io.BytesIO(), input_names=["x", "n"], dynamo=False)


def test_list_built_in_a_loop_over_an_int_input_is_a_sequence() -> None:
    """The int trip count is an input, so the list becomes an ONNX sequence, as in torch.onnx."""
    @torch.jit.script
    def powers(x: torch.Tensor, n: int) -> torch.Tensor:
        parts: list[torch.Tensor] = []
        for i in range(n):
            parts.append(x * i)
        return torch.cat(parts, 0)

    x = torch.randn(2, 3)
    ours, theirs = _both(powers, (x, 3), input_names=["x", "n"])
    assert _inputs(ours) == [("x", onnx.TensorProto.FLOAT, [2, 3]),
                             ("n", onnx.TensorProto.INT64, [])]
    assert {"SequenceEmpty", "Loop", "ConcatFromSequence"} <= set(_ops(ours))
    for n in (1, 3, 5):
        torch.testing.assert_close(torch.from_numpy(_run(ours, x, n)[0]), powers(x, n))
        torch.testing.assert_close(torch.from_numpy(_run(theirs, x, n)[0]), powers(x, n))
