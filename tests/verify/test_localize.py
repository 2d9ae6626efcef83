"""Where users meet the first wrong node: ORT-optimizer vs exporter divergences told apart,
the TorchScript flavour, pytree inputs/outputs with control flow, export(verify=True)'s
error, the checkpoint CLI's validation table, testing.assert_onnx_program, chunked fetching.

Tolerance: tests/verify/models.py TOLERANCE; find_first_divergence's own threshold is
documented in onnxport/verify/localize.py.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
import torch

import onnxport
import onnxport.testing
from onnxport.errors import VerificationError
from onnxport.passes import run_passes
from onnxport.passes.fuse_weight_dequant import FuseWeightDequantPass
from onnxport.verification import find_first_divergence, verify_onnx_program
from onnxport.verify.intermediates import compare_intermediates, fx_items
from tests.verify import models as m

TANH = {torch.ops.aten.tanh.default: m.sigmoid_for_tanh}


class Int8Linear(torch.nn.Module):
    """tanh, then an int8 weight dequantized by hand ((W - zero) * scale) and a matmul."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.register_buffer("wq", torch.randint(-128, 128, (32, 64), dtype=torch.int8))
        self.register_buffer("scale", torch.rand(32, 1) * 0.01 + 0.001)
        self.register_buffer("zero", torch.zeros(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x) * 2
        w = (self.wq.t().float() - self.zero.t()) * self.scale.t()
        return h @ w


def test_ort_optimizer_divergence_told_from_an_exporter_one() -> None:
    """As DequantizeLinear (FuseWeightDequantPass), the weight and matmul are what ONNX
    Runtime's optimizer turns into MatMulNBits, which by default
    (session.qdq_matmulnbits_accuracy_level 4) quantizes the activations to int8: a real
    change of about 0.7% of the output, absent with ORT_DISABLE_ALL. A wrong tanh is
    wrong either way."""
    model, x = Int8Linear().eval(), torch.randn(2, 3, 64)
    program = onnxport.export(model, (x,))
    run_passes(program.model, [FuseWeightDequantPass()])
    assert any(n.op_type == "DequantizeLinear" for n in program.model.graph)
    report = find_first_divergence(program, (x,))
    first = report.first
    assert first is not None and first.name == "matmul", str(report)
    assert first.cause == "onnxruntime optimizer" and first.without_ort_optimizations is False
    assert "models" not in first.source and "test_localize.py" in first.source
    assert "ONNX Runtime's optimizer changes it" in str(report)
    assert report.outputs_diverge and report.outputs_diverge_without_ort_optimizations is False
    # its inputs: tanh(x) * 2 within rounding, the dequantized weight exact
    assert {i.name: i.error for i in first.inputs} == {"mul": pytest.approx(0, abs=1e-6),
                                                       "mul_1": 0.0}

    wrong = onnxport.export(model, (x,), custom_translation_table=TANH)
    run_passes(wrong.model, [FuseWeightDequantPass()])
    report = find_first_divergence(wrong, (x,))
    assert report.first is not None and report.first.name == "tanh", str(report)
    assert report.first.cause == "exporter"
    assert "exporter or translation bug" in str(report)


def test_torchscript_flavour() -> None:
    model, x = m.MLP().eval(), torch.randn(4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert find_first_divergence(model, (x,), dynamo=False).first is None
        onnxport.register_custom_op_symbolic("aten::tanh", m.sigmoid_for_tanh, 20)
        try:
            report = find_first_divergence(model, (x,), dynamo=False)
        finally:
            onnxport.unregister_custom_op_symbolic("aten::tanh", 20)
    first = report.first
    assert first is not None and first.op == "aten::tanh", str(report)
    assert first.module_path == "act" and "models.py" in first.source, str(report)
    assert first.onnx_nodes == ("/act/Sigmoid (Sigmoid)",) and first.cause == "exporter"
    assert [i.error is not None and i.error < 1e-5 for i in first.inputs] == [True]


class TreeAndCond(torch.nn.Module):
    """Dict and tuple inputs and outputs; torch.cond (an ONNX If) after the tanh."""

    def forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        x, (y, z) = inputs["x"], inputs["pair"]
        h = torch.tanh(x) + y
        out = torch.cond(h.sum() > 0, lambda t: t * 2, lambda t: t - 1, (h,))
        return {"a": out, "b": (h.relu(), z * 3)}


def test_pytree_inputs_outputs_and_control_flow() -> None:
    model = TreeAndCond().eval()
    torch.manual_seed(0)
    inputs = {"inputs": {"x": torch.randn(3, 4) + 1, "pair": (torch.rand(3, 4), torch.randn(2))}}
    for table, wrong in ((None, None), (TANH, "tanh")):
        program = onnxport.export(model, (), kwargs=inputs, custom_translation_table=table)
        assert any(n.op_type == "If" for n in program.model.graph)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            infos = verify_onnx_program(program, compare_intermediates=True)
        names = [i.name for i in infos]
        assert "cond__0" in names or any(n.startswith("cond") for n in names), names
        assert m.first_over(infos) == wrong, [(i.name, i.max_abs_diff) for i in infos]
        outputs = verify_onnx_program(program)   # example inputs by default
        assert len(outputs) == 3
        assert (m.first_over(outputs) is None) == (wrong is None)


def test_export_verify_names_the_first_wrong_node() -> None:
    model, x = m.MLP().eval(), torch.randn(4, 6)
    with pytest.raises(VerificationError) as caught:
        onnxport.export(model, (x,), custom_translation_table=TANH, verify=True)
    text = str(caught.value)
    assert "first wrong node: tanh (aten.tanh.default) in module act" in text, text
    assert re.search(r"source: .*tests/verify/models\.py:\d+ in forward", text), text
    assert caught.value.divergence.first.cause == "exporter"


def test_cli_validation_table_prints_the_first_wrong_node(tmp_path: Any) -> None:
    from onnxport.tasks.graphs import GraphSpec
    from onnxport.tasks.validate import format_table, validate_graph

    model = m.MLP().eval()
    spec = GraphSpec("model.onnx", model, ["x"], ["logits"], {"x": {0: "batch"}},
                     lambda shape: {"x": torch.randn(shape["batch"], 6)},
                     [{"batch": 2}, {"batch": 5}])
    path = tmp_path / "model.onnx"
    onnxport.export(model, (torch.randn(2, 6),), input_names=["x"], output_names=["logits"],
                    dynamic_shapes={"x": {0: "batch"}},
                    custom_translation_table=TANH).save(path)
    rows = validate_graph(spec, path, atol=1e-4)
    assert [r.ok for r in rows] == [False, False]
    table = format_table(rows)
    assert "model.onnx at batch=2: first wrong node: tanh (aten.tanh.default) in module act" \
        in table, table
    assert "tests/verify/models.py:" in table and "/act/Sigmoid" in table
    # the same file without the fault validates, and no first wrong node is searched
    onnxport.export(model, (torch.randn(2, 6),), input_names=["x"], output_names=["logits"],
                    dynamic_shapes={"x": {0: "batch"}}).save(path)
    rows = validate_graph(spec, path, atol=1e-4)
    assert all(r.ok and not r.first_wrong_node for r in rows)


def test_assert_onnx_program() -> None:
    model, x = m.MLP().eval(), torch.randn(4, 6)
    program = onnxport.export(model, (x,))
    onnxport.testing.assert_onnx_program(program)
    onnxport.testing.assert_onnx_program(program, args=(torch.randn(4, 6),), strategy=None)
    onnxport.testing.assert_onnx_program(program, backend="reference", rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="TorchExportStrictStrategy"):
        onnxport.testing.assert_onnx_program(program, strategy="TorchExportStrictStrategy")
    wrong = onnxport.export(model, (x,), custom_translation_table=TANH)
    with pytest.raises(AssertionError, match="first wrong node: tanh"):
        onnxport.testing.assert_onnx_program(wrong)
    # torch.onnx's own program passes through onnxport's assert_onnx_program too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    onnxport.testing.assert_onnx_program(theirs)


def test_chunks_give_the_same_comparisons() -> None:
    """Fetched 1 KiB at a time (a session per few values) or all at once: equal results."""
    model = m.CNN().eval()
    x = torch.randn(2, 3, 10, 10)
    program = onnxport.export(model, (x,), custom_translation_table=TANH)
    feed = program._feed((x,), {})
    one, missing_one = compare_intermediates(program, feed, fx_items(program, (x,), {}))
    many, missing_many = compare_intermediates(program, feed, fx_items(program, (x,), {}),
                                               chunk_bytes=1024)
    assert [c.info.name for c in one] == [c.info.name for c in many]
    # Exposing other values changes which nodes ONNX Runtime fuses (Conv + BatchNorm, ...),
    # so the rounding differs by a few float32 ulps of these O(1) values, never more.
    assert [c.info.max_abs_diff for c in one] == \
        pytest.approx([c.info.max_abs_diff for c in many], abs=1e-5)
    wrong = [c.info.name for c in one if c.error > 1e-3]
    assert wrong[0] == "tanh" and wrong == [c.info.name for c in many if c.error > 1e-3]
    assert missing_one == missing_many


def test_static_llama_values_carried_as_rows_are_compared() -> None:
    """With static shapes, FuseRowsPass carries the Linears' values as 2-D `<name>__rows`
    values; they are compared too (the wrong silu's input is, within rounding)."""
    program = onnxport.export(m.llama(), (m.ids(1, 8),),
                              custom_translation_table={
                                  torch.ops.aten.silu.default: m.silu_wrong_in_layer_1})
    assert any(v.name == "linear_11__rows" for n in program.model.graph for v in n.outputs)
    first = find_first_divergence(program).first
    assert first is not None and first.name == "silu_1"
    assert [(i.name, i.error is not None and i.error < 1e-5) for i in first.inputs] == \
        [("linear_11", True)]


def test_jump_rule() -> None:
    """The first node over 1e-3 whose error is 10x its inputs'; gradual growth is reported
    as accumulated; a bool flipped by its inputs' rounding is no jump."""
    from onnxport.verify.intermediates import Compared, VerificationInfo
    from onnxport.verify.localize import _jumps

    def c(name: str, error: float, inputs: tuple[str, ...], dtype: Any = torch.float32) -> Any:
        info = VerificationInfo.from_tensors(name, torch.zeros(1, dtype=dtype),
                                             torch.zeros(1, dtype=dtype))
        return Compared(info, error, None, inputs, 0)

    grows = [c("a", 2e-4, ()), c("b", 8e-4, ("a",)), c("d", 2e-3, ("b",)), c("e", 5e-3, ("d",))]
    found, accumulated = _jumps(grows)
    assert found.info.name == "d" and accumulated
    jump = [c("a", 2e-4, ()), c("b", 5e-3, ("a",)), c("d", 0.5, ("b",))]
    assert _jumps(jump)[0].info.name == "b" and not _jumps(jump)[1]
    flipped = [c("a", 1e-6, ()), c("gt", 1.0, ("a",), torch.bool), c("d", 0.3, ("a", "gt"))]
    assert _jumps(flipped)[0].info.name == "d"
    assert _jumps([c("a", 1e-6, ()), c("b", 1e-4, ("a",))]) == (None, False)


def test_onnxport_verify_command_prints_the_first_wrong_node(tmp_path: Any, capsys: Any) -> None:
    """`onnxport verify FILE --model DIR` on a file whose tanh translation is wrong (the
    file written through the Python API, as the CLI's export would write it)."""
    from onnxport.cli import main
    from onnxport.tasks import registry
    from onnxport.tasks.graphs import graphs_for
    from tests.cli_tasks import checkpoints

    torch.manual_seed(0)
    model = checkpoints.bert().eval()
    model.save_pretrained(tmp_path / "ckpt")
    task, _ = registry.resolve_task(model.config, None)
    spec = graphs_for(model, registry.plan(model.config.model_type, task)[0], task)[0]
    first = spec.make_inputs(spec.shapes[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnxport.export(spec.module, tuple(first[n] for n in spec.input_names),
                        input_names=spec.input_names, output_names=spec.output_names,
                        dynamic_shapes={n: dict(spec.dims.get(n, {})) or None
                                        for n in spec.input_names},
                        custom_translation_table=TANH).save(tmp_path / spec.filename)
        code = main(["verify", str(tmp_path / spec.filename), "--model", str(tmp_path / "ckpt")])
    out = capsys.readouterr().out
    assert code == 1
    assert "first wrong node: tanh (aten.tanh.default) in module model.bert.pooler.activation" \
        in out, out
    assert re.search(r"source: .*modeling_bert\.py:\d+ in forward: pooled_output = "
                     r"self\.activation\(pooled_output\)", out), out
