"""torch.export strategies: non-strict first, then strict; each attempt is recorded.

After capture, only the operators the op library cannot translate are decomposed, and only
when there are some (or when the graph still holds in-place ops to functionalize): a
re-trace of the whole program costs as much as the capture itself.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from onnxport.capture.captured import Captured
from onnxport.errors import CaptureAttempt, CaptureError

logger = logging.getLogger(__name__)

STRATEGIES = ("non-strict", "strict")


class _FunctionModule(torch.nn.Module):
    """Wraps a plain callable so torch.export can capture it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        try:
            self.forward.__func__.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            pass

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _as_module(model: Any) -> torch.nn.Module:
    if isinstance(model, torch.nn.Module):
        return model
    if callable(model):
        return _FunctionModule(model)
    raise CaptureError(f"cannot export an object of type {type(model).__name__}: "
                       "pass an nn.Module, a function or a torch.export.ExportedProgram")


def capture(
    model: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    *,
    dynamic_shapes: Any = None,
    has_translation: Callable[[Any], bool] | None = None,
    strategies: Sequence[str] = STRATEGIES,
) -> Captured:
    """Capture `model(*args, **kwargs)` with torch.export, then decompose what must be.

    Raises:
        CaptureError: every strategy failed; the message lists each one and why.
    """
    attempts: list[CaptureAttempt] = []
    start = time.perf_counter()
    if isinstance(model, torch.export.ExportedProgram):
        program = model
        strategy = "exported-program"
        attempts.append(CaptureAttempt(strategy, None, 0.0))
    else:
        module = _as_module(model)
        program = None
        strategy = ""
        for name in strategies:
            t0 = time.perf_counter()
            try:
                program = torch.export.export(
                    module, tuple(args), kwargs=kwargs or None, dynamic_shapes=dynamic_shapes,
                    strict=(name == "strict"),
                )
            except Exception as e:  # noqa: BLE001  (every failure is recorded and reported)
                attempts.append(CaptureAttempt(name, e, time.perf_counter() - t0))
                logger.info("capture strategy %s failed: %s", name, e)
                continue
            attempts.append(CaptureAttempt(name, None, time.perf_counter() - t0))
            strategy = name
            break
        if program is None:
            lines = "\n".join(
                f"  {a.strategy}: {type(a.error).__name__}: {_first_line(a.error)}" for a in attempts
            )
            raise CaptureError(
                f"torch.export could not capture the model; tried {len(attempts)} strategies:\n"
                f"{lines}\n  fix: make the failing code traceable (see the first error above)",
                attempts,
            ) from attempts[0].error
    seconds = time.perf_counter() - start
    captured = Captured(program, strategy, attempts, seconds=seconds)
    if has_translation is not None:
        _decompose_untranslated(captured, has_translation)
    return captured


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _decompose_untranslated(captured: Captured, has_translation: Callable[[Any], bool]) -> None:
    """Decompose only the ops without a translation; functionalize in-place ops if any."""
    table_all = None
    for _ in range(4):
        program = captured.exported_program
        missing: set[torch._ops.OpOverload] = set()
        has_mutation = False
        for node in program.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if node.target._schema.is_mutable:
                has_mutation = True
            if not has_translation(node.target):
                missing.add(node.target)
        if table_all is None and missing:
            table_all = torch.export.default_decompositions()
        table = {op: table_all[op] for op in missing if table_all is not None and op in table_all}
        if not table and not has_mutation:
            return
        t0 = time.perf_counter()
        captured.exported_program = program.run_decompositions(table)
        captured.decompose_seconds += time.perf_counter() - t0
        captured.decomposed.extend(sorted(str(op) for op in table))
        if not table:
            return
