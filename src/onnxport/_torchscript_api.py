"""export(dynamo=False): the TorchScript-based flavour of torch.onnx.export.

capture (torch.jit.trace, or a ScriptModule/ScriptFunction as is) -> TorchScriptTranslator
(the same op library as the dynamo path) -> passes -> opset down-conversion -> save to `f`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import IO, Any

from onnxport.capture.torchscript import (
    OperatorExportTypes,
    TrainingMode,
    capture_torchscript,
    find_dynamic_dims,
)
from onnxport.passes import cleanup_passes, run_passes
from onnxport.passes.convert_opset import LIBRARY_OPSET, convert_to_opset
from onnxport.program import ONNXProgram
from onnxport.translate import Registry
from onnxport.translate.torchscript import TorchScriptTranslator

logger = logging.getLogger(__name__)

DEFAULT_TORCHSCRIPT_OPSET = 17

_OPTIONS = frozenset({"training", "operator_export_type", "do_constant_folding", "custom_opsets",
                      "export_modules_as_functions", "autograd_inlining"})


def export_torchscript(
    model: Any,
    args: Any,
    f: str | os.PathLike[str] | IO[bytes] | None,
    *,
    registry: Registry,
    kwargs: dict[str, Any] | None = None,
    export_params: bool = True,
    verbose: bool | None = False,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset_version: int | None = None,
    dynamic_axes: Mapping[str, Mapping[int, str] | Sequence[int]] | None = None,
    keep_initializers_as_inputs: bool | None = None,
    training: TrainingMode = TrainingMode.EVAL,
    operator_export_type: OperatorExportTypes = OperatorExportTypes.ONNX,
    do_constant_folding: bool = True,
    custom_opsets: Mapping[str, int] | None = None,
    export_modules_as_functions: bool | Any = False,
    autograd_inlining: bool = True,
    external_data: bool | None = None,
) -> ONNXProgram:
    """Export with the TorchScript front end; writes `f` when given and returns the program.

    `onnxport.export(dynamo=False)` returns None, as torch.onnx does for this flavour; this
    function returns the ONNXProgram for callers that want it. Arguments are those of
    torch.onnx.export (TorchScript flavour); in short:

    Args:
        training: TrainingMode.EVAL (default), PRESERVE or TRAINING (no constant folding).
        operator_export_type: ONNX raises UnsupportedOperatorError for missing ops;
            ONNX_FALLTHROUGH emits them in their own domain; ONNX_ATEN_FALLBACK emits
            `org.pytorch.aten::ATen` nodes for them; ONNX_ATEN does so for every aten op.
        keep_initializers_as_inputs: None means False for ONNX, True otherwise.
        dynamic_axes: {name: {axis: dim name}} or {name: [axis, ...]} (names
            `<name>_dynamic_axes_<k>`), for inputs and outputs.
        autograd_inlining: accepted; autograd.Functions without `symbolic` are always inlined.
    """
    if export_modules_as_functions:
        raise NotImplementedError("export_modules_as_functions is not supported yet with dynamo=False")
    target_opset = opset_version or DEFAULT_TORCHSCRIPT_OPSET
    opset = max(target_opset, LIBRARY_OPSET)
    captured = capture_torchscript(model, args, kwargs, training=training)
    dim_names = _axes_names(dynamic_axes)
    if dim_names:
        names = list(input_names or [])
        names += captured.input_names[len(names):]
        find_dynamic_dims(captured, {i: set(dim_names[n]) for i, n in enumerate(names)
                                     if n in dim_names})
    if verbose:
        print(captured.graph)
    translator = TorchScriptTranslator(
        captured, registry, opset, input_names=input_names, output_names=output_names,
        operator_export_type=operator_export_type, dim_names=dim_names,
        custom_opsets=dict(custom_opsets or {}))
    onnx_model = translator.run()
    run_passes(onnx_model, cleanup_passes())
    if do_constant_folding and training != TrainingMode.TRAINING:
        run_passes(onnx_model)
    if target_opset < opset:
        onnx_model = convert_to_opset(onnx_model, target_opset)
    program = ONNXProgram(onnx_model, None)
    if verbose:
        print(onnx_model)
    if keep_initializers_as_inputs is None:
        keep_initializers_as_inputs = operator_export_type != OperatorExportTypes.ONNX
    if f is not None:
        # Without the weights, the model takes them as inputs (in state_dict order).
        program.save(f, include_initializers=export_params,
                     keep_initializers_as_inputs=bool(keep_initializers_as_inputs) or not export_params,
                     external_data=external_data)
    return program


def _axes_names(dynamic_axes: Mapping[str, Any] | None) -> dict[str, dict[int, str]]:
    """{name: {axis: dim name}}; list values get the automatic `<name>_dynamic_axes_<k>`."""
    names: dict[str, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if isinstance(axes, Mapping):
            names[name] = {int(a): str(n) for a, n in axes.items()}
        else:
            names[name] = {int(a): f"{name}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
    return names


def split_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The TorchScript-flavour options among export()'s extra keyword arguments."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(f"export() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    return dict(options)

