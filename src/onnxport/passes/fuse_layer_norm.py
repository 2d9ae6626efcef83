"""FuseLayerNormPass: layer normalization written out in elementary ops -> LayerNormalization.

Matched (any module, any exporter), over the last k axes of x:

    d    = x - mean(x)                       mean: ReduceMean, or ReduceSum / N (* 1/N)
    var  = mean(d * d | Pow(d, 2))
    y    = d * Reciprocal(Sqrt(var + eps))   or d / Sqrt(var + eps), d * Pow(var + eps, -0.5)
    out  = y [* w] [+ b]                     w, b: exactly the normalized shape

The numerator may be a second `x - mean(x)` node (an exporter without CSE writes
`(x - u) / sqrt(...)` twice). The result is one `LayerNormalization(x, w or ones, b,
axis=-k, epsilon=eps)` (opset 17; passes run at 18 or newer). Only the first output is used.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from onnxport.passes import _fusion as f


@dataclass
class _Match:
    x: ir.Value
    eps: float
    k: int
    nodes: list[ir.Node]
    scale: ir.Value | None
    bias: ir.Value | None


def _is_centered(value: ir.Value | None, x: ir.Value, mean: ir.Value) -> ir.Node | None:
    node = f.producer(value, "Sub")
    return node if node is not None and node.inputs[0] is x and node.inputs[1] is mean else None


def _match(sub: ir.Node) -> _Match | None:
    x, mean = sub.inputs[0], sub.inputs[1]
    r = f.rank(x)
    if x is None or mean is None or r is None or x.dtype not in f.FLOATS:
        return None
    m = f.mean_over(mean, r)
    if m is None or m[0] is not x:
        return None
    k = len(m[2])
    if f.empty_trailing(x, k):
        return None
    d = sub.outputs[0]
    nodes = [*m[1], sub]
    # The variance: mean of the square of d.
    sq = next((u.node for u in d.uses() if f.square_of(u.node.outputs[0]) is not None
               and u.node.inputs[0] is d), None)
    if sq is None:
        return None
    var = None
    for op in ("ReduceMean", "ReduceSum"):
        red = f.only_user(sq.outputs[0], op)
        if red is None:
            continue
        out = red.outputs[0]
        if op == "ReduceSum":
            scale = f.only_user(out, "Div", "Mul")
            out = scale.outputs[0] if scale is not None and scale.inputs[0] is out else None
        vm = f.mean_over(out, r, like=x) if out is not None else None
        if vm is not None and vm[0] is sq.outputs[0] and vm[2] == m[2]:
            var = out
            nodes += [sq, *vm[1]]
    if var is None:
        return None
    add = f.only_user(var, "Add")
    eps = f.scalar(f.other_input(add, var)) if add is not None else None
    if add is None or eps is None:
        return None
    nodes.append(add)
    root = f.only_user(add.outputs[0], "Sqrt", "Pow")
    if root is None:
        return None
    nodes.append(root)
    if root.op_type == "Pow":
        if not f.is_scalar(root.inputs[1], -0.5, 0):
            return None
        norm = f.only_user(root.outputs[0], "Mul")
        numerator = f.other_input(norm, root.outputs[0]) if norm is not None else None
    else:
        nxt = f.only_user(root.outputs[0], "Reciprocal", "Div")
        if nxt is None:
            return None
        if nxt.op_type == "Div":
            if nxt.inputs[1] is not root.outputs[0]:
                return None
            norm, numerator = nxt, nxt.inputs[0]
        else:
            nodes.append(nxt)
            norm = f.only_user(nxt.outputs[0], "Mul")
            numerator = f.other_input(norm, nxt.outputs[0]) if norm is not None else None
    if norm is None or numerator is None:
        return None
    if numerator is not d:
        second = _is_centered(numerator, x, mean)
        if second is None:
            return None
        nodes.append(second)
    nodes.append(norm)
    out = norm.outputs[0]
    if not f.internal(nodes, out):
        return None
    dims = f.static_dims(x, range(r - k, r))

    def affine(value: ir.Value, op: str) -> tuple[ir.Node, ir.Value] | None:
        node = f.only_user(value, op)
        p = f.other_input(node, value) if node is not None else None
        if p is None or p is value or p.dtype != x.dtype or dims is None or p.shape is None \
                or list(p.shape) != dims:
            return None
        return node, p

    scale = bias = None
    found = affine(out, "Mul")
    if found is not None:
        nodes.append(found[0])
        scale, out = found[1], found[0].outputs[0]
        found = affine(out, "Add")
        if found is not None:
            nodes.append(found[0])
            bias = found[1]
    return _Match(x, eps, k, nodes, scale, bias)


class FuseLayerNormPass(ir.passes.InPlacePass):
    """LayerNorm decompositions -> one LayerNormalization node."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if f.opset(model) < 17:
            return ir.passes.PassResult(model, False)
        modified = False
        for graph, namer, node in f.standard_nodes(model, ("Sub",)):
            m = _match(node)
            if m is not None:
                modified |= f.replace_with_norm(graph, namer, m.nodes, "LayerNormalization",
                                                m.x, m.k, m.eps, m.scale, m.bias)
        return ir.passes.PassResult(model, modified)
