"""Capture-only patches of transformers' models.

* `models.moonshine.modeling_moonshine.MoonshinePreTrainedModel._get_feat_extract_output_lengths`:
  the encoder's length from the audio's in integer arithmetic, `(n - 127) // 64 + 1` and so on,
  where Moonshine's `int((n - 127) / 64 + 1)` of a symbolic size gives a constant: the encoder's
  mask was cut to the example's length, and ONNX Runtime failed at any other (the same values
  for audio of 127 samples or more).
* `modeling_utils.AttentionInterface.get_interface`: the `sdpa` attention it returns repeats the
  key/value heads as many times as the query has more heads than the keys, where transformers
  repeats them `module.num_key_value_groups` times. The two differ in the latent-attention
  families (DeepSeek-V2/V3, GLM-4-MoE-Lite, LongCat-Flash, MiniCPM3, ...): they expand keys and
  values to every query head, yet set `num_key_value_groups` from `num_key_value_heads`. Eager
  runs them only on inputs without padding and with key and value head sizes equal, where
  transformers drops the all-ones mask and calls SDPA with `enable_gqa`, which takes the repeat
  from the tensors (here 1); during capture the mask stays (all-ones is a fact about the data),
  transformers repeats the keys itself, and the heads no longer match ("Attempting to broadcast
  a dimension of length 8 ... [s72, 8] ... [s72, 4]", torch.export's own failure too). Where
  the counts agree, or eager fails on every input (key and value head sizes differ), the
  attention is transformers' as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from onnxport.capture.library_patches import state


def _moonshine_feature_lengths(self: Any, input_lengths: Any) -> Any:
    conv1 = (input_lengths - 127) // 64 + 1
    conv2 = (conv1 - 7) // 3 + 1
    return (conv2 - 3) // 2 + 1


def _groups_from_heads(sdpa: Callable[..., Any]) -> Callable[..., Any]:
    def attention(module: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        groups = getattr(module, "num_key_value_groups", None)
        heads, kv_heads = query.shape[1], key.shape[1]
        if (isinstance(groups, int) and isinstance(heads, int) and isinstance(kv_heads, int)
                and kv_heads * groups != heads and heads % kv_heads == 0
                and key.shape[-1] == value.shape[-1] <= 256):
            module.num_key_value_groups = heads // kv_heads
            try:
                return sdpa(module, query, key, value, *args, **kwargs)
            finally:
                module.num_key_value_groups = groups
        return sdpa(module, query, key, value, *args, **kwargs)

    return attention


def _get_interface(self: Any, attn_implementation: str, default: Callable[..., Any]) -> Any:
    found = state.ORIGINALS[(_INTERFACE, "get_interface")](self, attn_implementation, default)
    sdpa_module = sys.modules.get("transformers.integrations.sdpa_attention")
    if sdpa_module is not None and found is getattr(sdpa_module, "sdpa_attention_forward", None):
        return _groups_from_heads(found)
    return found


_INTERFACE = "transformers.modeling_utils.AttentionInterface"

PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    ("transformers.models.moonshine.modeling_moonshine.MoonshinePreTrainedModel",
     "_get_feat_extract_output_lengths"): _moonshine_feature_lengths,
    (_INTERFACE, "get_interface"): _get_interface,
}
