"""Export transformers checkpoints by task into folders that runtimes load (optimum's layout).

    >>> from onnxport.tasks import export_checkpoint
    >>> result = export_checkpoint("tiny-llama/", "tiny-llama-onnx/")   # doctest: +SKIP
    >>> result.task, result.files                                        # doctest: +SKIP
    ('text-generation-with-past', ['config.json', 'genai_config.json', ..., 'model.onnx'])

See docs/cli.md for the tasks, the files and names each writes, and the architectures tested.
"""

from __future__ import annotations

from typing import Any

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
from onnxport.tasks.registry import SUPPORTED, TASKS, detect_task, resolve_task, tasks_for


def __getattr__(name: str) -> Any:
    # export_checkpoint imports torch: only when used, so that `onnxport --help` does not.
    if name in ("ExportResult", "export_checkpoint"):
        from onnxport.tasks import export

        value = getattr(export, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'onnxport.tasks' has no attribute {name!r}")


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
