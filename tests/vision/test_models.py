"""A sample of the vision and diffusion suite (tests/vision/models.py), static and dynamic.

Each case is exported static (batch 2, run at the same inputs) and dynamic (`batch`, plus
`height`/`width` where the model allows another size, run at batch 3 and the second size),
compared with eager PyTorch in ONNX Runtime. The graph carries the case's input and output
names and the dim names. The whole suite, beside torch.onnx: benchmarks/bench_vision.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.vision.packages import import_vision

if import_vision() is None:
    pytest.skip("no torchvision release for this torch (tests/vision/packages.py)",
                allow_module_level=True)

import onnxruntime as ort

import onnxport
from onnxport.verify.compare import compare_outputs, flatten_outputs
from tests.helpers import check_model
from tests.vision.models import BATCH, BATCH2, SPATIAL, Case, by_name

SAMPLE = [
    "timm/resnet:test_resnet",
    "timm/vision_transformer:test_vit",
    "torchvision/mobilenet_v3_small",
    "segmentation/lraspp_mobilenet_v3_large",
    "video/r3d_18",
    "flow/raft_small",
    "diffusers/UNet2DConditionModel",
    "diffusers/AutoencoderKL.decode",
    "diffusers/SD3Transformer2DModel",
]
CASES = by_name()


def _run(program: onnxport.ONNXProgram, inputs: Any) -> list[torch.Tensor]:
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    leaves = [x for x in torch.utils._pytree.tree_leaves(inputs) if isinstance(x, torch.Tensor)]
    names = [i.name for i in session.get_inputs()]
    assert len(names) == len(leaves)
    out = session.run(None, {n: t.numpy() for n, t in zip(names, leaves)})
    return [torch.from_numpy(a) for a in out]


def _check(case: Case, model: torch.nn.Module, program: onnxport.ONNXProgram,
           inputs: Any) -> None:
    with torch.no_grad():
        expected = flatten_outputs(model(*inputs[0], **inputs[1]))
    rtol, atol = case.tolerance
    diffs = compare_outputs(expected, _run(program, inputs), rtol=rtol, atol=atol)
    assert all(d.passed for d in diffs), "\n".join(d.row() for d in diffs)


def _names(program: onnxport.ONNXProgram, case: Case, inputs: Any) -> dict[str, list[Any]]:
    graph = program.model.graph
    if case.output_names:
        assert [v.name for v in graph.outputs] == list(case.output_names)
    shapes = {v.name: [d if isinstance(d, int) else str(d) for d in v.shape]
              for v in graph.inputs}
    expected_inputs = list(case.input_names or
                           [k for k, v in inputs[1].items() if isinstance(v, torch.Tensor)])
    assert list(shapes) == expected_inputs
    return shapes


@pytest.mark.parametrize("name", SAMPLE)
def test_static(name: str) -> None:
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    inputs = case.inputs(BATCH, case.size)
    with torch.no_grad():
        program = onnxport.export(model, inputs[0], kwargs=inputs[1],
                                  **case.export_kwargs(*inputs, dynamic=False, spatial=False))
    check_model(program)
    for shape in _names(program, case, inputs).values():
        assert all(isinstance(d, int) for d in shape), shape
    _check(case, model, program, inputs)


@pytest.mark.parametrize("name", SAMPLE)
def test_dynamic(name: str) -> None:
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    inputs = case.inputs(BATCH, case.size)
    spatial = case.size2 is not None
    with torch.no_grad():
        program = onnxport.export(model, inputs[0], kwargs=inputs[1],
                                  **case.export_kwargs(*inputs, dynamic=True, spatial=spatial))
    check_model(program)
    shapes = _names(program, case, inputs)
    for input_name, axes in case.axes.items():
        for axis, dim in axes.items():
            if spatial or dim not in SPATIAL:
                assert shapes[input_name][axis] == dim, (input_name, shapes[input_name])
    _check(case, model, program, case.inputs(BATCH2, case.size2 if spatial else case.size))


def test_lumina2_captions_of_different_lengths() -> None:
    # Lumina2 packs each sample's caption and image tokens with Python loops over the batch;
    # the capture-only patch (onnxport.capture.library_patches) gathers them instead. It must
    # equal diffusers' forward in eager mode, and the exported graph eager PyTorch, with
    # captions of different lengths (diffusers' masked path) and equal ones (its unmasked one).
    from onnxport.capture.library_patches import library_patches

    case = CASES["diffusers/Lumina2Transformer2DModel"]
    torch.manual_seed(0)
    model = case.build()

    def inputs(lengths: list[int], size: tuple[int, int]) -> tuple[tuple[()], dict[str, Any]]:
        kwargs = case.inputs(len(lengths), size)[1]
        mask = torch.arange(8)[None] < torch.tensor(lengths)[:, None]
        return (), {**kwargs, "encoder_attention_mask": mask}

    for lengths in ([8, 8], [5, 5], [3, 8], [6, 1]):
        kwargs = inputs(lengths, (16, 16))[1]
        with torch.no_grad():
            expected = model(**kwargs)[0]
            with library_patches():
                # Equal up to float32 rounding: attention over the gathered layout sums in
                # another order on some CPUs (AVX2: 1-2 ulps, 4.8e-7 on values of ~2).
                torch.testing.assert_close(model(**kwargs)[0], expected, rtol=1e-6, atol=1e-6,
                                           msg=str(lengths))
    example = case.inputs(BATCH, case.size)
    with torch.no_grad():
        program = onnxport.export(model, example[0], kwargs=example[1],
                                  **case.export_kwargs(*example, dynamic=True, spatial=True))
    for lengths, size in (([8, 3, 6], (20, 24)), ([8, 8], (16, 16)), ([4], (12, 16))):
        _check(case, model, program, inputs(lengths, size))


def test_dims_stay_dynamic_where_torch_constraint_solver_gives_up() -> None:
    # S3D with a dynamic height and width: torch.export's constraint solver hands sympy a guard
    # with floor divisions of the size it cannot reduce (NotImplementedError, which aborted
    # the export), and a contiguity decision (the pooled map being 1x1) guards the size too.
    # Neither limits the graph: exported at 224, it matches eager at 256 (the second size).
    # The guard the solver gave up on is named in a warning.
    with pytest.warns(UserWarning, match="constraint solver cannot reduce"):
        test_dynamic("video/s3d")
