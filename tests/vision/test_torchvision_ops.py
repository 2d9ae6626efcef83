"""torchvision's operators exported with onnxport, run in ONNX Runtime, compared with eager.

On a CPU torch, torchvision's compiled ops do not load: `shim.load_torchvision()` defines them
with reference kernels first (see shim.py). The models call torchvision's Python wrappers
(`torchvision.ops.nms`, ...) where torchvision imports, else the `torchvision::` operators
the shim defined, with the wrappers' argument conventions: the translations see the same
operators either way.
"""

from __future__ import annotations

import pytest
import torch

import onnxport
from onnxport.errors import TranslationError

from .shim import load_torchvision, nms_reference



class _Operators:
    """torchvision.ops' calls on the `torchvision::` operators, for where the package is absent."""

    @staticmethod
    def nms(boxes, scores, iou_threshold):
        return torch.ops.torchvision.nms(boxes, scores, iou_threshold)

    @staticmethod
    def roi_align(x, rois, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
        height, width = (output_size, output_size) if isinstance(output_size, int) else output_size
        return torch.ops.torchvision.roi_align(x, rois, spatial_scale, height, width,
                                               sampling_ratio, aligned)

    @staticmethod
    def roi_pool(x, rois, output_size, spatial_scale=1.0):
        height, width = (output_size, output_size) if isinstance(output_size, int) else output_size
        return torch.ops.torchvision.roi_pool(x, rois, spatial_scale, height, width)[0]

    @staticmethod
    def deform_conv2d(x, offset, weight, bias=None, stride=(1, 1), padding=(0, 0),
                      dilation=(1, 1), mask=None):
        groups = x.shape[1] // weight.shape[1]
        offset_groups = offset.shape[1] // (2 * weight.shape[-2] * weight.shape[-1])
        use_mask = mask is not None
        if mask is None:
            mask = torch.zeros(0, dtype=x.dtype)
        if bias is None:
            bias = torch.zeros(weight.shape[0], dtype=x.dtype)
        return torch.ops.torchvision.deform_conv2d(
            x, weight, offset, mask, bias, stride[0], stride[1], padding[0], padding[1],
            dilation[0], dilation[1], groups, offset_groups, use_mask)


torchvision = load_torchvision()
ops = torchvision.ops if torchvision is not None else _Operators


class Nms(torch.nn.Module):
    def __init__(self, iou_threshold: float = 0.5) -> None:
        super().__init__()
        self.iou_threshold = iou_threshold

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return ops.nms(boxes, scores, self.iou_threshold)


class RoiAlign(torch.nn.Module):
    def __init__(self, output_size=(3, 2), spatial_scale=0.5, sampling_ratio=2, aligned=True):
        super().__init__()
        self.args = (output_size, spatial_scale, sampling_ratio, aligned)

    def forward(self, x: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return ops.roi_align(x, rois, *self.args)


class RoiPool(torch.nn.Module):
    def __init__(self, output_size=(3, 3), spatial_scale=0.5):
        super().__init__()
        self.args = (output_size, spatial_scale)

    def forward(self, x: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return ops.roi_pool(x, rois, *self.args)


class RoiPoolArgmax(torch.nn.Module):
    def forward(self, x: torch.Tensor, rois: torch.Tensor):
        return torch.ops.torchvision.roi_pool(x, rois, 1.0, 2, 2)


class DeformConv(torch.nn.Module):
    def __init__(self, with_mask: bool, groups: int = 1, offset_groups: int = 1) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 4 // groups, 3, 3) * 0.3)
        self.bias = torch.nn.Parameter(torch.randn(6))
        self.with_mask = with_mask

    def forward(self, x, offset, mask=None):
        return ops.deform_conv2d(x, offset, self.weight, self.bias, stride=(2, 1),
                                 padding=(1, 2), dilation=(1, 2), mask=mask)


def _boxes(n: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * 20
    wh = torch.rand(n, 2, generator=gen) * 10 + 1
    return torch.cat([xy, xy + wh], dim=1)


def _rois(k: int, batch: int, size: float, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(k, 2, generator=gen) * size * 0.7 - 1
    wh = torch.rand(k, 2, generator=gen) * size * 0.5 + 0.2
    idx = torch.randint(0, batch, (k, 1), generator=gen).float()
    return torch.cat([idx, xy, xy + wh], dim=1)


def _check(program: onnxport.ONNXProgram, model: torch.nn.Module, *args, **kw) -> None:
    expected = model(*args)
    (actual,) = program(*args)
    torch.testing.assert_close(actual, expected, **kw)


# -- nms ---------------------------------------------------------------------------------------

def test_nms_matches_eager():
    boxes, scores = _boxes(30), torch.rand(30)
    model = Nms(0.3)
    program = onnxport.export(model, (boxes, scores))
    assert any(n.op_type == "NonMaxSuppression" for n in program.model.graph)
    _check(program, model, boxes, scores)


def test_nms_dynamic_box_count_and_kept_count():
    model = Nms(0.4)
    boxes, scores = _boxes(20), torch.rand(20)
    n = torch.export.Dim("n", min=2)
    program = onnxport.export(model, (boxes, scores), dynamic_shapes=({0: n}, {0: n}))
    first = model(boxes, scores).shape[0]
    # other box counts, and a kept count different from the export example's
    for count, seed in ((7, 1), (45, 2), (3, 3)):
        b, s = _boxes(count, seed), torch.rand(count)
        _check(program, model, b, s)
    spread = torch.arange(10, dtype=torch.float32)[:, None] * 100 + torch.tensor([0, 0, 5, 5.0])
    assert model(spread, torch.rand(10)).shape[0] == 10 != first
    _check(program, model, spread, torch.rand(10))


def test_nms_ties_and_iou_equal_to_threshold():
    # IoU of box 0 and 1: 1/2 exactly; at threshold 0.5 neither is suppressed (strictly >).
    boxes = torch.tensor([[0, 0, 2, 1], [0, 0, 1, 1], [0, 0, 2, 1], [5, 5, 6, 6], [5, 5, 6, 6.0]])
    scores = torch.tensor([0.9, 0.9, 0.5, 0.7, 0.7])  # equal scores: lower index first
    for threshold in (0.5, 0.49, 0.0, 1.0, 1.5):
        model = Nms(threshold)
        program = onnxport.export(model, (boxes, scores))
        _check(program, model, boxes, scores)
    assert Nms(0.5)(boxes, scores).tolist() == [0, 1, 3]


def test_nms_negative_threshold_is_refused():
    with pytest.raises(Exception, match="iou_threshold"):
        onnxport.export(Nms(-0.1), (_boxes(5), torch.rand(5)))


def test_nms_reference_matches_torchvision_python_order():
    boxes, scores = _boxes(40, 5), torch.rand(40)
    keep = nms_reference(boxes, scores, 0.5)
    assert torch.all(scores[keep][:-1] >= scores[keep][1:])


# -- roi_align ---------------------------------------------------------------------------------

@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 2, -1])
def test_roi_align(aligned, sampling_ratio):
    x = torch.randn(2, 3, 12, 10)
    rois = _rois(6, 2, 20)
    rois[0, 1:] = torch.tensor([4.0, 4.0, 4.2, 4.1])  # smaller than a pixel: 1x1 when unaligned
    model = RoiAlign((3, 2), 0.5, sampling_ratio, aligned)
    program = onnxport.export(model, (x, rois))
    assert any(n.op_type == "RoiAlign" for n in program.model.graph)
    _check(program, model, x, rois)


def test_roi_align_dynamic_roi_count():
    model = RoiAlign((2, 2), 1.0, 0, True)
    x, rois = torch.randn(2, 4, 9, 11), _rois(5, 2, 10)
    k = torch.export.Dim("k")
    program = onnxport.export(model, (x, rois), dynamic_shapes=(None, {0: k}))
    for count, seed in ((1, 1), (13, 2)):
        _check(program, model, x, _rois(count, 2, 10, seed))


def test_roi_align_float64():
    model = RoiAlign((2, 3), 1.0, 2, False)
    x, rois = torch.randn(1, 2, 8, 8, dtype=torch.float64), _rois(4, 1, 8).double()
    _check(onnxport.export(model, (x, rois)), model, x, rois)


# -- roi_pool ----------------------------------------------------------------------------------

def test_roi_pool_matches_eager_with_negative_values_and_empty_bins():
    x = torch.randn(2, 3, 10, 12) - 1.5  # mostly negative: ONNX Runtime starts bins at FLT_MIN
    rois = _rois(7, 2, 24)
    rois[0, 1:] = torch.tensor([30.0, 30.0, 40.0, 40.0])   # outside the map: empty bins
    rois[1, 1:] = torch.tensor([2.5, 3.5, 2.5, 3.5])       # half-pixel corners, one pixel
    rois[2, 1:] = torch.tensor([9.0, 1.0, 3.0, 7.0])       # flipped: forced to 1 pixel wide
    model = RoiPool((3, 3), 0.5)
    program = onnxport.export(model, (x, rois))
    assert any(n.op_type == "MaxRoiPool" for n in program.model.graph)
    _check(program, model, x, rois)
    relu = torch.relu(x + 1.5)  # non-negative input with zero bins
    _check(program, model, relu, rois)


def test_roi_pool_argmax_read_is_refused():
    x, rois = torch.randn(1, 2, 6, 6), _rois(2, 1, 6)
    with pytest.raises(Exception, match="argmax"):
        onnxport.export(RoiPoolArgmax(), (x, rois))


# -- deform_conv2d -----------------------------------------------------------------------------

@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv2d(with_mask):
    model = DeformConv(with_mask)
    x = torch.randn(2, 4, 9, 8)
    # output: H (9 + 2 - 3) / 2 + 1 = 5, W (8 + 4 - 5) + 1 = 8
    offset = torch.randn(2, 2 * 9, 5, 8) * 1.5
    args = (x, offset, torch.rand(2, 9, 5, 8)) if with_mask else (x, offset)
    program = onnxport.export(model, args)
    assert any(n.op_type == "DeformConv" for n in program.model.graph)
    _check(program, model, *args, rtol=1e-4, atol=1e-4)


def test_deform_conv2d_groups_and_offset_groups():
    class Grouped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(6, 2, 3, 3) * 0.3)

        def forward(self, x, offset, mask):
            return torch.ops.torchvision.deform_conv2d(
                x, self.weight, offset, mask, torch.zeros(6), 1, 1, 1, 1, 1, 1, 2, 2, True)

    x = torch.randn(1, 4, 7, 7)
    offset, mask = torch.randn(1, 2 * 2 * 9, 7, 7), torch.rand(1, 2 * 9, 7, 7)
    model = Grouped()
    _check(onnxport.export(model, (x, offset, mask)), model, x, offset, mask, rtol=1e-4, atol=1e-4)


def test_deform_conv2d_needs_opset_19(monkeypatch: pytest.MonkeyPatch):
    # torchvision's compiled operator has no Python body to inline (the shim's reference
    # kernel has one: switched off here), so below opset 19 it has no translation.
    import onnxport.capture.decompose as decompose

    monkeypatch.setattr(decompose, "custom_op_implementation", lambda op: None)
    model = DeformConv(False)
    args = (torch.randn(1, 4, 9, 8), torch.randn(1, 18, 5, 8))
    with pytest.raises(onnxport.UnsupportedOperatorError, match="deform_conv2d"):
        onnxport.export(model, args, opset_version=18)


def test_module_loads_without_torchvision_names():
    import onnxport.ops.torchvision as module

    assert module.NMS == "torchvision::nms.default"
    assert TranslationError  # the refusals above are TranslationErrors in the export error
