"""Fake quantization (QAT, torch.ao FakeQuantize modules in eval mode) exported as QDQ.

Tolerance: the output of the Linear that reads the fake-quantized activation, within
`scale_a * max_j sum_i |W_ji|` (+1e-5), as in `_helpers`: ONNX quantizes `round(x / scale)`,
eager `round(x * (1 / scale))`, so an activation at a rounding tie may move by one step (each
element at most one step; the weight is quantized at export time by the eager kernel, exactly).
Fake-quantized values checked directly: within one step of their scale.
"""

from __future__ import annotations

import collections
import os
import tempfile

import numpy as np
import onnx
import pytest
import torch
import torch.ao.quantization as tq

import onnxport
from tests.quantization import _helpers as h


class FQLinear(torch.nn.Module):
    """A Linear whose input and weight pass through fake-quantize modules (torch.ao QAT)."""

    def __init__(self, fused: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 8)
        if fused:
            self.fq_act = tq.FusedMovingAvgObsFakeQuantize()
            self.fq_w = tq.FusedMovingAvgObsFakeQuantize(
                observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128,
                quant_max=127, dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
        else:
            self.fq_act = tq.FakeQuantize()
            self.fq_w = tq.FakeQuantize(observer=tq.PerChannelMinMaxObserver, quant_min=-128,
                                        quant_max=127, dtype=torch.qint8,
                                        qscheme=torch.per_channel_symmetric)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(self.fq_act(x), self.fq_w(self.fc.weight), self.fc.bias)


def _trained(fused: bool) -> FQLinear:
    model = FQLinear(fused).train()
    for _ in range(4):
        model(torch.randn(4, 16))
    model.eval()
    model.apply(tq.disable_observer)
    return model


def _export(model: torch.nn.Module, x: torch.Tensor, dynamo: bool) -> onnx.ModelProto:
    if dynamo:
        return onnxport.export(model, (x,)).model_proto
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        onnxport.export(model, (x,), path, dynamo=False)
        return onnx.load(path)


def _tolerance(model: FQLinear) -> float:
    weight = model.fq_w(model.fc.weight).detach()
    return float(model.fq_act.scale.reshape(-1)[0]) * float(weight.abs().sum(-1).max()) + 1e-5


@pytest.mark.parametrize("fused,dynamo", [(False, False), (True, True), (True, False)],
                         ids=["FakeQuantize-torchscript", "FusedMovingAvg-dynamo",
                              "FusedMovingAvg-torchscript"])
def test_fake_quantize_modules_export_as_qdq(fused: bool, dynamo: bool) -> None:
    model = _trained(fused)
    x = torch.randn(4, 16)
    proto = _export(model, x, dynamo)
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert ops["QuantizeLinear"] == 1 and ops["DequantizeLinear"] == 2, ops  # weight folded
    assert not ops["Round"] and not ops["Div"] and not ops["Mul"], ops
    h.assert_weights_quantized(proto, min_int8=1)
    dq_w = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"
            and any(a.name == "axis" for a in n.attribute)]
    assert len(dq_w) == 1  # per channel
    for seed in range(3):
        torch.manual_seed(seed)
        xs = torch.randn(4, 16) * 2
        got = h.run_ort(h.ort_session(proto), [xs])[0]
        with torch.no_grad():
            want = model(xs).numpy()
        assert float(np.abs(got - want).max()) <= _tolerance(model)


class FunctionalFQ(torch.nn.Module):
    def __init__(self, qmin: int, qmax: int, zero_point: int) -> None:
        super().__init__()
        self.qmin, self.qmax, self.zero_point = qmin, qmax, zero_point

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(x, 0.1, self.zero_point, self.qmin, self.qmax)


@pytest.mark.parametrize("qmin,qmax,zp", [(0, 255, 128), (-128, 127, 0), (0, 15, 3), (-8, 7, 0)],
                         ids=["uint8", "int8", "uint4-range", "int4-range"])
def test_fake_quantize_per_tensor_values(qmin: int, qmax: int, zp: int) -> None:
    """Values within one step (0.1) of eager's, at most 1% of them off; a narrower range than
    the dtype's is a Clip on the integers."""
    model = FunctionalFQ(qmin, qmax, zp)
    x = torch.randn(64, 33) * 2
    prog = onnxport.export(model, (x,))
    ops = collections.Counter(n.op_type for n in prog.model.graph)
    assert ops["QuantizeLinear"] == 1 and ops["DequantizeLinear"] == 1
    assert ops["Clip"] == (1 if (qmax - qmin) < 255 else 0), ops
    got = h.run_ort(h.ort_session(prog.model_proto), [x])[0]
    diff = np.abs(got - model(x).numpy())
    assert diff.max() <= 0.1 + 1e-6 and (diff > 1e-6).mean() <= 0.01


def test_fake_quantize_per_channel_activation() -> None:
    class PerChannel(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale = torch.linspace(0.05, 0.2, 6)
            zero = torch.arange(6, dtype=torch.int32) - 2
            return torch.fake_quantize_per_channel_affine(x, scale, zero, 1, -128, 127)

    x = torch.randn(4, 6, 5) * 3
    prog = onnxport.export(PerChannel(), (x,))
    got = h.run_ort(h.ort_session(prog.model_proto), [x])[0]
    diff = np.abs(got - PerChannel()(x).numpy())
    assert diff.max() <= 0.2 + 1e-6 and (diff > 1e-6).mean() <= 0.01


def test_enabled_observer_refused() -> None:
    """With its observer on, FusedMovingAvgObsFakeQuantize updates its scale on every call:
    a typed error names the fix."""
    model = FQLinear(fused=True).eval()
    with pytest.raises(onnxport.OnnxExporterError, match="disable_observer"):
        onnxport.export(model, (torch.randn(4, 16),))


def test_prepare_qat_pt2e_eval_exports_as_qdq() -> None:
    """A PT2E QAT model (prepare_qat_pt2e, a training step, then eval with observers off)
    exports as QDQ and matches eager; so does its convert_pt2e form."""
    from torchao.quantization.pt2e import disable_observer, move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    model, example = h.mlp()
    captured = torch.export.export(model.train(), example).module()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_qat=True))
    prepared = prepare_qat_pt2e(captured, quantizer)
    for _ in range(3):
        prepared(torch.randn_like(example[0]))
    move_exported_model_to_eval(prepared)
    prepared.apply(disable_observer)  # torchao's fake-quantize modules
    x = torch.randn_like(example[0])
    # the ONNX Runtime target: uint8 weights, so ORT's fused kernels are its exact U8U8 ones
    prog = onnxport.export(prepared, (x,), target="onnxruntime")
    ops = collections.Counter(n.op_type for n in prog.model.graph)
    assert ops["QuantizeLinear"] >= 2 and ops["DequantizeLinear"] >= 4, ops
    assert not [t.name for t in prog.model_proto.graph.initializer
                if t.data_type == onnx.TensorProto.INT8], "int8 weight left in the ORT target"
    h.assert_weights_quantized(prog.model_proto, min_int8=2)
    got = h.run_ort(h.ort_session(prog.model_proto), [x])[0]   # ORT's QGemm kernels
    with torch.no_grad():
        want = prepared(x).numpy()
    # the fc2 output: one step of its input's scale times the weight's largest row sum
    fq = [m for m in prepared.modules() if hasattr(m, "observer_enabled")]
    tol = max(float(m.scale.max()) for m in fq) * float(model.fc2.weight.abs().sum(-1).max()) \
        * 1.1 + 1e-5
    assert float(np.abs(got - want).max()) <= tol
    converted = convert_pt2e(prepared)
    got_c = h.run_ort(h.ort_session(onnxport.export(converted, (x,), target="onnxruntime")
                                    .model_proto), [x])[0]
    with torch.no_grad():
        assert float(np.abs(got_c - converted(x).numpy()).max()) <= tol
    # the default target keeps the symmetric int8 weights (zero point 0) the user quantized;
    # it matches eager in ORT without its fused integer kernels (the reference QDQ semantics)
    default = onnxport.export(prepared, (x,)).model_proto
    weights = [t for t in default.graph.initializer if t.data_type == onnx.TensorProto.INT8
               and len(t.dims) == 2]
    assert len(weights) == 2 and not [t for t in default.graph.initializer
                                      if t.data_type == onnx.TensorProto.UINT8 and len(t.dims) == 2]
    got_d = h.run_ort(h.ort_session(default, optimize=False), [x])[0]
    assert float(np.abs(got_d - want).max()) <= tol


def test_torchao_qat_weight_fake_quant() -> None:
    """torchao QAT with a weight fake quantizer only (QATConfig prepare, IntxFakeQuantizeConfig
    int4 per group): the weight's qparams are chosen at export by the eager op and
    FuseFakeQuantPass stores the fake-quantized weight as integers + DequantizeLinear; the
    output matches eager within 1e-5 (float32 summation order). Activation fake quantizers:
    test_torchao_qat.py."""
    from torchao.quantization import quantize_
    from torchao.quantization.qat import IntxFakeQuantizeConfig, QATConfig

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    quantize_(model, QATConfig(weight_config=IntxFakeQuantizeConfig(
        torch.int4, group_size=32, is_symmetric=True), step="prepare"))
    model.eval()
    x = torch.randn(4, 64)
    prog = onnxport.export(model, (x,))
    h.assert_weights_quantized(prog.model_proto, min_int8=2)  # int4 values in int8 (opset 18)
    got = h.run_ort(h.ort_session(prog.model_proto), [x])[0]
    with torch.no_grad():
        want = model(x).numpy()
        plain = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(
            x, model[0].weight, model[0].bias)), model[2].weight, model[2].bias).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert np.abs(want - plain).max() > 1e-3  # the fake quantization is really there
