"""Scalars of the TorchScript flavour: ScalarType codes and the ops on Python numbers.

TorchScript passes dtypes as ScalarType ints, and tracing records size arithmetic as nodes
(`aten::size`, `aten::Int`, `aten::__getitem__`, `aten::len`, int/float `add`, `floordiv`, ...).
Their handlers compute on Python numbers where the operands are known, else on 0-d ONNX
values marked as scalars (`ts_graph._mark_scalar`), typed after the node's output type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.errors import TranslationError
from onnxport.translate.builder import GraphBuilder
from onnxport.translate.ts_graph import SIZE_HINT, _mark_scalar, _type_info

if TYPE_CHECKING:
    from onnxport.translate.ts_context import ScriptTranslation

# ScalarType codes (TorchScript passes dtypes as ints) -> torch dtypes.
_SCALAR_TYPES = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
    5: torch.float16, 6: torch.float32, 7: torch.float64, 8: torch.complex32,
    9: torch.complex64, 10: torch.complex128, 11: torch.bool, 15: torch.bfloat16,
}
_TORCH_TO_CODE = {v: k for k, v in _SCALAR_TYPES.items()}


def cast(g: GraphBuilder, x: Any, dtype: ir.DataType) -> Any:
    """`x` as `dtype`: a Cast for a value of another dtype, a constant for a Python number."""
    if isinstance(x, ir.Value):
        return x if x.dtype == dtype else g.op("Cast", x, to=dtype)
    return g.const(x, dtype)


def _int_list(g: GraphBuilder, items: Sequence[Any]) -> ir.Value:
    """A 1-D int64 tensor from Python ints and int64 scalar values."""
    if all(not isinstance(i, ir.Value) for i in items):
        return g.const([int(i) for i in items], ir.DataType.INT64)
    parts = [g.op("Reshape", cast(g, i, ir.DataType.INT64), g.const([1], ir.DataType.INT64))
             if isinstance(i, ir.Value) else g.const([int(i)], ir.DataType.INT64) for i in items]
    return g.op("Concat", *parts, axis=0)


def _floor_div_int(g: GraphBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's floor division on ints (ONNX Div truncates toward zero)."""
    q = g.op("Div", a, b)
    inexact = g.op("Not", g.op("Equal", g.op("Mul", q, b), a))
    signs_differ = g.op("Xor", g.op("Less", a, g.const(0, like=a)), g.op("Less", b, g.const(0, like=b)))
    return g.op("Sub", q, g.op("Cast", g.op("And", inexact, signs_differ), to=q.dtype))


def _to_scalar(dtype: ir.DataType | None, py: Callable[[Any], Any]) -> Callable[..., None]:
    def handler(t: ScriptTranslation, node: torch._C.Node) -> None:
        value = t._get(node.input())
        if not isinstance(value, ir.Value):
            t._set(node.output(), py(value) if py is not None else value)
            return
        if value.const_value is not None and value.const_value.size == 1:
            t._set(node.output(), py(value.const_value.numpy().item()))
            return
        if value.shape is None or len(value.shape) != 0:
            value = t.g.op("Reshape", value, t.g.const([], ir.DataType.INT64))
            value.shape = ir.Shape([])
        result = cast(t.g, value, dtype) if dtype is not None else value
        t._set(node.output(), _mark_scalar(result))

    return handler


def _size(t: ScriptTranslation, node: torch._C.Node) -> None:
    inputs = [t._get(v) for v in node.inputs()]
    x = inputs[0]
    shape = x.shape
    static = shape is not None and all(isinstance(d, int) for d in shape)
    if len(inputs) == 1:
        result = list(shape) if static else t.g.op("Shape", x)
        if not static and shape is not None:
            result.shape = ir.Shape([len(shape)])
            hint = t._hints.get(id(x))
            if hint is not None and len(hint) == len(shape):
                result.meta[SIZE_HINT] = [int(d) for d in hint]
    else:
        dim = inputs[1]
        if static and isinstance(dim, int):
            result = int(shape[dim])
        else:
            result = t.g.op("Gather", t.g.op("Shape", x), cast(t.g, dim, ir.DataType.INT64), axis=0)
            result.shape = ir.Shape([])
            _mark_scalar(result)
            hint = t._hints.get(id(x))
            if isinstance(dim, int) and hint is not None and -len(hint) <= dim < len(hint):
                # The example's size, for meta inference (ts_graph._meta_infos) downstream.
                result.meta[SIZE_HINT] = int(hint[dim])
    t._set(node.output(), result)


def _numel(t: ScriptTranslation, node: torch._C.Node) -> None:
    x = t._get(node.input())
    if x.shape is not None and all(isinstance(d, int) for d in x.shape):
        t._set(node.output(), math.prod(int(d) for d in x.shape))
        return
    out = t.g.op("Size", x)
    out.shape = ir.Shape([])
    t._set(node.output(), _mark_scalar(out))


def _shape_as_tensor(t: ScriptTranslation, node: torch._C.Node) -> None:
    x = t._get(node.input())
    out = t.g.op("Shape", x)
    out.shape = ir.Shape([len(x.shape)]) if x.shape is not None else None
    t._set(node.output(), out)


def _tensor(t: ScriptTranslation, node: torch._C.Node) -> None:
    """aten::tensor.int / .float / .bool (torch.tensor of a number): its dtype is the node's."""
    value = t._get(node.inputsAt(0))
    code = t._get(node.inputsAt(1))
    dtype = _dtypes.to_ir(_SCALAR_TYPES[code]) if isinstance(code, int) else \
        t.info(node.output())[0]
    if dtype is None:  # torch.tensor's own choice for a Python number
        kind = node.inputsAt(0).type()
        dtype = ir.DataType.BOOL if isinstance(kind, torch._C.BoolType) else \
            ir.DataType.INT64 if isinstance(kind, torch._C.IntType) else ir.DataType.FLOAT
    out = cast(t.g, value, dtype) if isinstance(value, ir.Value) else t.g.const(value, dtype)
    if not isinstance(value, (list, tuple)):
        out.shape = ir.Shape([])
    t._set(node.output(), out)


def _dim(t: ScriptTranslation, node: torch._C.Node) -> None:
    x = t._get(node.input())
    t._set(node.output(), len(x.shape))


def _getitem(t: ScriptTranslation, node: torch._C.Node) -> None:
    seq, index = (t._get(v) for v in node.inputs())
    if isinstance(seq, dict):
        t._set(node.output(), seq[index])
        return
    if isinstance(seq, (list, tuple)) and isinstance(index, int):
        t._set(node.output(), seq[index])
        return
    g = t.g
    index = cast(g, index, ir.DataType.INT64)
    if isinstance(seq, (list, tuple)):
        if all(isinstance(v, ir.Value) and v.shape is not None and len(v.shape) == 0 for v in seq) \
                or all(not isinstance(v, ir.Value) for v in seq):
            seq = _int_list(g, seq)
        else:
            seq = g.op("SequenceConstruct", *seq)
    if seq.type is not None and isinstance(seq.type, ir.SequenceType):
        t._set(node.output(), g.op("SequenceAt", seq, index))
        return
    out = g.op("Gather", seq, index, axis=0)
    out.shape = ir.Shape([])
    t._set(node.output(), _mark_scalar(out))


def _len(t: ScriptTranslation, node: torch._C.Node) -> None:
    seq = t._get(node.input())
    if isinstance(seq, (list, tuple)):
        t._set(node.output(), len(seq))
    elif isinstance(seq, ir.Value) and isinstance(seq.type, ir.SequenceType):
        t._set(node.output(), _mark_scalar(t.g.op("SequenceLength", seq)))
    else:
        out = t.g.op("Gather", t.g.op("Shape", seq), t.g.const(0, ir.DataType.INT64), axis=0)
        out.shape = ir.Shape([])
        t._set(node.output(), _mark_scalar(out))


def _scalar_binary(op_type: str, py: Callable[..., Any]) -> Callable[..., None]:
    def handler(t: ScriptTranslation, node: torch._C.Node) -> None:
        operands = [t._get(v) for v in node.inputs()]
        if not any(isinstance(x, ir.Value) for x in operands):
            t._set(node.output(), py(*operands))
            return
        if len(operands) == 1:
            out = t.g.op(op_type, operands[0])
            out.shape = ir.Shape([])
            t._set(node.output(), _mark_scalar(out))
            return
        a, b = operands
        dtype, _ = _type_info(node.output().type())
        g = t.g
        if dtype == ir.DataType.BOOL and op_type in ("And", "Or"):
            operand = ir.DataType.BOOL
        elif dtype == ir.DataType.BOOL:
            operand = ir.DataType.FLOAT if any(
                isinstance(x, float) or (isinstance(x, ir.Value) and x.dtype is not None
                                         and x.dtype.is_floating_point()) for x in (a, b)) \
                else ir.DataType.INT64
        else:
            operand = dtype or ir.DataType.INT64
        a, b = cast(g, a, operand), cast(g, b, operand)
        if op_type == "FloorDiv":
            out = _floor_div_int(g, a, b) if not operand.is_floating_point() else \
                g.op("Floor", g.op("Div", a, b))
        elif op_type == "Mod":
            out = g.op("Mod", a, b, fmod=1 if operand.is_floating_point() else 0)
            if operand.is_floating_point():
                # Python's float % takes the divisor's sign.
                fix = g.op("And", g.op("Not", g.op("Equal", out, g.const(0.0, like=out))),
                           g.op("Xor", g.op("Less", out, g.const(0.0, like=out)),
                                g.op("Less", b, g.const(0.0, like=b))))
                out = g.op("Where", fix, g.op("Add", out, b), out)
        elif op_type == "NotEqual":
            out = g.op("Not", g.op("Equal", a, b))
        else:
            out = g.op(op_type, a, b)
        out.shape = ir.Shape([])
        t._set(node.output(), _mark_scalar(out))

    return handler


# Scalar arithmetic on ints/floats (TorchScript's `int + int` etc.): schema-less shorthands.
_SCALAR_OPS = {
    "add": ("Add", lambda a, b: a + b), "sub": ("Sub", lambda a, b: a - b),
    "mul": ("Mul", lambda a, b: a * b), "floordiv": ("FloorDiv", lambda a, b: a // b),
    "eq": ("Equal", lambda a, b: a == b), "ne": ("NotEqual", lambda a, b: a != b),
    "lt": ("Less", lambda a, b: a < b), "gt": ("Greater", lambda a, b: a > b),
    "le": ("LessOrEqual", lambda a, b: a <= b), "ge": ("GreaterOrEqual", lambda a, b: a >= b),
    "div": ("Div", lambda a, b: a / b), "remainder": ("Mod", lambda a, b: a % b),
    "__and__": ("And", lambda a, b: a and b), "__or__": ("Or", lambda a, b: a or b),
    "neg": ("Neg", lambda a: -a),
}


def _range_length(t: ScriptTranslation, node: torch._C.Node) -> None:
    """`len(range(lo, hi, step))` (aten::__range_length), the trip count of `for i in range`."""
    lo, hi, step = (t._get(v) for v in node.inputs())
    if not any(isinstance(x, ir.Value) for x in (lo, hi, step)):
        t._set(node.output(), len(range(lo, hi, step)))
        return
    if isinstance(step, ir.Value):
        raise TranslationError("range() with a step known only at run time")
    if step == 0:
        raise TranslationError("range() arg 3 must not be zero")
    g = t.g
    lo, hi = cast(g, lo, ir.DataType.INT64), cast(g, hi, ir.DataType.INT64)
    # ceil((hi - lo) / step) for step > 0, else ceil((lo - hi) / -step); never below 0 (a
    # negative numerator only matters through the clamp, so Div's truncation is exact here).
    span = g.op("Sub", hi, lo) if step > 0 else g.op("Sub", lo, hi)
    size = abs(step)
    if size != 1:
        span = g.op("Div", g.op("Add", span, g.const(size - 1, ir.DataType.INT64)),
                    g.const(size, ir.DataType.INT64))
    out = g.op("Max", span, g.const(0, ir.DataType.INT64))
    out.shape = ir.Shape([])
    t._set(node.output(), _mark_scalar(out))


def _derive_index(t: ScriptTranslation, node: torch._C.Node) -> None:
    """The loop variable of `for i in range(start, ..., step)` at iteration `index`."""
    index, start, step = (t._get(v) for v in node.inputs())
    if not any(isinstance(x, ir.Value) for x in (index, start, step)):
        t._set(node.output(), start + index * step)
        return
    g = t.g
    out = g.op("Add", cast(g, start, ir.DataType.INT64),
               g.op("Mul", cast(g, index, ir.DataType.INT64), cast(g, step, ir.DataType.INT64)))
    out.shape = ir.Shape([])
    t._set(node.output(), _mark_scalar(out))


def is_scalar_node(node: torch._C.Node) -> bool:
    """Whether an aten node is arithmetic on Python numbers (int/float/bool operands)."""
    kind = node.kind()
    if not kind.startswith("aten::") or kind[6:] not in _SCALAR_OPS:
        return False
    return all(isinstance(v.type(), (torch._C.IntType, torch._C.FloatType, torch._C.BoolType,
                                     torch._C.NumberType)) for v in node.inputs())


_SCALAR_HANDLERS = {name: _scalar_binary(op, py) for name, (op, py) in _SCALAR_OPS.items()}
