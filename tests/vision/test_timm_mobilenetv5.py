"""timm models whose ONNX output differed from eager PyTorch: MobileNetV5's multi-scale fusion
adapter, which resizes to its output resolution by a Python branch on the feature size (the
capture-only patch in `onnxport.capture.library_patches.timm`)."""

from __future__ import annotations

import pytest
import torch

from tests.vision.packages import import_vision

if import_vision() is None:
    pytest.skip("no torchvision release for this torch (tests/vision/packages.py)",
                allow_module_level=True)

import onnxruntime as ort
from timm.models.mobilenetv5 import MobileNetV5MultiScaleFusionAdapter

import onnxport
from onnxport.capture.library_patches.timm import _msfa_forward
from tests.vision.patch_checks import check_one_graph_for_every_size
from tests.vision.models import BATCH, BATCH2

# (H, W) of the highest resolution feature: the output resolution (16: timm keeps it), its
# multiples (avg pool), other sizes above and below it (bilinear), one pixel.
FEATURE_SIZES = [(16, 16), (32, 48), (48, 16), (18, 20), (16, 17), (33, 33), (14, 15), (1, 1)]


class _Fusion(torch.nn.Module):
    """MobileNetV5's adapter fed a full and a half resolution feature of one image."""

    def __init__(self) -> None:
        super().__init__()
        self.high = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.low = torch.nn.Conv2d(3, 12, 3, stride=2, padding=1)
        self.adapter = MobileNetV5MultiScaleFusionAdapter([8, 12], 16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.adapter([self.high(x), self.low(x)])


def _session(program: onnxport.ONNXProgram) -> ort.InferenceSession:
    return ort.InferenceSession(program.model_proto.SerializeToString(),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("size", FEATURE_SIZES)
def test_msfa_patch_equals_timm(size: tuple[int, int]) -> None:
    torch.manual_seed(0)
    adapter = MobileNetV5MultiScaleFusionAdapter([8, 12], 16, 16).eval()
    h, w = size
    inputs = [torch.randn(2, 8, h, w), torch.randn(2, 12, (h + 1) // 2, (w + 1) // 2)]
    with torch.no_grad():
        assert torch.equal(_msfa_forward(adapter, inputs), adapter(inputs))


def test_msfa_dynamic() -> None:
    torch.manual_seed(0)
    model = _Fusion().eval()
    with torch.no_grad():
        program = onnxport.export(model, (torch.randn(BATCH, 3, 16, 16),), dynamic_shapes={
            "x": {0: "batch", 2: "height", 3: "width"}})
    session = _session(program)
    for h, w in FEATURE_SIZES:
        x = torch.randn(BATCH2, 3, h, w)
        with torch.no_grad():
            expected = model(x)
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-3, atol=1e-4)


def test_mobilenetv5_dynamic() -> None:
    """The whole model, exported at 256x256 (a 16x16 feature: no resize) and run at 288x320
    (18x20: bilinear) and 512x384 (32x24: avg pool by 2 in height, bilinear in width: timm
    resizes bilinearly unless both divide)."""
    check_one_graph_for_every_size("timm/mobilenetv5:mobilenetv5_base", [(512, 384), (512, 512)])
