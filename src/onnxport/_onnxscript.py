"""Adapts users' translations (`custom_translation_table`, `OnnxRegistry.register_op`) to
onnxport's translation form `fn(g, *schema_args, **kwarg_only_args)`.

A user's translation comes in one of these forms, told apart by `user_translation`:

* onnxport's own, `fn(g, ...)`: its first parameter is named `g` or annotated `GraphBuilder`
  (or `GraphContext`). Used as it is: it gets every schema argument, defaults filled in.
* an onnxscript `OnnxFunction` (`@onnxscript.script`): called as a model-local ONNX function.
* an onnxscript `TracedOnnxFunction`, or any other Python function (torch.onnx's documented
  form, a plain function calling onnxscript ops): traced, its ops appended to the graph.
* a list of functions of these forms: per node, the first whose signature fits the node.

The onnxscript forms and plain functions bind the node's arguments to their own signature,
as torch.onnx calls them: the node's positional arguments by position, its keyword-only
ones by name, and an argument the node leaves to its default only when the function has no
default of its own for it. A non-tensor argument the function does not declare (`alpha` of
`aten.add.Tensor` for `def custom_add(self, other)`) is not passed.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir

from onnxport.translate.binding import OWN_SIGNATURE, Argument, NodeArguments

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_BUILDER_TYPES = ("GraphBuilder", "GraphContext")


def is_onnxscript_function(fn: Any) -> bool:
    """Whether `fn` is an onnxscript OnnxFunction or TracedOnnxFunction."""
    return hasattr(fn, "opset") and (callable(getattr(fn, "to_function_proto", None))
                                     or callable(getattr(fn, "func", None)))


def is_onnxport_translation(fn: Any) -> bool:
    """Whether `fn` is written in onnxport's form `fn(g, ...)`: its first parameter is named
    `g` or annotated as onnxport's builder. A callable whose signature cannot be read
    (a builtin) counts as onnxport's form too, as before plain functions were traced."""
    if getattr(fn, OWN_SIGNATURE, False):
        return True  # already adapted
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if not params or params[0].kind not in _POSITIONAL:
        return False
    first = params[0]
    if first.name == "g":
        return True
    annotation = first.annotation
    if isinstance(annotation, str):
        return annotation.strip("'\"").rsplit(".", 1)[-1] in _BUILDER_TYPES
    return isinstance(annotation, type) and any(
        c.__name__ in _BUILDER_TYPES and c.__module__.startswith("onnxport.")
        for c in annotation.__mro__)


def user_translation(function: Any) -> Callable[..., Any]:
    """A translation `(g, ...)` for a user's function (or list of functions) in any form."""
    if isinstance(function, (list, tuple)):
        functions = list(_flatten(function))
        if not functions:
            raise ValueError("an empty list of translations")
        if len(functions) == 1:
            return user_translation(functions[0])
        return _overloaded([user_translation(f) for f in functions])
    if not callable(function):
        raise TypeError(f"a translation must be a function, got {type(function).__name__}")
    if is_onnxscript_function(function):
        return as_translation(function)
    if is_onnxport_translation(function):
        return function
    return _traced_translation(function, function, getattr(function, "__name__", "traced"))


def _flatten(functions: Sequence[Any]) -> Any:
    for f in functions:
        if isinstance(f, (list, tuple)):
            yield from _flatten(f)
        else:
            yield f


# -- binding a node's arguments to a function's own signature ------------------------------

def _is_tensor(value: Any) -> bool:
    if isinstance(value, ir.Value):
        return True
    return isinstance(value, (list, tuple)) and any(_is_tensor(v) for v in value)


def _node_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> NodeArguments:
    """What the translator passed: one NodeArguments, or plain values (from a caller that
    binds by itself, such as an onnxscript function called inside a traced one)."""
    if len(args) == 1 and not kwargs and isinstance(args[0], NodeArguments):
        return args[0]
    return NodeArguments.from_values(args, kwargs)


def bind_to_signature(arguments: NodeArguments, signature: inspect.Signature
                      ) -> tuple[list[Any], dict[str, Any], list[Argument]]:
    """Call arguments for a function of `signature`, and the arguments the node gives that it
    does not declare (non-tensors, which are left out).

    Raises:
        TypeError: a tensor argument has no parameter, or a required parameter no argument.
    """
    params = list(signature.parameters.values())
    positional_params = [p for p in params if p.kind in _POSITIONAL]
    by_name = {p.name: p for p in params if p.kind in _BY_NAME}
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    assigned: dict[str, Argument] = {}
    extra_positional: list[Argument] = []
    extra_keywords: dict[str, Argument] = {}
    left_out: list[Argument] = []
    for i, arg in enumerate(a for a in arguments if not a.kwarg_only):
        if i < len(positional_params):
            assigned[positional_params[i].name] = arg
        elif var_positional:
            extra_positional.append(arg)
        elif arg.name in by_name and arg.name not in assigned:
            assigned[arg.name] = arg  # type: ignore[index]
        else:
            left_out.append(arg)
    for arg in (a for a in arguments if a.kwarg_only):
        assert arg.name is not None
        if arg.name in by_name and arg.name not in assigned:
            assigned[arg.name] = arg
        elif var_keyword and arg.name not in assigned:
            extra_keywords[arg.name] = arg
        else:
            left_out.append(arg)
    for arg in left_out:
        if arg.given and _is_tensor(arg.value):
            where = f"'{arg.name}'" if arg.name else "a positional argument"
            raise TypeError(f"no parameter of {signature} takes the tensor argument {where}")
    while extra_positional and not extra_positional[-1].given:
        extra_positional.pop()

    call_args: list[Any] = []
    call_kwargs: dict[str, Any] = {}
    gaps: list[inspect.Parameter] = []  # positional parameters left to their defaults

    def fill_gaps() -> None:
        for gap in gaps:
            arg = assigned.get(gap.name)
            call_args.append(arg.value if arg is not None else gap.default)
        gaps.clear()

    for p in positional_params:
        arg = assigned.get(p.name)
        if arg is None or (not arg.given and p.default is not p.empty):
            if arg is None and p.default is p.empty:
                raise TypeError(f"the node has no argument for the parameter '{p.name}' of "
                                f"{signature}")
            gaps.append(p)
        elif p.kind is p.POSITIONAL_ONLY or not gaps:
            fill_gaps()
            call_args.append(arg.value)
        else:
            call_kwargs[p.name] = arg.value
    if extra_positional:
        fill_gaps()
        call_args.extend(a.value for a in extra_positional)
    for p in params:
        if p.kind is not p.KEYWORD_ONLY:
            continue
        arg = assigned.get(p.name)
        if arg is not None and (arg.given or p.default is p.empty):
            call_kwargs[p.name] = arg.value
        elif arg is None and p.default is p.empty:
            raise TypeError(f"the node has no argument for the parameter '{p.name}' of "
                            f"{signature}")
    call_kwargs.update({k: a.value for k, a in extra_keywords.items() if a.given})
    dropped = [a for a in left_out if a.given and a.value is not None]
    return call_args, call_kwargs, dropped


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001  (unresolvable annotations: keep them as written)
        return signature
    return signature.replace(parameters=[
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()])


def _own_signature(translate: Callable[..., Any], wrapped: Callable[..., Any],
                   signature: inspect.Signature | None, name: str) -> Callable[..., Any]:
    setattr(translate, OWN_SIGNATURE, True)
    translate.__name__ = name  # type: ignore[attr-defined]
    translate.__qualname__ = name  # type: ignore[attr-defined]
    translate.__wrapped__ = wrapped  # type: ignore[attr-defined]  (error messages' location)
    translate._onnxport_signature = signature  # type: ignore[attr-defined]
    return translate


# -- tracing: onnxscript ops called by a Python function become nodes of g -----------------

class _BuilderEvaluator:
    """An onnxscript evaluator that appends each op a traced function calls to `g`'s graph."""

    def __init__(self, g: Any) -> None:
        self.g = g

    def eval_op(self, op: Any, args: Any, kwargs: Any) -> Any:
        schema = op.op_schema
        args = list(args)
        kwargs = dict(kwargs)
        if schema is not None:
            # Inputs given by name (op.Sub(A=x, B=y)) go to their place.
            names = [i.name for i in schema.inputs]
            if any(k in names for k in kwargs):
                args += [None] * (len(names) - len(args))
                for index, input_name in enumerate(names):
                    if input_name in kwargs:
                        args[index] = kwargs.pop(input_name)
        if (op.name == "CastLike" and not op.opset.domain and len(args) == 2 and not kwargs
                and isinstance(args[0], (bool, int, float)) and isinstance(args[1], ir.Value)
                and args[1].dtype is not None):
            return self.g.const(args[0], like=args[1])  # a Python number cast: a constant
        num_outputs = 1
        if schema is not None and schema.outputs and not any(
                o.option.name == "Variadic" for o in schema.outputs):
            num_outputs = len(schema.outputs)
        elif op.name == "Split" and not op.opset.domain and kwargs.get("num_outputs"):
            num_outputs = int(kwargs["num_outputs"])
        attrs = {k: v for k, v in kwargs.items() if v is not None}
        return self.g.op(op.name, *args, domain=op.opset.domain or None, outputs=num_outputs,
                         **attrs)

    def eval_function(self, function: Any, args: Any, kwargs: Any) -> Any:
        return as_translation(function)(self.g, *args, **kwargs)


def _traced_translation(function: Any, python_fn: Callable[..., Any], name: str
                        ) -> Callable[..., Any]:
    """A translation that runs `python_fn` with its onnxscript ops appended to the graph."""
    signature = _signature(python_fn)

    def translate(g: Any, *args: Any, **kwargs: Any) -> Any:
        import onnxscript.evaluator

        call_args, call_kwargs, _ = bind_to_signature(_node_arguments(args, kwargs), signature)
        with onnxscript.evaluator.default_as(_BuilderEvaluator(g)):
            return python_fn(*call_args, **call_kwargs)

    return _own_signature(translate, python_fn, signature, f"traced_{name}")


def as_translation(function: Any) -> Callable[..., Any]:
    """A translation `(g, ...)` that calls the onnxscript `function` as a model-local ONNX
    function (tensor parameters become node inputs, the others node attributes); a
    TracedOnnxFunction (trace_only) is run instead, its ops appended to the graph."""
    if not hasattr(function, "to_function_proto"):
        return _traced_translation(function, function.func, f"onnxscript_{function.name}")
    proto = function.to_function_proto()
    input_names = list(proto.input)
    attr_names = [a.name for a in proto.attribute_proto] + list(proto.attribute)
    python_fn = getattr(function, "function", None)
    try:
        signature = _signature(python_fn) if python_fn is not None else None
    except (TypeError, ValueError):
        signature = None
    if signature is None:
        signature = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                       for n in input_names + attr_names])
    num_outputs = len(proto.output)

    def translate(g: Any, *args: Any, **kwargs: Any) -> Any:
        call_args, call_kwargs, _ = bind_to_signature(_node_arguments(args, kwargs), signature)
        bound = signature.bind_partial(*call_args, **call_kwargs).arguments
        inputs = [bound.get(name) for name in input_names]
        attrs = {name: bound[name] for name in attr_names if bound.get(name) is not None}
        result = g.onnxscript_op(function, *inputs, outputs=num_outputs, **attrs)
        _type_outputs(result, signature, bound)
        return result

    return _own_signature(translate, python_fn or function, signature, f"onnxscript_{proto.name}")


def _type_outputs(result: Any, signature: inspect.Signature, bound: dict[str, Any]) -> None:
    """Give a function call's outputs the dtype its return annotation states (FLOAT), or that
    of the input sharing its TypeVar, so ops after it (in a traced function) infer theirs."""
    returns = signature.return_annotation
    annotations = typing.get_args(returns) if typing.get_origin(returns) is tuple else (returns,)
    outputs = result if isinstance(result, tuple) else (result,)
    for out, annotation in zip(outputs, annotations):
        if not isinstance(out, ir.Value) or out.dtype is not None:
            continue
        allowed = _allowed_dtypes(annotation)
        if allowed is not None and len(allowed) == 1:
            out.dtype = ir.DataType(next(iter(allowed)))
        elif isinstance(annotation, typing.TypeVar):
            out.dtype = next((v.dtype for name, v in bound.items() if isinstance(v, ir.Value)
                              and signature.parameters[name].annotation is annotation), None)


# -- a list of translations: the first whose signature fits the node -----------------------

def _allowed_dtypes(annotation: Any) -> set[int] | None:
    """The ONNX dtypes a tensor annotation allows (onnxscript's FLOAT, INT64[...], a TypeVar
    of them, a Union or Optional of them); None: not a tensor annotation."""
    dtype = getattr(annotation, "dtype", None)
    if isinstance(annotation, type) and dtype is not None:
        try:
            return {int(dtype)}
        except (TypeError, ValueError):
            return None
    if isinstance(annotation, typing.TypeVar):
        members = list(annotation.__constraints__) or (
            [annotation.__bound__] if annotation.__bound__ is not None else [])
    elif typing.get_origin(annotation) is typing.Union or type(annotation).__name__ == "UnionType":
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
    else:
        return None
    found: set[int] = set()
    for member in members:
        allowed = _allowed_dtypes(member)
        if allowed is None:
            return None
        found |= allowed
    return found or None


_ATTRIBUTE_TYPES: dict[Any, tuple[type, ...]] = {
    int: (int,), float: (int, float), bool: (bool, int), str: (str,)}


def _fits(annotation: Any, value: Any) -> bool:
    """Whether `value` fits a parameter annotated `annotation` (unknown annotations: yes)."""
    if annotation is inspect.Parameter.empty or annotation is Any or value is None:
        return True
    allowed = _allowed_dtypes(annotation)
    if allowed is not None:
        if isinstance(value, ir.Value):
            return value.dtype is None or int(value.dtype) in allowed
        return isinstance(value, (int, float, bool))  # a Python scalar becomes a constant
    if annotation in _ATTRIBUTE_TYPES:
        return not _is_tensor(value) and isinstance(value, _ATTRIBUTE_TYPES[annotation])
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, Sequence) or (isinstance(origin, type) and
                                             issubclass(origin, Sequence) and origin is not str):
        if not isinstance(value, (list, tuple)):
            return False
        (item, *_) = typing.get_args(annotation) or (Any,)
        return all(_fits(item, v) for v in value)
    return True


def _overloaded(translations: list[Callable[..., Any]]) -> Callable[..., Any]:
    """A translation that calls, per node, the first of `translations` that fits it.

    A translation in onnxport's form fits every node. One binding its own signature fits
    when the node's arguments bind to it (no tensor left over, no required parameter
    missing) and each argument fits the parameter's annotation: a tensor's dtype one the
    onnxscript type (FLOAT, a TypeVar of types, ...) allows, an attribute the Python type
    (int, float, str, bool, a sequence of them). A fitting translation that declares every
    argument the node gives wins over one that leaves some out; else the list order decides.
    """

    def choose(arguments: NodeArguments) -> tuple[Callable[..., Any], str]:
        best: Callable[..., Any] | None = None
        reasons = []
        for fn in translations:
            signature = getattr(fn, "_onnxport_signature", None)
            if not getattr(fn, OWN_SIGNATURE, False) or signature is None:
                return fn, "onnxport"
            try:
                call_args, call_kwargs, dropped = bind_to_signature(arguments, signature)
                bound = signature.bind(*call_args, **call_kwargs).arguments
            except TypeError as e:
                reasons.append(f"{_name(fn)}: {e}")
                continue
            misfits = [name for name, value in bound.items()
                       if signature.parameters[name].kind not in (
                           inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
                       and not _fits(signature.parameters[name].annotation, value)]
            if misfits:
                reasons.append(f"{_name(fn)}: the argument(s) {', '.join(misfits)} do not "
                               f"fit the annotations of {signature}")
                continue
            if not dropped:
                return fn, "own"
            best = best or fn
        if best is not None:
            return best, "own"
        raise TypeError("no translation in the list fits the node: " + "; ".join(reasons))

    def translate(g: Any, *args: Any, **kwargs: Any) -> Any:
        arguments = _node_arguments(args, kwargs)
        fn, form = choose(arguments)
        if form == "own":
            return fn(g, arguments)
        positional, keywords = arguments.for_translation(fn)
        return fn(g, *positional, **keywords)

    first = translations[0]
    return _own_signature(translate, inspect.unwrap(first), None,
                          "overloads_" + "_".join(_name(f) for f in translations))


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__
