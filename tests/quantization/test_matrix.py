"""The bar's matrix (issue #15): a CNN, an MLP, a small BERT and a small Llama, each quantized
by each flow that applies to it. The other test files cover CNN and MLP under every PT2E flow
(test_pt2e.py), the MLP under PT2E QAT, torch.ao fake-quantize modules, torchao weight-only
and torchao QAT, BERT (XNNPACK per channel) and Llama (x86) under PT2E
(test_transformers.py), Llama under torchao QAT (test_torchao_qat.py). This file fills the
rest with one-layer transformers (hidden 32, vocab 99, intermediate 64 so torchao's groups of
32 divide every Linear):

* PT2E dynamic (x86) on BERT and Llama (PT2E static: BERT XNNPACK, Llama x86 in
  test_transformers.py; XNNPACK's quantizers annotate the integer adds of Llama's mask code and
  calibration fails in eager PyTorch: the XNNPACK flows do not apply to Llama);
* PT2E QAT (prepare_qat_pt2e, x86 quantizer with is_qat, eval, observers off) on the CNN, BERT
  and Llama;
* torchao Int8WeightOnlyConfig, IntxWeightOnlyConfig(int4, PerGroup(32)) on the CNN (its
  Linear), BERT and Llama, and QATConfig (int8 per-token activations + int4 weights per group
  of 32) on the CNN and BERT (Llama: test_torchao_qat.py).

Tolerances: PT2E, `_helpers.check` (quantized activations within one step, output within one
step of the final Linear's input scale times its largest weight row sum); PT2E QAT, one step
of the largest activation scale times the final Linear's largest row sum (fake quantization
rounds x / s in ONNX and x * (1 / s) in eager: a tie moves one step), +10% for ties in
earlier layers; torchao weight-only and QAT (default target: exact integers, torchao's own
activation arithmetic), 1e-5 absolute (float32 summation order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import onnxport
from tests.quantization import _helpers as h

transformers = pytest.importorskip("transformers")


def _bert() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from tests.quantization.test_transformers import bert
    return bert(intermediate_size=64, layers=1, mask=True), (torch.randint(0, 99, (2, 8)),)


def _llama() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    from tests.quantization.test_transformers import llama
    return llama(intermediate_size=64, layers=1, mask=True), (torch.randint(0, 99, (2, 8)),)


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]] = {
    "cnn": h.cnn, "bert": _bert, "llama": _llama}


def _fresh(example: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    return [torch.randint(0, 99, t.shape) if not t.is_floating_point() else torch.randn_like(t)
            for t in example]


def _pt2e_qat(model: torch.nn.Module, example: tuple[torch.Tensor, ...]) -> torch.nn.Module:
    from torchao.quantization.pt2e import disable_observer, move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    quantizer = X86InductorQuantizer().set_global(
        get_default_x86_inductor_quantization_config(is_qat=True))
    prepared = prepare_qat_pt2e(torch.export.export(model.train(), example).module(),
                                quantizer)
    for _ in range(3):
        prepared(*_fresh(example))
    move_exported_model_to_eval(prepared)
    prepared.apply(disable_observer)
    return prepared


def _torchao(model: torch.nn.Module, flow: str) -> torch.nn.Module:
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.qat import IntxFakeQuantizeConfig, QATConfig

    config: Any = {
        "int8_weight_only": Int8WeightOnlyConfig(),
        "int4_weight_only": IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                                 granularity=PerGroup(32)),
        "torchao_qat": QATConfig(
            activation_config=IntxFakeQuantizeConfig(torch.int8, "per_token",
                                                     is_symmetric=False),
            weight_config=IntxFakeQuantizeConfig(torch.int4, group_size=32), step="prepare"),
    }[flow]
    if flow != "torchao_qat" and isinstance(model, h.CNN):
        model.fc = torch.nn.Linear(8 * 6 * 6, 10)  # K = 288: groups of 32
    quantize_(model, config)
    return model.eval()


CASES = [("bert", "x86_dynamic"), ("llama", "x86_dynamic"),
         ("cnn", "pt2e_qat"), ("bert", "pt2e_qat"), ("llama", "pt2e_qat"),
         *((m, f) for m in ("cnn", "bert", "llama")
           for f in ("int8_weight_only", "int4_weight_only", "torchao_qat")
           if (m, f) != ("llama", "torchao_qat"))]  # Llama: test_torchao_qat.py


@pytest.mark.parametrize("name,flow", CASES, ids=[f"{m}-{f}" for m, f in CASES])
def test_matrix(name: str, flow: str) -> None:
    torch.manual_seed(0)
    model, example = MODELS[name]()
    ints = name != "cnn"
    if flow == "x86_dynamic":
        calibrate = (lambda: _fresh(example)) if ints else None
        h.check(h.pt2e(model, example, flow, calibrate=calibrate), example)
        return
    opset = 21 if flow == "int4_weight_only" else 18
    if flow == "pt2e_qat":
        quantized = _pt2e_qat(model, example)
    else:
        quantized = _torchao(model, flow)
    # PT2E QAT int8 weights: the ONNX Runtime target (uint8 weights, ORT's exact U8U8 kernels;
    # its U8S8 ones saturate on AVX2 CPUs without VNNI, docs/quantization.md)
    target = "onnxruntime" if flow == "pt2e_qat" else "onnx"
    prog = onnxport.export(quantized, example, opset_version=opset, target=target)
    h.assert_weights_quantized(prog.model_proto, min_int8=0 if flow == "int4_weight_only" else 1,
                               allow_float=("embed", "conv") if flow != "pt2e_qat" else ("embed",))
    session = h.ort_session(prog.model_proto)
    tol = 1e-5
    if flow == "pt2e_qat":
        fq = [m for m in quantized.modules() if hasattr(m, "observer_enabled")
              and m.scale.numel() == 1]  # the activations' (per tensor)
        last = [p for n, p in quantized.named_parameters() if p.dim() == 2][-1]
        tol = 1.1 * max(float(m.scale.max()) for m in fq) * float(last.abs().sum(-1).max()) \
            + 1e-5
    for _ in range(2):
        inputs = _fresh(example)
        with torch.no_grad():
            want = quantized(*inputs)
        got = h.run_ort(session, inputs)[0]
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=0, atol=tol)
