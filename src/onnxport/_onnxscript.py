"""Adapts users' onnxscript functions (OnnxFunction / TracedOnnxFunction) to translations."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def is_onnxscript_function(fn: Any) -> bool:
    """Whether `fn` is an onnxscript OnnxFunction or TracedOnnxFunction."""
    return hasattr(fn, "opset") and (callable(getattr(fn, "to_function_proto", None))
                                     or callable(getattr(fn, "func", None)))


class _BuilderEvaluator:
    """An onnxscript evaluator that appends each op a traced function calls to `g`'s graph."""

    def __init__(self, g: Any) -> None:
        self.g = g

    def eval_op(self, op: Any, args: Any, kwargs: Any) -> Any:
        schema = op.op_schema
        num_outputs = 1
        if schema is not None and schema.outputs and not any(
                o.option.name == "Variadic" for o in schema.outputs):
            num_outputs = len(schema.outputs)
        attrs = {k: v for k, v in kwargs.items() if v is not None}
        return self.g.op(op.name, *args, domain=op.opset.domain, outputs=num_outputs, **attrs)

    def eval_function(self, function: Any, args: Any, kwargs: Any) -> Any:
        return as_translation(function)(self.g, *args, **kwargs)


def _traced_translation(function: Any) -> Callable[..., Any]:
    """A translation that runs a TracedOnnxFunction, its ops inlined into the graph."""
    import onnxscript.evaluator

    def translate(g: Any, *args: Any, **kwargs: Any) -> Any:
        params = list(inspect.signature(function.func).parameters)
        bound = dict(zip(params, args))
        bound.update({k: v for k, v in kwargs.items() if k in params})
        with onnxscript.evaluator.default_as(_BuilderEvaluator(g)):
            return function.func(**bound)

    translate.__name__ = f"onnxscript_{function.name}"
    translate.__qualname__ = translate.__name__
    return translate


def as_translation(function: Any) -> Callable[..., Any]:
    """A translation `(g, *args, **kwargs)` that calls `function` as a model-local ONNX function.

    ATen arguments bind to the onnxscript function's Python parameters by position (or name);
    tensor parameters become node inputs, the others node attributes. A TracedOnnxFunction
    (trace_only) is run instead, its ops appended to the graph.
    """
    if not hasattr(function, "to_function_proto"):
        return _traced_translation(function)
    proto = function.to_function_proto()
    input_names = list(proto.input)
    attr_names = [a.name for a in proto.attribute_proto] + list(proto.attribute)
    python_fn = getattr(function, "function", None)
    try:
        params = list(inspect.signature(python_fn).parameters) if python_fn else input_names + attr_names
    except (TypeError, ValueError):
        params = input_names + attr_names
    num_outputs = len(proto.output)

    def translate(g: Any, *args: Any, **kwargs: Any) -> Any:
        bound = dict(zip(params, args))
        bound.update({k: v for k, v in kwargs.items() if k in params})
        inputs = [bound.get(name) for name in input_names]
        attrs = {name: bound[name] for name in attr_names if bound.get(name) is not None}
        return g.onnxscript_op(function, *inputs, outputs=num_outputs, **attrs)

    translate.__name__ = f"onnxscript_{proto.name}"
    translate.__qualname__ = translate.__name__
    return translate
