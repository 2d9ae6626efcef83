"""Constant folding at build time: numpy evaluations of cheap ONNX ops on known values.

`try_fold` returns the result as a numpy array when every input is a known constant (or,
for Shape/Size, when the input's shape is static) and the result is small; otherwise None.
Only integer and boolean data is folded, plus float constants of a few elements, and never
an initializer (a weight the user may replace), so weights are never copied and
floating-point results never differ from ONNX Runtime's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

_MAX_ELEMENTS = 1024


def _attr(attrs: dict[str, Any], name: str, default: Any) -> Any:
    value = attrs.get(name, default)
    return value


def _shape(v: ir.Value, attrs: dict[str, Any]) -> np.ndarray | None:
    if v.shape is None or not v.shape.is_static():
        return None
    dims = list(v.shape.numpy())
    start = _attr(attrs, "start", 0)
    end = _attr(attrs, "end", None)
    return np.asarray(dims[start:end], dtype=np.int64)


def _unsqueeze(x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    out_rank = x.ndim + axes.size
    for axis in sorted(int(a) % out_rank for a in axes.reshape(-1)):
        x = np.expand_dims(x, axis)
    return x


def _squeeze(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(int(a) % x.ndim for a in axes.reshape(-1)))


def _reshape(x: np.ndarray, shape: np.ndarray, allowzero: int = 0) -> np.ndarray:
    dims = [int(d) for d in shape]
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def _slice(x: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> np.ndarray:
    index = [slice(None)] * x.ndim
    axes_list = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps_list = [1] * len(starts) if steps is None else [int(s) for s in steps]
    for a, s, e, st in zip(axes_list, starts, ends, steps_list):
        index[a] = slice(int(s), int(e), st)
    return x[tuple(index)]


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda a, b: fn(a, b).astype(np.result_type(a, b)) if a.dtype.kind != "b" else fn(a, b)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # ONNX integer Div truncates toward zero.
    return (np.trunc(a / b)).astype(a.dtype) if a.dtype.kind in "iu" else a / b


_FOLDERS: dict[str, Callable[..., np.ndarray]] = {
    "Identity": lambda x: x,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _int_div,
    "Neg": np.negative,
    "Abs": np.abs,
    "Max": lambda *xs: np.maximum.reduce(np.broadcast_arrays(*xs)),
    "Min": lambda *xs: np.minimum.reduce(np.broadcast_arrays(*xs)),
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
    "Not": np.logical_not,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Where": np.where,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Slice": _slice,
}


def constant_data(value: ir.Value | None) -> np.ndarray | None:
    """The data of a constant value (an initializer with data, or a Constant node's output),
    else None. Graph inputs (overridable weights included) are not constants."""
    if value is None or value.is_graph_input():
        return None
    tensor = value.const_value
    if tensor is None:
        node = value.producer()
        if node is None or node.op_type != "Constant" or node.domain:
            return None
        attr = node.attributes.get("value")
        if attr is None or attr.type != ir.AttributeType.TENSOR:
            return None
        tensor = attr.as_tensor()
    try:
        return np.asarray(tensor.numpy())
    except Exception:  # noqa: BLE001  (data not readable, e.g. an external tensor)
        return None


def try_fold(op_type: str, inputs: Sequence[ir.Value | None], attrs: dict[str, Any]) -> np.ndarray | None:
    """The value of `op_type(inputs)` if it is cheap and safe to compute now, else None."""
    if op_type == "Shape" and inputs and inputs[0] is not None:
        return _shape(inputs[0], attrs)
    if op_type == "Size" and inputs and inputs[0] is not None:
        dims = _shape(inputs[0], {})
        return None if dims is None else np.asarray(int(np.prod(dims)), dtype=np.int64)
    if op_type not in _FOLDERS and op_type not in ("Cast", "Concat", "Gather", "ConstantOfShape",
                                                   "Range", "Expand"):
        return None
    arrays: list[np.ndarray | None] = []
    for v in inputs:
        if v is None:
            arrays.append(None)
            continue
        # Weights are never folded: apply_weights and initializers-as-inputs may replace them.
        if v.const_value is None or v.is_initializer():
            return None
        tensor = v.const_value
        if tensor.size > _MAX_ELEMENTS:
            return None
        array = tensor.numpy()
        if array.dtype.kind == "f" and array.size > 8:
            return None
        arrays.append(array)
    if not arrays:
        return None
    try:
        result = _evaluate(op_type, arrays, attrs)
    except (ValueError, IndexError, TypeError, ZeroDivisionError):
        return None
    if result is None or result.size > _MAX_ELEMENTS:
        return None
    return np.asarray(result)


def _evaluate(op_type: str, arrays: list[np.ndarray | None], attrs: dict[str, Any]) -> np.ndarray | None:
    if op_type == "Cast":
        to = ir.DataType(attrs["to"])
        if to in (ir.DataType.BFLOAT16, ir.DataType.STRING) or arrays[0] is None:
            return None
        return arrays[0].astype(to.numpy())
    if op_type == "Concat":
        return np.concatenate([a for a in arrays if a is not None], axis=attrs["axis"])
    if op_type == "Gather":
        data, indices = arrays[0], arrays[1]
        assert data is not None and indices is not None
        return np.take(data, indices, axis=attrs.get("axis", 0))
    if op_type == "ConstantOfShape":
        value = attrs.get("value")
        fill = value.numpy() if value is not None else np.zeros(1, dtype=np.float32)
        assert arrays[0] is not None
        return np.full(tuple(int(d) for d in arrays[0]), fill.reshape(-1)[0], dtype=fill.dtype)
    if op_type == "Range":
        start, limit, delta = arrays
        assert start is not None and limit is not None and delta is not None
        return np.arange(start, limit, delta, dtype=start.dtype)
    if op_type == "Expand":
        x, shape = arrays
        assert x is not None and shape is not None
        target = np.broadcast_shapes(x.shape, tuple(int(d) for d in shape))
        return np.broadcast_to(x, target).copy()
    if op_type == "Squeeze" and len(arrays) == 1:
        return _squeeze(arrays[0])  # type: ignore[arg-type]
    return _FOLDERS[op_type](*arrays)
