"""torchao weight-only quantization (quantize_): int8 per row and int4 per group of 32.

Tolerance: 1e-5 absolute. The weights are dequantized exactly (small integers times a float32
scale, the formula eager uses), so only float32 summation order differs: eager computes
(x @ W_int) * scale for int8 and x @ ((W_int - zp) * scale) for int4, as the graph does.

Int4WeightOnlyConfig cannot run on CPU with torchao 0.18 (its packing formats need mslk/CUDA
or XPU kernels); IntxWeightOnlyConfig(int4, PerGroup(32)) is torchao's CPU int4 weight-only
flow and reaches the exporter as `torchao.dequantize_affine` of the subclass's inner tensors.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import torch

import onnxport
from onnxport.passes.foldable_weight_dequant import dequantized_weight
from tests.quantization import _helpers as h


def _quantized(config) -> torch.nn.Module:
    from torchao.quantization import quantize_

    model = h.MLP().eval()
    model.fc1 = torch.nn.Linear(64, 32)
    quantize_(model, config)
    return model


def _run(model: torch.nn.Module, opset: int) -> onnx.ModelProto:
    x = torch.randn(4, 64)
    prog = onnxport.export(model, (x,), opset_version=opset)
    got = h.run_ort(h.ort_session(prog.model_proto), [x])[0]
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=0, atol=1e-5)
    return prog.model_proto


def test_int8_weight_only() -> None:
    from torchao.quantization import Int8WeightOnlyConfig

    proto = _run(_quantized(Int8WeightOnlyConfig()), 18)
    h.assert_weights_quantized(proto, min_int8=2)


def test_int4_weight_only_blocked_dequantize() -> None:
    from torchao.quantization import IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerGroup

    proto = _run(_quantized(IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                                 granularity=PerGroup(32))), 21)
    int4 = [t for t in proto.graph.initializer if t.data_type == onnx.TensorProto.INT4]
    assert len(int4) == 2, [(t.name, t.data_type) for t in proto.graph.initializer]
    assert not [t.name for t in proto.graph.initializer
                if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 2]
    # the default target's form (FoldableWeightDequantPass): Cast of the INT4 weight, Reshape
    # into blocks, Mul by the scales, which ONNX Runtime folds into float weights at load
    assert h.integer_weight_readers(proto) == {"Cast": 2}, h.integer_weight_readers(proto)
    assert not h.integer_weight_readers_after_load(proto)
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert ops["Gemm"] == 2 and not ops["DequantizeLinear"], ops
    # read back: fc1 (K=64) two groups of 32 per row, blocked; fc2 (K=32) one group: per row
    model = ir.from_proto(proto)
    read = [dequantized_weight(n.inputs[1]) for n in model.graph if n.op_type == "Gemm"]
    assert sorted((d.axis, d.block) for d in read) == [(0, 0), (1, 32)]


def test_int4_weight_only_needs_opset_21() -> None:
    from torchao.quantization import IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerGroup

    model = _quantized(IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    try:
        onnxport.export(model, (torch.randn(4, 64),), opset_version=18)
    except onnxport.OnnxExporterError as e:
        assert "opset 21" in str(e)
    else:
        raise AssertionError("exported blocked quantization at opset 18")


def test_int4_asymmetric_and_int8_groups_fold_at_load() -> None:
    """Zero points (torchao's asymmetric int4: a Sub in the arithmetic) and int8 groups: the
    default target matches eager within 1e-5 and ONNX Runtime folds every weight at load."""
    from torchao.quantization import IntxWeightOnlyConfig, MappingType
    from torchao.quantization.granularity import PerGroup

    for dtype in (torch.int4, torch.int8):
        proto = _run(_quantized(IntxWeightOnlyConfig(
            weight_dtype=dtype, granularity=PerGroup(32),
            mapping_type=MappingType.ASYMMETRIC)), 21)
        ops = collections.Counter(n.op_type for n in proto.graph.node)
        assert not ops["DequantizeLinear"] and ops["Sub"] >= 1, ops
        assert h.integer_weight_readers(proto) == {"Cast": 2}
        assert not h.integer_weight_readers_after_load(proto)
