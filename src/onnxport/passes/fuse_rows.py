"""FuseRowsPass: row-wise computation on (..., hidden) tensors carried as 2-D (rows, hidden).

A transformer's hidden state is (batch, sequence, hidden), but everything between two
attention cores works on rows of the last axis: Linear layers (MatMul by a 2-D weight),
bias and residual Adds, activations, LayerNorm / RMSNorm / Softmax over the last axis. Carried
as (batch * sequence, hidden) when the dims are static, those ops mean the same, and

* each Linear becomes one Gemm (FuseGemmPass: MatMul(x, Transpose(W)) + b -> Gemm(x, W, b,
  transB=1)), 3 nodes to 1, where a 3-D MatMul cannot;
* the Reshapes exporters put around 2-D matmuls (GPT-2's Conv1D: view -> addmm -> view)
  cancel, and ONNX Runtime no longer wraps each MatMul + Add in Reshapes itself;
* ONNX Runtime does not turn the residual Add + LayerNormalization into its contrib
  SkipLayerNormalization (its fusion needs 3-D inputs), whose CPU kernel is 3-6x slower than
  Add + LayerNormalization in ORT 1.32 (docs/benchmarks.md, "ORT latency").

The pass finds connected groups of such row-wise nodes over static shapes of rank >= 3 and
rewrites a group when it contains a matrix product (or costs no new node): values inside the
group become 2-D, a Reshape enters each value read from outside and one restores the original
shape for readers outside (a Reshape reader with a constant target takes the 2-D value as is).
Then Reshape(Reshape(x)) and Reshapes to the input's own shape are removed.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

# Metadata on a value carried as rows: "<original name>:<original shape>", so that
# ONNXProgram.compute_values still answers for the original name (reshaped back).
ROWS_OF = "pkg.onnxport.rows_of"

_UNARY = {"Abs", "Cast", "Ceil", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
          "HardSwish", "Identity", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu",
          "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Softsign", "Sqrt", "Tanh"}
_ELEMENTWISE = {"Add", "And", "Div", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
                "Max", "Min", "Mul", "Or", "Pow", "Sub", "Where", "Xor"}
_LAST_AXIS = {"LayerNormalization", "RMSNormalization", "Softmax", "LogSoftmax", "Split"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}


def _static(value: ir.Value | None) -> list[int] | None:
    dims = f.dims_of(value)
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    return [int(d) for d in dims]   # type: ignore[call-overload]


def _rows(shape: list[int]) -> list[int]:
    return [math.prod(shape[:-1]), shape[-1]]


def _broadcast_constant(value: ir.Value) -> bool:
    """A constant that broadcasts along the last axis only (a scalar or a 1-D vector)."""
    data = f.constant(value)
    return data is not None and data.ndim <= 1


def _row_inputs(node: ir.Node) -> list[int] | None:
    """The inputs of `node` that are rows of its output (the others broadcast unchanged), when
    `node` computes row by row on a static (..., hidden) tensor of rank >= 3; else None."""
    if node.domain or not node.outputs or any(o.is_graph_output() and o.shape is None
                                              for o in node.outputs):
        return None
    op = node.op_type
    if op == "MatMul":
        a, b = _static(node.inputs[0]), _static(node.inputs[1])
        if a is None or b is None or len(a) < 3 or len(b) != 2 or 0 in a:
            return None
        return [0]
    out = _static(node.outputs[0])
    if out is None or len(out) < 3 or 0 in out:
        return None
    if op in _UNARY or op in _LAST_AXIS or op in _REDUCE:
        x = node.inputs[0]
        if _static(x) is None:
            return None
        shape = _static(x)
        assert shape is not None
        if len(shape) != len(out) or shape[:-1] != out[:-1]:
            return None
        if op in _UNARY:
            return [0] if len(node.outputs) == 1 and len(node.inputs) == 1 and shape == out else None
        if op in _REDUCE:
            has_axes = (len(node.inputs) > 1 and node.inputs[1] is not None) or \
                "axes" in node.attributes
            axes = f.reduce_axes(node, len(shape)) if has_axes else None
            return [0] if axes == [len(shape) - 1] and out[-1] == 1 else None
        axis_attr = node.attributes.get("axis")
        axis = -1 if axis_attr is None else axis_attr.as_int()
        if axis not in (-1, len(shape) - 1):
            return None
        if op == "Split":
            if len(node.inputs) > 1 and node.inputs[1] is not None and \
                    f.constant(node.inputs[1]) is None:
                return None
            outs = [_static(o) for o in node.outputs]
            if any(o is None or o[:-1] != shape[:-1] for o in outs):
                return None
            return [0]
        if shape != out or any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
            return None
        return [0]
    if op in ("QuantizeLinear", "DequantizeLinear"):
        # Per-tensor, or per-channel on the last axis: the Reshape into rows then sits on the
        # integer side, and ORT's QDQ selectors still see DQ -> Gemm -> Q.
        x, shape = node.inputs[0], _static(node.inputs[0])
        if x is None or shape != out or len(node.outputs) != 1:
            return None
        block = node.attributes.get("block_size")
        if block is not None and block.as_int() != 0:
            return None
        axis_attr = node.attributes.get("axis")
        axis = 1 if axis_attr is None else axis_attr.as_int()
        for v in node.inputs[1:]:
            data = None if v is None else f.constant(v)
            if v is not None and (data is None or data.ndim > 1 or
                                  (data.ndim == 1 and axis not in (-1, len(out) - 1))):
                return None
        return [0]
    if op in _ELEMENTWISE:
        rows = []
        for i, v in enumerate(node.inputs):
            if v is None:
                return None
            shape = _static(v)
            if shape is not None and len(shape) == len(out) and shape[:-1] == out[:-1] \
                    and shape[-1] in (out[-1], 1):
                rows.append(i)
            elif not _broadcast_constant(v):
                return None
        return rows or None
    return None


class FuseRowsPass(ir.passes.InPlacePass):
    """Row-wise groups on static (..., hidden) tensors -> the same on 2-D (rows, hidden)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in f.graphs(model):
            namer = f.Namer(graph)
            plan = {id(n): (n, r) for n in graph if (r := _row_inputs(n)) is not None}
            for group in _groups(graph, plan):
                group = _prune(group, plan)
                if group and _worth_it(group, plan):
                    _rewrite(graph, namer, group, plan)
                    modified = True
            modified |= _clean_reshapes(graph)
        return ir.passes.PassResult(model, modified)


def _groups(graph: ir.Graph, plan: dict[int, tuple[ir.Node, list[int]]]) -> list[list[ir.Node]]:
    """Connected groups of row-wise nodes (linked through row inputs), in graph order."""
    parent: dict[int, int] = {k: k for k in plan}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    readers: dict[int, int] = {}     # nodes reading the same outside value share its entry
    for k, (node, rows) in plan.items():
        for i in rows:
            value = node.inputs[i]
            src = value.producer() if value is not None else None
            if src is not None and id(src) in plan:
                parent[find(k)] = find(id(src))
            elif value is not None:
                parent[find(k)] = find(readers.setdefault(id(value), k))
    groups: dict[int, list[ir.Node]] = {}
    for node in graph:
        if id(node) in plan:
            groups.setdefault(find(id(node)), []).append(node)
    return list(groups.values())


def _prune(group: list[ir.Node], plan: dict[int, tuple[ir.Node, list[int]]]) -> list[ir.Node]:
    """Leave 3-D the nodes at the group's edge that combine several outside values read by no
    other node of the group (BERT's embedding sums): their one output then enters the group,
    one Reshape instead of one per input."""
    group = list(group)
    changed = True
    while changed:
        changed = False
        inside = {id(n) for n in group}
        for node in group:
            values = [node.inputs[i] for i in plan[id(node)][1]]
            if len(values) < 2 or any(v is None for v in values):
                continue
            srcs = [v.producer() for v in values]   # type: ignore[union-attr]
            if any(p is not None and (id(p) in inside or _reshape_target(p) is not None)
                   for p in srcs):
                continue
            if any(u.node is not node and id(u.node) in inside
                   for v in values for u in v.uses()):   # type: ignore[union-attr]
                continue
            group.remove(node)
            changed = True
            break
    return group


def _reshape_target(node: ir.Node) -> np.ndarray | None:
    """The constant target shape of a Reshape that takes any input of the same size (no 0
    entry, which would copy an input dim)."""
    if node.op_type != "Reshape" or node.domain or len(node.inputs) < 2:
        return None
    data = f.constant(node.inputs[1])
    if data is None or data.ndim != 1 or (data == 0).any():
        return None
    return data


def _worth_it(group: list[ir.Node], plan: dict[int, tuple[ir.Node, list[int]]]) -> bool:
    """Rewrite groups holding a matrix product, or where more Reshapes cancel (entries read
    from a Reshape, exits read by Reshapes only) than new ones enter or exit."""
    if any(n.op_type == "MatMul" for n in group):
        return True
    inside = {id(n) for n in group}
    gain = cost = 0
    seen: set[int] = set()
    for node in group:
        for i in plan[id(node)][1]:
            value = node.inputs[i]
            src = value.producer()
            if (src is not None and id(src) in inside) or id(value) in seen:
                continue
            seen.add(id(value))
            if src is not None and _reshape_target(src) is not None:
                gain += 1
            else:
                cost += 1
        for out in node.outputs:
            outside = [u for u in out.uses() if id(u.node) not in inside]
            if out.is_graph_output() or any(_reshape_target(u.node) is None or u.idx != 0
                                            for u in outside):
                cost += 1
            else:
                gain += len(outside)
    return gain > cost


def _reshape(namer: f.Namer, anchor: ir.Node, value: ir.Value, shape: list[int]) -> ir.Node:
    target = namer.constant(anchor, np.array(shape, dtype=np.int64))
    return f.make_node(namer, anchor, "Reshape", [value, target], dtype=value.dtype,
                       shape=ir.Shape(shape))


def _rewrite(graph: ir.Graph, namer: f.Namer, group: list[ir.Node],
             plan: dict[int, tuple[ir.Node, list[int]]]) -> None:
    inside = {id(n) for n in group}
    entries: dict[int, ir.Value] = {}
    # The original shapes, before any input turns 2-D (dims_of infers through producers).
    original = {id(o): _static(o) for node in group for o in node.outputs}
    for node in group:
        for i in plan[id(node)][1]:
            value = node.inputs[i]
            assert value is not None
            src = value.producer()
            if src is not None and id(src) in inside:
                continue
            if id(value) not in entries:
                shape = _static(value)
                assert shape is not None
                entry = _reshape(namer, node, value, _rows(shape))
                graph.insert_before(node, entry)
                entries[id(value)] = entry.outputs[0]
            node.replace_input_with(i, entries[id(value)])
        rank = None
        for out in node.outputs:
            shape = original[id(out)]
            if shape is None:
                continue
            rank = len(shape)
            outside = [u for u in out.uses() if id(u.node) not in inside]
            out.shape = ir.Shape(_rows(shape))
            # A name is a contract (compute_values, debugging against eager): the 2-D value
            # takes a name of its own, and the original name goes to the restored value.
            name = out.name
            if name:
                out.name = f"{name}__rows"
                out.metadata_props[ROWS_OF] = f"{name}:{','.join(map(str, shape))}"
            keep = [u for u in outside if _reshape_target(u.node) is not None and u.idx == 0]
            back = [u for u in outside if u not in keep]
            if back or out.is_graph_output():
                exit_ = _reshape(namer, node, out, shape)
                graph.insert_after(node, exit_)
                restored = exit_.outputs[0]
                for u in back:
                    u.node.replace_input_with(u.idx, restored)
                if name:
                    restored.name = name
                if out.is_graph_output():
                    outputs = graph.outputs
                    for j, v in enumerate(outputs):
                        if v is out:
                            outputs[j] = restored
        if node.op_type in _LAST_AXIS and "axis" in node.attributes:
            node.attributes["axis"] = ir.AttrInt64("axis", -1)
        elif node.op_type in _REDUCE and rank is not None:
            if len(node.inputs) > 1 and node.inputs[1] is not None:
                node.replace_input_with(1, namer.constant(node, np.array([-1], dtype=np.int64)))
            if "axes" in node.attributes:      # the attribute form (before opset 18)
                node.attributes["axes"] = ir.AttrInt64s("axes", [-1])


def _clean_reshapes(graph: ir.Graph) -> bool:
    """Reshape(Reshape(x, a), b) -> Reshape(x, b); a Reshape to its input's own static shape
    -> its input."""
    modified = False
    for node in list(graph):
        if node.graph is not graph or _reshape_target(node) is None:
            continue
        src = node.inputs[0].producer() if node.inputs[0] is not None else None
        while src is not None and src.op_type == "Reshape" and not src.domain \
                and src.inputs[0] is not None:
            node.replace_input_with(0, src.inputs[0])
            if not src.outputs[0].uses() and not src.outputs[0].is_graph_output():
                graph.remove(src, safe=True)
            modified = True
            src = node.inputs[0].producer()
        x, y = node.inputs[0], node.outputs[0]
        xs, ys = _static(x), _static(y)
        if x is not None and xs is not None and xs == ys and not y.is_graph_output():
            ir.convenience.replace_all_uses_with(y, x)
            graph.remove(node, safe=True)
            modified = True
    return modified


__all__ = ["FuseRowsPass"]
