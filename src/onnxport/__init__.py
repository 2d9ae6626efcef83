"""onnxport: export PyTorch models to ONNX, the torch.onnx API written anew.

The public surface: `export`, `ONNXProgram`, `ONNXRuntimeOptions`, `register`, the
errors, and `onnxport.translate` for people writing translations.
"""

from __future__ import annotations

__version__ = "0.1.0"

from onnxport import errors
from onnxport._api import dynamo_export, export, is_in_onnx_export
from onnxport.capture.torchscript import OperatorExportTypes, TrainingMode
from onnxport.errors import (
    CaptureError,
    CheckerError,
    OnnxExporterError,
    PassError,
    TranslationError,
    UnsupportedOperatorError,
    VerificationError,
)
from onnxport.fake import ONNXFakeContext, enable_fake_mode
from onnxport.options import DiagnosticOptions, ExportOptions
from onnxport.program import ONNXProgram, ONNXRuntimeOptions
from onnxport.registry import OnnxRegistry
from onnxport.translate import register

__all__ = [
    "export",
    "dynamo_export",
    "ExportOptions",
    "DiagnosticOptions",
    "enable_fake_mode",
    "ONNXFakeContext",
    "is_in_onnx_export",
    "TrainingMode",
    "OperatorExportTypes",
    "ONNXProgram",
    "ONNXRuntimeOptions",
    "OnnxRegistry",
    "register",
    "errors",
    "OnnxExporterError",
    "CaptureError",
    "CheckerError",
    "PassError",
    "TranslationError",
    "UnsupportedOperatorError",
    "VerificationError",
]
