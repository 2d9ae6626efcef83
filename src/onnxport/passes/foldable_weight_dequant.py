"""FoldableWeightDequantPass: a constant weight's DequantizeLinear as arithmetic runtimes fold.

ONNX Runtime never constant-folds DequantizeLinear (its QDQ fusions need the nodes), and has
no fast kernel for a blocked one: a weight-only model written as `DequantizeLinear(W_int) ->
MatMul` dequantizes its weights at every call (the int4 MLP 512-2048-512: 18 ms at M=1 where
float takes 1.0 ms; docs/quantization.md). The same computation written as

    per tensor / per axis:  Mul(Sub(Cast(W_int), zero_point), scale)     (Sub only if zp != 0)
    blocked (axis a, b):    Reshape(Mul(Sub(Reshape(Cast(W_int), [.., n/b, b, ..]), zp), scale),
                                    W's shape)       scale/zp [.., n/b, 1, ..]

is folded into a float weight when the session loads (Cast of INT4/INT8 initializers
included), so the model runs at float speed while the file keeps the integer weights. Exact:
DequantizeLinear computes `(W - zp) * scale` in float32, and so do these nodes.

Matched: DequantizeLinear of a constant integer tensor with a constant float32 scale (and
zero point), per tensor, per axis, or blocked by a block size dividing its axis, whose
consumers do not look like a QDQ kernel, i.e. none reads another input dequantized from a
computed value (PT2E's static flows: those weights stay DequantizeLinear so ORT forms
QGemm/QLinearConv). `dequantized_weight(value)` reads either form back (FuseMatMulNBitsPass).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_INTS = (ir.DataType.INT4, ir.DataType.UINT4, ir.DataType.INT8, ir.DataType.UINT8,
         ir.DataType.INT16, ir.DataType.UINT16)


@dataclasses.dataclass
class Dequantized:
    """A constant weight dequantized as DequantizeLinear computes it: the integer constant
    `weight` of `shape`, `scale` and `zero` of DequantizeLinear's layout (a scalar;
    [dims[axis]]; dims with axis cut to blocks), `block` 0 when not blocked; `nodes` compute
    it from the constants. `ints()` reads the integers (as int32)."""

    weight: ir.Value
    shape: tuple[int, ...]
    dtype: ir.DataType
    scale: np.ndarray
    zero: np.ndarray | None
    axis: int
    block: int
    nodes: list[ir.Node]

    def ints(self) -> np.ndarray:
        data = f.constant(self.weight)
        assert data is not None
        return data.astype(np.int32)


def _const_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """The static shape of a constant (an initializer with data or a Constant's output)."""
    if value is None or value.is_graph_input() or value.dtype not in _INTS:
        return None
    tensor = value.const_value
    if tensor is None:
        node = value.producer()
        attr = None if node is None or node.op_type != "Constant" or node.domain \
            else node.attributes.get("value")
        if attr is None or attr.type != ir.AttributeType.TENSOR:
            return None
        tensor = attr.as_tensor()
    return tuple(int(d) for d in tensor.shape)


def _attr(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return default if a is None else int(a.value)


def _from_dq(dq: ir.Node) -> Dequantized | None:
    w, scale = dq.inputs[0], dq.inputs[1]
    zero = dq.inputs[2] if len(dq.inputs) > 2 else None
    shape = _const_shape(w)
    s = f.constant(scale)
    z = None if zero is None else f.constant(zero)
    if shape is None or s is None or (zero is not None and z is None) or s.dtype != np.float32:
        return None
    if _attr(dq, "output_dtype", 0) not in (0, ir.DataType.FLOAT):
        return None
    axis = _attr(dq, "axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    block = _attr(dq, "block_size", 0)
    if s.size == 1 and not block:
        s, z = s.reshape(()), None if z is None else z.reshape(())
    elif not 0 <= axis < len(shape):
        return None
    elif block:  # the last block may be partial
        if s.shape != tuple(-(-n // block) if i == axis else n for i, n in enumerate(shape)):
            return None
    elif s.shape != (shape[axis],):
        return None
    if z is not None and z.shape != s.shape:
        return None
    return Dequantized(w, shape, w.dtype, s,  # type: ignore[arg-type]
                       None if z is None else z.astype(np.int32), axis, block, [dq])


def _from_arithmetic(value: ir.Value) -> Dequantized | None:
    """The form FoldableWeightDequantPass writes, read back."""
    nodes: list[ir.Node] = []
    out_reshape = f.producer(value, "Reshape")
    if out_reshape is not None:
        nodes.append(out_reshape)
        value = out_reshape.inputs[0]
    mul = f.producer(value, "Mul")
    if mul is None:
        return None
    nodes.append(mul)
    s = f.constant(mul.inputs[1])
    if s is None or s.dtype != np.float32:
        return None
    value, z = mul.inputs[0], None
    sub = f.producer(value, "Sub")
    if sub is not None:
        z = f.constant(sub.inputs[1])
        if z is None or not np.all(z == np.round(z)):
            return None
        nodes.append(sub)
        value = sub.inputs[0]
    split = f.producer(value, "Reshape")
    if (split is None) != (out_reshape is None):
        return None
    if split is not None:
        nodes.append(split)
        value = split.inputs[0]
    cast = f.producer(value, "Cast")
    if cast is None or cast.outputs[0].dtype != ir.DataType.FLOAT:
        return None
    nodes.append(cast)
    w = cast.inputs[0]
    shape = _const_shape(w)
    if shape is None or w is None:
        return None
    dims = list(shape)
    if z is not None and z.shape != s.shape:
        return None
    if split is None:
        along = [i for i, n in enumerate(s.shape) if n != 1]
        if s.size == 1:
            axis, block, layout = 0, 0, ()
        elif s.ndim == len(dims) and len(along) == 1 and s.shape[along[0]] == dims[along[0]]:
            axis, block, layout = along[0], 0, (dims[along[0]],)
        else:
            return None
    else:
        split_to = f.constant(split.inputs[1])
        if split_to is None or s.ndim != len(dims) + 1 or len(split_to) != len(dims) + 1:
            return None
        split_to = [int(n) for n in split_to]
        axis = next((i for i in range(len(dims)) if split_to[i] != dims[i]), -1)
        back = f.constant(out_reshape.inputs[1]) if out_reshape is not None else None
        if axis < 0 or split_to[axis] * split_to[axis + 1] != dims[axis] \
                or split_to[axis + 2:] != dims[axis + 1:] or back is None \
                or list(back) != dims or s.shape[axis + 1] != 1:
            return None
        block = split_to[axis + 1]
        layout = tuple(n for i, n in enumerate(s.shape) if i != axis + 1)
    s = s.reshape(layout)
    z = None if z is None else z.reshape(layout).astype(np.int32)
    return Dequantized(w, shape, w.dtype, s, z, axis, block, nodes)


def dequantized_weight(value: ir.Value | None) -> Dequantized | None:
    """The constant weight `value` dequantizes (a DequantizeLinear, or its arithmetic form
    written by FoldableWeightDequantPass), or None."""
    dq = f.producer(value, "DequantizeLinear")
    if dq is not None:
        return _from_dq(dq)
    return None if value is None else _from_arithmetic(value)


_VIEWS = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze")


def _dequantized_activation(value: ir.Value | None) -> bool:
    """Whether `value` is a DequantizeLinear of a computed value (through view ops)."""
    while True:
        node = f.producer(value, "DequantizeLinear", *_VIEWS)
        if node is None:
            return False
        if node.op_type == "DequantizeLinear":
            return f.constant(node.inputs[0]) is None
        value = node.inputs[0]


def _in_qdq_kernel(value: ir.Value) -> bool:
    """Whether a reader of `value` (through view ops) also reads a dequantized activation: a
    QDQ group ORT fuses into an integer kernel, which needs the weight's DequantizeLinear."""
    for user, _ in value.uses():
        if user.op_type in _VIEWS and not user.domain:
            if _in_qdq_kernel(user.outputs[0]):
                return True
        elif any(v is not value and _dequantized_activation(v) for v in user.inputs):
            return True
    return False


class FoldableWeightDequantPass(f.MatchRewritePass):
    """A constant weight's DequantizeLinear as Cast/Reshape/Sub/Mul (folded at session load)."""

    op_types = ("DequantizeLinear",)

    def _match(self, node: ir.Node) -> tuple[Dequantized] | None:
        out = node.outputs[0]
        if not out.uses() or _in_qdq_kernel(out):
            return None
        d = _from_dq(node)
        if d is None or (d.block and d.shape[d.axis] % d.block):
            return None  # a partial last block has no Reshape form
        return (d,)

    def _rewrite(self, graph: ir.Graph, namer: f.Namer, node: ir.Node, d: Dequantized) -> None:
        float_ = ir.DataType.FLOAT
        out_shape = ir.Shape(list(d.shape))
        cast = f.make_node(namer, node, "Cast", [node.inputs[0]], {"to": float_}, dtype=float_,
                           shape=out_shape)
        new = [cast]
        x = cast.outputs[0]
        dims = list(d.shape)
        if d.block:
            split = dims[:d.axis] + [dims[d.axis] // d.block, d.block] + dims[d.axis + 1:]
            param_shape = split[:d.axis + 1] + [1] + split[d.axis + 2:]
            new.append(f.make_node(namer, node, "Reshape",
                                   [x, namer.constant(node, np.array(split, np.int64))],
                                   dtype=float_, shape=ir.Shape(split)))
            x = new[-1].outputs[0]
        elif d.scale.ndim:
            param_shape = [n if i == d.axis else 1 for i, n in enumerate(dims)]
        else:
            param_shape = []
        x_shape = x.shape
        if d.zero is not None and np.any(d.zero):
            zero = namer.constant(node, d.zero.reshape(param_shape).astype(np.float32))
            new.append(f.make_node(namer, node, "Sub", [x, zero], dtype=float_, shape=x_shape))
            x = new[-1].outputs[0]
        scale = namer.constant(node, d.scale.reshape(param_shape).astype(np.float32))
        new.append(f.make_node(namer, node, "Mul", [x, scale], dtype=float_, shape=x_shape))
        x = new[-1].outputs[0]
        if d.block:
            new.append(f.make_node(namer, node, "Reshape",
                                   [x, namer.constant(node, np.array(dims, np.int64))],
                                   dtype=float_, shape=out_shape))
            x = new[-1].outputs[0]
        f.replace(graph, [node], new, node.outputs[0], x)
