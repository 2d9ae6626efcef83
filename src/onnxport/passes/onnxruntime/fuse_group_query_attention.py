"""FuseGroupQueryAttentionPass (ONNX Runtime target): the key/value-cache attention of a decoder
-> ORT's `com.microsoft.GroupQueryAttention`, rotary embedding included.

Matched wherever a decoder layer's attention reads its cache as the concatenation of a past
and the new keys/values (whatever module wrote it), in either form the default passes leave:

    K = Concat(past_key, k_new, axis=2)          V = Concat(past_value, v_new, axis=2)
    Y = Attention(q, K | repeat_kv(K), V | repeat_kv(V), M)              (opset >= 23)
    Y, K, V = Attention(q3, k3_new, v3_new, M, past_key, past_value)      (opset >= 23, the
        lean form FuseAttentionPass leaves: 3-D inputs, rotated in 3-D, presents as outputs)
    Y = MatMul(Where(IsNaN(P), 0, P), repeat_kv(V))                       (below 23)
        P = Softmax(MatMul(q * s, Transpose(repeat_kv(K))) + Where(M, 0, -inf))

with q, k_new, v_new the head splits Transpose(Reshape(x, [B, S, H, D]), [0, 2, 1, 3]) of 3-D
projections, optionally rotated (ONNX `RotaryEmbedding`, or the unfused rotate_half /
interleaved form FuseRotaryPass matches), and Y merged back by Transpose + Reshape to 3-D.

Soundness: GroupQueryAttention always applies a causal mask in cache coordinates (query row s
of a step with past length P sees keys 0..P+s), so it replaces an attention only when the
graph's boolean mask M is provably that causal triangle AND something else: M (through Expand)
is And(C, X...) with C = LessOrEqual(kv, q), kv = Range(0, T, 1) over the keys (T = the
present length, by shape) and q = Range(0, S, 1) + P (S = the query length, P = a cache input's
length, by shape). The rest X becomes GQA's `attention_bias` (0 where X holds, the float
minimum elsewhere): taken from `attention_mask` directly when X is transformers' padding
gather `attention_mask[b, kv]`, else computed from M itself. A mask without the causal factor
(an encoder, a sliding window written without it, a float mask) is left alone.

Padding: `seqlens_k` is T - 1 for every row and `total_sequence_length` is T, so the cache
layout is the graph's own (present = Concat(past, new), padding positions included) and the
padding comes from `attention_bias`. `seqlens_k = ReduceSum(attention_mask) - 1` (what
right-padded runtimes feed) would be wrong for left-padded batches, which transformers'
`generate` uses: GQA would read the first keys of the cache, the padding. A fully masked query
row (a left pad of a prompt) gives zeros in ORT 1.32, as the unfused graph. `query_seqlens` = S
for every row lets batches of more than one row run multi-token steps on a cache (ORT refuses
them without it), as the unfused graph does; it is an input of ORT 1.32's GroupQueryAttention
schema (older releases, whose schema ends earlier, refuse the node).

Rotary: when q and k_new are rotated by the same cos/sin, and those are a position-wise
function (Unsqueeze, Cast, elementwise ops with constants that do not vary along positions,
Concat, Cos, Sin) of the same query positions q = Range(0, S, 1) + P that the causal mask
uses, GQA rotates (do_rotary=1, rotary_interleaved). Its cos_cache / sin_cache (T, D/2) are
that same function of Range(0, T, 1), computed once per run in the graph (no table size to
pick, the model's own formula and scaling), halved as RotaryEmbedding takes them. With
`max_positions=N` they are instead that function evaluated once, at export, over 0..N-1 (in
numpy, in the graph's dtypes): constant (N, D/2) tables as the GenAI builder writes, no
per-step work; ORT then refuses a step whose total length exceeds N ("cos_cache dimension 0
shall not be less than total_sequence_length"), so N must be the model's context length.
Rotations with other positions (a position_ids input) stay in the graph, before GQA.

Shared KV buffer: when the padding is the graph's `attention_mask` input, T becomes
T' = Min(len(attention_mask), T) for every reader of T, and the query positions P + i become
P + i + T' - T (State.retime). For every input the graph took before, T' = T; with
onnxruntime-genai's past_present_share_buffer (the past inputs are one max-length buffer, so
P and T by shape are the buffer's), T' is the number of tokens seen, GQA writes the new
keys/values in place at T' - S, and nothing else reads the buffer's length
(tasks/genai.shares_kv_buffer checks this before genai_config.json turns sharing on).

seqlens_k, total_sequence_length, query_seqlens, the bias and the caches are computed once per
graph and shared by every layer. With `attention_mask` as the padding, GQA's own inputs take
the fewest once-per-step nodes (16 on a Llama, the builder's 6 has no padding bias): S, P
and B as Shape(x, k, k + 1), cols = Slice(attention_mask, 0, P + S) (which clamps to the
mask's length: T' by construction, no Min) and T' = Shape(cols)[1], all 1-element tensors.

Packed QKV (`pack_qkv=True`, the default): when GQA's query, key and value are three Linears
of the same input (MatMul(x, Transpose(W)) [+ bias]), they become one MatMul(x, Concat(Wq^T,
Wk^T, Wv^T, axis=1)) [+ Concat(biases)] feeding GQA's packed-QKV input. The weights stay
initializers by their state_dict names (the file does not grow, `apply_weights` still finds
them); ONNX Runtime folds Transpose + Concat once, at session creation, into one weight
(its peak memory while folding was not measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common

from onnxport.passes import _fusion as f
from onnxport.passes import fuse_attention as fa
from onnxport.passes import fuse_rotary as fr
from onnxport.passes.onnxruntime import CONTRIB_DOMAIN

_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)
_HEADS = [0, 2, 1, 3]


def _ints(value: ir.Value | None) -> list[int] | None:
    data = f.constant(value)
    return None if data is None or data.dtype.kind not in "iu" else [int(x) for x in
                                                                    data.reshape(-1)]


def _attr_int(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return default if a is None else a.as_int()


def _dim(value: ir.Value | None, axis: int) -> object:
    if value is None or value.shape is None or len(value.shape) <= axis:
        return None
    return value.shape[axis]


# ---------------------------------------------------------------------------------------------
# The mask: causal triangle AND the rest


@dataclass
class _Mask:
    mask: ir.Value                   # the boolean mask M of the attention
    positions: ir.Value              # Range(0, S, 1) + P: the query positions, (S,) int64
    keys: ir.Value                   # Range(0, T, 1): the key positions, (T,) int64
    total: ir.Value                  # T, the scalar Range limit (int64)
    rest: list[ir.Value]             # the And factors other than the causal one
    length: ir.Value                 # S, the scalar limit of the query positions' Range
    padding: ir.Value | None = None  # attention_mask (B, >= T) when `rest` is its padding gather


def _strip_unsqueeze(value: ir.Value | None) -> ir.Value | None:
    """The 1-D value that `value`, of shape (1, ..., n, ..., 1), unsqueezes."""
    while value is not None and f.rank(value) != 1:
        node = f.producer(value, "Unsqueeze")
        if node is None or len(node.inputs) < 2 or _ints(node.inputs[1]) is None:
            return None
        value = node.inputs[0]
    return value


def _unit_range(value: ir.Value | None) -> ir.Node | None:
    """`value` = Range(0, n, 1) (+ 0): the Range node."""
    node = f.producer(value, "Range", "Add")
    if node is not None and node.op_type == "Add":
        for a, b in ((0, 1), (1, 0)):
            if f.scalar(node.inputs[b]) == 0:
                return _unit_range(node.inputs[a])
        return None
    if node is None or f.scalar(node.inputs[0]) != 0 or f.scalar(node.inputs[2]) != 1:
        return None
    return node


def _dim_source(value: ir.Value | None) -> tuple[ir.Value, int] | None:
    """`value` = dim k of x (Gather(Shape(x), k), or a 1-element Shape(x, start=k, end=k+1)
    reshaped to a scalar): (x, k)."""
    node = f.producer(value, "Gather", "Reshape", "Squeeze")
    if node is None:
        return None
    if node.op_type in ("Reshape", "Squeeze"):
        shape = f.producer(node.inputs[0], "Shape")
        if shape is None or shape.inputs[0] is None:
            return None
        start, end = _attr_int(shape, "start", 0), shape.attributes.get("end")
        if end is None or end.as_int() != start + 1 or start < 0:
            return None
        return shape.inputs[0], start
    shape = f.producer(node.inputs[0], "Shape")
    k = _ints(node.inputs[1])
    if shape is None or shape.inputs[0] is None or k is None or len(k) != 1 or \
            _attr_int(node, "axis", 0) != 0 or shape.attributes.get("start") is not None:
        return None
    r = f.rank(shape.inputs[0])
    if r is None:
        return None
    return shape.inputs[0], k[0] + r if k[0] < 0 else k[0]


def _query_positions(value: ir.Value | None, seq: object, past: ir.Value) -> ir.Value | None:
    """`value` = Range(0, S, 1) + P with S the query length and P the length of a cache: S,
    the Range's scalar limit."""
    add = f.producer(value, "Add")
    if add is None:
        return None
    for a, b in ((0, 1), (1, 0)):
        rng = _unit_range(add.inputs[a])
        src = _dim_source(add.inputs[b])
        if rng is None or src is None or not f.same_dim(_dim(rng.outputs[0], 0), seq):
            continue
        x, k = src
        if f.rank(x) == 4 and k == 2 and f.same_dim(_dim(x, 2), _dim(past, 2)) and \
                rng.inputs[1] is not None and f.rank(rng.inputs[1]) == 0:
            return rng.inputs[1]
    return None


def _causal(value: ir.Value, seq: object, total: object, past: ir.Value
            ) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value] | None:
    """`value` = LessOrEqual(kv, q) | GreaterOrEqual(q, kv): (query positions, key positions,
    T, S)."""
    node = f.producer(value, "LessOrEqual", "GreaterOrEqual")
    if node is None:
        return None
    kv4, q4 = node.inputs if node.op_type == "LessOrEqual" else node.inputs[::-1]
    if f.rank(kv4) != 4 or f.rank(q4) != 4:
        return None
    assert kv4 is not None and q4 is not None and kv4.shape is not None and q4.shape is not None
    if list(kv4.shape)[:3] != [1, 1, 1] or [q4.shape[0], q4.shape[1], q4.shape[3]] != [1, 1, 1]:
        return None
    keys, positions = _strip_unsqueeze(kv4), _strip_unsqueeze(q4)
    rng = _unit_range(keys)
    if rng is None or positions is None or not f.same_dim(_dim(keys, 0), total) or \
            rng.inputs[1] is None:
        return None
    length = _query_positions(positions, seq, past)
    if length is None:
        return None
    assert keys is not None
    return positions, keys, rng.inputs[1], length


def _factors(value: ir.Value) -> list[ir.Value]:
    node = f.producer(value, "And")
    if node is None:
        return [value]
    return [v for x in node.inputs if x is not None for v in _factors(x)]


def _mask(m: ir.Value, seq: object, total: object, past: ir.Value) -> _Mask | None:
    if m.dtype != ir.DataType.BOOL or f.rank(m) != 4:
        return None
    value = m
    expand = f.producer(value, "Expand")
    if expand is not None and expand.inputs[0] is not None:
        value = expand.inputs[0]
    causal, rest = None, []
    for factor in _factors(value):
        data = f.constant(factor)
        if data is not None and data.dtype == np.bool_ and data.all():
            continue
        found = _causal(factor, seq, total, past) if causal is None else None
        if found is not None:
            causal = found
        else:
            rest.append(factor)
    if causal is None:
        return None
    positions, keys, limit, length = causal
    out = _Mask(m, positions, keys, limit, rest, length)
    if len(rest) == 1:
        out.padding = _padding(rest[0], keys)
    return out


def _wrapped(value: ir.Value | None) -> ir.Value | None:
    """x from Where(Less(x, 0), Add(x, n), x) (a negative index wrapped), else `value`."""
    node = f.producer(value, "Where")
    if node is None:
        return value
    less = f.producer(node.inputs[0], "Less")
    add = f.producer(node.inputs[1], "Add")
    x = node.inputs[2]
    if less is None or add is None or less.inputs[0] is not x or f.scalar(less.inputs[1]) != 0 \
            or x not in add.inputs:
        return value
    return x


def _index_part(value: ir.Value | None) -> ir.Value | None:
    """The index tensor of one GatherND coordinate: Unsqueeze(Expand(i), -1) -> i unwrapped."""
    node = f.producer(value, "Unsqueeze")
    if node is None or _ints(node.inputs[1]) not in ([-1], [4]):
        return None
    inner = node.inputs[0]
    expand = f.producer(inner, "Expand")
    if expand is not None:
        inner = expand.inputs[0]
    return _wrapped(inner)


def _padding(x: ir.Value, keys: ir.Value) -> ir.Value | None:
    """The attention mask (B, n) when `x` = attention_mask[arange(B)[:, None, None, None],
    keys[None, None, None, :]] as a boolean (transformers' padding_mask_function):
    GatherND(Cast(mask, bool), Concat(batch index, key index)), or that gather as
    SimplifyIndexingPass leaves it, a view of the mask's first T columns."""
    return _padding_view(x, keys) if f.producer(x, "Unsqueeze") else _padding_gather(x, keys)


def _mask_data(value: ir.Value | None) -> ir.Value | None:
    """The (B, n) integer or boolean mask that `value` is, or casts to bool."""
    cast = f.producer(value, "Cast")
    if cast is not None:
        if _attr_int(cast, "to", 0) != ir.DataType.BOOL.value:
            return None
        value = cast.inputs[0]
    if value is None or f.rank(value) != 2 or value.dtype not in (
            ir.DataType.INT64, ir.DataType.INT32, ir.DataType.BOOL):
        return None
    return value


def _padding_view(x: ir.Value, keys: ir.Value) -> ir.Value | None:
    """Unsqueeze(mask[:, :T] | mask, axes=[1, 2]) of shape (B, 1, 1, T), T the key count."""
    unsq = f.producer(x, "Unsqueeze")
    if unsq is None or len(unsq.inputs) < 2 or _ints(unsq.inputs[1]) != [1, 2] or \
            f.rank(x) != 4 or not f.same_dim(_dim(x, 3), _dim(keys, 0)):
        return None
    value = unsq.inputs[0]
    sl = f.producer(value, "Slice")
    if sl is not None:
        ins = list(sl.inputs) + [None] * (5 - len(sl.inputs))
        if _ints(ins[1]) != [0] or (ins[3] is not None and _ints(ins[3]) not in ([1], [-1])) \
                or (ins[4] is not None and _ints(ins[4]) != [1]):
            return None
        value = ins[0]
    return _mask_data(value)


def _padding_gather(x: ir.Value, keys: ir.Value) -> ir.Value | None:
    gather = f.producer(x, "GatherND")
    if gather is None or _attr_int(gather, "batch_dims", 0) != 0:
        return None
    data = _mask_data(gather.inputs[0])
    if data is None:
        return None
    cat = f.producer(gather.inputs[1], "Concat")
    if cat is None or len(cat.inputs) != 2 or _attr_int(cat, "axis", 0) not in (-1, 4):
        return None
    b_idx, k_idx = (_index_part(v) for v in cat.inputs)
    if b_idx is None or k_idx is None or _strip_unsqueeze(k_idx) is not keys:
        return None
    b_range = _unit_range(_strip_unsqueeze(b_idx))
    if b_range is None or list(b_idx.shape or [])[1:] != [1, 1, 1] or \
            not f.same_dim(_dim(b_range.outputs[0], 0), _dim(data, 0)):
        return None
    return data


# ---------------------------------------------------------------------------------------------
# Q, K, V: head splits and rotary


@dataclass
class _Rotary:
    x: ir.Value            # the rotated input (B, H, S, D), or (B, S, H * D)
    cos: ir.Value          # c (1, S, D), halves (or pairs) equal
    sin: ir.Value
    interleaved: bool


def _rotary(value: ir.Value) -> _Rotary | None:
    node = value.producer()
    if node is None or node.domain:
        return None
    if node.op_type == "RotaryEmbedding":
        if len(node.inputs) != 3 or node.inputs[0] is None or \
                _attr_int(node, "rotary_embedding_dim", 0) != 0:
            return None
        x = node.inputs[0]
        interleaved = bool(_attr_int(node, "interleaved", 0))
        heads = _attr_int(node, "num_heads", 0)
        d = _dim(x, 3)
        if heads and f.rank(x) == 3 and isinstance(_dim(x, 2), int):
            d = int(_dim(x, 2)) // heads  # type: ignore[arg-type]
        elif f.rank(x) != 4 or heads:
            return None
        if not isinstance(d, int):
            return None
        cs = []
        for half in node.inputs[1:]:
            expand = f.producer(half, "Expand")
            if expand is not None:
                half = expand.inputs[0]
            sl = f.producer(half, "Slice")
            c = None if sl is None else sl.inputs[0]
            want = (0, d) if interleaved else (0, d // 2)
            if c is None or fr._slice_last(sl, c, d, 2 if interleaved else 1) != want:
                return None
            cs.append(c)
        return _Rotary(x, cs[0], cs[1], interleaved)
    if node.op_type != "Add":
        return None
    for m_cos, _, rot, s_val in fr.rotation_readings(node):
        interleaved = False
        x = fr._rotate_half_of(rot)
        signed = fr.signed_rotation_of(rot, s_val) if x is None else None
        if signed is not None:      # below opset 23: the negation in the sine
            x, s_val = signed
        if x is None:
            x, interleaved = fr._rotate_pairs_of(rot), True
        if x is None:
            continue
        for x_val, c_val in fr._mul_parts(m_cos):
            if x_val is not x:
                continue
            cos = fr._cache_source(c_val, x, interleaved)
            sin = fr._cache_source(s_val, x, interleaved)
            if cos is not None and sin is not None:
                return _Rotary(x, cos, sin, interleaved)
    return None


def _split(value: ir.Value) -> tuple[ir.Value, int] | None:
    """`value` = Transpose(Reshape(x, [B, S, H, D]), [0, 2, 1, 3]) of a 3-D x: (x, H)."""
    t = f.producer(value, "Transpose")
    if t is None or fa._perm(t) != _HEADS:
        return None
    r = f.producer(t.inputs[0], "Reshape")
    if r is None or r.inputs[0] is None:
        return None
    x, split = r.inputs[0], r.outputs[0]
    if f.rank(x) != 3 or f.rank(split) != 4 or not fa._same_dims(x, split, range(2)):
        return None
    h, d, hidden = _dim(split, 2), _dim(split, 3), _dim(x, 2)
    if not all(isinstance(n, int) and n > 0 for n in (h, d, hidden)) or h * d != hidden:  # type: ignore[operator]
        return None
    return x, int(h)  # type: ignore[arg-type]


def _positionwise(c: ir.Value, positions: ir.Value) -> list[ir.Node] | None:
    """The nodes computing `c` (1, S, D) from `positions` (S,) independently for each position:
    Unsqueeze, Cast, Cos, Sin, Neg, elementwise ops whose constant operand does not vary along
    the position axis, Concat along another axis. None when `c` is anything else."""
    axis: dict[int, int] = {id(positions): -1}     # the position axis, counted from the end
    nodes: dict[int, ir.Node] = {}

    def visit(v: ir.Value | None, depth: int) -> int | None:
        if v is None or depth > 24:
            return None
        if id(v) in axis:
            return axis[id(v)]
        node = v.producer()
        if node is None or node.domain or len(node.outputs) != 1:
            return None
        op = node.op_type
        pa: int | None = None
        if op in ("Cast", "Cos", "Sin", "Neg", "Identity"):
            pa = visit(node.inputs[0], depth + 1)
        elif op == "Unsqueeze":
            inner = visit(node.inputs[0], depth + 1)
            axes, r = _ints(node.inputs[1]), f.rank(node.inputs[0])
            if inner is None or axes is None or r is None:
                return None
            out_rank = r + len(axes)
            inserted = sorted(a + out_rank if a < 0 else a for a in axes)
            kept = [i for i in range(out_rank) if i not in inserted]
            pa = kept[r + inner] - out_rank
        elif op in ("Mul", "Div", "Add", "Sub"):
            found = []
            for x in node.inputs:
                data = f.constant(x)
                if data is not None:
                    found.append(("const", data))
                else:
                    found.append(("chain", visit(x, depth + 1)))
            chain = [a for kind, a in found if kind == "chain"]
            if not chain or any(a is None for a in chain) or len(set(chain)) != 1:
                return None
            pa = chain[0]
            for kind, data in found:
                if kind == "const" and data.ndim >= -pa and data.shape[pa] != 1:  # type: ignore[union-attr,index]
                    return None
        elif op == "Concat":
            inner_axes = [visit(x, depth + 1) for x in node.inputs]
            r = f.rank(v)
            if not inner_axes or any(a is None for a in inner_axes) or len(set(inner_axes)) != 1 \
                    or r is None:
                return None
            pa = inner_axes[0]
            cat_axis = _attr_int(node, "axis", 0)
            if (cat_axis - r if cat_axis >= 0 else cat_axis) == pa:
                return None
        if pa is None:
            return None
        axis[id(v)] = pa
        nodes[id(node)] = node
        return pa

    if visit(c, 0) != -2 or f.rank(c) != 3 or _dim(c, 0) != 1 or f.rank(positions) != 1:
        return None
    return list(nodes.values())


# ---------------------------------------------------------------------------------------------
# One attention


@dataclass
class _Match:
    anchor: ir.Node                  # the Attention node / the final MatMul
    q: ir.Value                      # (B, Hq, S, D) or (B, S, Hq * D), after any rotary kept
    k_new: ir.Value
    v_new: ir.Value
    past_key: ir.Value
    past_value: ir.Value
    present_key: ir.Value
    present_value: ir.Value
    output: ir.Value                 # (B, Hq, S, D), or (B, S, Hq * D) with 3-D inputs
    mask: ir.Value                   # boolean
    scale: float
    inside: list[ir.Node] = field(default_factory=list)   # nodes that may read K / V
    heads: tuple[int, int] = (0, 0)  # (Hq, Hkv) of 3-D inputs

    @property
    def seq(self) -> object:
        return _dim(self.q, 1 if self.heads[0] else 2)

    @property
    def head_size(self) -> int:
        if self.heads[0]:
            return int(_dim(self.q, 2)) // self.heads[0]  # type: ignore[arg-type]
        return int(_dim(self.q, 3))  # type: ignore[arg-type]


def _unrepeated_kv(value: ir.Value, inside: list[ir.Node]) -> ir.Value:
    """x when `value` is repeat_kv(x) (its nodes added to `inside`), else `value`."""
    found = fa._unrepeated(value)
    if found is None:
        return value
    inside += found[1]
    return found[0]


def _match_attention(node: ir.Node) -> _Match | None:
    """ONNX Attention (opset >= 23) over a cache, with a boolean mask: reading the cache as
    Concat(past, new) inputs, or as past_key / past_value inputs (4-D or 3-D)."""
    cached = len(node.inputs) == 6 and len(node.outputs) >= 3
    if len(node.inputs) not in (4, 6) or any(v is None for v in node.inputs) or \
            any(o.uses() or o.is_graph_output() for o in node.outputs[3 if cached else 1:]):
        return None
    if _attr_int(node, "is_causal", 0) or _attr_int(node, "qk_matmul_output_mode", 0):
        return None
    softcap = node.attributes.get("softcap")
    if softcap is not None and softcap.as_float() != 0.0:
        return None
    if cached:
        return _match_cached(node)
    if "q_num_heads" in node.attributes or "kv_num_heads" in node.attributes:
        return None
    q, k, v, mask = node.inputs
    assert q is not None and k is not None and v is not None and mask is not None
    inside = [node]
    k, v = _unrepeated_kv(k, inside), _unrepeated_kv(v, inside)
    d = _dim(q, 3)
    scale_attr = node.attributes.get("scale")
    scale = scale_attr.as_float() if scale_attr is not None else (
        1 / math.sqrt(d) if isinstance(d, int) else float("nan"))
    return _finish(node, q, k, v, mask, scale, node.outputs[0], inside)


def _match_cached(node: ir.Node) -> _Match | None:
    """Attention(q, k_new, v_new, M, past_key, past_value) -> (Y, present_key, present_value)."""
    q, k, v, mask, past_k, past_v = node.inputs
    assert q is not None and k is not None and v is not None and mask is not None
    assert past_k is not None and past_v is not None
    hq, hkv = _attr_int(node, "q_num_heads", 0), _attr_int(node, "kv_num_heads", 0)
    rank = 3 if hq and hkv else 4
    if any(f.rank(x) != rank for x in (q, k, v)) or f.rank(past_k) != 4 or \
            f.rank(past_v) != 4 or q.dtype not in _TYPES or \
            any(x.dtype != q.dtype for x in (k, v, past_k, past_v)):
        return None
    if rank == 4:
        hq, hkv, d = _dim(q, 1), _dim(past_k, 1), _dim(q, 3)
    else:
        hidden = _dim(q, 2)
        d = hidden // hq if isinstance(hidden, int) and hidden % hq == 0 else None
    if not all(isinstance(n, int) and n > 0 for n in (hq, hkv, d)) or hq % hkv or \
            _dim(past_k, 1) != hkv or _dim(past_v, 1) != hkv or _dim(past_k, 3) != d or \
            _dim(past_v, 3) != d:  # type: ignore[operator]
        return None
    scale_attr = node.attributes.get("scale")
    scale = scale_attr.as_float() if scale_attr is not None else 1 / math.sqrt(d)  # type: ignore[arg-type]
    y, present_k, present_v = node.outputs[:3]
    return _Match(node, q, k, v, past_k, past_v, present_k, present_v, y, mask, scale, [node],
                  (int(hq), int(hkv)) if rank == 3 else (0, 0))  # type: ignore[arg-type]


def _match_softmax(softmax: ir.Node) -> _Match | None:
    """Eager attention (below opset 23, as FuseAttentionPass leaves it):

        P = Softmax(MatMul(q [* s1], Transpose(K, [0, 1, 3, 2]) [* s2]) [* c] + Where(M, 0, -inf))
        Y = MatMul(Where(IsNaN(P), 0, P), V)

    or, with the lowest float32 for -inf, Y = Mul(MatMul(P, V), ReduceMax(Cast(M), -1)) (the
    IsNaN/Where, or the Mul by the rows that keep a key, gives the zero rows of fully masked
    queries, which GQA also gives)."""
    axis = softmax.attributes.get("axis")
    if axis is None or axis.as_int() not in (-1, 3) or softmax.inputs[0] is None:
        return None
    inside = [softmax]
    add = f.producer(softmax.inputs[0], "Add")
    if add is None:
        return None
    inside.append(add)
    for a, b in ((0, 1), (1, 0)):
        tiles = _tiles(add.inputs[b])
        where = f.producer(_untiled(add.inputs[b]), "Where")
        if where is not None and f.scalar(where.inputs[1]) == 0 and \
                f.scalar(where.inputs[2]) in (-math.inf, _LOWEST) and where.inputs[0] is not None:
            scores, mask = add.inputs[a], where.inputs[0]
            break
    else:
        return None
    raw, c, nodes = fa._scaled(scores)
    inside += nodes
    qk = f.producer(raw, "MatMul")
    if qk is None:
        return None
    inside.append(qk)
    q, s1, q_nodes = fa._scaled(qk.inputs[0])
    kt, s2, k_nodes = fa._scaled(qk.inputs[1])
    kt_node = f.producer(kt, "Transpose")
    if kt_node is None or fa._perm(kt_node) != [0, 1, 3, 2] or q is None or \
            kt_node.inputs[0] is None:
        return None
    inside += [*q_nodes, *k_nodes, kt_node]
    grouped = _grouped_query(q)     # FuseAttentionPass's (B, Hkv, n * S, D) view of q
    if grouped is not None:
        q = grouped[0]
        inside.append(grouped[1])
    if tiles != 1 and grouped is None:
        return None
    probs = softmax.outputs[0]
    finite = f.scalar(where.inputs[2]) == _LOWEST
    if not finite:
        uses = [u.node for u in probs.uses()]
        isnan = next((n for n in uses if n.op_type == "IsNaN" and not n.domain), None)
        zero = next((n for n in uses if n.op_type == "Where" and not n.domain), None)
        if probs.is_graph_output() or len(uses) != 2 or isnan is None or zero is None or \
                zero.inputs[0] is not isnan.outputs[0] or zero.inputs[2] is not probs or \
                f.scalar(zero.inputs[1]) != 0.0:
            return None
        inside += [isnan, zero]
        probs = zero.outputs[0]
    pv = f.only_user(probs, "MatMul")
    if pv is None or pv.inputs[0] is not probs or pv.inputs[1] is None:
        return None
    inside.append(pv)
    k, v = kt_node.inputs[0], pv.inputs[1]
    output = pv.outputs[0]
    if grouped is not None:         # and the product viewed back as (B, H, S, D)
        back = f.only_user(output, "Reshape")
        if back is None or back.inputs[0] is not output or f.rank(back.outputs[0]) != 4:
            return None
        inside.append(back)
        output = back.outputs[0]
    if finite:                      # the zero rows: Mul(Y, rows of M keeping a key)
        rows = f.only_user(output, "Mul")
        if rows is None or _kept_rows_of(f.other_input(rows, output)) is not mask:
            return None
        inside.append(rows)
        output = rows.outputs[0]
    if not f.internal(inside, output):
        return None
    k, v = _unrepeated_kv(k, inside), _unrepeated_kv(v, inside)
    if grouped is not None:         # the view groups q's heads by K's heads, the mask tiled n
        hq, hkv = _dim(q, 1), _dim(k, 1)
        if not (isinstance(hq, int) and hkv == grouped[2] and hq % grouped[2] == 0 and
                tiles in (1, hq // grouped[2])):
            return None
    return _finish(inside[-1], q, k, v, mask, s1 * s2 * c, output, inside)


_LOWEST = float(np.finfo(np.float32).min)


def _kept_rows_of(value: ir.Value | None) -> ir.Value | None:
    """M when `value` is ReduceMax(Cast(M, float), axes=[-1], keepdims=1) of a boolean M."""
    reduce = f.producer(value, "ReduceMax")
    cast = f.producer(reduce.inputs[0], "Cast") if reduce is not None else None
    if reduce is None or cast is None or len(reduce.inputs) != 2 or \
            _ints(reduce.inputs[1]) not in ([-1], [_rank_minus_one(cast.inputs[0])]) or \
            cast.inputs[0] is None or cast.inputs[0].dtype != ir.DataType.BOOL:
        return None
    keep = reduce.attributes.get("keepdims")
    return cast.inputs[0] if keep is None or keep.as_int() == 1 else None


def _rank_minus_one(value: ir.Value | None) -> int:
    r = f.rank(value)
    return -1 if r is None else r - 1


def _tiles(value: ir.Value | None) -> int:
    """n when `value` is Tile(x, [1, 1, n, 1]), else 1."""
    tile = f.producer(value, "Tile")
    reps = _ints(tile.inputs[1]) if tile is not None and len(tile.inputs) > 1 else None
    return reps[2] if reps is not None and len(reps) == 4 and value is not _untiled(value) else 1


def _untiled(value: ir.Value | None) -> ir.Value | None:
    """x when `value` is Tile(x, [1, 1, n, 1]) (a mask tiled along the query axis by
    FuseAttentionPass's grouped heads), else `value`."""
    tile = f.producer(value, "Tile")
    reps = _ints(tile.inputs[1]) if tile is not None and len(tile.inputs) > 1 else None
    if tile is None or reps is None or len(reps) != 4 or reps[:2] != [1, 1] or reps[3] != 1:
        return value
    return tile.inputs[0]


def _grouped_query(value: ir.Value | None) -> tuple[ir.Value, ir.Node, int] | None:
    """(q, the Reshape, Hkv) when `value` is Reshape(q) of a 4-D q (B, H, S, D) to
    (B, Hkv, n * S, D), its shape [0 | B, Hkv, *, 0 | D] with Hkv and D constant (a constant, or
    a Concat of four one-element parts): FuseAttentionPass's grouped-heads view."""
    view = f.producer(value, "Reshape")
    if view is None or view.inputs[0] is None or f.rank(view.inputs[0]) != 4 or \
            len(value.uses()) != 1 or len(view.inputs) < 2:  # type: ignore[union-attr]
        return None
    q, target = view.inputs[0], view.inputs[1]
    dims = _ints(target)
    parts: list[list[int] | None]
    add = f.producer(target, "Add")
    if dims is not None:
        parts = [[d] for d in dims]
    elif add is not None:   # c0 + Shape(q) * c1: c0 where c1 is 0, q's dim where 1 (c0 0)
        parts = []
        for a, b in ((0, 1), (1, 0)):
            c0, mul = _ints(add.inputs[a]), f.producer(add.inputs[b], "Mul")
            if c0 is None or mul is None or len(c0) != 4:
                continue
            for i, j in ((0, 1), (1, 0)):
                c1, shape = _ints(mul.inputs[j]), f.producer(mul.inputs[i], "Shape")
                x = None if shape is None else shape.inputs[0]
                if c1 is None or len(c1) != 4 or x is None or f.rank(x) != 4 or \
                        shape.attributes.get("start") is not None:  # type: ignore[union-attr]
                    continue
                # x's dim i, known equal to q's (the views of all layers share one Shape)
                parts = [[v] if w == 0 else [0] if (w, v) == (1, 0) and f.same_dim(
                    _dim(x, k), _dim(q, k)) else None for k, (v, w) in enumerate(zip(c0, c1))]
    else:
        cat = f.producer(target, "Concat")
        if cat is None or len(cat.inputs) != 4:
            return None
        parts = [_ints(x) for x in cat.inputs]
    if len(parts) != 4 or any(p is not None and len(p) != 1 for p in parts):
        return None
    hkv, d = parts[1], parts[3]
    if hkv is None or d is None or hkv[0] <= 0 or d[0] not in (0, _dim(q, 3)) or \
            (parts[0] is not None and parts[0][0] not in (0, _dim(q, 0))):
        return None
    return q, view, hkv[0]


def _finish(anchor: ir.Node, q: ir.Value, k: ir.Value, v: ir.Value, mask: ir.Value,
            scale: float, output: ir.Value, inside: list[ir.Node]) -> _Match | None:
    kc, vc = fa.cache_concat(k), fa.cache_concat(v)
    if kc is None or vc is None or math.isnan(scale):
        return None
    if q.dtype not in _TYPES or any(x.dtype != q.dtype for x in (k, v, *kc[:2], *vc[:2])):
        return None
    if f.rank(q) != 4 or q.shape is None or k.shape is None or v.shape is None:
        return None
    hq, hkv, d = q.shape[1], k.shape[1], q.shape[3]
    if not all(isinstance(n, int) and n > 0 for n in (hq, hkv, d)) or hq % hkv or \
            v.shape[1] != hkv or v.shape[3] != d or k.shape[3] != d:  # type: ignore[operator]
        return None
    # Every reader of the cache concatenations is inside the attention (or a graph output).
    inside_ids = {id(n) for n in inside}
    for value in (k, v):
        if any(id(u.node) not in inside_ids for u in value.uses()):
            return None
    return _Match(anchor, q, kc[1], vc[1], kc[0], vc[0], k, v, output, mask, scale, inside)


def _linear(value: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value | None] | None:
    """`value` = MatMul(x, B) [+ bias] with B (in, out) constant (an initializer, or
    Transpose(initializer, [1, 0]) as a Linear's weight) and a constant 1-D bias, read only
    here: (x, B, bias)."""
    if value.is_graph_output() or len(value.uses()) != 1:
        return None
    node = f.producer(value, "MatMul", "Add")
    bias = None
    if node is not None and node.op_type == "Add":
        for a, b in ((0, 1), (1, 0)):
            mm = f.producer(node.inputs[a], "MatMul")
            other = node.inputs[b]
            if mm is not None and other is not None and other.const_value is not None and \
                    f.rank(other) == 1 and len(node.inputs[a].uses()) == 1:  # type: ignore[union-attr]
                node, bias = mm, other
                break
        else:
            return None
    if node is None or node.op_type != "MatMul" or node.inputs[0] is None or \
            node.inputs[1] is None:
        return None
    w = node.inputs[1]
    t = f.producer(w, "Transpose")
    source = t.inputs[0] if t is not None and fa._perm(t) in (None, [1, 0]) else w
    if source is None or source.const_value is None or f.rank(source) != 2:
        return None
    return node.inputs[0], w, bias


def _halves(nodes: list[ir.Node]) -> set[int]:
    """The ids of the chain's values whose first half (last axis) the cache clone computes
    alone: from a Concat(x, x) on the last axis on, through unary ops and elementwise ops with
    constants (sliced to their first half). Empty when anything else reads such a value."""
    halved: set[int] = set()
    for node in nodes:
        out = node.outputs[0]
        ins = [x for x in node.inputs if x is not None]
        touched = any(id(x) in halved for x in ins)
        r = f.rank(out)
        if node.op_type == "Concat" and len(ins) == 2 and ins[0] is ins[1] and r is not None \
                and _attr_int(node, "axis", 0) in (-1, r - 1) and not touched:
            halved.add(id(out))
        elif touched:
            if node.op_type in ("Cast", "Cos", "Sin", "Neg", "Identity"):
                halved.add(id(out))
            elif node.op_type in ("Mul", "Div", "Add", "Sub") and all(
                    id(x) in halved or (f.constant(x) is not None and (
                        f.constant(x).ndim == 0 or f.constant(x).shape[-1] % 2 == 0  # type: ignore[union-attr]
                        or f.constant(x).shape[-1] == 1)) for x in ins):  # type: ignore[union-attr]
                halved.add(id(out))
            else:
                return set()
    return halved


_NUMPY = {"Cos": np.cos, "Sin": np.sin, "Neg": np.negative, "Identity": lambda x: x,
          "Mul": np.multiply, "Add": np.add, "Sub": np.subtract}


def _table(c: ir.Value, nodes: list[ir.Node], positions: ir.Value, n: int, interleaved: bool
           ) -> np.ndarray | None:
    """c's function of the positions (`nodes`, in graph order) evaluated at 0..n-1 in numpy, in
    the graph's dtypes: the (n, D/2) cache; None when a node is one it does not evaluate."""
    values: dict[int, np.ndarray] = {id(positions): np.arange(n, dtype=positions.dtype.numpy())}
    for node in nodes:
        args = [values.get(id(x)) if x is not None and id(x) in values else f.constant(x)
                for x in node.inputs]
        if any(a is None for a in args):
            return None
        op = node.op_type
        if op in _NUMPY:
            out = _NUMPY[op](*args)
        elif op == "Div" and all(a.dtype.kind == "f" for a in args):  # type: ignore[union-attr]
            out = np.divide(*args)
        elif op == "Cast":
            out = args[0].astype(ir.DataType(_attr_int(node, "to", 0)).numpy())  # type: ignore[union-attr]
        elif op == "Unsqueeze":
            out = args[0]
            rank = out.ndim + args[1].size  # type: ignore[union-attr]
            for axis in sorted(int(a) % rank for a in args[1].reshape(-1)):  # type: ignore[union-attr]
                out = np.expand_dims(out, axis)
        elif op == "Concat":
            out = np.concatenate(args, axis=_attr_int(node, "axis", 0))  # type: ignore[arg-type]
        else:
            return None
        dtype = node.outputs[0].dtype
        out = np.asarray(out)
        values[id(node.outputs[0])] = out if dtype is None else out.astype(dtype.numpy())
    full = values.get(id(c))
    if full is None or full.ndim != 3 or full.shape[:2] != (1, n):
        return None
    d = full.shape[2]
    half = full[0, :, ::2] if interleaved else full[0, :, : d // 2]
    return np.ascontiguousarray(half.reshape(n, d // 2))


# ---------------------------------------------------------------------------------------------
# The pass


class FuseGroupQueryAttentionPass(ir.passes.InPlacePass):
    """Decoder attention over a key/value cache with a causal (+ padding) mask ->
    com.microsoft.GroupQueryAttention, rotary inside where its positions are the cache's."""

    def __init__(self, rotary: bool = True, pack_qkv: bool = True,
                 max_positions: int | None = None) -> None:
        super().__init__()
        self.rotary = rotary
        self.pack_qkv = pack_qkv
        self.max_positions = max_positions

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph      # cache inputs and outputs are the main graph's
        opset = f.opset(model)
        state = _State(graph, f.Namer(graph), self.max_positions)
        modified = False
        for node in list(graph):
            if node.graph is not graph or node.domain:
                continue
            m = None
            if node.op_type == "Attention" and opset >= 23:
                m = _match_attention(node)
            elif node.op_type == "Softmax":
                m = _match_softmax(node)
            if m is not None and state.rewrite(m, self.rotary):
                modified = True
        if modified:
            model.opset_imports.setdefault(CONTRIB_DOMAIN, 1)
            state.retime()
            common.RemoveUnusedNodesPass()(model)
            if self.pack_qkv and any([_pack(graph, state.namer, n) for n in list(graph)
                                      if n.op_type == "GroupQueryAttention"
                                      and n.domain == CONTRIB_DOMAIN]):
                common.RemoveUnusedNodesPass()(model)
        return ir.passes.PassResult(model, modified)


def _pack(graph: ir.Graph, namer: f.Namer, gqa: ir.Node) -> bool:
    """GQA's separate Q, K, V, three Linears of the same x -> its packed QKV input: one
    MatMul(x, Concat(Bq, Bk, Bv, axis=1)) [+ Concat(bq, bk, bv)]. The weights stay
    initializers by their own names (ONNX Runtime folds the Concat once, at session creation,
    into one (hidden, q + 2 kv) weight that replaces the three)."""
    q3, k3, v3 = gqa.inputs[:3]
    if q3 is None or k3 is None or v3 is None:
        return False
    parts = [_linear(v) for v in (q3, k3, v3)]
    if any(p is None for p in parts):
        return False
    (x, wq, bq), (xk, wk, bk), (xv, wv, bv) = parts  # type: ignore[misc]
    biases = [b for b in (bq, bk, bv) if b is not None]
    if xk is not x or xv is not x or len(biases) not in (0, 3) or \
            any(v.dtype != q3.dtype for v in (wq, wk, wv, *biases)):
        return False
    cat = f.make_node(namer, gqa, "Concat", [wq, wk, wv], {"axis": 1}, dtype=q3.dtype)
    mm = f.make_node(namer, gqa, "MatMul", [x, cat.outputs[0]], dtype=q3.dtype)
    new = [cat, mm]
    out = mm.outputs[0]
    if biases:
        bcat = f.make_node(namer, gqa, "Concat", biases, {"axis": 0}, dtype=q3.dtype)
        add = f.make_node(namer, gqa, "Add", [out, bcat.outputs[0]], dtype=q3.dtype)
        new += [bcat, add]
        out = add.outputs[0]
    graph.insert_before(gqa, new)
    gqa.replace_input_with(0, out)
    gqa.replace_input_with(1, None)
    gqa.replace_input_with(2, None)
    return True


class _State:
    """What the layers of one graph share: seqlens_k, total_sequence_length, query_seqlens,
    attention_bias per mask, cos/sin caches per rotary source."""

    def __init__(self, graph: ir.Graph, namer: f.Namer, max_positions: int | None = None
                 ) -> None:
        self.graph = graph
        self.namer = namer
        self.max_positions = max_positions
        self.at: ir.Node | None = None           # new nodes go before this layer's anchor
        self.lengths: dict[int, tuple[ir.Value, ir.Value, ir.Value]] = {}
        self.dims: dict[int, tuple[ir.Value, ir.Value]] = {}
        self.masks: dict[int, _Mask] = {}        # per total T, a mask whose T retime() bounds
        self.bias: dict[int, ir.Value | None] = {}
        self.columns: dict[int, tuple[ir.Value, ir.Value]] = {}  # per T: mask[:, :T'], (T',)
        self.caches: dict[tuple[int, bool], ir.Value] = {}

    def _add(self, anchor: ir.Node, op: str, inputs: list[ir.Value | None],
             attrs: dict[str, object] | None = None, dtype: ir.DataType | None = None,
             shape: ir.Shape | None = None) -> ir.Value:
        node = f.make_node(self.namer, anchor, op, inputs, attrs, dtype=dtype, shape=shape)
        assert self.at is not None
        self.graph.insert_before(self.at, node)
        return node.outputs[0]

    def _const(self, anchor: ir.Node, data: np.ndarray) -> ir.Value:
        return self.namer.constant(anchor, data)

    def _dims(self, anchor: ir.Node, mk: _Mask, batch_of: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(B, S) as int64 (1,) tensors, for mask `mk`: B by shape, S from the query positions'
        Range limit (so that nothing computes the positions for their shape)."""
        key = id(mk.total)
        if key not in self.dims:
            i64 = ir.DataType.INT64
            batch = self._add(anchor, "Shape", [batch_of], {"start": 0, "end": 1}, i64,
                              ir.Shape([1]))
            length = mk.length
            if length.dtype != i64:
                length = self._add(anchor, "Cast", [length], {"to": i64.value}, i64, ir.Shape([]))
            one = self._const(anchor, np.array([1], dtype=np.int64))
            seq = self._add(anchor, "Reshape", [length, one], dtype=i64, shape=ir.Shape([1]))
            self.dims[key] = (batch, seq)
        return self.dims[key]

    def _lengths(self, anchor: ir.Node, mk: _Mask, batch_of: ir.Value
                 ) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(seqlens_k, total_sequence_length, query_seqlens) as int32, for mask `mk`."""
        key = id(mk.total)
        if key not in self.lengths:
            if mk.padding is not None and mk.padding.is_graph_input():
                self.masks[key] = mk
                self.lengths[key] = self._mask_lengths(anchor, mk, batch_of)
                return self.lengths[key]
            i32 = ir.DataType.INT32
            batch, seq = self._dims(anchor, mk, batch_of)
            total = self._add(anchor, "Cast", [mk.total], {"to": i32.value}, i32, ir.Shape([]))
            one = self._const(anchor, np.array(1, dtype=np.int32))
            last = self._add(anchor, "Sub", [total, one], dtype=i32, shape=ir.Shape([]))
            seqlens = self._add(anchor, "Expand", [last, batch], dtype=i32, shape=ir.Shape([None]))
            seq32 = self._add(anchor, "Cast", [seq], {"to": i32.value}, i32, ir.Shape([1]))
            qlens = self._add(anchor, "Expand", [seq32, batch], dtype=i32, shape=ir.Shape([None]))
            self.lengths[key] = (seqlens, total, qlens)
        return self.lengths[key]

    def _mask_lengths(self, anchor: ir.Node, mk: _Mask, batch_of: ir.Value
                      ) -> tuple[ir.Value, ir.Value, ir.Value]:
        """`_lengths` when the padding is the graph's `attention_mask` input, in 1-element
        tensors read off shapes: S, P and B by Shape(x, k, k + 1), the mask's columns
        cols = attention_mask[:, :P + S] (Slice clamps to its length: T' = Min(len, P + S),
        as `retime` gives the other readers of T) and T' = Shape(cols)[1]; cols and (B, S, T')
        are kept for the bias (`_bias`)."""
        i64, i32 = ir.DataType.INT64, ir.DataType.INT32
        one = self._const(anchor, np.array([1], dtype=np.int64))
        src = _dim_source(mk.length)
        if src is not None:
            x, k = src
            seq = self._add(anchor, "Shape", [x], {"start": k, "end": k + 1}, i64, ir.Shape([1]))
        else:
            length = mk.length
            if length.dtype != i64:
                length = self._add(anchor, "Cast", [length], {"to": i64.value}, i64, ir.Shape([]))
            seq = self._add(anchor, "Reshape", [length, one], dtype=i64, shape=ir.Shape([1]))
        past = self._add(anchor, "Shape", [batch_of], {"start": 2, "end": 3}, i64, ir.Shape([1]))
        batch = self._add(anchor, "Shape", [batch_of], {"start": 0, "end": 1}, i64, ir.Shape([1]))
        ends = self._add(anchor, "Add", [past, seq], dtype=i64, shape=ir.Shape([1]))
        assert mk.padding is not None
        zero = self._const(anchor, np.array([0], dtype=np.int64))
        cols = self._add(anchor, "Slice", [mk.padding, zero, ends, one], dtype=mk.padding.dtype)
        total = self._add(anchor, "Shape", [cols], {"start": 1, "end": 2}, i64, ir.Shape([1]))
        self.dims[id(mk.total)] = (batch, seq)
        self.columns[id(mk.total)] = (cols, total)
        total32 = self._add(anchor, "Cast", [total], {"to": i32.value}, i32, ir.Shape([1]))
        one32 = self._const(anchor, np.array(1, dtype=np.int32))
        last = self._add(anchor, "Sub", [total32, one32], dtype=i32, shape=ir.Shape([1]))
        seqlens = self._add(anchor, "Expand", [last, batch], dtype=i32, shape=ir.Shape([None]))
        seq32 = self._add(anchor, "Cast", [seq], {"to": i32.value}, i32, ir.Shape([1]))
        qlens = self._add(anchor, "Expand", [seq32, batch], dtype=i32, shape=ir.Shape([None]))
        return seqlens, total32, qlens

    def retime(self) -> None:
        """T -> T' = Min(attention_mask's length, T) for every user of T and P -> P + T' - T
        for every user of the query positions, once all layers are fused (the masks match on
        the original T). T' = T whenever the graph's own mask gather could read the mask
        (length >= T), so nothing changes for inputs the graph took; with a shared KV buffer
        (onnxruntime-genai's past_present_share_buffer: the past inputs are the whole
        max-length buffer, so P and T = P + S by shape are the buffer's), T' is the mask's
        length, the tokens seen, and the positions, GQA's lengths, the bias and the cos/sin
        caches follow it."""
        i64 = ir.DataType.INT64
        for mk in self.masks.values():
            assert mk.padding is not None
            total, positions = mk.total, mk.positions
            total_users = list(total.uses())
            # a Shape reads the query length alone, which the move keeps
            position_users = [u for u in positions.uses()
                              if not (u.node.op_type == "Shape" and not u.node.domain)]
            anchor = total_users[0].node if total_users else None
            if anchor is None:
                continue
            self.at = None
            length = f.make_node(self.namer, anchor, "Shape", [mk.padding], {"start": 1, "end": 2},
                                 dtype=i64, shape=ir.Shape([1]))
            scalar = self._const(anchor, np.array([], dtype=np.int64))
            flat = f.make_node(self.namer, anchor, "Reshape", [length.outputs[0], scalar],
                               dtype=i64, shape=ir.Shape([]))
            bound = f.make_node(self.namer, anchor, "Min", [flat.outputs[0], total], dtype=i64,
                                shape=ir.Shape([]))
            nodes = [length, flat, bound]
            for use in total_users:
                use.node.replace_input_with(use.idx, bound.outputs[0])
            if position_users:
                delta = f.make_node(self.namer, anchor, "Sub", [bound.outputs[0], total],
                                    dtype=i64, shape=ir.Shape([]))
                moved = f.make_node(self.namer, anchor, "Add", [positions, delta.outputs[0]],
                                    dtype=positions.dtype, shape=positions.shape)
                nodes += [delta, moved]
                for use in position_users:
                    use.node.replace_input_with(use.idx, moved.outputs[0])
            self.graph.extend(nodes)
        if self.masks:
            self.graph.sort()

    def _bias(self, anchor: ir.Node, mk: _Mask, dtype: ir.DataType, batch_of: ir.Value
              ) -> ir.Value | None:
        """(B, 1, S, T): 0 where the non-causal factors of the mask hold, the minimum float
        elsewhere; None when there are none."""
        key = id(mk.mask)
        if key in self.bias:
            return self.bias[key]
        if not mk.rest:
            self.bias[key] = None
            return None
        i64 = ir.DataType.INT64
        one = self._const(anchor, np.array([1], dtype=np.int64))
        if mk.padding is not None:      # attention_mask[:, :T] as (B, 1, 1, T)
            if id(mk.total) in self.columns:   # sliced by _mask_lengths
                cols, total = self.columns[id(mk.total)]
            else:
                total = self._add(anchor, "Reshape", [mk.total, one], dtype=i64,
                                  shape=ir.Shape([1]))
                zero = self._const(anchor, np.array([0], dtype=np.int64))
                cols = self._add(anchor, "Slice", [mk.padding, zero, total, one],
                                 dtype=mk.padding.dtype)
            cond = cols if cols.dtype == ir.DataType.BOOL else self._add(
                anchor, "Cast", [cols], {"to": ir.DataType.BOOL.value}, ir.DataType.BOOL)
            axes = self._const(anchor, np.array([1, 2], dtype=np.int64))
            cond = self._add(anchor, "Unsqueeze", [cond, axes], dtype=ir.DataType.BOOL)
        else:
            total = self._add(anchor, "Reshape", [mk.total, one], dtype=i64, shape=ir.Shape([1]))
            cond = mk.mask
        np_dtype = dtype.numpy()
        fill = self._const(anchor, np.array(np.finfo(np_dtype).min, dtype=np_dtype))
        zero_f = self._const(anchor, np.array(0, dtype=np_dtype))
        bias = self._add(anchor, "Where", [cond, zero_f, fill], dtype=dtype)
        # GQA takes exactly (B, 1, S, T)
        batch, seq = self._dims(anchor, mk, batch_of)
        shape = self._add(anchor, "Concat", [batch, one, seq, total], {"axis": 0}, i64,
                          ir.Shape([4]))
        out = self._add(anchor, "Expand", [bias, shape], dtype=dtype)
        self.bias[key] = out
        return out

    def _cache(self, anchor: ir.Node, c: ir.Value, chain: list[ir.Node], mk: _Mask,
               interleaved: bool) -> ir.Value:
        """c's function of the positions, evaluated at Range(0, T): (T, D/2). The function is
        cloned with Range(0, T) in place of the query positions; where it builds c's last axis
        as Concat(x, x) (rotate_half layout), the clone keeps x and computes only that half."""
        key = (id(c), interleaved)
        if key in self.caches:
            return self.caches[key]
        order = {id(n): i for i, n in enumerate(self.graph)}
        nodes = sorted(chain, key=lambda n: order[id(n)])
        if self.max_positions:
            table = _table(c, nodes, mk.positions, self.max_positions, interleaved)
            if table is not None:
                self.caches[key] = self._const(anchor, table)
                return self.caches[key]
        halved = set() if interleaved else _halves(nodes)
        mapping: dict[int, ir.Value] = {id(mk.positions): mk.keys}
        for node in nodes:
            out = node.outputs[0]
            if id(out) in halved and node.op_type == "Concat":
                mapping[id(out)] = mapping.get(id(node.inputs[0]), node.inputs[0])  # type: ignore[arg-type]
                continue
            inputs = []
            for x in node.inputs:
                if x is not None and id(x) in mapping:
                    inputs.append(mapping[id(x)])
                    continue
                data = f.constant(x) if id(out) in halved else None
                if data is not None and data.ndim and data.shape[-1] > 1:   # its first half
                    x = self._const(anchor, np.ascontiguousarray(data[..., :data.shape[-1] // 2]))
                inputs.append(x)
            attrs = {name: a.value for name, a in node.attributes.items()}
            mapping[id(out)] = self._add(anchor, node.op_type, inputs, attrs, dtype=out.dtype)
        full = mapping[id(c)]
        d = int(c.shape[2])  # type: ignore[index,arg-type]
        if id(c) not in halved:
            starts = self._const(anchor, np.array([0], dtype=np.int64))
            ends = self._const(anchor, np.array([d if interleaved else d // 2], dtype=np.int64))
            axes = self._const(anchor, np.array([-1], dtype=np.int64))
            steps = self._const(anchor, np.array([2 if interleaved else 1], dtype=np.int64))
            full = self._add(anchor, "Slice", [full, starts, ends, axes, steps], dtype=c.dtype)
        shape = self._const(anchor, np.array([-1, d // 2], dtype=np.int64))
        out = self._add(anchor, "Reshape", [full, shape], dtype=c.dtype,
                        shape=ir.Shape([None, d // 2]))
        self.caches[key] = out
        return out

    def _three_d(self, anchor: ir.Node, x4: ir.Value, new: list[ir.Node], heads: int
                 ) -> tuple[ir.Value, int]:
        """(B, S, H * D) of a (B, H, S, D) value: its head split's input, else Transpose +
        Reshape nodes (appended to `new`); a 3-D value of `heads` heads as it is."""
        if heads and f.rank(x4) == 3:
            return x4, heads
        split = _split(x4)
        if split is not None:
            return split
        assert x4.shape is not None
        h, d = int(x4.shape[1]), int(x4.shape[3])  # type: ignore[arg-type]
        t = f.make_node(self.namer, anchor, "Transpose", [x4], {"perm": _HEADS}, dtype=x4.dtype)
        shape = self._const(anchor, np.array([0, 0, h * d], dtype=np.int64))
        r = f.make_node(self.namer, anchor, "Reshape", [t.outputs[0], shape], dtype=x4.dtype)
        new += [t, r]
        return r.outputs[0], h

    def rewrite(self, m: _Match, rotary: bool) -> bool:
        mk = _mask(m.mask, m.seq, _dim(m.present_key, 2), m.past_key)
        if mk is None:
            return False
        anchor = self.at = m.anchor
        q, k = m.q, m.k_new
        rq, rk = (_rotary(q), _rotary(k)) if rotary else (None, None)
        do_rotary = False
        chain: list[ir.Node] | None = None
        # ORT rotates inside GQA only for head sizes that are multiples of 16 (it refuses the
        # node at run time otherwise); smaller heads keep their rotary as standard ops.
        if rq is not None and rk is not None and rq.cos is rk.cos and rq.sin is rk.sin and \
                rq.interleaved == rk.interleaved and q.dtype == rq.cos.dtype and \
                m.head_size % 16 == 0:
            chain_c = _positionwise(rq.cos, mk.positions)
            chain_s = _positionwise(rq.sin, mk.positions)
            if chain_c is not None and chain_s is not None:
                do_rotary, q, k = True, rq.x, rk.x
                chain = chain_c + [n for n in chain_s if n not in chain_c]
        new: list[ir.Node] = []
        q3, hq = self._three_d(anchor, q, new, m.heads[0])
        k3, hkv = self._three_d(anchor, k, new, m.heads[1])
        v3, hv = self._three_d(anchor, m.v_new, new, m.heads[1])
        if hv != hkv:
            return False
        seqlens, total, qlens = self._lengths(anchor, mk, m.past_key)
        bias = self._bias(anchor, mk, m.q.dtype, m.past_key)  # type: ignore[arg-type]
        cos = sin = None
        attrs: dict[str, object] = {"num_heads": hq, "kv_num_heads": hkv}
        d = m.head_size
        if not math.isclose(m.scale, 1 / math.sqrt(d), rel_tol=1e-6):
            attrs["scale"] = float(m.scale)
        if do_rotary:
            assert rq is not None and chain is not None
            cos = self._cache(anchor, rq.cos, chain, mk, rq.interleaved)
            sin = self._cache(anchor, rq.sin, chain, mk, rq.interleaved)
            attrs["do_rotary"] = 1
            attrs["rotary_interleaved"] = int(rq.interleaved)
        inputs: list[ir.Value | None] = [q3, k3, v3, m.past_key, m.past_value, seqlens, total,
                                         cos, sin, None, bias, None, None, None, None, None, qlens]
        gqa = ir.node("GroupQueryAttention", inputs, attributes=attrs, domain=CONTRIB_DOMAIN,
                      name=self.namer(anchor, "GroupQueryAttention"),
                      metadata_props=dict(anchor.metadata_props), num_outputs=3)
        out, pk, pv = gqa.outputs
        out.name = f"{gqa.name.lstrip('/').replace('/', '_')}_out"
        out.dtype = m.q.dtype
        new.append(gqa)
        merged = m.output if m.heads[0] else (fa.head_merge(m.output) or (None,))[0]
        if merged is None:        # back to (B, H, S, D)
            shape = self._const(anchor, np.array([0, 0, hq, d], dtype=np.int64))
            r = f.make_node(self.namer, anchor, "Reshape", [out, shape], dtype=out.dtype)
            t = f.make_node(self.namer, anchor, "Transpose", [r.outputs[0]], {"perm": _HEADS},
                            dtype=out.dtype)
            new += [r, t]
            old, result = m.output, t.outputs[0]
        else:
            old, result = merged, out
        self.graph.insert_before(anchor, new)
        for before, after in ((old, result), (m.present_key, pk), (m.present_value, pv)):
            name = before.name
            before.name = f"{name}__fused" if name else None
            after.name = name
            after.dtype = before.dtype
            after.shape = before.shape
            ir.convenience.replace_all_uses_with(before, after, replace_graph_outputs=True)
        return True


__all__ = ["FuseGroupQueryAttentionPass"]
