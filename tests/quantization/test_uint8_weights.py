"""Uint8WeightsPass (ONNX Runtime target) and the default target's faithful int8 weights."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

import onnxport
from onnxport.passes.onnxruntime.uint8_weights import Uint8WeightsPass

from . import _helpers as h


def _graph() -> onnx.ModelProto:
    """DQ(W) twice (per channel with a zero point, per tensor without), DQ of a graph input,
    DQ of an int4 weight, MatMulInteger(a, Transpose(W2), a_zp, Constant b_zp)."""
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (4, 3), dtype=np.int8)
    w2 = rng.integers(-128, 128, (5, 4), dtype=np.int8)
    w4 = rng.integers(-8, 8, (4, 3)).astype(np.int8)
    init = [
        onnx.numpy_helper.from_array(w, "W"),
        onnx.numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32), "s_ch"),
        onnx.numpy_helper.from_array(np.array([0, -3, 5], np.int8), "z_ch"),
        onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        onnx.helper.make_tensor("W4", onnx.TensorProto.INT4, [4, 3], w4.flatten().tolist()),
        onnx.numpy_helper.from_array(w2, "W2"),
        onnx.numpy_helper.from_array(np.array(3, np.uint8), "a_zp"),
    ]
    nodes = [
        onnx.helper.make_node("DequantizeLinear", ["W", "s_ch", "z_ch"], ["d1"], axis=1),
        onnx.helper.make_node("DequantizeLinear", ["W", "s"], ["d2"]),
        onnx.helper.make_node("DequantizeLinear", ["Win", "s"], ["d3"]),
        onnx.helper.make_node("DequantizeLinear", ["W4", "s"], ["d4"]),
        onnx.helper.make_node("Constant", [], ["b_zp"],
                              value=onnx.numpy_helper.from_array(np.array(-2, np.int8))),
        onnx.helper.make_node("Transpose", ["W2"], ["W2t"], perm=[1, 0]),
        onnx.helper.make_node("MatMulInteger", ["a", "W2t", "a_zp", "b_zp"], ["mm"]),
    ]
    f32 = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(
        nodes, "g",
        [onnx.helper.make_tensor_value_info("Win", onnx.TensorProto.INT8, [4, 3]),
         onnx.helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, [2, 4])],
        [onnx.helper.make_tensor_value_info(n, f32, [4, 3]) for n in ("d1", "d2", "d3", "d4")]
        + [onnx.helper.make_tensor_value_info("mm", onnx.TensorProto.INT32, [2, 5])],
        init)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])


def test_pass_on_hand_built_graph() -> None:
    proto = _graph()
    rng = np.random.default_rng(1)
    feed = {"Win": rng.integers(-128, 128, (4, 3), dtype=np.int8),
            "a": rng.integers(0, 256, (2, 4), dtype=np.uint8)}
    want = h.ort_session(proto, optimize=False).run(None, feed)
    model = ir.serde.deserialize_model(proto)
    assert Uint8WeightsPass()(model).modified
    assert not Uint8WeightsPass()(model).modified  # nothing int8 left to rewrite
    nodes = {n.outputs[0].name: n for n in model.graph}
    d1, d2, d3, d4, mm = (nodes[k] for k in ("d1", "d2", "d3", "d4", "mm"))
    # both DQs of W read one shared uint8 initializer; the int8 W is gone
    assert d1.inputs[0] is d2.inputs[0] and d1.inputs[0].dtype == ir.DataType.UINT8
    assert "W" not in model.graph.initializers and "W2" not in model.graph.initializers
    np.testing.assert_array_equal(d1.inputs[2].const_value.numpy(), [128, 125, 133])
    assert d2.inputs[2].dtype == ir.DataType.UINT8 and d2.inputs[2].shape.dims == ()
    # a graph input and an int4 weight are left alone
    assert d3.inputs[0].name == "Win" and len(d3.inputs) == 2
    assert d4.inputs[0].dtype == ir.DataType.INT4 and len(d4.inputs) == 2
    # MatMulInteger: Transpose folded into the uint8 weight, zero point + 128
    assert mm.inputs[1].dtype == ir.DataType.UINT8 and mm.inputs[1].shape.dims == (4, 5)
    assert int(mm.inputs[3].const_value.numpy()) == 126
    assert not [n for n in model.graph if n.op_type in ("Transpose", "Constant")]
    got = h.ort_session(ir.serde.serialize_model(model), optimize=False).run(None, feed)
    for a, b in zip(want[:4], got[:4]):  # the dequantized values are unchanged
        np.testing.assert_array_equal(a, b)
    # the integer product is exact (ORT's U8S8 MatMulInteger saturates pair sums at int16 on
    # AVX2 CPUs without VNNI, so the unrewritten graph's output is not the reference here)
    w2 = onnx.numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == "W2"))
    exact = (feed["a"].astype(np.int64) - 3) @ (w2.T.astype(np.int64) + 2)
    np.testing.assert_array_equal(got[4], exact)


@pytest.mark.parametrize("flow", ["x86", "xnnpack_per_channel", "xnnpack_dynamic"])
def test_default_target_keeps_int8_weights(flow: str) -> None:
    """The default target writes the symmetric int8 weights the user quantized (zero point
    0, what TensorRT's explicit quantization requires) and matches eager in ORT at
    ORT_ENABLE_BASIC (no QDQ fusion: the reference QDQ semantics); the ORT target's weights
    are uint8. The dynamic flow is compared without onnxport's passes: its default
    FuseDynamicQuantMatMulPass writes a U8S8 MatMulInteger, which ORT's kernel computes with
    saturating int16 pair sums on AVX2 CPUs without VNNI even with no graph optimization."""
    model, example = h.mlp()
    quantized = h.pt2e(model, example, flow)
    dynamic = flow.endswith("dynamic")
    h.check(quantized, example, target="onnx", optimize=not dynamic,
            level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    proto = onnxport.export(quantized, example).model_proto
    weights = [t for t in proto.graph.initializer if len(t.dims) == 2
               and t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)]
    assert len(weights) == 2 and all(t.data_type == onnx.TensorProto.INT8 for t in weights)
    consumers = {i: n for n in proto.graph.node for i in n.input}
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    inits.update({n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t)
                  for n in proto.graph.node if n.op_type == "Constant"})
    for t in weights:
        node = consumers[t.name]
        zero = inits.get(node.input[-1]) if len(node.input) > (2 if node.op_type ==
                                                                 "DequantizeLinear" else 3) else None
        assert zero is None or not np.any(zero), (t.name, zero)
    ort_proto = onnxport.export(quantized, example, target="onnxruntime").model_proto
    assert not [t.name for t in ort_proto.graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert len([t for t in ort_proto.graph.initializer if len(t.dims) == 2
                and t.data_type == onnx.TensorProto.UINT8]) == 2
