"""FuseWeightDequantPass: Cast(int weight) [- zero point] * scale as DequantizeLinear.

Tolerance: 1e-5 absolute (as test_weight_only.py): DequantizeLinear computes the same
`(W - zero_point) * scale` in float32; moving torchao's output scale inside the sum changes
float32 rounding only. A wrong axis, zero point or transposition moves outputs by whole weights.
ONNX Runtime's own optimizer turns DequantizeLinear + MatMul into MatMulNBits with
`session.qdq_matmulnbits_accuracy_level` 4 by default (activations quantized to int8 per
block, not exact): the sessions here set it to 0, the exact float path.
Not a default pass: ORT folds Cast(int8 initializer) into a float weight at load, so the
Cast form runs faster in ORT (bench_quantized.py, docs/quantization.md).
"""

from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport.passes import run_passes
from onnxport.passes.fuse_weight_dequant import FuseWeightDequantPass
from tests.quantization import _helpers as h


def _ops(prog: onnxport.ONNXProgram) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in prog.model.graph)


def _check(prog: onnxport.ONNXProgram, model: torch.nn.Module, x: torch.Tensor) -> None:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    session = ort.InferenceSession(prog.model_proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    got = h.run_ort(session, [x])[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 64), (2, 3, 64)], ids=["2d", "3d"])
def test_int8_weight_only_as_dequantize_linear(shape) -> None:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8)).eval()
    quantize_(model, Int8WeightOnlyConfig())
    x = torch.randn(*shape)
    prog = onnxport.export(model, (x,))
    assert _ops(prog)["Cast"] == 2 and not _ops(prog)["DequantizeLinear"]
    assert FuseWeightDequantPass()(prog.model).modified
    ops = _ops(prog)
    assert ops["DequantizeLinear"] == 2 and not ops["Cast"] and not ops["Mul"], ops
    dq = [n for n in prog.model.graph if n.op_type == "DequantizeLinear"]
    assert all(n.inputs[0].dtype.name == "INT8" for n in dq)
    assert [n.attributes["axis"].value for n in dq] == [0, 0]  # per output row of W[N, K]
    _check(prog, model, x)


class HandDequant(torch.nn.Module):
    """An int8 layer written by hand: (W - zero_point) * scale, per row or per tensor."""

    def __init__(self, per_row: bool, transpose_int: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.register_buffer("wq", torch.randint(-128, 128, (16, 24), dtype=torch.int8))
        self.register_buffer("scale", torch.rand(16, 1) * 0.01 + 0.001 if per_row
                             else torch.tensor(0.004))
        self.register_buffer("zero", torch.randint(-5, 5, (16, 1)).float() if per_row
                             else torch.tensor(3.0))
        self.transpose_int = transpose_int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.transpose_int:  # dequantize the [K, N] view: scale/zero point along axis 1
            w = (self.wq.t().float() - self.zero.t()) * self.scale.t()
            return x @ w
        w = (self.wq.float() - self.zero) * self.scale
        return x @ w.t()


@pytest.mark.parametrize("per_row", [True, False], ids=["per-row", "per-tensor"])
@pytest.mark.parametrize("transpose_int", [False, True], ids=["W", "W.t()"])
def test_hand_written_dequantize(per_row: bool, transpose_int: bool) -> None:
    model = HandDequant(per_row, transpose_int).eval()
    x = torch.randn(5, 24)
    prog = onnxport.export(model, (x,))
    run_passes(prog.model, [FuseWeightDequantPass()])
    ops = _ops(prog)
    assert ops["DequantizeLinear"] == 1 and not ops["Cast"] and not ops["Sub"], ops
    _check(prog, model, x)


def test_not_matched_when_scale_varies_along_k() -> None:
    """A scale applied after the MatMul must vary along its output columns; a [K]-shaped
    scale on the weight's input axis with a MatMul between is not a dequantization."""

    class Rowwise(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("wq", torch.randint(-128, 128, (8, 8), dtype=torch.int8))
            self.register_buffer("s", torch.rand(8, 1) + 0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x @ self.wq.float()) * self.s  # scales rows of the output, not columns

    model = Rowwise().eval()
    x = torch.randn(8, 8) * 0.01
    prog = onnxport.export(model, (x,))
    assert not FuseWeightDequantPass()(prog.model).modified
    _check(prog, model, x)
