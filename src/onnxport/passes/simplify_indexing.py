"""SimplifyIndexingPass: index arithmetic that only restates its input, folded away.

transformers builds a decoder's attention mask by indexing the padding mask with aranges
(`mask[batch_idx, kv_idx]`), which exports as a wrap of negative indices, a GatherND over a
grid of aranges and Ands with all-True tensors: ~35 nodes a step where a Slice and an
Unsqueeze say the same. Rewritten (any module, any exporter):

    Where(Less(x, 0), Add(x, n), x)       -> x     x provably >= 0 (Range from >= 0 upward,
    Where(GreaterOrEqual(x, 0), x, ...)   -> x     Shape, Size, through reshaping ops)
    GatherND(data, Concat(Unsqueeze(Expand(i_j, s), -1) for j))
        -> Unsqueeze(Slice(data, 0, n_j on axis j), other axes) [Expand(., s)]
           each i_j an arange Range(0, n_j, 1) on its own axis of a rank-r grid, j ascending;
           the Slice only where n_j is not provably data's dim j, the Expand only where s is
           not the grid's own broadcast shape
    And(x, all-True), Or(x, all-False), Mul(x, ones), integer Add/Sub(x, 0)  -> x
        (the constant may be a ConstantOfShape / Expand of one, to a shape within x's; no
        Expand(x, shape) otherwise: ONNX Runtime infers Expand's 1 against 0 as 1)
    Expand(x, s), Reshape(x, s)           -> x     s provably x's shape (its symbolic dims)
    Unsqueeze(Unsqueeze(x, a), b)         -> Unsqueeze(x, a and b)

Each node is visited once in graph order; what a value is known to be (non-negative, its
rank, its symbolic integer value) is memoized, so the pass is linear in the graph.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
import re

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common

from onnxport.passes import _fusion as f

_INTS = (ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
         ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64)
_UNSIGNED = (ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64)
# Ops whose output holds only values of their first input.
_SAME_VALUES = {"Unsqueeze", "Squeeze", "Reshape", "Expand", "Flatten", "Identity", "Transpose",
                "Slice", "Tile", "Gather", "GatherElements", "GatherND"}
_BROADCASTING = {"Add", "Sub", "Mul", "Div", "And", "Or", "Xor", "Max", "Min", "Where", "Equal",
                 "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}


def _make(namer: f.Namer, anchor: ir.Node, op_type: str, inputs: list[ir.Value | None],
          dtype: ir.DataType | None = None, shape: ir.Shape | None = None) -> ir.Node:
    node = f.make_node(namer, anchor, op_type, inputs, dtype=dtype, shape=shape)
    if dtype is None:       # untyped, as the value it stands for
        node.outputs[0].type = None
    return node


def _int_data(value: ir.Value | None) -> np.ndarray | None:
    """A small integer constant's data (index arithmetic; never a weight's data)."""
    if value is None or value.dtype not in (*_INTS, None):
        return None
    tensor = value.const_value
    if tensor is not None and tensor.size > 64:
        return None
    data = f.constant(value)
    return data if data is not None and data.dtype.kind in "iu" and data.size <= 64 else None


class SimplifyIndexingPass(ir.passes.InPlacePass):
    """Index wraps, identity gathers and identity-element operands -> their plain values."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in f.graphs(model):
            facts = _Facts()
            namer = f.Namer(graph)
            for node in list(graph):
                rewrite = _REWRITES.get(node.op_type)
                if rewrite is None or node.graph is not graph or node.domain or \
                        node.outputs[0].is_graph_output():
                    continue
                new = rewrite(facts, graph, namer, node)
                if new is None:
                    continue
                ir.convenience.replace_all_uses_with(node.outputs[0], new)
                modified = True
        if modified:
            common.RemoveUnusedNodesPass()(model)
        return ir.passes.PassResult(model, modified)


class _Facts:
    """Memoized facts about values: non-negative, rank, symbolic integer value."""

    def __init__(self) -> None:
        self.nonneg_memo: dict[int, bool] = {}
        self.sym_memo: dict[int, object] = {}

    @staticmethod
    def _memoized(memo: dict, compute: Callable, value: ir.Value | None, depth: int,
                  unknown: object) -> object:
        """compute(value, depth), once per value; `unknown` for no value or no depth left."""
        if value is None or depth == 0:
            return unknown
        key = id(value)
        if key not in memo:
            memo[key] = compute(value, depth)
        return memo[key]

    def nonneg(self, value: ir.Value | None, depth: int = 24) -> bool:
        """Whether every element of integer `value` is provably >= 0."""
        return bool(self._memoized(self.nonneg_memo, self._nonneg, value, depth, False))

    def _nonneg(self, value: ir.Value, depth: int) -> bool:
        if value.dtype in _UNSIGNED:
            return True
        data = _int_data(value)
        if data is not None:
            return bool((data >= 0).all())
        node = value.producer()
        if node is None or node.domain:
            return False
        op, ins = node.op_type, node.inputs
        if op in ("Shape", "Size", "Relu", "NonZero", "ArgMax", "ArgMin", "TopK") and \
                value is node.outputs[-1 if op == "TopK" else 0]:
            return True
        if op == "Range":
            step = f.scalar(ins[2])
            return step is not None and step > 0 and self.nonneg(ins[0], depth - 1)
        if op in _SAME_VALUES:
            return self.nonneg(ins[0], depth - 1)
        if op == "Cast":     # to int64 from a narrower or signed integer (no wrap), or from bool
            source = ins[0].dtype if ins[0] is not None else None
            if value.dtype != ir.DataType.INT64 or source is None:
                return False
            return source == ir.DataType.BOOL or source in _INTS and source != ir.DataType.UINT64 \
                and self.nonneg(ins[0], depth - 1)
        if op in ("Add", "Mul", "Min", "Concat"):
            return all(self.nonneg(v, depth - 1) for v in ins)
        if op == "Max":
            return any(self.nonneg(v, depth - 1) for v in ins)
        if op == "Where":
            return self.nonneg(ins[1], depth - 1) and self.nonneg(ins[2], depth - 1)
        return False

    def rank(self, value: ir.Value | None) -> int | None:
        if value is None:
            return None
        if value.shape is not None:
            return len(value.shape)
        if value.const_value is not None:
            return len(value.const_value.shape)
        node = value.producer()
        if node is None or node.domain:
            return None
        if node.op_type in ("Shape", "Range"):
            return 1
        if node.op_type == "Reshape":
            target = f.constant(node.inputs[1])
            return None if target is None else int(target.size)
        if node.op_type == "Unsqueeze":
            axes, inner = f.constant(node.inputs[1]), self.rank(node.inputs[0])
            return None if axes is None or inner is None else inner + int(axes.size)
        if node.op_type == "Gather":
            data_rank, index_rank = self.rank(node.inputs[0]), self.rank(node.inputs[1])
            return None if data_rank is None or index_rank is None else data_rank + index_rank - 1
        return None

    def sym(self, value: ir.Value | None, depth: int = 16) -> object:
        """The integer a one-element `value` holds, as an int or a sympy expression of the
        graph's dim names, or None when unknown."""
        return self._memoized(self.sym_memo, self._sym, value, depth, None)

    def _sym(self, value: ir.Value, depth: int) -> object:
        data = _int_data(value)
        if data is not None:
            return int(data.reshape(-1)[0]) if data.size == 1 else None
        node = value.producer()
        if node is None or node.domain:
            return None
        op, ins = node.op_type, node.inputs
        if op in ("Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast") and ins[0] is not None:
            return self.sym(ins[0], depth - 1)
        if op == "Gather" and self.rank(ins[1]) in (0, 1):
            index = f.constant(ins[1])
            elements = shape_elements(self, ins[0], depth - 1)
            if index is None or index.size != 1 or elements is None:
                return None
            i = int(index.reshape(-1)[0])
            return elements[i] if -len(elements) <= i < len(elements) else None
        if op in ("Add", "Sub", "Mul"):
            a, b = self.sym(ins[0], depth - 1), self.sym(ins[1], depth - 1)
            if a is None or b is None:
                return None
            return a + b if op == "Add" else a - b if op == "Sub" else a * b  # type: ignore[operator]
        return None


def dim_expr(dim: object) -> object:
    """A shape dim as an int or a sympy expression of its name, None when it has none."""
    if isinstance(dim, int):
        return dim
    name = getattr(dim, "value", None)
    return _parse(name) if isinstance(name, str) else None


@functools.lru_cache(maxsize=1024)
def _parse(name: str) -> object:
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    symbols = {s: sympy.Symbol(s, integer=True) for s in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", name)}
    try:
        return parse_expr(name, local_dict=symbols, global_dict={"Integer": sympy.Integer})
    except Exception:  # noqa: BLE001  (a name that is no expression)
        return None


def same(a: object, b: object) -> bool:
    """Whether two dim expressions are provably equal."""
    if a is None or b is None:
        return False
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    import sympy

    try:
        return bool(a == b) or sympy.expand(a - b) == 0  # type: ignore[operator]
    except Exception:  # noqa: BLE001
        return False


def shape_elements(facts: _Facts, value: ir.Value | None, depth: int = 8) -> list[object] | None:
    """The elements of a 1-D shape tensor as dim expressions (None where unknown)."""
    if value is None or depth == 0:
        return None
    data = f.constant(value)
    if data is not None:
        return [int(d) for d in data.reshape(-1)] if data.ndim == 1 and data.dtype.kind in "iu" else None
    node = value.producer()
    if node is None or node.domain:
        return None
    if node.op_type == "Shape" and node.inputs[0] is not None and node.inputs[0].shape is not None:
        dims = [dim_expr(d) for d in node.inputs[0].shape]
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", len(dims))
        return dims[slice(start, end)]
    if node.op_type == "Concat":
        out: list[object] = []
        for v in node.inputs:
            part = shape_elements(facts, v, depth - 1) if facts.rank(v) == 1 else None
            if part is None:
                return None
            out += part
        return out
    if node.op_type in ("Reshape", "Unsqueeze") and facts.rank(value) == 1 and facts.rank(node.inputs[0]) == 0:
        return [facts.sym(node.inputs[0])]
    return None


def _literal(value: ir.Value | None) -> np.ndarray | None:
    """A Constant node's data; never an initializer (a weight that happens to be all ones
    is still a weight: apply_weights may change it)."""
    node = f.producer(value, "Constant")
    attr = node.attributes.get("value") if node is not None else None
    if attr is None or attr.type != ir.AttributeType.TENSOR or attr.as_tensor().size > 1024:
        return None
    return f.constant(value)


def _is_fill(value: ir.Value | None, fill: float) -> tuple[bool, ir.Value | None]:
    """(whether every element of `value` is `fill`, the shape tensor it is expanded to or
    None when it is a plain constant)."""
    data = _literal(value)
    if data is not None:
        return bool(data.size > 0 and (data == fill).all()), None
    node = f.producer(value, "Expand", "ConstantOfShape")
    if node is None:
        return False, None
    if node.op_type == "Expand":    # one element of rank 0: the Expand's shape is the result's
        inner = _literal(node.inputs[0])
        return (inner is not None and inner.ndim == 0 and bool(inner == fill)), node.inputs[1]
    attr = node.attributes.get("value")
    inner = attr.as_tensor().numpy() if attr is not None else np.zeros(1, np.float32)
    return bool((inner == fill).all()), node.inputs[0]


def _identity_operand(facts: _Facts, graph: ir.Graph, namer: f.Namer, node: ir.Node) -> ir.Value | None:
    """And(x, True), Or(x, False), Mul(x, 1), integer Add(x, 0) / Sub(x, 0) -> x."""
    out = node.outputs[0]
    fill = {"And": True, "Or": False, "Mul": 1, "Add": 0, "Sub": 0}[node.op_type]
    if node.op_type in ("Add", "Sub") and out.dtype not in _INTS:
        return None     # -0.0 + 0.0 is +0.0
    sides = [(1, 0)] if node.op_type == "Sub" else [(0, 1), (1, 0)]
    for c, x in sides:
        const, x_value = node.inputs[c], node.inputs[x]
        if x_value is None or x_value.dtype != out.dtype:
            continue
        full, shape = _is_fill(const, fill)
        if not full:
            continue
        if shape is not None:   # x alone when the fill's shape adds nothing to x's
            return x_value if _within(facts, shape, x_value) else None
        c_rank, x_rank = facts.rank(const), facts.rank(x_value)
        c_data = _literal(const)
        if c_data is not None and (c_data.size == 1 and x_rank is not None and c_rank is not None
                                   and c_rank <= x_rank or c_rank == 0):
            return x_value
        if c_data is not None and x_value.shape is not None and c_data.ndim <= len(x_value.shape) and \
                all(d == 1 or same(d, dim_expr(x_value.shape[len(x_value.shape) - c_data.ndim + i]))
                    for i, d in enumerate(c_data.shape)):
            return x_value
    return None


def _wrapped_index(facts: _Facts, graph: ir.Graph, namer: f.Namer, node: ir.Node) -> ir.Value | None:
    """Where(x < 0, x + n, x) and its mirrored forms -> x, when x is non-negative."""
    cond, then, other = node.inputs
    test = f.producer(cond, "Less", "Greater", "GreaterOrEqual", "LessOrEqual")
    if test is None:
        return None
    # (x, zero) of "x < 0": the branch taken is `wrapped` when x < 0, else `plain`
    a, b = test.inputs
    if test.op_type in ("Less", "GreaterOrEqual") and _int_data(b) is not None:
        x, zero = a, b
    elif test.op_type in ("Greater", "LessOrEqual") and _int_data(a) is not None:
        x, zero = b, a
    else:
        return None
    negative_first = test.op_type in ("Less", "Greater")
    wrapped, plain = (then, other) if negative_first else (other, then)
    zero_data = _int_data(zero)
    if plain is not x or zero_data is None or zero_data.size != 1 or zero_data.reshape(-1)[0] != 0:
        return None
    add = f.producer(wrapped, "Add")
    x_rank = facts.rank(x)
    if add is None or x not in add.inputs or not facts.nonneg(x):
        return None
    n = f.other_input(add, x)
    for v in (zero, n):
        r = facts.rank(v)
        if r is None or r > 0 and (x_rank is None or r > x_rank or v.shape is None
                                   or any(d != 1 for d in v.shape)):
            return None
    return x


def _arange_axis(facts: _Facts, value: ir.Value | None) -> tuple[ir.Node, int, int] | None:
    """(Range(0, n, 1), grid rank, axis) when `value` is an arange Unsqueezed onto one axis."""
    chain: list[list[int]] = []
    while value is not None:
        node = f.producer(value, "Unsqueeze", "Range")
        if node is None:
            return None
        if node.op_type == "Range":
            if f.scalar(node.inputs[0]) != 0 or f.scalar(node.inputs[2]) != 1:
                return None
            rank, axis = 1, 0
            for axes in reversed(chain):
                rank += len(axes)
                axes = sorted(a + rank if a < 0 else a for a in axes)
                kept = [i for i in range(rank) if i not in axes]
                if len(kept) != rank - len(axes):
                    return None
                axis = kept[axis]
            return node, rank, axis
        data = f.constant(node.inputs[1]) if len(node.inputs) > 1 else None
        if data is None:
            return None
        chain.append([int(a) for a in data.reshape(-1)])
        value = node.inputs[0]
    return None


def _identity_gather(facts: _Facts, graph: ir.Graph, namer: f.Namer, node: ir.Node) -> ir.Value | None:
    """GatherND over a grid of aranges -> data sliced to the aranges, on the grid's axes."""
    data, index = node.inputs
    if node.attributes.get_int("batch_dims", 0) != 0 or data is None or data.shape is None:
        return None
    concat = f.producer(index, "Concat")
    k = len(data.shape)
    if concat is None or len(concat.inputs) != k:
        return None
    shape_value, aranges, grid, lasts = None, [], None, []
    for part in concat.inputs:
        unsq = f.producer(part, "Unsqueeze")
        expand = f.producer(unsq.inputs[0], "Expand") if unsq is not None else None
        if expand is None or (shape_value is not None and expand.inputs[1] is not shape_value):
            return None
        shape_value = expand.inputs[1]
        found = _arange_axis(facts, expand.inputs[0])
        if found is None or grid is not None and found[1] != grid:
            return None
        grid = found[1]
        last = f.constant(unsq.inputs[1])
        if last is None or last.size != 1:
            return None
        lasts.append(int(last.reshape(-1)[0]))
        aranges.append((expand.inputs[0], *found))
    if grid is None:
        return None
    # the index components in the last axis: -1, or the grid's rank when the Expands keep it
    own_shape = _grid_shape(shape_value, {id(a[0]) for a in aranges})
    ends = (-1, grid) if own_shape else (-1,)
    if any(a not in ends for a in lasts) or concat.attributes.get_int("axis", 0) not in ends:
        return None
    axes = [a[3] for a in aranges]
    if axes != sorted(set(axes)):
        return None
    # Slice where the arange's end is not provably the dim (a non-negative end: Slice would
    # count a negative one from the back, where the arange is empty)
    cut = [j for j, (_, rng, _, _) in enumerate(aranges) if not _is_dim(facts, rng, data, j)]
    if any(not facts.nonneg(aranges[j][1].inputs[1]) for j in cut):
        return None
    new_nodes: list[ir.Node] = []
    current = data
    dims = list(data.shape)
    for j in cut:
        rng = aranges[j][1]
        one, zero, axis = (namer.constant(node, np.array([v], np.int64)) for v in (1, 0, j))
        limit = _make(namer, node, "Unsqueeze", [rng.inputs[1], zero], dtype=ir.DataType.INT64,
                      shape=ir.Shape([1]))
        dims[j] = rng.outputs[0].shape[0] if rng.outputs[0].shape is not None else None
        sliced = _make(namer, node, "Slice", [current, zero, limit.outputs[0], axis, one],
                       dtype=data.dtype, shape=None if None in dims else ir.Shape(dims))
        new_nodes += [limit, sliced]
        current = sliced.outputs[0]
    if grid > k:
        others = [i for i in range(grid) if i not in axes]
        grid_dims: list[object] = [1] * grid
        for j, a in enumerate(axes):
            grid_dims[a] = dims[j]
        unsq = _make(namer, node, "Unsqueeze", [current, namer.constant(node, np.array(others, np.int64))],
                     dtype=data.dtype, shape=None if None in grid_dims else ir.Shape(grid_dims))
        new_nodes.append(unsq)
        current = unsq.outputs[0]
    if not own_shape:
        expand = _make(namer, node, "Expand", [current, shape_value], dtype=data.dtype,
                       shape=node.outputs[0].shape)
        new_nodes.append(expand)
        current = expand.outputs[0]
    if current is data:
        return data
    graph.insert_before(node, new_nodes)
    current.shape = node.outputs[0].shape or current.shape
    return current


def _is_dim(facts: _Facts, rng: ir.Node, data: ir.Value, j: int) -> bool:
    """Whether Range(0, n, 1) has data's dim j elements: n is that dim, or the Range's
    length is the same symbol."""
    dim = dim_expr(data.shape[j])  # type: ignore[index]
    length = rng.outputs[0].shape
    return same(facts.sym(rng.inputs[1]), dim) or length is not None and same(dim_expr(length[0]), dim)


def _grid_shape(shape_value: ir.Value | None, grid_values: set[int]) -> bool:
    """Whether `shape_value` is Shape(a broadcasting op over exactly the grid's aranges)."""
    shape = f.producer(shape_value, "Shape")
    if shape is None or shape.attributes.get("start") is not None or shape.attributes.get("end") is not None:
        return False
    seen: set[int] = set()
    todo = [shape.inputs[0]]
    while todo:
        v = todo.pop()
        if v is not None and id(v) in grid_values:
            seen.add(id(v))
            continue
        op = f.producer(v, *_BROADCASTING - {"Where"})
        if op is None:
            return False
        todo += op.inputs
    return seen == grid_values


def _within(facts: _Facts, shape: ir.Value | None, x: ir.Value) -> bool:
    """Whether broadcasting x to the shape tensor `shape` leaves x's shape: every element is
    1 or x's dim there."""
    if x.shape is None:
        return False
    elements = shape_elements(facts, shape)
    if elements is None or len(elements) > len(x.shape):
        return False
    offset = len(x.shape) - len(elements)
    return all(e == 1 or same(e, dim_expr(x.shape[offset + i])) for i, e in enumerate(elements))


def _noop_expand(facts: _Facts, graph: ir.Graph, namer: f.Namer, node: ir.Node) -> ir.Value | None:
    """Expand(x, s) -> x when every element of s is 1 or x's dim there."""
    x = node.inputs[0]
    return x if x is not None and _within(facts, node.inputs[1], x) else None


def _nested_unsqueeze(facts: _Facts, graph: ir.Graph, namer: f.Namer, node: ir.Node) -> ir.Value | None:
    """Unsqueeze(Unsqueeze(x, a), b) -> Unsqueeze(x, a and b as axes of the result)."""
    inner = f.producer(node.inputs[0], "Unsqueeze")
    if inner is None or len(inner.inputs) < 2 or len(node.inputs) < 2:
        return None
    a, b = f.constant(inner.inputs[1]), f.constant(node.inputs[1])
    x_rank = facts.rank(inner.inputs[0])
    if a is None or b is None or x_rank is None:
        return None
    total = x_rank + a.size + b.size
    outer = {int(i) + total if i < 0 else int(i) for i in b.reshape(-1)}
    middle = {int(i) + x_rank + a.size if i < 0 else int(i) for i in a.reshape(-1)}
    kept = [i for i in range(total) if i not in outer]
    if len(outer) != b.size or len(middle) != a.size or len(kept) != x_rank + a.size or \
            any(not 0 <= i < len(kept) for i in middle):
        return None
    axes = sorted(outer | {kept[i] for i in middle})
    out = node.outputs[0]
    merged = _make(namer, node, "Unsqueeze", [inner.inputs[0], namer.constant(node, np.array(axes, np.int64))],
                         dtype=inner.inputs[0].dtype, shape=out.shape)
    graph.insert_before(node, merged)
    return merged.outputs[0]


def _noop_reshape(facts: _Facts, graph: ir.Graph, namer: f.Namer, node: ir.Node) -> ir.Value | None:
    """Reshape(x, s) -> x when s is x's shape, element by element (a scalar to [] included)."""
    x = node.inputs[0]
    if x is None or x.shape is None or len(node.inputs) < 2:
        return None
    elements = shape_elements(facts, node.inputs[1])
    if elements is None or len(elements) != len(x.shape):
        return None
    if all(same(e, dim_expr(d)) and e not in (0, -1) for e, d in zip(elements, x.shape)):
        return x
    return None


_REWRITES = {"Unsqueeze": _nested_unsqueeze, "Reshape": _noop_reshape, "Where": _wrapped_index, "GatherND": _identity_gather, "Expand": _noop_expand,
             "And": _identity_operand, "Or": _identity_operand, "Mul": _identity_operand,
             "Add": _identity_operand, "Sub": _identity_operand}
