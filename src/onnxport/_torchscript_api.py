"""export(dynamo=False): the TorchScript-based flavour of torch.onnx.export.

capture (torch.jit.trace, or a ScriptModule/ScriptFunction as is) -> TorchScriptTranslator
(the same op library as the dynamo path) -> passes -> opset down-conversion -> save to `f`.
"""

from __future__ import annotations

import io
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import IO, Any

from onnxport.capture.torchscript import (
    OperatorExportTypes,
    TrainingMode,
    capture_torchscript,
    find_dynamic_dims,
    training_mode,
)
import torch

from onnxport._stages import ExportRun
from onnxport._state import _as_registry, _exporting
from onnxport.diagnostics import DiagnosticContext
from onnxport.passes import cleanup_passes, run_passes
from onnxport.translate.module_functions import modules_as_functions
from onnxport.passes.convert_opset import LIBRARY_OPSET, align_function_opsets, convert_to_opset
from onnxport.program import ONNXProgram
from onnxport.translate import Registry
from onnxport.translate.torchscript import TorchScriptTranslator, translate_script

logger = logging.getLogger(__name__)

# torch.onnx 2.13 writes opset 20 with dynamo=False too (2.1-2.6 wrote 17).
DEFAULT_TORCHSCRIPT_OPSET = 20

# torch.onnx 2.13's words for `export(dynamo=False)`, so that filters written for them match.
LEGACY_EXPORT_WARNING = (
    "You are using the legacy TorchScript-based ONNX export. Starting in PyTorch 2.9, the new "
    "torch.export-based ONNX exporter has become the default. Learn more about the new export "
    "logic: https://docs.pytorch.org/docs/stable/onnx_export.html. For exporting control flow: "
    "https://pytorch.org/tutorials/beginner/onnx/export_control_flow_model_to_onnx_tutorial.html")


def warn_legacy_export(stacklevel: int = 2) -> None:
    """The DeprecationWarning torch.onnx gives for `export(dynamo=False)`."""
    warnings.warn(LEGACY_EXPORT_WARNING, DeprecationWarning, stacklevel=stacklevel + 1)



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
        export_modules_as_functions: True or a set of module classes (opset >= 15): each
            module call becomes a call of an ONNX local function (translate/module_functions.py).
        autograd_inlining: False keeps an autograd.Function without `symbolic` as one
            `prim::PythonOp` node (an unsupported op under OperatorExportTypes.ONNX).
    """
    target_opset = opset_version or DEFAULT_TORCHSCRIPT_OPSET
    if export_modules_as_functions and target_opset < 15:
        raise ValueError("export_modules_as_functions needs opset_version >= 15 (ONNX local "
                         f"functions need IR version 8), got {target_opset}")
    if export_modules_as_functions and not isinstance(model, torch.nn.Module):
        raise TypeError("export_modules_as_functions needs an nn.Module")
    run = ExportRun(type(model).__name__, DiagnosticContext())
    try:
        with run.stage("capture"):
            captured = capture_torchscript(model, args, kwargs, training=training)
        run.capture_strategy = captured.strategy
        dim_names = _axes_names(dynamic_axes)
        if dim_names:
            names = list(input_names or [])
            names += captured.input_names[len(names):]
            find_dynamic_dims(captured, {i: set(dim_names[n]) for i, n in enumerate(names)
                                         if n in dim_names})
        if verbose:
            print(captured.graph)
        with run.stage("translate"):
            onnx_model = _translate(
                captured, registry, target_opset, input_names=input_names,
                output_names=output_names, operator_export_type=operator_export_type,
                dim_names=dim_names, custom_opsets=custom_opsets,
                autograd_inlining=autograd_inlining)
        with run.stage("passes"):
            onnx_model = _run_passes(onnx_model, max(target_opset, LIBRARY_OPSET), target_opset,
                                     fold=do_constant_folding and training != TrainingMode.TRAINING)
            if export_modules_as_functions:
                modules_as_functions(onnx_model, model, export_modules_as_functions)
        program = run.program(ONNXProgram(onnx_model, None))
        if verbose:
            print(onnx_model)
        if keep_initializers_as_inputs is None:
            keep_initializers_as_inputs = operator_export_type != OperatorExportTypes.ONNX
        if f is not None:
            with run.stage("save"):
                # Without the weights, the model takes them as inputs (in state_dict order).
                program.save(f, include_initializers=export_params,
                             keep_initializers_as_inputs=bool(keep_initializers_as_inputs)
                             or not export_params, external_data=external_data)
    except Exception as e:
        run.failed(e)
        raise
    run.succeeded()
    logger.info("export(dynamo=False) of %s: %s", run.name, run.timings)
    return program


def translate_captured(
    captured: Any,
    registry: Registry,
    *,
    target_opset: int,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    operator_export_type: OperatorExportTypes = OperatorExportTypes.ONNX,
    dim_names: dict[str, dict[int, str]] | None = None,
    custom_opsets: Mapping[str, int] | None = None,
    autograd_inlining: bool = True,
    fold: bool = True,
) -> Any:
    """A captured TorchScript graph -> an onnx_ir Model at `target_opset` (passes run)."""
    onnx_model = _translate(
        captured, registry, target_opset, input_names=input_names, output_names=output_names,
        operator_export_type=operator_export_type, dim_names=dim_names,
        custom_opsets=custom_opsets, autograd_inlining=autograd_inlining)
    return _run_passes(onnx_model, max(target_opset, LIBRARY_OPSET), target_opset, fold=fold)


def _translate(captured: Any, registry: Registry, target_opset: int, *,
               input_names: Sequence[str] | None, output_names: Sequence[str] | None,
               operator_export_type: OperatorExportTypes,
               dim_names: dict[str, dict[int, str]] | None,
               custom_opsets: Mapping[str, int] | None, autograd_inlining: bool) -> Any:
    """translate_script at the library's opset (at least), symbolic functions at `target_opset`."""
    onnx_model = translate_script(
        captured, registry, max(target_opset, LIBRARY_OPSET), input_names=input_names,
        output_names=output_names, operator_export_type=operator_export_type,
        dim_names=dim_names, custom_opsets=dict(custom_opsets or {}),
        symbolic_opset=target_opset, autograd_inlining=autograd_inlining)
    logger.info("translated: %d nodes", len(onnx_model.graph))
    return onnx_model


def _run_passes(onnx_model: Any, opset: int, target_opset: int, *, fold: bool) -> Any:
    """Cleanup, optional folding, and conversion down to `target_opset`."""
    run_passes(onnx_model, cleanup_passes())
    if fold:
        run_passes(onnx_model)
    if target_opset < opset:
        logger.info("converting to opset %d", target_opset)
        onnx_model = convert_to_opset(onnx_model, target_opset)
    align_function_opsets(onnx_model)
    return onnx_model


def _axes_names(dynamic_axes: Mapping[str, Any] | None) -> dict[str, dict[int, str]]:
    """{name: {axis: dim name}}; list values get the automatic `<name>_dynamic_axes_<k>`."""
    names: dict[str, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if isinstance(axes, Mapping):
            names[name] = {int(a): str(n) for a, n in axes.items()}
        else:
            names[name] = {int(a): f"{name}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
    return names



def export_to_pretty_string(
    model: Any,
    args: Any,
    export_params: bool = True,
    verbose: bool = False,
    training: TrainingMode = TrainingMode.EVAL,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    operator_export_type: OperatorExportTypes = OperatorExportTypes.ONNX,
    export_type: Any = None,
    google_printer: bool = False,
    opset_version: int | None = None,
    keep_initializers_as_inputs: bool | None = None,
    custom_opsets: Mapping[str, int] | None = None,
    add_node_names: bool = True,
    do_constant_folding: bool = True,
    dynamic_axes: Mapping[str, Any] | None = None,
    *,
    registry: Registry | None = None,
) -> str:
    """Like export(dynamo=False), but returns a text form of the ONNX model.

    The compact form (onnx.printer) by default; `google_printer=True` gives the protobuf
    text form, where `add_node_names=False` leaves NodeProto.name empty. `export_type` is
    accepted and ignored, as in torch.onnx.
    """
    import onnx

    del export_type
    buf = io.BytesIO()
    with _exporting():
        export_torchscript(model, args, buf, registry=_as_registry(registry),
                           export_params=export_params, verbose=verbose, training=training,
                           input_names=input_names, output_names=output_names,
                           operator_export_type=operator_export_type,
                           opset_version=opset_version,
                           keep_initializers_as_inputs=keep_initializers_as_inputs,
                           custom_opsets=custom_opsets, do_constant_folding=do_constant_folding,
                           dynamic_axes=dynamic_axes)
    proto = onnx.load_from_string(buf.getvalue())
    if not google_printer:
        return onnx.printer.to_text(proto)
    if not add_node_names:
        for node in proto.graph.node:
            node.ClearField("name")
    return str(proto)


def select_model_mode_for_export(model: Any, mode: TrainingMode) -> Any:
    """A context manager setting `model`'s training flag per `mode` for the with-block."""
    if not isinstance(mode, TrainingMode):
        raise TypeError(f"mode must be a TrainingMode, got {type(mode).__name__}")
    return training_mode(model, mode)


def unconvertible_ops(model: Any, args: Any, training: TrainingMode = TrainingMode.EVAL,
                      opset_version: int | None = None, *, registry: Registry | None = None
                      ) -> tuple[Any, list[str]]:
    """(the TorchScript graph, the kind of every node no translation handles, in order)."""
    target_opset = opset_version or DEFAULT_TORCHSCRIPT_OPSET
    with _exporting():
        captured = capture_torchscript(model, args, None, training=training)
    translator = TorchScriptTranslator(captured, _as_registry(registry),
                                       max(target_opset, LIBRARY_OPSET),
                                       symbolic_opset=target_opset)
    return captured.graph, translator.unconvertible()


_LOG_HANDLER: logging.Handler | None = None


def enable_log() -> None:
    """Log export progress (capture, translation, opset conversion) to stderr."""
    global _LOG_HANDLER
    root = logging.getLogger("onnxport")
    root.disabled = False
    if _LOG_HANDLER is None:
        _LOG_HANDLER = logging.StreamHandler()
        _LOG_HANDLER.setFormatter(logging.Formatter("onnxport: %(message)s"))
        root.addHandler(_LOG_HANDLER)
    root.setLevel(logging.INFO)


def disable_log() -> None:
    """Stop logging export progress."""
    global _LOG_HANDLER
    root = logging.getLogger("onnxport")
    if _LOG_HANDLER is not None:
        root.removeHandler(_LOG_HANDLER)
        _LOG_HANDLER = None
    root.setLevel(logging.WARNING)
