"""Verification: compare ONNX Runtime with eager PyTorch, and the export report."""

from __future__ import annotations

from onnxport.verify.compare import OutputDiff, compare_outputs, verify_program

__all__ = ["OutputDiff", "compare_outputs", "verify_program"]
