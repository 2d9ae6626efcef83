"""capture/trace_cost.py: torch.export's trace with the deferred bookkeeping gives the same
program (ops, sizes, strides, stack traces), and the ONNX model matches eager at other batch
sizes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport.capture import trace_cost
from onnxport.capture.trace_cost import cheaper_trace


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.conv(x)).relu()
        t = (x + y).flatten(2).transpose(1, 2)
        return t.reshape(x.shape[0], -1, 4).transpose(1, 2).reshape(x.shape)


class _Repeated(torch.nn.Module):
    """Repeated layers, views and a tuple-output op: cache hits of every kind of entry."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*[_Block() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.blocks(x)
        values, indices = h.flatten(1).topk(3, dim=1)
        return values, indices


def _program_facts(program: torch.export.ExportedProgram) -> list[tuple]:
    facts = []
    for node in program.graph.nodes:
        vals = node.meta.get("val")
        vals = vals if isinstance(vals, (tuple, list)) else (vals,)
        shapes = tuple((str(v.shape), str(v.stride()), v.dtype) for v in vals
                       if isinstance(v, torch.Tensor))
        facts.append((node.op, str(node.target), shapes, node.meta.get("stack_trace")))
    return facts


def _export(model: torch.nn.Module, x: torch.Tensor) -> torch.export.ExportedProgram:
    return torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},),
                               strict=False)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return _Repeated().eval()


def test_same_program_as_torch(model: torch.nn.Module) -> None:
    import torch.utils._traceback as tracebacks

    x = torch.randn(2, 4, 4, 4)
    stock = _export(model, x)
    with cheaper_trace():
        assert tracebacks._extract_symbolized_tb is trace_cost._frames_without_lines
        deferred = _export(model, x)
    assert _program_facts(deferred) == _program_facts(stock)
    assert any(node.meta.get("stack_trace") for node in deferred.graph.nodes)
    assert tracebacks._extract_symbolized_tb is not trace_cost._frames_without_lines


def test_export_matches_eager_at_other_batches(model: torch.nn.Module, tmp_path) -> None:
    x = torch.randn(2, 4, 4, 4)
    program = onnxport.export(model, (x,), dynamo=True,
                              dynamic_shapes=({0: torch.export.Dim("batch")},))
    path = tmp_path / "model.onnx"
    program.save(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        feed = torch.randn(batch, 4, 4, 4)
        with torch.no_grad():
            values, indices = model(feed)
        got = session.run(None, {session.get_inputs()[0].name: feed.numpy()})
        np.testing.assert_allclose(got[0], values.numpy(), rtol=1e-5, atol=1e-5)  # float32
        np.testing.assert_array_equal(got[1], indices.numpy())


def test_nested_contexts_restore_torch_once() -> None:
    import torch.utils._traceback as tracebacks

    stock = tracebacks._extract_symbolized_tb
    with cheaper_trace():
        patched = tracebacks._extract_symbolized_tb
        assert patched is not stock
        with cheaper_trace():
            assert tracebacks._extract_symbolized_tb is patched
        assert tracebacks._extract_symbolized_tb is patched  # the outer still open
    assert tracebacks._extract_symbolized_tb is stock
