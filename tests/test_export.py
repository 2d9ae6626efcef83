"""export(): capture strategies, in-place ops, names, dynamic dims, opsets, metadata."""

from __future__ import annotations

import io

import onnx
import pytest
import torch

import onnxport
from onnxport.capture import capture
from onnxport.examples import MLPModel
from tests.helpers import export_and_compare


class _InPlace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 2
        y.add_(1)
        z = y.relu()
        y.add_(z)
        return y + z


def test_safe_inplace_ops_translate_without_retrace() -> None:
    captured = capture(_InPlace(), (torch.randn(3, 4),), None, has_translation=lambda t: True)
    assert not captured.retraced and not captured.decomposed
    program = export_and_compare(_InPlace(), (torch.randn(3, 4),))
    assert "pkg.onnxport.fx_node" in next(iter(program.model.graph)).metadata_props


def test_inplace_on_input_is_functionalized() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x + 1

    x = torch.randn(2, 3)
    expected = M()(x.clone())
    program = onnxport.export(M(), (x.clone(),))
    torch.testing.assert_close(program(x.clone())[0], expected)


def test_plain_function_is_exported() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b)

    program = export_and_compare(fn, (torch.randn(2, 3), torch.randn(2, 3)))
    assert [v.name for v in program.model.graph.inputs] == ["a", "b"]


def test_exported_program_is_accepted() -> None:
    ep = torch.export.export(MLPModel().eval(), (torch.rand(4, 8),))
    program = onnxport.export(ep, (torch.rand(4, 8),))
    assert program is not None and program.exported_program is ep
    x = torch.rand(4, 8)
    torch.testing.assert_close(program(x)[0], ep.module()(x))


def test_names_follow_the_model() -> None:
    program = export_and_compare(MLPModel().eval(), (torch.rand(5, 8),))
    graph = program.model.graph
    assert [v.name for v in graph.inputs] == ["tensor_x"]
    assert list(graph.initializers) == [f"fc{i}.{p}" for i in range(4) for p in ("weight", "bias")]
    assert [n.name for n in graph if n.op_type == "Gemm"] == [f"/fc{i}/Gemm" for i in range(4)]
    gemm = next(n for n in graph if n.op_type == "Gemm")
    assert gemm.metadata_props["pkg.onnxport.module"] == "fc0"
    assert "in forward" in gemm.metadata_props["pkg.onnxport.source"]


def test_input_and_output_names() -> None:
    program = onnxport.export(MLPModel().eval(), (torch.rand(5, 8),), input_names=["x"],
                              output_names=["logits"])
    assert program is not None
    assert [v.name for v in program.model.graph.inputs] == ["x"]
    assert [v.name for v in program.model.graph.outputs] == ["logits"]


@pytest.mark.parametrize("spec", ["dynamic_shapes", "dynamic_axes"])
def test_dynamic_batch_gets_the_users_name(spec: str) -> None:
    model = MLPModel().eval()
    kwargs = ({"dynamic_shapes": {"tensor_x": {0: torch.export.Dim("batch")}}}
              if spec == "dynamic_shapes" else {"dynamic_axes": {"tensor_x": {0: "batch"}}})
    program = onnxport.export(model, (torch.rand(6, 8),), **kwargs)
    assert program is not None
    assert str(program.model.graph.inputs[0].shape) == "[batch,8]"
    assert str(program.model.graph.outputs[0].shape) == "[batch,2]"
    x = torch.rand(11, 8)
    torch.testing.assert_close(program(x)[0], model(x).detach())


@pytest.mark.parametrize("opset", [13, 17, 18, 20, 23])
def test_opsets(opset: int) -> None:
    program = export_and_compare(MLPModel().eval(), (torch.rand(5, 8),), opset_version=opset)
    assert program.model.graph.opset_imports[""] == opset
    assert len(program.model.graph.initializers) == 8


def test_is_in_onnx_export() -> None:
    seen = []

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(onnxport.is_in_onnx_export())
            return x.relu()

    onnxport.export(M(), (torch.randn(2),))
    assert seen and all(seen)
    assert not onnxport.is_in_onnx_export()


def test_dynamo_false_returns_none_and_writes_f() -> None:
    # The TorchScript flavour returns None, as torch.onnx's does (tests/torchscript/ tests it).
    buf = io.BytesIO()
    assert onnxport.export(MLPModel(), (torch.rand(2, 8),), buf, dynamo=False) is None
    onnx.checker.check_model(onnx.load_from_string(buf.getvalue()))


def test_saved_model_passes_the_checker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mlp.onnx"
    onnxport.export(MLPModel().eval(), (torch.rand(5, 8),), str(path))
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


def test_untranslated_op_is_decomposed_alone_without_retrace() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.xlog1py(x, x + 1).relu()

    x = torch.rand(3, 4)
    captured = capture(M(), (x,), None, has_translation=lambda t: t != torch.ops.aten.special_xlog1py.default)
    assert not captured.retraced and captured.decomposed == ["aten.special_xlog1py.default"]
    program = export_and_compare(M(), (x,), dynamic_shapes=({0: torch.export.Dim("b")},))
    targets = {str(n.target) for n in program.exported_program.graph.nodes}
    assert "aten.special_xlog1py.default" not in targets
    assert "aten.log1p.default" in targets
    assert str(program.model.graph.inputs[0].shape) == "[b,4]"
    relu = next(n for n in program.model.graph if n.op_type == "Relu")
    assert "in forward" in relu.metadata_props["pkg.onnxport.source"]


def test_ops_without_export_decomposition_use_torch_decomp_or_their_composite_kernel() -> None:
    class M(torch.nn.Module):
        def forward(self, a: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                    x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            # addmv: torch._decomp only; mH: CompositeImplicitAutograd kernel only
            return torch.addmv(a, m, v), m.mH, torch.ldexp(x, torch.tensor([2, 3, 1]))

    args = (torch.randn(3), torch.randn(3, 4), torch.randn(4), torch.randn(3))
    program = export_and_compare(M(), args)
    decomposed = {d.message.split()[0] for d in program.diagnostics if d.rule.id == "OPX002"}
    assert {"aten.addmv.default", "aten.mH.default", "aten.ldexp.Tensor"} <= decomposed
