"""The ONNX graphs of each task: wrappers, example inputs, names and named dims (optimum's).

`graphs_for(model, task, ...)` returns one `GraphSpec` per file of the output folder. A spec
knows how to export its graph, how to make inputs of a given shape, and how to compute the
eager outputs for those inputs, by the graph's input and output names, so that export and
validation treat every task alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from onnxport import llm
from onnxport.tasks.specs import (TEXT_FIELDS, Feeds, GraphSpec, Shape,
                                  decoder_uses_position_ids, example_ids, example_mask,
                                  float_dtype, raw_audio_shapes)

__all__ = ["GraphSpec", "Shape", "decoder_uses_position_ids", "graphs_for", "raw_audio_shapes"]


class _Outputs(torch.nn.Module):
    """Calls a transformers model with keyword inputs and returns the named output fields."""

    def __init__(self, model: torch.nn.Module, fields: list[str], **fixed: Any) -> None:
        super().__init__()
        self.model, self.fields, self.fixed = model, fields, fixed

    def _pick(self, out: Any) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(out, f) for f in self.fields)


class TextModel(_Outputs):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        return self._pick(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                     **kwargs, **self.fixed))


class DecoderModel(_Outputs):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        return self._pick(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                     position_ids=position_ids, use_cache=False))


class PrefillWithCache(_Outputs):
    """A decoder's fields, then its new cache flat: key 0, value 0, key 1, ..."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, use_cache=True)
        present: list[torch.Tensor] = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (*self._pick(out), *present)


class VisionModel(_Outputs):
    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._pick(self.model(pixel_values=pixel_values, **self.fixed))


class AudioModel(_Outputs):
    def forward(self, input_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._pick(self.model(input_values=input_values, **self.fixed))


class ClipModel(_Outputs):
    def forward(self, input_ids: torch.Tensor, pixel_values: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self._pick(self.model(input_ids=input_ids, pixel_values=pixel_values,
                                     attention_mask=attention_mask))


# -- families ----------------------------------------------------------------------------------

def _text_encoder(model: Any, task: str, batch: int, seq: int) -> list[GraphSpec]:
    config = model.config
    with_types = config.model_type in ("bert", "albert", "electra", "deberta-v2", "deberta") \
        and int(getattr(config, "type_vocab_size", 0) or 0) > 0
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])
    choice = task == "multiple-choice"
    axes = ({0: "batch_size", 1: "num_choices", 2: "sequence_length"} if choice
            else {0: "batch_size", 1: "sequence_length"})
    choices = 2

    def make(shape: Shape) -> Feeds:
        b, s = shape["batch_size"], shape["sequence_length"]
        rows = b * choices if choice else b
        feeds = {"input_ids": example_ids(config, rows, s), "attention_mask": example_mask(rows, s)}
        if with_types:
            types = int(config.type_vocab_size)
            feeds["token_type_ids"] = torch.randint(0, types, (rows, s)) if types > 1 \
                else torch.zeros(rows, s, dtype=torch.long)
        if choice:
            feeds = {k: v.reshape(b, choices, s) for k, v in feeds.items()}
        return feeds

    fields = TEXT_FIELDS[task]
    return [GraphSpec("model.onnx", TextModel(model, fields), names, fields,
                      {n: dict(axes) for n in names}, make,
                      [{"batch_size": batch, "sequence_length": seq},
                       {"batch_size": batch + 1, "sequence_length": seq + 5}])]


def _decoder(model: Any, task: str, batch: int, seq: int, *,
             position_ids: bool | None = None) -> list[GraphSpec]:
    config = model.config
    with_pos = decoder_uses_position_ids(config) and position_ids is not False
    dtype = float_dtype(model)
    names = llm.OPTIMUM_DIM_NAMES
    if task in ("text-generation", "feature-extraction-with-past"):
        inputs = ["input_ids", "attention_mask"] + (["position_ids"] if with_pos else [])

        def make_plain(shape: Shape) -> Feeds:
            b, s = shape["batch_size"], shape["sequence_length"]
            feeds = {"input_ids": example_ids(config, b, s), "attention_mask": example_mask(b, s, pad=False)}
            if with_pos:
                feeds["position_ids"] = torch.arange(s).repeat(b, 1)
            return feeds

        if task == "text-generation":
            module, outputs = DecoderModel(model, ["logits"]), ["logits"]
        else:  # optimum's: the prompt's hidden states and the cache it makes, no past inputs
            module = PrefillWithCache(model, ["last_hidden_state"])
            outputs = llm.cache_output_names(llm._cache_geometry(config)[0],
                                             "last_hidden_state")
        return [GraphSpec("model.onnx", module, inputs, outputs,
                          {n: {0: "batch_size", 1: "sequence_length"} for n in inputs},
                          make_plain,
                          [{"batch_size": batch, "sequence_length": seq},
                           {"batch_size": batch + 1, "sequence_length": seq + 5}])]

    num_layers, _, _ = llm._cache_geometry(config)
    input_names = llm.cache_input_names(num_layers, with_position_ids=with_pos)
    output_names = llm.cache_output_names(num_layers)
    wrapper = llm.DecoderWithCache(model).eval()

    def make(shape: Shape) -> Feeds:
        b, s, p = shape["batch_size"], shape["sequence_length"], shape["past_sequence_length"]
        feeds: Feeds = {"input_ids": example_ids(config, b, s),
                        "attention_mask": torch.ones(b, p + s, dtype=torch.long)}
        for i, (k, v) in enumerate(llm.empty_past(config, b, p, dtype=dtype)):
            feeds[f"past_key_values.{i}.key"] = torch.randn(k.shape).to(dtype)
            feeds[f"past_key_values.{i}.value"] = torch.randn(v.shape).to(dtype)
        if with_pos:
            feeds["position_ids"] = torch.arange(p, p + s).repeat(b, 1)
        return feeds

    def call(feeds: Feeds) -> dict[str, torch.Tensor]:
        past = [(feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"])
                for i in range(num_layers)]
        first, present = wrapper(feeds["input_ids"], feeds["attention_mask"], past,
                                 feeds.get("position_ids"))
        return dict(zip(output_names, [first, *present]))

    def export(*, dynamic: bool, **kwargs: Any) -> Any:
        return llm.export_decoder_with_cache(
            model, batch=batch, sequence=seq, past_sequence=seq + 1, with_position_ids=with_pos,
            dim_names=names, dynamic=dynamic, **kwargs)

    dims = {n: {0: "batch_size", 2: "past_sequence_length"} for n in input_names
            if n.startswith("past_key_values.")}
    return [GraphSpec("model.onnx", wrapper, input_names, output_names, dims, make,
                      [{"batch_size": batch, "sequence_length": seq,
                        "past_sequence_length": seq + 1},
                       # a prefill step (empty past) and a one-token decode step
                       {"batch_size": batch + 1, "sequence_length": seq + 2,
                        "past_sequence_length": 0},
                       {"batch_size": batch, "sequence_length": 1,
                        "past_sequence_length": seq + 4}],
                      export=export, call=call)]


_FIXED_SIZE_VISION = ("vit", "deit", "beit")

# The output fields of each vision task (optimum's names).
_VISION_FIELDS = {
    "feature-extraction": ["last_hidden_state"],
    "image-classification": ["logits"],
    "object-detection": ["logits", "pred_boxes"],  # [batch_size, num_queries, ...]
    "semantic-segmentation": ["logits"],  # [batch_size, num_labels, height', width']
}


def _vision(model: Any, task: str, batch: int, seq: int) -> list[GraphSpec]:
    config = model.config
    dtype = float_dtype(model)
    fields = _VISION_FIELDS[task]
    channels = int(getattr(config, "num_channels", 3))
    fixed = config.model_type in _FIXED_SIZE_VISION
    size = int(getattr(config, "image_size", 224) or 224) if fixed else 64
    # The second shape is not square where height and width are dynamic.
    size2 = (size, size) if fixed else (96, 80)
    axes = {0: "batch_size"} if fixed else {0: "batch_size", 2: "height", 3: "width"}

    def make(shape: Shape) -> Feeds:
        return {"pixel_values": torch.rand(shape["batch_size"], channels, shape["height"],
                                           shape["width"]).to(dtype)}

    return [GraphSpec("model.onnx", VisionModel(model, fields), ["pixel_values"], fields,
                      {"pixel_values": axes}, make,
                      [{"batch_size": batch, "height": size, "width": size},
                       {"batch_size": batch + 1, "height": size2[0], "width": size2[1]}])]


def _audio(model: Any, task: str, batch: int, seq: int) -> list[GraphSpec]:
    dtype = float_dtype(model)
    fields = ["last_hidden_state"] if task == "feature-extraction" else ["logits"]

    def make(shape: Shape) -> Feeds:
        return {"input_values": torch.randn(shape["batch_size"],
                                            shape["sequence_length"]).to(dtype)}

    return [GraphSpec("model.onnx", AudioModel(model, fields), ["input_values"], fields,
                      {"input_values": {0: "batch_size", 1: "sequence_length"}}, make,
                      raw_audio_shapes(model.config, batch))]


def _clip(model: Any, task: str, batch: int, seq: int) -> list[GraphSpec]:
    config = model.config
    dtype = float_dtype(model)
    size = int(config.vision_config.image_size)
    max_pos = int(config.text_config.max_position_embeddings)
    seq = min(seq, max_pos)
    if task == "feature-extraction":
        fields = ["text_embeds", "image_embeds"]
    else:
        fields = ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"]
    names = ["input_ids", "pixel_values", "attention_mask"]
    dims = {"input_ids": {0: "text_batch_size", 1: "sequence_length"},
            "pixel_values": {0: "image_batch_size"},
            "attention_mask": {0: "text_batch_size", 1: "sequence_length"}}

    def make(shape: Shape) -> Feeds:
        b, s = shape["text_batch_size"], shape["sequence_length"]
        return {"input_ids": example_ids(config.text_config, b, s),
                "pixel_values": torch.rand(shape["image_batch_size"], 3, size, size).to(dtype),
                "attention_mask": example_mask(b, s)}

    return [GraphSpec("model.onnx", ClipModel(model, fields), names, fields, dims, make,
                      [{"text_batch_size": batch, "sequence_length": seq,
                        "image_batch_size": batch + 1},
                       {"text_batch_size": batch + 1, "sequence_length": max(2, seq - 3),
                        "image_batch_size": batch + 2}])]


FAMILIES: dict[str, Callable[[Any, str, int, int], list[GraphSpec]]] = {
    "text-encoder": _text_encoder,
    "decoder": _decoder,
    "vision": _vision,
    "audio": _audio,
    "clip": _clip,
}


def graphs_for(model: Any, family: str, task: str, *, batch: int = 2,
               sequence: int = 8, position_ids: bool | None = None) -> list[GraphSpec]:
    """The graphs of `task` for `model` (one per output file). `position_ids=False`: a
    decoder's graph takes no position_ids input (positions are the cache's, as the GenAI
    builder's graphs; what the ONNX Runtime target needs to move rotary into
    GroupQueryAttention)."""
    if family == "speech-seq2seq":
        from onnxport.tasks.speech import masked_speech, speech_graphs

        if masked_speech(model):  # audio of any length with a mask (not Whisper's)
            return speech_graphs(model, family, task, batch, sequence)
    if family in ("seq2seq", "speech-seq2seq", "vision-seq2seq"):
        from onnxport.tasks.seq2seq import seq2seq_graphs

        return seq2seq_graphs(model, family, task, batch, sequence)
    if family == "text-to-audio" and model.config.model_type == "speecht5":
        from onnxport.tasks.speecht5 import speecht5_graphs

        return speecht5_graphs(model, task, batch, sequence)
    if family == "text-to-audio":
        from onnxport.tasks.text_to_audio import text_to_audio_graphs

        return text_to_audio_graphs(model, task, batch, sequence)
    if family == "derived":
        from onnxport.tasks.derive import derived_graphs

        return derived_graphs(model, task, batch, sequence)
    if family == "decoder":
        return _decoder(model, task, batch, sequence, position_ids=position_ids)
    return FAMILIES[family](model, task, batch, sequence)
