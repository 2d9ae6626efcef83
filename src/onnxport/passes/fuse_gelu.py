"""FuseGeluPass: GELU written out in elementary ops, found in the graph.

Matched (any module, any exporter), with the three factors of the product in any order or
grouping (`Mul(Mul(x, 0.5), g)`, `Mul(Mul(x, g), 0.5)`, `Mul(x, Mul(g, 0.5))`, ...):

    erf:   0.5 * x * (1 + Erf(x * 1/sqrt(2) | x / sqrt(2)))
    tanh:  0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * (Pow(x, 3) | x * x * x))))

* opset >= 20: one `Gelu(x, approximate="none" | "tanh")`;
* below 20, the erf form is rewritten as Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5,
  the form ONNX Runtime fuses into its Gelu kernel (ORT fuses no tanh form on CPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_SQRT2 = math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)


@dataclass
class _Match:
    x: ir.Value
    approximate: str
    nodes: list[ir.Node]
    ort_form: bool


def _erf_input(node: ir.Node) -> tuple[ir.Value, list[ir.Node], bool] | None:
    """Erf's argument as x / sqrt(2): (x, nodes, written as Div)."""
    arg = node.inputs[0]
    scale = f.producer(arg, "Mul", "Div")
    if scale is None or f.only_user(arg, "Erf") is not node:
        return None
    if scale.op_type == "Div":
        return (scale.inputs[0], [scale], True) if scale.inputs[0] is not None and \
            f.is_scalar(scale.inputs[1], _SQRT2) else None
    for a, b in ((0, 1), (1, 0)):
        if scale.inputs[a] is not None and f.is_scalar(scale.inputs[b], 1 / _SQRT2):
            return scale.inputs[a], [scale], False
    return None


def _cube_of(value: ir.Value | None, x: ir.Value) -> list[ir.Node] | None:
    node = f.producer(value, "Pow", "Mul")
    if node is None:
        return None
    if node.op_type == "Pow":
        return [node] if node.inputs[0] is x and f.is_scalar(node.inputs[1], 3.0, 0) else None
    sq = f.square_of(f.other_input(node, x)) if x in node.inputs else None
    if sq is None or sq[0] is not x or f.only_user(sq[1].outputs[0], "Mul") is not node:
        return None
    return [sq[1], node]


def _tanh_input(node: ir.Node) -> tuple[ir.Value, list[ir.Node]] | None:
    """Tanh's argument as sqrt(2/pi) * (x + 0.044715 * x^3): (x, nodes)."""
    outer = f.producer(node.inputs[0], "Mul")
    if outer is None or f.only_user(node.inputs[0], "Tanh") is not node:
        return None
    for a, b in ((0, 1), (1, 0)):
        if f.is_scalar(outer.inputs[b], _SQRT_2_PI):
            inner = f.producer(outer.inputs[a], "Add")
            break
    else:
        return None
    if inner is None or f.only_user(inner.outputs[0], "Mul") is not outer:
        return None
    for a, b in ((0, 1), (1, 0)):
        x, term = inner.inputs[a], inner.inputs[b]
        mul = f.producer(term, "Mul")
        if x is None or mul is None or f.only_user(term, "Add") is not inner:
            continue
        for c, d in ((0, 1), (1, 0)):
            if f.is_scalar(mul.inputs[d], 0.044715):
                cube = _cube_of(mul.inputs[c], x)
                if cube is not None and f.only_user(mul.inputs[c], "Mul") is mul:
                    return x, [*cube, mul, inner, outer]
    return None


def _product(gate: ir.Value, x: ir.Value) -> tuple[list[ir.Node], bool] | None:
    """The nodes computing 0.5 * x * gate from `gate` = 1 + erf/tanh(...), and whether they are
    Mul(x, gate) then Mul(., 0.5) (ORT's form)."""
    first = f.only_user(gate, "Mul")
    if first is None:
        return None
    other = f.other_input(first, gate)
    if other is x or f.is_scalar(other, 0.5):       # x * gate (or 0.5 * gate), then * the other
        second = f.only_user(first.outputs[0], "Mul")
        if second is None:
            return None
        last = f.other_input(second, first.outputs[0])
        want_half = other is x
        if (want_half and f.is_scalar(last, 0.5)) or (not want_half and last is x):
            return [first, second], want_half
        return None
    half_x = f.producer(other, "Mul")               # (x * 0.5) * gate
    if half_x is None or x not in half_x.inputs or not f.is_scalar(f.other_input(half_x, x), 0.5) \
            or f.only_user(other, "Mul") is not first:
        return None
    return [half_x, first], False


def _match(node: ir.Node) -> _Match | None:
    if node.op_type == "Erf":
        found = _erf_input(node)
        if found is None:
            return None
        x, nodes, div = found
        approximate = "none"
    else:
        tanh = _tanh_input(node)
        if tanh is None:
            return None
        (x, nodes), div = tanh, False
        approximate = "tanh"
    if x.dtype not in f.FLOATS:
        return None
    add = f.only_user(node.outputs[0], "Add")
    if add is None or not f.is_scalar(f.other_input(add, node.outputs[0]), 1.0):
        return None
    product = _product(add.outputs[0], x)
    if product is None:
        return None
    nodes = [*nodes, node, add, *product[0]]
    if not f.internal(nodes, nodes[-1].outputs[0]):
        return None
    return _Match(x, approximate, nodes, ort_form=div and product[1])


class FuseGeluPass(ir.passes.InPlacePass):
    """GELU decompositions -> Gelu (opset >= 20), or ORT's fusable erf form below."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = f.rewrite_by_opset(model, ("Erf", "Tanh"), _match, 20, _to_gelu, _to_ort_form)
        return ir.passes.PassResult(model, modified)


def _to_gelu(graph: ir.Graph, namer: f.Namer, m: _Match) -> bool:
    gelu = f.make_node(namer, m.nodes[0], "Gelu", [m.x], {"approximate": m.approximate},
                       dtype=m.x.dtype)
    f.replace(graph, m.nodes, [gelu], m.nodes[-1].outputs[0], gelu.outputs[0])
    return True


def _to_ort_form(graph: ir.Graph, namer: f.Namer, m: _Match) -> bool:
    if m.approximate != "none" or m.ort_form:
        return False
    anchor, x, dtype = m.nodes[0], m.x, m.x.dtype
    assert dtype is not None
    np_dtype = dtype.numpy()
    new: list[ir.Node] = []

    def op(op_type: str, a: ir.Value, b: float | ir.Value | None = None) -> ir.Value:
        inputs = [a]
        if isinstance(b, float):
            inputs.append(namer.constant(anchor, np.array(b, dtype=np_dtype)))
        elif b is not None:
            inputs.append(b)
        node = f.make_node(namer, anchor, op_type, inputs, dtype=dtype, shape=x.shape)
        new.append(node)
        return node.outputs[0]

    y = op("Mul", op("Mul", x, op("Add", op("Erf", op("Div", x, _SQRT2)), 1.0)), 0.5)
    f.replace(graph, m.nodes, new, m.nodes[-1].outputs[0], y)
    return True
