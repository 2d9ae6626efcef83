"""Capture-only patches of transformers' models.

* `models.moonshine.modeling_moonshine.MoonshinePreTrainedModel._get_feat_extract_output_lengths`:
  the encoder's length from the audio's in integer arithmetic, `(n - 127) // 64 + 1` and so on,
  where Moonshine's `int((n - 127) / 64 + 1)` of a symbolic size gives a constant: the encoder's
  mask was cut to the example's length, and ONNX Runtime failed at any other (the same values
  for audio of 127 samples or more).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _moonshine_feature_lengths(self: Any, input_lengths: Any) -> Any:
    conv1 = (input_lengths - 127) // 64 + 1
    conv2 = (conv1 - 7) // 3 + 1
    return (conv2 - 3) // 2 + 1


PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    ("transformers.models.moonshine.modeling_moonshine.MoonshinePreTrainedModel",
     "_get_feat_extract_output_lengths"): _moonshine_feature_lengths,
}
