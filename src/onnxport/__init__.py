"""onnxport: export PyTorch models to ONNX, the torch.onnx API written anew.

The public surface: `export`, `ONNXProgram`, `ONNXRuntimeOptions`, `register`, the
errors, and `onnxport.translate` for people writing translations; for the TorchScript
flavour (`export(dynamo=False)`) also torch.onnx's `register_custom_op_symbolic`,
`export_to_pretty_string`, ..., and the `utils`, `verification`, `symbolic_helper` modules.
"""

from __future__ import annotations

__version__ = "0.1.0"

from onnxport import errors
from onnxport._api import dynamo_export, export, is_in_onnx_export
from onnxport._jit_scalar_type import JitScalarType
from onnxport._torchscript_api import (
    disable_log,
    enable_log,
    export_to_pretty_string,
    select_model_mode_for_export,
)
from onnxport.capture.torchscript import OperatorExportTypes, TrainingMode
from onnxport.errors import (
    CaptureError,
    CheckerError,
    ForwardError,
    OnnxExporterError,
    PassError,
    TranslationError,
    UnsupportedOperatorError,
    UnsupportedOutputError,
    VerificationError,
)
from onnxport.exportable import ExportableModule
from onnxport.fake import ONNXFakeContext, enable_fake_mode
from onnxport.input_observer import InputObserver
from onnxport.options import DiagnosticOptions, ExportOptions
from onnxport.program import ONNXProgram, ONNXRuntimeOptions
from onnxport.registry import OnnxRegistry
from onnxport.translate import register
from onnxport.translate.symbolic import register_custom_op_symbolic, unregister_custom_op_symbolic

from onnxport import symbolic_helper, utils, verification  # noqa: E402  (public submodules)

__all__ = [
    "export",
    "dynamo_export",
    "ExportOptions",
    "DiagnosticOptions",
    "enable_fake_mode",
    "ONNXFakeContext",
    "is_in_onnx_export",
    "export_to_pretty_string",
    "register_custom_op_symbolic",
    "unregister_custom_op_symbolic",
    "select_model_mode_for_export",
    "enable_log",
    "disable_log",
    "JitScalarType",
    "utils",
    "verification",
    "symbolic_helper",
    "TrainingMode",
    "OperatorExportTypes",
    "ONNXProgram",
    "ExportableModule",
    "ONNXRuntimeOptions",
    "InputObserver",
    "OnnxRegistry",
    "register",
    "errors",
    "OnnxExporterError",
    "CaptureError",
    "ForwardError",
    "UnsupportedOutputError",
    "CheckerError",
    "PassError",
    "TranslationError",
    "UnsupportedOperatorError",
    "VerificationError",
]
