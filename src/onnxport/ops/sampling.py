"""Sampling and pairwise ops: grid_sampler, embedding_bag, cdist and pdist.

Pairwise distances are computed from the broadcast difference (no `x^2 - 2xy + y^2`
expansion), which is exact up to rounding for every p.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.ops.linalg import _float_work, _p_norm
from onnxport.ops.resampling import _grid_sample_gather
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
_F32 = ir.DataType.FLOAT


# -- cdist / pdist --------------------------------------------------------------------------------
def _pairwise(g: GraphBuilder, x1: Tensor, x2: Tensor, p: float) -> Tensor:
    """[..., P, M] and [..., R, M] to the [..., P, R] matrix of p-norm distances."""
    diff = g.op("Sub", g.op("Unsqueeze", x1, g.const([-2], _I64)),
                g.op("Unsqueeze", x2, g.const([-3], _I64)))
    out_shape = g.op("Shape", diff, start=0, end=-1)
    # ONNX Runtime returns an empty input of a reduction unchanged, so one zero is appended
    # to the feature axis (it adds nothing to any p >= 0 norm) and the result is reshaped.
    r = rank(x1) + 1 if rank(x1) >= rank(x2) else rank(x2) + 1
    diff = g.op("Pad", diff, g.const([0] * r + [0] * (r - 1) + [1], _I64))
    return g.op("Reshape", _p_norm(g, diff, p, [-1], propagate_nan=False), out_shape)


@register(aten.cdist.default)
def aten_cdist(g: GraphBuilder, x1: Tensor, x2: Tensor, p: float = 2.0,
               compute_mode: int | None = None) -> Tensor:
    """cdist(Tensor x1, Tensor x2, float p=2., int? compute_mode=None) -> Tensor"""
    out_dtype = g.out_dtype()
    work = _float_work(out_dtype)
    return cast(g, _pairwise(g, cast(g, x1, work), cast(g, x2, work), float(p)), out_dtype)


@register(aten._cdist_forward.default)
def aten__cdist_forward(g: GraphBuilder, x1: Tensor, x2: Tensor, p: float,
                        compute_mode: int | None) -> Tensor:
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor"""
    return aten_cdist(g, x1, x2, p, compute_mode)


@register(aten.pdist.default, aten._pdist_forward.default)
def aten_pdist(g: GraphBuilder, self: Tensor, p: float = 2.0) -> Tensor:
    """pdist(Tensor self, float p=2.) -> Tensor"""
    n = self.shape[0] if self.shape is not None else None
    if not isinstance(n, int):
        raise TranslationError("pdist needs a static number of rows")
    out_dtype = g.out_dtype()
    work = _float_work(out_dtype)
    x = cast(g, self, work)
    full = g.op("Reshape", _pairwise(g, x, x, float(p)), g.const([-1], _I64))
    # The rows i < j of the distance matrix, in row-major order.
    rows, cols = np.triu_indices(n, k=1)
    picked = g.op("Gather", full, g.const((rows * n + cols).astype(np.int64), _I64), axis=0)
    return cast(g, picked, out_dtype)


# -- grid_sampler ---------------------------------------------------------------------------------
_MODES = {0: ("bilinear", "linear"), 1: ("nearest", "nearest"), 2: ("bicubic", "cubic")}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@register(aten.grid_sampler.default, aten.grid_sampler_2d.default)
def aten_grid_sampler(g: GraphBuilder, input: Tensor, grid: Tensor, interpolation_mode: int,
                      padding_mode: int, align_corners: bool) -> Tensor:
    """grid_sampler(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    if rank(input) == 5 and g.opset < 20:
        # GridSample takes 5-D input from opset 20 on; before, it is built from Gathers.
        return _grid_sample_gather(g, input, grid, interpolation_mode, padding_mode,
                                   align_corners)
    if rank(input) != 4 and g.opset < 20:
        raise TranslationError(f"GridSample takes 4-D input before opset 20; got rank {rank(input)}")
    if interpolation_mode == 2 and rank(input) != 4:
        raise TranslationError("bicubic grid sampling is defined for 4-D input only")
    out_dtype = g.out_dtype()
    # ONNX Runtime's GridSample kernel covers float and double.
    work = ir.DataType.DOUBLE if out_dtype == ir.DataType.DOUBLE else _F32
    mode = _MODES[interpolation_mode][1 if g.opset >= 20 else 0]
    out = g.op("GridSample", cast(g, input, work), cast(g, grid, work),
               align_corners=int(align_corners), mode=mode,
               padding_mode=_PADDING[padding_mode])
    return cast(g, out, out_dtype)


# -- embedding_bag --------------------------------------------------------------------------------
def _embedding_bag(g: GraphBuilder, weight: Tensor, indices: Tensor, offsets: Tensor, mode: int,
                   per_sample_weights: Tensor | None, include_last_offset: bool,
                   padding_idx: int | None) -> tuple[Any, ...]:
    if rank(indices) != 1:
        raise TranslationError("embedding_bag with 2-D indices reaches ATen as 1-D; got "
                               f"rank {rank(indices)}")
    out_dtype = g.out_dtype()
    work = _float_work(out_dtype)
    idx = cast(g, indices, _I64)
    rows = g.op("Gather", cast(g, weight, work), idx, axis=0)              # [K, D]
    if per_sample_weights is not None:
        rows = g.op("Mul", rows, g.op("Unsqueeze", cast(g, per_sample_weights, work),
                                      g.const([1], _I64)))
    num = g.op("Shape", idx)                                              # [K]
    off = cast(g, offsets, _I64)
    if include_last_offset:
        starts = g.op("Slice", off, g.const([0], _I64), g.const([-1], _I64))
        ends = g.op("Slice", off, g.const([1], _I64), g.const([np.iinfo(np.int64).max], _I64))
    else:
        starts = off
        ends = g.op("Concat", g.op("Slice", off, g.const([1], _I64),
                                   g.const([np.iinfo(np.int64).max], _I64)), num, axis=0)
    # member[b, k]: index k falls in bag b (and is not padding_idx, which bags skip).
    positions = g.op("Range", g.const(0, _I64), g.op("Squeeze", num, g.const([0], _I64)),
                     g.const(1, _I64))
    k = g.op("Unsqueeze", positions, g.const([0], _I64))
    member = g.op("And", g.op("LessOrEqual", g.op("Unsqueeze", starts, g.const([1], _I64)), k),
                  g.op("Less", k, g.op("Unsqueeze", ends, g.const([1], _I64))))
    if padding_idx is not None and padding_idx >= 0:
        member = g.op("And", member, g.op("Unsqueeze", g.op("Not", g.op("Equal", idx,
                      g.const(padding_idx, _I64))), g.const([0], _I64)))
    weights = cast(g, member, work)
    if mode == 2:
        # Max over each bag's rows; an empty bag gives 0.
        spread = g.op("Where", g.op("Unsqueeze", member, g.const([2], _I64)),
                      g.op("Unsqueeze", rows, g.const([0], _I64)), g.const(-np.inf, work))
        spread = g.op("Pad", spread, g.const([0, 0, 0, 0, 1, 0], _I64), g.const(-np.inf, work))
        best = g.op("ReduceMax", spread, g.const([1], _I64), keepdims=0)
        out = g.op("Where", g.op("Equal", best, g.const(-np.inf, work)), g.const(0.0, work), best)
    else:
        out = g.op("MatMul", weights, rows)
        if mode == 1:
            # The mean over the bag's (non-padding) entries; an empty bag gives 0.
            count = g.op("ReduceSum", g.op("Pad", weights, g.const([0, 0, 0, 1], _I64)),
                         g.const([1], _I64), keepdims=1)
            out = g.op("Div", out, g.op("Max", count, g.const(1.0, work)))
    # The other outputs (offset2bag, bag_size, max_indices) only feed torch's backward.
    return cast(g, out, out_dtype), None, None, None


@register(aten.embedding_bag.padding_idx)
def aten_embedding_bag_padding_idx(g: GraphBuilder, weight: Tensor, indices: Tensor,
                                   offsets: Tensor, scale_grad_by_freq: bool, mode: int,
                                   sparse: bool, per_sample_weights: Tensor | None,
                                   include_last_offset: bool,
                                   padding_idx: int | None) -> tuple[Any, ...]:
    """embedding_bag.padding_idx(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq, int mode, bool sparse, Tensor? per_sample_weights, bool include_last_offset, int? padding_idx) -> (Tensor, Tensor, Tensor, Tensor)"""
    if padding_idx is not None and padding_idx < 0:
        # This overload counts a negative padding_idx from the end (None means no padding).
        num_rows = weight.shape[0] if weight.shape is not None else None
        if not isinstance(num_rows, int):
            raise TranslationError("embedding_bag with a negative padding_idx needs a static "
                                   "number of embeddings")
        padding_idx += num_rows
    return _embedding_bag(g, weight, indices, offsets, mode, per_sample_weights,
                          include_last_offset, padding_idx)


@register(aten.embedding_bag.default)
def aten_embedding_bag(g: GraphBuilder, weight: Tensor, indices: Tensor, offsets: Tensor,
                       scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                       per_sample_weights: Tensor | None = None,
                       include_last_offset: bool = False) -> tuple[Any, ...]:
    """embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False) -> (Tensor, Tensor, Tensor, Tensor)"""
    return _embedding_bag(g, weight, indices, offsets, mode, per_sample_weights,
                          include_last_offset, None)


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def aten__embedding_bag(g: GraphBuilder, weight: Tensor, indices: Tensor, offsets: Tensor,
                        scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                        per_sample_weights: Tensor | None = None,
                        include_last_offset: bool = False,
                        padding_idx: int = -1) -> tuple[Any, ...]:
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)"""
    return _embedding_bag(g, weight, indices, offsets, mode, per_sample_weights,
                          include_last_offset, padding_idx)
