"""torchvision's detectors exported with the dynamo flavour, checked in ONNX Runtime.

The patches of torchvision's data-dependent code (onnxport/capture/library_patches/torchvision_detection.py) are
checked against torchvision's own functions in eager mode, `onnxport::batched_nms` in ONNX
Runtime, and one detector end to end (Faster R-CNN with a MobileNetV3 backbone, the fastest) at
a fixed size and with a dynamic image size; the TorchScript forms torchvision's scripted
functions use, in small. benchmarks/bench_detection.py exports the full set (Faster / Mask /
Keypoint R-CNN, RetinaNet, FCOS, SSD, SSDlite) in both flavours.

Random weights give near-constant class scores, so NMS would order ties as each
implementation pleases: `reinit` draws weights that give distinct scores.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import Any

import onnxruntime
import pytest
import torch

from tests.vision.packages import import_vision

torchvision = import_vision()
if torchvision is None:
    pytest.skip("no torchvision release for this torch", allow_module_level=True)

import onnxport  # noqa: E402
from onnxport.capture import library_patches  # noqa: E402
from onnxport.errors import ForwardError  # noqa: E402

detection = torchvision.models.detection
roi_heads = sys.modules["torchvision.models.detection.roi_heads"]
box_ops = sys.modules["torchvision.ops.boxes"]


def reinit(model: torch.nn.Module, seed: int = 0, class_gain: float = 16.0) -> torch.nn.Module:
    """He-normal weights, class heads `class_gain` times the variance, so that class scores
    are distinct (softmax heads; a sigmoid head, RetinaNet's, saturates to ties at 1 then)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, (torch.nn.Conv2d, torch.nn.Linear,
                                       torch.nn.ConvTranspose2d)):
                continue
            weight = module.weight
            fan_in = weight[0].numel()
            if isinstance(module, torch.nn.ConvTranspose2d):
                fan_in = weight.shape[0] * weight[0, 0].numel()
            gain = class_gain if "cls" in name or "classification" in name else 1.0
            weight.copy_(torch.randn(weight.shape, generator=generator) * (gain / fan_in) ** 0.5)
            if module.bias is not None:
                module.bias.copy_(torch.randn(module.bias.shape, generator=generator) * 0.1)
    return model.eval()


def detector(name: str, class_gain: float = 16.0, **kwargs: object) -> torch.nn.Module:
    """A torchvision detector with random weights, images resized to 160-200 pixels."""
    torch.manual_seed(0)
    small = {"min_size": 160, "max_size": 200} if not name.startswith("ssd") else {}
    return reinit(getattr(detection, name)(weights=None, weights_backbone=None, **small,
                                           **kwargs), class_gain=class_gain)


def images(height: int, width: int) -> torch.Tensor:
    return torch.rand(1, 3, height, width, generator=torch.Generator().manual_seed(height + width))


def nms_threshold(model: torch.nn.Module) -> float:
    """The IoU above which the detector's NMS suppresses the lower-scoring box."""
    heads = getattr(model, "roi_heads", None)
    return float(heads.nms_thresh if heads is not None else model.nms_thresh)


def _iou(a: torch.Tensor, b: torch.Tensor) -> float:
    low, high = torch.maximum(a[:2], b[:2]), torch.minimum(a[2:], b[2:])
    inter = (high - low).clamp(min=0).prod()
    union = (a[2:] - a[:2]).prod() + (b[2:] - b[:2]).prod() - inter
    return float(inter / union) if union > 0 else 0.0


def same_detections(expected: dict[str, torch.Tensor], got: Sequence[Any],
                    rtol: float = 1e-4, atol: float = 1e-3, nms_iou: float | None = None,
                    ties: list[str] | None = None) -> str | None:
    """None if `got` (the program's outputs, in `expected`'s key order) holds eager's
    detections in decreasing score order, detections of equal score in any order (torch's
    sort leaves the order of ties unspecified); else what differs.

    With `nms_iou` (the detector's NMS threshold), a tie NMS breaks the other way is the same
    detection: where eager kept box A and suppressed box B, the program may keep B when B has
    A's label, A's score within the tolerance, and an IoU with A above the threshold (the two
    suppress each other; scores 1-2 float32 ulps apart can come out of ONNX Runtime in the
    other order). Every other field of B is then the program's own. `ties` receives a line
    per such detection."""
    outputs = {key: torch.as_tensor(value) for key, value in zip(expected, got)}
    shapes = {key: (tuple(outputs[key].shape), tuple(value.shape))
              for key, value in expected.items()}
    if any(ours != theirs for ours, theirs in shapes.values()):
        return f"shapes (onnx, eager) {shapes}"
    if (outputs["scores"].diff() > atol).any():
        return "scores not in decreasing order"
    unmatched = set(range(expected["scores"].shape[0]))

    def close(i: int, j: int, keys: Sequence[str]) -> bool:
        return all(torch.allclose(outputs[key][j].double(), expected[key][i].double(),
                                  rtol=rtol, atol=atol) for key in keys)

    def tied(i: int, j: int) -> bool:
        return (nms_iou is not None and close(i, j, ("labels", "scores"))
                and _iou(outputs["boxes"][j].double(), expected["boxes"][i].double()) > nms_iou)

    for i in range(expected["scores"].shape[0]):
        match = i if i in unmatched and close(i, i, list(expected)) else next(
            (j for j in sorted(unmatched) if close(i, j, list(expected))), None)
        if match is None:
            match = next((j for j in sorted(unmatched) if tied(i, j)), None)
            if match is not None and ties is not None:
                ties.append(f"eager's detection {i} (label {expected['labels'][i].item()}, "
                            f"score {expected['scores'][i].item():.8g}) is the program's "
                            f"{match} (score {outputs['scores'][match].item():.8g}, IoU "
                            f"{_iou(outputs['boxes'][match].double(), expected['boxes'][i].double()):.3f})")
        if match is None:
            return (f"eager's detection {i} (label {expected['labels'][i].item()}, score "
                    f"{expected['scores'][i].item():.7g}) is not among the outputs")
        unmatched.discard(match)
    return None


def test_batched_nms_operator_matches_torchvision() -> None:
    # torchvision takes its per-class loop above 1000 boxes (on CPU), its coordinate trick
    # below: onnxport::batched_nms does the same in one graph, for any number of boxes.
    class BatchedNMS(torch.nn.Module):
        def forward(self, boxes: torch.Tensor, scores: torch.Tensor,
                    classes: torch.Tensor) -> torch.Tensor:
            return box_ops.batched_nms(boxes, scores, classes, 0.5)

    def inputs(count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(count)
        corners = torch.rand(count, 2, generator=generator) * 100
        boxes = torch.cat([corners, corners + torch.rand(count, 2, generator=generator) * 40 + 1],
                          dim=1)
        scores = torch.randperm(count, generator=generator).float() / count  # no ties
        return boxes, scores, torch.randint(0, 5, (count,), generator=generator)

    dims = {0: "boxes"}
    program = onnxport.export(BatchedNMS(), inputs(300), dynamo=True,
                              dynamic_shapes={"boxes": dims, "scores": dims, "classes": dims})
    for count in (0, 1, 300, 1000, 1001, 2500):
        example = inputs(count)
        (got,) = program(*example)
        torch.testing.assert_close(torch.as_tensor(got), BatchedNMS()(*example), rtol=0, atol=0)


def test_batched_nms_patch_matches_torchvision() -> None:
    torch.manual_seed(0)
    corners = torch.rand(300, 2) * 100
    boxes = torch.cat([corners, corners + torch.rand(300, 2) * 40 + 1], dim=1)
    scores = torch.rand(300)
    classes = torch.randint(0, 5, (300,))
    with library_patches.library_patches():
        patched = box_ops.batched_nms(boxes, scores, classes, 0.5)
    assert box_ops.batched_nms is not library_patches._batched_nms  # restored on exit
    torch.testing.assert_close(patched, box_ops.batched_nms(boxes, scores, classes, 0.5))
    torch.testing.assert_close(patched, box_ops._batched_nms_vanilla(boxes, scores, classes, 0.5))


def _boxes(count: int, height: int, width: int) -> torch.Tensor:
    corner = torch.rand(count, 2) * torch.tensor([width, height]) * 0.8
    size = torch.rand(count, 2) * 80
    far = torch.minimum(corner + size, torch.tensor([float(width), float(height)]))
    boxes = torch.cat([corner, far], dim=1)
    boxes[0] = torch.tensor([10.0, 10.0, 9.5, 30.0])  # narrower than a pixel
    return boxes


def test_paste_masks_patch_matches_torchvision() -> None:
    torch.manual_seed(0)
    masks = torch.rand(30, 1, 28, 28)
    boxes = _boxes(30, 120, 140)
    expected = roi_heads.paste_masks_in_image(masks, boxes, (120, 140))
    got = library_patches._paste_masks_in_image(masks, boxes, (120, 140))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_heatmaps_to_keypoints_patch_matches_torchvision() -> None:
    torch.manual_seed(0)
    maps = torch.randn(20, 17, 56, 56)
    rois = _boxes(20, 120, 140)
    expected_xy, expected_scores = roi_heads.heatmaps_to_keypoints(maps, rois)
    xy, scores = library_patches._heatmaps_to_keypoints(maps, rois)
    torch.testing.assert_close(xy, expected_xy)  # the same argmax pixel for every keypoint
    # Bicubic weights summed in another order (one matrix product per box).
    torch.testing.assert_close(scores, expected_scores, rtol=1e-4, atol=1e-4)


def test_ssd_postprocess_patch_matches_torchvision() -> None:
    model = detector("ssdlite320_mobilenet_v3_large", score_thresh=0.0)
    x = images(160, 192)
    with torch.no_grad():
        expected = model(x)[0]
        with library_patches.library_patches():
            got = model(x)[0]
    for key in ("boxes", "scores", "labels"):
        torch.testing.assert_close(got[key], expected[key])


def test_faster_rcnn_exports_and_matches_eager() -> None:
    model = detector("fasterrcnn_mobilenet_v3_large_320_fpn", box_score_thresh=0.0,
                     rpn_score_thresh=0.0)
    x = images(160, 192)
    program = onnxport.export(model, (x,), dynamo=True,
                              output_names=["boxes", "labels", "scores"])
    graph = program.model.graph
    assert [v.name for v in graph.inputs] == ["images"]
    assert [v.name for v in graph.outputs] == ["boxes", "labels", "scores"]
    # The number of detections is a dimension of the graph, not the example's count.
    assert not isinstance(graph.outputs[0].shape[0], int)
    op_types = {node.op_type for node in graph.all_nodes()}
    assert {"NonMaxSuppression", "RoiAlign"} <= op_types
    with torch.no_grad():
        expected = model(x)[0]
    got = program(x)
    assert expected["boxes"].shape[0] > 10
    # The tie test_faster_rcnn_dynamic_image_size describes at this size: two candidates 1-2 float32 ulps
    # apart in score, NMS keeping the other one, depending on the CPU's kernels.
    ties: list[str] = []
    assert same_detections(expected, got, nms_iou=nms_threshold(model), ties=ties) is None
    assert len(ties) <= 1, ties


def test_faster_rcnn_dynamic_image_size() -> None:
    # One program for every image size: torchvision's resize gives each side an unbacked size
    # (library_patches), so capture stays fast and the sizes downstream follow the input.
    model = detector("fasterrcnn_mobilenet_v3_large_320_fpn", box_score_thresh=0.0,
                     rpn_score_thresh=0.0)
    program = onnxport.export(model, (images(160, 192),), dynamo=True,
                              dynamic_shapes={"images": {2: "height", 3: "width"}})
    graph = program.model.graph
    # Names from the model: its parameter, its dict's keys, and what the dims are.
    assert [(v.name, str(v.shape)) for v in (*graph.inputs, *graph.outputs)] == [
        ("images", "[1,3,height,width]"), ("boxes", "[num_detections,4]"),
        ("labels", "[num_detections]"), ("scores", "[num_detections]")]
    # Neither size is the example's; the second is resized (224 -> 200), the first is not,
    # and the two have the long side on different axes.
    for height, width in ((224, 176), (192, 160)):
        x = images(height, width)
        with torch.no_grad():
            expected = model(x)[0]
        assert expected["boxes"].shape[0] > 10
        assert same_detections(expected, program(x)) is None, (height, width)
    # At the example's size two candidates of one class, 1-2 float32 ulps apart in score and
    # ~1 px apart, come out of ONNX Runtime in the other order, and NMS keeps the other one.
    x = images(160, 192)
    with torch.no_grad():
        expected = model(x)[0]
    ties: list[str] = []
    assert same_detections(expected, program(x), nms_iou=nms_threshold(model), ties=ties) is None
    assert len(ties) <= 1, ties


def test_outputs_named_by_their_keys() -> None:
    # The general rule the detectors' names come from: an output under a string key is named
    # by it, unless output_names says otherwise.
    class Stats(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
            return {"mean": x.mean(0), "std": x.std(0)}, x.sum()

    x = torch.rand(4, 3)
    default = onnxport.export(Stats(), (x,), dynamo=True)
    assert [v.name for v in default.model.graph.outputs][:2] == ["mean", "std"]
    named = onnxport.export(Stats(), (x,), dynamo=True, output_names=["a", "b", "c"])
    assert [v.name for v in named.model.graph.outputs] == ["a", "b", "c"]


def test_bad_input_is_a_typed_error() -> None:
    model = detector("fasterrcnn_mobilenet_v3_large_320_fpn")
    with pytest.raises(ForwardError, match="3d tensors"):
        onnxport.export(model, (torch.rand(1, 1, 3, 64, 64),), dynamo=True)


def test_no_detections() -> None:
    # Every class score is below 0.9 on this image: eager returns no boxes, nor does ONNX
    # Runtime (NMS, top-k and the box offsets over empty tensors).
    model = detector("fasterrcnn_mobilenet_v3_large_320_fpn", box_score_thresh=0.9,
                     rpn_score_thresh=0.0)
    x = images(160, 192)
    with torch.no_grad():
        expected = model(x)[0]
    assert expected["boxes"].shape == (0, 4)
    program = onnxport.export(model, (x,), dynamo=True,
                              output_names=["boxes", "labels", "scores"])
    for key, value in zip(("boxes", "labels", "scores"), program(x)):
        assert torch.as_tensor(value).shape == expected[key].shape


@torch.jit.script
def _scripted_count(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor(x.numel()) + torch.tensor(1)


class _ShapeOps(torch.nn.Module):
    """The TorchScript nodes torchvision's tracing paths emit: aten::_shape_as_tensor, and in
    its scripted functions aten::numel and aten::tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._shape_as_tensor(x)[-1] * _scripted_count(x)


def test_torchscript_shape_ops() -> None:
    model = _ShapeOps()
    buffer = io.BytesIO()
    onnxport.export(model, (torch.rand(2, 3),), buffer, dynamo=False, input_names=["x"],
                    dynamic_axes={"x": {0: "rows", 1: "columns"}})
    session = onnxruntime.InferenceSession(buffer.getvalue(),
                                           providers=["CPUExecutionProvider"])
    for shape in ((2, 3), (4, 5)):
        x = torch.rand(shape)
        (got,) = session.run(None, {"x": x.numpy()})
        torch.testing.assert_close(torch.as_tensor(got), model(x))


@torch.jit.script
def _scripted_lists(x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    sizes = [1, 2, 3, 4]
    kept = list(sizes[1:3])
    y = x * kept[0] + kept[1]
    if "{}-{}".format(kept[0], kept[1]) in ["2-3", "3-4"]:
        y = y + 1
    if "bilinear" not in ["nearest", "bilinear"]:
        raise ValueError("unknown mode {}".format(kept))
    return y.sum() + torch.ones(1, count).sum()  # count: Tensor, read as an int


class _ListOps(torch.nn.Module):
    """What torchvision's scripted functions (F.interpolate's body, the mask pasting loop) use
    on Python values: aten::slice.t, aten::list, aten::__contains__, aten::format,
    aten::IntImplicit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _scripted_lists(x, torch._shape_as_tensor(x)[0])


def test_torchscript_list_ops() -> None:
    model = _ListOps()
    buffer = io.BytesIO()
    onnxport.export(model, (torch.rand(2, 3),), buffer, dynamo=False, input_names=["x"],
                    dynamic_axes={"x": {0: "rows"}})
    session = onnxruntime.InferenceSession(buffer.getvalue(),
                                           providers=["CPUExecutionProvider"])
    for shape in ((2, 3), (5, 3)):
        x = torch.rand(shape)
        (got,) = session.run(None, {"x": x.numpy()})
        torch.testing.assert_close(torch.as_tensor(got), model(x))


@torch.jit.script
def _scripted_paste(masks: torch.Tensor, height: torch.Tensor, width: torch.Tensor
                    ) -> torch.Tensor:
    pasted = torch.zeros(0, height, width)
    for i in range(masks.size(0)):
        mask = masks[i][0]
        mask = mask.expand((1, 1, mask.size(0), mask.size(1)))
        mask = torch.nn.functional.interpolate(mask, size=(int(height), int(width)),
                                               mode="bilinear", align_corners=False)
        pasted = torch.cat((pasted, mask[0]))
    return pasted + torch.ones(pasted.shape)  # a shape computed in the graph, as an int[]


class _PasteLoop(torch.nn.Module):
    """Mask R-CNN's scripted mask pasting in the TorchScript flavour, in small: a loop over a
    data-dependent count whose body resizes (F.interpolate's scripted body) and concatenates
    (the example sizes the tracer records disagree inside the loop: an empty start); then
    Keypoint R-CNN's `torch.ones(x.shape)` of a dynamic shape."""

    def forward(self, masks: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        shape = torch._shape_as_tensor(image)
        return _scripted_paste(masks, shape[0], shape[1])


def test_torchscript_paste_loop() -> None:
    model = _PasteLoop()
    buffer = io.BytesIO()
    onnxport.export(model, (torch.rand(3, 1, 7, 7), torch.rand(12, 10)), buffer, dynamo=False,
                    input_names=["masks", "image"],
                    dynamic_axes={"masks": {0: "count"}, "image": {0: "height", 1: "width"}})
    session = onnxruntime.InferenceSession(buffer.getvalue(),
                                           providers=["CPUExecutionProvider"])
    for count, height, width in ((3, 12, 10), (5, 9, 14)):
        masks, image = torch.rand(count, 1, 7, 7), torch.rand(height, width)
        (got,) = session.run(None, {"masks": masks.numpy(), "image": image.numpy()})
        torch.testing.assert_close(torch.as_tensor(got), model(masks, image))
