"""torch.onnx.utils names of the TorchScript flavour (a thin compatibility module)."""

from __future__ import annotations

from onnxport._api import is_in_onnx_export
from onnxport._torchscript_api import (
    disable_log,
    enable_log,
    export_to_pretty_string,
    select_model_mode_for_export,
    unconvertible_ops,
)
from onnxport.translate.symbolic import register_custom_op_symbolic, unregister_custom_op_symbolic

__all__ = [
    "export_to_pretty_string",
    "register_custom_op_symbolic",
    "unregister_custom_op_symbolic",
    "select_model_mode_for_export",
    "is_in_onnx_export",
    "unconvertible_ops",
    "enable_log",
    "disable_log",
]
