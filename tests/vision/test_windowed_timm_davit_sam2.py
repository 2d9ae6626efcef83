"""timm's DaViT and SAM2-Hiera with a dynamic height and width (library_patches/timm.py).

Both pad each stage's map to whole windows, cut the windows out with views and slice the pad
off. Exported with a dynamic height and width, torch.export did not finish (over 300 s
simplifying the nested floor divisions and remainders of the padded sizes); with the views
written without them, the last stages' maps at 224 are one window, and torch.export decided
`batch * windows == batch` there: the graph attended over the whole map at every size. The
capture-only patches gather the windows and write DaViT's stem and downsampling pads without
remainders; they must equal timm's forward in eager mode, bit for bit, at sizes whose maps
are and are not multiples of the window, equal to it and smaller than it, and one dynamic
export must match eager PyTorch at every size (its time: benchmarks/bench_vision.py).
"""

from __future__ import annotations


import pytest

from tests.vision.packages import import_vision

if import_vision() is None:
    pytest.skip("no torchvision release for this torch (tests/vision/packages.py)",
                allow_module_level=True)


from onnxport.capture.library_patches.timm import _ceil_to
from tests.vision.patch_checks import (check_one_graph_for_every_size,
                                     check_patches_equal_library)

DAVIT = "timm/davit:davit_tiny"
SAM2 = "timm/hieradet_sam2:sam2_hiera_tiny"
# DaViT's stages see the image / 4, 8, 16, 32 with windows 7: at 224 and 448x224 whole
# windows (the last map at 224 is one window, at 448x224 two by one), at 256x288 and the odd
# sizes padded (the stem pads too), at 28 the first map is one window and the others smaller
# than one. SAM2-Hiera's see / 4, 8, 16, 32 with windows 8, 4, 14, 7 (14 and 8 at its
# query-pooling blocks); it takes multiples of 32 only (its position embedding tiles an 8x8
# window): at 224 the last two maps are one window, at 448x224 two by one, at 256x288 and
# 160x320 padded, at 32x64 the last map (1x2) is smaller than a window.
EAGER_SIZES = {
    DAVIT: [(224, 224), (448, 224), (256, 288), (230, 199), (97, 65), (28, 28)],
    SAM2: [(224, 224), (448, 224), (256, 288), (160, 320), (32, 64), (96, 96)],
}
# A size beside case.size and case.size2 for the dynamic export.
ODD_SIZE = {DAVIT: (97, 65), SAM2: (160, 320)}
# The classes whose forward the patches replace, (module, class).
PATCHED = {DAVIT: [("timm.models.davit", "Stem"), ("timm.models.davit", "Downsample"),
                   ("timm.models.davit", "SpatialBlock")],
           SAM2: [("timm.models.hieradet_sam2", "MultiScaleBlock")]}
# Unpatched, neither dynamic export finished in 300 s; patched, 11 s and 14 s.


def _forwards(name: str) -> list[object]:
    import importlib

    return [getattr(importlib.import_module(m), c).forward for m, c in PATCHED[name]]


def test_ceil_to_is_timms_padded_size() -> None:
    for multiple in range(1, 9):
        for size in range(0, 100):
            assert _ceil_to(size, multiple) - size == (multiple - size % multiple) % multiple


@pytest.mark.parametrize("name", [DAVIT, SAM2])
def test_patch_equals_timm_in_eager_mode(name: str) -> None:
    check_patches_equal_library(name, EAGER_SIZES[name], lambda: _forwards(name))


@pytest.mark.parametrize("name", [DAVIT, SAM2])
def test_dynamic_size(name: str) -> None:
    check_one_graph_for_every_size(name, [ODD_SIZE[name]])
