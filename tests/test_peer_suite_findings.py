"""Findings of PyTorch's own exporter tests run with onnxport (benchmarks/bench_pytorch_exporter_tests.py).

onnxport's verification API takes torch.onnx's ONNXProgram as well as its own: the suite's
test_verification and every assert_onnx_program call pass with onnxport's checks on
torch.onnx's programs (the `torch.onnx+onnxport.testing` flavour of the benchmark).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import onnxport
from onnxport.testing import assert_onnx_program
from onnxport.verification import find_first_divergence, verify_onnx_program
from tests.verify import models as m


class _AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = a + b
        return c - 1, c


def _torch_onnx(model: torch.nn.Module, args: tuple, **options) -> torch.onnx.ONNXProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(model.eval(), args, dynamo=True, verbose=False, **options)


def test_verify_onnx_program_with_intermediates_on_torch_onnx_program() -> None:
    # Was: AttributeError 'ONNXProgram' object has no attribute 'runtime_options'.
    from torch.onnx._internal.exporter import _verification

    args = (torch.tensor([1.0]), torch.tensor([2.0]))
    program = _torch_onnx(_AddSub(), args)
    theirs = _verification.verify_onnx_program(program, args, compare_intermediates=True)
    ours = verify_onnx_program(program, args, compare_intermediates=True)
    # torch.onnx's graph has add, scalar_tensor_default (the 1 of `c - 1`), sub
    assert [i.name for i in ours] == [i.name for i in theirs]
    assert len(ours) == 3
    assert all(i.max_abs_diff == 0 for i in ours)


def test_verify_onnx_program_with_intermediates_on_onnxport_program() -> None:
    # onnxport's graph keeps the 1 of `c - 1` as an argument: two values, not three.
    args = (torch.tensor([1.0]), torch.tensor([2.0]))
    program = onnxport.export(_AddSub(), args)
    assert [i.name for i in verify_onnx_program(program, args, compare_intermediates=True)] == \
        ["add", "sub"]


def test_wrong_translation_in_torch_onnx_program_is_named_by_onnxport() -> None:
    # Was: "(finding the first wrong node failed: AttributeError ...)" under the assertion.
    model = m.MLP().eval()
    args = (torch.randn(4, 6),)
    program = _torch_onnx(model, args, custom_translation_table={
        torch.ops.aten.tanh.default: m.torch_onnx_sigmoid})
    with pytest.raises(AssertionError, match="tanh"):
        assert_onnx_program(program)
    report = find_first_divergence(program, args)
    assert report.first is not None and report.first.name == "tanh"
    clean = _torch_onnx(model, args)
    assert_onnx_program(clean)
    assert find_first_divergence(clean, args).first is None


@pytest.mark.parametrize("namespace", ["torch.onnx", "onnxport"])
def test_exportable_module_is_abstract(namespace: str) -> None:
    # Was: onnxport's ExportableModule could be instantiated without example_arguments.
    base = torch.onnx.ExportableModule if namespace == "torch.onnx" else onnxport.ExportableModule
    with pytest.raises(TypeError, match="example_arguments"):
        base()

    class Incomplete(base):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    with pytest.raises(TypeError, match="example_arguments"):
        Incomplete()

    class Complete(Incomplete):
        def example_arguments(self) -> tuple:
            return (torch.randn(2, 3),), None

    x = torch.randn(4, 3)
    program = Complete().to_onnx(dynamo=True, dynamic_shapes=({0: "batch"},))
    torch.testing.assert_close(program(x)[0], x * 2)
