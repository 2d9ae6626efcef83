"""Numbers an elementwise op converts to another dtype are explicit scalar_tensor nodes
(capture/explicit_scalars.py), as in torch.onnx's programs; the ONNX graph is unchanged."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch

import onnxport
import onnxport.capture.dynamo as capture_dynamo
from onnxport.verification import verify_onnx_program


class _Mixed(torch.nn.Module):
    def forward(self, x: torch.Tensor, i: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = x.half()
        y = (h * 0.1 + 1) / 3  # float16 with a float and ints: made explicit (dtype float16)
        z = torch.where(c, y, 0)
        d = x.double() - 2  # float64 with an int: explicit
        return z, i + 1, d, x * 0.5, i * 2.5, i < 3  # the last three: the number's own dtype


def _args() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(4, 3), torch.arange(12).reshape(4, 3), torch.rand(4, 3) > 0.5


def _export(model: torch.nn.Module, args: tuple) -> onnxport.ONNXProgram:
    return onnxport.export(model, args, dynamo=True,
                           dynamic_shapes=tuple({0: "b"} for _ in args))


def test_numbers_converted_are_nodes_and_ort_matches_eager() -> None:
    args = _args()
    program = _export(_Mixed(), args)
    scalars = [n for n in program.exported_program.graph.nodes
               if n.target is torch.ops.aten.scalar_tensor.default]
    assert sorted((n.args[0], n.kwargs["dtype"]) for n in scalars) == \
        [(0.1, torch.float16), (1, torch.float16), (2, torch.float64), (3, torch.float16)]
    for node in scalars:  # named by the line of the op that converts them
        assert "test_explicit_scalars.py" in node.meta["stack_trace"]
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    outputs = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
    for got, expected in zip(outputs, _Mixed()(*args), strict=True):
        np.testing.assert_array_equal(got, expected.numpy())
    # The program torch runs gives the model's outputs, bit for bit.
    for got, expected in zip(program.exported_program.module()(*args), _Mixed()(*args)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_onnx_graph_is_the_same_without_the_nodes(monkeypatch) -> None:
    args = _args()
    with_nodes = _export(_Mixed(), args).model
    monkeypatch.setattr(capture_dynamo, "make_scalars_explicit", lambda gm: 0)
    without = _export(_Mixed(), args).model

    def ops(model):
        return [(n.op_type, [None if v is None else v.const_value is not None and
                             v.const_value.numpy().tolist() for v in n.inputs])
                for n in model.graph]

    assert ops(with_nodes) == ops(without)


def test_the_constant_is_compared_by_verification() -> None:
    class Shift(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.double() - 2

    args = (torch.randn(3),)
    infos = verify_onnx_program(_export(Shift(), args), args, compare_intermediates=True)
    assert [(i.name, i.max_abs_diff) for i in infos] == \
        [("to", 0), ("scalar_tensor_default", 0), ("sub", 0)]


def test_dtypes_outside_promotion_rules_keep_the_number() -> None:
    # torch's promotion rules raise on quantized dtypes: the pass leaves such a node alone
    # instead of failing the export.
    from onnxport.capture.explicit_scalars import make_scalars_explicit

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.quantize_per_tensor(torch.ones(2), 1.0, 0, torch.quint8)
    y = graph.call_function(torch.ops.aten.add.Tensor, (x, 1))
    graph.output(y)
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert make_scalars_explicit(module) == 0
    assert y.args == (x, 1)
