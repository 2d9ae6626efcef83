"""FuseRowsPass (+ FuseGemmPass): row-wise groups on static (..., hidden) tensors carried as 2-D,
each Linear one Gemm; the causal mask folded and applied as an additive constant below opset 23.
Each rewrite is checked in ONNX Runtime against the unfused graph and eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import onnxport
from onnxport.passes import (FoldConstantsPass, FuseAttentionPass, FuseGemmPass, FuseRowsPass,
                             default_passes, run_passes)
from tests.passes.fusion_helpers import (assert_same, fuse, nodes_of, ops, ort_optimized_ops,
                                         unfused)

H = 16


class PostNormBlock(torch.nn.Module):
    """BERT's layout: Linear -> GELU -> Linear, residual Add, LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(H, 4 * H)
        self.down = torch.nn.Linear(4 * H, H)
        self.norm = torch.nn.LayerNorm(H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(F.gelu(self.up(x))))


X = (torch.randn(2, 5, H),)


def _default_18(model: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> onnxport.ONNXProgram:
    model.eval()
    return onnxport.export(model, args)


def test_linears_become_gemms_on_rows() -> None:
    model = PostNormBlock()
    before = unfused(model, X)
    assert ops(before)["MatMul"] == 2 and ops(before)["Transpose"] == 2
    after = fuse(before, FuseRowsPass(), FuseGemmPass())
    got = ops(after)
    assert got["Gemm"] == 2 and got["MatMul"] == got["Transpose"] == 0
    assert got["Reshape"] == 2                   # one into rows, one back to (2, 5, H)
    gemm = nodes_of(after, "Gemm")[0]
    assert gemm.inputs[1].name == "up.weight" and gemm.attributes["transB"].as_int() == 1
    norm = nodes_of(after, "LayerNormalization")[0]
    assert list(norm.inputs[0].shape) == [10, H] and norm.attributes["axis"].as_int() == -1
    assert list(after.model.graph.outputs[0].shape) == [2, 5, H]
    assert_same(model, X, before, after)
    # ONNX Runtime keeps Add + LayerNormalization (its SkipLayerNormalization is slower on CPU).
    assert "com.microsoft.SkipLayerNormalization" not in ort_optimized_ops(after)
    assert "com.microsoft.SkipLayerNormalization" in ort_optimized_ops(before)


class Conv1DBlocks(torch.nn.Module):
    """GPT-2's Conv1D: view -> addmm -> view around each projection, split on the last axis,
    in two blocks on a residual stream."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(H, 3 * H) / 4)
                                         for _ in range(2)])
        self.b = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(3 * H)) for _ in range(2)])
        self.norm = torch.nn.ModuleList([torch.nn.LayerNorm(H) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w, b, norm in zip(self.w, self.b, self.norm):
            h = norm(x)
            y = torch.addmm(b, h.view(-1, H), w).view(*x.shape[:-1], 3 * H)
            a, g, c = y.split(H, dim=-1)
            x = x + a * torch.sigmoid(g) + c
        return x


def test_reshapes_around_2d_matmuls_cancel() -> None:
    model = Conv1DBlocks()
    before = unfused(model, X)
    after = fuse(before, FuseRowsPass())
    assert ops(before)["Reshape"] == 4 and ops(before)["Gemm"] == 2
    assert ops(after)["Reshape"] == 2        # into rows at x, back at the output
    for split in nodes_of(after, "Split"):
        assert len(split.inputs[0].shape) == 2
    assert_same(model, X, before, after)


class NoProduct(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2 + 1


def test_no_gain_no_rewrite() -> None:
    """A group without a matrix product whose Reshapes would not cancel is left 3-D."""
    model = NoProduct()
    before = unfused(model, X)
    assert not FuseRowsPass()(fuse(before).model).modified


@pytest.mark.parametrize("shape", [(2, 5, H), (3, 2, 5, H)])
def test_dynamic_dims_left_alone_and_ranks(shape: tuple[int, ...]) -> None:
    model = PostNormBlock().eval()
    x = (torch.randn(*shape),)
    after = _default_18(model, x)
    assert ops(after)["Gemm"] == 2
    assert_same(model, x, unfused(model, x), after)
    batch = torch.export.Dim("batch")
    dynamic = onnxport.export(model, x, dynamic_shapes=({0: batch},))
    assert ops(dynamic)["Gemm"] == 0       # a symbolic dim: rows unknown, the graph stays 3-D
    assert_same(model, x, unfused(model, x), dynamic)


class Causal(torch.nn.Module):
    def __init__(self, heads: int = 2) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(H, 3 * H)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Padded(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                keep: torch.Tensor) -> torch.Tensor:
        mask = keep[:, None, None, :]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(a, v, k, attn_mask=mask)


def test_constant_causal_mask_is_additive_without_zero_rows() -> None:
    model = Causal()
    before = unfused(model, X)
    assert ops(before)["IsNaN"] == 1 and ops(before)["Where"] >= 2
    after = fuse(before, FoldConstantsPass(), FuseAttentionPass())
    got = ops(after)
    assert got["IsNaN"] == 0 and got["Where"] == 0 and got["Softmax"] == 1
    (add,) = [n for n in nodes_of(after, "Add") if n.inputs[1].producer() is not None
              and n.inputs[1].producer().op_type == "Constant"
              and list(n.inputs[1].shape) == [5, 5]]
    assert add.inputs[0].producer().op_type == "MatMul"
    assert_same(model, X, before, after)


def test_input_mask_is_shared_and_keeps_zero_rows() -> None:
    """A mask computed from an input: one Where(mask, 0, lowest float) shared by both
    attentions, an Add each, and the zero rows of fully masked queries kept (that row is all
    masked here) by one Mul each with the rows that keep a key, computed once."""
    model = Padded()
    q = torch.randn(2, 2, 4, 8)
    keep = torch.tensor([[True, True, False, True], [False, False, False, False]])
    args = (q, torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), keep)
    before = unfused(model, args)
    after = fuse(before, FuseAttentionPass())
    assert ops(after)["IsNaN"] == 0 and ops(after)["ReduceMax"] == 1
    assert ops(after)["Where"] == 1          # the shared additive mask
    assert_same(model, args, before, after)


def test_all_true_mask_disappears() -> None:
    class AllTrue(torch.nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool))

    model, args = AllTrue(), (torch.randn(1, 2, 4, 8),)
    before = unfused(model, args)
    after = fuse(before, FoldConstantsPass(), FuseAttentionPass())
    assert ops(after)["Where"] == ops(after)["IsNaN"] == 0 and ops(after)["Add"] == 0
    assert_same(model, args, before, after)


def test_default_list_runs_them() -> None:
    names = [type(p).__name__ for p in default_passes()]
    assert names.index("FuseRowsPass") < names.index("FuseGemmPass")
    model = PostNormBlock().eval()
    program = onnxport.export(model, X, opset_version=18)     # unfused() exports at 18
    assert ops(program)["Gemm"] == 2
    before = unfused(model, X)
    run_passes(before.model)     # the defaults on the unfused graph: the same result
    assert ops(before) == ops(program)


class ComputedCausal(torch.nn.Module):
    """A causal mask computed the way transformers' mask utilities do (arange, cumsum,
    comparisons, indexing): folded to a constant on a static sequence length."""

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        s = q.shape[2]
        pos = torch.ones(1, s, dtype=torch.long).cumsum(-1) - 1
        idx = torch.arange(s)
        mask = (idx[None, :] <= pos[0][:, None]) & (pos[:, None, :, None] >= 0)
        return F.scaled_dot_product_attention(q, q * 2, q, attn_mask=mask)


def test_computed_mask_folded() -> None:
    model, args = ComputedCausal().eval(), (torch.randn(1, 2, 6, 8),)
    raw = onnxport.export(model, args, optimize=False)
    assert ops(raw)["CumSum"] == 1 and ops(raw)["LessOrEqual"] == 1
    folded = fuse(raw, FoldConstantsPass())
    mask = [n for n in nodes_of(folded, "Where") if n.inputs[0].producer() is not None
            and n.inputs[0].producer().op_type == "Constant"]
    assert ops(folded)["CumSum"] == ops(folded)["LessOrEqual"] == 0 and len(mask) == 1
    after = fuse(folded, FuseAttentionPass())
    got = ops(after)
    assert got["IsNaN"] == got["Where"] == 0 and got["Add"] == 1
    assert_same(model, args, raw, after)


def test_qdq_linear_keeps_ort_integer_gemm() -> None:
    """Per-tensor QuantizeLinear/DequantizeLinear are row-wise: the Reshape into rows goes
    before the Q/DQ pair, so ORT still sees DQ -> Gemm -> Q and runs QGemm."""
    import numpy as np
    import onnx
    import onnx_ir as ir
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    s, h = 8, 16
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (h, h)).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
             numpy_helper.from_array(rng.standard_normal(h).astype(np.float32), "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "ws", "z"], ["wd"]),
             helper.make_node("Transpose", ["wd"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["xd", "wt"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "xs", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "xs", "z"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, s, h])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, s, h])], inits)
    proto = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    model = ir.from_proto(proto)
    run_passes(model)
    fused = ir.to_proto(model)
    assert [n.op_type for n in fused.graph.node if n.op_type != "Constant"] == [
        "Reshape", "QuantizeLinear", "DequantizeLinear", "DequantizeLinear", "Gemm",
        "QuantizeLinear", "DequantizeLinear", "Reshape"]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    with __import__("tempfile").TemporaryDirectory() as tmp:
        options.optimized_model_filepath = f"{tmp}/opt.onnx"
        session = ort.InferenceSession(fused.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        assert "QGemm" in {n.op_type for n in onnx.load(f"{tmp}/opt.onnx").graph.node}
    reference = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((1, s, h)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], reference.run(None, {"x": x})[0])


def test_reduce_axes_attribute_form() -> None:
    """A keepdims ReduceMean over the last axis, axes as an attribute (opset 17), in a group
    with a MatMul: its axes follow the 2-D layout."""
    import numpy as np
    import onnx
    import onnx_ir as ir
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("ReduceMean", ["y"], ["m"], axes=[2], keepdims=1),
             helper.make_node("Sub", ["y", "m"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, 8])], [w])
    proto = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    model = ir.from_proto(proto)
    assert FuseRowsPass()(model).modified
    fused = ir.to_proto(model)
    reduce = next(n for n in fused.graph.node if n.op_type == "ReduceMean")
    assert list(helper.get_attribute_value(reduce.attribute[0])) == [-1]
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    got = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_values_carried_as_rows_keep_their_name_for_compute_values() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.fc1(x))
            return self.fc2(h) + x

    model, x = Block().eval(), torch.randn(2, 3, 8)
    program = onnxport.export(model, (x,))
    renamed = [v.name for n in program.model.graph for v in n.outputs
               if v.name and v.name.endswith("__rows")]
    assert renamed, "FuseRowsPass carried nothing as rows"
    relu = next(n.name for n in program.exported_program.graph.nodes if n.name.startswith("relu"))
    [got] = program.compute_values([relu], [x])
    torch.testing.assert_close(got, torch.relu(model.fc1(x)).detach())
