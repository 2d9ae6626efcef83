"""nn.MultiheadAttention and nn.TransformerDecoderLayer exported and compared with eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnxport
from tests.helpers import check_model, export_and_compare

EMBED, HEADS = 16, 4


class SelfAttention(torch.nn.Module):
    """Calls MultiheadAttention with the given masks and options."""

    def __init__(self, mha: torch.nn.MultiheadAttention, **options: Any) -> None:
        super().__init__()
        self.mha = mha
        self.options = options

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None) -> Any:
        return self.mha(query, key, value, key_padding_mask=key_padding_mask,
                        attn_mask=attn_mask, **self.options)


def _qkv(batch_first: bool, batch: int = 2, target: int = 5, source: int = 7,
         kdim: int = EMBED, vdim: int = EMBED) -> tuple[torch.Tensor, ...]:
    def make(length: int, dim: int) -> torch.Tensor:
        return torch.randn((batch, length, dim) if batch_first else (length, batch, dim))

    return make(target, EMBED), make(source, kdim), make(source, vdim)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_plain(batch_first: bool, need_weights: bool) -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS, batch_first=batch_first)
    program = export_and_compare(SelfAttention(mha, need_weights=need_weights), _qkv(batch_first))
    check_model(program)
    assert len(program.model.graph.outputs) == (2 if need_weights else 1)


def test_self_attention_same_tensor() -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS, batch_first=True)

    class Self(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = mha

        def forward(self, x: torch.Tensor) -> Any:
            return self.mha(x, x, x, need_weights=False)[0]

    export_and_compare(Self(), (torch.randn(2, 6, EMBED),))


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_key_padding_mask(batch_first: bool, average: bool) -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS, batch_first=batch_first)
    q, k, v = _qkv(batch_first)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 4:] = True
    export_and_compare(SelfAttention(mha, average_attn_weights=average), (q, k, v, padding))


def test_float_key_padding_mask() -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS)
    q, k, v = _qkv(False)
    padding = torch.zeros(2, 7)
    padding[0, 5:] = float("-inf")
    export_and_compare(SelfAttention(mha), (q, k, v, padding))


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("kind", ["bool_2d", "float_2d", "bool_3d"])
def test_attn_mask(kind: str, need_weights: bool) -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS, batch_first=True)
    q, k, v = _qkv(True)
    if kind == "bool_2d":
        mask = torch.ones(5, 7, dtype=torch.bool).triu(1)
    elif kind == "float_2d":
        mask = torch.randn(5, 7)
    else:
        mask = torch.rand(2 * HEADS, 5, 7) > 0.7
        mask[..., 0] = False  # every query sees at least one key
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[0, 6:] = True
    export_and_compare(SelfAttention(mha, need_weights=need_weights), (q, k, v, padding, mask))


@pytest.mark.parametrize("batch_first", [True, False])
def test_kdim_vdim(batch_first: bool) -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS, kdim=10, vdim=12, batch_first=batch_first)
    program = export_and_compare(SelfAttention(mha), _qkv(batch_first, kdim=10, vdim=12))
    names = set(program.model.graph.initializers)
    assert {"mha.q_proj_weight", "mha.k_proj_weight", "mha.v_proj_weight"} <= names


def test_bias_kv_and_zero_attn() -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS, add_bias_kv=True, add_zero_attn=True)
    export_and_compare(SelfAttention(mha), _qkv(False))


def test_dynamic_lengths() -> None:
    mha = torch.nn.MultiheadAttention(EMBED, HEADS, batch_first=True)
    model = SelfAttention(mha, need_weights=False).eval()
    batch, target, source = (torch.export.Dim(n) for n in ("batch", "target", "source"))
    shapes = {"query": {0: batch, 1: target}, "key": {0: batch, 1: source},
              "value": {0: batch, 1: source}}
    program = onnxport.export(model, _qkv(True), dynamic_shapes=shapes)
    assert program is not None
    second = _qkv(True, batch=3, target=4, source=9)
    with torch.no_grad():
        expected = model(*second)[0]
    torch.testing.assert_close(program(*second)[0], expected)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_decoder_layer(batch_first: bool, norm_first: bool) -> None:
    layer = torch.nn.TransformerDecoderLayer(EMBED, HEADS, dim_feedforward=32, dropout=0.1,
                                             batch_first=batch_first, norm_first=norm_first)

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, tgt: torch.Tensor, memory: torch.Tensor,
                    memory_key_padding_mask: torch.Tensor) -> torch.Tensor:
            causal = torch.nn.Transformer.generate_square_subsequent_mask(
                tgt.shape[1 if batch_first else 0])
            return self.layer(tgt, memory, tgt_mask=causal, tgt_is_causal=True,
                              memory_key_padding_mask=memory_key_padding_mask)

    tgt, memory, _ = _qkv(batch_first)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True
    export_and_compare(Decoder(), (tgt, memory, padding))


def test_transformer_decoder_layer_gelu_without_masks() -> None:
    layer = torch.nn.TransformerDecoderLayer(EMBED, HEADS, dim_feedforward=32, activation="gelu",
                                             batch_first=True)
    tgt, memory, _ = _qkv(True)
    export_and_compare(layer, (tgt, memory))
