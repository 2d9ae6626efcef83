"""Capture-only patches of torchvision's detection models (data-dependent box counts).

* `ops.boxes.batched_nms`: one operator, `onnxport::batched_nms` (defined here on first use,
  translated in ops/torchvision.py), that chooses as torchvision does by the number of boxes,
  a data-dependent size: its per-class loop above 1000 boxes (on CPU), else the coordinate
  trick (one NMS over boxes offset by class); the trick without its early return for no boxes
  (it gives no boxes then too) and with the offset computed from a non-empty tensor
  (max(coordinates, 0) + 1: the same offset for boxes inside the image, which is all the
  detectors pass). The trick alone (torchvision's path while tracing) keeps other boxes than
  the loop: offset coordinates lose float32 precision.
* `models.detection.transform._resize_image_and_masks`, for a symbolic image size: the
  resized size, floor(side * min(min_size / shorter, max_size / longer)) in double as
  torchvision computes it, computed as a tensor and read back as one unbacked size per side
  (in [1, max_size]), where torchvision's Python arithmetic makes every size downstream a
  nested float/floor/min expression of the input's (slow to reason about) and `min()` of two
  sizes guards on which side is longer.
* `ops.poolers._infer_scale`: each feature map's scale (the power of 2 nearest feature size /
  image size, the backbone's stride) from the example's sizes, where the unbacked image size
  has no value to compute it from.
* `models.detection.transform.GeneralizedRCNNTransform.postprocess`: torchvision's, then each
  image's number of detections, a data-dependent size, is named `num_detections` (the graph's
  dim; `num_detections_<i>` for the i-th image after the first).
* `ops.poolers._multiscale_roi_align`: the number of boxes as a size (`rois.shape[0]`, where
  `len(rois)` asks for a Python int) and each level's pooled boxes written with `index_put`.
* `models.detection.transform.GeneralizedRCNNTransform.batch_images`: the images padded with
  zeros to the batch's size (rounded up to `size_divisible`) and stacked, as torchvision
  does while tracing, where it copies each into a slice of a zero batch (an in-place write
  into a view, which only a whole-program functionalization pass can export).
* `models.detection.roi_heads.paste_masks_in_image` (also as imported by `transform`): every
  mask resized into its box at once, as a product with per-box bilinear interpolation
  matrices that are zero outside the box and the image (torchvision loops over the boxes,
  resizing each to its own data-dependent size).
* `models.detection.roi_heads.heatmaps_to_keypoints`: every box's heatmaps resized (bicubic,
  the same matrices' way) to the box, padded to the largest box (a data-dependent size) with
  -inf, so each keypoint's argmax and score are torchvision's.
* `models.detection.transform.resize_keypoints`: stacked, not written in place into a view.
* `models.detection.ssd.SSD.postprocess_detections`: each class's `topk_candidates` best
  boxes as one `topk` over the anchors for all classes, then the score threshold, where
  torchvision filters and takes the top k class by class: the same boxes in the same order
  (the top k of the boxes above the threshold are the top k boxes that are above it), with
  one data-dependent size instead of one per class (SSD's 90 classes made capture slow).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from onnxport.capture.library_patches import state


def _batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
                 iou_threshold: float) -> torch.Tensor:
    # torchvision's choice between its two forms, by a data-dependent size: one operator.
    vanilla_above = 4000 if boxes.device.type == "cpu" else 100_000
    return _batched_nms_op()(boxes, scores, idxs, float(iou_threshold), vanilla_above)


def _coordinate_trick(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
                      iou_threshold: float) -> torch.Tensor:
    flat = torch.cat([boxes.reshape(-1), boxes.new_zeros(1)])
    offsets = idxs.to(boxes) * (flat.max() + 1)
    return torch.ops.torchvision.nms(boxes + offsets[:, None], scores, iou_threshold)


def _batched_nms_reference(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
                           iou_threshold: float, vanilla_above: int) -> torch.Tensor:
    if boxes.numel() > vanilla_above:
        vanilla = sys.modules["torchvision.ops.boxes"]._batched_nms_vanilla
        return vanilla(boxes, scores, idxs, iou_threshold)
    return _coordinate_trick(boxes, scores, idxs, iou_threshold)


_BATCHED_NMS: list[Any] = []


def _batched_nms_op() -> Any:
    """`onnxport::batched_nms`, defined on first use: torchvision's batched_nms as one
    operator (ops/torchvision.py translates it; its kernel is torchvision's function)."""
    if not _BATCHED_NMS:
        op = torch.library.custom_op("onnxport::batched_nms", mutates_args=())(
            _batched_nms_reference)

        @op.register_fake
        def _(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
              iou_threshold: float, vanilla_above: int) -> torch.Tensor:
            # As torchvision's nms (min=2): guards such as `if box_sum > 0` then hold, and
            # the graph computes what the taken branch does, for any count.
            count = torch.library.get_ctx().new_dynamic_size(min=2)
            return boxes.new_empty((count,), dtype=torch.int64)

        _BATCHED_NMS.append(op)
    return _BATCHED_NMS[0]


def _multiscale_roi_align(x_filtered: list[torch.Tensor], boxes: list[torch.Tensor],
                          output_size: list[int], sampling_ratio: int,
                          scales: list[float] | None, mapper: Any) -> torch.Tensor:
    poolers = sys.modules["torchvision.ops.poolers"]
    if scales is None or mapper is None:
        raise ValueError("scales and mapper should not be None")
    rois = poolers._convert_to_roi_format(boxes)
    if len(x_filtered) == 1:
        return poolers.roi_align(x_filtered[0], rois, output_size=output_size,
                                 spatial_scale=scales[0], sampling_ratio=sampling_ratio)
    levels = mapper(boxes)
    first = x_filtered[0]
    result = first.new_zeros((rois.shape[0], first.shape[1], *output_size))
    for level, (feature, scale) in enumerate(zip(x_filtered, scales)):
        index = torch.where(levels == level)[0]
        pooled = poolers.roi_align(feature, rois[index], output_size=output_size,
                                   spatial_scale=scale, sampling_ratio=sampling_ratio)
        result = result.index_put((index,), pooled.to(result.dtype))
    return result


def _batch_images(self: Any, images: list[torch.Tensor], size_divisible: int = 32
                  ) -> torch.Tensor:
    sizes = [list(image.shape) for image in images]
    largest = [max(size[axis] for size in sizes) for axis in range(len(sizes[0]))]
    for axis in (1, 2):
        largest[axis] = -(-largest[axis] // size_divisible) * size_divisible
    return torch.stack([
        torch.nn.functional.pad(image, (0, largest[2] - image.shape[2],
                                        0, largest[1] - image.shape[1],
                                        0, largest[0] - image.shape[0]))
        for image in images])


def _resize_image_and_masks(image: torch.Tensor, self_min_size: int, self_max_size: int,
                            target: dict[str, torch.Tensor] | None = None,
                            fixed_size: tuple[int, int] | None = None
                            ) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
    height, width = image.shape[-2:]
    if (fixed_size is not None or target is not None
            or not any(isinstance(d, torch.SymInt) for d in (height, width))):
        original = state.ORIGINALS[("torchvision.models.detection.transform",
                                    "_resize_image_and_masks")]
        return original(image, self_min_size, self_max_size, target, fixed_size)
    # torchvision's size, floor(side * min(min_size / shorter, max_size / longer)) in double,
    # computed as a tensor: one unbacked size per side instead of a float expression of H, W.
    sides = torch.tensor([height, width], dtype=torch.float64, device=image.device)
    scale = torch.minimum(self_min_size / sides.min(), self_max_size / sides.max())
    new_height, new_width = (sides * scale).floor().to(torch.int64).tolist()
    hints = [_example_value(height), _example_value(width)]
    example = min(self_min_size / min(hints), self_max_size / max(hints))
    for side, hint in zip((new_height, new_width), hints):
        torch._check(side >= 1)
        torch._check(side <= self_max_size)
        state.EXAMPLE_SIZES[side.node.expr] = int(hint * example)
    resized = torch.nn.functional.interpolate(image[None], size=[new_height, new_width],
                                              mode="bilinear", align_corners=False)[0]
    return resized, target


def _example_value(size: Any) -> int:
    """The value `size` has for the example inputs (a backed size's hint, an unbacked size
    the resize made: its value for the example image)."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    shape_env = size.node.shape_env
    # (torch 2.13 deprecates size_hint, with a FutureWarning on every call)
    hint = getattr(shape_env, "guarding_hint_or_throw", None) or shape_env.size_hint
    values = {symbol: state.EXAMPLE_SIZES.get(symbol) or hint(symbol)
              for symbol in size.node.expr.free_symbols}
    return int(size.node.expr.xreplace(values))


def _infer_scale(feature: torch.Tensor, original_size: list[int]) -> float:
    # torchvision's: the power of 2 nearest feature size / image size, at the example's size.
    approx_scale = _example_value(feature.shape[-2]) / _example_value(original_size[0])
    return 2 ** float(torch.tensor(approx_scale).log2().round())


def _postprocess(self: Any, result: list[dict[str, torch.Tensor]],
                 image_shapes: list[tuple[int, int]],
                 original_image_sizes: list[tuple[int, int]]) -> list[dict[str, torch.Tensor]]:
    original = state.ORIGINALS[
        ("torchvision.models.detection.transform.GeneralizedRCNNTransform", "postprocess")]
    result = original(self, result, image_shapes, original_image_sizes)
    for index, detections in enumerate(result):
        count = detections["boxes"].shape[0] if "boxes" in detections else None
        if isinstance(count, torch.SymInt) and not count.node.expr.is_number:
            state.size_names.setdefault(str(count.node.expr),
                                   "num_detections" + (f"_{index}" if index else ""))
    return result


def _ssd_postprocess_detections(self: Any, head_outputs: dict[str, torch.Tensor],
                                image_anchors: list[torch.Tensor],
                                image_shapes: list[tuple[int, int]]) -> list[dict[str, torch.Tensor]]:
    box_ops = sys.modules["torchvision.ops.boxes"]
    all_scores = torch.nn.functional.softmax(head_outputs["cls_logits"], dim=-1)
    detections = []
    for boxes, scores, anchors, image_shape in zip(head_outputs["bbox_regression"], all_scores,
                                                   image_anchors, image_shapes):
        boxes = box_ops.clip_boxes_to_image(self.box_coder.decode_single(boxes, anchors),
                                            image_shape)
        # Each class's best boxes, classes in order: [classes * k], as torchvision's list.
        k = min(self.topk_candidates, scores.shape[0])
        top, index = scores[:, 1:].topk(k, dim=0)
        top, index = top.t().reshape(-1), index.t().reshape(-1)
        labels = torch.arange(1, scores.shape[1], device=scores.device).repeat_interleave(k)
        kept = torch.where(top > self.score_thresh)[0]
        image_boxes, image_scores, image_labels = boxes[index[kept]], top[kept], labels[kept]
        keep = box_ops.batched_nms(image_boxes, image_scores, image_labels, self.nms_thresh)
        keep = keep[: self.detections_per_img]
        detections.append({"boxes": image_boxes[keep], "scores": image_scores[keep],
                           "labels": image_labels[keep]})
    return detections


def _bilinear_rows(start: torch.Tensor, length: torch.Tensor, limit: torch.Tensor,
                   out_size: Any, in_size: int) -> torch.Tensor:
    """[N, out_size, in_size]: row y of box i holds the weights
    `F.interpolate(mode="bilinear", align_corners=False)` gives the `in_size` source rows when
    resizing to `length[i]` rows placed at `start[i]` (zero outside the box and past `limit`)."""
    y = torch.arange(out_size, device=start.device)[None, :]
    local = y - start[:, None]
    inside = (local >= 0) & (local < length[:, None]) & (y < limit[:, None])
    scale = (in_size / length.to(torch.float32))[:, None]
    src = ((local.to(torch.float32) + 0.5) * scale - 0.5).clamp(min=0)
    low = src.floor().to(torch.int64).clamp(max=in_size - 1)
    high = (low + 1).clamp(max=in_size - 1)
    frac = src - low.to(torch.float32)
    k = torch.arange(in_size, device=start.device)
    weights = (1 - frac)[..., None] * (k == low[..., None]) + frac[..., None] * (k == high[..., None])
    return weights * inside[..., None]


def _paste_masks_in_image(masks: torch.Tensor, boxes: torch.Tensor, img_shape: tuple[int, int],
                          padding: int = 1) -> torch.Tensor:
    roi_heads = sys.modules["torchvision.models.detection.roi_heads"]
    masks, scale = roi_heads.expand_masks(masks, padding=padding)
    half_w = (boxes[:, 2] - boxes[:, 0]) * 0.5 * scale
    half_h = (boxes[:, 3] - boxes[:, 1]) * 0.5 * scale
    center_x = (boxes[:, 2] + boxes[:, 0]) * 0.5
    center_y = (boxes[:, 3] + boxes[:, 1]) * 0.5
    x0, y0 = (center_x - half_w).to(torch.int64), (center_y - half_h).to(torch.int64)
    x1, y1 = (center_x + half_w).to(torch.int64), (center_y + half_h).to(torch.int64)
    im_h, im_w = img_shape
    size = masks.shape[-1]
    # Each mask resized to its box, as a product with per-box interpolation matrices: rows
    # and columns outside the box (or the image) get no weight, so the rest stays zero.
    rows = _bilinear_rows(y0, (y1 - y0 + 1).clamp(min=1), y1 + 1, im_h, size)
    cols = _bilinear_rows(x0, (x1 - x0 + 1).clamp(min=1), x1 + 1, im_w, size)
    pasted = rows @ masks[:, 0].to(rows.dtype) @ cols.transpose(1, 2)
    return pasted.to(masks.dtype)[:, None]


_CUBIC_A = -0.75  # PyTorch's bicubic coefficient


def _bicubic_rows(length: torch.Tensor, out_size: Any, in_size: int) -> torch.Tensor:
    """[N, out_size, in_size]: the weights `F.interpolate(mode="bicubic",
    align_corners=False)` gives the source rows when resizing to `length[i]` rows (rows past
    it are zero)."""
    y = torch.arange(out_size, device=length.device)[None, :].to(torch.float32)
    scale = (in_size / length.to(torch.float32))[:, None]
    src = (y + 0.5) * scale - 0.5
    base = src.floor()
    t = src - base
    k = torch.arange(in_size, device=length.device)
    weights = torch.zeros((*src.shape, in_size), dtype=torch.float32, device=length.device)
    a = _CUBIC_A
    for tap, distance in enumerate((t + 1, t, 1 - t, 2 - t)):
        if tap in (1, 2):
            w = ((a + 2) * distance - (a + 3)) * distance * distance + 1
        else:
            w = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
        index = (base.to(torch.int64) - 1 + tap).clamp(0, in_size - 1)
        weights = weights + w[..., None] * (k == index[..., None])
    return weights * (y < length[:, None])[..., None]


def _heatmaps_to_keypoints(maps: torch.Tensor, rois: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
    widths_ceil, heights_ceil = widths.ceil(), heights.ceil()
    num_rois, num_keypoints, map_h, map_w = maps.shape
    # Every box's heatmaps resized to the box (torchvision loops over the boxes, each to its
    # own size), padded to the largest box: padding is never the maximum.
    empty = rois.new_ones(1)
    max_h = torch.cat([heights_ceil, empty]).max().to(torch.int64).item()
    max_w = torch.cat([widths_ceil, empty]).max().to(torch.int64).item()
    torch._check(max_h >= 1)
    torch._check(max_w >= 1)
    rows = _bicubic_rows(heights_ceil.to(torch.int64), max_h, map_h)
    cols = _bicubic_rows(widths_ceil.to(torch.int64), max_w, map_w)
    resized = rows[:, None] @ maps.to(torch.float32) @ cols[:, None].transpose(2, 3)
    inside = (torch.arange(max_h)[None, :, None] < heights_ceil[:, None, None]) \
        & (torch.arange(max_w)[None, None, :] < widths_ceil[:, None, None])
    resized = resized.masked_fill(~inside[:, None], float("-inf"))
    scores, pos = resized.reshape(num_rois, num_keypoints, -1).max(dim=2)
    x_int, y_int = pos % max_w, torch.div(pos, max_w, rounding_mode="floor")
    x = (x_int.float() + 0.5) * (widths / widths_ceil)[:, None] + rois[:, 0, None]
    y = (y_int.float() + 0.5) * (heights / heights_ceil)[:, None] + rois[:, 1, None]
    return torch.stack([x, y, torch.ones_like(x)], dim=2), scores


def _resize_keypoints(keypoints: torch.Tensor, original_size: list[int], new_size: list[int]
                      ) -> torch.Tensor:
    ratio_h, ratio_w = (torch.tensor(s, dtype=torch.float32, device=keypoints.device)
                        / torch.tensor(s_orig, dtype=torch.float32, device=keypoints.device)
                        for s, s_orig in zip(new_size, original_size))
    return torch.stack((keypoints[..., 0] * ratio_w, keypoints[..., 1] * ratio_h,
                        keypoints[..., 2]), dim=-1)


# (module, attribute) -> replacement; a module not yet imported is left alone.
PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    ("torchvision.ops.boxes", "batched_nms"): _batched_nms,
    ("torchvision.ops", "batched_nms"): _batched_nms,
    ("torchvision.ops.poolers", "_multiscale_roi_align"): _multiscale_roi_align,
    ("torchvision.models.detection.transform.GeneralizedRCNNTransform", "batch_images"):
        _batch_images,
    ("torchvision.models.detection.roi_heads", "paste_masks_in_image"): _paste_masks_in_image,
    ("torchvision.models.detection.transform", "paste_masks_in_image"): _paste_masks_in_image,
    ("torchvision.models.detection.roi_heads", "heatmaps_to_keypoints"): _heatmaps_to_keypoints,
    ("torchvision.models.detection.transform", "resize_keypoints"): _resize_keypoints,
    ("torchvision.models.detection.ssd.SSD", "postprocess_detections"):
        _ssd_postprocess_detections,
    ("torchvision.models.detection.transform", "_resize_image_and_masks"):
        _resize_image_and_masks,
    ("torchvision.ops.poolers", "_infer_scale"): _infer_scale,
    ("torchvision.models.detection.transform.GeneralizedRCNNTransform", "postprocess"):
        _postprocess,
}
