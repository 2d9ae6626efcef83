"""What a verification starts from: the program as onnxport's, its inputs, eager's outputs.

Below `compare`, `localize`, `torchscript_values` and `onnxport.verification`, which all use it.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

__all__ = ["example_inputs", "flatten_outputs", "own_program"]


def flatten_outputs(outputs: Any) -> list[torch.Tensor]:
    """The tensor leaves of a model's output, in pytree order (as the ONNX outputs)."""
    leaves = torch.utils._pytree.tree_leaves(outputs)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def example_inputs(onnx_program: Any, args: Any, kwargs: Any
                   ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) to compare at: those given, or the exported program's examples."""
    exported_program = onnx_program.exported_program
    if exported_program is None:
        raise ValueError("The ONNX program has no exported_program (an export with "
                         "dynamo=False?): verify_onnx_program compares with the ExportedProgram; "
                         "use find_first_divergence(model, args, dynamo=False) instead")
    if args is None and kwargs is None:
        if exported_program.example_inputs is None:
            raise ValueError("No example inputs given and the exported program holds none: "
                             "pass args (and kwargs)")
        args, kwargs = exported_program.example_inputs
    return tuple(args or ()), dict(kwargs or {})


def own_program(program: Any) -> Any:
    """`program` as onnxport's ONNXProgram: another exporter's (torch.onnx's) ONNXProgram,
    with its ONNX model and ExportedProgram, is wrapped so that it runs as onnxport's does."""
    from onnxport.program import ONNXProgram

    if isinstance(program, ONNXProgram):
        return program
    model = getattr(program, "model", None)
    if not isinstance(model, ir.Model) or not hasattr(program, "exported_program"):
        raise TypeError(f"expected an ONNXProgram (with .model and .exported_program), got "
                        f"{type(program).__name__}")
    return ONNXProgram(model, program.exported_program)
