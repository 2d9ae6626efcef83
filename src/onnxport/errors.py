"""Errors raised by onnxport on purpose. Every one derives from OnnxExporterError."""

from __future__ import annotations

import dataclasses

__all__ = [
    "OnnxExporterError",
    "CaptureError",
    "ForwardError",
    "UnsupportedOutputError",
    "UnsupportedOperatorError",
    "TranslationError",
    "CheckerError",
    "PassError",
    "QuantizationError",
    "VerificationError",
]


class OnnxExporterError(RuntimeError):
    """Base class of every error the exporter raises on purpose."""


@dataclasses.dataclass(frozen=True, slots=True)
class CaptureAttempt:
    """One capture strategy that was tried, and how it ended."""

    strategy: str
    error: BaseException | None
    seconds: float

    @property
    def succeeded(self) -> bool:
        return self.error is None


class CaptureError(OnnxExporterError):
    """Every capture strategy failed; `attempts` holds each one and its error."""

    def __init__(self, message: str, attempts: list[CaptureAttempt] | None = None) -> None:
        super().__init__(message)
        self.attempts = list(attempts or [])


class ForwardError(CaptureError):
    """The model's own code raised while torch.export ran it (a shape mismatch, an exception
    the model raises): the model would fail the same way in eager mode.

    The first line of the message is the model's message and its source line, the second the
    inputs given; `__cause__` is the original exception, `location` the `file:line` of the
    frame in the user's code (None if none was found), `inputs` the inputs' description.
    """

    def __init__(self, message: str, attempts: list[CaptureAttempt] | None = None, *,
                 location: str | None = None, inputs: str = "") -> None:
        super().__init__(message, attempts)
        self.location = location
        self.inputs = inputs


class UnsupportedOutputError(CaptureError):
    """The model returns something that is not a tensor, a Python number, None, or a
    tuple/list/dict of those (a string, an arbitrary object). `outputs` holds (path, type)
    pairs such as ("output[1]['name']", "str")."""

    def __init__(self, message: str, outputs: list[tuple[str, str]] | None = None,
                 attempts: list[CaptureAttempt] | None = None) -> None:
        super().__init__(message, attempts)
        self.outputs = list(outputs or [])


@dataclasses.dataclass(frozen=True, slots=True)
class MissingOp:
    """An operator without a translation, and where the model first uses it."""

    target: str
    node: str
    module_path: str
    source: str


class UnsupportedOperatorError(OnnxExporterError):
    """Operators without a translation at the target opset. Lists all of them at once."""

    def __init__(self, message: str, missing: list[MissingOp] | None = None) -> None:
        super().__init__(message)
        self.missing = list(missing or [])


class TranslationError(OnnxExporterError):
    """A translation function raised, or stated a fact the model cannot meet.

    Inside a translation, raise it with the fact only; the translator re-raises it with the
    node, its target, module path and source line.
    """

    def __init__(
        self,
        message: str,
        *,
        node: str | None = None,
        target: str | None = None,
        module_path: str | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__(message)
        self.node = node
        self.target = target
        self.module_path = module_path
        self.source = source


class CheckerError(OnnxExporterError):
    """The ONNX checker rejected the exported model."""


class PassError(OnnxExporterError):
    """A graph pass failed; names the pass."""


class QuantizationError(OnnxExporterError):
    """A weight quantization (`onnxport.quantize`) was asked for what the model or ONNX cannot
    express: bits other than 4 or 8, a block size that is no power of two >= 16, 4-bit or
    blocked weights below opset 21."""


class VerificationError(OnnxExporterError):
    """ONNX Runtime's outputs differ from eager PyTorch beyond tolerance."""

    def __init__(self, message: str, diffs: list[object] | None = None) -> None:
        super().__init__(message)
        self.diffs = list(diffs or [])
