"""`onnxport.quantize.bnb4`: NF4/FP4 weights as com.microsoft.MatMulBnb4 (transformers.js's
`dtype: "bnb4"`), run by ONNX Runtime.

The quantized graph must compute A @ W' exactly, where W' is the weight as the packed codes
and block scales represent it (`dequantize_bnb4`): that checks the layout ONNX Runtime reads
(transposed, flattened, high nibble first, absmax per block of 64). The levels are ONNX
Runtime's own (read back from its kernel), and W' equals what ONNX Runtime's quantizer
(`quantize_matmul_bnb4`) gives for the same weight.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxport.quantize.bnb4 import FP4, LEVELS, NF4, dequantize_bnb4, quantize_bnb4


def _model(w: np.ndarray, w2_nk: np.ndarray, bias: np.ndarray) -> onnx.ModelProto:
    """x[B, S, K] @ w[K, N] -> Gemm(., w2[N2, N]^T) + bias on the flattened rows."""
    k, n = w.shape
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Reshape", ["h", "rows"], ["h2"], name="flat"),
             helper.make_node("Gemm", ["h2", "w2", "b"], ["y"], name="gemm", transB=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, w2_nk.shape[0]])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2_nk, "w2"),
                     numpy_helper.from_array(bias, "b"),
                     numpy_helper.from_array(np.array([6, n], np.int64), "rows")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("quant_type", [NF4, FP4])
def test_matmul_bnb4_computes_the_packed_weights(quant_type: int) -> None:
    import onnx_ir as ir
    import onnxruntime as ort
    from onnxruntime.capi._pybind_state import quantize_matmul_bnb4

    from onnxport.quantize.bnb4 import quantize_bnb4_weights

    rng = np.random.default_rng(0)
    k, n, n2 = 96, 40, 24  # 40 * 96 values: blocks of 64 cross rows of B
    w = rng.standard_normal((k, n)).astype(np.float32)
    w2 = rng.standard_normal((n2, n)).astype(np.float32)
    bias = rng.standard_normal(n2).astype(np.float32)
    x = rng.standard_normal((2, 3, k)).astype(np.float32)

    model = ir.serde.deserialize_model(_model(w, w2, bias))
    done = quantize_bnb4_weights(model, block_size=64, quant_type=quant_type)
    proto = ir.serde.serialize_model(model)
    ops = [node.op_type for node in proto.graph.node]
    assert len(done) == 2 and ops.count("MatMulBnb4") == 2 and "Gemm" not in ops, ops
    got = ort.InferenceSession(proto.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    wq = dequantize_bnb4(*quantize_bnb4(w.T, quant_type=quant_type), n, k,
                         quant_type=quant_type).T
    w2q = dequantize_bnb4(*quantize_bnb4(w2, quant_type=quant_type), n2, n,
                          quant_type=quant_type)
    want = (x.reshape(6, k).astype(np.float64) @ wq) @ w2q.T + bias
    # float32 sums of 96 and 40 products, in another order than float64's
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert np.abs(wq - w).max() > 1e-3  # the weights did change (4 bits)

    # the values ONNX Runtime's own quantizer gives for the same weight
    packed = np.zeros((k * n + 1) // 2, np.uint8)
    absmax = np.zeros(-(-k * n // 64), np.float32)
    quantize_matmul_bnb4(packed, np.ascontiguousarray(w.T), absmax, 64, quant_type, n, k)
    np.testing.assert_array_equal(
        dequantize_bnb4(packed, absmax, n, k, quant_type=quant_type).T, wq)


@pytest.mark.parametrize("quant_type", [NF4, FP4])
def test_levels_are_onnxruntime_kernels(quant_type: int) -> None:
    """Codes 0..15 at absmax 1, read back through ONNX Runtime's MatMulBnb4 kernel."""
    import onnxruntime as ort

    packed = np.array([(2 * i << 4) | (2 * i + 1) for i in range(8)], np.uint8)
    node = helper.make_node("MatMulBnb4", ["a", "b", "s"], ["y"], domain="com.microsoft",
                            K=16, N=1, block_size=16, quant_type=quant_type)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 1])],
        initializer=[numpy_helper.from_array(packed, "b"),
                     numpy_helper.from_array(np.ones(1, np.float32), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    levels = session.run(None, {"a": np.eye(16, dtype=np.float32)})[0].ravel()
    np.testing.assert_array_equal(levels, LEVELS[quant_type])
