"""PretransposeWeightsPass: Transpose(2-D initializer) -> the initializer stored transposed (a
view, no copy), apply_weights by state_dict name still right; and the opset-18 translations
of mean and GELU in the forms that need no fusion."""

from __future__ import annotations

import io
import math

import onnx
import pytest
import torch

import onnxport
from onnxport.passes import PretransposeWeightsPass, transposed_weights
from tests.passes.fusion_helpers import Wrap, assert_same, fuse, ops, ort_optimized_ops, unfused


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 24)
        self.down = torch.nn.Linear(24, 16, bias=False)
        self.square = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.square(self.down(torch.relu(self.up(x))))


X3 = (torch.randn(2, 5, 16),)


def test_linear_weights_stored_transposed() -> None:
    model = MLP().eval()
    before = unfused(model, X3)
    assert ops(before)["Transpose"] == 3
    after = fuse(before, PretransposeWeightsPass())
    assert ops(after)["Transpose"] == 0 and ops(after)["MatMul"] == 3
    inits = after.model.graph.initializers
    assert tuple(inits["up.weight"].shape) == (16, 24)          # state_dict names kept
    assert tuple(inits["down.weight"].shape) == (24, 16)
    assert transposed_weights(after.model) == {"up.weight", "down.weight", "square.weight"}
    assert_same(model, X3, before, after)
    assert not PretransposeWeightsPass()(after.model).modified   # nothing left to do


def _pretransposed(model: torch.nn.Module) -> onnxport.ONNXProgram:
    program = unfused(model, X3)     # the default fusions leave no Transpose(W) (Gemm transB)
    assert PretransposeWeightsPass()(program.model).modified
    return program


def test_not_in_the_default_list() -> None:
    """Weights keep their state_dict shapes by default (the names-and-shapes contract); the
    default passes make each Linear on 3-D input a 2-D Gemm(x, W, transB=1), which reads the
    weight as stored, so no Transpose is left for this pass."""
    model = MLP().eval()
    program = onnxport.export(model, X3)
    assert ops(program)["Transpose"] == 0 and ops(program)["Gemm"] == 3
    assert tuple(program.model.graph.initializers["up.weight"].shape) == (24, 16)
    assert not PretransposeWeightsPass()(program.model).modified
    assert_same(model, X3, unfused(model, X3), program)


def test_view_not_copy() -> None:
    """The stored tensor shares the parameter's memory."""
    model = MLP().eval()
    program = _pretransposed(model)
    stored = program.model.graph.initializers["up.weight"].const_value
    assert stored.raw.data_ptr() == model.up.weight.data_ptr()
    assert tuple(stored.shape) == (16, 24)


def test_apply_weights_by_state_dict_name() -> None:
    model = MLP().eval()
    program = _pretransposed(model)
    assert ops(program)["Transpose"] == 0
    other = MLP().eval()
    program.apply_weights(other.state_dict())
    with torch.no_grad():
        expected = other(*X3)
    torch.testing.assert_close(program(*X3)[0], expected, rtol=1e-5, atol=1e-5)
    # Saved and reloaded: the list of transposed weights travels in the metadata.
    buf = io.BytesIO()
    program.save(buf)
    loaded = onnx.load_from_string(buf.getvalue())
    listed = {p.key: p.value for p in loaded.metadata_props}
    assert set(listed["pkg.onnxport.transposed_weights"].split(",")) == \
        {"up.weight", "down.weight", "square.weight"}


def test_apply_weights_rejects_wrong_shape() -> None:
    program = _pretransposed(MLP().eval())
    with pytest.raises(onnxport.OnnxExporterError):
        program.apply_weights({"up.weight": torch.randn(16, 24)})   # transposed by mistake


class Tied(torch.nn.Module):
    """A weight also read as itself (an embedding tied to the output projection)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(self.emb(ids), self.emb.weight)


def test_weight_read_otherwise_not_transposed() -> None:
    model = Tied().eval()
    args = (torch.randint(0, 10, (2, 5)),)
    before = unfused(model, args)
    after = fuse(before, PretransposeWeightsPass())
    assert ops(after) == ops(before)
    assert transposed_weights(after.model) == set()
    assert_same(model, args, before, after)


# -- translations at opset 18 --------------------------------------------------------------

class Mean(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(-1, keepdim=True) + x.mean()


def test_mean_is_reduce_mean() -> None:
    model = Wrap(Mean())
    program = onnxport.export(model, X3)
    assert ops(program)["ReduceMean"] == 2 and ops(program)["ReduceSum"] == 0
    assert_same(model, X3, program, program)


def test_mean_float16_rounds_once_like_aten() -> None:
    model = Wrap(Mean())
    x = (torch.randn(3, 700) * 30).half()
    program = onnxport.export(model, (x,))
    assert ops(program)["ReduceMean"] == 2
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(program(x)[0], expected, rtol=1e-3, atol=1e-3)


def test_mean_of_empty_slice_stays_nan() -> None:
    model = Wrap(Mean())
    x = torch.randn(2, 0)
    program = onnxport.export(model, (x,))
    assert ops(program)["ReduceMean"] == 0
    assert torch.isnan(program(x)[0]).all()


def test_gelu_translation_is_the_form_ort_fuses() -> None:
    model = Wrap(torch.nn.GELU())
    program = onnxport.export(model, X3, opset_version=18)    # opset 20 writes one Gelu
    assert dict(ops(program)) == {"Div": 1, "Erf": 1, "Add": 1, "Mul": 2}
    div = next(n for n in program.model.graph if n.op_type == "Div")
    assert abs(div.inputs[1].const_value.numpy().item() - math.sqrt(2)) < 1e-6
    assert dict(ort_optimized_ops(program)) == {"com.microsoft.Gelu": 1}
    assert_same(model, X3, program, program)
