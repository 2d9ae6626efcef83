"""torch.export strategies: non-strict first, then strict; each attempt is recorded.

After capture, only the operators the op library cannot translate are decomposed, and only
when there are some (or when the graph still holds in-place ops to functionalize): a
re-trace of the whole program costs as much as the capture itself.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import operator
import os
import re
import sysconfig
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxport.capture.captured import Captured
from onnxport.capture.decompose import (
    custom_op_implementation,
    decompose_node,
    decomposition_for,
)
from onnxport.capture.explicit_scalars import make_scalars_explicit
from onnxport.capture.guards import (
    UnenforcedGuard,
    pinned_axes,
    narrowed_axes,
    pinning_guards,
    tolerant_constraint_solver,
    user_input_values,
    with_ranged_axes,
    with_static_axes,
)
from onnxport.capture.inplace import effective_target
from onnxport.capture.kernels import capture_kernels
from onnxport.capture.library_patches import library_patches
from onnxport.capture.rnn import loop_shaped_rnns
from onnxport.errors import CaptureAttempt, CaptureError, ForwardError, UnsupportedOutputError

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
    output_names: Sequence[str] | None = None,
) -> Captured:
    """Capture `model(*args, **kwargs)` with torch.export, then decompose what must be.

    When every strategy rejects `dynamic_shapes` and torch.export suggests fixes (a narrower
    range, two dims that must be equal, a dim that must be static), the fixes are applied and
    the strategies tried once more; `Captured.refined_dynamic_shapes` then holds the spec that
    worked.
    `size_oblivious` captures with sizes 0 and 1 treated like any other (for examples whose
    dynamic dims have size 1), as torch.onnx does.

    Raises:
        CaptureError: every strategy failed; the message lists each one and why.
        ForwardError: (a CaptureError) the model's own code raised; the message starts with
            its message, its source line and the inputs given.
        UnsupportedOutputError: (a CaptureError) the model returns a string or another
            object that is not a tensor, a number, None or a container of those.
        ValueError: `output_names` names more outputs than the model returns.
    """
    start = time.perf_counter()
    search = _Search(model, args, kwargs, dynamic_shapes, strategies, size_oblivious)
    if isinstance(model, torch.export.ExportedProgram):
        search.program, search.strategy = model, "exported-program"
        search.attempts.append(CaptureAttempt(search.strategy, None, 0.0))
    else:
        for step in _Search.STEPS:
            step(search)
        if search.program is None:
            search.fail()
    program, attempts, refined = search.program, search.attempts, search.refined
    outputs = _user_outputs(program)
    _check_outputs(program, outputs, attempts)
    if output_names is not None:
        from onnxport._validate import check_output_names

        check_output_names(output_names, sum(1 for o in outputs if o is not None))
    seconds = time.perf_counter() - start
    captured = Captured(program, search.strategy, attempts, seconds=seconds)
    captured.refined_dynamic_shapes = refined
    captured.refined_because = search.why if refined is not None else ""
    captured.size_names = search.size_names.get(id(program), {})
    if dynamic_shapes is not None and not isinstance(model, torch.export.ExportedProgram):
        names = [name for name, _ in user_input_values(program)]
        captured.narrowed = [
            f"input {names[index]!r} axis {axis}: {low}..{high}"
            + (f" (recorded at {where})" if where else "")
            for index, axis, low, high, where in narrowed_axes(
                program, search.module, tuple(args), kwargs,
                refined if refined is not None else dynamic_shapes)]
    if has_translation is not None:
        # Never edit a program the caller handed us; run_decompositions returns a new one.
        _decompose_untranslated(captured, has_translation,
                                in_place=not isinstance(model, torch.export.ExportedProgram),
                                size_oblivious=search.oblivious)
        if not isinstance(model, torch.export.ExportedProgram):
            make_scalars_explicit(captured.exported_program.graph_module)
    return captured


class _Search:
    """The capture attempts for one model: every strategy in turn (`attempt`), and the
    fallbacks `capture` walks when they fail (`STEPS`, in order).

    Every strategy with the user's spec first. When all of them reject it for a guard on a
    dynamic dim, the same spec with the guards kept as run-time asserts and sizes 0 and 1 (an
    example's, or one the model derives, such as `unflatten(0, (2, -1))` of a batch of 2)
    treated like any other: the dims stay dynamic, as torch.onnx keeps them (likewise when a
    size-oblivious capture fails on a check of dynamic sizes, such as a size-1 dim broadcast
    against a dynamic one: `size_one_deferred`). Only then the spec
    torch.export's suggested fixes give (which may make a dim static). A later strategy may
    accept a spec the first rejected by specialising the dims in question (strict capture
    can): then the deferred capture is tried too, and the one that keeps more input dims
    dynamic wins.
    """

    def __init__(self, model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None,
                 dynamic_shapes: Any, strategies: Sequence[str], oblivious: bool) -> None:
        self.model, self.args, self.kwargs = model, args, kwargs
        self.module = None if isinstance(model, torch.export.ExportedProgram) \
            else _as_module(model)
        self.dynamic_shapes, self.strategies = dynamic_shapes, strategies
        self.attempts: list[CaptureAttempt] = []
        self.size_names: dict[int, dict[str, str]] = {}  # id(program) -> library patches' names
        self.program: Any = None
        self.strategy = ""
        self.oblivious = oblivious  # whether `program` was captured size-oblivious
        self.refined: Any = None  # the spec that worked, when not the user's
        self.why = ""  # why the spec was changed
        self.rejected: BaseException | None = None  # the error that rejected the user's spec

    # -- the steps -------------------------------------------------------------------------
    def as_given(self) -> None:
        """The user's spec, then (for a guard on a dynamic dim) with guards deferred."""
        self.program, self.strategy, self.oblivious = self.run(self.oblivious, False)

    def sizes_as_sizes(self) -> None:
        """A size-oblivious capture squeezed wrongly: capture with sizes 0 and 1 as sizes."""
        if self.program is None and any(isinstance(a.error, CaptureError)
                                        for a in self.attempts):
            self.program, self.strategy, self.oblivious = self.run(False, True)

    def refined_spec(self) -> None:
        """torch.export's suggested fixes for the error that rejected the user's spec."""
        errors = [a.error for a in self.attempts if a.error is not None
                  and not isinstance(a.error, CaptureError)]
        self.rejected = next((e for e in errors
                              if explain_constraint_violation(e, self.dynamic_shapes)),
                             None) or next(iter(errors), None)
        if self.program is not None:
            return
        fixed = _refine(self.rejected, self.dynamic_shapes)
        if fixed is not None:
            self.program, self.strategy = self.attempt(fixed, " (refined spec)", False, False)
            if self.program is not None:
                self.refined = fixed
                self.why = explain_constraint_violation(self.rejected, self.dynamic_shapes)

    def unpinned(self) -> None:
        """Dims the captured program pins without enforcing it: made static, or kept
        dynamic in the range of sizes the model's code allows (`_unpin`)."""
        if self.program is not None and self.dynamic_shapes is not None:
            pinned = pinning_guards(self.program)
            if pinned:
                self.program, self.strategy, self.refined, self.why = _unpin(
                    self.program, pinned, self.module, self.args, self.kwargs,
                    self.dynamic_shapes, self.attempts, self.attempt)

    STEPS = (as_given, sizes_as_sizes, refined_spec, unpinned)

    # -- attempts --------------------------------------------------------------------------
    def attempt(self, spec: Any, label: str, deferred: bool, oblivious: bool
                ) -> tuple[Any, str]:
        """The first strategy that captures with `spec`: (program, strategy), or (None, "")."""
        for name in self.strategies:
            t0 = time.perf_counter()
            names: dict[str, str] = {}
            try:
                found = _export(self.module, self.args, self.kwargs, spec,
                                strict=(name == "strict"), size_oblivious=oblivious,
                                loop_rnns=self.dynamic_shapes is not None, deferred=deferred,
                                size_names=names)
                self.size_names[id(found)] = names
            except Exception as e:  # noqa: BLE001  (every failure is recorded and reported)
                self.attempts.append(CaptureAttempt(name + label, e, time.perf_counter() - t0))
                logger.info("capture strategy %s failed: %s", name + label, e)
                continue
            squeeze = _squeezes_a_size_one(found) if oblivious else ""
            if squeeze:
                # Sizes 1 treated like any other changed what the model computes (it
                # squeezes a dim of size 1): only a static dim can say what eager does.
                self.attempts.append(CaptureAttempt(name + label, CaptureError(
                    f"a dim dynamic_shapes asks to be dynamic has size 1 and the model "
                    f"squeezes it ({squeeze}): captured treating size 1 like any other, the "
                    f"squeeze would keep it"), time.perf_counter() - t0))
                return None, ""
            self.attempts.append(CaptureAttempt(name + label, None, time.perf_counter() - t0))
            return found, name
        return None, ""

    def run(self, oblivious: bool, fallback: bool) -> tuple[Any, str, bool]:
        """(program, strategy, whether it was captured size-oblivious)."""
        attempts, spec = self.attempts, self.dynamic_shapes
        first = len(attempts)
        found, name = self.attempt(spec, "", False, oblivious)
        # Any strategy's constraint violation: torch can crash while it words one for
        # another (non-strict: "Cannot create Dim with inconsistent min=1, max=1").
        error = next((a.error for a in attempts[first:] if a.error is not None
                      and explain_constraint_violation(a.error, spec)), None)
        if found is None and error is None and oblivious and any(
                _checks_symbolic_sizes(a.error) for a in attempts[first:]):
            return (*self.size_one_deferred(spec), True)
        if attempts[first].error is None or error is None:
            return found, name, oblivious
        if found is not None and len(attempts) > first + 1:
            kept, kept_name = self.attempt(spec, _DEFERRED, True, not fallback)
            if kept is not None and _dynamic_dims(kept) > _dynamic_dims(found):
                return kept, kept_name, not fallback
            return found, name, oblivious
        found, name = self.attempt(spec, _DEFERRED, True, not fallback)
        return found, name, not fallback

    def size_one_deferred(self, spec: Any) -> tuple[Any, str]:
        """Every strategy failed on a check of dynamic sizes, captured size-oblivious: the
        check (broadcasting a dim of size 1 against a dynamic one) is kept as a run-time
        assert, as torch.onnx captures. The program is kept only when each assert the example
        contradicts is such a size-1 equality (eager broadcasts it); any other means the
        inputs themselves disagree, and the first error stands."""
        found, name = self.attempt(spec, _SIZE_ONE_DEFERRED, True, True)
        wrong = _contradicted_asserts(found) if found is not None else ""
        if wrong:
            last = self.attempts[-1]
            self.attempts[-1] = CaptureAttempt(last.strategy, RuntimeError(
                f"captured, but the example's sizes contradict {wrong}"), last.seconds)
            return None, ""
        return found, name

    def fail(self) -> None:
        """Raise the error that says best why every attempt failed."""
        attempts, spec = self.attempts, self.dynamic_shapes
        lines = "\n".join(
            f"  {a.strategy}: {type(a.error).__name__}: {_first_line(a.error)}" for a in attempts
        )
        explained = explain_constraint_violation(self.rejected, spec)
        squeezed = [a.error for a in attempts if isinstance(a.error, CaptureError)]
        if squeezed and not explained:
            explained = (f"{squeezed[0]}; captured with sizes 1 as sizes, torch.export "
                         f"cannot keep that dim dynamic: give an example of size 2 or more, "
                         f"or make the dim static")
        if explained:
            raise CaptureError(
                f"{explained}\ntorch.export tried {len(attempts)} strategies:\n{lines}",
                attempts,
            ) from attempts[0].error
        _raise_unsupported_output(attempts, self.module, self.args, self.kwargs)
        _raise_forward_error(attempts, self.model, self.module, self.args, self.kwargs, lines)
        raise CaptureError(
            f"torch.export could not capture the model; tried {len(attempts)} strategies:\n"
            f"{lines}\n  fix: make the failing code traceable (see the first error above)",
            attempts,
        ) from attempts[0].error


_DEFERRED = " (guards as run-time asserts)"
_SIZE_ONE_DEFERRED = " (size-1 checks as run-time asserts)"
# A backed symbol of torch's shape environment (s17), as trace-time shape errors name them.
_SIZE_SYMBOL = re.compile(r"\bs\d+\b")


def _checks_symbolic_sizes(error: BaseException | None) -> bool:
    """Whether `error` is a trace-time check on dynamic sizes that failed ("The size of
    tensor a (s77) must match the size of tensor b (s17)"), not a constraint violation."""
    if error is None or isinstance(error, CaptureError):
        return False
    text = str(error)
    return bool(_SIZE_SYMBOL.search(text)) and "Constraints violated" not in text


def _contradicted_asserts(program: torch.export.ExportedProgram) -> str:
    """The first run-time assert of `program` false for the example's sizes that is not an
    equality with a size-1 dim (which eager broadcasts), or ""."""
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten._assert_scalar.default:
            continue
        condition = node.args[0]
        val = condition.meta.get("val") if isinstance(condition, torch.fx.Node) else condition
        hint = val.node.hint if isinstance(val, torch.SymBool) else val
        if hint is None or bool(hint):
            continue
        sides = [a.meta.get("val") for a in condition.args if isinstance(a, torch.fx.Node)] \
            if condition.target is operator.eq else []
        hints = [v.node.hint if isinstance(v, torch.SymInt) else v for v in sides]
        if len(hints) != 2 or 1 not in hints:
            return str(node.args[1]) if len(node.args) > 1 else node.name
    return ""


def _squeezes_a_size_one(program: torch.export.ExportedProgram) -> str:
    """The squeeze in `program` that keeps a dim whose example size is 1 (captured treating
    sizes 0 and 1 like any other, it is a no-op that eager's is not), or ""."""
    squeezes = (torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims,
                torch.ops.aten.squeeze.default)
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target not in squeezes:
            continue
        val, out = node.args[0].meta.get("val"), node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor) or not val.dim():
            continue
        dims = node.args[1] if len(node.args) > 1 else range(val.dim())
        dims = [dims] if isinstance(dims, int) else dims
        ones = sum(1 for d in dims if (val.shape[d].node.hint if isinstance(val.shape[d], torch.SymInt)
                                       else val.shape[d]) == 1)
        if ones > val.dim() - out.dim():
            trace = (node.meta.get("stack_trace") or "").strip().splitlines()
            where = next((t.strip() for t in reversed(trace) if t.strip().startswith("File")), "")
            return f"{node.target} {node.name}" + (f", {where}" if where else "")
    return ""


def _unpin(program: torch.export.ExportedProgram, pinned: list[UnenforcedGuard],
           module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any] | None,
           dynamic_shapes: Any, attempts: list[CaptureAttempt], attempt: Callable[..., Any]
           ) -> tuple[torch.export.ExportedProgram, str, Any, str]:
    """Capture again with the dims `pinned` guards read made static (capture/guards.py):
    (program, strategy, the spec used, why). Raises CaptureError when that fails too."""
    static = pinned_axes(program, pinned)
    names = [name for name, _ in user_input_values(program)]
    ranged = _ranges(static, pinned)
    conditions = []
    for guard in pinned:
        text = guard.condition
        for position, axes in static.items():
            for axis, symbol in axes.items():
                text = re.sub(rf"\b{re.escape(symbol)}\b", f"{names[position]}.size({axis})", text)
        conditions.append(text + (f" (recorded at {guard.where})" if guard.where else ""))
    dims = ", ".join(f"input {names[p]!r} axis {a}" for p, axes in sorted(static.items())
                     for a in sorted(axes))
    why = (f"{dims} asked to be dynamic, but the model's code branches on the size: the captured "
           f"program assumes {'; '.join(conditions)}, which torch.export recorded without "
           f"enforcing it, so one graph would compute the branch taken for this example at "
           f"every size")
    if ranged is not None:
        # Each guard holds over a range of sizes around the example's (LongT5's one local
        # attention block, up to 128 tokens): keep the dims dynamic in that range.
        narrowed = with_ranged_axes(module, tuple(args), kwargs, dynamic_shapes, ranged)
        found, name = attempt(narrowed, " (dims kept to the sizes the model's code allows)",
                              False, False)
        if found is not None and not pinning_guards(found):
            spans = ", ".join(f"input {names[p]!r} axis {a}: {lo}..{hi}"
                              for p, axes in sorted(ranged.items())
                              for a, (lo, hi) in sorted(axes.items()))
            return found, name, narrowed, (
                f"{why.replace(', so one graph would', ' for other sizes, so one graph would')}"
                f"; it holds for a range of sizes, so the dims stay dynamic within it "
                f"({spans}): beyond it the graph would compute the wrong branch (ONNX has no "
                f"assertion to refuse such inputs)")
    fixed = with_static_axes(module, tuple(args), kwargs, dynamic_shapes, static) \
        if static else None
    if fixed is not None:
        found, name = attempt(fixed, " (dims the model pins made static)", False, False)
        if found is not None and not pinning_guards(found):
            return found, name, fixed, why
    raise CaptureError(f"{why}; captured with those dims static, it failed too: make them "
                       f"static in dynamic_shapes, or change the branch", attempts)


def _ranges(static: dict[int, dict[int, str]], pinned: list[UnenforcedGuard]
            ) -> dict[int, dict[int, tuple[int, int]]] | None:
    """{input: {axis: (low, high)}}, the sizes where every guard on the axis holds, or None
    when a guard pins its dim to the example's size (or reads an axis that is not a bare
    symbol)."""
    spans: dict[str, tuple[int, int]] = {}
    for guard in pinned:
        if guard.span is None:
            return None
        symbol, low, high = guard.span
        old = spans.get(symbol, (low, high))
        spans[symbol] = (max(old[0], low), min(old[1], high))
    ranged: dict[int, dict[int, tuple[int, int]]] = {}
    for position, axes in static.items():
        for axis, symbol in axes.items():
            if symbol not in spans or spans[symbol][0] >= spans[symbol][1]:
                return None
            ranged.setdefault(position, {})[axis] = spans[symbol]
    return ranged


def _dynamic_dims(program: torch.export.ExportedProgram) -> int:
    """How many dims of the user inputs are symbolic in `program`."""
    return sum(1 for _, val in user_input_values(program) if isinstance(val, torch.Tensor)
               for d in val.shape if isinstance(d, torch.SymInt) and not d.node.expr.is_number)


def _export(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any] | None,
            dynamic_shapes: Any, *, strict: bool, size_oblivious: bool, loop_rnns: bool,
            deferred: bool = False, size_names: dict[str, str] | None = None
            ) -> torch.export.ExportedProgram:
    """One torch.export.export call under onnxport's capture kernels; `deferred` keeps the
    guards on dynamic dims as run-time asserts instead of rejecting the spec; `size_names`
    receives the names library patches give data-dependent sizes."""
    # Static shapes need no loop-shaped RNN kernels (the stock ones are cheaper).
    rnns = loop_shaped_rnns() if loop_rnns else contextlib.nullcontext()
    oblivious = torch.fx.experimental._config.patch(backed_size_oblivious=True) \
        if size_oblivious else contextlib.nullcontext()
    with capture_kernels(), library_patches(size_names), tolerant_constraint_solver(), \
            rnns, oblivious:
        return torch.export.export(module, tuple(args), kwargs=kwargs or None,
                                   dynamic_shapes=dynamic_shapes, strict=strict,
                                   prefer_deferred_runtime_asserts_over_guards=deferred)


def _refine(error: BaseException | None, dynamic_shapes: Any) -> Any:
    """The spec torch.export's suggested fixes give for `error`, or None (no usable fix)."""
    if dynamic_shapes is None or not isinstance(error, torch._dynamo.exc.UserError):
        return None
    message = getattr(error, "msg", str(error))
    if "Suggested fixes" not in message:
        return None
    try:
        return torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes(
            message, dynamic_shapes)
    except Exception:  # noqa: BLE001  (no usable fix: the original error stands)
        return None


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


# -- outputs that are not tensors ------------------------------------------------------------

_OK_OUTPUTS = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool,
               type(None))


def _user_outputs(program: torch.export.ExportedProgram) -> list[Any]:
    """The program's user outputs, flat, in order (FX nodes or constants)."""
    output = next(n for n in reversed(program.graph.nodes) if n.op == "output")
    flat = output.args[0]
    flat = flat if isinstance(flat, (list, tuple)) else [flat]
    kind = torch.export.graph_signature.OutputKind
    specs = program.graph_signature.output_specs
    return [arg for spec, arg in zip(specs, flat) if spec.kind == kind.USER_OUTPUT]


def _output_paths(program: torch.export.ExportedProgram, count: int) -> list[str]:
    """The path of each flat user output in what the model returns: output[1]['name']."""
    try:
        tree = pytree.tree_unflatten(list(range(count)), program.call_spec.out_spec)
        paths = {leaf: "output" + pytree.keystr(path)
                 for path, leaf in pytree.tree_flatten_with_path(tree)[0]}
        return [paths.get(i, f"output #{i}") for i in range(count)]
    except Exception:  # noqa: BLE001  (no spec: number the flat outputs)
        return [f"output #{i}" for i in range(count)]


def _unsupported_output_error(bad: list[tuple[str, str]],
                              attempts: list[CaptureAttempt] | None) -> UnsupportedOutputError:
    listed = ", ".join(f"{path} has type {kind}" for path, kind in bad)
    return UnsupportedOutputError(
        f"the model returns what ONNX cannot hold: {listed}. A model's outputs must be "
        f"tensors, or tuples, lists and dicts of tensors (None, ints, floats and bools are "
        f"taken where torch.export takes them); return strings and other objects from a "
        f"wrapper outside the exported model", bad, attempts)


def _check_outputs(program: torch.export.ExportedProgram, outputs: list[Any],
                   attempts: list[CaptureAttempt]) -> None:
    """Refuse outputs torch.export kept as constants but ONNX cannot hold (strings, ...)."""
    bad = [i for i, o in enumerate(outputs)
           if not isinstance(o, (torch.fx.Node, *_OK_OUTPUTS))]
    if bad:
        paths = _output_paths(program, len(outputs))
        raise _unsupported_output_error(
            [(paths[i], type(outputs[i]).__name__) for i in bad], attempts)


def _raise_unsupported_output(attempts: list[CaptureAttempt], module: torch.nn.Module,
                              args: Sequence[Any], kwargs: dict[str, Any] | None) -> None:
    """torch.export refused an output it cannot flatten: say which output and its type."""
    text = str(attempts[0].error or "")
    found = re.search(r"Found (?P<type>.+?) in output, which is not a known type", text)
    if not found:
        return
    bad: list[tuple[str, str]] = []
    try:
        # Run the model once more on fake inputs (nothing is computed) to see what it returns.
        with torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True) as mode, \
                torch.no_grad():
            fake = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (tuple(args), kwargs or {}))
            returned = module(*fake[0], **fake[1])
        bad = [("output" + pytree.keystr(path), type(leaf).__name__)
               for path, leaf in pytree.tree_flatten_with_path(returned)[0]
               if not isinstance(leaf, _OK_OUTPUTS)]
    except Exception:  # noqa: BLE001  (the type torch named is all there is to say)
        bad = []
    if not bad:
        kind = re.sub(r"^<class '(.+)'>$", r"\1", found.group("type")).rsplit(".", 1)[-1]
        bad = [("an output", kind)]
    raise _unsupported_output_error(bad, attempts) from attempts[0].error


# -- failures in the model's own code ----------------------------------------------------------

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_ONNXPORT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep
                      for k in ("stdlib", "platstdlib")})
_NN_DIR = os.path.join(_TORCH_DIR, "nn", "")


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):
        return True
    path = os.path.realpath(filename)
    if path.startswith((_TORCH_DIR, os.path.realpath(_TORCH_DIR) + os.sep, _ONNXPORT_DIR)):
        return True
    return path.startswith(_STDLIB_DIRS) and "-packages" + os.sep not in path


def _forward_frames(error: BaseException) -> tuple[Any, Any]:
    """The frame of the user's code that led to `error` (the last one outside torch,
    onnxport and the standard library) and the last torch.nn module frame after it."""
    user = module = None
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not _is_library(filename):
            user, module = tb, None
        elif os.path.realpath(filename).startswith(os.path.realpath(_NN_DIR)) \
                and isinstance(tb.tb_frame.f_locals.get("self"), torch.nn.Module):
            module = tb
        tb = tb.tb_next
    return user, module


def _location(tb: Any) -> tuple[str, str]:
    """("file:line", "in forward: <code>") of a traceback entry."""
    frame = traceback.extract_tb(tb, limit=1)[0]
    filename = frame.filename
    try:
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            filename = relative
    except ValueError:
        pass
    code = (frame.line or "").strip()
    return f"{filename}:{frame.lineno}", f"in {frame.name}" + (f": {code}" if code else "")


def describe_inputs(model: Any, args: Sequence[Any], kwargs: dict[str, Any] | None,
                    limit: int = 12) -> str:
    """`x: float32[2, 5], mask: bool[2, 5], n=3`: the inputs given, by name."""
    leaves = pytree.tree_leaves((tuple(args), kwargs or {}))
    try:
        from onnxport.capture.dynamic_shapes import _TopInputs

        names = _TopInputs(model, tuple(args), kwargs).leaf_names
    except Exception:  # noqa: BLE001  (inputs that do not bind: number them)
        names = []
    parts = []
    for i, leaf in enumerate(leaves):
        name = names[i] if i < len(names) else f"input {i}"
        if isinstance(leaf, torch.Tensor):
            dtype = str(leaf.dtype).removeprefix("torch.")
            parts.append(f"{name}: {dtype}[{', '.join(str(d) for d in leaf.shape)}]")
        elif leaf is not None:
            parts.append(f"{name}={leaf!r}"[:60])
    if len(parts) > limit:
        parts = [*parts[:limit], f"... ({len(parts) - limit} more)"]
    return ", ".join(parts) or "none"


def _is_user_error(error: BaseException | None) -> bool:
    """An ordinary exception (not torch.export's own) raised through the model's code."""
    if error is None or isinstance(error, CaptureError):
        return False
    return type(error).__module__.split(".")[0] != "torch"


def _advice(attempts: list[CaptureAttempt]) -> list[str]:
    """torch.export's hints, in order, without repeats."""
    hints: list[str] = []
    for attempt in attempts:
        for raw in str(attempt.error or "").splitlines():
            line = raw.strip()
            if line.startswith("Hint:") and line not in hints:
                hints.append(line)
    return hints


def _raise_forward_error(attempts: list[CaptureAttempt], model: Any, module: torch.nn.Module,
                         args: Sequence[Any], kwargs: dict[str, Any] | None, lines: str) -> None:
    """The model's own code raised: say its message, its line and the inputs, first."""
    error = attempts[0].error
    if not _is_user_error(error):
        return
    assert error is not None
    user, in_module = _forward_frames(error)
    if user is None and in_module is None:
        return
    location = source = None
    if user is not None:
        location, source = _location(user)
    elif in_module is not None:
        location, source = _location(in_module)
    message = _first_line(error) or type(error).__name__
    first = f"{message} ({type(error).__name__} at {location}, {source})"
    inputs = describe_inputs(model, args, kwargs)
    text = [first, f"  inputs given: {inputs}"]
    if in_module is not None:
        culprit = in_module.tb_frame.f_locals.get("self")
        path = next((name for name, m in module.named_modules() if m is culprit), None)
        if path is not None:
            text.append(f"  raised in module {path or '(the model itself)'!r}: "
                        f"{_one_line(repr(culprit))}")
    eager = _eager_verdict(module, args, kwargs)
    if eager is not None:
        text.append(f"  {eager}")
    text.append(f"torch.export ran the model's forward on these inputs and its code raised "
                f"(check the inputs' shapes and values, and the model's config, against what "
                f"the model expects).\n"
                f"torch.export tried {len(attempts)} strategies:\n{lines}")
    text += [f"  torch.export: {hint}" for hint in _advice(attempts)]
    raise ForwardError("\n".join(text), attempts, location=location, inputs=inputs) from error


def _eager_verdict(module: torch.nn.Module, args: Sequence[Any],
                   kwargs: dict[str, Any] | None) -> str | None:
    """Whether eager PyTorch fails on the same inputs, said in one line with eager's own
    message (concrete sizes where the trace had symbols); None where running it could change
    state or is impossible (training mode, fake or meta weights)."""
    if module.training:
        return None
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.is_meta or isinstance(tensor, torch._subclasses.FakeTensor):
            return None
    try:
        import copy

        inputs = copy.deepcopy((tuple(args), dict(kwargs or {})))
    except Exception:  # noqa: BLE001  (inputs that cannot be copied: do not risk mutating them)
        return None
    try:
        with torch.no_grad():
            module(*inputs[0], **inputs[1])
    except Exception as error:  # noqa: BLE001  (the model's own failure, reported as text)
        user, in_module = _forward_frames(error)
        frame = user or in_module
        where = f" at {_location(frame)[0]}" if frame is not None else ""
        return (f"eager PyTorch fails on these inputs too{where}: {type(error).__name__}: "
                f"{_one_line(_first_line(error))}")
    return ("eager PyTorch runs these inputs without error: the failure comes from tracing "
            "them with symbolic shapes")


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _decompose_untranslated(captured: Captured, has_translation: Callable[[Any], bool], *,
                            in_place: bool = True, size_oblivious: bool = False) -> None:
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
            elif decomposition is not custom_op_implementation(target):
                fallback[target] = decomposition
            # (a custom op whose body cannot be traced alone stays untranslated: re-tracing
            # the whole program would fail on the same body; the missing-op error names it)
        if fallback or has_mutation:
            oblivious = torch.fx.experimental._config.patch(backed_size_oblivious=True) \
                if size_oblivious else contextlib.nullcontext()
            try:
                with oblivious:  # re-traced as it was captured (see `capture`)
                    program = program.run_decompositions(fallback)
            except Exception as e:  # noqa: BLE001  (re-raised typed, naming the ops)
                what = ", ".join(sorted(str(op) for op in fallback)) or "in-place operators"
                raise CaptureError(
                    f"decomposing {what} (no translation) by re-tracing the exported program "
                    f"failed: {type(e).__name__}: {_first_line(e)}\n  fix: register a "
                    f"translation for it (docs/adding_an_op.md)", captured.attempts) from e
            captured.retraced = True
            captured.decomposed.extend(str(op) for op in fallback)
        if not changed and not fallback:
            break
    if captured.decomposed:
        program.graph_module.recompile()
        captured.decomposed = sorted(set(captured.decomposed))
    captured.exported_program = program
    captured.decompose_seconds = time.perf_counter() - t0
