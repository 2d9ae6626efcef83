"""onnxport: export PyTorch models to ONNX, the torch.onnx API written anew.

The public surface: `export`, `ONNXProgram`, `ONNXRuntimeOptions`, `register`, the
errors, and `onnxport.translate` for people writing translations; for the TorchScript
flavour (`export(dynamo=False)`) also torch.onnx's `register_custom_op_symbolic`,
`export_to_pretty_string`, ..., and the `utils`, `verification`, `symbolic_helper` modules.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
import importlib.util
from typing import Any

from onnxport import errors
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

# Imported on first use (PEP 562), so that `import onnxport.errors` or the `onnxport` command's
# `--help` do not import torch: public name -> the module that defines it.
_LAZY = {
    "export": "onnxport._api",
    "dynamo_export": "onnxport._api",
    "is_in_onnx_export": "onnxport._api",
    "JitScalarType": "onnxport._jit_scalar_type",
    "disable_log": "onnxport._torchscript_api",
    "enable_log": "onnxport._torchscript_api",
    "export_to_pretty_string": "onnxport._torchscript_api",
    "select_model_mode_for_export": "onnxport._torchscript_api",
    "OperatorExportTypes": "onnxport.capture.torchscript",
    "TrainingMode": "onnxport.capture.torchscript",
    "ExportableModule": "onnxport.exportable",
    "ONNXFakeContext": "onnxport.fake",
    "enable_fake_mode": "onnxport.fake",
    "InputObserver": "onnxport.input_observer",
    "DiagnosticOptions": "onnxport.options",
    "ExportOptions": "onnxport.options",
    "OnnxRuntimeTarget": "onnxport.options",
    "ONNXProgram": "onnxport.program",
    "ONNXRuntimeOptions": "onnxport.program",
    "OnnxRegistry": "onnxport.registry",
    "register": "onnxport.translate",
    "register_custom_op_symbolic": "onnxport.translate.symbolic",
    "unregister_custom_op_symbolic": "onnxport.translate.symbolic",
    "symbolic_helper": "onnxport.symbolic_helper",  # public submodules
    "utils": "onnxport.utils",
    "verification": "onnxport.verification",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # A submodule (onnxport.translate, onnxport.program, ...) as `import onnxport` gave.
        if name.startswith("__") or importlib.util.find_spec(f"onnxport.{name}") is None:
            raise AttributeError(f"module 'onnxport' has no attribute {name!r}")
        module = f"onnxport.{name}"
    imported = importlib.import_module(module)
    value = imported if module == f"onnxport.{name}" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "export",
    "dynamo_export",
    "ExportOptions",
    "DiagnosticOptions",
    "OnnxRuntimeTarget",
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
