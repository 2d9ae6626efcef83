"""ExportOptions and DiagnosticOptions: the documented options of `dynamo_export`;
OnnxRuntimeTarget: the options of `export(..., target="onnxruntime")`."""

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


class OnnxRuntimeTarget(str):
    """`target="onnxruntime"` with options: pass it as `export(..., target=OnnxRuntimeTarget(...))`
    (it is the string "onnxruntime" wherever a target is read).

    Attributes:
        int4_accuracy_level: MatMulNBits' `accuracy_level` for 4-bit weights. 4 (the default,
            as ONNX Runtime GenAI's builder for CPU int4): ORT quantizes the activations to
            int8 per block of K and multiplies in integers, fast but not exact (error bounded
            in docs/quantization.md). 0: activations stay float32, the weights are dequantized
            exactly (matches eager within float32 summation order). 1-3: fp32/fp16/bf16.
        int4_block_size: The block size along K of 4-bit weights onnxport quantizes or
            re-blocks (per-channel and per-tensor weights; weights quantized in PyTorch keep
            their groups): a power of two >= 16, 32 by default (the builder's). It is also the
            block of K over which accuracy level 4 quantizes the activations.
        max_positions: The longest sequence the decoder will see (its context length). Given,
            GroupQueryAttention's cos/sin caches are constant tables of that many rows, computed
            at export as the GenAI builder's are, instead of per decode step; ONNX Runtime then
            refuses longer sequences. None (the default): the caches are computed per step, any
            length runs. The checkpoint CLI sets it to the config's `max_position_embeddings`.
    """

    int4_accuracy_level: int
    int4_block_size: int
    max_positions: int | None

    def __new__(cls, *, int4_accuracy_level: int = 4, int4_block_size: int = 32,
                max_positions: int | None = None) -> OnnxRuntimeTarget:
        if int4_accuracy_level not in (0, 1, 2, 3, 4):
            raise ValueError(f"OnnxRuntimeTarget: int4_accuracy_level must be 0, 1, 2, 3 or 4, "
                             f"got {int4_accuracy_level!r}")
        if not isinstance(int4_block_size, int) or int4_block_size < 16 \
                or int4_block_size & (int4_block_size - 1):
            raise ValueError(f"OnnxRuntimeTarget: int4_block_size must be a power of two >= 16, "
                             f"got {int4_block_size!r}")
        if max_positions is not None and (not isinstance(max_positions, int) or max_positions < 1):
            raise ValueError(f"OnnxRuntimeTarget: max_positions must be a positive int or None, "
                             f"got {max_positions!r}")
        self = super().__new__(cls, "onnxruntime")
        self.int4_accuracy_level = int4_accuracy_level
        self.int4_block_size = int4_block_size
        self.max_positions = max_positions
        return self

    def __repr__(self) -> str:
        return (f"OnnxRuntimeTarget(int4_accuracy_level={self.int4_accuracy_level}, "
                f"int4_block_size={self.int4_block_size}, max_positions={self.max_positions})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_onnxruntime_target,
                (self.int4_accuracy_level, self.int4_block_size, self.max_positions))


def _onnxruntime_target(level: int, block: int, positions: int | None = None
                        ) -> OnnxRuntimeTarget:
    return OnnxRuntimeTarget(int4_accuracy_level=level, int4_block_size=block,
                             max_positions=positions)
