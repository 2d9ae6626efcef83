"""SpeechT5 text-to-speech with a vocoder: optimum's three graphs (batch 1, as optimum's).

    encoder_model.onnx                input_ids [1, encoder_sequence_length]
                                      -> encoder_outputs, encoder_attention_mask
    decoder_model_merged.onnx         output_sequence [1, decoder_sequence_length, num_mel_bins],
                                      speaker_embeddings [1, speaker_embedding_dim],
                                      encoder_hidden_states (the encoder's
                                      encoder_outputs), encoder_attention_mask,
                                      past_key_values.{i}.decoder/encoder.key/value,
                                      use_cache_branch [1] (bool)
                                      -> output_sequence_out, spectrum [reduction_factor,
                                         num_mel_bins], prob [reduction_factor],
                                         present.{i}.decoder/encoder.key/value
    decoder_postnet_and_vocoder.onnx  spectrogram [n_spectrums x reduction_factor,
                                      num_mel_bins] -> waveform [n_samples]

One decoder step as transformers' `generate_speech` runs it: the prenet over the whole
output sequence, the decoder layers on its last position. `use_cache_branch` False means
"first step": the self-attention past is masked out (a dummy of any length may be fed,
as optimum's clients feed one). The cross-attention keys and values are recomputed from
`encoder_hidden_states` at every step (the same values the encoder past holds); the
`past_key_values.{i}.encoder.*` inputs keep optimum's signature and are not read.

The prenet drops activations even in eval (Tacotron 2's rule). As optimum's graph, this
one drops with probability p (keeps with 1 - p, scaled by 1 / (1 - p)); p is the graph
input `prenet_dropout`, an initializer holding the config's value, so clients that do
not feed it get the checkpoint's behaviour and feeding 0 makes a step deterministic
(how validation compares ONNX Runtime with eager). transformers' own `_consistent_dropout`
keeps with probability p instead (the same at the default 0.5).

The vocoder comes as optimum-cli takes it: `--model-kwargs '{"vocoder": DIR}'`, DIR a
local SpeechT5HifiGan folder (save_pretrained).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from onnxport.tasks.errors import CheckpointError, TaskError
from onnxport.tasks.specs import Feeds, GraphSpec, Shape, example_ids, export_named

__all__ = ["MODEL_KWARGS", "apply_model_kwargs", "check_model_kwargs", "parse_model_kwargs",
           "speecht5_graphs"]

# The --model-kwargs keys onnxport reads, per model_type (optimum-cli's).
MODEL_KWARGS = {"speecht5": ("vocoder",)}


def parse_model_kwargs(text: str | dict[str, Any] | None) -> dict[str, Any]:
    """--model-kwargs' JSON object (a dict passes through)."""
    if text is None:
        return {}
    if isinstance(text, dict):
        return dict(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskError(f"--model-kwargs is not JSON: {e}: {text!r}") from e
    if not isinstance(value, dict):
        raise TaskError(f"--model-kwargs must be a JSON object, got {type(value).__name__}: "
                        f"{text!r}")
    return value


def check_model_kwargs(model_type: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model kwargs checked against the model type, the vocoder loaded.

    Raises:
        TaskError: a key this model type does not take.
        CheckpointError: the vocoder is not a local SpeechT5HifiGan folder.
    """
    known = MODEL_KWARGS.get(model_type, ())
    for key in kwargs:
        if key not in known:
            takes = (f"it takes: {', '.join(known)}" if known else "it takes none")
            raise TaskError(f"--model-kwargs: unknown key {key!r} for model_type "
                            f"{model_type!r}; {takes}")
    loaded = dict(kwargs)
    if "vocoder" in kwargs:
        loaded["vocoder"] = _load_vocoder(kwargs["vocoder"])
    return loaded


def _load_vocoder(path: Any) -> torch.nn.Module:
    folder = Path(str(path))
    if not (folder / "config.json").is_file():
        where = ("a hub id: onnxport reads local folders only (save the vocoder with "
                 "save_pretrained, or download it, and pass its folder)"
                 if not folder.exists() else "a folder without config.json")
        raise CheckpointError(f"--model-kwargs vocoder {str(path)!r} is {where}")
    from transformers import AutoConfig, SpeechT5HifiGan

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    if getattr(config, "model_type", None) != "speecht5_hifigan":
        raise CheckpointError(f"--model-kwargs vocoder {str(path)!r} is a "
                              f"{getattr(config, 'model_type', None)!r} checkpoint, not a "
                              f"SpeechT5HifiGan (model_type 'speecht5_hifigan')")
    return SpeechT5HifiGan.from_pretrained(folder, local_files_only=True).eval()


def apply_model_kwargs(model: Any, loaded: dict[str, Any]) -> Any:
    """`model` with the loaded kwargs attached (the vocoder as `model.vocoder`)."""
    if "vocoder" in loaded:
        model.vocoder = loaded["vocoder"]
    return model


# -- the graphs --------------------------------------------------------------------------------

class SpeechT5Encoder(torch.nn.Module):
    """input_ids -> (encoder_outputs, encoder_attention_mask)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.ones_like(input_ids)
        out = self.model.speecht5.encoder(input_values=input_ids, attention_mask=mask)
        return out.last_hidden_state, mask


def _prenet(prenet: Any, values: torch.Tensor, speaker: torch.Tensor,
            p: torch.Tensor) -> torch.Tensor:
    """SpeechT5SpeechDecoderPrenet.forward with optimum's dropout (keep with 1 - p)."""
    hidden = values
    for layer in prenet.layers:
        hidden = torch.nn.functional.relu(layer(hidden))
        keep = torch.rand_like(hidden) >= p
        hidden = torch.where(keep, hidden, 0.0) / (1 - p)
    hidden = prenet.encode_positions(prenet.final_layer(hidden))
    speaker = torch.nn.functional.normalize(speaker).unsqueeze(1)
    speaker = speaker.expand(-1, hidden.size(1), -1)
    return torch.nn.functional.relu(prenet.speaker_embeds_layer(torch.cat([hidden, speaker],
                                                                          dim=-1)))


class SpeechT5DecoderStep(torch.nn.Module):
    """One step of generate_speech's loop; `past` flat: per layer self key, value, cross
    key, value."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, output_sequence: torch.Tensor, speaker_embeddings: torch.Tensor,
                encoder_hidden_states: torch.Tensor, encoder_attention_mask: torch.Tensor,
                past: list[torch.Tensor], use_cache_branch: torch.Tensor,
                prenet_dropout: torch.Tensor) -> Any:
        from transformers import DynamicCache, EncoderDecoderCache

        model, config = self.model, self.model.config
        hidden = _prenet(model.speecht5.decoder.prenet, output_sequence, speaker_embeddings,
                         prenet_dropout)
        layers = range(len(past) // 4)
        cache = EncoderDecoderCache(
            DynamicCache([(past[4 * i], past[4 * i + 1]) for i in layers], config=config),
            DynamicCache(config=config))
        # the first step (use_cache_branch False) attends to none of the dummy past
        past_length = past[0].shape[2]
        seen = use_cache_branch.to(torch.long).expand(1, past_length)
        mask = torch.cat([seen, torch.ones(1, 1, dtype=torch.long)], dim=1)
        out = model.speecht5.decoder.wrapped_decoder(
            hidden_states=hidden[:, -1:], attention_mask=mask,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask, cache=cache, use_cache=True,
            return_dict=True)
        last = out.last_hidden_state[0, -1]
        spectrum = model.speech_decoder_postnet.feat_out(last).view(
            config.reduction_factor, config.num_mel_bins)
        output_sequence_out = torch.cat(
            [output_sequence, spectrum[-1].view(1, 1, config.num_mel_bins)], dim=1)
        prob = torch.sigmoid(model.speech_decoder_postnet.prob_out(last))
        present: list[torch.Tensor] = []
        new = out.cache
        for i, layer in enumerate(new.self_attention_cache.layers):
            cross = new.cross_attention_cache.layers[i]
            present += [layer.keys, layer.values, cross.keys, cross.values]
        return output_sequence_out, spectrum, prob, present


class PostnetAndVocoder(torch.nn.Module):
    """spectrogram [frames, num_mel_bins] -> waveform [n_samples]."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:
        refined = self.model.speech_decoder_postnet.postnet(spectrogram.unsqueeze(0))
        return self.model.vocoder(refined.squeeze(0))


def _encoder_spec(model: Any, seq: int) -> GraphSpec:
    config = model.config

    def make(shape: Shape) -> Feeds:
        return {"input_ids": example_ids(config, 1, shape["encoder_sequence_length"])}

    return GraphSpec("encoder_model.onnx", SpeechT5Encoder(model).eval(), ["input_ids"],
                     ["encoder_outputs", "encoder_attention_mask"],
                     {"input_ids": {1: "encoder_sequence_length"}}, make,
                     [{"encoder_sequence_length": seq},
                      {"encoder_sequence_length": seq + 5}])


def _decoder_spec(model: Any, seq: int) -> GraphSpec:
    config = model.config
    layers = int(config.decoder_layers)
    heads = int(config.decoder_attention_heads)
    head_dim = int(config.hidden_size) // heads
    past_names, present_names = [], []
    for i in range(layers):
        for side in ("decoder", "encoder"):
            for kind in ("key", "value"):
                past_names.append(f"past_key_values.{i}.{side}.{kind}")
                present_names.append(f"present.{i}.{side}.{kind}")
    # optimum's decoder names the encoder's output as transformers' decoder does (and
    # transformers.js feeds it so)
    base = ["output_sequence", "speaker_embeddings", "encoder_hidden_states",
            "encoder_attention_mask"]
    names = [*base, *past_names, "use_cache_branch", "prenet_dropout"]
    outputs = ["output_sequence_out", "spectrum", "prob", *present_names]
    dims: dict[str, dict[int, str]] = {
        "output_sequence": {1: "decoder_sequence_length"},
        "encoder_hidden_states": {1: "encoder_sequence_length"},
        "encoder_attention_mask": {1: "encoder_sequence_length"}}
    for n in past_names:
        dims[n] = {2: "encoder_sequence_length_out" if ".encoder." in n
                   else "past_decoder_sequence_length"}
    module = SpeechT5DecoderStep(model).eval()

    def make(shape: Shape) -> Feeds:
        t, e, p = (shape["decoder_sequence_length"], shape["encoder_sequence_length"],
                   shape["past_decoder_sequence_length"])
        feeds: Feeds = {
            "output_sequence": torch.rand(1, t, config.num_mel_bins),
            "speaker_embeddings": torch.randn(1, config.speaker_embedding_dim),
            "encoder_hidden_states": torch.randn(1, e, config.hidden_size),
            "encoder_attention_mask": torch.ones(1, e, dtype=torch.long),
            "use_cache_branch": torch.tensor([shape["use_cache_branch"] == 1]),
            # no dropout: ONNX Runtime's random numbers are not torch's
            "prenet_dropout": torch.tensor(0.0)}
        for n in past_names:
            feeds[n] = torch.randn(1, heads, e if ".encoder." in n else p, head_dim)
        return feeds

    def call(feeds: Feeds) -> dict[str, torch.Tensor]:
        out = module(*[feeds[n] for n in base], [feeds[n] for n in past_names],
                     feeds["use_cache_branch"], feeds["prenet_dropout"])
        flat = [out[0], out[1], out[2], *out[3]]
        return dict(zip(outputs, flat))

    shapes = [{"decoder_sequence_length": 4, "encoder_sequence_length": seq,
               "past_decoder_sequence_length": 3, "use_cache_branch": 1},
              {"decoder_sequence_length": 7, "encoder_sequence_length": seq + 5,
               "past_decoder_sequence_length": 6, "use_cache_branch": 1},
              {"decoder_sequence_length": 1, "encoder_sequence_length": seq + 2,
               "past_decoder_sequence_length": 1, "use_cache_branch": 0}]
    spec = GraphSpec("decoder_model_merged.onnx", module, names, outputs, dims, make, shapes,
                     call=call)
    default_p = float(config.speech_decoder_prenet_dropout)

    def export(*, dynamic: bool, **kwargs: Any) -> Any:
        feeds = make(shapes[0])
        args = (*[feeds[n] for n in base], [feeds[n] for n in past_names],
                feeds["use_cache_branch"], feeds["prenet_dropout"])
        dynamic_shapes = None
        if dynamic:
            dynamic_shapes = {**{n: dims.get(n) for n in base},
                              "past": [dict(dims[n]) for n in past_names],
                              "use_cache_branch": None, "prenet_dropout": None}
        program = export_named(module, args, names, outputs, dynamic_shapes, **kwargs)
        return _with_default(program, "prenet_dropout", default_p)

    spec.export = export
    return spec


def _with_default(program: Any, name: str, value: float) -> Any:
    """The graph input `name` with `value` as its initializer (an overridable default)."""
    import onnx_ir as ir

    graph = program.model.graph
    for v in graph.inputs:
        if v.name == name:
            v.const_value = ir.tensor(np.array(value, dtype=np.float32), name=name)
            graph.register_initializer(v)
    return program


def _vocoder_spec(model: Any) -> GraphSpec:
    config = model.config

    def make(shape: Shape) -> Feeds:
        return {"spectrogram": torch.randn(shape["n_spectrums x reduction_factor"],
                                           config.num_mel_bins)}

    return GraphSpec("decoder_postnet_and_vocoder.onnx", PostnetAndVocoder(model).eval(),
                     ["spectrogram"], ["waveform"],
                     {"spectrogram": {0: "n_spectrums x reduction_factor"}}, make,
                     [{"n_spectrums x reduction_factor": 20},
                      {"n_spectrums x reduction_factor": 13}])


def speecht5_graphs(model: Any, task: str, batch: int, seq: int) -> list[GraphSpec]:
    """SpeechT5ForTextToSpeech's three graphs; `model.vocoder` must be set
    (--model-kwargs '{"vocoder": DIR}')."""
    if getattr(model, "vocoder", None) is None:
        raise TaskError("SpeechT5 text-to-audio needs a vocoder, as optimum-cli does: "
                        "--model-kwargs '{\"vocoder\": \"DIR\"}' with DIR a local "
                        "SpeechT5HifiGan folder")
    return [_encoder_spec(model, seq), _decoder_spec(model, seq), _vocoder_spec(model)]
