"""Adapts users' onnxscript functions (OnnxFunction / TracedOnnxFunction) to translations."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def is_onnxscript_function(fn: Any) -> bool:
    """Whether `fn` is an onnxscript OnnxFunction or TracedOnnxFunction."""
    return callable(getattr(fn, "to_function_proto", None)) and hasattr(fn, "opset")


def as_translation(function: Any) -> Callable[..., Any]:
    """A translation `(g, *args, **kwargs)` that calls `function` as a model-local ONNX function.

    ATen arguments bind to the onnxscript function's Python parameters by position (or name);
    tensor parameters become node inputs, the others node attributes.
    """
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
