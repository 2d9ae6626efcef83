"""FuseAttentionPass: scaled dot-product attention written out in elementary ops, and the
head reshapes around it, found in the graph.

At opset >= 23 (ONNX `Attention`):

1. **Eager attention -> Attention.** Matched on 4-D (batch, heads, seq, head_size) float32
   tensors, whichever module wrote it:

       S = MatMul(Q [* s1], Transpose(K, perm=[0, 1, 3, 2]) [* s2])  [* c | / c]
       S = S + mask (float, of S's shape after broadcasting)  |  Where(bool mask, S, -inf)
       P = Softmax(S, axis=-1)   [then Where(IsNaN(P), 0, P), with a boolean mask]
       Y = MatMul(P, V)

   -> `Attention(Q, K, V, mask, scale=s1*s2*c)`. ONNX's boolean mask has torch's convention
   (True attends) and gives a zero row where every key is masked, which is what the
   IsNaN/Where after the Softmax computes.
2. **Grouped heads.** A K or V input that is `repeat_kv` (Unsqueeze at axis 2 -> Expand of
   that axis to n -> Reshape merging it into the heads) is replaced by the unrepeated tensor:
   Attention repeats kv heads itself, each kv head serving n consecutive query heads, the
   order `repeat_kv` and `repeat_interleave` produce.
3. **3-D inputs.** When Q, K and V are each `Transpose(Reshape(x, [B, S, H, D]),
   perm=[0, 2, 1, 3])` of a 3-D x, Attention takes the x's with `q_num_heads` /
   `kv_num_heads`; when its output is then `Reshape(Transpose(Y, perm=[0, 2, 1, 3]),
   [B, S, H * D])`, its 3-D output replaces that Reshape. Eight nodes a layer fewer. A
   RotaryEmbedding between the split and Attention (q and k of decoders) moves before the
   split, on the 3-D x with `num_heads`: its cos/sin caches do not depend on the layout.
4. **Key/value cache.** K = Concat(past_key, k_new, axis=2) and V likewise, read by the
   attention alone: Attention takes k_new, v_new and `past_key` / `past_value`, and its
   `present_key` / `present_value` outputs replace the Concats (the graph's presents). With
   3. and 4. a decoder layer's attention is one node between its projections.

Below opset 23:

5. **Grouped heads without repeat_kv.** When K and V are `repeat_kv` of x_k, x_v (Hkv heads,
   each serving n = H / Hkv query heads), the query is viewed as (B, Hkv, n * S, D) (a free
   Reshape: query head h = j * n + g belongs to kv head j) and multiplied by x_k and x_v
   themselves; the product is viewed back as (B, H, S, D). The expanded copies of K and V go,
   and each of the two MatMuls is one product per kv head with n times the rows. A mask that
   varies over the query axis is tiled n times along it, once for every attention sharing it
   (a constant when the mask is).

6. **Masks.** A boolean mask applied as Where(mask, S, -inf) becomes Add(S, A), A computed
   once for every attention sharing the mask (a constant for a constant mask; none for an
   all-True one). A mask known only at run time gets the lowest float32 as A's fill, and the
   IsNaN/Where zeroing the (B, H, Sq, Skv) probabilities of fully masked rows becomes one Mul
   of the (B, H, Sq, D) output by the rows that keep a key (`ReduceMax(Cast(mask), -1)`, once
   per mask): one node a layer fewer, on a smaller tensor, and exact (see `_additive_mask`).

At every opset: two Transposes in a row (the head split followed by attention's K
transpose) become one with the composed permutation; an attention without any mask loses the
IsNaN/Where that zeroes NaN rows of its probabilities (no finite scores give one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_KT = [0, 1, 3, 2]
_HEADS = [0, 2, 1, 3]


def _perm(node: ir.Node | None) -> list[int] | None:
    if node is None:
        return None
    attr = node.attributes.get("perm")
    return list(attr.as_ints()) if attr is not None else None


def _single(value: ir.Value | None) -> bool:
    return value is not None and not value.is_graph_output() and len(value.uses()) == 1


def _same_dims(a: ir.Value | None, b: ir.Value | None, axes: range) -> bool:
    if a is None or b is None or a.shape is None or b.shape is None:
        return False
    return all(f.same_dim(a.shape[i], b.shape[i]) for i in axes)


def _scaled(value: ir.Value | None) -> tuple[ir.Value | None, float, list[ir.Node]]:
    """`value` as Mul(v, c) / Mul(c, v) / Div(v, c) by a scalar constant: (v, factor, nodes)."""
    node = f.producer(value, "Mul", "Div")
    if node is None or not _single(value):
        return value, 1.0, []
    if node.op_type == "Div":
        c = f.scalar(node.inputs[1])
        return (node.inputs[0], 1.0 / c, [node]) if c else (value, 1.0, [])
    for a, b in ((0, 1), (1, 0)):
        c = f.scalar(node.inputs[b])
        if c is not None and f.constant(node.inputs[a]) is None:
            return node.inputs[a], c, [node]
    return value, 1.0, []


@dataclass
class _Eager:
    q: ir.Value
    k: ir.Value
    v: ir.Value
    mask: ir.Value | None
    scale: float
    nodes: list[ir.Node] = field(default_factory=list)
    # A Where(condition, S, fill) mask: (condition, whether True keeps the score, fill).
    where: tuple[ir.Value, bool, float] | None = None


def _match_eager(softmax: ir.Node, any_guard: bool = False) -> _Eager | None:
    """The eager attention ending at `softmax`. The IsNaN/Where after the Softmax (zero rows
    for fully masked queries) is accepted with a boolean mask only, as `Attention` gives zero
    rows for those alone; `any_guard` accepts it after an additive mask too (for rewrites that
    keep it)."""
    axis = softmax.attributes.get("axis")
    if axis is None or axis.as_int() not in (-1, 3):
        return None
    nodes: list[ir.Node] = [softmax]
    probs = softmax.outputs[0]
    s = softmax.inputs[0]
    mask, boolean = None, False
    if not _single(s):
        return None
    add = f.producer(s, "Add", "Where")
    scores = s
    where = None
    if add is not None and add.op_type == "Where":
        cond = add.inputs[0]
        for i_s, i_fill in ((1, 2), (2, 1)):
            fill = f.scalar(add.inputs[i_fill])
            if fill is not None and fill <= -1e30 and f.constant(add.inputs[i_s]) is None:
                break
        else:
            return None
        if cond is None or cond.dtype != ir.DataType.BOOL:
            return None
        scores = add.inputs[i_s]
        where = (cond, i_s == 1, fill)     # (condition, True where it keeps the score, fill)
        boolean = math.isinf(fill)
        nodes.append(add)
    elif add is not None:
        for a, b in ((0, 1), (1, 0)):
            cand = add.inputs[a]
            inner = f.producer(_scaled(cand)[0], "MatMul")
            if inner is not None and _single(cand):
                mask, scores = add.inputs[b], cand
                break
        if mask is None or mask.dtype != ir.DataType.FLOAT:
            return None
        nodes.append(add)
    raw, c, scale_nodes = _scaled(scores)
    if raw is not scores and not _single(scores):
        return None
    nodes += scale_nodes
    qk = f.producer(raw, "MatMul")
    if qk is None or not _single(raw):
        return None
    nodes.append(qk)
    q, s1, q_nodes = _scaled(qk.inputs[0])
    kt, s2, k_nodes = _scaled(qk.inputs[1])
    kt_node = f.producer(kt, "Transpose")
    if kt_node is None or _perm(kt_node) != _KT or not _single(kt):
        return None
    nodes += [*q_nodes, *k_nodes, kt_node]
    k = kt_node.inputs[0]
    # The product with V, possibly after the zero rows of an all-masked row.
    user = f.only_user(probs, "MatMul")
    if user is None and not probs.is_graph_output():
        uses = [u.node for u in probs.uses()]
        isnan = next((n for n in uses if n.op_type == "IsNaN" and not n.domain), None)
        zero = next((n for n in uses if n.op_type == "Where" and not n.domain), None)
        if not (boolean or any_guard) or len(uses) != 2 or isnan is None or zero is None \
                or zero.inputs[0] is not isnan.outputs[0] or zero.inputs[2] is not probs \
                or f.scalar(zero.inputs[1]) != 0.0 or not _single(isnan.outputs[0]):
            return None
        nodes += [isnan, zero]
        probs = zero.outputs[0]
        user = f.only_user(probs, "MatMul")
    if user is None or user.inputs[0] is not probs:
        return None
    if boolean and probs is softmax.outputs[0]:
        return None    # -inf fill without the zero rows: eager gives NaN rows, Attention 0
    nodes.append(user)
    v = user.inputs[1]
    if q is None or k is None or v is None or any(
            f.rank(t) != 4 or t.dtype != ir.DataType.FLOAT for t in (q, k, v)):
        return None
    if not _same_dims(q, k, range(2)) or not _same_dims(q, k, range(3, 4)) or \
            not _same_dims(k, v, range(3)):
        return None
    mask_value = where[0] if where is not None else mask
    if mask_value is not None:      # the mask must not widen the scores (B, H, Sq, Skv)
        target = [q.shape[0], q.shape[1], q.shape[2], k.shape[2]]  # type: ignore[index]
        shape = mask_value.shape
        if shape is None or len(shape) > 4 or any(
                not (d == 1 or d == t) for d, t in zip(reversed(list(shape)), reversed(target))):
            return None
    if not f.internal(nodes, user.outputs[0]):
        return None
    return _Eager(q, k, v, mask, s1 * s2 * c, nodes, where)


def _unrepeated(value: ir.Value) -> tuple[ir.Value, list[ir.Node]] | None:
    """`value` = repeat_kv(x): (x, nodes)."""
    reshape = f.producer(value, "Reshape")
    if reshape is None or not _single(value):
        return None
    expanded = reshape.inputs[0]
    expand = f.producer(expanded, "Expand")
    if expand is None or not _single(expanded):
        return None
    unsq = f.producer(expand.inputs[0], "Unsqueeze")
    axes = f.constant(unsq.inputs[1]) if unsq is not None and len(unsq.inputs) > 1 else None
    if unsq is None or axes is None or [int(a) for a in axes.reshape(-1)] not in ([2], [-3]) \
            or not _single(expand.inputs[0]):
        return None
    x = unsq.inputs[0]
    if f.rank(x) != 4 or f.rank(expanded) != 5 or f.rank(value) != 4 or x.shape is None \
            or expanded.shape is None or value.shape is None:
        return None
    n, hkv, h = expanded.shape[2], x.shape[1], value.shape[1]
    if not all(isinstance(d, int) for d in (n, hkv, h)) or hkv * n != h or \
            not _same_dims(x, value, range(2, 4)) or not _same_dims(x, value, range(1)):
        return None
    return x, [unsq, expand, reshape]


def _head_split(value: ir.Value) -> tuple[ir.Value, int, list[ir.Node]] | None:
    """`value` = Transpose(Reshape(x, [B, S, H, D]), [0, 2, 1, 3]) of a 3-D x: (x, H, nodes)."""
    t = f.producer(value, "Transpose")
    if t is None or _perm(t) != _HEADS or not _single(value):
        return None
    split = t.inputs[0]
    r = f.producer(split, "Reshape")
    if r is None or not _single(split) or r.inputs[0] is None:
        return None
    x = r.inputs[0]
    if f.rank(x) != 3 or f.rank(split) != 4 or not _same_dims(x, split, range(2)):
        return None
    assert x.shape is not None and split.shape is not None
    h, d, hidden = split.shape[2], split.shape[3], x.shape[2]
    if not all(isinstance(n, int) and n > 0 for n in (h, d, hidden)) or h * d != hidden:
        return None
    return x, int(h), [r, t]


@dataclass
class _Split:
    """A 4-D Attention input that is a 3-D tensor's head split, perhaps rotated after it."""
    x: ir.Value                         # the 3-D (B, S, H * D) tensor
    heads: int
    nodes: list[ir.Node]                # the split (and the 4-D rotation), to remove
    rotary: ir.Node | None = None       # RotaryEmbedding(split, cos, sin[, positions])


def _rotated_split(value: ir.Value) -> _Split | None:
    """The head split of a 3-D x, or RotaryEmbedding of that split: RotaryEmbedding takes the
    3-D x itself with `num_heads` (its cos/sin caches do not depend on the layout)."""
    rot = f.producer(value, "RotaryEmbedding")
    if rot is not None and "num_heads" not in rot.attributes and _single(value) and \
            rot.inputs[0] is not None:
        found = _head_split(rot.inputs[0])
        return None if found is None else _Split(found[0], found[1], [*found[2], rot], rot)
    found = _head_split(value)
    return None if found is None else _Split(*found)


def _three_d(namer: f.Namer, anchor: ir.Node, split: _Split, new: list[ir.Node]) -> ir.Value:
    """The 3-D input Attention takes for `split` (a 3-D rotation appended to `new`)."""
    if split.rotary is None:
        return split.x
    attrs = _attrs(split.rotary)
    attrs["num_heads"] = split.heads
    node = f.make_node(namer, anchor, "RotaryEmbedding", [split.x, *split.rotary.inputs[1:]],
                       attrs, dtype=split.x.dtype, shape=split.x.shape)
    new.append(node)
    return node.outputs[0]


def cache_concat(value: ir.Value | None) -> tuple[ir.Value, ir.Value, ir.Node] | None:
    """`value` = Concat(past, new, axis=2) of 4-D tensors of one dtype (a key/value cache):
    (past, new, the Concat)."""
    node = f.producer(value, "Concat")
    axis = node.attributes.get("axis") if node is not None else None
    if node is None or axis is None or axis.as_int() not in (2, -2) or len(node.inputs) != 2:
        return None
    past, new = node.inputs
    if past is None or new is None or f.rank(past) != 4 or f.rank(new) != 4 or \
            past.dtype != new.dtype:
        return None
    return past, new, node


def _cache(value: ir.Value | None, attention: ir.Node) -> tuple[ir.Value, ir.Value, ir.Node] | None:
    """cache_concat(value) when `attention` alone reads it (perhaps also a graph output)."""
    if value is None or any(u.node is not attention for u in value.uses()):
        return None
    return cache_concat(value)


def head_merge(y: ir.Value) -> tuple[ir.Value, list[ir.Node]] | None:
    """[Reshape(y) to y's own shape ->] Reshape(Transpose(y, [0, 2, 1, 3]), [B, S, H * D]):
    (the last Reshape's output, nodes)."""
    same: list[ir.Node] = []
    view = f.only_user(y, "Reshape")
    if view is not None and view.inputs[0] is y and f.rank(y) == 4 and \
            _same_dims(y, view.outputs[0], range(4)):
        y, same = view.outputs[0], [view]
    t = f.only_user(y, "Transpose")
    if t is None or _perm(t) != _HEADS:
        return None
    r = f.only_user(t.outputs[0], "Reshape")
    if r is None or r.inputs[0] is not t.outputs[0]:
        return None
    out = r.outputs[0]
    if f.rank(out) != 3 or f.rank(t.outputs[0]) != 4 or not _same_dims(out, t.outputs[0], range(2)):
        return None
    assert out.shape is not None and t.outputs[0].shape is not None
    h, d = t.outputs[0].shape[2], t.outputs[0].shape[3]
    if not (isinstance(h, int) and isinstance(d, int) and out.shape[2] == h * d):
        return None
    return out, [*same, t, r]


def _attrs(node: ir.Node) -> dict[str, object]:
    return {name: attr.value for name, attr in node.attributes.items()}


class FuseAttentionPass(ir.passes.InPlacePass):
    """Eager attention -> Attention, grouped and 3-D Attention inputs (opset >= 23); merged
    consecutive Transposes (every opset)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = f.opset(model)
        modified = False
        for graph in f.graphs(model):
            namer = f.Namer(graph)
            for node in list(graph):
                if node.graph is graph and not node.domain and node.op_type == "Transpose":
                    modified |= _split_packed_heads(graph, namer, node)
            for node in list(graph):
                if node.graph is graph and not node.domain and node.op_type == "Softmax":
                    modified |= _drop_unmasked_guard(graph, node)
            if opset >= 23:
                for node in list(graph):
                    if node.graph is graph and not node.domain and node.op_type == "Softmax":
                        m = _match_eager(node)
                        if m is not None:
                            _to_attention(graph, namer, m)
                            modified = True
                for node in list(graph):
                    if node.graph is graph and not node.domain and node.op_type == "Attention":
                        modified |= _lean_inputs(graph, namer, node)
            else:
                additive: dict[tuple[int, bool, float], ir.Value] = {}
                tiled: dict[object, ir.Value] = {}
                for node in list(graph):
                    if node.graph is graph and not node.domain and node.op_type == "Softmax":
                        m = _match_eager(node)
                        if m is not None and m.where is not None:
                            modified |= _additive_mask(graph, namer, m, additive)
                            m = _match_eager(node, any_guard=True)
                        if m is not None:
                            modified |= _grouped_heads(graph, namer, m, tiled)
            modified |= _merge_transposes(graph, namer)
        return ir.passes.PassResult(model, modified)


_PACKED = [2, 0, 3, 1, 4]


def _split_packed_heads(graph: ir.Graph, namer: f.Namer, node: ir.Node) -> bool:
    """timm's packed q/k/v, `Reshape(x, [B, S, n, H, D])` -> Transpose [2, 0, 3, 1, 4] ->
    Split along axis 0 into n -> Squeeze(0) each, becomes a Split of x along its last axis
    into n head splits `Transpose(Reshape(x_i, [B, S, H, D]), [0, 2, 1, 3])`: the form of
    separate projections, which the other rewrites (merged key transposes, 3-D Attention at
    opset 23, HeadLayoutPass's folded Transposes) read. One copy of q/k/v a layer fewer
    (the 5-D Transpose). timm's ViT-S/16 and DeiT-S/16 (benchmarks/bench_latency.py --vision)."""
    view = f.producer(node.inputs[0], "Reshape")
    packed = node.inputs[0]
    x = view.inputs[0] if view is not None else None
    if _perm(node) != _PACKED or x is None or packed is None or not _single(packed) or \
            f.rank(packed) != 5 or x.shape is None or f.rank(x) is None:
        return False
    dims = f.static_dims(packed, range(5))
    split = f.only_user(node.outputs[0], "Split")
    if dims is None or min(dims) <= 0 or split is None or \
            split.attributes.get("axis") is None or split.attributes["axis"].as_int() != 0 or \
            len(split.outputs) != dims[2]:
        return False
    b, s, n, h, d = dims
    last = x.shape[-1]
    if not (isinstance(last, int) and last == n * h * d):
        return False
    squeezes = []
    for out in split.outputs:
        sq = f.only_user(out, "Squeeze")
        axes = f.constant(sq.inputs[1]) if sq is not None and len(sq.inputs) > 1 else None
        if sq is None or axes is None or [int(a) for a in axes.reshape(-1)] != [0] or \
                sq.outputs[0].is_graph_output():
            return False
        squeezes.append(sq)
    sizes = namer.constant(node, np.array([h * d] * n, dtype=np.int64))
    chunks = ir.node("Split", [x, sizes], attributes={"axis": -1}, num_outputs=n,
                     name=namer(node, "Split"), metadata_props=dict(node.metadata_props))
    for i, out in enumerate(chunks.outputs):
        out.name = f"{chunks.name.lstrip('/').replace('/', '_')}_out{i}"
        out.dtype, out.shape = x.dtype, ir.Shape([*x.shape[:-1], h * d])
    new: list[ir.Node] = [chunks]
    heads = namer.constant(node, np.array([b, s, h, d], dtype=np.int64))
    for chunk, sq in zip(chunks.outputs, squeezes):
        reshape = f.make_node(namer, node, "Reshape", [chunk, heads], dtype=x.dtype,
                              shape=ir.Shape([b, s, h, d]))
        t = f.make_node(namer, node, "Transpose", [reshape.outputs[0]], {"perm": _HEADS},
                        dtype=x.dtype, shape=ir.Shape([b, h, s, d]))
        new += [reshape, t]
        ir.convenience.replace_all_uses_with(sq.outputs[0], t.outputs[0])
    graph.insert_before(view, new)
    _remove(graph, [view, node, split, *squeezes])
    for sq, t in zip(squeezes, new[2::2]):       # q, k, v keep their names (the unbind's)
        t.outputs[0].name = sq.outputs[0].name
    return True


def _drop_unmasked_guard(graph: ir.Graph, softmax: ir.Node) -> bool:
    """The IsNaN/Where zeroing NaN rows after the Softmax of an attention without any mask
    goes (torch's `_safe_softmax`, which scaled_dot_product_attention's translation writes
    whatever the mask): a row of Softmax(Q @ K^T * s) is NaN only where the query or key holds
    an infinity or NaN, and there eager's kernels give no zeros either. timm's and DeiT's ViT
    (F.scaled_dot_product_attention without a mask): the IsNaN and Where over every
    (B, H, S, S) probability took 2.5% of ViT-S/16's ORT time (benchmarks/bench_latency.py
    --vision); at opset 23 the attention then fuses into `Attention`."""
    m = _match_eager(softmax, any_guard=True)
    if m is None or m.mask is not None or m.where is not None:
        return False
    isnan = next((n for n in m.nodes if n.op_type == "IsNaN"), None)
    if isnan is None:
        return False
    guard = f.only_user(isnan.outputs[0], "Where")
    assert guard is not None and guard.inputs[2] is softmax.outputs[0]
    ir.convenience.replace_all_uses_with(guard.outputs[0], softmax.outputs[0])
    graph.remove([guard, isnan], safe=True)
    return True


def _additive_mask(graph: ir.Graph, namer: f.Namer, m: _Eager,
                   additive: dict[tuple[int, bool, float], ir.Value]) -> bool:
    """Below opset 23, a boolean mask applied as Where(mask, S, -inf) becomes Add(S, A) with
    A = Where(mask, 0, -inf), computed once for every attention sharing the mask (what eager
    PyTorch's math attention does: a boolean mask is turned into an additive one), or a
    constant when the mask is. With a constant mask that leaves every query row at least one
    key, no row of the Softmax is NaN, so the IsNaN/Where that zeroes such rows goes.

    With a mask known only at run time, A's fill is the lowest float32 instead of -inf and the
    IsNaN/Where on the (B, H, Sq, Skv) probabilities becomes one Mul of the (B, H, Sq, D)
    output by the rows that keep a key, computed once per mask. Exact: a kept score plus the
    lowest float still exponentiates to 0 beside the row's maximum, and a fully masked row
    (uniform weights instead of NaN) is multiplied by 0, as eager's zero row."""
    assert m.where is not None
    cond, keep, fill = m.where
    where = next(n for n in m.nodes if n.op_type == "Where" and n.inputs[0] is cond
                 and f.scalar(n.inputs[2 if keep else 1]) == fill)
    scores = where.inputs[1 if keep else 2]
    if scores is None or scores.dtype != ir.DataType.FLOAT:
        return False
    data = f.constant(cond)
    isnan = next((n for n in m.nodes if n.op_type == "IsNaN"), None)
    rows = data is None and math.isinf(fill) and isnan is not None
    if rows:
        fill = float(np.finfo(np.float32).min)
    key = (id(cond), keep, fill)
    if key not in additive and (data is None or not (data == keep).all()):
        if data is not None:
            table = np.where(data == keep, np.float32(0), np.float32(fill)).astype(np.float32)
            additive[key] = namer.constant(where, table)
        else:
            zero = namer.constant(where, np.array(0, dtype=np.float32))
            inf = namer.constant(where, np.array(fill, dtype=np.float32))
            node = f.make_node(namer, where, "Where", [cond, zero, inf] if keep else
                               [cond, inf, zero], dtype=ir.DataType.FLOAT, shape=cond.shape)
            f.insert_after_value(graph, cond, node)
            additive[key] = node.outputs[0]
    if data is not None and (data == keep).all():      # nothing masked: no Add at all
        ir.convenience.replace_all_uses_with(where.outputs[0], scores)
        graph.remove(where, safe=True)
    else:
        add = f.make_node(namer, where, "Add", [scores, additive[key]], dtype=scores.dtype,
                          shape=where.outputs[0].shape)
        f.replace(graph, [where], [add], where.outputs[0], add.outputs[0])
    if rows:
        assert isnan is not None
        _rows_guard(graph, namer, m, isnan, _kept_rows(graph, namer, where, cond, keep, additive))
    elif data is not None and math.isinf(fill):
        kept = np.broadcast_to(data == keep, np.broadcast_shapes(data.shape, (1, 1)))
        if isnan is not None and kept.any(axis=-1).all():
            guard = f.only_user(isnan.outputs[0], "Where")
            assert guard is not None
            probs = guard.inputs[2]
            assert probs is not None
            ir.convenience.replace_all_uses_with(guard.outputs[0], probs)
            graph.remove([guard, isnan], safe=True)
    return True


def _kept_rows(graph: ir.Graph, namer: f.Namer, anchor: ir.Node, cond: ir.Value, keep: bool,
               cache: dict) -> ir.Value:  # type: ignore[type-arg]
    """1.0 where a query row of the boolean mask keeps at least one key, else 0.0: the mask's
    shape with its last axis 1, computed once per mask."""
    key = ("rows", id(cond), keep)
    if key not in cache:
        shape = ir.Shape([*cond.shape[:-1], 1]) if cond.shape is not None else None
        cast = f.make_node(namer, anchor, "Cast", [cond], {"to": ir.DataType.FLOAT},
                           dtype=ir.DataType.FLOAT, shape=cond.shape)
        axes = namer.constant(anchor, np.array([-1], dtype=np.int64))
        new = [cast, f.make_node(namer, anchor, "ReduceMax" if keep else "ReduceMin",
                                 [cast.outputs[0], axes], {"keepdims": 1},
                                 dtype=ir.DataType.FLOAT, shape=shape)]
        if not keep:        # True masks: a row keeps a key unless its minimum is 1
            one = namer.constant(anchor, np.array(1, dtype=np.float32))
            new.append(f.make_node(namer, anchor, "Sub", [one, new[-1].outputs[0]],
                                   dtype=ir.DataType.FLOAT, shape=shape))
        f.insert_after_value(graph, cond, new)
        cache[key] = new[-1].outputs[0]
    return cache[key]


def _rows_guard(graph: ir.Graph, namer: f.Namer, m: _Eager, isnan: ir.Node,
                kept: ir.Value) -> None:
    """The IsNaN/Where zeroing the probabilities of fully masked rows becomes Mul(Y, kept)."""
    guard = f.only_user(isnan.outputs[0], "Where")
    assert guard is not None and guard.inputs[2] is not None
    ir.convenience.replace_all_uses_with(guard.outputs[0], guard.inputs[2])
    graph.remove([guard, isnan], safe=True)
    pv = m.nodes[-1]
    y = pv.outputs[0]
    uses = list(y.uses())
    mul = f.make_node(namer, pv, "Mul", [y, kept], dtype=y.dtype, shape=y.shape)
    graph.insert_after(pv, mul)
    for use in uses:
        use.node.replace_input_with(use.idx, mul.outputs[0])
    if y.is_graph_output():         # the Mul's output takes the graph output's place and name
        graph.outputs[list(graph.outputs).index(y)] = mul.outputs[0]
        name, y.name = y.name, f"{y.name}_unguarded"
        mul.outputs[0].name = name
    m.nodes = [n for n in m.nodes if n is not guard and n is not isnan]


def _grouped_heads(graph: ir.Graph, namer: f.Namer, m: _Eager,
                   tiled: dict[object, ir.Value]) -> bool:
    """Below opset 23: attention over repeat_kv'd K and V computed on the kv heads themselves,
    the query viewed as (B, Hkv, n * S, D) (item 4 of the module docstring)."""
    found_k, found_v = _unrepeated(m.k), _unrepeated(m.v)
    if found_k is None or found_v is None or m.q.shape is None:
        return False
    xk, xv = found_k[0], found_v[0]
    assert xk.shape is not None and xv.shape is not None
    hkv, h = xk.shape[1], m.q.shape[1]
    if not (isinstance(hkv, int) and isinstance(h, int) and hkv > 0 and h % hkv == 0) \
            or xv.shape[1] != hkv:
        return False
    n = h // hkv
    pv = m.nodes[-1]
    qk = next(node for node in m.nodes[:-1] if node.op_type == "MatMul")
    kt = next(node for node in m.nodes if node.op_type == "Transpose")
    assert pv.op_type == "MatMul" and kt.inputs[0] is m.k
    q_side = qk.inputs[0].producer() if qk.inputs[0] is not None else None
    k_side = {id(kt), id(qk.inputs[1].producer())} if qk.inputs[1] is not None else {id(kt)}
    # The mask (additive, or a Where condition) must broadcast over heads; one that varies
    # over the query axis is tiled n times along it.
    masked = [node for node in m.nodes if node.op_type in ("Add", "Where")
              and (m.mask is not None and m.mask in node.inputs[:2] or
                   m.where is not None and node.inputs[0] is m.where[0])]
    mask = m.mask if m.mask is not None else (m.where[0] if m.where is not None else None)
    new_mask = None
    if mask is not None:
        if len(masked) != 1 or mask.shape is None:
            return False
        dims = [1] * (4 - len(mask.shape)) + list(mask.shape)
        if dims[1] != 1:
            return False
        if dims[2] != 1:
            new_mask = _tiled_mask(graph, namer, masked[0], mask, n, tiled)
            if new_mask is None:
                return False
    q_shape, heads_shape = _view_shapes(graph, namer, m.q, hkv, n, tiled)
    # The view goes before a scale on the query, so that ONNX Runtime still folds the scale
    # into the product (FusedMatMul).
    reader = q_side if q_side is not None and q_side in m.nodes else qk
    at = list(reader.inputs).index(m.q)
    view_q = f.make_node(namer, qk, "Reshape", [m.q, q_shape], dtype=m.q.dtype)
    graph.insert_before(reader, view_q)
    reader.replace_input_with(at, view_q.outputs[0])
    kt.replace_input_with(0, xk)
    if new_mask is not None:
        node = masked[0]
        node.replace_input_with(list(node.inputs).index(mask), new_mask)
    b, s_q, s_kv = m.q.shape[0], m.q.shape[2], xk.shape[2]
    rows = n * s_q if isinstance(s_q, int) else None
    grouped = ir.Shape([b, hkv, rows, s_kv]) if rows is not None else None
    key_t = ir.Shape([xk.shape[0], hkv, xk.shape[3], xk.shape[2]])
    view = ir.Shape([b, hkv, rows, m.q.shape[3]]) if rows is not None else None
    view_q.outputs[0].shape = view
    for node in m.nodes[:-1]:
        for value in node.outputs:
            if value.shape is not None and len(value.shape) == 4:
                value.shape = key_t if id(node) in k_side else view if node is reader \
                    and reader is not qk else grouped
    product = f.make_node(namer, pv, "MatMul", [pv.inputs[0], xv], dtype=pv.outputs[0].dtype)
    view_y = f.make_node(namer, pv, "Reshape", [product.outputs[0], heads_shape],
                         dtype=pv.outputs[0].dtype)
    f.replace(graph, [pv], [product, view_y], pv.outputs[0], view_y.outputs[0])
    _remove(graph, [*found_k[1], *found_v[1]])
    return True


def _view_shapes(graph: ir.Graph, namer: f.Namer, q: ir.Value, hkv: int, n: int,
                 cache: dict[object, ir.Value]) -> tuple[ir.Value, ir.Value]:
    """The shapes that view the query (B, H, S, D) as (B, Hkv, n * S, D) and back. No -1
    (ONNX Runtime cannot infer it for an empty batch): 0 copies B (and D), a static S is
    written out, and a dynamic one is read from Shape(q), once for every query of the same
    symbolic dims (the layers of a model)."""
    assert q.shape is not None
    b, h, s, d = q.shape
    if isinstance(s, int):
        return (namer.constant(q.producer() or graph[0], np.array([0, hkv, n * s, 0], np.int64)),
                namer.constant(q.producer() or graph[0], np.array([0, h, s, 0], np.int64)))
    key = ("view", str(b), str(s), str(d), hkv, n)
    if key not in cache:
        anchor = q.producer()
        assert anchor is not None
        shape = f.make_node(namer, anchor, "Shape", [q], dtype=ir.DataType.INT64,
                            shape=ir.Shape([4]))
        scale = namer.constant(anchor, np.array([1, 0, n, 1], dtype=np.int64))
        shift = namer.constant(anchor, np.array([0, hkv, 0, 0], dtype=np.int64))
        mul = f.make_node(namer, anchor, "Mul", [shape.outputs[0], scale],
                          dtype=ir.DataType.INT64, shape=ir.Shape([4]))
        add = f.make_node(namer, anchor, "Add", [mul.outputs[0], shift],
                          dtype=ir.DataType.INT64, shape=ir.Shape([4]))
        graph.insert_after(anchor, [shape, mul, add])
        cache[key] = add.outputs[0]
        cache[(*key, "back")] = shape.outputs[0]
    return cache[key], cache[(*key, "back")]


def _tiled_mask(graph: ir.Graph, namer: f.Namer, anchor: ir.Node, mask: ir.Value, n: int,
                tiled: dict[object, ir.Value]) -> ir.Value | None:
    """`mask` as a 4-D tensor repeated n times along its query axis (axis 2)."""
    key = (id(mask), n)
    if key in tiled:
        return tiled[key]
    assert mask.shape is not None
    lead = 4 - len(mask.shape)
    data = f.constant(mask)
    if data is not None:
        table = np.tile(data.reshape((1,) * lead + data.shape), (1, 1, n, 1))
        tiled[key] = namer.constant(anchor, np.ascontiguousarray(table))
        return tiled[key]
    new: list[ir.Node] = []
    value = mask
    if lead:
        axes = namer.constant(anchor, np.arange(lead, dtype=np.int64))
        new.append(f.make_node(namer, anchor, "Unsqueeze", [value, axes], dtype=mask.dtype))
        value = new[-1].outputs[0]
    repeats = namer.constant(anchor, np.array([1, 1, n, 1], dtype=np.int64))
    new.append(f.make_node(namer, anchor, "Tile", [value, repeats], dtype=mask.dtype))
    f.insert_after_value(graph, mask, new)
    tiled[key] = new[-1].outputs[0]
    return tiled[key]


def _to_attention(graph: ir.Graph, namer: f.Namer, m: _Eager) -> None:
    anchor = m.nodes[-1]
    attrs: dict[str, object] = {}
    head_size = m.q.shape[3] if m.q.shape is not None else None
    if not (isinstance(head_size, int) and math.isclose(m.scale, 1 / math.sqrt(head_size),
                                                          rel_tol=1e-6)):
        attrs["scale"] = float(m.scale)
    new: list[ir.Node] = []
    mask = m.mask
    if m.where is not None:
        cond, keeps, fill = m.where
        if math.isinf(fill):        # boolean mask, True attends (zero rows as the IsNaN/Where)
            neg = f.producer(cond, "Not")
            if keeps:
                mask = cond
            elif neg is not None and neg.inputs[0] is not None:
                mask = neg.inputs[0]
            else:
                new.append(f.make_node(namer, anchor, "Not", [cond], dtype=ir.DataType.BOOL,
                                       shape=cond.shape))
                mask = new[-1].outputs[0]
        else:                       # finite fill: the same additive mask (0 or fill)
            zero = namer.constant(anchor, np.array(0.0, dtype=np.float32))
            big = namer.constant(anchor, np.array(fill, dtype=np.float32))
            new.append(f.make_node(namer, anchor, "Where",
                                   [cond, zero, big] if keeps else [cond, big, zero],
                                   dtype=ir.DataType.FLOAT, shape=cond.shape))
            mask = new[-1].outputs[0]
    inputs = [m.q, m.k, m.v] + ([mask] if mask is not None else [])
    node = f.make_node(namer, anchor, "Attention", inputs, attrs, dtype=m.q.dtype)
    f.replace(graph, m.nodes, [*new, node], anchor.outputs[0], node.outputs[0])


def _lean_inputs(graph: ir.Graph, namer: f.Namer, node: ir.Node) -> bool:
    """Drop repeat_kv before K and V; read a key/value cache as `past_key` / `past_value`
    (present = the Concat), and take 3-D inputs and give a 3-D output where the head split
    (rotated or not) and merge are around the node."""
    if len(node.inputs) < 3 or len(node.inputs) > 4 or len(node.outputs) != 1 or \
            any(v is None or f.rank(v) != 4 for v in node.inputs[:3]):
        return False
    modified = False
    removed: list[ir.Node] = []
    for i in (1, 2):
        found = _unrepeated(node.inputs[i])  # type: ignore[arg-type]
        if found is not None:
            node.replace_input_with(i, found[0])
            removed += found[1]
    if removed:
        modified = True
        _remove(graph, removed)
    q, k, v = node.inputs[:3]
    assert q is not None and k is not None and v is not None
    caches = _cache(k, node), _cache(v, node)
    past = caches if caches[0] is not None and caches[1] is not None else None
    if past is not None:
        k, v = past[0][1], past[1][1]
    splits = [_rotated_split(q), _rotated_split(k), _rotated_split(v)]
    merged = head_merge(node.outputs[0])
    three_d = all(s is not None for s in splits) and merged is not None and \
        splits[1].heads == splits[2].heads  # type: ignore[union-attr]
    if not three_d and past is None or "q_num_heads" in node.attributes:
        return modified
    attrs = _attrs(node)
    new: list[ir.Node] = []
    old: list[ir.Node] = [node]
    y = node.outputs[0]
    if three_d:
        sq, sk, sv = splits  # type: ignore[misc]
        attrs["q_num_heads"], attrs["kv_num_heads"] = sq.heads, sk.heads  # type: ignore[union-attr]
        q, k, v = (_three_d(namer, node, s, new) for s in (sq, sk, sv))  # type: ignore[arg-type]
        old += [n for s in splits for n in s.nodes] + merged[1]  # type: ignore[union-attr,index]
        y = merged[0]  # type: ignore[index]
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    inputs = [q, k, v, mask]
    if past is not None:
        inputs += [past[0][0], past[1][0]]
        old += [past[0][2], past[1][2]]
    while inputs[-1] is None:
        inputs.pop()
    attention = ir.node("Attention", inputs, attributes=attrs, name=namer(node, "Attention"),
                        metadata_props=dict(node.metadata_props),
                        num_outputs=3 if past is not None else 1)
    attention.outputs[0].name = f"{attention.name.lstrip('/').replace('/', '_')}_out"
    new.append(attention)
    if past is not None:        # the Concats' outputs are now the node's presents
        for cache, present in zip(past, attention.outputs[1:]):
            concat = cache[2].outputs[0]
            name = concat.name
            concat.name = f"{name}__fused" if name else None
            present.name, present.dtype, present.shape = name, concat.dtype, concat.shape
            ir.convenience.replace_all_uses_with(concat, present, replace_graph_outputs=True)
    f.replace(graph, old, new, y, attention.outputs[0])
    return True


def _remove(graph: ir.Graph, nodes: list[ir.Node]) -> None:
    order = {id(n): i for i, n in enumerate(graph)}
    graph.remove(sorted(nodes, key=lambda n: -order[id(n)]), safe=True)


def _merge_transposes(graph: ir.Graph, namer: f.Namer) -> bool:
    modified = False
    for node in list(graph):
        if node.graph is not graph or node.domain or node.op_type != "Transpose":
            continue
        inner = f.producer(node.inputs[0], "Transpose")
        p2, p1 = _perm(node), _perm(inner)
        if inner is None or p1 is None or p2 is None or len(p1) != len(p2) or \
                not _single(node.inputs[0]) or inner.inputs[0] is None:
            continue
        perm = [p1[i] for i in p2]
        if perm == list(range(len(perm))):
            continue  # an identity: left to the runtime (it drops it), keeps names simple
        new = f.make_node(namer, node, "Transpose", [inner.inputs[0]], {"perm": perm},
                          dtype=node.outputs[0].dtype)
        f.replace(graph, [inner, node], [new], node.outputs[0], new.outputs[0])
        modified = True
    return modified


__all__ = ["FuseAttentionPass"]
