"""Padding: constant_pad_nd, pad (constant, reflect, replicate, circular), _pad_circular and
reflection_pad/replication_pad in 1, 2 and 3 dims; negative pads crop, as in torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, int_list, rank
from onnxport.ops._layers import _HALF, _per_dimensionality
from onnxport.translate import GraphBuilder, Tensor, aten, register

_INT_MAX = 2**62


def _pad_pairs(pad: Sequence[Any], r: int) -> tuple[list[Any], list[Any]]:
    """torch's (last-dim-first) pad pairs as per-dim ONNX begins and ends."""
    if len(pad) % 2 != 0 or len(pad) // 2 > r:
        raise TranslationError(f"pad of length {len(pad)} for a rank-{r} tensor")
    begins: list[Any] = [0] * r
    ends: list[Any] = [0] * r
    for i in range(len(pad) // 2):
        begins[r - 1 - i] = pad[2 * i]
        ends[r - 1 - i] = pad[2 * i + 1]
    return begins, ends


def _crop_negative(g: GraphBuilder, x: Tensor, begins: list[Any], ends: list[Any]) -> tuple[Tensor, list[Any], list[Any]]:
    """Slice away negative (static) pads, which torch allows; return the non-negative rest."""
    axes, starts, stops = [], [], []
    for axis, (b, e) in enumerate(zip(begins, ends)):
        if isinstance(b, int) and b < 0 or isinstance(e, int) and e < 0:
            axes.append(axis)
            starts.append(-b if isinstance(b, int) and b < 0 else 0)
            stops.append(e if isinstance(e, int) and e < 0 else _INT_MAX)
    if axes:
        x = g.op("Slice", x, g.const(starts, ir.DataType.INT64), g.const(stops, ir.DataType.INT64),
                 g.const(axes, ir.DataType.INT64))
        begins = [max(b, 0) if isinstance(b, int) else b for b in begins]
        ends = [max(e, 0) if isinstance(e, int) else e for e in ends]
    return x, begins, ends


def _replicate_negative(g: GraphBuilder, x: Tensor, begins: list[Any],
                        ends: list[Any]) -> tuple[Tensor, list[Any], list[Any]]:
    """Replicate-pad each axis with a negative pad as a Gather: out[i] = x[clamp(i - begin)].

    Cropping first would be wrong there: torch clamps into the whole input, not the crop.
    """
    begins, ends = list(begins), list(ends)
    for axis, (b, e) in enumerate(zip(begins, ends)):
        if not (isinstance(b, int) and isinstance(e, int) and (b < 0 or e < 0)):
            continue
        size = x.shape[axis] if x.shape is not None else None
        if not isinstance(size, int):
            raise TranslationError("replicate padding with a negative pad on a dynamic dimension")
        index = np.clip(np.arange(size + b + e) - b, 0, size - 1)
        x_shape = x.shape
        x = g.op("Gather", x, g.const(index, ir.DataType.INT64), axis=axis)
        x.shape = ir.Shape([len(index) if i == axis else d for i, d in enumerate(x_shape)])
        begins[axis], ends[axis] = 0, 0
    return x, begins, ends


def _pad(g: GraphBuilder, self: Tensor, pad: Sequence[Any], mode: str, value: float | None) -> Tensor:
    r = rank(self)
    begins, ends = _pad_pairs(pad, r)
    x = self
    if mode == "replicate":
        x, begins, ends = _replicate_negative(g, x, begins, ends)
    x, begins, ends = _crop_negative(g, x, begins, ends)
    if all(isinstance(v, int) and v == 0 for v in begins + ends):
        return x if x is not self else g.op("Identity", x)
    dtype = self.dtype
    assert dtype is not None
    if mode == "circular":
        return _pad_circular(g, x, begins, ends)
    pads = int_list(g, [*begins, *ends])
    if mode == "constant":
        fill = g.const(0 if value is None else value, dtype)
        return g.op("Pad", x, pads, fill, mode="constant")
    onnx_mode = {"reflect": "reflect", "replicate": "edge"}.get(mode)
    if onnx_mode is None:
        raise TranslationError(f"unknown padding mode {mode!r}")
    # ORT's reflect/edge Pad kernels are float32/float64/int32/int64/uint8/int8/bool only
    compute = ir.DataType.FLOAT if dtype in _HALF else dtype
    return cast(g, g.op("Pad", cast(g, x, compute), pads, mode=onnx_mode), dtype)


def _pad_circular(g: GraphBuilder, x: Tensor, begins: list[Any], ends: list[Any]) -> Tensor:
    """Wrap-around padding as Slice + Concat per axis (ONNX 'wrap' needs opset 19)."""
    i64 = ir.DataType.INT64
    for axis, (b, e) in enumerate(zip(begins, ends)):
        if isinstance(b, ir.Value) or isinstance(e, ir.Value):
            raise TranslationError("circular padding by a dynamic (SymInt) amount")
        if b == 0 and e == 0:
            continue
        parts = []
        if b > 0:
            parts.append(g.op("Slice", x, g.const([-b], i64), g.const([_INT_MAX], i64), g.const([axis], i64)))
        parts.append(x)
        if e > 0:
            parts.append(g.op("Slice", x, g.const([0], i64), g.const([e], i64), g.const([axis], i64)))
        x = g.op("Concat", *parts, axis=axis)
    return x


@register(aten.constant_pad_nd.default)
def aten_constant_pad_nd(g: GraphBuilder, self: Tensor, pad: Sequence[int], value: float = 0) -> Tensor:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    return _pad(g, self, pad, "constant", value)


@register(aten.pad.default)
def aten_pad(g: GraphBuilder, self: Tensor, pad: Sequence[int], mode: str = "constant",
             value: float | None = None) -> Tensor:
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    return _pad(g, self, pad, mode, value)


@register(aten._pad_circular.default)
def aten__pad_circular(g: GraphBuilder, self: Tensor, pad: Sequence[int]) -> Tensor:
    """_pad_circular(Tensor self, SymInt[] pad) -> Tensor"""
    return _pad(g, self, pad, "circular", None)


def _make_pad(mode: str) -> Any:
    def aten_pad_mode(g: GraphBuilder, self: Tensor, padding: Sequence[int]) -> Tensor:
        return _pad(g, self, padding, mode, None)

    aten_pad_mode.__name__ = f"aten_{mode}_pad"
    return aten_pad_mode


for _mode, _prefix in (("reflect", "reflection_pad"), ("replicate", "replication_pad")):
    _per_dimensionality([getattr(aten, f"{_prefix}{_n}d").default for _n in (1, 2, 3)],
                        lambda n, m=_mode: _make_pad(m))
