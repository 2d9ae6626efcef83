"""FuseMatMulNBitsPass (ONNX Runtime target): weight-only quantized matmuls as MatMulNBits.

Tolerance: 1e-5 absolute, as for the weight-only exports (test_weight_only.py). MatMulNBits
with accuracy_level 0 dequantizes each block exactly ((q - zero_point) * scale, the formula
eager uses) and multiplies in float32: only float32 summation order differs. A wrong nibble
order, zero point packing, block layout or transposition moves outputs by whole weights.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import onnxport
from onnxport.passes import run_passes
from onnxport.passes.onnxruntime.matmul_nbits import FuseMatMulNBitsPass
from tests.quantization import _helpers as h


def _model(k: int, config, hidden: int = 32) -> torch.nn.Module:
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 8)).eval()
    quantize_(model, config)
    return model


def _config(dtype: torch.dtype, group: int | None, asymmetric: bool = False):
    from torchao.quantization import IntxWeightOnlyConfig, MappingType
    from torchao.quantization.granularity import PerAxis, PerGroup

    return IntxWeightOnlyConfig(
        weight_dtype=dtype, granularity=PerAxis(0) if group is None else PerGroup(group),
        mapping_type=MappingType.ASYMMETRIC if asymmetric else MappingType.SYMMETRIC)


def _check(model: torch.nn.Module, x: torch.Tensor, prog: onnxport.ONNXProgram) -> None:
    got = h.run_ort(h.ort_session(prog.model_proto), [x])[0]
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype,group,asym,shape", [
    (torch.int4, 32, False, (4, 96)),       # Gemm(transB=1), 3 blocks; fc2: per row (K=32)
    (torch.int4, 32, True, (4, 96)),        # zero points packed two per byte, odd block count
    (torch.int4, 16, True, (2, 3, 64)),     # 3-D input: MatMul(A, Transpose(DQ))
    (torch.int4, None, False, (4, 40)),     # per channel: block 32, K=40 padded to 64
    (torch.int8, 32, False, (4, 64)),       # 8 bits (not in the target's default list)
    (torch.int8, None, True, (4, 64)),
], ids=["int4-g32", "int4-g32-asym", "int4-g16-3d", "int4-channel-pad", "int8-g32",
        "int8-channel-asym"])
def test_matmul_nbits_matches_eager(dtype, group, asym, shape) -> None:
    x = torch.randn(*shape)
    model = _model(shape[-1], _config(dtype, group, asym))
    prog = onnxport.export(model, (x,), opset_version=21)
    assert run_passes(prog.model, [FuseMatMulNBitsPass(bits=(4, 8))]) is prog.model
    nodes = [n for n in prog.model.graph if n.op_type == "MatMulNBits"]
    assert len(nodes) == 2 and all(n.domain == "com.microsoft" for n in nodes)
    ops = collections.Counter(n.op_type for n in prog.model.graph)
    assert not ops["DequantizeLinear"] and not ops["MatMul"] and not ops["Gemm"], ops
    bits = 4 if dtype == torch.int4 else 8
    assert {n.attributes["bits"].value for n in nodes} == {bits}
    # no integer weight, parameter or float weight left behind
    proto = prog.model_proto
    assert not [t.name for t in proto.graph.initializer if t.data_type != 2 and len(t.dims) >= 2
                and "MatMulNBits" not in t.name], [t.name for t in proto.graph.initializer]
    _check(model, x, prog)


def test_target_onnxruntime_int4_only() -> None:
    """export(target="onnxruntime") fuses int4 weights; 8-bit ones stay DequantizeLinear (ORT's
    8-bit float path is slower than DequantizeLinear + MatMul: bench_quantized.py)."""
    x = torch.randn(4, 64)
    model = _model(64, _config(torch.int4, 32))
    prog = onnxport.export(model, (x,), opset_version=21, target="onnxruntime")
    ops = collections.Counter(n.op_type for n in prog.model.graph)
    assert ops["MatMulNBits"] == 2 and not ops["DequantizeLinear"], ops
    _check(model, x, prog)
    model8 = _model(64, _config(torch.int8, 32))
    prog8 = onnxport.export(model8, (x,), opset_version=21, target="onnxruntime")
    ops8 = collections.Counter(n.op_type for n in prog8.model.graph)
    assert not ops8["MatMulNBits"] and ops8["DequantizeLinear"] == 2, ops8
    _check(model8, x, prog8)


def test_block_size_not_power_of_two_left_alone() -> None:
    """MatMulNBits needs a power-of-two block >= 16: a group of 24 stays DequantizeLinear."""
    x = torch.randn(4, 48)
    model = _model(48, _config(torch.int4, 24), hidden=48)
    prog = onnxport.export(model, (x,), opset_version=21, target="onnxruntime")
    ops = collections.Counter(n.op_type for n in prog.model.graph)
    assert ops["DequantizeLinear"] == 2 and not ops["MatMulNBits"], ops
    _check(model, x, prog)
