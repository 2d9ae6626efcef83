"""Capture-only patches of transformers' Longformer (and LED's encoder, which shares its attention).

* `LongformerSelfAttention.forward` and `LEDEncoderSelfAttention.forward`: the sliding-window
  attention with global tokens as one masked attention over all positions, where transformers
  branches on `is_index_global_attn.flatten().any().item()` and gathers the global tokens with
  `nonzero()` into `max()` slots (sizes that depend on the data, which torch.export cannot
  capture for every input), and chunks the window with `torch.div` of sizes and `as_strided`.
  A token that is not global attends to the keys within its window that are neither padding nor
  global, and to every global key (transformers' local part and its global-key slots; a global
  key inside the window counts once there too); a global token's output is that of its global
  projections over every key that is not padding; padding rows are zero. The values are
  transformers' in either branch (a batch without global tokens is the local-only branch), at
  O(sequence²) memory per head where transformers' chunks take O(sequence x window): a graph
  for long inputs costs what full attention costs. With `output_attentions` the original runs.
* `LongformerModel._pad_to_window_size` and `LEDEncoder._pad_to_window_size`: no padding (the
  attention above takes any length), where transformers pads to a multiple of the attention
  window `if padding_len > 0`: a branch on the sequence length that held the graph to lengths
  that branch the example's way. Padding tokens are masked keys and are cut from the output,
  so the values at the given positions are the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from onnxport.capture.library_patches import state

_LONGFORMER = "transformers.models.longformer.modeling_longformer"
_LED = "transformers.models.led.modeling_led"
_ATTENTIONS = (f"{_LONGFORMER}.LongformerSelfAttention", f"{_LED}.LEDEncoderSelfAttention")


def _heads(module: Any, x: torch.Tensor) -> torch.Tensor:
    batch, seq = x.shape[:2]
    return x.view(batch, seq, module.num_heads, module.head_dim).transpose(1, 2)


def _attend(module: Any, scores: torch.Tensor, allowed: torch.Tensor,
            values: torch.Tensor) -> torch.Tensor:
    """softmax(scores where allowed) @ values, in float32 as transformers' softmax."""
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
    probs = torch.nn.functional.dropout(probs, p=module.dropout, training=module.training)
    return probs @ values


def _self_attention(original_path: str) -> Callable[..., Any]:
    def forward(self: Any, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                is_index_masked: torch.Tensor | None = None,
                is_index_global_attn: torch.Tensor | None = None,
                is_global_attn: Any = None, output_attentions: bool = False) -> Any:
        if output_attentions or attention_mask is None:
            return state.ORIGINALS[(original_path, "forward")](
                self, hidden_states, attention_mask, is_index_masked, is_index_global_attn,
                is_global_attn, output_attentions)
        # attention_mask: < 0 padding, 0 local, > 0 global (transformers' encoder sets it)
        masked = attention_mask < 0 if is_index_masked is None else is_index_masked
        is_global = attention_mask > 0 if is_index_global_attn is None else is_index_global_attn
        scale = math.sqrt(self.head_dim)
        seq = hidden_states.shape[1]
        positions = torch.arange(seq, device=hidden_states.device)
        window = (positions[:, None] - positions[None, :]).abs() <= self.one_sided_attn_window_size
        # [batch, query, key]: the window's local keys, and every global key
        allowed = (window[None] & (attention_mask == 0)[:, None, :]) | is_global[:, None, :]
        local = _attend(self, _heads(self, self.query(hidden_states) / scale)
                        @ _heads(self, self.key(hidden_states)).transpose(-1, -2),
                        allowed[:, None], _heads(self, self.value(hidden_states)))
        local = local.masked_fill(masked[:, None, :, None], 0.0)
        unmasked = ~masked[:, None, None, :]
        global_ = _attend(self, _heads(self, self.query_global(hidden_states) / scale)
                          @ _heads(self, self.key_global(hidden_states)).transpose(-1, -2),
                          unmasked, _heads(self, self.value_global(hidden_states)))
        out = torch.where(is_global[:, None, :, None], global_, local)
        return (out.transpose(1, 2).reshape(hidden_states.shape[0], seq, self.embed_dim),)

    return forward


def _longformer_unpadded(self: Any, input_ids: Any, attention_mask: Any, token_type_ids: Any,
                         position_ids: Any, inputs_embeds: Any, pad_token_id: int) -> Any:
    return 0, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds


def _led_unpadded(self: Any, input_ids: Any, attention_mask: Any, inputs_embeds: Any,
                  pad_token_id: int) -> Any:
    return 0, input_ids, attention_mask, inputs_embeds


PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    **{(path, "forward"): _self_attention(path) for path in _ATTENTIONS},
    (f"{_LONGFORMER}.LongformerModel", "_pad_to_window_size"): _longformer_unpadded,
    (f"{_LED}.LEDEncoder", "_pad_to_window_size"): _led_unpadded,
}
