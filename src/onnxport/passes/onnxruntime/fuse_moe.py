"""FuseMoEPass: a mixture-of-experts layer -> ONNX Runtime's `MoE` (com.microsoft).

A MoE layer computes, per token row t of `x` (T, H) and router logits (T, E):

    y[t] = sum over the k experts e the router picks of  w[t, e] * act(x[t] @ W1[e]) @ W2[e]

Its standard graph (ops/grouped_mm.py) has two *grouped products*, Loops over the experts whose
body multiplies a row slice by the group's weight, and between and around them the routing
glue: top-k, the sort of (token, expert) pairs by expert, the per-expert counts and their
cumulative sum, the gather of token rows, the activation, the weighting and the sum back per
token. That glue differs from family to family and from one torch or transformers release to
the next (index_add or scatter, sort or argsort, histc or bincount), so the pass does not match
it node by node. It matches the parts that fix the computation, and checks the rest by
running it:

1. **Structure.** Two grouped products P1 -> P2 with the same group ends, P2's rows computed
   from P1's (the activation), P1's rows gathered from a 2-D `x`; the router logits are the
   output of the nearest MatMul/Gemm behind the group ends, with E columns; both weights are
   3-D (E, in, out).
2. **Semantics.** The glue alone (everything from x, the logits and the two products' outputs
   to the products' inputs, the group ends and the layer's output; no weights) is cut out and
   run in ONNX Runtime on random values, a few tokens. From the result the pass reads which
   token each sorted row holds and which expert, and checks that each token's experts are the
   top-k of softmax(logits), that its weights are softmax(logits) restricted to them
   (`normalize_routing_weights=0`) or renormalized over them (`=1`), that the activation is
   SwiGLU (gate and up halves, in either order, or interleaved) or a plain SiLU, ReLU or GELU,
   and which value downstream is the weighted sum per token. Anything else (sigmoid routing
   with group limits as DeepSeek's, the sparse mixer of PhiMoE, biases, clamped activations
   as gpt-oss's) fails a check and the layer keeps its standard graph.

The rewrite reads the original weight initializers through Transpose (and a Gather that
interleaves gate and up rows for `swiglu_fusion=1`, the layout ORT's CPU kernel takes), which
ONNX Runtime folds at session load: initializer names and layouts stay the state_dict's, so
`apply_weights` and streamed weights work unchanged. Only float32 layers are fused.
Shared experts (Qwen2-MoE) stay outside: their sum is added after the routed layer's output.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxport.passes import _fusion as f
from onnxport.passes.onnxruntime import CONTRIB_DOMAIN

_SHAPE_OPS = frozenset({"Shape", "Size"})
_MAX_GLUE_CONSTANT = 1 << 16   # elements: the glue holds index constants, never weights


@dataclasses.dataclass
class _Grouped:
    """out[r] = x[r] @ w[g] for the rows r of group g, groups ending at `ends`."""

    loop: ir.Node
    out: ir.Value
    x: ir.Value
    w: ir.Value
    ends: ir.Value


@dataclasses.dataclass
class _Layer:
    x: ir.Value
    logits: ir.Value
    first: _Grouped
    second: _Grouped
    candidates: list[ir.Value]


def _outer(value: ir.Value | None, body: ir.Graph) -> bool:
    if value is None:
        return False
    node = value.producer()
    return (node.graph is not body) if node is not None else value not in body.inputs


def _grouped(loop: ir.Node) -> _Grouped | None:
    """The grouped row product a Loop computes, if it is one."""
    attr = loop.attributes.get("body")
    if attr is None or len(loop.outputs) != 2:
        return None
    body = attr.as_graph()
    matmuls = [n for n in body if n.op_type == "MatMul" and not n.domain]
    if len(matmuls) != 1:
        return None
    rows, weight = (f.producer(v, "Slice", "Gather") for v in matmuls[0].inputs)
    if rows is None or rows.op_type != "Slice" or weight is None or weight.op_type != "Gather":
        return None
    x, w, group = rows.inputs[0], weight.inputs[0], weight.inputs[1]
    if not (_outer(x, body) and _outer(w, body)):
        return None
    # The group is the iteration number, or read from a list of groups by it (the non-empty
    # ones, ops/grouped_mm.py).
    listed = f.producer(group, "Gather")
    if group is not body.inputs[0] and not (
            listed is not None and listed.inputs[1] is body.inputs[0]
            and _outer(listed.inputs[0], body)):
        return None
    if list(f.constant(rows.inputs[3]) if len(rows.inputs) > 3 else [None]) != [0]:
        return None
    ends = [n.inputs[0] for n in body if n.op_type == "Gather" and n is not weight
            and n is not listed and n.inputs[1] is group and _outer(n.inputs[0], body)]
    if len(ends) != 1 or f.rank(w) not in (3, None):
        return None
    concat = f.only_user(loop.outputs[1], "ConcatFromSequence")
    if concat is None:
        return None
    out = concat.outputs[0]
    pad = next((u.node for u in out.uses() if u.node.op_type == "Pad" and u.idx == 0), None)
    return _Grouped(loop, pad.outputs[0] if pad is not None else out, x, w, ends[0])


def _static_shape(value: ir.Value) -> list[int] | None:
    if value.shape is None:
        return None
    dims = [d if isinstance(d, int) else None for d in value.shape]
    return None if None in dims else dims  # type: ignore[return-value]


def _weight_dims(value: ir.Value) -> list[int] | None:
    if value.const_value is not None:   # the shape only: a weight's data may be on disk
        return [int(d) for d in value.const_value.shape]
    node = value.producer()
    if node is not None and node.op_type == "Transpose" and not node.domain:
        inner = _weight_dims(node.inputs[0])
        perm = node.attributes.get_ints("perm") if "perm" in node.attributes else None
        if inner is not None and perm is not None:
            return [inner[p] for p in perm]
    return _static_shape(value)


def _behind(value: ir.Value, graph: ir.Graph, limit: int = 400) -> list[ir.Node]:
    """The producers behind `value`, breadth first."""
    seen, order, todo = set(), [], [value]
    while todo and len(order) < limit:
        v = todo.pop(0)
        node = v.producer()
        if node is None or node.graph is not graph or id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        todo.extend(i for i in node.inputs if i is not None)
    return order


def _ahead(value: ir.Value, depth: int = 14) -> list[ir.Value]:
    """Values downstream of `value`, nearest first."""
    seen, order, frontier = {id(value)}, [], [value]
    for _ in range(depth):
        nxt = []
        for v in frontier:
            for use in v.uses():
                for out in use.node.outputs:
                    if id(out) not in seen:
                        seen.add(id(out))
                        order.append(out)
                        nxt.append(out)
        frontier = nxt
    return order


def _find_layers(graph: ir.Graph) -> list[_Layer]:
    products = [p for p in (_grouped(n) for n in graph
                            if n.op_type == "Loop" and not n.domain) if p is not None]
    by_out = {id(p.out): p for p in products}
    layers = []
    for second in products:
        first = next((by_out[id(n.outputs[0])] for n in _behind(second.x, graph, 12)
                      if id(n.outputs[0]) in by_out), None)
        if first is None or first.ends is not second.ends:
            continue
        gather = f.producer(first.x, "Gather")
        if gather is None or f.rank(gather.inputs[0]) not in (2, None):
            continue
        x = gather.inputs[0]
        router = next((n for n in _behind(first.ends, graph)
                       if n.op_type in ("MatMul", "Gemm") and not n.domain), None)
        if router is None or x.dtype != ir.DataType.FLOAT:
            continue
        candidates = [v for v in _ahead(second.out)
                      if v.dtype == ir.DataType.FLOAT and f.rank(v) in (2, None)]
        layers.append(_Layer(x, router.outputs[0], first, second, candidates))
    return layers


# -- the check ---------------------------------------------------------------------------------

def _glue(graph: ir.Graph, cuts: list[ir.Value], outputs: list[ir.Value]
          ) -> list[ir.Node] | None:
    """The nodes computing `outputs` from `cuts` and small constants, in graph order; None
    when they reach anything else (a graph input, a weight, a subgraph, another domain)."""
    cut = {id(v) for v in cuts}
    seen: set[int] = set()
    nodes: list[ir.Node] = []
    todo = [v for v in outputs if id(v) not in cut]
    while todo:
        v = todo.pop()
        if id(v) in cut:
            continue
        node = v.producer()
        if node is None:
            data = v.const_value
            if data is None or math.prod(data.shape) > _MAX_GLUE_CONSTANT:
                return None
            continue
        if id(node) in seen:
            continue
        if node.op_type in _SHAPE_OPS and not node.domain and node.inputs[0] is not None \
                and node.inputs[0].is_graph_input() and node.graph is graph:
            seen.add(id(node))
            nodes.append(node)   # a size of the model's input (batch x sequence), not its data
            continue
        if node.graph is not graph or node.domain or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                for a in node.attributes.values()):
            return None
        seen.add(id(node))
        nodes.append(node)
        todo.extend(i for i in node.inputs if i is not None)
    order = {id(n): i for i, n in enumerate(graph)}
    return sorted(nodes, key=lambda n: order[id(n)])


def _sizes(graph: ir.Graph, x: ir.Value) -> tuple[int, dict[str, int]] | None:
    """A row count for the check and the sizes of the model's named input dims that give it
    (the glue may read the inputs' shapes: tokens = batch x sequence)."""
    dims = x.shape
    if dims is None or len(dims) != 2:
        return None
    if isinstance(dims[0], int):
        return dims[0], {}
    import sympy

    names = {str(d.value) for i in graph.inputs if i.shape is not None for d in i.shape
             if isinstance(d, ir.SymbolicDim) and d.value is not None}
    symbols = {n: sympy.Symbol(n) for n in names if n.isidentifier()}
    try:
        expr = sympy.sympify(str(dims[0].value), locals=symbols)
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None
    if not {str(s) for s in expr.free_symbols} <= set(symbols):
        return None
    for size in (7, 3, 2):
        rows = expr.subs({symbols[n]: size for n in symbols})
        if rows.is_Integer and 2 <= int(rows) <= 400:
            return int(rows), {n: size for n in names}
    return None


def _input_feed(value: ir.Value, sizes: dict[str, int]) -> np.ndarray | None:
    if value.shape is None or value.dtype is None:
        return None
    dims = []
    for d in value.shape:
        if isinstance(d, int):
            dims.append(d)
        elif d.value is not None and str(d.value) in sizes:
            dims.append(sizes[str(d.value)])
        else:
            return None
    return np.zeros(dims, dtype=value.dtype.numpy())


def _run(graph: ir.Graph, cuts: dict[ir.Value, np.ndarray], outputs: list[ir.Value],
         sizes: dict[str, int]) -> list[np.ndarray] | None:
    """`outputs` computed from the `cuts` in ONNX Runtime, or None if the glue reaches more."""
    nodes = _glue(graph, list(cuts), outputs)
    if nodes is None:
        return None
    import onnxruntime

    cuts = dict(cuts)
    for node in nodes:
        if node.op_type in _SHAPE_OPS and node.inputs[0].is_graph_input() \
                and node.inputs[0] not in cuts:
            feed = _input_feed(node.inputs[0], sizes)
            if feed is None:
                return None
            cuts[node.inputs[0]] = feed
    inputs = {id(v) for v in cuts}
    made = {id(o) for n in nodes for o in n.outputs}
    initializers, seen = [], set()
    for node in nodes:
        for v in node.inputs:
            if v is not None and id(v) not in inputs | made | seen and v.const_value is not None:
                seen.add(id(v))
                initializers.append(onnx.numpy_helper.from_array(v.const_value.numpy(), v.name))
    proto = onnx.helper.make_graph(
        [ir.serde.serialize_node(n) for n in nodes], "moe_glue",
        [onnx.helper.make_tensor_value_info(v.name, onnx.helper.np_dtype_to_tensor_dtype(a.dtype),
                                            None) for v, a in cuts.items()],
        [onnx.helper.make_tensor_value_info(v.name, v.dtype.value, None) if v.dtype is not None
         else onnx.ValueInfoProto(name=v.name) for v in outputs], initializers)
    opsets = [onnx.helper.make_opsetid("", int(graph.opset_imports.get("", 20)))]
    model = onnx.helper.make_model(proto, opset_imports=opsets)
    model.ir_version = 10
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        return session.run([v.name for v in outputs], {v.name: a for v, a in cuts.items()})
    except Exception:  # noqa: BLE001 - a glue ORT cannot run is not fused
        return None


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _activations(a: np.ndarray, width: int) -> dict[str, np.ndarray]:
    """P2's rows for each activation ORT's MoE has, from P1's rows `a`."""
    def silu(v: np.ndarray) -> np.ndarray:
        return v / (1.0 + np.exp(-v))

    out = {}
    if a.shape[1] == 2 * width:
        out["swiglu_gate_up"] = silu(a[:, :width]) * a[:, width:]
        out["swiglu_up_gate"] = silu(a[:, width:]) * a[:, :width]
        out["swiglu_interleaved"] = silu(a[:, 0::2]) * a[:, 1::2]
    if a.shape[1] == width:
        from math import erf

        out["silu"] = silu(a)
        out["relu"] = np.maximum(a, 0)
        out["gelu"] = 0.5 * a * (1 + np.vectorize(erf)(a / np.sqrt(2)))
    return out


@dataclasses.dataclass
class _Verdict:
    k: int
    normalize: int
    activation: str
    output: ir.Value


def _check(graph: ir.Graph, layer: _Layer, experts: int, hidden: int, inner: int,
           width: int) -> _Verdict | None:
    found = _sizes(graph, layer.x)
    if found is None:
        return None
    tokens, sizes = found
    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    logits = (2 * rng.standard_normal((tokens, experts))).astype(np.float32)
    first = _run(graph, {layer.x: x, layer.logits: logits}, [layer.first.x, layer.first.ends], sizes)
    if first is None:
        return None
    rows, ends = first
    count = rows.shape[0]
    if count % tokens or ends.shape != (experts,) or int(ends[-1]) != count:
        return None
    k = count // tokens
    if not 1 <= k <= experts:
        return None
    distance = np.abs(rows[:, None, :] - x[None, :, :]).max(axis=2)
    token = distance.argmin(axis=1)
    if distance[np.arange(count), token].max() != 0:
        return None
    expert = np.searchsorted(ends, np.arange(count), side="right")
    probs = _softmax(logits.astype(np.float64))
    top = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    for t in range(tokens):
        if sorted(expert[token == t].tolist()) != sorted(top[t].tolist()):
            return None

    h1 = rng.standard_normal((count, inner)).astype(np.float32)
    h2 = rng.standard_normal((count, hidden)).astype(np.float32)
    cuts = {layer.x: x, layer.logits: logits, layer.first.out: h1, layer.second.out: h2}
    probes = [v for v in layer.candidates if _glue(graph, list(cuts), [v]) is not None]
    second = _run(graph, cuts, [layer.second.x, *probes], sizes)
    if second is None:
        return None
    acts = _activations(h1.astype(np.float64), width)
    activation = next((name for name, want in acts.items() if second[0].shape == want.shape
                       and np.allclose(second[0], want, rtol=1e-4, atol=1e-5)), None)
    if activation is None:
        return None
    picked = probs[token, expert]
    for normalize in (1, 0):
        weight = picked / np.take_along_axis(probs, top, 1).sum(1)[token] if normalize \
            else picked
        want = np.zeros((tokens, hidden))
        np.add.at(want, token, weight[:, None] * h2.astype(np.float64))
        for value, got in zip(probes, second[1:]):
            if got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5):
                return _Verdict(k, normalize, activation, value)
    return None


# -- the rewrite -------------------------------------------------------------------------------

def _as_out_in(namer: f.Namer, anchor: ir.Node, weight: ir.Value, nodes: list[ir.Node]
               ) -> ir.Value:
    """(E, in, out) -> (E, out, in), reading through a Transpose that made it."""
    node = weight.producer()
    if node is not None and node.op_type == "Transpose" and not node.domain and list(
            node.attributes.get_ints("perm", [])) == [0, 2, 1]:
        return node.inputs[0]
    t = f.make_node(namer, anchor, "Transpose", [weight], {"perm": [0, 2, 1]}, dtype=weight.dtype)
    nodes.append(t)
    return t.outputs[0]


def _rewrite(graph: ir.Graph, namer: f.Namer, layer: _Layer, verdict: _Verdict,
             width: int) -> None:
    anchor = verdict.output.producer()
    assert anchor is not None
    nodes: list[ir.Node] = []
    fc1 = _as_out_in(namer, anchor, layer.first.w, nodes)
    order = {"swiglu_gate_up": [i for j in range(width) for i in (j, width + j)],
             "swiglu_up_gate": [i for j in range(width) for i in (width + j, j)]}
    attributes: dict[str, Any] = {"k": verdict.k,
                                  "normalize_routing_weights": verdict.normalize}
    if verdict.activation.startswith("swiglu"):
        attributes.update(activation_type="swiglu", swiglu_fusion=1)
        if verdict.activation in order:
            rows = namer.constant(anchor, np.array(order[verdict.activation], dtype=np.int64))
            gather = f.make_node(namer, anchor, "Gather", [fc1, rows], {"axis": 1},
                                 dtype=fc1.dtype)
            nodes.append(gather)
            fc1 = gather.outputs[0]
    else:
        attributes["activation_type"] = verdict.activation
    fc2 = _as_out_in(namer, anchor, layer.second.w, nodes)
    moe = f.make_node(namer, anchor, "MoE", [layer.x, layer.logits, fc1, None, fc2],
                      attributes, domain=CONTRIB_DOMAIN, dtype=verdict.output.dtype)
    nodes.append(moe)
    graph.insert_before(anchor, nodes)
    out = verdict.output
    name = out.name
    out.name = f"{name}__unfused" if name else None
    moe.outputs[0].name = name
    moe.outputs[0].shape = out.shape
    ir.convenience.replace_all_uses_with(out, moe.outputs[0], replace_graph_outputs=True)


def _remove_unused(graph: ir.Graph) -> None:
    """Remove the nodes nothing reads any more, releasing what their Loop bodies read from the
    outer graph (a removed body's reads would otherwise keep the first product alive)."""
    for node in reversed(list(graph)):
        if any(o.is_graph_output() or any(True for _ in o.uses()) for o in node.outputs):
            continue
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                for inner in ir.traversal.RecursiveGraphIterator(attr.as_graph()):
                    for i in range(len(inner.inputs)):
                        inner.replace_input_with(i, None)
        graph.remove(node, safe=True)


class FuseMoEPass(ir.passes.InPlacePass):
    """Mixture-of-experts layers -> com.microsoft.MoE where their semantics match (above)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        layers = _find_layers(graph)
        if not layers:
            return ir.passes.PassResult(model, False)
        namer = f.Namer(graph)
        fused = 0
        for layer in layers:
            dims1, dims2 = _weight_dims(layer.first.w), _weight_dims(layer.second.w)
            if dims1 is None or dims2 is None or len(dims1) != 3 or len(dims2) != 3:
                continue
            experts, hidden, inner = dims1
            if dims2[0] != experts or dims2[2] != hidden:
                continue
            width = dims2[1]
            verdict = _check(graph, layer, experts, hidden, inner, width)
            if verdict is None:
                continue
            _rewrite(graph, namer, layer, verdict, width)
            fused += 1
        if fused:
            _remove_unused(graph)
            model.opset_imports.setdefault(CONTRIB_DOMAIN, 1)
        return ir.passes.PassResult(model, bool(fused))


__all__ = ["FuseMoEPass"]
