"""onnxport.verification.find_mismatch: the reference example (../shared/reference/003)."""

from __future__ import annotations

from typing import Any

import torch

import onnxport
import onnxport.verification

EXPECTED_TREE = """\
==================================== Tree: =====================================
5 X   __2 X    __1 \u2713
id:  |  id: 0 |  id: 00
     |        |
     |        |__1 X (aten::relu)
     |           id: 01
     |
     |__3 X    __1 \u2713
        id: 1 |  id: 10
              |
              |__2 X     __1 X (aten::relu)
                 id: 11 |  id: 110
                        |
                        |__1 \u2713
                           id: 111
=========================== Mismatch leaf subgraphs: ===========================
['01', '110']
============================= Mismatch node kinds: =============================
{'aten::relu': 2}
"""


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(3, 4),
            torch.nn.ReLU(),
            torch.nn.Linear(4, 5),
            torch.nn.ReLU(),
            torch.nn.Linear(5, 6),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_reference_example(capsys: Any) -> None:
    torch.manual_seed(0)
    opset_version = 15

    # The custom symbolic function is incorrect, which will result in mismatches.
    def incorrect_relu_symbolic_function(g: Any, self: Any) -> Any:
        return self

    onnxport.register_custom_op_symbolic("aten::relu", incorrect_relu_symbolic_function,
                                         opset_version=opset_version)
    graph_info = onnxport.verification.find_mismatch(
        Model(), (torch.randn(2, 3),), opset_version=opset_version)
    out = capsys.readouterr().out
    assert out.startswith(
        "===================== Mismatch info for graph partition : ======================\n"
        "================================ Mismatch error ================================\n"
        "Tensor-likes are not close!\n")
    assert "Mismatched elements: 12 / 12 (100.0%)" in out
    assert "(up to 1e-07 allowed)" in out and "(up to 0.001 allowed)" in out
    assert out.endswith(EXPECTED_TREE)
    assert graph_info.has_mismatch()
    assert graph_info.essential_node_count() == 5
    leaves = graph_info.all_mismatch_leaf_graph_info()
    assert [leaf.id for leaf in leaves] == ["01", "110"]
    assert all(leaf.essential_node_kinds() == {"aten::relu"} for leaf in leaves)
    assert graph_info.find_partition("110") is leaves[1]
    assert not graph_info.find_partition("111").has_mismatch()
    graph_info.pretty_print_tree()
    assert capsys.readouterr().out == EXPECTED_TREE


def test_add_symbolic_mismatch_found_at_relus() -> None:
    def wrong_relu(g: Any, input: Any) -> Any:
        return g.op("Add", input, g.op("Constant", value_t=torch.tensor(1.0)))

    onnxport.register_custom_op_symbolic("aten::relu", wrong_relu, 9)
    torch.manual_seed(0)
    info = onnxport.verification.find_mismatch(Model(), (torch.randn(2, 3),))
    assert [leaf.id for leaf in info.all_mismatch_leaf_graph_info()] == ["01", "110"]


def test_no_mismatch(capsys: Any) -> None:
    torch.manual_seed(0)
    info = onnxport.verification.find_mismatch(Model(), (torch.randn(2, 3),), opset_version=15)
    assert not info.has_mismatch()
    assert info.upper_graph_info is None and info.all_mismatch_leaf_graph_info() == []
    assert capsys.readouterr().out == ""


def test_verification_options() -> None:
    def half_wrong_relu(g: Any, input: Any) -> Any:
        # Wrong only for inputs above 0.9: few elements.
        return g.op("Clip", input, g.op("Constant", value_t=torch.tensor(0.0)),
                    g.op("Constant", value_t=torch.tensor(0.9)))

    onnxport.register_custom_op_symbolic("aten::relu", half_wrong_relu, 9)
    options = onnxport.verification.VerificationOptions()
    assert (options.flatten, options.ignore_none, options.check_shape, options.check_dtype,
            options.rtol, options.atol, options.remained_onnx_input_idx,
            options.acceptable_error_percentage) == (True, True, True, True, 1e-3, 1e-7,
                                                     None, None)
    assert options.backend == onnxport.verification.OnnxBackend.ONNX_RUNTIME_CPU

    class OneRelu(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) * 2

    x = torch.linspace(-1, 1, 200)
    assert onnxport.verification.find_mismatch(OneRelu(), (x,)).has_mismatch()
    lenient = onnxport.verification.VerificationOptions(acceptable_error_percentage=0.1)
    assert not onnxport.verification.find_mismatch(OneRelu(), (x,), options=lenient).has_mismatch()
    loose = onnxport.verification.VerificationOptions(atol=0.2)
    assert not onnxport.verification.find_mismatch(OneRelu(), (x,), options=loose).has_mismatch()
    reference = onnxport.verification.VerificationOptions(
        backend=onnxport.verification.OnnxBackend.REFERENCE)
    assert onnxport.verification.find_mismatch(OneRelu(), (x,), options=reference).has_mismatch()
