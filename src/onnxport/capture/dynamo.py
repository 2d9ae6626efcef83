"""torch.export strategies: non-strict first, then strict; each attempt is recorded.

After capture, only the operators the op library cannot translate are decomposed, and only
when there are some (or when the graph still holds in-place ops to functionalize): a
re-trace of the whole program costs as much as the capture itself.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from onnxport.capture.captured import Captured
from onnxport.capture.decompose import decompose_node, decomposition_for
from onnxport.capture.inplace import effective_target
from onnxport.capture.kernels import capture_kernels
from onnxport.capture.rnn import loop_shaped_rnns
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
    size_oblivious: bool = False,
) -> Captured:
    """Capture `model(*args, **kwargs)` with torch.export, then decompose what must be.

    When torch.export rejects `dynamic_shapes` and suggests fixes (a narrower range, two dims
    that must be equal, a dim that must be static), the fixes are applied and the capture is
    retried once; `Captured.refined_dynamic_shapes` then holds the spec that worked.
    `size_oblivious` captures with sizes 0 and 1 treated like any other (for examples whose
    dynamic dims have size 1), as torch.onnx does.

    Raises:
        CaptureError: every strategy failed; the message lists each one and why.
    """
    attempts: list[CaptureAttempt] = []
    start = time.perf_counter()
    refined = None
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
                program, refined = _export_refining(module, args, kwargs, dynamic_shapes,
                                                    strict=(name == "strict"),
                                                    size_oblivious=size_oblivious)
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
            explained = explain_constraint_violation(attempts[0].error, dynamic_shapes)
            if explained:
                raise CaptureError(
                    f"{explained}\ntorch.export tried {len(attempts)} strategies:\n{lines}",
                    attempts,
                ) from attempts[0].error
            raise CaptureError(
                f"torch.export could not capture the model; tried {len(attempts)} strategies:\n"
                f"{lines}\n  fix: make the failing code traceable (see the first error above)",
                attempts,
            ) from attempts[0].error
    seconds = time.perf_counter() - start
    captured = Captured(program, strategy, attempts, seconds=seconds)
    captured.refined_dynamic_shapes = refined
    if has_translation is not None:
        # Never edit a program the caller handed us; run_decompositions returns a new one.
        _decompose_untranslated(captured, has_translation,
                                in_place=not isinstance(model, torch.export.ExportedProgram))
    return captured


def _export_refining(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any] | None,
                     dynamic_shapes: Any, *, strict: bool, size_oblivious: bool
                     ) -> tuple[torch.export.ExportedProgram, Any]:
    """torch.export.export; on a constraint violation with suggested fixes, apply them and
    retry once. Returns the program and the refined spec (None if the first try worked)."""
    def run(spec: Any) -> torch.export.ExportedProgram:
        # Static shapes need no loop-shaped RNN kernels (the stock ones are cheaper).
        rnns = loop_shaped_rnns() if dynamic_shapes is not None else contextlib.nullcontext()
        oblivious = torch.fx.experimental._config.patch(backed_size_oblivious=True) \
            if size_oblivious else contextlib.nullcontext()
        with capture_kernels(), rnns, oblivious:
            return torch.export.export(module, tuple(args), kwargs=kwargs or None,
                                       dynamic_shapes=spec, strict=strict)

    try:
        return run(dynamic_shapes), None
    except torch._dynamo.exc.UserError as e:
        message = getattr(e, "msg", str(e))
        if dynamic_shapes is None or "Suggested fixes" not in message:
            raise
        try:
            refined = torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes(
                message, dynamic_shapes)
        except Exception:  # noqa: BLE001  (no usable fix: the original error stands)
            raise e from None
        try:
            return run(refined), refined
        except Exception:  # noqa: BLE001  (the refined spec failed too: report the first error)
            raise e from None


# torch.export's ConstraintViolationError lines (torch/fx/experimental/symbolic_shapes.py and
# torch/export/dynamic_shapes.py); a source looks like L['x'].size()[0] or
# L['kwargs']['input_ids'].size()[1].
_SOURCE = r"L(?:\[[^\]]+\])+\.size\(\)\[\d+\]"
_SPECIALIZED = re.compile(r"You marked (?P<dim>.+?) as dynamic but your code specialized it to be "
                          r"a constant \((?P<value>-?\d+)\)")
_SOLVED = re.compile(rf"solving the guards generated for (?P<dim>\S+) = (?P<src>{_SOURCE}) "
                     r"resulted in a specialized value of (?P<value>-?\d+)")
_GUARD = re.compile(rf"Not all values of (?P<dim>\S+) = (?P<src>{_SOURCE}) in the specified range"
                    r"(?: (?P<range>.+?))? satisfy the generated guard (?P<guard>.+?)\.?$")
_EQUAL = re.compile(rf"The values of (?P<a>\S+) = (?P<srca>{_SOURCE}) and (?P<b>\S+) = "
                    rf"(?P<srcb>{_SOURCE}) must always be equal")


def explain_constraint_violation(error: BaseException | None, dynamic_shapes: Any) -> str:
    """Say which input dimension torch.export specialized or constrained, and what to do.

    Returns "" when `error` is not a dynamic-shape constraint violation.
    """
    text = str(error or "")
    if "Constraints violated" not in text and "Specializations unexpectedly required" not in text:
        return ""
    where = _dim_locations(dynamic_shapes)

    def describe(dim: str, src: str | None = None) -> str:
        if src is None and re.fullmatch(_SOURCE, dim):
            src = dim
        place = _source_location(src) if src else where.get(dim)
        if place is None:
            return f"dimension {dim!r}"
        return place if dim == place or dim.startswith("L[") else f"{place} (Dim {dim!r})"

    def readable(guard: str) -> str:
        # Write the guard with the Dim names, not torch's source expressions.
        for src, dim in {m.group("src"): m.group("dim")
                         for m in re.finditer(rf"(?P<dim>\S+) = (?P<src>{_SOURCE})", text)}.items():
            guard = guard.replace(src, dim)
        return re.sub(r" and \S+ <= IntInfinity\(\)", "", guard)

    problems: list[str] = []
    seen: set[str] = set()
    # A dimension fixed to a constant needs no list of the guards that fixed it.
    specialized = {m.group("dim") for m in (_SPECIALIZED.search(x) or _SOLVED.search(x)
                                            for x in text.splitlines()) if m}
    for raw in text.splitlines():
        line = raw.strip().lstrip("- ")
        if m := _SPECIALIZED.search(line) or _SOLVED.search(line):
            dim, value = m.group("dim"), m.group("value")
            key = f"specialized {dim}"
            if key in seen:
                continue
            src = m.groupdict().get("src")
            problems.append(
                f"{describe(dim, src)} was marked dynamic, but the model's code only works when it "
                f"is {value} (it compares, reshapes or broadcasts it against that constant): make "
                f"that dimension static (Dim.STATIC, or leave it out of dynamic_shapes), or change "
                f"the code so it works for any size")
        elif m := _GUARD.search(line):
            dim = m.group("dim")
            key = f"guard {dim}"
            if key in seen or dim in specialized:
                continue
            given = f" {m.group('range')}" if m.group("range") else ""
            problems.append(
                f"{describe(dim, m.group('src'))}: the model only works when "
                f"{readable(m.group('guard'))}, but the range you gave{given} allows other values: "
                f"narrow the Dim's min/max, or express the dimension as a multiple of a Dim "
                f"(see torch's suggested fixes)")
        elif m := _EQUAL.search(line):
            key = f"equal {m.group('a')} {m.group('b')}"
            if key in seen:
                continue
            problems.append(
                f"{describe(m.group('a'), m.group('srca'))} must always equal "
                f"{describe(m.group('b'), m.group('srcb'))} (the model combines them, e.g. adds "
                f"or concatenates them): use the same Dim for both")
        else:
            continue
        seen.add(key)
    fixes: list[str] = []
    if "Suggested fixes:" in text:
        for raw in text.split("Suggested fixes:", 1)[1].splitlines()[1:]:
            if not raw.strip():
                break
            fixes.append(f"  {raw.strip()}")
    if not problems:
        problems.append(_first_line(error))
    message = "torch.export could not keep the input dimensions dynamic as dynamic_shapes asks:\n"
    message += "\n".join(f"  - {p}" for p in problems)
    if fixes:
        message += "\ntorch's suggested fixes:\n" + "\n".join(fixes)
    return message


def _source_location(src: str) -> str:
    """L['x'].size()[0] -> "input 'x' dim 0" (args/kwargs containers are skipped)."""
    keys = re.findall(r"\[(?:'([^']*)'|(\d+))\]", src)
    axis = keys[-1][1]
    path = [k or i for k, i in keys[:-1] if k not in ("args", "kwargs")]
    name = path[0] if path else "?"
    rest = "".join(f"[{p}]" for p in path[1:])
    return f"input {name!r}{rest} dim {axis}"


def _dim_locations(dynamic_shapes: Any) -> dict[str, str]:
    """{Dim name: "input 'x' dim 0"} from a dynamic_shapes spec (first use of each name)."""
    found: dict[str, str] = {}

    def walk(spec: Any, name: str) -> None:
        if isinstance(spec, dict) and all(isinstance(k, int) for k in spec):
            for axis, dim in spec.items():
                dim_name = getattr(dim, "__name__", None)
                if isinstance(dim_name, str):
                    where = f"positional input {name[1:]}" if name.startswith("#") \
                        else f"input {name!r}"
                    found.setdefault(dim_name, f"{where} dim {axis}")
        elif isinstance(spec, dict):
            for key, sub in spec.items():
                walk(sub, str(key) if name == "" else f"{name}[{key}]")
        elif isinstance(spec, (list, tuple)):
            if spec and all(not isinstance(s, (dict, list, tuple)) for s in spec) and name:
                walk(dict(enumerate(spec)), name)
            else:
                for i, sub in enumerate(spec):
                    walk(sub, f"#{i}" if name == "" else f"{name}[{i}]")

    walk(dynamic_shapes, "")
    return found


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
            if has_translation(target) or target._schema.is_mutable:
                # (in-place ops left here are functionalized by run_decompositions below)
                continue
            decomposition = decomposition_for(target)
            if decomposition is None:
                continue
            if in_place and target is node.target \
                    and decompose_node(program.graph, node, decomposition):
                changed = True
                captured.decomposed.append(str(target))
            else:
                fallback[target] = decomposition
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
