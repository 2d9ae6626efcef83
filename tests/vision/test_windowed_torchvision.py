"""torchvision's Swin, Swin v2 and Swin3D with a dynamic height and width
(library_patches/torchvision_models.py).

torchvision's window attention branches in Python on each stage's map size: no shift (and no
mask) where one window covers a side, and in Swin3D a window shrunk to a side shorter than
it. Exported at 224, swin_t's graph held for images up to 227 only. The capture-only patches
take one path for every size; they must equal torchvision in eager mode at sizes where each
branch is taken (one window, whole windows, padded windows, a map smaller than the window),
and one dynamic export must match eager PyTorch at every size.
"""

from __future__ import annotations


import pytest
import torch

from tests.vision.packages import import_vision

if import_vision() is None:
    pytest.skip("no torchvision release for this torch (tests/vision/packages.py)",
                allow_module_level=True)

from torchvision.models import swin_transformer
from torchvision.models.video import swin_transformer as swin3d

from onnxport.capture.library_patches import library_patches
from onnxport.capture.library_patches import torchvision_models as patches
from tests.vision.patch_checks import check_one_graph_for_every_size
from tests.vision.models import BATCH, by_name

# Maps for a window of 7: one window, smaller than it, whole windows, padded ones, mixed.
SIDES = [(7, 7), (5, 3), (1, 1), (14, 14), (8, 9), (13, 7), (7, 22), (21, 15)]
SHIFTS = [[0, 0], [3, 3], [3, 0]]


def _randomized(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module.eval()


@pytest.mark.parametrize("shift", SHIFTS)
@pytest.mark.parametrize("cls", [swin_transformer.ShiftedWindowAttention,
                                 swin_transformer.ShiftedWindowAttentionV2])
def test_attention_equals_torchvision_in_eager_mode(cls: type, shift: list[int]) -> None:
    module = _randomized(cls(32, [7, 7], shift, 4))
    original = swin_transformer.shifted_window_attention
    for side in SIDES:
        x = torch.randn(2, *side, 32)
        with torch.no_grad():
            expected = module(x)
            with library_patches():
                assert swin_transformer.shifted_window_attention is not original
                got = module(x)
        assert torch.equal(got, expected), (side, (got - expected).abs().max().item())


@pytest.mark.parametrize("shift", [[0, 0, 0], [4, 3, 3]])
def test_3d_attention_equals_torchvision_in_eager_mode(shift: list[int]) -> None:
    module = _randomized(swin3d.ShiftedWindowAttention3d(32, [8, 7, 7], shift, 4))
    for size in [(4, 4, 4), (4, 7, 7), (4, 5, 9), (8, 14, 14), (9, 8, 3), (4, 1, 1),
                 (2, 13, 7), (16, 15, 6)]:
        x = torch.randn(2, *size, 32)
        with torch.no_grad():
            expected = module(x)
            with library_patches():
                # static sides: torchvision's shrunk windows
                static = module(x)
            # the full window along H and W, as a dynamic export computes
            full = patches._swin3d_attention(module, x, [min(size[0], 8), 7, 7])
        assert torch.equal(static, expected), size
        torch.testing.assert_close(full, expected, rtol=1e-5, atol=1e-5, msg=str(size))


def test_pads_equal_torchvision() -> None:
    for h in range(1, 12):
        for w in range(1, 12):
            x = torch.randn(2, h, w, 3)
            assert torch.equal(patches._patch_merging_pad(x),
                               swin_transformer._patch_merging_pad(x))
            assert (patches._compute_pad_size_3d((h, w, h * w), (2, 4, 4))
                    == swin3d._compute_pad_size_3d((h, w, h * w), (2, 4, 4)))


@pytest.mark.parametrize("name", ["torchvision/swin_t", "video/swin3d_t"])
def test_model_equals_torchvision_in_eager_mode(name: str) -> None:
    case = by_name()[name]
    torch.manual_seed(0)
    model = case.build()
    sizes = [case.size, case.size2, (160, 160), (192, 416)] if len(case.size) == 2 \
        else [case.size, case.size2, (8, 32, 32), (8, 64, 96)]
    for size in sizes:
        x = case.inputs(BATCH, size)[0][0]
        with torch.no_grad():
            expected = model(x)
            with library_patches():
                got = model(x)
        assert torch.equal(got, expected), size


# Exported at case.size: the last stage is one window (swin_t, swin_v2_t at 224: 7x7 for a
# window of 7 or 8; swin3d_t at 112: 4x4, the window shrunk to it). The other sizes give two
# windows (256x288), one padded window (160x160), both (192x416), a 1x1 last map (32x32).
DYNAMIC_SIZES = {
    "torchvision/swin_t": [(160, 160), (192, 416)],
    "torchvision/swin_v2_t": [(160, 160), (192, 416)],
    "video/swin3d_t": [(8, 32, 32), (8, 64, 96), (8, 200, 120)],
}


@pytest.mark.parametrize("name", list(DYNAMIC_SIZES))
def test_dynamic_size(name: str) -> None:
    check_one_graph_for_every_size(name, DYNAMIC_SIZES[name])
