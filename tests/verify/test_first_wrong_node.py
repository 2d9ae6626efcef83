"""verify_onnx_program(compare_intermediates=True) and find_first_divergence on models with a
deliberately wrong translation: the faulty FX node is the first value over tolerance, the
report names its module path and source line; without the fault nothing is over tolerance.
torch.onnx 2.13 runs the same calls in the same tests (its own wrong translation, onnxscript);
its intermediate comparison creates an ONNX Runtime session per value (about a minute for the
tiny BERT or Llama), so for those two it runs in benchmarks/bench_verify.py and here only
its output comparison runs.

Tolerance: tests/verify/models.py TOLERANCE (1e-3 absolute on O(1) values; float32 rounding
stays within 1e-5, the wrong translations move their value by more than 0.05).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.onnx.verification

import onnxport
from onnxport.verification import find_first_divergence, verify_onnx_program
from tests.verify import models as m

TANH = {torch.ops.aten.tanh.default: m.sigmoid_for_tanh}


def _torch_onnx(model: torch.nn.Module, args: tuple[Any, ...], dynamic_shapes: Any,
                table: dict[Any, Any] | None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(model, args, dynamo=True, dynamic_shapes=dynamic_shapes,
                                 custom_translation_table=table, verbose=False)


def _check(model: torch.nn.Module, example: tuple[Any, ...], check: tuple[Any, ...],
           dynamic_shapes: Any, ours_table: dict[Any, Any], wrong: str, module_path: str,
           source: str, theirs_table: dict[Any, Any] | None, theirs_wrong: str | None,
           their_intermediates: bool = True) -> None:
    # onnxport, with the fault
    program = onnxport.export(model, example, dynamic_shapes=dynamic_shapes,
                              custom_translation_table=ours_table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # values fused away are listed in a UserWarning
        infos = verify_onnx_program(program, check, compare_intermediates=True)
    assert m.first_over(infos) == wrong, [(i.name, i.max_abs_diff) for i in infos]
    assert m.first_over(verify_onnx_program(program, check)) is not None   # outputs too
    report = find_first_divergence(program, check)
    first = report.first
    assert first is not None and first.name == wrong, str(report)
    assert first.module_path == module_path, str(report)
    assert source in first.source, str(report)
    assert first.onnx_nodes and first.cause == "exporter" and not first.accumulated
    assert first.error > 1e-2 and all(i.error is None or i.error < 1e-5 for i in first.inputs)
    # onnxport, without it
    clean = onnxport.export(model, example, dynamic_shapes=dynamic_shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clean_infos = verify_onnx_program(clean, check, compare_intermediates=True)
    assert len(clean_infos) >= len(infos) - 2
    assert m.first_over(clean_infos) is None, [(i.name, i.max_abs_diff) for i in clean_infos]
    assert find_first_divergence(clean, check).first is None
    # torch.onnx, the same calls
    if theirs_table is None:
        return
    theirs = _torch_onnx(model, example, dynamic_shapes, theirs_table)
    their_outputs = torch.onnx.verification.verify_onnx_program(theirs, check)
    assert m.first_over(their_outputs) is not None
    if not their_intermediates:
        return   # benchmarks/bench_verify.py runs them: a session per value, a minute each
    their_infos = torch.onnx.verification.verify_onnx_program(theirs, check,
                                                              compare_intermediates=True)
    assert m.first_over(their_infos) == theirs_wrong, \
        [(i.name, i.max_abs_diff) for i in their_infos][:20]


def test_mlp() -> None:
    model, x = m.MLP().eval(), torch.randn(4, 6)
    _check(model, (x,), (x,), None, TANH, "tanh", "act", "models.py",
           {torch.ops.aten.tanh.default: m.torch_onnx_sigmoid}, "tanh")


def test_cnn_dynamic_batch_checked_at_another_batch() -> None:
    model = m.CNN().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    _check(model, (torch.randn(2, 3, 10, 10),), (torch.randn(5, 3, 10, 10),),
           {"x": {0: batch}}, TANH, "tanh", "block2.1", "models.py",
           {torch.ops.aten.tanh.default: m.torch_onnx_sigmoid}, "tanh")


def _text_dims() -> dict[str, Any]:
    return {"input_ids": {0: torch.export.Dim("batch", min=1, max=16),
                          1: torch.export.Dim("seq", min=2, max=32)}}


def test_bert_fault_in_the_pooler_dynamic_batch_and_sequence() -> None:
    # tanh first occurs in the pooler, after both encoder layers
    _check(m.bert(), (m.ids(2, 8),), (m.ids(3, 5),), _text_dims(), TANH, "tanh",
           "model.bert.pooler.activation", "modeling_bert.py",
           {torch.ops.aten.tanh.default: m.torch_onnx_sigmoid}, "tanh",
           their_intermediates=False)


def test_llama_fault_in_layer_1_dynamic_batch_and_sequence() -> None:
    # silu is right in layer 0 and wrong in layer 1 (its FX node is silu_1); torch.onnx's
    # table cannot tell layers apart, so its fault is in every layer (first: silu)
    _check(m.llama(), (m.ids(2, 8),), (m.ids(1, 11),), _text_dims(),
           {torch.ops.aten.silu.default: m.silu_wrong_in_layer_1}, "silu_1",
           "model.model.layers.1.mlp.act_fn", "activations.py",
           {torch.ops.aten.silu.default: m.torch_onnx_sigmoid}, "silu",
           their_intermediates=False)
