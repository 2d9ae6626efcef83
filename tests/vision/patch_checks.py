"""The checks the capture-only patches of vision models share: the patched model equals the
library's in eager mode, and one dynamic export of a suite case, with no warning that a dim
holds only near the example, matches eager PyTorch at every size."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import onnxruntime as ort
import torch

import onnxport
from onnxport.capture.library_patches import library_patches
from onnxport.verify.compare import compare_outputs
from tests.vision.models import BATCH, BATCH2, by_name

# What onnxport says when a dim holds only near the example: kept to a span, capped, or left
# to a guard torch's solver could not reduce.
NARROWED = ("branches on", "capped the size", "cannot reduce")


def check_one_graph_for_every_size(name: str, sizes: Sequence[tuple[int, ...]]) -> None:
    """Export case `name` at its size with batch, height and width dynamic; run the graph at
    batch 3 and case.size, case.size2 and `sizes` against eager PyTorch."""
    case = by_name()[name]
    torch.manual_seed(0)
    model = case.build()
    inputs = case.inputs(BATCH, case.size)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        program = onnxport.export(model, inputs[0], kwargs=inputs[1],
                                  **case.export_kwargs(*inputs, dynamic=True, spatial=True))
    assert not [str(w.message) for w in caught if any(x in str(w.message) for x in NARROWED)]
    shape = [d if isinstance(d, int) else str(d) for d in program.model.graph.inputs[0].shape]
    assert shape == ["batch", 3, *shape[2:-2], "height", "width"]
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    rtol, atol = case.tolerance
    for size in (case.size, case.size2, *sizes):
        x = case.inputs(BATCH2, size)[0][0]
        with torch.no_grad():
            expected = model(x)
        got = torch.from_numpy(session.run(None, {input_name: x.numpy()})[0])
        diffs = compare_outputs([expected], [got], rtol=rtol, atol=atol)
        assert all(d.passed for d in diffs), (size, "\n".join(d.row() for d in diffs))


def check_patches_equal_library(name: str, sizes: Sequence[tuple[int, ...]],
                                forwards: Callable[[], list[Any]]) -> None:
    """Case `name`'s model gives the same output, bit for bit, with the capture-only patches
    applied as without, at each of `sizes`; `forwards()` reads the patched functions, which
    `library_patches()` replaces and restores."""
    case = by_name()[name]
    torch.manual_seed(0)
    model = case.build()
    originals = forwards()
    for size in sizes:
        x = case.inputs(BATCH, size)[0][0]
        with torch.no_grad():
            expected = model(x)
            with library_patches():
                assert all(p is not o for p, o in zip(forwards(), originals))
                got = model(x)
        assert forwards() == originals
        assert torch.equal(got, expected), (size, (got - expected).abs().max().item())
