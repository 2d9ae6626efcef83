"""Test helpers: export-and-compare against eager PyTorch, op counts."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import onnx
import torch

import onnxport
from onnxport.verify.compare import as_complex_like, flatten_outputs


class Fn(torch.nn.Module):
    """Wraps a function of tensors as a module, for exporting it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def op_types(program: onnxport.ONNXProgram) -> list[str]:
    """Every node's op type, subgraphs included."""
    return [n.op_type for n in program.model.graph.all_nodes()]


def count(program: onnxport.ONNXProgram, op_type: str) -> int:
    """How many nodes of `op_type` the model has."""
    return collections.Counter(op_types(program))[op_type]


def check_model(program: onnxport.ONNXProgram) -> None:
    """The ONNX checker with full (shape-inference) checks."""
    onnx.checker.check_model(program.model_proto, full_check=True)


def export_and_compare(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *,
                       rtol: float | None = None, atol: float | None = None,
                       **export_kwargs: Any) -> onnxport.ONNXProgram:
    """Export, check the model, run it in ONNX Runtime and assert it matches eager PyTorch."""
    if isinstance(model, torch.nn.Module):
        model.eval()
    with torch.no_grad():
        expected = flatten_outputs(model(*args, **(kwargs or {})))
    program = onnxport.export(model, args, kwargs=kwargs, **export_kwargs)
    assert program is not None
    check_model(program)
    actual = program(*args, **(kwargs or {}))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        # Complex outputs come back as their real (..., 2) pairs.
        torch.testing.assert_close(as_complex_like(a, e), e, rtol=rtol, atol=atol, equal_nan=True)
    return program
