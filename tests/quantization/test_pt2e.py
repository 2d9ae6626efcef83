"""PT2E static and dynamic quantization (torchao.quantization.pt2e), CNN and MLP, exported as
QDQ and checked against the quantized eager model (tolerances: `_helpers`)."""

from __future__ import annotations

import collections

import onnx
import pytest

import onnxport

from onnxport.passes.fuse_dynamic_quant import FuseDynamicQuantMatMulPass
from tests.quantization import _helpers as h

STATIC = ["x86", "xnnpack_per_tensor", "xnnpack_per_channel"]
DYNAMIC = ["x86_dynamic", "xnnpack_dynamic"]


def _ops(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("make", [h.cnn, h.mlp], ids=["cnn", "mlp"])
@pytest.mark.parametrize("flow", STATIC + DYNAMIC)
def test_pt2e_matches_eager(flow: str, make) -> None:
    model, example = make()
    quantized = h.pt2e(model, example, flow)
    result = h.check(quantized, example)
    proto = result["program"].model_proto
    ops = _ops(proto)
    if flow in STATIC:
        assert ops["DequantizeLinear"] >= 2
        assert ops["QuantizeLinear"] >= 2 and not ops["DynamicQuantizeLinear"]
        assert result["checked"], "no quantized activation was compared"
    else:
        # the default FuseDynamicQuantMatMulPass turns DQ -> Gemm into MatMulInteger; one per
        # quantized weight (XNNPACK's dynamic config leaves Conv in float)
        quantized_weights = 1 if (flow == "xnnpack_dynamic" and make is h.cnn) else 2
        assert ops["DequantizeLinear"] + ops["MatMulInteger"] >= quantized_weights
        assert ops["DynamicQuantizeLinear"] >= 1 and not ops["QuantizeLinear"]
    # nothing decomposed into float arithmetic
    assert not ops["Round"] and not ops["Div"]
    # weights are 8-bit initializers (XNNPACK's dynamic config leaves Conv in float)
    float_convs = 1 if (flow == "xnnpack_dynamic" and make is h.cnn) else 0
    # (the ORT target stores int8 weights as uint8 + 128, its exact U8U8 kernels: uint8_weights.py)
    ints = [t for t in proto.graph.initializer if t.data_type == onnx.TensorProto.UINT8
            and len(t.dims) >= 2]
    assert len(ints) == 2 - float_convs
    floats = [t.name for t in proto.graph.initializer
              if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 2]
    assert len(floats) == float_convs, floats


@pytest.mark.parametrize("flow", ["x86", "xnnpack_per_channel"])
def test_ort_fuses_static_qdq(flow: str) -> None:
    """ORT, with its graph optimizations, runs the CNN's Conv and Linear as integer kernels."""
    model, example = h.cnn()
    prog = h.check(h.pt2e(model, example, flow), example)["program"]
    ops = h.optimized_op_counts(prog.model_proto)
    assert ops["QLinearConv"] == 1, ops
    if flow == "xnnpack_per_channel":
        assert ops["QGemm"] == 1, ops
    assert not ops["Conv"] and not ops["FusedConv"], ops


@pytest.mark.parametrize("flow", DYNAMIC)
def test_dynamic_matmul_integer(flow: str) -> None:
    """FuseDynamicQuantMatMulPass (a default pass) turns DynamicQuantizeLinear -> DQ -> Gemm
    into MatMulInteger, which ORT runs as DynamicQuantizeMatMul; the output matches eager."""
    model, example = h.mlp()
    quantized = h.pt2e(model, example, flow)
    unfused = onnxport.export(quantized, example, optimize=False)
    assert _ops(unfused.model_proto)["MatMulInteger"] == 0
    prog = h.check(quantized, example)["program"]
    # it already ran in the default passes: running it again changes nothing
    assert not FuseDynamicQuantMatMulPass()(prog.model).modified
    proto = prog.model_proto
    ops = _ops(proto)
    assert ops["MatMulInteger"] == 2 and not ops["Gemm"] and not ops["DequantizeLinear"], ops
    h.check(quantized, example, program=prog)
    fused = h.optimized_op_counts(proto)
    assert fused["DynamicQuantizeMatMul"] + fused["MatMulIntegerToFloat"] == 2, fused


def test_unfolded_weight_quantized_at_export() -> None:
    """convert_pt2e(fold_quantize=False) leaves quantize(float weight) in the graph: the
    exporter quantizes it with the eager kernel, so the file holds int8, not float, weights."""
    model, example = h.mlp()
    quantized = h.pt2e(model, example, "xnnpack_per_channel", fold_quantize=False)
    prog = h.check(quantized, example)["program"]
    h.assert_weights_quantized(prog.model_proto, min_int8=2)
    assert _ops(prog.model_proto)["QuantizeLinear"] == 3  # activations only
