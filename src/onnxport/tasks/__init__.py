"""Export transformers checkpoints by task into folders that runtimes load (optimum's layout).

    >>> from onnxport.tasks import export_checkpoint
    >>> result = export_checkpoint("tiny-llama/", "tiny-llama-onnx/")   # doctest: +SKIP
    >>> result.task, result.files                                        # doctest: +SKIP
    ('text-generation-with-past', ['config.json', 'genai_config.json', ..., 'model.onnx'])

See docs/cli.md for the tasks, the files and names each writes, and the architectures tested.
"""

from __future__ import annotations

from typing import Any

from onnxport.tasks import errors as _errors
from onnxport.tasks.errors import *  # noqa: F403  (the error classes, errors.__all__)
from onnxport.tasks.registry import SUPPORTED, TASKS, detect_task, resolve_task, tasks_for


# export_checkpoint imports torch: only when used, so that `onnxport --help` does not.
_LAZY = ("ExportResult", "export_checkpoint")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from onnxport.tasks import export

        value = getattr(export, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'onnxport.tasks' has no attribute {name!r}")


__all__ = [
    *_errors.__all__,
    *_LAZY,
    "SUPPORTED",
    "TASKS",
    "detect_task",
    "resolve_task",
    "tasks_for",
]
