"""Speech encoder-decoders whose audio has any length, with a mask (Speech2Text's filter
banks, Moonshine's raw samples): optimum's three files, as `seq2seq.py` writes them.

    encoder_model.onnx            input_features [B, frames, features] (Moonshine:
                                  input_values [B, samples]), attention_mask over the same
                                  axis -> last_hidden_state (the audio subsampled)
    decoder_model.onnx,           seq2seq.py's text decoders, but encoder_attention_mask is
    decoder_with_past_model.onnx  the encoder's input mask (frames or samples), as
                                  ORTModelForSpeechSeq2Seq feeds it; the graph subsamples it
                                  to the encoder's length, as the model does: Speech2Text's
                                  own `_get_feature_vector_attention_mask` (lengths through
                                  the convolutions), Moonshine's every 384th sample (the
                                  product of its encoder's convolution strides).

Whisper keeps seq2seq.py's layout: a fixed number of mel frames, no mask.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from onnxport.tasks.seq2seq import (Decoder, _decoder_specs, _encoder, _encoder_output,
                                    _Layout)
from onnxport.tasks.specs import Feeds, GraphSpec, Shape, float_dtype

__all__ = ["masked_speech", "speech_graphs"]

# The decoders' axis of encoder_attention_mask: the encoder's input length, not its output's.
_MASK_AXIS = "encoder_input_length"


def masked_speech(model: Any) -> bool:
    """Whether `model` is a speech encoder-decoder of audio of any length with a mask (its
    main input raw samples, or filter-bank frames without Whisper's fixed mel count)."""
    config = model.config
    return model.main_input_name == "input_values" or (
        model.main_input_name == "input_features" and not getattr(config, "num_mel_bins", None)
        and bool(getattr(config, "input_feat_per_channel", None)))


class SpeechDecoder(Decoder):
    """seq2seq.py's decoder step, given the encoder's input mask: Speech2Text subsamples it
    in its own forward; Moonshine's decoder reads the subsampled mask from the encoder's
    output, so it is computed here as Moonshine's encoder does."""

    def encoder_side(self, hidden: torch.Tensor,
                     mask: torch.Tensor | None) -> tuple[Any, dict[str, Any]]:
        if self.model.main_input_name != "input_values" or mask is None:
            return super().encoder_side(hidden, mask)
        from transformers.modeling_outputs import BaseModelOutput

        stride = _stride(self.model)
        # mask[:, ::stride][:, :length] as a gather of `length` columns: the graph's output
        # has the hidden states' length (a slice's would be min(ceil(n / stride), length)).
        columns = torch.arange(hidden.shape[1], device=mask.device) * stride
        columns = columns.clamp(max=mask.shape[1] - 1).expand(mask.shape[0], -1)
        outputs = BaseModelOutput(last_hidden_state=hidden)
        outputs["attention_mask"] = mask.gather(1, columns)
        return outputs, {}


def _stride(model: Any) -> int:
    """The product of the encoder's 1-d convolution strides (Moonshine: 64 * 3 * 2)."""
    return math.prod(m.stride[0] for m in model.get_encoder().modules()
                     if isinstance(m, torch.nn.Conv1d))


def _input_length(model: Any, length: int) -> int:
    """The shortest encoder input (frames or samples) the encoder subsamples to `length`."""
    out = model._get_feat_extract_output_lengths
    low, high = 1, 1
    while int(out(high)) < length:
        high *= 2
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if int(out(mid)) < length else (low, mid)
    return low


def _audio_mask(b: int, n: int) -> torch.Tensor:
    """A mask of ones over n frames or samples, the last of b > 1 rows padded by a quarter
    (enough to change the subsampled mask)."""
    mask = torch.ones(b, n, dtype=torch.long)
    if b > 1:
        mask[-1, n - n // 4:] = 0
    return mask


def speech_graphs(model: Any, family: str, task: str, batch: int,
                  seq: int) -> list[GraphSpec]:
    """encoder_model.onnx, decoder_model.onnx and, for a task `-with-past`,
    decoder_with_past_model.onnx of a speech encoder-decoder with masked audio."""
    config, dtype, main = model.config, float_dtype(model), model.main_input_name
    features = int(getattr(config, "input_feat_per_channel", 0) or 0) * \
        int(getattr(config, "input_channels", 1) or 1)

    def make_enc(shape: Shape) -> Feeds:
        b, n = shape["batch_size"], shape["encoder_sequence_length"]
        audio = torch.randn(b, n, features) if main == "input_features" else torch.randn(b, n)
        return {main: audio.to(dtype), "attention_mask": _audio_mask(b, n)}

    names = [main, "attention_mask"]
    axes = {0: "batch_size", 1: "encoder_sequence_length"}
    encoder = GraphSpec("encoder_model.onnx", _encoder(model, names), names,
                        ["last_hidden_state"], {main: dict(axes), "attention_mask": dict(axes)},
                        make_enc,
                        [{"batch_size": batch, "encoder_sequence_length": _input_length(model, seq)},
                         {"batch_size": batch + 1,
                          "encoder_sequence_length": _input_length(model, seq + 5) + 1}])
    hidden, _ = _encoder_output(model, encoder)
    # the decoders of a text encoder-decoder: the encoder's length dynamic, a mask input
    layout = dataclasses.replace(_Layout.of(model, family, task), speech=False)
    decoders = _decoder_specs(model, layout, hidden, 0, batch, seq, SpeechDecoder)
    for spec in decoders:
        _mask_over_input(model, spec)
    return [encoder, *decoders]


def _mask_over_input(model: Any, spec: GraphSpec) -> None:
    """The decoder's encoder_attention_mask over the encoder's input length (the shortest
    input that gives the example's encoder length), on its own dynamic axis."""
    make = spec.make_inputs

    def make_inputs(shape: Shape) -> Feeds:
        feeds = make(shape)
        b, length = feeds["encoder_hidden_states"].shape[:2]
        feeds["encoder_attention_mask"] = _audio_mask(b, _input_length(model, length))
        return feeds

    spec.make_inputs = make_inputs
    spec.dims = {**spec.dims, "encoder_attention_mask": {0: "batch_size", 1: _MASK_AXIS}}
