"""timm's TinyViT and MobileViT with a dynamic height and width (library_patches/timm.py).

Both models branch in Python on the size of each stage's map: TinyViT on a map that is one
window (unwindowed attention) or a multiple of the window (no padding), MobileViT on a map
that is a multiple of the patch (no resize). Exported at one size, the graph kept the
example's branch and failed in ONNX Runtime at another (a Reshape error). The capture-only
patches take one path for every size; they must equal timm's forward in eager mode, bit for
bit, at sizes whose maps are and are not multiples of the window or patch, equal to the window
and smaller than it, and one dynamic export must match eager PyTorch at every size.
"""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from tests.vision.packages import import_vision

if import_vision() is None:
    pytest.skip("no torchvision release for this torch (tests/vision/packages.py)",
                allow_module_level=True)


from tests.vision.patch_checks import (check_one_graph_for_every_size,
                                     check_patches_equal_library)

TINY_VIT = "timm/tiny_vit:tiny_vit_5m_224"
MOBILEVIT = "timm/mobilevit:mobilevit_xxs"
# TinyViT's stages see the image / 4, 8, 16, 32 with windows 7, 7, 14, 7: at 224 the last
# two maps are exactly one window, at 448 whole windows, at the others padded (64x96: the
# last map, 2x3, is smaller than a window). MobileViT's blocks see / 8, 16, 32 with patches
# of 2: at 256 and 224 whole patches, at the others an odd map somewhere.
EAGER_SIZES = {
    TINY_VIT: [(224, 224), (448, 448), (256, 288), (200, 232), (225, 225), (64, 96)],
    MOBILEVIT: [(256, 256), (224, 224), (288, 320), (200, 232), (257, 255), (40, 48)],
}
# The window / patch blocks the patches replace, (module, class).
BLOCKS = {TINY_VIT: ("timm.models.tiny_vit", "TinyVitBlock"),
          MOBILEVIT: ("timm.models.mobilevit", "MobileVitBlock")}


def _block_class(name: str) -> type:
    import importlib

    module, cls = BLOCKS[name]
    return getattr(importlib.import_module(module), cls)


@pytest.mark.parametrize("name", [TINY_VIT, MOBILEVIT])
def test_patch_equals_timm_in_eager_mode(name: str) -> None:
    check_patches_equal_library(name, EAGER_SIZES[name], lambda: [_block_class(name).forward])


def test_bilinear_resize_to_the_same_size_is_the_identity() -> None:
    # What the MobileViT patch relies on where the map is already whole patches.
    x = torch.randn(2, 3, 9, 10)
    assert torch.equal(F.interpolate(x, size=(9, 10), mode="bilinear", align_corners=False), x)


@pytest.mark.parametrize("name", [TINY_VIT, MOBILEVIT])
def test_dynamic_size(name: str) -> None:
    check_one_graph_for_every_size(name, [(200, 232)])
