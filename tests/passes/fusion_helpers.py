"""What the fusion-pass tests share: the unfused graph of a real exported module, running a
pass on it, comparing fused, unfused and eager, and what ONNX Runtime makes of a graph."""

from __future__ import annotations

import collections
import os
import tempfile
from typing import Any

import onnx
import onnx_ir as ir
import onnxruntime as ort
import torch

import onnxport
from onnxport.passes import PretransposeWeightsPass, default_passes, fusion_passes, run_passes


class Wrap(torch.nn.Module):
    """Puts `inner` at module path `norm`, so the fused node's module path is checkable."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.norm = inner

    def forward(self, *args: Any) -> Any:
        return self.norm(*args)


def unfused(model: torch.nn.Module, args: tuple[Any, ...], opset: int = 18) -> onnxport.ONNXProgram:
    """`model` exported and optimized by the default passes minus every fusion pass (and minus
    PretransposeWeightsPass, so a Linear's Transpose(W) is still there)."""
    model.eval()
    program = onnxport.export(model, args, opset_version=opset, optimize=False)
    fusions = {type(p) for p in fusion_passes()} | {PretransposeWeightsPass}
    run_passes(program.model, [p for p in default_passes() if type(p) not in fusions])
    return program


def fuse(program: onnxport.ONNXProgram, *passes: ir.passes.PassBase) -> onnxport.ONNXProgram:
    """A new program holding `program`'s model after `passes` (the input model is not changed)."""
    model = ir.from_proto(program.model_proto)
    run_passes(model, list(passes))
    return onnxport.ONNXProgram(model, program.exported_program)


def ops(program: onnxport.ONNXProgram) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in program.model.graph.all_nodes()
                               if n.op_type != "Constant")


def nodes_of(program: onnxport.ONNXProgram, op_type: str) -> list[ir.Node]:
    return [n for n in program.model.graph.all_nodes() if n.op_type == op_type]


def assert_same(model: torch.nn.Module, args: tuple[Any, ...], before: onnxport.ONNXProgram,
                after: onnxport.ONNXProgram, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """The fused graph equals the unfused one in ONNX Runtime, and both equal eager."""
    onnx.checker.check_model(after.model_proto, full_check=True)
    with torch.no_grad():
        expected = model(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got_before, got_after = before(*args), after(*args)
    assert len(got_after) == len(expected)
    for b, a, e in zip(got_before, got_after, expected):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol)


def ort_optimized_ops(program: onnxport.ONNXProgram) -> collections.Counter[str]:
    """The op types of the graph ONNX Runtime (CPU, all optimizations) actually runs."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "opt.onnx")
        program.save(src)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.optimized_model_filepath = out
        ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(out)
    return collections.Counter((f"{n.domain}." if n.domain else "") + n.op_type
                               for n in optimized.graph.node)
