"""FuseRotaryPass: rotary position embeddings written out in elementary ops -> ONNX
`RotaryEmbedding` (opset >= 23). Below opset 23 the pass changes nothing.

Matched (any module, any exporter), the `rotate_half` form (interleaved=0), on a 4-D x (batch, heads, seq, d)
with d = 2h static:

    rot = Concat(Neg(Slice(x, h:2h, axis=-1)), Slice(x, 0:h, axis=-1), axis=-1)
    out = x * C + rot * S                       (each Mul's operands in either order)

where C and S broadcast as (batch, 1, seq, d) and are, for both, Unsqueeze(c, axis=1) of a
(batch, seq, d) value whose two halves are provably equal:

    c = [Mul(., scalar) | Cast]* (Cos | Sin)(Concat(f, f, axis=-1))   (transformers' Llama)
    c = Gather(cache, position_ids)                                     cache constant, halves equal

and the interleaved form (interleaved=1, GPT-J's rotate_every_two):

    rot = Reshape(Concat(Unsqueeze(Neg(x[..., 1::2]), -1), Unsqueeze(x[..., 0::2], -1), -1))
    out = x * C + rot * S                       C, S: Unsqueeze(c, 1), c = rows of a constant
                                                cache whose elements come in equal pairs

RotaryEmbedding (no position_ids, cos/sin caches of shape (batch, seq, d/2)) takes c[..., :d/2]
(c[..., ::2] interleaved): one Slice shared by every rotation that reads the same c (q and k of
a layer), expanded to x's batch when c has batch 1.

Below opset 23 the `rotate_half` form stays written out, with the negation moved into the
sine: `Concat(Neg(x2), x1) * S` is `Concat(x2, x1) * (S * [-1]*h + [1]*h)` exactly (a sign
flip is exact), and `x1, x2` come from one Split. S times the signs is computed once for every
rotation that reads S (the q and k of every layer): two nodes a rotation fewer.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_UNARY = ("Cast", "Identity")


def _slice_last(node: ir.Node | None, x: ir.Value, d: int, step: int = 1) -> tuple[int, int] | None:
    """(start, end) of a Slice of `x` on its last axis with step `step`, clamped to [0, d]."""
    if node is None or node.op_type != "Slice" or node.inputs[0] is not x or len(node.inputs) < 3:
        return None
    starts, ends = f.constant(node.inputs[1]), f.constant(node.inputs[2])
    axes = f.constant(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None \
        else np.array([0])
    steps = f.constant(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None \
        else np.array([1])
    if starts is None or ends is None or axes is None or steps is None or \
            starts.size != 1 or ends.size != 1 or axes.size != 1 or steps.size != 1:
        return None
    if int(axes.reshape(())) not in (-1, 3) or int(steps.reshape(())) != step:
        return None

    def clamp(v: int) -> int:
        v = v + d if v < 0 else v
        return max(0, min(d, v))

    return clamp(int(starts.reshape(()))), clamp(int(ends.reshape(())))


def _concat_last(node: ir.Node | None, rank: int) -> bool:
    if node is None or node.op_type != "Concat" or len(node.inputs) != 2:
        return False
    axis = node.attributes.get("axis")
    return axis is not None and axis.as_int() in (-1, rank - 1)


def _rotate_half_of(value: ir.Value) -> ir.Value | None:
    """x when `value` is Concat(Neg(x[..., h:]), x[..., :h]) on a 4-D x with static even d."""
    cat = f.producer(value, "Concat")
    if not _concat_last(cat, 4):
        return None
    assert cat is not None
    neg = f.producer(cat.inputs[0], "Neg")
    second = f.producer(cat.inputs[1], "Slice")
    if neg is None or second is None:
        return None
    first = f.producer(neg.inputs[0], "Slice")
    x = second.inputs[0]
    if first is None or x is None or x.shape is None or len(x.shape) != 4:
        return None
    d = x.shape[3]
    if not isinstance(d, int) or d % 2 or d == 0:
        return None
    h = d // 2
    if _slice_last(first, x, d) != (h, d) or _slice_last(second, x, d) != (0, h):
        return None
    return x


def signed_rotation_of(rot: ir.Value, s_val: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """(x, S) when `rot * s_val` is the form this pass leaves below opset 23:
    Concat(x2, x1) * Mul(S, [-1]*h + [1]*h) with x1, x2 = Split(x) into halves, which is
    rotate_half(x) * S."""
    cat = f.producer(rot, "Concat")
    if not _concat_last(cat, 4):
        return None
    assert cat is not None
    split = f.producer(cat.inputs[0], "Split")
    x = None if split is None else split.inputs[0]
    if split is None or x is None or x.shape is None or len(x.shape) != 4 or \
            len(split.outputs) != 2 or cat.inputs[0] is not split.outputs[1] or \
            cat.inputs[1] is not split.outputs[0]:
        return None
    d = x.shape[3]
    sizes = f.constant(split.inputs[1]) if len(split.inputs) > 1 else None
    axis = split.attributes.get("axis")
    if not isinstance(d, int) or d % 2 or sizes is None or sizes.reshape(-1).tolist() != \
            [d // 2, d // 2] or axis is None or axis.as_int() not in (-1, 3):
        return None
    mul = f.producer(s_val, "Mul")
    if mul is None:
        return None
    signs = np.concatenate([-np.ones(d // 2), np.ones(d // 2)])
    for a, b in ((0, 1), (1, 0)):
        data = f.constant(mul.inputs[b])
        if data is not None and data.shape == (d,) and np.array_equal(data, signs) and \
                mul.inputs[a] is not None:
            return x, mul.inputs[a]
    return None


def _rotate_pairs_of(value: ir.Value) -> ir.Value | None:
    """x when `value` is Reshape(Concat(Unsqueeze(Neg(x[..., 1::2]), -1),
    Unsqueeze(x[..., 0::2], -1), axis=-1), x's shape): stack((-x2, x1), -1).flatten(-2)."""
    reshape = f.producer(value, "Reshape")
    if reshape is None or reshape.inputs[0] is None:
        return None
    cat = f.producer(reshape.inputs[0], "Concat")
    if not _concat_last(cat, 5):
        return None
    assert cat is not None
    u_neg, u_x = (f.producer(v, "Unsqueeze") for v in cat.inputs)
    if u_neg is None or u_x is None:
        return None
    for u in (u_neg, u_x):
        axes = f.constant(u.inputs[1]) if len(u.inputs) > 1 else None
        if axes is None or axes.reshape(-1).tolist() not in ([-1], [4]):
            return None
    neg = f.producer(u_neg.inputs[0], "Neg")
    even = f.producer(u_x.inputs[0], "Slice")
    odd = None if neg is None else f.producer(neg.inputs[0], "Slice")
    x = None if even is None else even.inputs[0]
    if odd is None or x is None or x.shape is None or len(x.shape) != 4:
        return None
    d = x.shape[3]
    if not isinstance(d, int) or d % 2 or d == 0 or value.shape is None or \
            list(value.shape) != list(x.shape):
        return None
    if _slice_last(odd, x, d, 2) != (1, d) or _slice_last(even, x, d, 2) != (0, d):
        return None
    return x


def _rotation_nodes(rot: ir.Value) -> list[ir.Node]:
    """The nodes of a matched rotate_half / rotate-pairs value, last first."""
    nodes: list[ir.Node] = []
    todo = [rot.producer()]
    while todo:
        node = todo.pop()
        if node is None or node.op_type not in ("Reshape", "Concat", "Unsqueeze", "Neg", "Slice"):
            continue
        nodes.append(node)
        if node.op_type != "Slice":
            todo.extend(v.producer() for v in node.inputs[:1 if node.op_type != "Concat" else 2])
    return nodes


def _equal_pairs(value: ir.Value | None) -> bool:
    """Whether the last axis of constant (or rows of a constant gathered) `value` repeats each
    element twice: c[..., 0::2] == c[..., 1::2]."""
    if value is None:
        return False
    node = value.producer()
    if node is not None and not node.domain and node.op_type in ("Gather", *_UNARY):
        axis = node.attributes.get("axis")
        if node.op_type == "Gather" and not (axis is None or axis.as_int() == 0):
            return False
        return _equal_pairs(node.inputs[0])
    data = f.constant(value)
    if data is None or data.ndim == 0 or data.shape[-1] % 2:
        return False
    return bool(np.array_equal(data[..., 0::2], data[..., 1::2]))


def _equal_halves(value: ir.Value | None, depth: int = 6) -> bool:
    """Whether the last axis of `value` is two equal halves, by construction."""
    if value is None or depth == 0:
        return False
    data = f.constant(value)
    if data is not None:
        if data.ndim == 0 or data.shape[-1] % 2:
            return False
        h = data.shape[-1] // 2
        return bool(np.array_equal(data[..., :h], data[..., h:]))
    node = value.producer()
    if node is None or node.domain:
        return False
    if node.op_type in (*_UNARY, "Cos", "Sin"):
        return _equal_halves(node.inputs[0], depth - 1)
    if node.op_type == "Mul":
        a, b = node.inputs[0], node.inputs[1]
        if f.scalar(b) is not None and f.constant(b) is not None and f.constant(b).size == 1:
            return _equal_halves(a, depth - 1)
        if f.scalar(a) is not None and f.constant(a) is not None and f.constant(a).size == 1:
            return _equal_halves(b, depth - 1)
        return False
    if node.op_type == "Concat":
        r = f.rank(value)
        return r is not None and _concat_last(node, r) and node.inputs[0] is node.inputs[1]
    if node.op_type == "Gather":                 # rows of a constant cache, by position
        axis = node.attributes.get("axis")
        return (axis is None or axis.as_int() == 0) and f.rank(node.inputs[0]) == 2 and \
            _equal_halves(node.inputs[0], depth - 1)
    return False


def _cache_source(value: ir.Value | None, x: ir.Value, interleaved: bool = False
                  ) -> ir.Value | None:
    """c (batch, seq, d) when `value` is Unsqueeze(c, axes=[1]) and c's halves are equal and
    its batch, seq and d are x's."""
    node = f.producer(value, "Unsqueeze")
    if node is None or len(node.inputs) < 2:
        return None
    axes = f.constant(node.inputs[1])
    if axes is None or axes.reshape(-1).tolist() not in ([1], [-3]):
        return None
    c = node.inputs[0]
    if c is None or c.shape is None or len(c.shape) != 3 or x.shape is None:
        return None
    if [c.shape[1], c.shape[2]] != [x.shape[2], x.shape[3]] or c.shape[0] not in (1, x.shape[0]):
        return None   # batch 1 (positions shared by the batch) is expanded to x's batch
    if c.dtype != x.dtype or not (_equal_pairs(c) if interleaved else _equal_halves(c)):
        return None
    return c


class FuseRotaryPass(ir.passes.InPlacePass):
    """`x * cos + rotate_half(x) * sin` -> RotaryEmbedding (opset >= 23); below, the
    negation of rotate_half folded into the sine."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if f.opset(model) < 23:
            return ir.passes.PassResult(model, _fold_signs(model))
        modified = False
        for graph in f.graphs(model):
            namer = f.Namer(graph)
            halves: dict[tuple[int, bool], ir.Value] = {}
            for node in list(graph):
                if node.graph is not graph or node.domain or node.op_type != "Add":
                    continue
                modified |= _fuse(graph, namer, node, halves)
        return ir.passes.PassResult(model, modified)


def rotation_readings(add: ir.Node) -> Iterator[tuple[ir.Node, ir.Node, ir.Value, ir.Value]]:
    """Every reading of `add` as `Mul(x, C) + Mul(rot, S)`: (the cos Mul, the sin Mul, rot, S)."""
    for first, second in ((0, 1), (1, 0)):
        m_cos = f.producer(add.inputs[first], "Mul")
        m_sin = f.producer(add.inputs[second], "Mul")
        if m_cos is None or m_sin is None or m_cos is m_sin:
            continue
        for rot, s_val in _mul_parts(m_sin):
            yield m_cos, m_sin, rot, s_val


def _fold_signs(model: ir.Model) -> bool:
    modified = False
    per_graph: dict[int, dict[int, ir.Value]] = {}
    for graph, namer, add in f.standard_nodes(model, ("Add",)):
        signed = per_graph.setdefault(id(graph), {})
        for m_cos, m_sin, rot, s_val in rotation_readings(add):
            x = _rotate_half_of(rot)
            if x is None or all(v is not x for v in m_cos.inputs) or \
                    not _only_inside([*reversed(_rotation_nodes(rot)), m_sin]):
                continue
            _signed_rotation(graph, namer, m_sin, rot, x, s_val, signed)
            modified = True
            break
    return modified


def _signed_rotation(graph: ir.Graph, namer: f.Namer, m_sin: ir.Node, rot: ir.Value,
                     x: ir.Value, s_val: ir.Value, signed: dict[int, ir.Value]) -> None:
    """rot * s  ->  Concat(x2, x1) * (s * signs), with x1, x2 = Split(x)."""
    assert x.shape is not None
    d = int(x.shape[3])  # type: ignore[arg-type]
    h = d // 2
    cat = rot.producer()
    assert cat is not None
    half = ir.Shape([*x.shape[:3], h])
    sizes = namer.constant(cat, np.array([h, h], dtype=np.int64))
    split = ir.node("Split", [x, sizes], attributes={"axis": -1}, num_outputs=2,
                    name=namer(cat, "Split"), metadata_props=dict(cat.metadata_props))
    for i, out in enumerate(split.outputs):
        out.name = f"{split.name.lstrip('/').replace('/', '_')}_out{i}"
        out.dtype, out.shape = x.dtype, half
    swapped = f.make_node(namer, cat, "Concat", [split.outputs[1], split.outputs[0]],
                          {"axis": -1}, dtype=x.dtype, shape=x.shape)
    key = id(s_val)
    if key not in signed:
        signs = np.concatenate([-np.ones(h), np.ones(h)]).astype(x.dtype.numpy())
        data = f.constant(s_val)
        if data is not None:
            signed[key] = namer.constant(cat, (data * signs).astype(data.dtype))
        else:
            mul = f.make_node(namer, m_sin, "Mul", [s_val, namer.constant(cat, signs)],
                              dtype=s_val.dtype)
            f.insert_after_value(graph, s_val, mul)
            signed[key] = mul.outputs[0]
    new_mul = f.make_node(namer, m_sin, "Mul", [swapped.outputs[0], signed[key]],
                          dtype=m_sin.outputs[0].dtype)
    f.replace(graph, [*reversed(_rotation_nodes(rot)), m_sin], [split, swapped, new_mul],
              m_sin.outputs[0], new_mul.outputs[0])


def _mul_parts(mul: ir.Node | None) -> list[tuple[ir.Value, ir.Value]]:
    """Both (operand, other) readings of a binary Mul."""
    if mul is None or mul.inputs[0] is None or mul.inputs[1] is None:
        return []
    a, b = mul.inputs[0], mul.inputs[1]
    return [(a, b), (b, a)]


def _fuse(graph: ir.Graph, namer: f.Namer, add: ir.Node,
          halves: dict[tuple[int, bool], ir.Value]) -> bool:
    for m_cos, m_sin, rot, s_val in rotation_readings(add):
        interleaved = False
        x = _rotate_half_of(rot)
        if x is None:
            x, interleaved = _rotate_pairs_of(rot), True
        if x is None:
            continue
        for x_val, c_val in _mul_parts(m_cos):
            if x_val is not x:
                continue
            cos = _cache_source(c_val, x, interleaved)
            sin = _cache_source(s_val, x, interleaved)
            if cos is None or sin is None:
                continue
            nodes = [m_cos, m_sin, *reversed(_rotation_nodes(rot)), add]
            if not _only_inside(nodes):   # pieces read elsewhere: leave the pattern
                continue
            _emit(graph, namer, add, x, cos, sin, nodes, halves, interleaved)
            return True
    return False


def _only_inside(nodes: list[ir.Node]) -> bool:
    """Whether the values the matched nodes produce (but the last) are read only by them."""
    inside = {id(n) for n in nodes}
    for node in nodes[:-1]:
        v = node.outputs[0]
        if v.is_graph_output() or any(id(u.node) not in inside for u in v.uses()):
            return False
    return True


def _batch_source(x: ir.Value) -> ir.Value:
    """The value before the head split (Transpose keeping axis 0, Reshape keeping dim 0) that
    `x` is a view of: its batch is x's, and reading it leaves the split's values to the
    rotation alone (FuseAttentionPass then moves the rotation before the split)."""
    while True:
        node = f.producer(x, "Transpose", "Reshape")
        src = node.inputs[0] if node is not None else None
        if node is None or src is None or src.shape is None or x.shape is None or \
                not src.shape or not x.shape:
            return x
        if node.op_type == "Transpose":
            perm = node.attributes.get("perm")
            if perm is None or perm.as_ints()[0] != 0:
                return x
        elif not f.same_dim(src.shape[0], x.shape[0]):
            return x
        x = src


def _half(graph: ir.Graph, namer: f.Namer, anchor: ir.Node, c: ir.Value, x: ir.Value,
          halves: dict[tuple[int, bool], ir.Value], interleaved: bool) -> ir.Value:
    """c[..., :d/2] (c[..., ::2] when interleaved), expanded to x's batch, built once per c,
    before `anchor`."""
    if (id(c), interleaved) in halves:
        return halves[(id(c), interleaved)]
    assert c.shape is not None
    d = int(c.shape[2])  # type: ignore[arg-type]
    zero = namer.constant(anchor, np.array([0], dtype=np.int64))
    end = namer.constant(anchor, np.array([d if interleaved else d // 2], dtype=np.int64))
    axis = namer.constant(anchor, np.array([-1], dtype=np.int64))
    step = namer.constant(anchor, np.array([2 if interleaved else 1], dtype=np.int64))
    node = f.make_node(namer, anchor, "Slice", [c, zero, end, axis, step], dtype=c.dtype,
                       shape=ir.Shape([c.shape[0], c.shape[1], d // 2]))
    out = node.outputs[0]
    new = [node]
    if c.shape[0] != x.shape[0]:             # (1, seq, d/2) -> (batch, seq, d/2)
        batch = f.make_node(namer, anchor, "Shape", [_batch_source(x)], {"start": 0, "end": 1},
                            dtype=ir.DataType.INT64, shape=ir.Shape([1]))
        ones = namer.constant(anchor, np.array([1, 1], dtype=np.int64))
        dims = f.make_node(namer, anchor, "Concat", [batch.outputs[0], ones], {"axis": 0},
                           dtype=ir.DataType.INT64, shape=ir.Shape([3]))
        expand = f.make_node(namer, anchor, "Expand", [out, dims.outputs[0]], dtype=c.dtype,
                             shape=ir.Shape([x.shape[0], c.shape[1], d // 2]))
        new += [batch, dims, expand]
        out = expand.outputs[0]
    # after c and x are both computed: right before the first rotation that reads them
    graph.insert_before(anchor, new)
    halves[(id(c), interleaved)] = out
    return out


def _emit(graph: ir.Graph, namer: f.Namer, add: ir.Node, x: ir.Value, cos: ir.Value,
          sin: ir.Value, nodes: list[ir.Node], halves: dict[tuple[int, bool], ir.Value],
          interleaved: bool) -> None:
    cos_half = _half(graph, namer, add, cos, x, halves, interleaved)
    sin_half = _half(graph, namer, add, sin, x, halves, interleaved)
    node = f.make_node(namer, add, "RotaryEmbedding", [x, cos_half, sin_half],
                       {"interleaved": int(interleaved)}, dtype=x.dtype, shape=x.shape)
    f.replace(graph, nodes, [node], add.outputs[0], node.outputs[0])
