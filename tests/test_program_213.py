"""ONNXProgram as torch.onnx 2.13's: compute_values, call_reference, rename_axes, Python scalar
inputs, complex outputs as real pairs, capture_strategy.

Each test runs the same call on onnxport's program and on torch.onnx's
(`torch.onnx.export(..., dynamo=True)`), and compares both with eager PyTorch.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
import torch
from torch import nn
from torch.export import Dim

import onnxport
from onnxport.verify.compare import as_complex_like
from tests.helpers import Fn


def _torch_onnx(model: nn.Module, args: tuple[Any, ...], **kwargs: Any) -> Any:
    """torch.onnx 2.13's ONNXProgram for the same export."""
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(model, args, dynamo=True, verbose=False, **kwargs)


def _both(model: nn.Module, args: tuple[Any, ...], **kwargs: Any) -> tuple[Any, Any]:
    ours = onnxport.export(model.eval(), args, **kwargs)
    assert ours is not None
    return ours, _torch_onnx(model, args, **kwargs)


def _same(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x))
        return torch.cat([h, h]) * 2


# -- compute_values ----------------------------------------------------------------------------

def test_compute_values_intermediates_inputs_weights_outputs() -> None:
    model, x = _MLP().eval(), torch.randn(5, 4)
    ours, theirs = _both(model, (x,), dynamic_shapes=({0: Dim.DYNAMIC},))
    with torch.no_grad():
        linear = model.fc(x)
        expected = [torch.relu(linear), x, model.fc.weight, model(x), linear]
    for program in (ours, theirs):
        names = ["relu", "x", "fc.weight", program.model.graph.outputs[0].name, "linear"]
        _same(program.compute_values(names, (x,)), expected)
    # Other inputs, through kwargs; the order is the order asked for.
    other = torch.randn(7, 4)
    names = ["linear", "relu"]
    got = ours.compute_values(names, kwargs={"x": other})
    _same(got, theirs.compute_values(names, kwargs={"x": other}))
    _same(got, [model.fc(other), torch.relu(model.fc(other))])


def test_compute_values_leaves_the_model_and_session_alone() -> None:
    model, x = _MLP().eval(), torch.randn(5, 4)
    program = onnxport.export(model, (x,))
    assert program is not None
    outputs = list(program.model.graph.outputs)
    program.initialize_inference_session()
    session = program._session
    (relu, relu_again) = program.compute_values(["relu", "relu"], (x,))
    torch.testing.assert_close(relu, torch.relu(model.fc(x)).detach())
    torch.testing.assert_close(relu_again, relu)
    assert list(program.model.graph.outputs) == outputs
    assert program._session is session
    torch.testing.assert_close(program(x)[0], model(x).detach())


def test_compute_values_unknown_name_is_a_value_error() -> None:
    model, x = _MLP().eval(), torch.randn(5, 4)
    ours, theirs = _both(model, (x,))
    for program in (ours, theirs):
        outputs = list(program.model.graph.outputs)
        with pytest.raises(ValueError, match="Value 'no_such_value' not found in the model"):
            program.compute_values(["relu", "no_such_value"], (x,))
        assert list(program.model.graph.outputs) == outputs
    with pytest.raises(TypeError, match="value_names"):
        ours.compute_values("relu", (x,))


# -- call_reference ----------------------------------------------------------------------------

def test_call_reference_matches_eager_and_torch_onnx() -> None:
    model, x = _MLP().eval(), torch.randn(5, 4)
    ours, theirs = _both(model, (x,), dynamic_shapes=({0: Dim.DYNAMIC},))
    other = torch.randn(3, 4)
    got = ours.call_reference(other)
    _same(got, [model(other).detach()])
    _same(got, theirs.call_reference(other))
    _same(got, ours(other))


def test_call_reference_with_int_and_complex_inputs() -> None:
    class Scale(nn.Module):
        def forward(self, z: torch.Tensor, n: int) -> torch.Tensor:
            return torch.fft.fft(z).abs() * n

    z = torch.randn(2, 8, dtype=torch.complex64)
    ours, theirs = _both(Scale(), (z, 3), dynamic_shapes=(None, Dim.DYNAMIC))
    other = torch.randn(2, 8, dtype=torch.complex64)
    got = ours.call_reference(other, 5)
    _same(got, [Scale()(other, 5)])
    _same(got, theirs.call_reference(other, 5))


# -- rename_axes -------------------------------------------------------------------------------

def test_rename_axes_inputs_outputs_intermediates() -> None:
    model, x = _MLP().eval(), torch.randn(5, 4)
    ours, theirs = _both(model, (x,), dynamic_shapes=({0: Dim.DYNAMIC},))
    for program in (ours, theirs):
        program(x)
        batch = program.model.graph.inputs[0].shape[0]
        assert isinstance(batch, ir.SymbolicDim)
        program.rename_axes({batch: "batch"})
    assert ours._session is None
    for program in (ours, theirs):
        graph = program.model.graph
        assert list(graph.inputs[0].shape) == ["batch", 4]
        assert list(graph.outputs[0].shape) == ["2*batch", 3]
        intermediates = {v.name: list(v.shape) for n in graph for v in n.outputs}
        assert intermediates["relu"] == ["batch", 3]
        assert intermediates["cat"] == ["2*batch", 3]
    other = torch.randn(9, 4)
    _same(ours(other), [model(other).detach()])
    _same(ours(other), theirs(other))
    # String keys; a key inside an expression is replaced as a whole word.
    ours.rename_axes({"batch": "n"})
    assert list(ours.model.graph.outputs[0].shape) == ["2*n", 3]
    ours.rename_axes({"n": "batch"})
    theirs.rename_axes({"batch": "batch"})
    assert list(ours.model.graph.outputs[0].shape) == list(theirs.model.graph.outputs[0].shape)


def test_rename_axes_swaps_in_one_pass() -> None:
    fn = Fn(lambda a, b: torch.cat([a, b]))
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    ds = (({0: Dim.DYNAMIC}, {0: Dim.DYNAMIC}),)  # Fn takes *args
    ours, theirs = _both(fn, (a, b), dynamic_shapes=ds)
    for program in (ours, theirs):
        first, second = (v.shape[0] for v in program.model.graph.inputs)
        program.rename_axes({first: "B", second: "A"})
        first, second = (v.shape[0] for v in program.model.graph.inputs)
        program.rename_axes({first: "A", second: "B"})
        assert [list(v.shape) for v in program.model.graph.inputs] == [["A", 3], ["B", 3]]
    assert str(ours.model.graph.outputs[0].shape[0]).replace(" ", "") == "A+B"
    # torch.onnx 2.13 replaces key by key inside expressions, so the swap chains there
    # ("B + A" -> "A + A" -> "B + B"); the exact-name dims agree.
    assert str(theirs.model.graph.outputs[0].shape[0]).replace(" ", "") == "B+B"
    _same(ours(b, a), [fn(b, a)])
    _same(ours(b, a), theirs(b, a))


class _Branchy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def true_fn(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x]).sin()

        def false_fn(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x]).cos()

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,)) + 1


def test_rename_axes_inside_subgraphs() -> None:
    model, x = _Branchy().eval(), torch.randn(5, 3)
    ours, theirs = _both(model, (x,), dynamic_shapes=({0: Dim.DYNAMIC},))
    old = {}
    for name, program in (("ours", ours), ("theirs", theirs)):
        old[name] = program.model.graph.inputs[0].shape[0].value
        program.rename_axes({program.model.graph.inputs[0].shape[0]: "batch"})
        assert list(program.model.graph.inputs[0].shape) == ["batch", 3]
        assert list(program.model.graph.outputs[0].shape) == ["2*batch", 3]
    # Every value of onnxport's model, If branches included, uses the new name only.
    subgraph_dims = []
    for node in ours.model.graph.all_nodes():
        for value in (*node.inputs, *node.outputs):
            if value is None or value.shape is None:
                continue
            for dim in value.shape:
                if isinstance(dim, ir.SymbolicDim) and dim.value:
                    assert old["ours"] not in dim.value, (node.op_type, value.name, dim)
                    if node.graph is not ours.model.graph:
                        subgraph_dims.append(dim.value)
    assert "2*batch" in subgraph_dims
    for sign in (1, -1):
        other = sign * torch.rand(4, 3)
        _same(ours(other), [model(other)])
        _same(ours(other), theirs(other))


def test_rename_axes_rejects_bad_keys_and_names() -> None:
    model, x = _MLP().eval(), torch.randn(5, 4)
    ours, theirs = _both(model, (x,), dynamic_shapes=({0: Dim.DYNAMIC},))
    for program in (ours, theirs):
        with pytest.raises(ValueError, match="rename_mapping|Invalid key type"):
            program.rename_axes({0: "batch"})
    with pytest.raises(ValueError, match="rename_mapping"):
        ours.rename_axes({"x_dim_0": 3})


# -- Python scalars among the inputs -----------------------------------------------------------

class _ScaleBy(nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n + x.shape[0]


def test_dynamic_int_input_is_a_graph_input() -> None:
    model, x = _ScaleBy(), torch.randn(4, 3)
    ours, theirs = _both(model, (x, 3), dynamic_shapes={"x": None, "n": Dim.DYNAMIC})
    for program in (ours, theirs):
        assert [(v.name, v.dtype) for v in program.model.graph.inputs] == [
            ("x", ir.DataType.FLOAT), ("n", ir.DataType.INT64)]
    for n in (5, 3, -2):
        got = ours(x, n)
        _same(got, [model(x, n)])
        _same(got, theirs(x, n))
    # numpy integers too (torch.onnx 2.13 takes only Python numbers and tensors).
    _same(ours(x, np.int64(-2)), [model(x, -2)])
    _same(ours(x, n=7), theirs(x, n=7))
    _same(ours.call_reference(x, 7), [model(x, 7)])


def test_specialised_int_input_is_not_a_graph_input() -> None:
    model, x = _ScaleBy(), torch.randn(4, 3)
    ours, theirs = _both(model, (x, 3))
    for program in (ours, theirs):
        assert [v.name for v in program.model.graph.inputs] == ["x"]
        # The int was baked in: the value passed is ignored, by both.
        _same(program(x, 5), [model(x, 3)])


def test_leading_int_inputs_dynamic_and_specialised() -> None:
    class Slice(nn.Module):
        def forward(self, n: int, x: torch.Tensor, k: int) -> torch.Tensor:
            return x[:n] * k

    model, x = Slice(), torch.randn(6, 2)
    ds = {"n": Dim.DYNAMIC, "x": {0: Dim.DYNAMIC}, "k": None}
    ours, theirs = _both(model, (3, x, 2), dynamic_shapes=ds)
    other = torch.randn(5, 2)
    got = ours(2, other, 2)
    _same(got, [model(2, other, 2)])
    _same(got, theirs(2, other, 2))

    # A specialised int before the tensors: onnxport skips it, torch.onnx 2.13 feeds the
    # int to the tensor input (it pairs the graph inputs with all the leaves in order).
    scale = Fn(lambda k, x: x * k)
    ours, theirs = _both(scale, (3, x))
    _same(ours(3, x), [scale(3, x)])
    with pytest.raises(Exception, match="INVALID_ARGUMENT"):
        theirs(3, x)


class _Masked(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, scale: float = 2.0,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        y = x * scale
        if mask is not None:
            y = y * mask
        return y + bias


def test_none_and_specialised_float_among_the_inputs() -> None:
    model, x, b = _Masked(), torch.randn(3, 4), torch.randn(4)
    ours, theirs = _both(model, (x, None), kwargs={"scale": 3.0, "bias": b})
    for program in (ours, theirs):
        assert [v.name for v in program.model.graph.inputs] == ["x", "bias"]
    expected = [model(x, None, scale=3.0, bias=b)]
    _same(ours(x, None, scale=3.0, bias=b), expected)
    _same(ours(x, bias=b, scale=3.0), expected)
    _same(ours.call_reference(x, None, scale=3.0, bias=b), expected)
    # torch.onnx 2.13 pairs the graph inputs with the leaves (None dropped) in order, so it
    # feeds the specialised 3.0 to `bias`; with only tensors passed it agrees.
    with pytest.raises(Exception, match="bias"):
        theirs(x, None, scale=3.0, bias=b)
    _same(ours(x, None, scale=3.0, bias=b), theirs(x, bias=b))


def test_scalar_for_a_tensor_input_of_the_wrong_kind_is_a_type_error() -> None:
    model, x = _ScaleBy(), torch.randn(4, 3)
    program = onnxport.export(model, (x, 3), dynamic_shapes={"x": None, "n": Dim.DYNAMIC})
    assert program is not None
    with pytest.raises(TypeError, match="input 'n'"):
        program(x, "3")
    with pytest.raises(onnxport.OnnxExporterError, match="takes 2 inputs"):
        program(x)


# -- complex outputs ---------------------------------------------------------------------------

def test_complex_outputs_are_real_pairs_as_in_torch_onnx() -> None:
    fft = Fn(lambda x: torch.fft.fft(x))
    x = torch.randn(4, 8)
    ours, theirs = _both(fft, (x,))
    got, want = ours(x), theirs(x)
    assert [(t.dtype, tuple(t.shape)) for t in got] == [(torch.float32, (4, 8, 2))]
    _same(got, want)
    torch.testing.assert_close(torch.view_as_complex(got[0]), torch.fft.fft(x))
    _same(ours.call_reference(x), theirs.call_reference(x))
    # compute_values returns the pairs too.
    (value,) = ours.compute_values([ours.model.graph.outputs[0].name], (x,))
    torch.testing.assert_close(value, got[0])


def test_complex_input_and_output_pairs() -> None:
    fft = Fn(lambda z: (torch.fft.ifft(z), torch.fft.fft(z).abs()))
    z = torch.randn(3, 8, dtype=torch.complex64)
    ours, theirs = _both(fft, (z,))
    got = ours(z)
    _same(got, theirs(z))
    assert got[0].dtype == torch.float32 and got[0].shape == (3, 8, 2)
    for a, e in zip(got, fft(z)):
        torch.testing.assert_close(as_complex_like(a, e), e)


def test_complex_scalar_product_as_pairs() -> None:
    # torch.onnx 2.13 cannot export this (no complex mul.Scalar); onnxport returns pairs.
    fn = Fn(lambda x: x * (1 + 2j))
    x = torch.randn(3, 5)
    program = onnxport.export(fn, (x,), verify=True)
    assert program is not None
    (out,) = program(x)
    assert out.shape == (3, 5, 2)
    torch.testing.assert_close(torch.view_as_complex(out), fn(x))
    with pytest.raises(Exception, match="mul"):
        _torch_onnx(fn, (x,))


def test_verify_program_converts_pairs_back() -> None:
    from onnxport.verify import verify_program

    fn = Fn(lambda z: torch.fft.fft(z) * 2)
    z = torch.randn(6, dtype=torch.complex128)
    ours, theirs = _both(fn, (z,))
    for program in (ours, theirs):
        diffs = verify_program(program, fn, (z,), None)
        assert [d.passed for d in diffs] == [True]
        # compared as the complex tensor the pairs hold
        assert diffs[0].actual_dtype == "torch.complex128"


# -- capture_strategy --------------------------------------------------------------------------

def test_capture_strategy_attribute() -> None:
    model, x = _MLP().eval(), torch.randn(5, 4)
    ours, theirs = _both(model, (x,))
    # torch.onnx keeps its strategy's class name privately; onnxport has a public attribute.
    assert theirs._capture_strategy == "TorchExportNonStrictStrategy"
    assert ours.capture_strategy in (None, "non-strict", "strict", "exported-program",
                                     "torchscript")
    bare = onnxport.ONNXProgram(ours.model, None)
    assert bare.capture_strategy is None
    bare.capture_strategy = "exported-program"
    assert bare.capture_strategy == "exported-program"
    _same(bare(x), [model(x).detach()])
    _same(bare(x), theirs(x))
