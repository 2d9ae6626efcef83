"""The TorchScript front end (dynamo=False): trace or take a scripted model, inline its graph.

`capture_torchscript` returns a `ScriptCaptured`: one flat `torch._C.Graph` (method calls
inlined, tuples lowered where possible), the module its `prim::GetAttr` nodes read from, and
for each graph input its example value and its name (forward's parameter name).
Tensors are graph inputs. Python numbers (int, float, bool) are graph inputs of a scripted
model whose graph types the parameter as such (0-d INT64 / DOUBLE / BOOL, as torch.onnx makes
them), so control flow and arithmetic on them follow the value given at run time; a traced
model bakes them (and every other non-tensor input) in as constants, as torch.jit.trace does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import time
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.errors import CaptureAttempt, CaptureError


class TrainingMode(enum.IntEnum):
    """Which mode the model is exported in (torch.onnx.TrainingMode)."""

    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


class OperatorExportTypes(enum.IntEnum):
    """What to do with operators (torch.onnx.OperatorExportTypes)."""

    ONNX = 0
    ONNX_ATEN = 1
    ONNX_ATEN_FALLBACK = 2
    ONNX_FALLTHROUGH = 3


# The state_dict prefix of the wrapper that calls the user's model during tracing.
WRAPPER_PREFIX = "model"


@dataclasses.dataclass(slots=True)
class ScriptCaptured:
    """A TorchScript graph ready to translate.

    `graph` takes `self` first when `module` is set, then one input per entry of
    `example_inputs` (tensors, and the Python numbers at `number_inputs`, become graph inputs
    named by `input_names`, in order; other values are baked in); `strip_prefix` is removed
    from the front of attribute paths (the tracing wrapper's own attribute name).
    """

    graph: torch._C.Graph
    module: Any
    input_names: list[str]
    example_inputs: list[Any]
    strategy: str
    strip_prefix: str = ""
    seconds: float = 0.0
    # Traces again with other example tensors (None for scripted models).
    retrace: Any = None
    dynamic_dims: dict[int, list[bool]] | None = None
    # What `self.training` reads during translation (None: the modules' own flags).
    training: bool | None = None
    # Positions in `example_inputs` of Python numbers that are graph inputs (scripted models).
    number_inputs: tuple[int, ...] = ()


# TorchScript parameter types whose Python numbers a scripted model takes as graph inputs.
_NUMBER_TYPES = (torch._C.IntType, torch._C.FloatType, torch._C.BoolType)


def script_number_inputs(model: Any, positional: tuple[Any, ...], named: dict[str, Any]
                         ) -> list[int]:
    """Positions (among forward's parameters after self) of the Python numbers a scripted
    model takes as graph inputs: an int, float or bool given for a parameter typed int, float
    or bool. Empty for a model that is not scripted."""
    if not isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
        return []
    is_module = isinstance(model, torch.jit.ScriptModule)
    try:
        schema = (model.forward.schema if is_module else model.schema).arguments
    except (AttributeError, RuntimeError):
        return []
    schema = schema[1 if is_module else 0:]
    full, _ = _bind_named(model, positional, named)
    return [i for i, (arg, value) in enumerate(zip(schema, full))
            if _is_number(value) and isinstance(arg.type, _NUMBER_TYPES)]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, bool))


def normalize_args(args: Any, kwargs: dict[str, Any] | None = None
                   ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(positional, named) from the three documented forms of `args`.

    A tensor is a 1-tuple; a tuple whose last element is a dict passes that dict as named
    arguments (an empty dict at the end lets the element before it be a positional dict).
    """
    if isinstance(args, torch.Tensor):
        return (args,), dict(kwargs or {})
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    named = dict(kwargs or {})
    if args and isinstance(args[-1], dict):
        named.update(args[-1])
        args = args[:-1]
    return args, named


@contextlib.contextmanager
def training_mode(model: Any, mode: TrainingMode | bool | None) -> Iterator[None]:
    """Set the model's training flag for the export, and restore it after."""
    if not isinstance(model, torch.nn.Module) or mode is None or mode == TrainingMode.PRESERVE:
        yield
        return
    was = model.training
    want = mode == TrainingMode.TRAINING or mode is True
    model.train(want)
    try:
        yield
    finally:
        model.train(was)


class _Wrapper(torch.nn.Module):
    """Calls the model with the traced tensors put back among its baked-in arguments."""

    def __init__(self, model: Any, template: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        super().__init__()
        if isinstance(model, torch.nn.Module):
            self.model = model
        else:
            self._fn = model
        self._template = template
        # Return the output's tensors as one flat tuple (for outputs the tracer cannot take
        # as they are, e.g. a dict holding a list); the ONNX outputs are flat either way.
        self.flat_outputs = False

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves, spec = torch.utils._pytree.tree_flatten(self._template)
        it = iter(tensors)
        filled = [next(it) if isinstance(x, torch.Tensor) else x for x in leaves]
        args, kwargs = torch.utils._pytree.tree_unflatten(filled, spec)
        fn = self.model if hasattr(self, "model") else self._fn
        out = fn(*args, **kwargs)
        if not self.flat_outputs:
            return out
        flat = torch.utils._pytree.tree_leaves(out)
        if not all(isinstance(x, torch.Tensor) for x in flat):
            raise TypeError("an output that is not a tensor")
        return tuple(flat)


def _parameter_names(model: Any) -> list[inspect.Parameter]:
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        return list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return []


def _bind_named(model: Any, args: tuple[Any, ...], named: dict[str, Any]
                ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(positional, keyword-only) arguments with the named ones placed.

    Parameters before the last named one that are absent take their default, or None.
    """
    if not named:
        return args, {}
    params = _parameter_names(model)
    positional = [p for p in params[len(args):]
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    last = max((i for i, p in enumerate(positional) if p.name in named), default=-1)
    out = list(args)
    for p in positional[:last + 1]:
        if p.name in named:
            out.append(named[p.name])
        elif p.default is not inspect.Parameter.empty:
            out.append(p.default)
        else:
            out.append(None)
    used = {p.name for p in positional[:last + 1]}
    return tuple(out), {k: v for k, v in named.items() if k not in used}


def _input_names(model: Any, args: tuple[Any, ...], extra: dict[str, Any]) -> list[str]:
    """A name per tensor leaf of args: forward's parameter name, `<name>_<i>` when nested."""
    params = [p.name for p in _parameter_names(model)
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names: list[str] = []
    for i, arg in enumerate(args):
        base = params[i] if i < len(params) else f"input_{i}"
        if isinstance(arg, torch.Tensor):
            names.append(base)
            continue
        leaves = [x for x in torch.utils._pytree.tree_leaves(arg) if isinstance(x, torch.Tensor)]
        names.extend(f"{base}_{j}" for j in range(len(leaves)))
    for key, arg in extra.items():
        leaves = [x for x in torch.utils._pytree.tree_leaves(arg) if isinstance(x, torch.Tensor)]
        names.extend([key] if isinstance(arg, torch.Tensor) else
                     [f"{key}_{j}" for j in range(len(leaves))])
    return names


def capture_torchscript(model: Any, args: Any, kwargs: dict[str, Any] | None = None, *,
                        training: TrainingMode = TrainingMode.EVAL) -> ScriptCaptured:
    """Trace `model` (or take a ScriptModule / ScriptFunction as is) into a flat graph."""
    t0 = time.perf_counter()
    positional, named = normalize_args(args, kwargs)
    if isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
        return _from_script(model, positional, named, training, t0)
    full, extra = _bind_named(model, positional, named)
    tensors = [x for x in torch.utils._pytree.tree_leaves((full, extra))
               if isinstance(x, torch.Tensor)]
    wrapper = _Wrapper(model, (full, extra))
    try:
        with training_mode(model, training):
            traced = torch.jit.trace(wrapper, tuple(tensors), check_trace=False, strict=False)
    except Exception as e:  # noqa: BLE001  (reported as a CaptureError with the cause)
        traced = None
        if "cannot be understood by the tracer" in str(e) or \
                "Tracer cannot infer type" in str(e) or \
                "can be output from traced functions" in str(e):
            # Nested outputs the tracer refuses (a dict holding a list, a dict of mixed
            # values, a list of dicts): traced as the flat tuple of their tensors, the ONNX
            # outputs' order.
            wrapper.flat_outputs = True
            try:
                with training_mode(model, training):
                    traced = torch.jit.trace(wrapper, tuple(tensors), check_trace=False,
                                             strict=False)
            except Exception:  # noqa: BLE001  (the first error is the one reported)
                wrapper.flat_outputs = False
        if traced is None:
            attempt = CaptureAttempt("torch.jit.trace", e, time.perf_counter() - t0)
            raise CaptureError(f"torch.jit.trace failed: {type(e).__name__}: {e}",
                               [attempt]) from e
    graph = traced.graph.copy()
    _flatten(graph)

    def retrace(new_tensors: list[torch.Tensor]) -> torch._C.Graph:
        with training_mode(model, training):
            again = torch.jit.trace(wrapper, tuple(new_tensors), check_trace=False, strict=False)
        result = again.graph.copy()
        _flatten(result)
        return result

    return ScriptCaptured(graph, traced, _input_names(model, full, extra), tensors,
                          "torch.jit.trace",
                          strip_prefix=WRAPPER_PREFIX + "." if isinstance(model, torch.nn.Module)
                          else "", seconds=time.perf_counter() - t0, retrace=retrace)


def find_dynamic_dims(captured: ScriptCaptured, axes: dict[int, set[int]]) -> None:
    """Mark which dims of every traced value follow the dynamic input dims.

    The model is traced again with each dynamic input dim doubled (the example repeated along
    it; an empty dim becomes 2); a value's dim that changed between the two traces is dynamic. When the second trace
    differs in structure (or fails), `dynamic_dims` stays None: every dim counts as dynamic.
    """
    if captured.retrace is None or not axes:
        return
    grown = []
    for i, t in enumerate(captured.example_inputs):
        for axis in sorted(axes.get(i, ())):
            if axis >= t.dim():
                continue
            if t.shape[axis] > 0:
                t = torch.cat([t, t], dim=axis)
            else:
                # An empty example dim cannot grow by repetition: trace at size 2 (zeros).
                t = t.new_zeros([*t.shape[:axis], 2, *t.shape[axis + 1:]])
        grown.append(t)
    try:
        other = captured.retrace(grown)
    except Exception:  # noqa: BLE001  (the model rejects other sizes: no per-dim knowledge)
        return
    first = list(_all_nodes(captured.graph))
    second = list(_all_nodes(other))
    if len(first) != len(second) or any(a.kind() != b.kind() for a, b in zip(first, second)):
        return
    flags: dict[int, list[bool]] = {}
    for a, b in zip(first, second):
        for va, vb in zip(a.outputs(), b.outputs()):
            ta, tb = va.type(), vb.type()
            if isinstance(ta, torch._C.TensorType) and isinstance(tb, torch._C.TensorType):
                sa, sb = ta.sizes(), tb.sizes()
                if sa is not None and sb is not None and len(sa) == len(sb):
                    flags[va.unique()] = [x != y or x is None for x, y in zip(sa, sb)]
    for va, vb in zip(list(captured.graph.inputs()), list(other.inputs())):
        ta, tb = va.type(), vb.type()
        if isinstance(ta, torch._C.TensorType) and isinstance(tb, torch._C.TensorType):
            sa, sb = ta.sizes(), tb.sizes()
            if sa is not None and sb is not None and len(sa) == len(sb):
                flags[va.unique()] = [x != y or x is None for x, y in zip(sa, sb)]
    captured.dynamic_dims = flags


def _all_nodes(block: Any) -> Iterator[torch._C.Node]:
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _all_nodes(sub)


def _from_script(model: Any, positional: tuple[Any, ...], named: dict[str, Any],
                 training: TrainingMode, t0: float) -> ScriptCaptured:
    is_module = isinstance(model, torch.jit.ScriptModule)
    graph = (model.forward.graph if is_module else model.graph).copy()
    full, extra = _bind_named(model, positional, named)
    if extra:
        raise CaptureError(f"keyword-only arguments of a scripted model: {', '.join(extra)}")
    with training_mode(model, training):
        _flatten(graph)
    inputs = list(graph.inputs())[1 if is_module else 0:]
    schema = (model.forward.schema if is_module else model.schema).arguments[1 if is_module else 0:]
    names: list[str] = []
    examples: list[Any] = []
    numbers: list[int] = []
    for i, value in enumerate(inputs):
        if i < len(full):
            example = full[i]
        elif i < len(schema) and schema[i].has_default_value():
            example = schema[i].default_value
        else:
            example = None
        # A Python number given for a parameter the graph types int/float/bool is a graph
        # input (torch.onnx does the same): its value at run time drives the graph. Defaults
        # not given stay constants.
        number = i < len(full) and _is_number(example) and \
            isinstance(value.type(), _NUMBER_TYPES)
        if number:
            numbers.append(i)
        if isinstance(example, torch.Tensor) or number:
            names.append(schema[i].name if i < len(schema) else f"input_{i}")
        examples.append(example)
    mode = None if training == TrainingMode.PRESERVE else training == TrainingMode.TRAINING
    return ScriptCaptured(graph, model if is_module else None, names, examples,
                          "torch.jit.script", seconds=time.perf_counter() - t0, training=mode,
                          number_inputs=tuple(numbers))


def _flatten(graph: torch._C.Graph) -> None:
    """Inline method calls and drop what only the interpreter needs."""
    torch._C._jit_pass_inline(graph)
    torch._C._jit_pass_dce(graph)
    # In-place ops on values no view aliases become their functional variants.
    torch._C._jit_pass_remove_mutation(graph)
    torch._C._jit_pass_dce(graph)
    torch._C._jit_pass_lower_all_tuples(graph)
