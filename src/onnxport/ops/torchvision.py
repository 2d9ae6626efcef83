"""torchvision's detection operators: `torchvision::nms`, `roi_align`, `roi_pool`, `deform_conv2d`.

These operators exist only once torchvision is imported (its compiled extension defines them),
so they are registered by qualified name and this module never imports torchvision: a name
that does not resolve yet is looked up when the operator appears in a graph.

Semantics checked against torchvision (tests/vision):

* nms -> NonMaxSuppression. Both suppress a box whose IoU with a kept box is strictly greater
  than the threshold and list the kept boxes by decreasing score (ties: lower index first in
  ONNX Runtime; torchvision's unstable sort leaves ties unspecified). ONNX Runtime takes
  iou_threshold in [0, 1]: a threshold above 1 suppresses nothing either way and is clamped to
  1; a negative one (torchvision then suppresses even disjoint boxes) is refused. ONNX's
  boxes are float32 only; ONNX orders each box's corners (min/max), torchvision takes
  x1 <= x2, y1 <= y2 as given, so only malformed (flipped) boxes may differ.
* onnxport::batched_nms (torchvision's batched_nms as one operator, capture/library_patches/torchvision_detection.py)
  -> both of torchvision's forms, the one it takes chosen by the number of boxes: above
  `vanilla_above` elements, NonMaxSuppression with one class per index (a row of scores, -inf
  off the class), the kept boxes sorted by decreasing score (ties in index order, where
  torchvision's unstable sort leaves them unspecified); else one NMS over boxes offset by
  class. Both are computed; Compress keeps the chosen one.
* roi_align -> RoiAlign (opset 16 form): aligned=True is `half_pixel`, aligned=False
  `output_half_pixel` (which, as torchvision, forces boxes to at least 1x1); torchvision's
  adaptive sampling (sampling_ratio <= 0, ceil(roi size / output size)) is ONNX's 0.
* roi_pool -> MaxRoiPool: the same rounding of box corners (half away from zero), 1x1 minimum
  and floor/ceil bins, empty bins 0 (tested with all-negative bins: ONNX Runtime's old FLT_MIN
  start value, onnxruntime#319, is fixed). ONNX Runtime runs it in float32 only, and rounds
  `x * spatial_scale` in float32 where torchvision multiplies in double: a corner within an
  ulp of .5 may round differently. argmax has no ONNX counterpart: a graph reading it is
  refused.
* deform_conv2d -> DeformConv (opset 19): the same offset layout ((dy, dx) per offset group and
  kernel tap) and mask layout; torchvision's `use_mask=False` drops the mask input.

ps_roi_align and ps_roi_pool have no translation (reported as unsupported operators).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast
from onnxport.translate import GraphBuilder, Tensor, register

_I64 = ir.DataType.INT64
_F32 = ir.DataType.FLOAT
_F64 = ir.DataType.DOUBLE

NMS = "torchvision::nms.default"
ROI_ALIGN = "torchvision::roi_align.default"
ROI_POOL = "torchvision::roi_pool.default"
DEFORM_CONV2D = "torchvision::deform_conv2d.default"
# torchvision's batched_nms as one operator (onnxport/capture/library_patches/torchvision_detection.py defines it).
BATCHED_NMS = "onnxport::batched_nms.default"

# The float types ONNX Runtime's CPU kernels take, per operator.
_RUNTIME_FLOATS = {"RoiAlign": (_F32, _F64), "MaxRoiPool": (_F32,), "DeformConv": (_F32, _F64)}


def _static_int(value: Any, what: str) -> int:
    if isinstance(value, ir.Value):
        raise TranslationError(f"{what} must be a constant integer (it becomes an ONNX attribute)")
    return int(value)


def _compute(x: Tensor, op: str) -> ir.DataType:
    """The dtype `op` runs in: `x`'s own if the runtime has a kernel for it, else float32."""
    return x.dtype if x.dtype in _RUNTIME_FLOATS[op] else _F32


def _split_rois(g: GraphBuilder, rois: Tensor) -> tuple[Tensor, Tensor]:
    """torchvision's rois [K, 5] (batch index, x1, y1, x2, y2) as ONNX's batch_indices [K]
    (int64, truncated like torchvision's int conversion) and boxes [K, 4]."""
    batch = g.op("Gather", rois, g.const(0, _I64), axis=1)
    boxes = g.op("Slice", rois, g.const([1], _I64), g.const([5], _I64), g.const([1], _I64))
    return cast(g, batch, _I64), boxes


def _iou_threshold(iou_threshold: float, op: str) -> float:
    threshold = float(iou_threshold)
    if threshold < 0:
        raise TranslationError(
            f"{op} with iou_threshold {threshold} < 0: ONNX NonMaxSuppression takes [0, 1]")
    # IoU never exceeds 1, so any threshold >= 1 suppresses nothing, as 1 does.
    return min(threshold, 1.0)


def _nms(g: GraphBuilder, dets: Tensor, class_scores: Tensor, threshold: float,
         score_threshold: float | None = None) -> Tensor:
    """The indices NonMaxSuppression keeps of `dets` [N, 4] for `class_scores` [C, N]: class
    by class, each in decreasing score order."""
    boxes = g.op("Unsqueeze", cast(g, dets, _F32), g.const([0], _I64))            # [1, N, 4]
    batched = g.op("Unsqueeze", cast(g, class_scores, _F32), g.const([0], _I64))  # [1, C, N]
    # Every box may be kept: at most N per class.
    count = g.op("Squeeze", g.op("Shape", dets, start=0, end=1), g.const([0], _I64))
    inputs = [boxes, batched, count, g.const(np.asarray(threshold, dtype=np.float32), _F32)]
    if score_threshold is not None:
        inputs.append(g.const(np.asarray(score_threshold, dtype=np.float32), _F32))
    selected = g.op("NonMaxSuppression", *inputs, center_point_box=0)
    selected.dtype = _I64  # the builder's dtype rules default to the first input's
    # selected_indices rows are [batch, class, box].
    kept = g.op("Gather", selected, g.const(2, _I64), axis=1)
    # 1-D, of a data-dependent length (the FX flavour's metadata says so too; a TorchScript
    # graph's, from torchvision's meta kernel, cannot).
    kept.shape = ir.Shape([None])
    return kept


@register(NMS)
def torchvision_nms(g: GraphBuilder, dets: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"""
    threshold = _iou_threshold(iou_threshold, "nms")
    return _nms(g, dets, g.op("Unsqueeze", scores, g.const([0], _I64)), threshold)


def _sorted(g: GraphBuilder, x: Tensor, *, descending: bool) -> tuple[Tensor, Tensor]:
    """(values, indices) of the 1-D `x` sorted; ties in index order (ONNX Runtime's TopK)."""
    k = g.op("Shape", x, start=0, end=1)
    values, indices = g.op("TopK", x, k, axis=0, largest=int(descending), sorted=1, outputs=2)
    indices.dtype = _I64
    return values, indices


@register(BATCHED_NMS)
def onnxport_batched_nms(g: GraphBuilder, boxes: Tensor, scores: Tensor, idxs: Tensor,
                         iou_threshold: float, vanilla_above: int) -> Tensor:
    """batched_nms(Tensor boxes, Tensor scores, Tensor idxs, float iou_threshold, int vanilla_above) -> Tensor"""
    threshold = _iou_threshold(iou_threshold, "batched_nms")
    boxes32, scores32 = cast(g, boxes, _F32), cast(g, scores, _F32)
    # torchvision's coordinate trick: one NMS over boxes offset by class.
    flat = g.op("Concat", g.op("Reshape", boxes32, g.const([-1], _I64)),
                g.const(np.zeros(1, np.float32), _F32), axis=0)
    offset = g.op("Add", g.op("ReduceMax", flat, keepdims=0), g.const(1.0, _F32))
    offsets = g.op("Mul", cast(g, idxs, _F32), offset)
    shifted = g.op("Add", boxes32, g.op("Unsqueeze", offsets, g.const([1], _I64)))
    trick = _nms(g, shifted, g.op("Unsqueeze", scores32, g.const([0], _I64)), threshold)
    # Its per-class form: one NMS class (a row of scores, -inf off the class) per index, the
    # boxes kept listed by decreasing score, ties in index order.
    top = g.op("ReduceMax", g.op("Concat", cast(g, idxs, _I64), g.const([-1], _I64), axis=0),
               keepdims=0)
    classes = g.op("Range", g.const(0, _I64), g.op("Add", top, g.const(1, _I64)),
                   g.const(1, _I64))
    member = g.op("Equal", g.op("Unsqueeze", classes, g.const([1], _I64)),
                  g.op("Unsqueeze", cast(g, idxs, _I64), g.const([0], _I64)))
    class_scores = g.op("Where", member, g.op("Unsqueeze", scores32, g.const([0], _I64)),
                        g.const(np.float32(-np.inf), _F32))
    kept = _nms(g, boxes32, class_scores, threshold,
                score_threshold=float(np.finfo(np.float32).min))
    kept, _ = _sorted(g, kept, descending=False)
    _, order = _sorted(g, g.op("Gather", scores32, kept, axis=0), descending=True)
    vanilla = g.op("Gather", kept, order, axis=0)
    # torchvision takes the per-class form when boxes.numel() > vanilla_above.
    numel = g.op("Mul", g.op("Shape", boxes, start=0, end=1), g.const([4], _I64))
    use_vanilla = g.op("Greater", numel, g.const([int(vanilla_above)], _I64))  # [1]

    def only_if(x: Tensor, condition: Tensor) -> Tensor:
        return g.op("Compress", x, g.op("Expand", condition, g.op("Shape", x)), axis=0)

    return g.op("Concat", only_if(vanilla, use_vanilla),
                only_if(trick, g.op("Not", use_vanilla)), axis=0)


@register(ROI_ALIGN)
def torchvision_roi_align(g: GraphBuilder, input: Tensor, rois: Tensor, spatial_scale: float,
                          pooled_height: int, pooled_width: int, sampling_ratio: int,
                          aligned: bool) -> Tensor:
    """roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor"""
    height = _static_int(pooled_height, "roi_align's pooled_height")
    width = _static_int(pooled_width, "roi_align's pooled_width")
    dtype = input.dtype
    assert dtype is not None
    compute = _compute(input, "RoiAlign")
    batch, boxes = _split_rois(g, cast(g, rois, compute))
    y = g.op("RoiAlign", cast(g, input, compute), boxes, batch,
             coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel",
             mode="avg", output_height=height, output_width=width,
             # torchvision: <= 0 is adaptive, ceil(roi size / output size); ONNX: 0.
             sampling_ratio=max(int(sampling_ratio), 0), spatial_scale=float(spatial_scale))
    return cast(g, y, dtype)


@register(ROI_POOL)
def torchvision_roi_pool(g: GraphBuilder, input: Tensor, rois: Tensor, spatial_scale: float,
                         pooled_height: int, pooled_width: int) -> tuple[Tensor, Tensor]:
    """roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) -> (Tensor, Tensor)"""
    if g.out_is_read(1):
        raise TranslationError(
            "roi_pool's argmax output (the flat index of each bin's maximum) is read: ONNX "
            "MaxRoiPool returns only the pooled values; use torchvision.ops.roi_pool, which "
            "drops argmax")
    if float(spatial_scale) <= 0:
        raise TranslationError(f"roi_pool with spatial_scale {spatial_scale}: MaxRoiPool "
                               "(ONNX Runtime) requires a positive scale")
    shape = [_static_int(pooled_height, "roi_pool's pooled_height"),
             _static_int(pooled_width, "roi_pool's pooled_width")]
    dtype = input.dtype
    assert dtype is not None
    compute = _compute(input, "MaxRoiPool")
    pooled = g.op("MaxRoiPool", cast(g, input, compute), cast(g, rois, compute),
                  pooled_shape=shape, spatial_scale=float(spatial_scale))
    out = cast(g, pooled, dtype)
    # argmax is not read: any int32 tensor of its shape will do.
    return out, g.op("Cast", out, to=ir.DataType.INT32)


@register(DEFORM_CONV2D, since_opset=19)
def torchvision_deform_conv2d(g: GraphBuilder, input: Tensor, weight: Tensor, offset: Tensor,
                              mask: Tensor, bias: Tensor, stride_h: int, stride_w: int,
                              pad_h: int, pad_w: int, dilation_h: int, dilation_w: int,
                              groups: int, offset_groups: int, use_mask: bool) -> Tensor:
    """deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor"""
    ints = {name: _static_int(v, f"deform_conv2d's {name}") for name, v in (
        ("stride_h", stride_h), ("stride_w", stride_w), ("pad_h", pad_h), ("pad_w", pad_w),
        ("dilation_h", dilation_h), ("dilation_w", dilation_w), ("groups", groups),
        ("offset_groups", offset_groups))}
    dtype = input.dtype
    assert dtype is not None
    compute = _compute(input, "DeformConv")
    kernel = None
    if weight.shape is not None and all(isinstance(d, int) for d in weight.shape[2:]):
        kernel = [int(d) for d in weight.shape[2:]]
    inputs = [cast(g, v, compute) for v in (input, weight, offset, bias)]
    if use_mask:
        inputs.append(cast(g, mask, compute))
    y = g.op("DeformConv", *inputs,
             strides=[ints["stride_h"], ints["stride_w"]],
             pads=[ints["pad_h"], ints["pad_w"], ints["pad_h"], ints["pad_w"]],
             dilations=[ints["dilation_h"], ints["dilation_w"]],
             group=ints["groups"], offset_group=ints["offset_groups"], kernel_shape=kernel)
    return cast(g, y, dtype)
