"""ExportOptions and DiagnosticOptions: the documented options of `dynamo_export`."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnxport.fake import ONNXFakeContext
    from onnxport.registry import OnnxRegistry


@dataclasses.dataclass
class DiagnosticOptions:
    """Options for the diagnostics an export emits.

    Attributes:
        verbosity_level: The least severe diagnostic to record, as a `logging` level (20: INFO).
        warnings_as_errors: Turn warning diagnostics into an error of the export.
    """

    verbosity_level: int = logging.INFO
    warnings_as_errors: bool = False


class ExportOptions:
    """Options to influence the TorchDynamo ONNX exporter.

    Attributes:
        dynamic_shapes: True: every input dimension is dynamic; False or None: static shapes
            (None picks the most compatible setting, which is static).
        fake_context: The context of `enable_fake_mode()` the model was created in.
        onnx_registry: The OnnxRegistry to translate with.
        diagnostic_options: The DiagnosticOptions.
    """

    def __init__(self, *, dynamic_shapes: bool | None = None,
                 fake_context: ONNXFakeContext | None = None,
                 onnx_registry: OnnxRegistry | None = None,
                 diagnostic_options: DiagnosticOptions | None = None) -> None:
        self.dynamic_shapes = dynamic_shapes
        self.fake_context = fake_context
        self.onnx_registry = onnx_registry
        self.diagnostic_options = diagnostic_options or DiagnosticOptions()

    def __repr__(self) -> str:
        fields: dict[str, Any] = {
            "dynamic_shapes": self.dynamic_shapes, "fake_context": self.fake_context,
            "onnx_registry": self.onnx_registry, "diagnostic_options": self.diagnostic_options}
        return f"ExportOptions({', '.join(f'{k}={v!r}' for k, v in fields.items())})"
