"""torch.onnx 2.13's conventions, side by side (issue 27): rename_axes on dims onnxport did not
name, scaled_dot_product_attention as one Attention node at opset 23, the warnings torch.onnx
gives, and float4 at the default opset.

Each test makes one call through torch.onnx and onnxport and compares what both give: graph
ops, dims, ONNX Runtime outputs, warnings, or the errors.
"""

from __future__ import annotations

import io
import re
import warnings
from typing import Any

import onnx
import onnx_ir as ir
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto
from onnx import helper as oh
from torch.export import Dim

import onnxport


def _quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _recorded(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    return result, list(record)


def _shapes(model: ir.Model) -> dict[str, list[Any]]:
    """Every named value's shape, dims as ints or names: inputs, weights, node outputs."""
    values = [*model.graph.inputs, *model.graph.initializers.values(),
              *(v for node in ir.traversal.RecursiveGraphIterator(model.graph) for v in node.outputs)]
    return {str(v.name): [d if isinstance(d, int) else d.value for d in v.shape]
            for v in values if v.shape is not None}


def _dim_names(shapes: dict[str, list[Any]]) -> set[str]:
    return {d for dims in shapes.values() for d in dims if isinstance(d, str)}


# -- 1. rename_axes renames any symbolic dim ---------------------------------------------------

def _hand_built() -> onnx.ModelProto:
    """s0/s1 dims on inputs, an intermediate (value_info), an expression and the output."""
    f = TensorProto.FLOAT
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Concat", ["r", "y"], ["z"], axis=0),
         oh.make_node("ReduceSum", ["z"], ["total"], keepdims=0, noop_with_empty_axes=0)],
        "hand_built",
        [oh.make_tensor_value_info("x", f, ["s0", "s1"]), oh.make_tensor_value_info("y", f, ["s0", "s1"])],
        [oh.make_tensor_value_info("z", f, ["2*s0", "s1"]), oh.make_tensor_value_info("total", f, [])],
        value_info=[oh.make_tensor_value_info("r", f, ["s0", "s1"])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 20)])


def test_rename_axes_on_a_hand_built_model() -> None:
    proto = _hand_built()
    ours = onnxport.ONNXProgram(ir.serde.deserialize_model(proto), None)
    theirs = torch.onnx.ONNXProgram(ir.serde.deserialize_model(proto), None)
    for program in (ours, theirs):
        program.rename_axes({"s0": "batch"})
    shapes = _shapes(ours.model)
    assert shapes == _shapes(theirs.model)
    assert shapes == {"x": ["batch", "s1"], "y": ["batch", "s1"], "r": ["batch", "s1"],
                      "z": ["2*batch", "s1"], "total": []}
    saved = ours.model_proto.graph
    assert [d.dim_param for d in saved.value_info[0].type.tensor_type.shape.dim] == ["batch", "s1"]
    assert saved.output[0].type.tensor_type.shape.dim[0].dim_param == "2*batch"
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for a, e in zip(ours(x, y), theirs(x, y)):
        torch.testing.assert_close(a, e)


class _TwoInputs(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x.relu() * 2).sum(1) + y[:, 0], torch.cat([x, x], 0)


def test_rename_axes_on_a_torch_onnx_export() -> None:
    args = (torch.randn(3, 4), torch.randn(3, 5))
    exported = _quiet(torch.onnx.export, _TwoInputs().eval(), args, dynamo=True,
                      dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, {0: Dim.DYNAMIC}),
                      optimize=False)
    batch, features = (str(d) for d in exported.model.graph.inputs[0].shape)
    assert batch.startswith("s") and features.startswith("s")  # torch.export's names
    ours = onnxport.ONNXProgram(ir.serde.deserialize_model(exported.model_proto),
                                exported.exported_program)
    theirs = torch.onnx.ONNXProgram(ir.serde.deserialize_model(exported.model_proto),
                                    exported.exported_program)
    mapping = {batch: "batch", features: "features"}
    ours.rename_axes(mapping)
    theirs.rename_axes(mapping)
    shapes = _shapes(ours.model)
    assert shapes == _shapes(theirs.model)
    assert shapes["x"] == ["batch", "features"]
    assert shapes["relu"] == ["batch", "features"]  # an intermediate value
    assert shapes["cat"] == ["2*batch", "features"]
    assert not _dim_names(shapes) & {batch, features}
    other = (torch.randn(5, 2), torch.randn(5, 5))
    for a, e in zip(ours(*other), _TwoInputs()(*other)):
        torch.testing.assert_close(a, e)


def test_rename_axes_with_string_keys_on_a_program_built_by_hand() -> None:
    # PyTorch's own exporter test: an ONNXProgram made from an onnx_ir model, dims renamed by name
    def model() -> ir.Model:
        inputs = [ir.Value(name=f"input_{i}", type=ir.DataType.FLOAT, shape=ir.Shape(dims))
                  for i, dims in enumerate([["s0", "s1"], ["s0", "s2"]])]
        output = ir.Value(name="output", type=ir.DataType.FLOAT, shape=ir.Shape(["s0", "s1"]))
        return ir.Model(ir.Graph(inputs=inputs, outputs=[output], nodes=[]), ir_version=9)

    mapping = {"s0": "batch_size", "s1": "sequence_length", "s2": "hidden_size"}
    for program_type in (onnxport.ONNXProgram, torch.onnx.ONNXProgram):
        program = program_type(model(), exported_program=None)
        program.rename_axes(mapping)
        graph = program.model.graph
        assert graph.inputs[0].shape == ir.Shape(["batch_size", "sequence_length"])
        assert graph.inputs[1].shape == ir.Shape(["batch_size", "hidden_size"])
        if program_type is onnxport.ONNXProgram:
            # torch.onnx 2.13 leaves an output no node produces as [s0, s1]; the test expects
            # it renamed, as onnxport does.
            assert graph.outputs[0].shape == ir.Shape(["batch_size", "sequence_length"])


# -- 2. scaled_dot_product_attention at opset 23 -----------------------------------------------

class _Attention(torch.nn.Module):
    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, **self.options)


def _qkv(dtype: torch.dtype, kv_heads: int = 4) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=g)
    k, v = (torch.randn(2, kv_heads, 7, 8, generator=g) for _ in range(2))
    return tuple(t.to(dtype) for t in (q, k, v))


def _close_to_eager(program: Any, model: _Attention, args: tuple[torch.Tensor, ...]) -> None:
    actual = program(*args)[0]
    assert actual.dtype == args[0].dtype
    if args[0].dtype == torch.float32:
        torch.testing.assert_close(actual, model(*args), rtol=1e-4, atol=1e-5)
        return
    # float16: ONNX Runtime and torch round differently; as close to float64 as torch is
    as_double = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                 for k, v in model.options.items()}
    reference = _Attention(**as_double)(*(t.double() for t in args))
    ours = (actual.double() - reference).abs().max()
    eager = (model(*args).double() - reference).abs().max()
    assert ours <= eager * 1.5 + 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sdpa_is_one_attention_node(dtype: torch.dtype) -> None:
    model, args = _Attention().eval(), _qkv(dtype)
    ours = onnxport.export(model, args, opset_version=23)
    theirs = _quiet(torch.onnx.export, model, args, dynamo=True, opset_version=23)
    assert [n.op_type for n in ours.model.graph] == [n.op_type for n in theirs.model.graph] \
        == ["Attention"]
    assert [v.dtype for v in ours.model.graph.outputs] == [v.dtype for v in theirs.model.graph.outputs]
    _close_to_eager(ours, model, args)
    torch.testing.assert_close(ours(*args)[0], theirs(*args)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", ["bool_mask", "float_mask", "scale", "causal_gqa"])
def test_sdpa_variants_stay_one_node(dtype: torch.dtype, case: str) -> None:
    args = _qkv(dtype, kv_heads=2 if case == "causal_gqa" else 4)
    options: dict[str, Any] = {}
    if case == "bool_mask":
        mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[2] = False  # a fully masked row: zeros, as torch's math kernel
        options["attn_mask"] = mask
    elif case == "float_mask":
        options["attn_mask"] = torch.randn(2, 1, 5, 7).to(dtype)
    elif case == "scale":
        options["scale"] = 0.3
    else:
        options.update(is_causal=True, enable_gqa=True)
    model = _Attention(**options).eval()
    ours = onnxport.export(model, args, opset_version=23)
    theirs = _quiet(torch.onnx.export, model, args, dynamo=True, opset_version=23)
    assert [n.op_type for n in ours.model.graph] == [n.op_type for n in theirs.model.graph]
    assert sum(n.op_type == "Attention" for n in ours.model.graph) == 1
    assert not any(n.op_type == "Cast" for n in ours.model.graph)
    _close_to_eager(ours, model, args)


def test_sdpa_bfloat16_is_computed_in_float32() -> None:
    # ONNX Runtime's CPU provider has no bfloat16 Attention: the node runs in float32.
    model, args = _Attention().eval(), _qkv(torch.bfloat16)
    ours = onnxport.export(model, args, opset_version=23)
    assert [n.op_type for n in ours.model.graph].count("Attention") == 1
    torch.testing.assert_close(ours(*args)[0], model(*args), rtol=2e-2, atol=2e-2)


# -- 3. warnings -------------------------------------------------------------------------------

class _Add(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


_XY = (torch.randn(2, 3), torch.randn(2, 3))


def _input_dims(program: Any) -> list[list[Any]]:
    return [[d if isinstance(d, int) else str(d) for d in v.shape] for v in program.model.graph.inputs]


def test_dynamic_axes_with_dynamo_is_deprecated() -> None:
    options: dict[str, Any] = {"dynamic_axes": {"x": {0: "batch"}, "y": {0: "batch"}},
                               "input_names": ["x", "y"]}
    with pytest.warns(DeprecationWarning, match="dynamic_axes") as ours_record:
        ours = onnxport.export(_Add().eval(), _XY, **options)
    theirs, theirs_record = _recorded(torch.onnx.export, _Add().eval(), _XY, dynamo=True, **options)
    messages = [next(str(w.message) for w in record if w.category is DeprecationWarning
                     and "dynamic_axes" in str(w.message))
                for record in (ours_record, theirs_record)]
    assert messages[0] == messages[1]  # word for word: code filters on torch.onnx's text
    # PyTorch's own exporter test (test_from_dynamic_axes_to_dynamic_shapes_deprecation_warning)
    assert re.search(
        "from_dynamic_axes_to_dynamic_shapes is deprecated and will be removed in a future release. "
        "This function converts 'dynamic_axes' format \\(including custom axis names\\) to "
        "'dynamic_shapes' format. Instead of relying on this conversion, provide 'dynamic_shapes' "
        "directly with custom names.", messages[0])
    ours_message = next(w for w in ours_record if "dynamic_axes" in str(w.message))
    assert ours_message.filename == __file__  # points at the caller
    assert _input_dims(ours) == _input_dims(theirs) == [["batch", 3], ["batch", 3]]


def test_dynamic_shapes_does_not_warn_as_deprecated() -> None:
    _, record = _recorded(onnxport.export, _Add().eval(), _XY,
                          dynamic_shapes=({0: "batch"}, {0: "batch"}))
    assert not [w for w in record if w.category is DeprecationWarning and "dynamic" in str(w.message)]


def _legacy_warning(record: list[warnings.WarningMessage]) -> warnings.WarningMessage:
    found = [w for w in record if "legacy TorchScript-based ONNX export" in str(w.message)]
    assert len(found) == 1, [str(w.message) for w in record]
    return found[0]


def test_legacy_torchscript_export_warning() -> None:
    _, theirs = _recorded(torch.onnx.export, _Add().eval(), _XY, io.BytesIO(), dynamo=False)
    _, ours = _recorded(onnxport.export, _Add().eval(), _XY, io.BytesIO(), dynamo=False)
    expected, actual = _legacy_warning(theirs), _legacy_warning(ours)
    assert str(actual.message) == str(expected.message)
    assert actual.category is expected.category is DeprecationWarning
    assert actual.filename == expected.filename == __file__
    with pytest.warns(DeprecationWarning, match="legacy TorchScript-based ONNX export"):
        onnxport.export(_Add().eval(), _XY, io.BytesIO(), dynamo=False)


def _rename_warnings(record: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in record if "will not be used" in str(w.message)]


@pytest.mark.parametrize("spec", [
    ({0: Dim("B")}, {0: "batch"}),  # a Dim and a string the model makes one dim
    ({0: "batch"}, {0: "n"}),  # two strings
], ids=["dim_and_string", "two_strings"])
def test_mixed_spec_rename_warning(spec: tuple[Any, ...]) -> None:
    ours, ours_record = _recorded(onnxport.export, _Add().eval(), _XY, dynamic_shapes=spec)
    theirs, theirs_record = _recorded(torch.onnx.export, _Add().eval(), _XY, dynamo=True,
                                      dynamic_shapes=spec)
    kept = spec[0][0] if isinstance(spec[0][0], str) else spec[0][0].__name__
    dropped = spec[1][0]
    for record in (ours_record, theirs_record):
        (warning,) = _rename_warnings(record)
        assert warning.category is UserWarning
        message = str(warning.message)
        assert re.search(rf"axis name:? '?{dropped}\b", message) and "will not be used" in message
        assert "shares the same shape constraints with another axis" in message
        assert kept in message
        # the regex of PyTorch's own exporter test (test_dynamic_shapes_with_nested_inputs...)
        assert re.match("# The axis name: .* will not be used, since it shares the same shape "
                        "constraints with another axis: .*.", message)
    assert _rename_warnings(ours_record)[0].filename == __file__
    assert _input_dims(ours) == _input_dims(theirs) == [[kept, 3], [kept, 3]]
    other = (torch.randn(4, 3), torch.randn(4, 3))
    torch.testing.assert_close(ours(*other)[0], theirs(*other)[0])


def test_no_rename_warning_when_the_names_agree() -> None:
    # torch.onnx 2.13 warns "The axis name: batch will not be used ... another axis: batch"
    # here; the name is used, so onnxport does not.
    spec = ({0: Dim("batch")}, {0: "batch"})
    ours, record = _recorded(onnxport.export, _Add().eval(), _XY, dynamic_shapes=spec)
    assert not _rename_warnings(record)
    assert _input_dims(ours) == [["batch", 3], ["batch", 3]]


def test_no_rename_warning_for_generated_names() -> None:
    # dynamic_axes as lists: onnxport generates <input>_dynamic_axes_<k>, the user named nothing
    _, record = _recorded(onnxport.export, _Add().eval(), _XY,
                          dynamic_axes={"x": [0], "y": [0]}, input_names=["x", "y"])
    assert not _rename_warnings(record)


# -- 4. float4 at the default opset ------------------------------------------------------------

class _ReturnsFloat4(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, torch.empty([1], dtype=torch.float4_e2m1fn_x2)


class _Float4Buffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.zeros(2, 4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, self.w


def _outputs(program: Any) -> list[tuple[Any, list[Any]]]:
    return [(v.dtype, [int(d) for d in v.shape]) for v in program.model.graph.outputs]


@pytest.mark.parametrize("model", [_ReturnsFloat4(), _Float4Buffer()], ids=["empty", "buffer"])
def test_float4_at_the_default_opset_chooses_opset_23(model: torch.nn.Module) -> None:
    x = torch.randn(2)
    theirs = _quiet(torch.onnx.export, model.eval(), (x,), dynamo=True)
    with pytest.warns(UserWarning, match=r"float4_e2m1fn_x2.*opset 23.*opset_version=23") as record:
        ours = onnxport.export(model.eval(), (x,))
    assert any(w.filename == __file__ for w in record if "opset 23" in str(w.message))
    assert ours.model.opset_imports[""] == 23
    assert _outputs(ours) == _outputs(theirs)
    assert _outputs(ours)[1][0] == ir.DataType.FLOAT4E2M1
    onnx.checker.check_model(ours.model_proto)


@pytest.mark.parametrize("opset", [18, 20, 22])
def test_float4_at_an_explicit_opset_is_a_typed_error(opset: int) -> None:
    with pytest.raises(onnxport.TranslationError, match="needs opset 23 or higher"):
        onnxport.export(_ReturnsFloat4().eval(), (torch.randn(2),), opset_version=opset)


def test_default_opset_stays_20_without_new_types() -> None:
    _, record = _recorded(onnxport.export, _Add().eval(), _XY)
    program = onnxport.export(_Add().eval(), _XY)
    assert program.model.opset_imports[""] == 20
    assert not [w for w in record if "opset_version=" in str(w.message)]
