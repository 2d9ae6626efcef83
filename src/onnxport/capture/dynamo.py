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
from onnxport.capture.decompose import decompose_node, decomposition_table
from onnxport.capture.inplace import effective_target
from onnxport.errors import CaptureAttempt, CaptureError

logger = logging.getLogger(__name__)

STRATEGIES = ("non-strict", "strict")


def _function_module(fn: Callable[..., Any]) -> torch.nn.Module:
    """An nn.Module whose forward has `fn`'s signature (so inputs keep their names)."""

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    try:
        sig = inspect.signature(fn)
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        forward.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[self_param, *sig.parameters.values()])
    except (TypeError, ValueError):
        pass
    name = getattr(fn, "__name__", "function")
    return type(f"{name}_module", (torch.nn.Module,), {"forward": forward})()


def _as_module(model: Any) -> torch.nn.Module:
    if isinstance(model, torch.nn.Module):
        return model
    if callable(model):
        return _function_module(model)
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
        # Never edit a program the caller handed us; run_decompositions returns a new one.
        _decompose_untranslated(captured, has_translation,
                                in_place=not isinstance(model, torch.export.ExportedProgram))
    return captured


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _decompose_untranslated(captured: Captured, has_translation: Callable[[Any], bool], *,
                            in_place: bool = True) -> None:
    """Decompose only the ops without a translation; functionalize unsafe in-place ops.

    Untranslated nodes are decomposed one by one in place (`decompose.py`); the whole-program
    `run_decompositions` is the fallback, for in-place ops on inputs or views and for nodes
    whose decomposition cannot be traced alone.
    """
    program = captured.exported_program
    t0 = time.perf_counter()
    table: dict[Any, Any] | None = None  # built on first need: most programs never need it
    for _ in range(8):  # a decomposition may produce ops that need decomposing in turn
        fallback: dict[Any, Any] = {}
        has_mutation = False
        changed = False
        for node in list(program.graph.nodes):
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            target = effective_target(node)
            if target is node.target and node.target._schema.is_mutable:
                has_mutation = True
            if has_translation(target):
                continue
            if table is None:
                table = decomposition_table()
            if target not in table:
                continue
            if in_place and target is node.target \
                    and decompose_node(program.graph, node, table[target]):
                changed = True
                captured.decomposed.append(str(target))
            else:
                fallback[target] = table[target]
        if fallback or has_mutation:
            program = program.run_decompositions(fallback)
            captured.retraced = True
            captured.decomposed.extend(str(op) for op in fallback)
        if not changed and not fallback:
            break
    if captured.decomposed:
        program.graph_module.recompile()
        captured.decomposed = sorted(set(captured.decomposed))
    captured.exported_program = program
    captured.decompose_seconds = time.perf_counter() - t0
