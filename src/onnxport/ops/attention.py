"""Scaled dot-product attention as a compact MatMul -> Softmax -> MatMul graph.

softmax(Q @ K^T * scale + mask) @ V, with a boolean mask (True = attend) turned into -inf,
a float mask added, is_causal as a lower-triangular (top-left aligned) boolean mask, and
enable_gqa repeating each key/value head for its group of query heads. Half-precision inputs
are computed in float32, as torch's CPU math kernel does. dropout_p > 0 becomes a Dropout node
on the attention weights (ratio dropout_p, no training_mode input), as torch.onnx emits it:
inference runtimes skip it.

At opset >= 23 a 4-D attention without dropout is the single ONNX `Attention` node, in the
inputs' dtype (bfloat16 between Casts to float32: ONNX Runtime has no bfloat16 Attention).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_I64 = ir.DataType.INT64


def _size(g: GraphBuilder, x: Tensor, i: int) -> int | Tensor:
    if x.shape is not None and isinstance(x.shape[i], int):
        return int(x.shape[i])
    return g.op("Gather", g.op("Shape", x), g.const(i, _I64), axis=0)


def _repeat_heads(g: GraphBuilder, x: Tensor, groups: int) -> Tensor:
    """repeat_interleave(x, groups, dim=-3) for a (..., H, S, E) tensor with static shape."""
    shape = x.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise TranslationError("enable_gqa with dynamic key/value shapes")
    dims = [int(d) for d in shape]
    r = len(dims)
    y = g.op("Unsqueeze", x, g.const([r - 2], _I64))
    y = g.op("Expand", y, g.const([*dims[:-2], groups, *dims[-2:]], _I64))
    return g.op("Reshape", y, g.const([*dims[:-3], dims[-3] * groups, *dims[-2:]], _I64))


def _causal_mask(g: GraphBuilder, query: Tensor, key: Tensor) -> Tensor:
    """Boolean (L, S) mask, True where column <= row (torch.tril of ones)."""
    length, source = _size(g, query, -2), _size(g, key, -2)
    rows = g.op("Range", g.const(0, _I64), cast(g, length, _I64), g.const(1, _I64))
    cols = g.op("Range", g.const(0, _I64), cast(g, source, _I64), g.const(1, _I64))
    rows = g.op("Unsqueeze", rows, g.const([1], _I64))
    return g.op("LessOrEqual", cols, rows)


def _dtypes(query: Tensor, dropout_p: float) -> tuple[ir.DataType, ir.DataType]:
    """The output dtype and the compute dtype (float32 for half types)."""
    if not 0 <= dropout_p <= 1:
        raise TranslationError(f"scaled_dot_product_attention with dropout_p={dropout_p}: "
                               "expected a probability in [0, 1]")
    out = query.dtype
    if out is None:
        raise TranslationError("scaled_dot_product_attention on a query of unknown dtype")
    return out, ir.DataType.FLOAT if out in _HALF else out


def _attention_scores(g: GraphBuilder, query: Tensor, key: Tensor, attn_mask: Tensor | None,
                      dropout_p: float, is_causal: bool, scale: float | None,
                      enable_gqa: bool) -> tuple[Tensor, ir.DataType, ir.DataType]:
    """Masked, scaled scores (before softmax), the compute dtype and the output dtype."""
    out, compute = _dtypes(query, dropout_p)
    if scale is None:
        head = query.shape[-1] if query.shape is not None else None
        if not isinstance(head, int):
            raise TranslationError("scaled_dot_product_attention with a dynamic head size and no scale")
        scale = 1.0 / math.sqrt(head)
    q = cast(g, query, compute)
    k = cast(g, key, compute)
    if enable_gqa and query.shape is not None and key.shape is not None \
            and query.shape[-3] != key.shape[-3]:
        k = _repeat_heads(g, key, int(query.shape[-3]) // int(key.shape[-3]))
        k = cast(g, k, compute)
    rk = rank(key)
    perm = [*range(rk - 2), rk - 1, rk - 2]
    scores = g.op("MatMul", g.op("Mul", q, g.const(float(scale), compute)), g.op("Transpose", k, perm=perm))
    masks = []
    if is_causal:
        masks.append(_causal_mask(g, query, key))
    if attn_mask is not None and attn_mask.dtype == ir.DataType.BOOL:
        masks.append(attn_mask)
    if masks:
        keep = masks[0] if len(masks) == 1 else g.op("And", masks[0], masks[1])
        scores = g.op("Where", keep, scores, g.const(-math.inf, compute))
    if attn_mask is not None and attn_mask.dtype != ir.DataType.BOOL:
        scores = g.op("Add", scores, cast(g, attn_mask, compute))
    return scores, compute, out


def _values(g: GraphBuilder, query: Tensor, value: Tensor, enable_gqa: bool,
            compute: ir.DataType) -> Tensor:
    v = value
    if enable_gqa and query.shape is not None and value.shape is not None \
            and query.shape[-3] != value.shape[-3]:
        v = _repeat_heads(g, value, int(query.shape[-3]) // int(value.shape[-3]))
    return cast(g, v, compute)


def _dropout(g: GraphBuilder, probs: Tensor, dropout_p: float) -> Tensor:
    """Dropout on the attention weights, as torch.onnx exports it: `Dropout(probs, ratio)`
    without a training_mode input, so that inference (the default) passes them through."""
    if not dropout_p:
        return probs
    warnings.warn(
        f"scaled_dot_product_attention with dropout_p={dropout_p} is exported as a Dropout node "
        f"(ratio {dropout_p}) on the attention weights: the exported graph is random only where "
        "the runtime runs it in training mode; in inference (ONNX Runtime's default) it computes "
        "attention without dropout", UserWarning, stacklevel=2)
    return g.op("Dropout", probs, g.const(float(dropout_p), like=probs))  # type: ignore[no-any-return]


def _safe_softmax(g: GraphBuilder, scores: Tensor) -> Tensor:
    """Softmax over the last axis; a fully masked (all -inf) row gives zeros, as torch's
    math kernel (`_safe_softmax`) does, rather than NaN."""
    probs = g.op("Softmax", scores, axis=-1)
    return g.op("Where", g.op("IsNaN", probs), g.const(0.0, like=probs), probs)


@register(aten.scaled_dot_product_attention.default)
def aten_scaled_dot_product_attention(g: GraphBuilder, query: Tensor, key: Tensor, value: Tensor,
                                      attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                      is_causal: bool = False, *, scale: float | None = None,
                                      enable_gqa: bool = False) -> Tensor:
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    scores, compute, out = _attention_scores(g, query, key, attn_mask, dropout_p, is_causal, scale,
                                             enable_gqa)
    probs = _dropout(g, _safe_softmax(g, scores), dropout_p)
    return cast(g, g.op("MatMul", probs, _values(g, query, value, enable_gqa, compute)), out)


@register(aten.scaled_dot_product_attention.default, since_opset=23)
def aten_scaled_dot_product_attention_23(g: GraphBuilder, query: Tensor, key: Tensor, value: Tensor,
                                         attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                         is_causal: bool = False, *, scale: float | None = None,
                                         enable_gqa: bool = False) -> Tensor:
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    # ONNX Attention (opset 23) takes 4-D (B, H, S, E) inputs; it has torch's boolean-mask
    # convention (True = attend), top-left causal mask (without past_key), default scale,
    # grouped heads (kv heads dividing q heads, which torch requires with enable_gqa) and a
    # zero row where every key is masked. It has no dropout.
    if rank(query) != 4 or rank(key) != 4 or rank(value) != 4 or dropout_p:
        return aten_scaled_dot_product_attention(g, query, key, value, attn_mask, dropout_p,
                                                 is_causal, scale=scale, enable_gqa=enable_gqa)
    out, compute = _dtypes(query, dropout_p)
    if out == ir.DataType.FLOAT16:
        # ONNX Runtime's CPU Attention runs float16 (not bfloat16): no Casts around the node
        compute = out
    mask = None
    if attn_mask is not None:
        mask = attn_mask if attn_mask.dtype == ir.DataType.BOOL else cast(g, attn_mask, compute)
    y = g.op("Attention", cast(g, query, compute), cast(g, key, compute), cast(g, value, compute),
             mask, is_causal=int(bool(is_causal)), scale=None if scale is None else float(scale))
    return cast(g, y, out)


@register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def aten__scaled_dot_product_flash_attention_for_cpu(
        g: GraphBuilder, query: Tensor, key: Tensor, value: Tensor, dropout_p: float = 0.0,
        is_causal: bool = False, *, attn_mask: Tensor | None = None,
        scale: float | None = None) -> tuple[Tensor, Tensor]:
    """_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)"""
    scores, compute, out = _attention_scores(g, query, key, attn_mask, dropout_p, is_causal, scale,
                                             False)
    probs = _dropout(g, _safe_softmax(g, scores), dropout_p)
    output = cast(g, g.op("MatMul", probs, _values(g, query, value, False, compute)), out)
    # logsumexp of the scores over the key axis, (B, H, L) in float32
    lse: Any = g.op("ReduceLogSumExp", scores, g.const([-1], _I64), keepdims=0) if g.opset >= 18 \
        else g.op("ReduceLogSumExp", scores, axes=[-1], keepdims=0)
    return output, cast(g, lse, g.out_dtype(1))
