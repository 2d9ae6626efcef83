"""Small BERT and Llama (hidden 32, 1 layer, vocab 99, random weights) quantized with PT2E,
exported, and compared with the quantized eager model (tolerances: `_helpers`)."""

from __future__ import annotations

import pytest
import torch

from tests.quantization import _helpers as h

transformers = pytest.importorskip("transformers")


class Logits(torch.nn.Module):
    """input_ids -> logits; `mask`: pass an all-ones attention mask (without one, transformers
    checks position ids for packed sequences with aten.diff, which onnxport decomposes by
    re-tracing the whole program: seconds on a QAT model)."""

    def __init__(self, model: torch.nn.Module, mask: bool = False) -> None:
        super().__init__()
        self.model = model
        self.mask = mask

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(input_ids) if self.mask else None
        if isinstance(self.model, transformers.LlamaForCausalLM):
            return self.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits
        return self.model(input_ids=input_ids, attention_mask=mask).logits


def bert(intermediate_size: int = 37, layers: int = 2, mask: bool = False) -> torch.nn.Module:
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=layers,
                                     num_attention_heads=4, intermediate_size=intermediate_size,
                                     max_position_embeddings=64, num_labels=3)
    return Logits(transformers.BertForSequenceClassification(config), mask).eval()


def llama(intermediate_size: int = 37, layers: int = 2, mask: bool = False) -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=intermediate_size,
                                      max_position_embeddings=64)
    return Logits(transformers.LlamaForCausalLM(config), mask).eval()


# XNNPACK's quantizer annotates integer `add`s of Llama's mask code (calibration then fails
# in eager PyTorch), so Llama uses the x86 quantizer; BERT takes XNNPACK per channel.
@pytest.mark.parametrize("make,flow,kernels", [
    (bert, "xnnpack_per_channel", ("QGemm",)),
    # each Linear is one Gemm (FuseGemmPass + FuseRowsPass), which ORT runs as QGemm
    (llama, "x86", ("QGemm",)),
], ids=["bert-xnnpack_per_channel", "llama-x86"])
def test_transformer_pt2e(make, flow, kernels) -> None:
    # one layer: the suite's time goes to torch.export; Llama with an attention mask (without,
    # transformers' packed-sequence check needs aten.diff, decomposed by a whole re-trace)
    model = make(layers=1, mask=make is llama)
    example = (torch.randint(0, 99, (2, 8)),)
    quantized = h.pt2e(model, example, flow, calibrate=lambda: [torch.randint(0, 99, (2, 8))])
    result = h.check(quantized, example)
    assert len(result["checked"]) >= 5  # every projection's input activation compared
    proto = result["program"].model_proto
    linears = 8  # BERT: q,k,v,o,up,down + pooler, classifier; Llama: q,k,v,o,gate,up,down + head
    h.assert_weights_quantized(proto, min_int8=linears - 2, allow_float=("embed",))
    ops = h.optimized_op_counts(proto)
    for kernel in kernels:
        assert ops[kernel] >= 1, ops
