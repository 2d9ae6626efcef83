"""onnxport.quantize.quantize_weights: round-to-nearest weights in blocks on an onnx-ir model.

The integers and scales are checked against RTN's definition written again here, block by
block in torch; the quantized graph is checked in ONNX Runtime against the float model
carrying the dequantized weights: the same float computation, so 1e-5 (float32 summation
order) holds, and a wrong scale, axis, zero point or layout would miss it by far more.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch

import onnxport
from onnxport.errors import QuantizationError
from onnxport.quantize import dequantize_blocks, quantize_blocks, quantize_weights


def _rtn_reference(w: torch.Tensor, bits: int, block: int, symmetric: bool) -> torch.Tensor:
    """RTN's definition, one block of one column at a time: the dequantized [K, N] weight."""
    k, n = w.shape
    block = block or k
    half = 2 ** (bits - 1)
    out = torch.zeros_like(w)
    for col in range(n):
        for start in range(0, k, block):
            v = w[start:start + block, col]
            if symmetric:
                m = v[v.abs().argmax()]
                s = m / -half
                q = torch.zeros_like(v) if s == 0 else torch.clamp(torch.round(v / s), -half,
                                                                     half - 1)
                out[start:start + block, col] = q * s
            else:
                lo, hi = torch.clamp(v.min(), max=0), torch.clamp(v.max(), min=0)
                s = (hi - lo) / (2 * half - 1)  # float32 arithmetic, as the quantizer
                if s == 0:
                    continue
                z = torch.clamp(torch.round(-lo / s), 0, 2 * half - 1)
                q = torch.clamp(torch.round(v / s) + z, 0, 2 * half - 1)
                out[start:start + block, col] = (q - z) * s
    return out


@pytest.mark.parametrize("bits,block,symmetric", [(4, 32, True), (4, 32, False), (4, 16, True),
                                                  (8, 32, True), (8, 0, True), (8, 0, False)])
def test_quantize_blocks_is_rtn(bits: int, block: int, symmetric: bool) -> None:
    torch.manual_seed(0)
    w = torch.randn(72, 24)  # K = 72: a partial last block of 8 (block 32) or 8 (16)
    w[:32, 3] = 0  # a block of zeros: scale 0, dequantized exactly 0
    q, scale, zero = quantize_blocks(w.numpy(), bits=bits, block_size=block,
                                     symmetric=symmetric)
    half = 2 ** (bits - 1)
    lo, hi = (-half, half - 1) if symmetric else (0, 2 * half - 1)
    assert q.min() >= lo and q.max() <= hi and q.min() < 0 if symmetric else q.min() >= 0
    assert (zero is None) == symmetric
    assert scale.shape == ((-(-72 // block), 24) if block else (24,))
    got = dequantize_blocks(q, scale, zero, block)
    want = _rtn_reference(w, bits, block, symmetric).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
    assert np.all(got[:32, 3] == 0)
    # each value within half a step of its block's scale, unless clipped at the top (+2^(b-1))
    step = np.abs(np.repeat(scale.reshape(-1, 24), block or 72, 0)[:72])
    err = np.abs(got - w.numpy())
    assert np.mean(err <= step / 2 + 1e-7) > 0.97 and np.all(err <= step + 1e-6)


class _MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 96)
        self.down = torch.nn.Linear(96, 48, bias=False)
        self.emb = torch.nn.Embedding(10, 64)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x + self.emb(ids))))


def _session(model: ir.Model) -> ort.InferenceSession:
    """ONNX Runtime on `model`, exactly: ORT 1.2x fuses a blocked 4-bit DequantizeLinear +
    MatMul into MatMulNBits at load with accuracy level 4 by default (activations quantized
    to int8), which is not the float computation the graph states."""
    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    proto = ir.serde.serialize_model(model)
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = _session(model)
    return session.run(None, feeds)[0]


def _dequantized_copy(module: _MLP, bits: int, block: int, symmetric: bool) -> _MLP:
    """The float model with each Linear's weight replaced by its RTN dequantization."""
    twin = _MLP()
    twin.load_state_dict(module.state_dict())
    for lin in (twin.up, twin.down):
        w = lin.weight.detach().T.numpy()  # [K, N]
        q, s, z = quantize_blocks(w, bits=bits, block_size=block, symmetric=symmetric)
        lin.weight.data = torch.from_numpy(dequantize_blocks(q, s, z, block).T.copy())
    return twin.eval()


@pytest.mark.parametrize("bits,block,symmetric,target", [
    (4, 32, True, "onnx"), (4, 32, False, "onnx"), (8, 32, True, "onnx"), (8, 0, True, "onnx"),
    (4, 32, True, "onnxruntime"), (4, 32, False, "onnxruntime")])
def test_quantized_graph_matches_dequantized_float_model(bits: int, block: int, symmetric: bool,
                                                         target: str) -> None:
    torch.manual_seed(1)
    module = _MLP().eval()
    ids, x = torch.randint(0, 10, (3, 5)), torch.randn(3, 5, 64)
    program = onnxport.export(module, (ids, x), opset_version=21 if block or bits == 4 else 20,
                              target=target, dynamo=True)
    done = quantize_weights(program.model, bits=bits, block_size=block, symmetric=symmetric)
    assert sorted(w for names in done.weights.values() for w in names) == ["down.weight",
                                                                           "up.weight"]
    if target == "onnxruntime":
        from onnxport.passes.onnxruntime.matmul_nbits import FuseMatMulNBitsPass

        FuseMatMulNBitsPass(bits=(4,))(program.model)
    ops = collections.Counter(n.op_type for n in program.model.graph)
    if target == "onnxruntime":
        assert ops["MatMulNBits"] == 2 and ops["DequantizeLinear"] == 0, ops
    else:
        assert ops["DequantizeLinear"] == 2, ops
        qtypes = {v.dtype for v in program.model.graph.initializers.values()
                  if v.dtype in (ir.DataType.INT4, ir.DataType.UINT4, ir.DataType.INT8,
                                 ir.DataType.UINT8)}
        assert qtypes == {{(4, True): ir.DataType.INT4, (4, False): ir.DataType.UINT4,
                           (8, True): ir.DataType.INT8}[(bits, symmetric)]}
    assert "emb.weight" in program.model.graph.initializers  # the embedding stays float
    assert "up.weight" not in program.model.graph.initializers
    got = _run(program.model, {"ids": ids.numpy(), "x": x.numpy()})
    with torch.no_grad():
        want = _dequantized_copy(module, bits, block, symmetric)(ids, x).numpy()
        plain = module(ids, x).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert np.abs(plain - want).max() > (1e-3 if bits == 4 else 1e-5)  # it is quantized


def test_fused_qkv_weight_and_gemm() -> None:
    """A Concat of transposed initializers along N (the ORT target's fused Q/K/V weight) and a
    Gemm with transB: quantized as the separate [K, N] weights would be."""
    rng = np.random.default_rng(0)
    wq, wk = rng.standard_normal((40, 64), np.float32), rng.standard_normal((24, 64), np.float32)
    wg = rng.standard_normal((16, 64), np.float32)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([3, 64]))
    inits = {n: ir.Value(name=n, type=ir.TensorType(ir.DataType.FLOAT),
                         shape=ir.Shape(list(a.shape)), const_value=ir.tensor(a, name=n))
             for n, a in (("wq", wq), ("wk", wk), ("wg", wg))}
    tq = ir.node("Transpose", [inits["wq"]], attributes={"perm": [1, 0]})
    tk = ir.node("Transpose", [inits["wk"]], attributes={"perm": [1, 0]})
    cat = ir.node("Concat", [tq.outputs[0], tk.outputs[0]], attributes={"axis": 1})
    mm = ir.node("MatMul", [x, cat.outputs[0]], name="qkv")
    gemm = ir.node("Gemm", [x, inits["wg"]], attributes={"transB": 1}, name="gemm")
    for v, shape in ((tq.outputs[0], [64, 40]), (tk.outputs[0], [64, 24]),
                     (cat.outputs[0], [64, 64]), (mm.outputs[0], [3, 64]),
                     (gemm.outputs[0], [3, 16])):
        v.dtype, v.shape = ir.DataType.FLOAT, ir.Shape(shape)
    mm.outputs[0].name, gemm.outputs[0].name = "y", "z"
    graph = ir.Graph([x], [mm.outputs[0], gemm.outputs[0]], nodes=[tq, tk, cat, mm, gemm],
                     initializers=list(inits.values()), opset_imports={"": 21})
    model = ir.Model(graph, ir_version=10)
    done = quantize_weights(model, bits=4)
    assert done.weights == {"qkv": ("wq", "wk"), "gemm": ("wg",)}
    # the Gemm becomes a MatMul: ORT folds DequantizeLinear + MatMul at load, not + Gemm
    assert sorted(n.op_type for n in model.graph) == ["DequantizeLinear"] * 2 + ["MatMul"] * 2
    assert set(model.graph.initializers) == {"qkv.weight_Q4", "qkv.weight_scale", "wg_Q4",
                                             "wg_scale"}  # the float weights are gone
    feeds = rng.standard_normal((3, 64), np.float32)
    got = _session(model).run(None, {"x": feeds})

    def deq(w: np.ndarray) -> np.ndarray:
        return dequantize_blocks(*quantize_blocks(w.T, bits=4), 32)

    np.testing.assert_allclose(got[0], feeds @ np.concatenate([deq(wq), deq(wk)], 1),
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(got[1], feeds @ deq(wg), rtol=0, atol=1e-5)


def test_refusals() -> None:
    program: Any = onnxport.export(torch.nn.Linear(32, 8), (torch.randn(2, 32),), dynamo=True)
    with pytest.raises(QuantizationError, match="opset 21"):
        quantize_weights(program.model, bits=4)
    with pytest.raises(QuantizationError, match="bits"):
        quantize_blocks(np.zeros((4, 4), np.float32), bits=3)
    with pytest.raises(QuantizationError, match="power of two"):
        quantize_blocks(np.zeros((4, 4), np.float32), bits=4, block_size=24)
