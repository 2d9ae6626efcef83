"""FuseRMSNormPass: RMS normalization written out in elementary ops, found in the graph.

Matched (any module, any exporter), over the last k axes of x:

    ms   = ReduceMean(Pow(x, 2) | Mul(x, x))          or ReduceSum(...) / N, ReduceSum(...) * 1/N
    y    = x * Reciprocal(Sqrt(ms + eps))            or x / Sqrt(ms + eps), x * Pow(ms + eps, -0.5)
    out  = y [* w]                                   w: exactly the normalized shape

* opset >= 23: one `RMSNormalization(x, w or ones, axis=-k, epsilon=eps)`;
* below 23: the same computation as Pow(x, 2) -> ReduceMean -> Add -> Sqrt -> Div(x, .), the
  form ONNX Runtime fuses into its SimplifiedLayerNormalization kernel (the weight's Mul is
  kept; ORT takes it in).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f


@dataclass
class _Match:
    x: ir.Value
    eps: float
    k: int
    nodes: list[ir.Node]      # the statistics and the normalization, ending in `normalized`
    normalized: ir.Value
    weight: ir.Value | None   # the Mul by w is nodes[-1] when set
    ort_form: bool            # already Pow -> ReduceMean -> Add -> Sqrt -> Div


def _times(x: ir.Value, factor: ir.Value) -> ir.Node | None:
    """The only user of `factor` when it is a Mul of `factor` by `x`, else None."""
    mul = f.only_user(factor, "Mul")
    if mul is None or f.other_input(mul, factor) is not x:
        return None
    return mul


def _match(reduce: ir.Node) -> _Match | None:
    x_sq = reduce.inputs[0]
    sq = f.square_of(x_sq)
    if sq is None:
        return None
    x, sq_node = sq
    r = f.rank(x)
    if r is None or x.dtype not in f.FLOATS:
        return None
    # The mean of squares ends at ReduceMean itself or at the Div/Mul by N after ReduceSum.
    ms = reduce.outputs[0]
    if reduce.op_type == "ReduceSum":
        scale = f.only_user(ms, "Div", "Mul")
        if scale is None or scale.inputs[0] is not ms:
            return None
        ms = scale.outputs[0]
    mean = f.mean_over(ms, r, like=x)
    if mean is None or mean[0] is not x_sq:
        return None
    k = len(mean[2])
    if f.empty_trailing(x, k):
        return None
    nodes = [sq_node, *mean[1]]
    add = f.only_user(ms, "Add")
    if add is None:
        return None
    eps = f.scalar(f.other_input(add, ms))
    if eps is None:
        return None
    nodes.append(add)
    var_eps = add.outputs[0]
    root = f.only_user(var_eps, "Sqrt", "Pow")
    if root is None:
        return None
    nodes.append(root)
    ort_form = False
    if root.op_type == "Pow":                      # x * (ms + eps) ** -0.5
        if root.inputs[0] is not var_eps or not f.is_scalar(root.inputs[1], -0.5, 0):
            return None
        norm = _times(x, root.outputs[0])
    else:
        nxt = f.only_user(root.outputs[0], "Reciprocal", "Div")
        if nxt is None:
            return None
        div = nxt.op_type == "Div" and nxt.inputs[1] is root.outputs[0]
        if div and nxt.inputs[0] is x:             # x / sqrt(ms + eps)
            norm = nxt
            ort_form = sq_node.op_type == "Pow" and reduce.op_type == "ReduceMean"
        elif nxt.op_type == "Reciprocal" or (div and f.is_scalar(nxt.inputs[0], 1.0, 0)):
            nodes.append(nxt)                      # x * reciprocal(sqrt(ms + eps)) or 1 / sqrt(.)
            norm = _times(x, nxt.outputs[0])
        else:
            return None
    if norm is None:
        return None
    nodes.append(norm)
    normalized = norm.outputs[0]
    if not f.internal(nodes, normalized):
        return None
    weight = None
    wmul = f.only_user(normalized, "Mul")
    if wmul is not None:
        w = f.other_input(wmul, normalized)
        dims = f.static_dims(x, range(r - k, r))
        if w is not None and w is not normalized and w.dtype == x.dtype and dims is not None \
                and w.shape is not None and list(w.shape) == dims:
            weight = w
            nodes.append(wmul)
    return _Match(x, eps, k, nodes, normalized, weight, ort_form)


class FuseRMSNormPass(ir.passes.InPlacePass):
    """RMSNorm decompositions -> RMSNormalization (opset >= 23) or ORT's fusable form."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = f.rewrite_by_opset(model, ("ReduceMean", "ReduceSum"), _match, 23,
                                      _to_rms_normalization, _to_ort_form)
        return ir.passes.PassResult(model, modified)


def _to_rms_normalization(graph: ir.Graph, namer: f.Namer, m: _Match) -> bool:
    return f.replace_with_norm(graph, namer, m.nodes, "RMSNormalization", m.x, m.k, m.eps,
                               m.weight)


def _to_ort_form(graph: ir.Graph, namer: f.Namer, m: _Match) -> bool:
    if m.ort_form:
        return False
    anchor = m.nodes[0]
    dtype = m.x.dtype
    assert dtype is not None
    r = f.rank(m.x)
    assert r is not None
    np_dtype = dtype.numpy()
    two = namer.constant(anchor, np.array(2.0, dtype=np_dtype))
    pow_ = f.make_node(namer, anchor, "Pow", [m.x, two], dtype=dtype, shape=m.x.shape)
    axes = namer.constant(anchor, np.arange(r - m.k, r, dtype=np.int64))
    mean = f.make_node(namer, anchor, "ReduceMean", [pow_.outputs[0], axes], {"keepdims": 1},
                       dtype=dtype)
    eps = namer.constant(anchor, np.array(m.eps, dtype=np_dtype))
    add = f.make_node(namer, anchor, "Add", [mean.outputs[0], eps], dtype=dtype)
    sqrt = f.make_node(namer, anchor, "Sqrt", [add.outputs[0]], dtype=dtype)
    div = f.make_node(namer, anchor, "Div", [m.x, sqrt.outputs[0]], dtype=dtype)
    nodes = m.nodes[:-1] if m.weight is not None else m.nodes
    f.replace(graph, nodes, [pow_, mean, add, sqrt, div], m.normalized,
              div.outputs[0])
    return True
