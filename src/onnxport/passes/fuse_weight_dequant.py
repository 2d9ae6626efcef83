"""FuseWeightDequantPass: integer weights dequantized by float arithmetic -> DequantizeLinear.

Weight-only quantized models (torchao's Int8WeightOnlyConfig, hand-written int8 layers)
reach the exporter as float arithmetic on an integer constant:

    w = Cast(W_int)  [Transpose before or after the Cast]  [Sub(w, zero_point)]
    1. Mul(w, scale)                         the weight dequantized, then used anywhere
    2. Mul(MatMul(x, w), scale)              the scale applied to the matmul's output
                                             (per output column, or per tensor)

Both become `DequantizeLinear(W_int, scale, zero_point, axis)` [+ Transpose] feeding the same
consumer (2: the MatMul, whose output replaces the Mul's): the form ONNX Runtime's weight
fusions (MatMulNBits, DynamicQuantizeMatMul) and other runtimes recognise. Exact for 1
(DequantizeLinear computes `(W - zero_point) * scale` in float32, as the Cast/Sub/Mul do);
2 moves the scale inside the sum, a float32 rounding difference only.

Matched: W a constant int8/uint8 (or int16/uint16, opset 21) tensor of rank 2; zero point and
scale constants that are per tensor or vary along one axis of W (the output columns for 2).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_INTS = {ir.DataType.INT8: 13, ir.DataType.UINT8: 13, ir.DataType.INT16: 21,
         ir.DataType.UINT16: 21}


class _Chain:
    """w = [Transpose] Cast(W) [Transpose] [- zero_point]: W's [rows, cols] as used."""

    def __init__(self, w: ir.Value, transposed: bool, zero: np.ndarray | None,
                 nodes: list[ir.Node], out: ir.Value) -> None:
        self.w, self.transposed, self.zero, self.nodes, self.out = w, transposed, zero, nodes, out


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """A constant's data, also through Reshape/Unsqueeze/Squeeze of a constant (the scales
    torchao keeps as [N, 1] and views as [N])."""
    data = f.constant(value)
    if data is not None:
        return data
    node = f.producer(value, "Reshape", "Unsqueeze", "Squeeze", "Transpose")
    if node is None or value is None or value.shape is None or not value.shape.is_static():
        return None
    data = f.constant(node.inputs[0])
    if data is None:
        return None
    if node.op_type == "Transpose":
        perm = node.attributes.get("perm")
        data = np.transpose(data, None if perm is None else list(perm.as_ints()))
    return data.reshape([int(d) for d in value.shape])


def _is_transpose_2d(node: ir.Node) -> bool:
    perm = node.attributes.get("perm")
    return perm is None or list(perm.as_ints()) == [1, 0]


def _chain(value: ir.Value | None, opset: int) -> _Chain | None:
    nodes: list[ir.Node] = []
    zero = None
    out = value
    sub = f.producer(value, "Sub")
    if sub is not None:
        zero = _constant(sub.inputs[1])
        if zero is None:
            return None
        nodes.append(sub)
        value = sub.inputs[0]
    transposed = False
    t = f.producer(value, "Transpose")
    if t is not None and _is_transpose_2d(t):
        nodes.append(t)
        transposed, value = True, t.inputs[0]
    cast = f.producer(value, "Cast")
    if cast is None or cast.outputs[0].dtype != ir.DataType.FLOAT:
        return None
    nodes.append(cast)
    value = cast.inputs[0]
    t = f.producer(value, "Transpose")
    if t is not None and _is_transpose_2d(t) and not transposed:
        nodes.append(t)
        transposed, value = True, t.inputs[0]
    if value is None or value.dtype not in _INTS or opset < _INTS[value.dtype] \
            or f.constant(value) is None or f.rank(value) != 2:
        return None
    # every intermediate value is read only inside the chain
    if not f.internal(nodes, out):
        return None
    return _Chain(value, transposed, zero, nodes, out)


def _per_axis(data: np.ndarray, used_shape: list[int]) -> tuple[np.ndarray, int | None] | None:
    """`data` broadcast against a [rows, cols] tensor as (values, axis of the used shape) or
    (scalar, None); None when it varies along both axes or does not broadcast."""
    if data.size == 1:
        return data.reshape(()), None
    if data.ndim > 2 or any(d != 1 for d in data.shape[:-2]):
        return None
    shape = [1] * (2 - data.ndim) + list(data.shape[-2:])
    varying = [i for i, d in enumerate(shape) if d != 1]
    if len(varying) != 1 or shape[varying[0]] != used_shape[varying[0]]:
        return None
    return data.reshape(-1), varying[0]


class FuseWeightDequantPass(ir.passes.InPlacePass):
    """Cast(int weight) [- zero point] * scale (before or after a MatMul) as DequantizeLinear."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = f.opset(model)
        modified = False
        for graph, namer, node in f.standard_nodes(model, ("Mul",)):
            modified |= self._fuse(graph, namer, node, opset)
        return ir.passes.PassResult(model, modified)

    def _fuse(self, graph: ir.Graph, namer: f.Namer, mul: ir.Node, opset: int) -> bool:
        for i in (0, 1):
            a, scale = mul.inputs[i], mul.inputs[1 - i]
            s = _constant(scale)
            if a is None or s is None or s.dtype != np.float32:
                continue
            chain = _chain(a, opset)
            if chain is not None:          # 1. Mul(w, scale)
                return self._rewrite(graph, namer, mul, chain, s, None)
            matmul = f.producer(a, "MatMul")
            if matmul is None or f.only_user(a, "Mul") is not mul:
                continue
            chain = _chain(matmul.inputs[1], opset)
            if chain is None or f.only_user(chain.out, "MatMul") is not matmul:
                continue
            # 2. Mul(MatMul(x, w), scale): the scale must vary along the output columns only
            if s.size != 1 and (s.ndim < 1 or any(d != 1 for d in s.shape[:-1])):
                continue
            return self._rewrite(graph, namer, mul, chain, s.reshape(1, -1) if s.size > 1
                                 else s, matmul)
        return False

    def _rewrite(self, graph: ir.Graph, namer: f.Namer, mul: ir.Node, chain: _Chain,
                 scale: np.ndarray, matmul: ir.Node | None) -> bool:
        rows, cols = (int(d) for d in chain.w.shape)
        used = [cols, rows] if chain.transposed else [rows, cols]
        s = _per_axis(scale, used)
        z = None if chain.zero is None else _per_axis(np.rint(chain.zero), used)
        if s is None or (chain.zero is not None and (z is None or not np.all(
                np.rint(chain.zero) == chain.zero))):
            return False
        axis = s[1] if s[1] is not None else (z[1] if z is not None else None)
        if z is not None and z[1] is not None and z[1] != axis:
            return False
        if s[1] is None and axis is not None:   # per-tensor scale, per-axis zero point
            s = (np.full(used[axis], s[0]), axis)
        if z is not None and z[1] is None and axis is not None:
            z = (np.full(used[axis], z[0]), axis)
        stored_axis = None if axis is None else (1 - axis if chain.transposed else axis)
        qtype = chain.w.dtype
        lo, hi = np.iinfo(qtype.numpy()).min, np.iinfo(qtype.numpy()).max
        if z is not None and (z[0].min() < lo or z[0].max() > hi):
            return False
        anchor = matmul or mul
        new: list[ir.Node] = []
        inputs = [chain.w, namer.constant(anchor, np.asarray(s[0], np.float32))]
        if z is not None:
            inputs.append(namer.constant(anchor, np.asarray(z[0]).astype(qtype.numpy())))
        attrs = {} if stored_axis is None else {"axis": stored_axis}
        new.append(f.make_node(namer, anchor, "DequantizeLinear", inputs, attrs,
                               dtype=ir.DataType.FLOAT))
        w = new[-1].outputs[0]
        if chain.transposed:
            new.append(f.make_node(namer, anchor, "Transpose", [w], {"perm": [1, 0]},
                                   dtype=ir.DataType.FLOAT))
            w = new[-1].outputs[0]
        if matmul is None:
            f.replace(graph, [mul, *chain.nodes], new, mul.outputs[0], w)
            return True
        new.append(f.make_node(namer, matmul, "MatMul", [matmul.inputs[0], w],
                               dtype=ir.DataType.FLOAT))
        f.replace(graph, [mul, matmul, *chain.nodes], new, mul.outputs[0], new[-1].outputs[0])
        return True
