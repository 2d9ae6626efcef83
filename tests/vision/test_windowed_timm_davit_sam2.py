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

import warnings

import pytest
import torch

from tests.vision.packages import import_vision

if import_vision() is None:
    pytest.skip("no torchvision release for this torch (tests/vision/packages.py)",
                allow_module_level=True)

import onnxruntime as ort

import onnxport
from onnxport.capture.library_patches import library_patches
from onnxport.capture.library_patches.timm import _ceil_to
from onnxport.verify.compare import compare_outputs
from tests.vision.models import BATCH, BATCH2, by_name

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
    case = by_name()[name]
    torch.manual_seed(0)
    model = case.build()
    originals = _forwards(name)
    for size in EAGER_SIZES[name]:
        x = case.inputs(BATCH, size)[0][0]
        with torch.no_grad():
            expected = model(x)
            with library_patches():
                assert all(p is not o for p, o in zip(_forwards(name), originals))
                got = model(x)
        assert _forwards(name) == originals
        assert torch.equal(got, expected), (size, (got - expected).abs().max().item())


@pytest.mark.parametrize("name", [DAVIT, SAM2])
def test_dynamic_size(name: str) -> None:
    case = by_name()[name]
    torch.manual_seed(0)
    model = case.build()
    inputs = case.inputs(BATCH, case.size)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        program = onnxport.export(model, inputs[0], kwargs=inputs[1],
                                  **case.export_kwargs(*inputs, dynamic=True, spatial=True))
    # the graph holds at every size: no dim kept dynamic only near the example or capped
    words = ("branches on", "capped the size", "cannot reduce")
    assert not [w for w in caught if any(x in str(w.message) for x in words)]
    shape = [d if isinstance(d, int) else str(d) for d in program.model.graph.inputs[0].shape]
    assert shape == ["batch", 3, "height", "width"]
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rtol, atol = case.tolerance
    for size in (case.size, case.size2, ODD_SIZE[name]):
        x = case.inputs(BATCH2, size)[0][0]
        with torch.no_grad():
            expected = model(x)
        got = torch.from_numpy(session.run(None, {"images": x.numpy()})[0])
        diffs = compare_outputs([expected], [got], rtol=rtol, atol=atol)
        assert all(d.passed for d in diffs), (size, "\n".join(d.row() for d in diffs))
