"""Encoder-decoder graphs (T5, BART, Whisper, vision encoder-decoders): optimum's
three-file layout.

    encoder_model.onnx            input_ids, attention_mask (Whisper: input_features;
                                  an image encoder: pixel_values) -> last_hidden_state
    decoder_model.onnx            input_ids, encoder_hidden_states, encoder_attention_mask
                                  -> logits, present.{i}.decoder.key/value,
                                     present.{i}.encoder.key/value   (the first step)
    decoder_with_past_model.onnx  the same inputs plus past_key_values.{i}.decoder.key/value
                                  and past_key_values.{i}.encoder.key/value
                                  -> logits, present.{i}.decoder.key/value  (later steps)

Whisper's and image encoders' decoders take no encoder_attention_mask: their encoder's length
is fixed. Composite models (EncoderDecoderModel, VisionEncoderDecoderModel) read the
decoder's geometry from its sub-config. The cache goes in as plain tensors and
is rebuilt as transformers' EncoderDecoderCache inside forward.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from onnxport.tasks.specs import (Feeds, GraphSpec, Shape, example_ids, example_mask,
                                  export_named, float_dtype, named_inputs)

__all__ = ["seq2seq_graphs"]


def _decoder_config(config: Any) -> Any:
    """The decoder's config: its own sub-config in a composite model (EncoderDecoderModel,
    VisionEncoderDecoderModel), else the model's (which may hold a small `decoder` config
    of its own, as FSMT's vocabulary, beside the decoder's sizes)."""
    from transformers import PretrainedConfig

    sub = getattr(config, "decoder", None)
    own = any(getattr(config, k, None) for k in ("decoder_layers", "num_decoder_layers",
                                                  "num_layers", "num_hidden_layers"))
    return sub if isinstance(sub, PretrainedConfig) and not own else config


def _geometry(config: Any) -> tuple[int, int, int]:
    """(decoder layers, heads, head_dim)."""
    config = _decoder_config(config)
    layers = int(getattr(config, "num_decoder_layers", None) or
                 getattr(config, "decoder_layers", None) or
                 getattr(config, "num_layers", None) or config.num_hidden_layers)
    heads = int(getattr(config, "decoder_attention_heads", None) or
                getattr(config, "num_heads", None) or config.num_attention_heads)
    d_model = int(getattr(config, "d_model", None) or config.hidden_size)
    head_dim = int(getattr(config, "d_kv", None) or d_model // heads)
    return layers, heads, head_dim


class Encoder(torch.nn.Module):
    """The model's encoder, called with its inputs (text ids and mask, mel features, pixel
    values) by keyword, in `names` order -> last_hidden_state."""

    def __init__(self, model: Any, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        encoder = self.model.get_encoder()
        return encoder(**dict(zip(self.names, inputs))).last_hidden_state


def _encoder(model: Any, names: list[str]) -> torch.nn.Module:
    return named_inputs(Encoder(model, names), names)


class Decoder(torch.nn.Module):
    """One decoder step; `past_key_values` flat: per layer self key, value, cross key, value.
    `masked`: the decoder takes the encoder's attention mask (text encoders)."""

    def __init__(self, model: Any, *, with_past: bool, masked: bool,
                 field: str = "logits") -> None:
        super().__init__()
        self.model, self.with_past, self.masked, self.field = model, with_past, masked, field

    def forward(self, input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None,
                past_key_values: list[torch.Tensor] | None = None) -> Any:
        from transformers import DynamicCache, EncoderDecoderCache

        config = _decoder_config(self.model.config)
        if past_key_values:
            p = past_key_values
            layers = range(len(p) // 4)
            cache = EncoderDecoderCache(
                DynamicCache([(p[4 * i], p[4 * i + 1]) for i in layers], config=config),
                DynamicCache([(p[4 * i + 2], p[4 * i + 3]) for i in layers], config=config))
        else:
            cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        encoder_outputs, kwargs = self.encoder_side(encoder_hidden_states,
                                                    encoder_attention_mask)
        out = self.model(encoder_outputs=encoder_outputs, decoder_input_ids=input_ids,
                         past_key_values=cache, use_cache=True, **kwargs)
        present: list[torch.Tensor] = []
        new = out.past_key_values
        for i, layer in enumerate(new.self_attention_cache.layers):
            present += [layer.keys, layer.values]
            if not self.with_past:
                cross = new.cross_attention_cache.layers[i]
                present += [cross.keys, cross.values]
        return getattr(out, self.field), present

    def encoder_side(self, hidden: torch.Tensor,
                     mask: torch.Tensor | None) -> tuple[Any, dict[str, Any]]:
        """The model's `encoder_outputs` and the keyword arguments that carry the mask."""
        return (hidden,), ({"attention_mask": mask} if self.masked else {})


def seq2seq_graphs(model: Any, family: str, task: str, batch: int,
                   seq: int) -> list[GraphSpec]:
    """Optimum's files of an encoder-decoder: encoder_model.onnx, decoder_model.onnx and,
    for a task `-with-past`, decoder_with_past_model.onnx."""
    layout = _Layout.of(model, family, task)
    encoder = _encoder_spec(model, layout, task, batch, seq)
    hidden, enc_length = _encoder_output(model, encoder)
    if layout.speech:
        enc_length = int(model.config.max_source_positions)  # the mel frames, halved
    return [encoder, *_decoder_specs(model, layout, hidden, enc_length, batch, seq)]


@dataclasses.dataclass(frozen=True)
class _Layout:
    """What the three graphs of one encoder-decoder share."""

    speech: bool  # a Whisper-like encoder of mel features
    vision: bool  # an image encoder
    decoder_config: Any
    encoder_config: Any
    layers: int
    heads: int
    head_dim: int
    dtype: torch.dtype
    with_past: bool
    field: str  # the decoder's output: logits, or last_hidden_state (feature-extraction)

    @property
    def fixed(self) -> bool:
        """The encoder's length is fixed by the audio or image size."""
        return self.speech or self.vision

    @classmethod
    def of(cls, model: Any, family: str, task: str) -> _Layout:
        config = model.config
        layers, heads, head_dim = _geometry(config)
        # feature-extraction-with-past: the base model's decoder states instead of logits
        field = "last_hidden_state" if task.startswith("feature-extraction") else "logits"
        return cls(family == "speech-seq2seq", family == "vision-seq2seq",
                   _decoder_config(config), getattr(config, "encoder", None) or config,
                   layers, heads, head_dim, float_dtype(model), task.endswith("-with-past"),
                   field)


_ENC_AXES = {0: "batch_size", 1: "encoder_sequence_length"}


def _encoder_spec(model: Any, layout: _Layout, task: str, batch: int, seq: int) -> GraphSpec:
    config, encoder_config, dtype = model.config, layout.encoder_config, layout.dtype
    enc_axes = dict(_ENC_AXES)
    if layout.vision:
        size = encoder_config.image_size
        height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
        channels = int(getattr(encoder_config, "num_channels", 3) or 3)

        def make_enc(shape: Shape) -> Feeds:
            return {"pixel_values": torch.rand(shape["batch_size"], channels, height,
                                               width).to(dtype)}

        encoder = GraphSpec("encoder_model.onnx", _encoder(model, ["pixel_values"]),
                            ["pixel_values"],
                            ["last_hidden_state"], {"pixel_values": {0: "batch_size"}},
                            make_enc, [{"batch_size": batch}, {"batch_size": batch + 1}])
    elif layout.speech:
        if not getattr(config, "num_mel_bins", None) or \
                not getattr(config, "max_source_positions", None):
            from onnxport.tasks.errors import UnsupportedTaskError

            raise UnsupportedTaskError(
                f"onnxport's {task} graphs take Whisper's layout, a fixed number of mel "
                f"frames (num_mel_bins, max_source_positions); {type(model).__name__} takes "
                f"audio of any length with a mask, which its decoder subsamples: export "
                f"task 'feature-extraction' (one file)")
        mels = int(config.num_mel_bins)
        frames = 2 * int(config.max_source_positions)

        def make_enc(shape: Shape) -> Feeds:
            return {"input_features": torch.randn(shape["batch_size"], mels, frames).to(dtype)}

        encoder = GraphSpec("encoder_model.onnx", _encoder(model, ["input_features"]),
                            ["input_features"],
                            ["last_hidden_state"], {"input_features": {0: "batch_size"}},
                            make_enc, [{"batch_size": batch}, {"batch_size": batch + 1}])
    else:
        def make_enc(shape: Shape) -> Feeds:
            b, s = shape["batch_size"], shape["encoder_sequence_length"]
            return {"input_ids": example_ids(encoder_config, b, s), "attention_mask": example_mask(b, s)}

        text = ["input_ids", "attention_mask"]
        encoder = GraphSpec("encoder_model.onnx", _encoder(model, text), text,
                            ["last_hidden_state"],
                            {"input_ids": enc_axes, "attention_mask": enc_axes}, make_enc,
                            [{"batch_size": batch, "encoder_sequence_length": seq},
                             {"batch_size": batch + 1, "encoder_sequence_length": seq + 5}])
    return encoder


def _decoder_specs(model: Any, layout: _Layout, hidden: int, enc_length: int, batch: int,
                   seq: int, decoder_class: type[Decoder] = Decoder) -> list[GraphSpec]:
    """decoder_model.onnx, and decoder_with_past_model.onnx for a task `-with-past`
    (`decoder_class`: a Decoder that hands the model the encoder's side its own way)."""
    layers, heads, head_dim, dtype = layout.layers, layout.heads, layout.head_dim, layout.dtype
    fixed, field, decoder_config = layout.fixed, layout.field, layout.decoder_config
    enc_axes = dict(_ENC_AXES)
    def present_names(cross: bool) -> list[str]:
        names = []
        for i in range(layers):
            names += [f"present.{i}.decoder.key", f"present.{i}.decoder.value"]
            if cross:
                names += [f"present.{i}.encoder.key", f"present.{i}.encoder.value"]
        return names

    past_names = [n.replace("present.", "past_key_values.", 1) for n in present_names(True)]
    base_inputs = ["input_ids", "encoder_hidden_states"] + ([] if fixed else
                                                            ["encoder_attention_mask"])

    def make_dec(shape: Shape, past: bool) -> Feeds:
        b, t = shape["batch_size"], shape["decoder_sequence_length"]
        e = enc_length if fixed else shape["encoder_sequence_length"]
        feeds: Feeds = {"input_ids": example_ids(decoder_config, b, t),
                        "encoder_hidden_states": torch.randn(b, e, hidden).to(dtype)}
        if not fixed:
            feeds["encoder_attention_mask"] = example_mask(b, e)
        if past:
            p = shape["past_decoder_sequence_length"]
            for name in past_names:
                length = e if ".encoder." in name else p
                feeds[name] = torch.randn(b, heads, length, head_dim).to(dtype)
        return feeds

    def call_for(module: Decoder, past: bool, outputs: list[str]) -> Any:
        def call(feeds: Feeds) -> dict[str, torch.Tensor]:
            flat = [feeds[n] for n in past_names] if past else None
            logits, present = module(feeds["input_ids"], feeds["encoder_hidden_states"],
                                     feeds.get("encoder_attention_mask"), flat)
            return dict(zip(outputs, [logits, *present]))
        return call

    dec_dims: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
        "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"},
        "encoder_attention_mask": dict(enc_axes)}
    if fixed:
        dec_dims["encoder_hidden_states"] = {0: "batch_size"}
    specs: list[GraphSpec] = []
    first_shapes = [{"batch_size": batch, "decoder_sequence_length": seq - 3,
                     "encoder_sequence_length": seq},
                    {"batch_size": batch + 1, "decoder_sequence_length": seq - 1,
                     "encoder_sequence_length": seq + 5}]
    if fixed:  # the encoder's length is the audio's or image's, not a dim of these graphs
        for shape in first_shapes:
            del shape["encoder_sequence_length"]
    decoder = decoder_class(model, with_past=False, masked=not fixed, field=field)
    out_names = [field, *present_names(True)]
    spec = GraphSpec("decoder_model.onnx", decoder, base_inputs, out_names,
                     {n: dec_dims[n] for n in base_inputs},
                     lambda shape: make_dec(shape, False), first_shapes)
    spec.call = call_for(decoder, False, out_names)
    specs.append(spec)
    if layout.with_past:
        decoder_p = decoder_class(model, with_past=True, masked=not fixed, field=field)
        out_p = [field, *present_names(False)]
        names_p = [*base_inputs, *past_names]
        dims_p = {n: dec_dims[n] for n in base_inputs}
        for n in past_names:
            dims_p[n] = ({0: "batch_size", 2: "encoder_sequence_length"} if ".encoder." in n
                         else {0: "batch_size", 2: "past_decoder_sequence_length"})
            if fixed and ".encoder." in n:
                dims_p[n] = {0: "batch_size"}
        shapes_p = [{**first_shapes[0], "decoder_sequence_length": 2,
                     "past_decoder_sequence_length": seq - 3},
                    {**first_shapes[1], "decoder_sequence_length": 1,
                     "past_decoder_sequence_length": seq + 1}]
        spec_p = GraphSpec("decoder_with_past_model.onnx", decoder_p, names_p, out_p, dims_p,
                           lambda shape: make_dec(shape, True), shapes_p)
        spec_p.call = call_for(decoder_p, True, out_p)
        spec_p.export = _past_export(spec_p, base_inputs, past_names)
        specs.append(spec_p)
    return specs




def _encoder_output(model: Any, encoder: GraphSpec) -> tuple[int, int]:
    """(width, length) of the encoder's last_hidden_state at its first shape: from the
    config, or by running the encoder once when the config does not say (composite models,
    image encoders) and the weights are real."""
    config = model.config
    width = getattr(config, "d_model", None) or getattr(config, "hidden_size", None)
    real = not any(p.is_meta or isinstance(p, torch._subclasses.FakeTensor)
                   for p in model.parameters())
    if (width is None or hasattr(config, "encoder") or "pixel_values" in encoder.input_names) \
            and real:
        feeds = encoder.make_inputs(encoder.shapes[0])
        with torch.no_grad():
            out = encoder.module(*[feeds[n] for n in encoder.input_names])
        return int(out.shape[-1]), int(out.shape[1])
    return int(width), 0


def _past_export(spec: GraphSpec, base: list[str], past: list[str]) -> Any:
    """The export of the decoder with a cache: its past as one nested list argument."""
    def run(*, dynamic: bool, **kwargs: Any) -> Any:
        feeds = spec.make_inputs(spec.shapes[0])
        args: tuple[Any, ...] = tuple(feeds[n] for n in base)
        if "encoder_attention_mask" not in base:
            args += (None,)
        args += ([feeds[n] for n in past],)
        shapes = None
        if dynamic:
            shapes = {n: spec.dims.get(n) or None for n in base}
            if "encoder_attention_mask" not in base:
                shapes["encoder_attention_mask"] = None
            shapes["past_key_values"] = [dict(spec.dims[n]) for n in past]
        return export_named(spec.module, args, [*base, *past], spec.output_names, shapes,
                            **kwargs)
    return run
