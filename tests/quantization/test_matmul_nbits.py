"""FuseMatMulNBitsPass (ONNX Runtime target): weight-only quantized matmuls as MatMulNBits.

Tolerance: 1e-5 absolute, as for the weight-only exports (test_weight_only.py). MatMulNBits
with accuracy_level 0 dequantizes each block exactly ((q - zero_point) * scale, the formula
eager uses) and multiplies in float32: only float32 summation order differs. A wrong nibble
order, zero point packing, block layout or transposition moves outputs by whole weights.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
import torch

import onnxport
from onnxport.options import OnnxRuntimeTarget
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


EXACT = OnnxRuntimeTarget(int4_accuracy_level=0)


def test_target_onnxruntime_int4_only() -> None:
    """export(target=OnnxRuntimeTarget(int4_accuracy_level=0)) fuses int4 weights into exact
    MatMulNBits; 8-bit ones keep the default target's form, folded to float at load (ORT's
    8-bit float path is slower than DequantizeLinear + MatMul: bench_quantized.py)."""
    x = torch.randn(4, 64)
    model = _model(64, _config(torch.int4, 32))
    prog = onnxport.export(model, (x,), opset_version=21, target=EXACT)
    ops = collections.Counter(n.op_type for n in prog.model.graph)
    assert ops["MatMulNBits"] == 2 and not ops["DequantizeLinear"], ops
    assert not any("accuracy_level" in n.attributes for n in prog.model.graph)
    _check(model, x, prog)
    model8 = _model(64, _config(torch.int8, 32))
    prog8 = onnxport.export(model8, (x,), opset_version=21, target=EXACT)
    ops8 = collections.Counter(n.op_type for n in prog8.model.graph)
    assert not ops8["MatMulNBits"], ops8
    assert h.integer_weight_readers(prog8.model_proto) == {"Cast": 2}
    _check(model8, x, prog8)


def test_block_size_not_power_of_two_left_alone() -> None:
    """MatMulNBits needs a power-of-two block >= 16: a group of 24 keeps the default form."""
    x = torch.randn(4, 48)
    model = _model(48, _config(torch.int4, 24), hidden=48)
    prog = onnxport.export(model, (x,), opset_version=21, target="onnxruntime")
    ops = collections.Counter(n.op_type for n in prog.model.graph)
    assert not ops["MatMulNBits"], ops
    assert h.integer_weight_readers(prog.model_proto) == {"Cast": 2}
    _check(model, x, prog)


def _acc4_bound(x: np.ndarray, w: np.ndarray, block: int) -> np.ndarray:
    """The most accuracy level 4 can move x @ w.T: ORT quantizes each block of `block`
    values of a row of x along K to int8 with scale s = max|x_blk| / 127 (symmetric, round to
    nearest), so each x_k moves by at most s / 2, and y_n by sum over blocks of
    (s_blk / 2) * sum_{k in blk} |w_nk|, w the dequantized weight [N, K]."""
    rows, k = x.shape
    nb = -(-k // block)
    xb = np.zeros((rows, nb * block), np.float64)
    xb[:, :k] = x
    s = np.abs(xb.reshape(rows, nb, block)).max(-1) / 127            # [rows, nb]
    wb = np.zeros((w.shape[0], nb * block), np.float64)
    wb[:, :k] = np.abs(w)
    wsum = wb.reshape(w.shape[0], nb, block).sum(-1)                  # [N, nb]
    return (s / 2) @ wsum.T                                           # [rows, N]


@pytest.mark.parametrize("group,asym,k", [(32, False, 96), (32, True, 96), (None, False, 80)],
                         ids=["g32", "g32-asym", "channel-block32"])
def test_target_default_accuracy_level_4_within_bound(group, asym, k) -> None:
    """The target's default (the GenAI builder's CPU int4): MatMulNBits accuracy_level 4 and
    block 32. Not exact: each output within `_acc4_bound` (+1e-5 for float32 summation order)
    of eager, elementwise; and not equal to it (the integer path was taken)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(k, 48).eval()
    from torchao.quantization import quantize_
    quantize_(model, _config(torch.int4, group, asym))
    x = torch.randn(16, k) * 2
    prog = onnxport.export(torch.nn.Sequential(model), (x,), opset_version=21,
                           target="onnxruntime")
    nodes = [n for n in prog.model.graph if n.op_type == "MatMulNBits"]
    assert len(nodes) == 1 and nodes[0].attributes["accuracy_level"].value == 4
    assert nodes[0].attributes["block_size"].value == 32
    got = h.run_ort(h.ort_session(prog.model_proto), [x])[0]
    with torch.no_grad():
        want = model(x).numpy()
        w = model.weight.dequantize().numpy() if hasattr(model.weight, "dequantize") \
            else model.weight.numpy()
    err = np.abs(got - want)
    bound = _acc4_bound(x.numpy(), w, 32) + 1e-5
    assert (err <= bound).all(), float((err / bound).max())
    assert err.max() > 1e-5


def test_onnxruntime_target_options() -> None:
    """OnnxRuntimeTarget is the target string with options; bad values are refused."""
    t = OnnxRuntimeTarget(int4_accuracy_level=0, int4_block_size=64)
    assert t == "onnxruntime" and t.int4_accuracy_level == 0 and t.int4_block_size == 64
    import pickle
    assert repr(pickle.loads(pickle.dumps(t))) == repr(t)
    p = OnnxRuntimeTarget(max_positions=256)
    assert repr(pickle.loads(pickle.dumps(p))) == repr(p) and p.max_positions == 256
    # the context length reaches GroupQueryAttention's pass (constant cos/sin tables)
    from onnxport.passes.onnxruntime import onnxruntime_passes
    gqa = onnxruntime_passes(p)[0]
    assert type(gqa).__name__ == "FuseGroupQueryAttentionPass" and gqa.max_positions == 256
    for bad in ({"int4_accuracy_level": 5}, {"int4_block_size": 24}, {"int4_block_size": 8},
                {"max_positions": 0}, {"max_positions": 1.5}):
        with pytest.raises(ValueError, match="OnnxRuntimeTarget"):
            OnnxRuntimeTarget(**bad)
    # per-channel weights are re-blocked with int4_block_size
    x = torch.randn(4, 128)
    model = _model(128, _config(torch.int4, None))
    prog = onnxport.export(model, (x,), opset_version=21, target=t)
    nodes = [n for n in prog.model.graph if n.op_type == "MatMulNBits"]
    assert [n.attributes["block_size"].value for n in nodes] == [64, 64]  # fc2: K=32 padded
    _check(model, x, prog)


class _ThreeHeads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(64, n) for n in (64, 32, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q(x) * 2, self.k(x), self.v(x) - 1], -1)


def test_siblings_packed_into_one_matmul_nbits() -> None:
    """Three Linears of one input (with biases: added after the packed node's Split) become one
    MatMulNBits of N = 128 and a Split, exact at accuracy level 0."""
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = _ThreeHeads().eval()
    quantize_(model, _config(torch.int4, 32, asymmetric=True))
    x = torch.randn(5, 64)
    prog = onnxport.export(model, (x,), opset_version=21, target=EXACT)
    nodes = [n for n in prog.model.graph if n.op_type == "MatMulNBits"]
    assert [n.attributes["N"].value for n in nodes] == [128], [n.attributes["N"] for n in nodes]
    assert sum(n.op_type == "Split" for n in prog.model.graph) == 1
    _check(model, x, prog)


def test_decoder_int4_packed_qkv_into_group_query_attention() -> None:
    """A small int4 Llama decoder with its KV cache under the ORT target: Q, K, V packed into
    one MatMulNBits feeding GroupQueryAttention's packed-QKV input (as the GenAI builder);
    prefill and a decode step equal eager within 1e-4 at accuracy level 0 (float32 attention
    and summation order over 2 layers; weights exact)."""
    import transformers
    from torchao.quantization import quantize_

    from onnxport import llm

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    quantize_(model, _config(torch.int4, 32))
    prog = llm.export_decoder_with_cache(model, opset_version=21, target=EXACT)
    gqa = [n for n in prog.model.graph if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == 2 and all(n.inputs[1] is None and
                                 n.inputs[0].producer().op_type == "MatMulNBits" for n in gqa)
    session = h.ort_session(prog.model_proto)
    names = [o.name for o in session.get_outputs()]
    ids = torch.randint(0, 128, (1, 7))
    with torch.no_grad():
        want = model(ids).logits.numpy()
    empty = {i.name: np.zeros((1, 2, 0, 16), np.float32) for i in session.get_inputs()
             if i.name.startswith("past_key_values.")}
    out = dict(zip(names, session.run(None, {"input_ids": ids[:, :6].numpy(),
                                             "attention_mask": np.ones((1, 6), np.int64),
                                             **empty})))
    np.testing.assert_allclose(out["logits"], want[:, :6], rtol=0, atol=1e-4)
    past = {n: out[n.replace("past_key_values", "present")] for n in empty}
    step = session.run(None, {"input_ids": ids[:, 6:].numpy(),
                              "attention_mask": np.ones((1, 7), np.int64), **past})[0]
    np.testing.assert_allclose(step, want[:, 6:], rtol=0, atol=1e-4)


def test_verify_checks_the_export_exactly_at_accuracy_level_4() -> None:
    """export(verify=True) on the ORT target's default (int8 activations): the export is checked
    with the exact kernel (a wrong export still fails), and a warning says how far level 4
    moves the outputs; the program keeps level 4."""
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(96, 48), torch.nn.Tanh()).eval()
    quantize_(model, _config(torch.int4, 32))
    x = torch.randn(16, 96) * 2
    with pytest.warns(UserWarning, match="checked with accuracy_level 0") as record:
        prog = onnxport.export(model, (x,), opset_version=21, target="onnxruntime",
                               verify=True)
    moved = float(str(next(w.message for w in record if "accuracy_level 0" in str(w.message))
                      ).rsplit("up to ", 1)[1].rstrip("."))
    assert moved > 1e-5  # level 4 really ran in the check's first run
    nodes = [n for n in prog.model.graph if n.op_type == "MatMulNBits"]
    assert [n.attributes["accuracy_level"].value for n in nodes] == [4]

    def wrong_tanh(g, x):
        return g.op("Sigmoid", x)

    with pytest.raises(onnxport.errors.VerificationError), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no level-4 note on a failed check
        onnxport.export(model, (x,), opset_version=21, target="onnxruntime", verify=True,
                        custom_translation_table={torch.ops.aten.tanh.default: wrong_tanh})
