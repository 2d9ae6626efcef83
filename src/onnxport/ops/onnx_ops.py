"""The operators of `torch.onnx.ops`: ONNX nodes written directly in a PyTorch model.

torch.export captures `torch.onnx.ops.attention` as `onnx::Attention.opset23`,
`rotary_embedding` as `onnx::RotaryEmbedding.opset23`, and `symbolic` / `symbolic_multi_out`
as `onnx_symbolic::_symbolic` / `_symbolic_multi_out`. These operators exist only once the
model's code has imported `torch.onnx.ops`, so they are registered by qualified name.

* At opset >= 23 Attention and RotaryEmbedding become the one ONNX node they stand for, with
  the same inputs, attributes and outputs. Below opset 23 they are decomposed into standard
  ops following the ONNX-23 specification (softcap before the mask, causal mask aligned to
  the end of `past_key`, a fully masked row gives zeros).
* `symbolic` becomes a node of the given domain, op type, attributes and output count; the
  output dtypes and shapes come from the FX metadata.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast
from onnxport.ops.attention import _safe_softmax
from onnxport.translate import GraphBuilder, Tensor, register

_I64 = ir.DataType.INT64
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_INT_MAX = 2**63 - 1

ATTENTION = "onnx::Attention.opset23"
ROTARY_EMBEDDING = "onnx::RotaryEmbedding.opset23"
SYMBOLIC = "onnx_symbolic::_symbolic.default"
SYMBOLIC_MULTI_OUT = "onnx_symbolic::_symbolic_multi_out.default"


def _rank(x: Tensor, what: str) -> int:
    if x.shape is None:
        raise TranslationError(f"{what} of unknown rank")
    return len(x.shape)


def _static(x: Tensor, axis: int) -> int | None:
    if x.shape is None:
        return None
    d = x.shape[axis]
    return int(d) if isinstance(d, int) else None


def _outputs_read(g: GraphBuilder, total: int) -> int:
    """How many leading outputs the node must produce (trailing unread ones are omitted)."""
    n = total
    while n > 1 and not g.out_is_read(n - 1):
        n -= 1
    return n


def _as_onnx_node(op_type: str, decomposition: Callable[..., Any], check: Callable[..., Any],
                  outputs: int = 1) -> Callable[..., Any]:
    """The opset-23 translation of a torch.onnx.ops operator: the ONNX node `op_type` it stands
    for, with the inputs and attributes of `decomposition` (its translation below opset 23,
    whose signature it shares). Attributes at their default are left out, bools become ints,
    trailing unread outputs are omitted."""
    signature = inspect.signature(decomposition)
    defaults = {p.name: p.default for p in signature.parameters.values()
                if p.kind is p.KEYWORD_ONLY}

    def translate(g: GraphBuilder, *inputs: Tensor | None, **attributes: Any) -> Any:
        check(*inputs, **attributes)
        attrs = {k: float(v) if isinstance(v, float) else int(v)
                 for k, v in attributes.items() if v is not None and v != defaults[k]}
        n = _outputs_read(g, outputs)
        out = g.op(op_type, *inputs, outputs=n, **attrs)
        if outputs == 1:
            return out
        return (*((out,) if n == 1 else out), *([None] * (outputs - n)))

    translate.__signature__ = signature  # type: ignore[attr-defined]
    translate.__name__ = f"{decomposition.__name__}_23"
    translate.__doc__ = decomposition.__doc__
    return translate


# -- Attention ---------------------------------------------------------------------------------

def _check_attention(Q: Tensor, K: Tensor, V: Tensor, attn_mask: Tensor | None = None,
                     past_key: Tensor | None = None, past_value: Tensor | None = None, *,
                     kv_num_heads: int = 0, q_num_heads: int = 0, **_attributes: Any) -> None:
    r = _rank(Q, "onnx.Attention with a query")
    if r not in (3, 4) or _rank(K, "onnx.Attention with a key") != r \
            or _rank(V, "onnx.Attention with a value") != r:
        raise TranslationError(f"onnx.Attention takes 3-D or 4-D Q, K, V of one rank, got "
                               f"ranks {r}, {len(K.shape)}, {len(V.shape)}")  # type: ignore[arg-type]
    if r == 3 and (not q_num_heads or not kv_num_heads):
        raise TranslationError("onnx.Attention with 3-D inputs needs q_num_heads and kv_num_heads")
    if (past_key is None) != (past_value is None):
        raise TranslationError("onnx.Attention takes past_key and past_value together or neither")


def _split_heads(g: GraphBuilder, x: Tensor, heads: int) -> Tensor:
    """(B, S, heads * E) -> (B, heads, S, E)."""
    y = g.op("Reshape", x, g.const([0, 0, int(heads), -1], _I64))
    return g.op("Transpose", y, perm=[0, 2, 1, 3])


def _repeat_kv(g: GraphBuilder, x: Tensor, groups: int) -> Tensor:
    """repeat_interleave(x, groups, dim=1) for a (B, H, S, E) tensor; B, S, E may be dynamic."""
    if groups == 1:
        return x
    y = g.op("Unsqueeze", x, g.const([2], _I64))
    y = g.op("Expand", y, g.const([1, 1, groups, 1, 1], _I64))
    shape = g.op("Shape", y)
    head = g.op("Mul", g.op("Slice", shape, g.const([1], _I64), g.const([2], _I64)),
                g.const([groups], _I64))
    new_shape = g.op("Concat", g.op("Slice", shape, g.const([0], _I64), g.const([1], _I64)), head,
                     g.op("Slice", shape, g.const([3], _I64), g.const([5], _I64)), axis=0)
    return g.op("Reshape", y, new_shape)


def _length(g: GraphBuilder, x: Tensor, axis: int) -> Tensor:
    """x.shape[axis] as an int64 scalar."""
    return g.op("Squeeze", g.op("Slice", g.op("Shape", x), g.const([axis], _I64),
                                g.const([axis + 1], _I64)), g.const([0], _I64))


@register(ATTENTION)
def onnx_attention(g: GraphBuilder, Q: Tensor, K: Tensor, V: Tensor,
                   attn_mask: Tensor | None = None, past_key: Tensor | None = None,
                   past_value: Tensor | None = None, *, is_causal: bool = False,
                   kv_num_heads: int = 0, q_num_heads: int = 0, qk_matmul_output_mode: int = 0,
                   scale: float | None = None, softcap: float = 0.0,
                   softmax_precision: int | None = None) -> tuple[Tensor | None, ...]:
    """Attention.opset23(Tensor Q, Tensor K, Tensor V, Tensor? attn_mask=None, Tensor? past_key=None, Tensor? past_value=None, *, bool is_causal=False, SymInt kv_num_heads=0, SymInt q_num_heads=0, SymInt qk_matmul_output_mode=0, float? scale=None, float softcap=0., SymInt? softmax_precision=None) -> (Tensor, Tensor, Tensor, Tensor)"""
    # Below opset 23: the ONNX-23 definition written out in standard ops.
    _check_attention(Q, K, V, attn_mask, past_key, past_value, kv_num_heads=kv_num_heads,
                     q_num_heads=q_num_heads)
    mode = int(qk_matmul_output_mode)
    if mode not in (0, 1, 2, 3):
        raise TranslationError(f"onnx.Attention with qk_matmul_output_mode={mode}: expected 0-3")
    three_d = len(Q.shape) == 3  # type: ignore[arg-type]
    out = Q.dtype
    if out is None:
        raise TranslationError("onnx.Attention on a query of unknown dtype")
    compute = ir.DataType.FLOAT if out in _HALF else out
    if three_d:
        q, k, v = (_split_heads(g, Q, q_num_heads), _split_heads(g, K, kv_num_heads),
                   _split_heads(g, V, kv_num_heads))
        hq, hkv = int(q_num_heads), int(kv_num_heads)
        hidden = _static(Q, 2)
        head_size = None if hidden is None else hidden // hq
    else:
        q, k, v = Q, K, V
        hq, hkv = _static(Q, 1), _static(K, 1)  # type: ignore[assignment]
        head_size = _static(Q, 3)
    if past_key is not None:
        k = g.op("Concat", past_key, k, axis=2)
        v = g.op("Concat", past_value, v, axis=2)
    present_key, present_value = k, v
    if hq is None or hkv is None:
        if not (K.shape is not None and Q.shape is not None and Q.shape[1] == K.shape[1]):
            raise TranslationError("onnx.Attention below opset 23 needs static head counts "
                                   "(or opset 23)")
        hq = hkv = 1
    if hq % hkv != 0:
        raise TranslationError(f"onnx.Attention with {hq} query heads and {hkv} key/value heads: "
                               "q_num_heads must be a multiple of kv_num_heads")
    groups = hq // hkv

    # scores: (Q * sqrt(scale)) @ (K * sqrt(scale))^T
    q = cast(g, q, compute)
    k = cast(g, _repeat_kv(g, k, groups), compute)
    if scale is not None:
        root: Any = g.const(math.sqrt(float(scale)), compute)
    elif head_size is not None:
        root = g.const(math.sqrt(1.0 / math.sqrt(head_size)), compute)
    else:  # dynamic head size: (1 / sqrt(E)) ** 0.5 computed in the graph
        e = cast(g, _length(g, q, 3), compute)
        root = g.op("Sqrt", g.op("Reciprocal", g.op("Sqrt", e)))
    scores = g.op("MatMul", g.op("Mul", q, root),
                  g.op("Transpose", g.op("Mul", k, root), perm=[0, 1, 3, 2]))
    qk_out = scores if mode == 0 else None
    if softcap:
        c = g.const(float(softcap), compute)
        scores = g.op("Mul", g.op("Tanh", g.op("Div", scores, c)), c)
    if mode == 1:
        qk_out = scores
    keep = None
    if is_causal:
        length = _length(g, q, 2)
        total = _length(g, present_key, 2)
        rows = g.op("Range", g.const(0, _I64), length, g.const(1, _I64))
        if past_key is not None:
            rows = g.op("Add", rows, _length(g, past_key, 2))
        cols = g.op("Range", g.const(0, _I64), total, g.const(1, _I64))
        keep = g.op("LessOrEqual", cols, g.op("Unsqueeze", rows, g.const([1], _I64)))
    if attn_mask is not None and attn_mask.dtype == ir.DataType.BOOL:
        keep = attn_mask if keep is None else g.op("And", keep, attn_mask)
    if keep is not None:
        scores = g.op("Where", keep, scores, g.const(-math.inf, compute))
    if attn_mask is not None and attn_mask.dtype != ir.DataType.BOOL:
        scores = g.op("Add", scores, cast(g, attn_mask, compute))
    if mode == 2:
        qk_out = scores
    softmax_dtype = compute if softmax_precision is None else ir.DataType(int(softmax_precision))
    probs = cast(g, _safe_softmax(g, cast(g, scores, softmax_dtype)), compute)
    if mode == 3:
        qk_out = probs
    y = g.op("MatMul", probs, cast(g, _repeat_kv(g, v, groups), compute))
    if three_d:
        y = g.op("Reshape", g.op("Transpose", y, perm=[0, 2, 1, 3]), g.const([0, 0, -1], _I64))
    return (cast(g, y, g.out_dtype(0)), present_key, present_value,
            cast(g, qk_out, g.out_dtype(3)) if g.out_is_read(3) else None)


register(ATTENTION, since_opset=23)(
    _as_onnx_node("Attention", onnx_attention, _check_attention, outputs=4))


# -- RotaryEmbedding ---------------------------------------------------------------------------

def _check_rotary(x: Tensor, *_inputs: Any, num_heads: int = 0, **_attributes: Any) -> int:
    r = _rank(x, "onnx.RotaryEmbedding with an input")
    if r not in (3, 4):
        raise TranslationError(f"onnx.RotaryEmbedding takes a 3-D or 4-D input, got rank {r}")
    if r == 3 and not num_heads:
        raise TranslationError("onnx.RotaryEmbedding with a 3-D input needs num_heads")
    return r


@register(ROTARY_EMBEDDING)
def onnx_rotary_embedding(g: GraphBuilder, x: Tensor, cos_cache: Tensor, sin_cache: Tensor,
                          position_ids: Tensor | None = None, *, interleaved: bool = False,
                          num_heads: int = 0, rotary_embedding_dim: int = 0) -> Tensor:
    """RotaryEmbedding.opset23(Tensor x, Tensor cos_cache, Tensor sin_cache, Tensor? position_ids=None, *, bool interleaved=False, SymInt num_heads=0, SymInt rotary_embedding_dim=0) -> Tensor"""
    # Below opset 23: the ONNX-23 definition written out in standard ops.
    r = _check_rotary(x, num_heads=num_heads)
    # (B, S, H, E)
    if r == 4:
        y = g.op("Transpose", x, perm=[0, 2, 1, 3])
    else:
        y = g.op("Reshape", x, g.const([0, 0, int(num_heads), -1], _I64))
    cos, sin = cos_cache, sin_cache
    if position_ids is not None:
        cos = g.op("Gather", cos, position_ids, axis=0)
        sin = g.op("Gather", sin, position_ids, axis=0)
    cos = g.op("Unsqueeze", cos, g.const([2], _I64))
    sin = g.op("Unsqueeze", sin, g.const([2], _I64))
    dim = int(rotary_embedding_dim)
    rest = None
    if dim:
        rest = g.op("Slice", y, g.const([dim], _I64), g.const([_INT_MAX], _I64), g.const([3], _I64))
        y = g.op("Slice", y, g.const([0], _I64), g.const([dim], _I64), g.const([3], _I64))
    if interleaved:
        two = g.const([2], _I64)
        axis = g.const([3], _I64)
        x1 = g.op("Slice", y, g.const([0], _I64), g.const([_INT_MAX], _I64), axis, two)
        x2 = g.op("Slice", y, g.const([1], _I64), g.const([_INT_MAX], _I64), axis, two)
    else:
        x1, x2 = g.op("Split", y, axis=3, num_outputs=2, outputs=2)
    real = g.op("Sub", g.op("Mul", cos, x1), g.op("Mul", sin, x2))
    imag = g.op("Add", g.op("Mul", sin, x1), g.op("Mul", cos, x2))
    if interleaved:
        last = g.const([-1], _I64)
        pairs = g.op("Concat", g.op("Unsqueeze", real, last), g.op("Unsqueeze", imag, last), axis=-1)
        y = g.op("Reshape", pairs, g.const([0, 0, 0, -1], _I64))
    else:
        y = g.op("Concat", real, imag, axis=-1)
    if rest is not None:
        y = g.op("Concat", y, rest, axis=-1)
    if r == 4:
        return g.op("Transpose", y, perm=[0, 2, 1, 3])  # type: ignore[no-any-return]
    return g.op("Reshape", y, g.const([0, 0, -1], _I64))  # type: ignore[no-any-return]


register(ROTARY_EMBEDDING, since_opset=23)(
    _as_onnx_node("RotaryEmbedding", onnx_rotary_embedding, _check_rotary))


# -- symbolic ----------------------------------------------------------------------------------

def _decode_attrs(keys: Sequence[str], types: Sequence[str], pos: Sequence[Sequence[int]],
                  ints: Sequence[int], floats: Sequence[float], strs: Sequence[str]) -> list[ir.Attr]:
    """The attributes torch.onnx.ops.symbolic encoded as flat lists (its EncodedAttrs)."""
    attrs = []
    for key, kind, (start, end) in zip(keys, types, pos):
        if kind == "i":
            attrs.append(ir.AttrInt64(key, int(ints[start])))
        elif kind == "f":
            attrs.append(ir.AttrFloat32(key, float(floats[start])))
        elif kind == "s":
            attrs.append(ir.AttrString(key, str(strs[start])))
        elif kind == "is":
            attrs.append(ir.AttrInt64s(key, [int(v) for v in ints[start:end]]))
        elif kind == "fs":
            attrs.append(ir.AttrFloat32s(key, [float(v) for v in floats[start:end]]))
        elif kind == "ss":
            attrs.append(ir.AttrStrings(key, [str(v) for v in strs[start:end]]))
        else:
            raise TranslationError(f"torch.onnx.ops.symbolic attribute {key!r} of unknown type "
                                   f"{kind!r}")
    return attrs


def _symbolic_node(g: GraphBuilder, inputs: Sequence[Tensor | None], op_type: str,
                   dtypes: Sequence[int], attrs: list[ir.Attr], metadata: dict[str, str],
                   domain: str, version: int | None) -> tuple[Tensor, ...]:
    # The node is built here rather than by g.op: the attribute names are the user's (no
    # legacy `_i`/`_f` suffixes) and the node must not be folded.
    values = list(inputs)
    while values and values[-1] is None:
        values.pop()
    if domain:
        g.used_domains.add(domain)
        g.custom_opsets.setdefault(domain, 1 if version is None else int(version))
    node = ir.Node(domain, op_type, values, attrs, num_outputs=len(dtypes),
                   version=None if version is None else int(version),
                   name=g.unique_name(f"{g.scope.name_prefix}/{op_type}"),
                   metadata_props={**g.scope.metadata, **metadata} or None)
    for out, dtype in zip(node.outputs, dtypes):
        out.name = g.unique_name(f"{g.scope.value_prefix}_{op_type}")
        out.dtype = ir.DataType(int(dtype))
    g.graph.append(node)
    return tuple(node.outputs)


@register(SYMBOLIC)
def onnx_symbolic(g: GraphBuilder, inputs: Sequence[Tensor | None], op_type: str, onnx_dtype: int,
                  *, shape: Sequence[Any], attr_keys: Sequence[str], attr_types: Sequence[str],
                  attr_pos: Sequence[Sequence[int]], attr_ints: Sequence[int],
                  attr_floats: Sequence[float], attr_strs: Sequence[str],
                  metadata_props_keys: Sequence[str] = (),
                  metadata_props_values: Sequence[str] = (), domain: str = "",
                  version: int | None = None) -> Tensor:
    """_symbolic(Tensor?[] inputs, str op_type, int onnx_dtype, *, SymInt[] shape, str[] attr_keys, str[] attr_types, int[][] attr_pos, int[] attr_ints, float[] attr_floats, str[] attr_strs, str[] metadata_props_keys, str[] metadata_props_values, str domain="", int? version=None) -> Tensor"""
    attrs = _decode_attrs(attr_keys, attr_types, attr_pos, attr_ints, attr_floats, attr_strs)
    metadata = dict(zip(metadata_props_keys, metadata_props_values))
    return _symbolic_node(g, inputs, op_type, [onnx_dtype], attrs, metadata, domain, version)[0]


@register(SYMBOLIC_MULTI_OUT)
def onnx_symbolic_multi_out(g: GraphBuilder, inputs: Sequence[Tensor | None], op_type: str,
                            onnx_dtypes: Sequence[int], *, shapes: Sequence[Sequence[Any]],
                            attr_keys: Sequence[str], attr_types: Sequence[str],
                            attr_pos: Sequence[Sequence[int]], attr_ints: Sequence[int],
                            attr_floats: Sequence[float], attr_strs: Sequence[str],
                            metadata_props_keys: Sequence[str] = (),
                            metadata_props_values: Sequence[str] = (), domain: str = "",
                            version: int | None = None) -> list[Tensor]:
    """_symbolic_multi_out(Tensor?[] inputs, str op_type, int[] onnx_dtypes, *, SymInt[][] shapes, str[] attr_keys, str[] attr_types, int[][] attr_pos, int[] attr_ints, float[] attr_floats, str[] attr_strs, str[] metadata_props_keys, str[] metadata_props_values, str domain="", int? version=None) -> Tensor[]"""
    attrs = _decode_attrs(attr_keys, attr_types, attr_pos, attr_ints, attr_floats, attr_strs)
    metadata = dict(zip(metadata_props_keys, metadata_props_values))
    return list(_symbolic_node(g, inputs, op_type, onnx_dtypes, attrs, metadata, domain, version))
