"""What the fusion passes share: reading constants, walking single-use chains, and replacing
a matched subgraph by new nodes that keep the module path, source line and a readable name.

A fusion matches on the graph (op types, constants, shapes), never on module names, so it
finds a pattern whichever module or exporter wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import onnx_ir as ir

from onnxport.translate.folding import constant_data

M = TypeVar("M")

FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE, ir.DataType.BFLOAT16)


def opset(model: ir.Model) -> int:
    """The model's default-domain opset."""
    return int(model.opset_imports.get("", model.graph.opset_imports.get("", 1)))


def graphs(model: ir.Model) -> Iterator[ir.Graph]:
    """The main graph and every subgraph (If/Loop/Scan bodies), outermost first."""
    todo = [model.graph]
    while todo:
        graph = todo.pop()
        yield graph
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    todo.append(attr.as_graph())
                elif attr.type == ir.AttributeType.GRAPHS:
                    todo.extend(attr.as_graphs())


def standard_nodes(model: ir.Model, op_types: Iterable[str]
                   ) -> Iterator[tuple[ir.Graph, Namer, ir.Node]]:
    """(graph, namer, node) for each standard-domain node of `op_types` in the main graph and
    its subgraphs, skipping nodes an earlier rewrite of the same walk has removed."""
    wanted = frozenset(op_types)
    for graph in graphs(model):
        namer = Namer(graph)
        for node in list(graph):
            if node.graph is graph and not node.domain and node.op_type in wanted:
                yield graph, namer, node


class MatchRewritePass(ir.passes.InPlacePass):
    """A fusion over the standard nodes of `op_types`: `_match(node)` returns a tuple (or None
    when the node does not match) that `_rewrite(graph, namer, node, *match)` applies."""

    op_types: tuple[str, ...] = ()

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph, namer, node in standard_nodes(model, self.op_types):
            match = self._match(node)
            if match is not None:
                self._rewrite(graph, namer, node, *match)
                modified = True
        return ir.passes.PassResult(model, modified)

    def _match(self, node: ir.Node) -> tuple | None:  # type: ignore[type-arg]
        raise NotImplementedError

    def _rewrite(self, graph: ir.Graph, namer: Namer, node: ir.Node, *match: object) -> None:
        raise NotImplementedError


# The value's data when it is a constant (Constant node or initializer), else None.
constant = constant_data


def scalar(value: ir.Value | None) -> float | None:
    """The value of a one-element floating or integer constant."""
    data = constant(value)
    if data is None or data.size != 1 or data.dtype.kind not in "fiu":
        return None
    return float(data.reshape(()))


def literal_scalar(value: ir.Value | None) -> np.ndarray | None:
    """The data of a one-element float constant written in the graph (a Constant node, never
    an initializer, which apply_weights may replace)."""
    if value is None or value.is_initializer() or value.is_graph_input():
        return None
    data = constant(value)
    return data if data is not None and data.size == 1 and data.dtype.kind == "f" else None


def is_scalar(value: ir.Value | None, expected: float, rtol: float = 1e-3) -> bool:
    """Whether `value` is a one-element constant close to `expected` (relative to it)."""
    got = scalar(value)
    return got is not None and abs(got - expected) <= rtol * abs(expected)


def producer(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    """The default-domain node of one of `op_types` that produces `value`, if any."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.domain or node.op_type not in op_types:
        return None
    return node


def only_user(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    """The single node reading `value` once, when it is of one of `op_types` and `value` is not
    a graph output."""
    if value is None or value.is_graph_output():
        return None
    uses = list(value.uses())
    if len(uses) != 1:
        return None
    node = uses[0].node
    if node.domain or node.op_type not in op_types:
        return None
    return node


def other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The input of binary `node` that is not `value` (the second one if both are)."""
    a, b = node.inputs[0], node.inputs[1]
    return b if a is value else a if b is value else None


def internal(nodes: Sequence[ir.Node], output: ir.Value) -> bool:
    """Whether every value the nodes produce, except `output`, is read only by the nodes."""
    inside = {id(n) for n in nodes}
    for node in nodes:
        for value in node.outputs:
            if value is output:
                continue
            if value.is_graph_output() or any(id(u.node) not in inside for u in value.uses()):
                return False
    return True


def reduce_axes(node: ir.Node, rank: int) -> list[int] | None:
    """The sorted non-negative axes of a keepdims Reduce* node, None when not constant."""
    keep = node.attributes.get("keepdims")
    if keep is not None and keep.as_int() != 1:
        return None
    noop = node.attributes.get("noop_with_empty_axes")
    if noop is not None and noop.as_int() != 0:
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        data = constant(node.inputs[1])
        if data is None:
            return None
        axes = [int(a) for a in data.reshape(-1)]
    elif "axes" in node.attributes:
        axes = list(node.attributes["axes"].as_ints())
    else:
        return None  # every axis
    axes = sorted(a + rank if a < 0 else a for a in axes)
    return axes if len(set(axes)) == len(axes) and axes and 0 <= axes[0] else None


def trailing(axes: Sequence[int] | None, rank: int | None) -> int | None:
    """k when `axes` are the last k axes of a rank-`rank` tensor, else None."""
    if axes is None or rank is None or list(axes) != list(range(rank - len(axes), rank)):
        return None
    return len(axes)


def rank(value: ir.Value | None) -> int | None:
    return None if value is None or value.shape is None else len(value.shape)


_SAME_SHAPE = {"Cast", "Erf", "Exp", "Gelu", "Identity", "Neg", "Reciprocal", "Relu", "Sigmoid",
               "Sqrt", "Tanh", "LayerNormalization", "RMSNormalization", "Softmax"}
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min"}


def dims_of(value: ir.Value | None, depth: int = 8) -> list[object] | None:
    """The shape of `value`, recovered through MatMul / Transpose / elementwise ops / keepdims
    reductions when the value carries none (the translations leave a Linear's
    MatMul(x, Transpose(W)) unannotated, and passes build nodes without shapes)."""
    if value is None:
        return None
    if value.shape is not None:
        return list(value.shape)
    node = value.producer()
    if node is None or node.domain or depth == 0:
        return None
    if node.op_type in _SAME_SHAPE and node.outputs[0] is value:
        return dims_of(node.inputs[0], depth - 1)
    if node.op_type in _BROADCAST:
        shapes = [dims_of(v, depth - 1) for v in node.inputs]
        if any(sh is None for sh in shapes):
            return None
        r = max(len(sh) for sh in shapes)   # type: ignore[arg-type]
        out: list[object] = []
        for i in range(r):
            ds = {sh[len(sh) - r + i] for sh in shapes if len(sh) - r + i >= 0}  # type: ignore[arg-type]
            ds.discard(1)
            if len(ds) > 1:
                return None
            out.append(ds.pop() if ds else 1)
        return out
    if node.op_type in ("ReduceMean", "ReduceSum"):
        x = dims_of(node.inputs[0], depth - 1)
        axes = None if x is None else reduce_axes(node, len(x))
        if x is None or axes is None:
            return None
        return [1 if i in axes else d for i, d in enumerate(x)]
    if node.op_type == "Transpose":
        src = dims_of(node.inputs[0], depth - 1)
        perm = node.attributes.get("perm")
        if src is None:
            return None
        order = list(perm.as_ints()) if perm is not None else list(range(len(src)))[::-1]
        return [src[i] for i in order] if sorted(order) == list(range(len(src))) else None
    if node.op_type == "MatMul":
        a, b = dims_of(node.inputs[0], depth - 1), dims_of(node.inputs[1], depth - 1)
        if a is None or b is None or len(a) < 2 or len(b) != 2 or a[-1] != b[0]:
            return None
        return [*a[:-1], b[1]]
    return None


def empty_trailing(value: ir.Value, k: int) -> bool:
    """Whether one of the last `k` dims of `value` is statically 0 (an empty normalized slice,
    which ORT's LayerNormalization / RMSNormalization kernels refuse)."""
    if value.shape is None or k <= 0:
        return False
    return any(isinstance(d, int) and d == 0 for d in list(value.shape)[-k:])


def same_dim(a: object, b: object) -> bool:
    """Two dims known equal: equal ints, or symbolic dims of the same (non-empty) name."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    va, vb = getattr(a, "value", None), getattr(b, "value", None)
    return va is not None and va == vb


def static_dims(value: ir.Value, axes: Iterable[int]) -> list[int] | None:
    """The sizes of `axes` of `value` when they are all static."""
    if value.shape is None:
        return None
    dims = [value.shape[a] for a in axes]
    return [int(d) for d in dims] if all(isinstance(d, int) for d in dims) else None


def mean_over(value: ir.Value, x_rank: int, like: ir.Value | None = None
              ) -> tuple[ir.Value, list[ir.Node], list[int]] | None:
    """`value` as a mean over trailing axes of its input: ReduceMean, or ReduceSum followed by
    Div by (or Mul by the reciprocal of) the number of reduced elements, counted in the shape
    of `like` (a value of the reduced input's shape; default the input itself).

    Returns (the averaged input, the nodes, the axes)."""
    node = producer(value, "ReduceMean")
    if node is not None:
        axes = reduce_axes(node, x_rank)
        return (node.inputs[0], [node], axes) if trailing(axes, x_rank) and node.inputs[0] \
            is not None else None
    scale = producer(value, "Div", "Mul")
    if scale is None:
        return None
    total = producer(scale.inputs[0], "ReduceSum")
    if total is None or scale.inputs[0].is_graph_output() or len(scale.inputs[0].uses()) != 1:
        return None
    axes = reduce_axes(total, x_rank)
    if trailing(axes, x_rank) is None or total.inputs[0] is None:
        return None
    dims = static_dims(like if like is not None else total.inputs[0], axes or [])
    if dims is None:
        return None
    count = float(np.prod(dims))
    if not is_scalar(scale.inputs[1], count if scale.op_type == "Div" else 1.0 / count, 1e-6):
        return None
    return total.inputs[0], [total, scale], axes or []


def square_of(value: ir.Value | None) -> tuple[ir.Value, ir.Node] | None:
    """`value` as Pow(x, 2) or Mul(x, x): (x, node)."""
    node = producer(value, "Pow", "Mul")
    if node is None or node.inputs[0] is None:
        return None
    if node.op_type == "Pow" and is_scalar(node.inputs[1], 2.0, 0):
        return node.inputs[0], node
    if node.op_type == "Mul" and node.inputs[0] is node.inputs[1]:
        return node.inputs[0], node
    return None


class Namer:
    """Readable unique node names (the anchor's module path plus the new op type), and the
    constants a pass creates: one Constant node per distinct value, at the top of the graph."""

    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph
        self.taken = {n.name for n in graph if n.name}
        self.constants: dict[tuple[str, tuple[int, ...], bytes], ir.Value] = {}
        self.last: dict[str, int] = {}      # per base, the suffix last given (all below are taken)

    def __call__(self, anchor: ir.Node, op_type: str) -> str:
        prefix = anchor.name.rsplit("/", 1)[0] if anchor.name and "/" in anchor.name else ""
        base = f"{prefix}/{op_type}"
        i = self.last.get(base, 0)
        name = f"{base}_{i}" if i else base
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        self.last[base] = i
        return name

    def constant(self, anchor: ir.Node, data: np.ndarray) -> ir.Value:
        """A Constant holding `data`, shared by every fusion of this pass in this graph."""
        key = (data.dtype.str, data.shape, data.tobytes())
        if key not in self.constants:
            tensor = ir.tensor(data)
            node = make_node(self, anchor, "Constant", [], {"value": tensor}, dtype=tensor.dtype,
                             shape=ir.Shape(data.shape))
            node.outputs[0].const_value = tensor
            self.at_top(node)
            self.constants[key] = node.outputs[0]
        return self.constants[key]

    def at_top(self, node: ir.Node) -> None:
        """Put `node` (a constant) first in the graph."""
        first = next(iter(self.graph), None)
        if first is None:
            self.graph.append(node)
        else:
            self.graph.insert_before(first, node)


def unit_scale(namer: Namer, anchor: ir.Node, x: ir.Value, k: int) -> ir.Value | None:
    """A constant of ones over the last `k` dims of `x` (the scale of a norm without a
    weight), or None when those dims are not static."""
    r = rank(x)
    dims = None if r is None else static_dims(x, range(r - k, r))
    if dims is None or x.dtype is None:
        return None
    return namer.constant(anchor, np.ones(dims, dtype=x.dtype.numpy()))


def replace_with_norm(graph: ir.Graph, namer: Namer, nodes: Sequence[ir.Node], op_type: str,
                      x: ir.Value, k: int, eps: float, scale: ir.Value | None,
                      bias: ir.Value | None = None) -> bool:
    """Replace the matched `nodes` (the last one's output is the result) by one `op_type`
    normalization of `x` over its last `k` axes (LayerNormalization, RMSNormalization); a norm
    without a weight gets a scale of ones. False (nothing changed) when that scale's dims are
    not static."""
    anchor = nodes[0]
    if scale is None:
        scale = unit_scale(namer, anchor, x, k)
        if scale is None:
            return False
    node = make_node(namer, anchor, op_type, [x, scale, *([bias] if bias is not None else [])],
                     {"axis": -k, "epsilon": float(eps)}, dtype=x.dtype)
    replace(graph, nodes, [node], nodes[-1].outputs[0], node.outputs[0])
    return True


def rewrite_by_opset(model: ir.Model, op_types: Iterable[str], match: Callable[[ir.Node], M | None],
                     since: int, standard: Callable[[ir.Graph, Namer, M], bool],
                     below: Callable[[ir.Graph, Namer, M], bool]) -> bool:
    """For each match of `match` at a standard node of `op_types`: `standard(graph, namer, m)`
    (the fused ONNX op) when the model's opset is `since` or newer, else `below(...)` (the form
    ONNX Runtime fuses itself). Whether anything changed."""
    rewrite = standard if opset(model) >= since else below
    modified = False
    for graph, namer, node in standard_nodes(model, op_types):
        m = match(node)
        if m is not None:
            modified |= rewrite(graph, namer, m)
    return modified


def insert_after_value(graph: ir.Graph, value: ir.Value, nodes: ir.Node | Sequence[ir.Node]) -> None:
    """Put `nodes` (which read `value`) right after `value`'s producer in `graph`, or before the
    first non-Constant node when `value` is a graph input, an initializer or from an outer
    graph: a value computed once, where every later reader sees it."""
    producer = value.producer()
    if producer is not None and producer.graph is graph:
        graph.insert_after(producer, nodes)
    else:
        graph.insert_before(next(n for n in graph if n.op_type != "Constant"), nodes)


def make_node(namer: Namer, anchor: ir.Node, op_type: str, inputs: Sequence[ir.Value | None],
              attributes: dict[str, object] | None = None, *, domain: str = "",
              dtype: ir.DataType | None = None, shape: ir.Shape | None = None) -> ir.Node:
    """A node named after `anchor`'s module, carrying `anchor`'s metadata (module path,
    source line, FX node)."""
    node = ir.node(op_type, list(inputs), attributes=attributes or {}, domain=domain,
                   name=namer(anchor, op_type), metadata_props=dict(anchor.metadata_props))
    out = node.outputs[0]
    out.name = f"{node.name.lstrip('/').replace('/', '_')}_out"
    out.dtype = dtype
    out.shape = shape
    return node


def replace(graph: ir.Graph, old_nodes: Sequence[ir.Node], new_nodes: Sequence[ir.Node],
            old_output: ir.Value, new_output: ir.Value) -> None:
    """Put `new_nodes` before the last of `old_nodes` (in graph order), give `new_output` the
    name, type and shape of `old_output`, redirect its uses, and remove `old_nodes`."""
    order = {id(n): i for i, n in enumerate(graph)}
    last = max(old_nodes, key=lambda n: order[id(n)])
    graph.insert_before(last, list(new_nodes))
    name = old_output.name
    old_output.name = f"{name}__fused" if name else None
    new_output.name = name
    new_output.dtype = old_output.dtype or new_output.dtype
    if old_output.shape is not None:
        new_output.shape = old_output.shape
    ir.convenience.replace_all_uses_with(old_output, new_output, replace_graph_outputs=True)
    graph.remove(sorted(old_nodes, key=lambda n: -order[id(n)]), safe=True)
