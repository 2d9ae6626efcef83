"""SimplifyIndexingPass: each rewrite removes its nodes and computes the same tensors in ONNX
Runtime; index wraps of possibly negative values, ranges that are not a dim and gathers that
are no arange grid stay; a transformers decoder's mask is a few nodes and equals eager."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxport import llm
from onnxport.passes import SimplifyIndexingPass
from tests.passes.fusion_helpers import ops
from tests.passes.test_fuse_group_query_attention import _decode_equals_eager, _model

I64, BOOL, F32 = TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT


def _const(name: str, value: object, dtype: type = np.int64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.array(value, dtype=dtype), name))


def _model_of(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto], initializers: tuple[onnx.TensorProto, ...] = ()
              ) -> onnx.ModelProto:
    """A model of `nodes`, typed by ONNX shape inference as an exported one is."""
    common = [_const("zero", 0), _const("one", 1), _const("ax0", [0]), _const("ax1", [1]),
              _const("ax2", [2]), _const("ax3", [3]), _const("last", [-1]), _const("i0", 0),
              _const("i1", 1)]
    # outputs through an Identity: the pass never renames a graph output
    for out in outputs:
        for node in nodes:
            for i, name in enumerate(node.output):
                if name == out.name:
                    node.output[i] = f"{name}_v"
            for i, name in enumerate(node.input):
                if name == out.name:
                    node.input[i] = f"{name}_v"
    ends = [helper.make_node("Identity", [f"{o.name}_v"], [o.name]) for o in outputs]
    graph = helper.make_graph(common + nodes + ends, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _simplified(model: onnx.ModelProto) -> tuple[onnx.ModelProto, collections.Counter[str]]:
    """The model after the pass (which must report a change), and its op counts."""
    m = ir.from_proto(model)
    assert SimplifyIndexingPass()(m).modified
    out = ir.to_proto(m)
    onnx.checker.check_model(out, full_check=True)
    return out, collections.Counter(n.op_type for n in out.graph.node if n.op_type != "Constant")


def _unchanged(model: onnx.ModelProto) -> None:
    m = ir.from_proto(model)
    assert not SimplifyIndexingPass()(m).modified


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def _assert_same(a: onnx.ModelProto, b: onnx.ModelProto, feed: dict[str, np.ndarray]) -> None:
    for x, y in zip(_run(a, feed), _run(b, feed)):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _wrap(x: str, n: str, out: str, form: str) -> list[onnx.NodeProto]:
    """out = x with negative values wrapped by n, in one of the forms the pass knows."""
    add = helper.make_node("Add", [n, x] if form == "add_swapped" else [x, n], [f"{out}_add"])
    if form == "greater_equal":
        return [helper.make_node("GreaterOrEqual", [x, "zero"], [f"{out}_c"]), add,
                helper.make_node("Where", [f"{out}_c", x, f"{out}_add"], [out])]
    if form == "greater":
        return [helper.make_node("Greater", ["zero", x], [f"{out}_c"]), add,
                helper.make_node("Where", [f"{out}_c", f"{out}_add", x], [out])]
    return [helper.make_node("Less", [x, "zero"], [f"{out}_c"]), add,
            helper.make_node("Where", [f"{out}_c", f"{out}_add", x], [out])]


def _dim(x: str, axis: str, out: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Shape", [x], [f"{out}_shape"]),
            helper.make_node("Gather", [f"{out}_shape", axis], [out], axis=0)]


@pytest.mark.parametrize("form", ["less", "add_swapped", "greater_equal", "greater"])
def test_wrap_of_an_arange_goes(form: str) -> None:
    """Where(x < 0, x + n, x) on Unsqueeze(Range(0, n, 1)) (and Shape) is x."""
    nodes = [*_dim("x", "i1", "n"),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax0"], ["u"]),
             *_wrap("u", "n", "w", form),
             helper.make_node("Shape", ["x"], ["s"]), *_wrap("s", "n", "ws", form)]
    model = _model_of(nodes, [helper.make_tensor_value_info("x", F32, ["a", "b"])],
                      [helper.make_tensor_value_info("w", I64, [1, "b"]),
                       helper.make_tensor_value_info("ws", I64, [2])])
    out, counts = _simplified(model)
    assert counts["Where"] == counts["Less"] == counts["Greater"] == counts["GreaterOrEqual"] == 0
    _assert_same(model, out, {"x": np.zeros((2, 5), np.float32)})


@pytest.mark.parametrize("index", ["input", "negative_start", "negative_step"])
def test_wrap_of_a_possibly_negative_index_stays(index: str) -> None:
    """An index from an input, or a Range that may go below 0, keeps its wrap."""
    nodes = [*_dim("x", "i1", "n"), _const("minus", -3),
             _const("minus_one", -1)]
    if index == "input":
        x = "idx"
    elif index == "negative_start":
        nodes.append(helper.make_node("Range", ["minus", "n", "one"], ["idx_r"]))
        x = "idx_r"
    else:
        nodes.append(helper.make_node("Range", ["n", "minus", "minus_one"], ["idx_r"]))
        x = "idx_r"
    nodes += _wrap(x, "n", "w", "less")
    model = _model_of(nodes, [helper.make_tensor_value_info("x", F32, ["a", "b"]),
                              helper.make_tensor_value_info("idx", I64, ["k"])],
                      [helper.make_tensor_value_info("w", I64, ["k"])])
    _unchanged(model)


_FIRST, _LAST = ("ax1", "ax2", "ax3"), ("ax0", "ax1", "ax2")


def _grid_gather(data: str, ends: tuple[str, str], start: str = "zero",
                 transposed: bool = False) -> list[onnx.NodeProto]:
    """transformers' padding gather: data[arange(e0)[:, None, None, None],
    arange(e1)[None, None, None, :]], index wraps included (`transposed`: the batch index on
    the last axis, the key index on the first)."""
    b_axes, k_axes = (_LAST, _FIRST) if transposed else (_FIRST, _LAST)
    nodes = [helper.make_node("Range", [start, ends[0], "one"], ["rb"]),
             helper.make_node("Unsqueeze", ["rb", b_axes[0]], ["b1"]),
             helper.make_node("Unsqueeze", ["b1", b_axes[1]], ["b2"]),
             helper.make_node("Unsqueeze", ["b2", b_axes[2]], ["b3"]),
             helper.make_node("Range", ["zero", ends[1], "one"], ["rk"]),
             helper.make_node("Unsqueeze", ["rk", k_axes[0]], ["k1"]),
             helper.make_node("Unsqueeze", ["k1", k_axes[1]], ["k2"]),
             helper.make_node("Unsqueeze", ["k2", k_axes[2]], ["k3"]),
             *_dim(data, "i0", "n0"), *_dim(data, "i1", "n1"),
             *_wrap("b3", "n0", "bw", "less"), *_wrap("k3", "n1", "kw", "less"),
             helper.make_node("Add", ["bw", "kw"], ["both"]),
             helper.make_node("Shape", ["both"], ["grid"]),
             helper.make_node("Expand", ["bw", "grid"], ["be"]),
             helper.make_node("Unsqueeze", ["be", "last"], ["bu"]),
             helper.make_node("Expand", ["kw", "grid"], ["ke"]),
             helper.make_node("Unsqueeze", ["ke", "last"], ["ku"]),
             helper.make_node("Concat", ["bu", "ku"], ["idx"], axis=-1),
             helper.make_node("GatherND", [data, "idx"], ["out"])]
    return nodes


def _gather_model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    return _model_of([helper.make_node("Cast", ["mask"], ["m"], to=BOOL), *nodes],
                     [helper.make_tensor_value_info("mask", I64, ["batch", "total"]),
                      helper.make_tensor_value_info("keys", F32, ["kv"])],
                     [helper.make_tensor_value_info("out", BOOL, ["p", 1, 1, "q"])])


def _mask_feed(total: int, kv: int) -> dict[str, np.ndarray]:
    mask = np.random.default_rng(0).integers(0, 2, (3, total)).astype(np.int64)
    return {"mask": mask, "keys": np.zeros(kv, np.float32)}


def test_identity_gather_is_the_data_unsqueezed() -> None:
    """Aranges over the data's own dims: GatherND -> Unsqueeze(data), no Slice, no Expand."""
    nodes = [*_dim("m", "i0", "e0"), *_dim("m", "i1", "e1"), *_grid_gather("m", ("e0", "e1"))]
    model = _gather_model(nodes)
    out, counts = _simplified(model)
    assert counts["GatherND"] == counts["Where"] == counts["Slice"] == counts["Expand"] == 0
    assert counts["Unsqueeze"] == 1
    _assert_same(model, out, _mask_feed(6, 6))


def test_gather_over_a_range_that_is_not_the_dim_slices() -> None:
    """Key positions arange(kv), kv not provably the mask's length: the columns are sliced to
    kv (the mask may be longer), still no GatherND."""
    nodes = [*_dim("m", "i0", "e0"), *_dim("keys", "i0", "e1"), *_grid_gather("m", ("e0", "e1"))]
    model = _gather_model(nodes)
    out, counts = _simplified(model)
    assert counts["GatherND"] == 0 and counts["Slice"] == 1
    _assert_same(model, out, _mask_feed(7, 4))
    _assert_same(model, out, _mask_feed(5, 5))


@pytest.mark.parametrize("case", ["start_one", "transposed", "possibly_negative_end"])
def test_gather_that_is_no_arange_grid_stays(case: str) -> None:
    """A Range from 1, the aranges' axes in the other order (a transposing gather), or an end
    that may be negative (where Slice would count from the back): the GatherND stays (the
    wraps still go)."""
    nodes = [*_dim("m", "i0", "e0"), *_dim("m", "i1", "e1"), _const("ten", 10),
             helper.make_node("Sub", ["e1", "ten"], ["e1_short"])]
    nodes += _grid_gather("m", ("e0", "e1_short" if case == "possibly_negative_end" else "e1"),
                          start="one" if case == "start_one" else "zero",
                          transposed=case == "transposed")
    model = _gather_model(nodes)
    out, counts = _simplified(model)
    assert counts["GatherND"] == 1 and counts["Where"] == 0
    _assert_same(model, out, _mask_feed(3, 3))      # square: the transposed gather is in range
    if case == "possibly_negative_end":     # ends -4 (an empty arange, not [:, :-4]) and 2
        _assert_same(model, out, _mask_feed(6, 3))
        _assert_same(model, out, _mask_feed(12, 3))


def test_identity_operands_go() -> None:
    """And(True, x), Or(x, False), Mul(1, x), Add(x, 0) on integers, And(x, Expand(True,
    Shape(x))) -> x; Add(f, 0.0) on floats, Mul by an all-ones weight and And with a fill that
    broadcasts x further stay."""
    nodes = [_const("t", True, np.bool_), _const("fa", [[False]], np.bool_),
             _const("f1", 1.0, np.float32), _const("f0", 0.0, np.float32), _const("two", [2]),
             helper.make_node("And", ["t", "b"], ["a1"]),
             helper.make_node("Or", ["a1", "fa"], ["a2"]),
             helper.make_node("Shape", ["b"], ["sb"]),
             helper.make_node("Expand", ["t", "sb"], ["tt"]),
             helper.make_node("And", ["a2", "tt"], ["a3"]),
             helper.make_node("Concat", ["two", "sb"], ["bigger"], axis=0),
             helper.make_node("ConstantOfShape", ["bigger"], ["tb"],
                              value=onnx.numpy_helper.from_array(np.array([True]))),
             helper.make_node("And", ["a3", "tb"], ["a4"]),
             helper.make_node("Mul", ["f1", "x"], ["m1"]),
             helper.make_node("Mul", ["m1", "w"], ["m2"]),
             helper.make_node("Add", ["m2", "f0"], ["m3"]),
             helper.make_node("Add", ["i", "zero"], ["j1"])]
    model = _model_of(nodes, [helper.make_tensor_value_info("b", BOOL, ["p", "q"]),
                              helper.make_tensor_value_info("x", F32, ["p", 3]),
                              helper.make_tensor_value_info("i", I64, ["p"])],
                      [helper.make_tensor_value_info("a4", BOOL, [2, "p", "q"]),
                       helper.make_tensor_value_info("m3", F32, ["p", 3]),
                       helper.make_tensor_value_info("j1", I64, ["p"])],
                      (onnx.numpy_helper.from_array(np.ones(3, np.float32), "w"),))
    out, counts = _simplified(model)
    assert counts["And"] == counts["ConstantOfShape"] == 1 and counts["Or"] == counts["Expand"] == 0
    assert counts["Mul"] == 1 and counts["Add"] == 1   # the weight's Mul, the float Add
    rng = np.random.default_rng(0)
    _assert_same(model, out, {"b": rng.random((2, 4)) > 0.5, "x": rng.random((2, 3), np.float32),
                              "i": np.arange(2)})


def test_expand_to_its_own_shape_and_nested_unsqueezes() -> None:
    """Expand(x, Concat(dims of x)) -> x; Unsqueeze(Unsqueeze(x, [0]), [2]) -> one Unsqueeze."""
    nodes = [*_dim("x", "i0", "d0"), *_dim("x", "i1", "d1"),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["v0"]),
             helper.make_node("Unsqueeze", ["d1", "ax0"], ["v1"]),
             helper.make_node("Concat", ["v0", "ax1", "v1"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["x", "ax1"], ["x3"]),
             helper.make_node("Expand", ["x3", "s"], ["e"]),
             helper.make_node("Unsqueeze", ["e", "ax0"], ["u1"]),
             helper.make_node("Unsqueeze", ["u1", "ax2"], ["u2"])]
    model = _model_of(nodes, [helper.make_tensor_value_info("x", F32, ["a", "b"])],
                      [helper.make_tensor_value_info("u2", F32, [1, "a", 1, 1, "b"])])
    out, counts = _simplified(model)
    assert counts["Expand"] == 0 and counts["Unsqueeze"] == 1
    _assert_same(model, out, {"x": np.random.default_rng(0).random((2, 5), np.float32)})


@pytest.mark.parametrize("opset", [18, 23])
def test_decoder_mask_is_a_few_nodes(opset: int) -> None:
    """A Llama decoder's mask: no index wrap, no GatherND, one And of the causal comparison
    and the (sliced, unsqueezed) padding mask; equal to eager over a left-padded batch."""
    model = _model("llama")
    program = llm.export_decoder_with_cache(model, opset_version=opset)
    counts = ops(program)
    assert counts["GatherND"] == counts["Less"] == 0
    assert counts["And"] == counts["LessOrEqual"] == 1
    assert counts["Where"] == (1 if opset == 18 else 0)    # only the additive mask's
    # the mask's cone: the two position Ranges and their lengths, the causal comparison, the
    # padding Cast / Slice / Unsqueeze and the And
    and_node = next(n for n in program.model.graph if n.op_type == "And")
    cone, todo = set(), [and_node]
    while todo:
        node = todo.pop()
        if id(node) in cone or node.op_type == "Constant":
            continue
        cone.add(id(node))
        todo += [v.producer() for v in node.inputs if v is not None and v.producer() is not None]
    assert len(cone) <= 16
    _decode_equals_eager(model, program)
