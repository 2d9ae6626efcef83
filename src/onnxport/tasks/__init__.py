"""Export transformers checkpoints by task into folders that runtimes load (optimum's layout).

    >>> from onnxport.tasks import export_checkpoint
    >>> result = export_checkpoint("tiny-llama/", "tiny-llama-onnx/")   # doctest: +SKIP
    >>> result.task, result.files                                        # doctest: +SKIP
    ('text-generation-with-past', ['config.json', 'genai_config.json', ..., 'model.onnx'])

See docs/cli.md for the tasks, the files and names each writes, and the architectures tested.
"""

from __future__ import annotations

from onnxport.tasks.errors import (
    CheckpointError,
    OutputDirError,
    TaskError,
    TaskExportError,
    UnknownTaskError,
    UnsupportedDtypeError,
    UnsupportedTaskError,
    ValidationError,
    WeightsError,
)
from onnxport.tasks.export import ExportResult, export_checkpoint
from onnxport.tasks.registry import SUPPORTED, TASKS, detect_task, resolve_task, tasks_for

__all__ = [
    "SUPPORTED",
    "TASKS",
    "CheckpointError",
    "ExportResult",
    "OutputDirError",
    "TaskError",
    "TaskExportError",
    "UnknownTaskError",
    "UnsupportedDtypeError",
    "UnsupportedTaskError",
    "ValidationError",
    "WeightsError",
    "detect_task",
    "export_checkpoint",
    "resolve_task",
    "tasks_for",
]
