"""Errors of checkpoint export. Each derives from `onnxport.OnnxExporterError`."""

from __future__ import annotations

from onnxport.errors import OnnxExporterError

__all__ = [
    "CheckpointError",
    "OutputDirError",
    "TaskError",
    "TaskExportError",
    "UnknownTaskError",
    "UnsupportedDtypeError",
    "UnsupportedTaskError",
    "ValidationError",
    "WeightsError",
]


class TaskError(OnnxExporterError):
    """Base class of the errors `onnxport.tasks` raises on purpose."""


class CheckpointError(TaskError):
    """The checkpoint folder is unusable: no config.json, an unreadable config, remote code."""


class WeightsError(CheckpointError):
    """A weight file is missing, truncated or not a safetensors / weights-only torch file."""


class UnknownTaskError(TaskError):
    """The task name is none of the tasks onnxport knows (optimum's names)."""


class UnsupportedTaskError(TaskError):
    """The task exists, but not for this architecture (or it cannot be detected)."""


class OutputDirError(TaskError):
    """OUTPUT_DIR exists and is not empty (and --overwrite was not given), or is a file."""


class TaskExportError(TaskError):
    """Capturing or translating one of the task's graphs failed; the cause is chained."""


class UnsupportedDtypeError(TaskError):
    """ONNX Runtime's CPU provider has no kernel for an op of the graph in its dtype
    (bfloat16 MatMul, for one), so the export cannot be validated; `--no-validate` writes it
    unvalidated."""


class ValidationError(TaskError):
    """ONNX Runtime's outputs differ from eager PyTorch's beyond the tolerance.

    The exported files are kept for inspection: `output_dir` holds them and `table` the
    comparison that failed.
    """

    def __init__(self, message: str, output_dir: str = "", table: str = "") -> None:
        super().__init__(message)
        self.output_dir = output_dir
        self.table = table
