"""Text-to-audio graphs: VITS (MMS-TTS), optimum's one-file layout.

    model.onnx   input_ids, attention_mask [text_batch_size, sequence_length]
                 -> waveform [text_batch_size, n_samples],
                    spectrogram [text_batch_size, flow_size, num_frames]

VITS samples twice from a normal distribution: the stochastic duration predictor's latents
(scaled by `config.noise_scale_duration`) and the prior's latents (`config.noise_scale`).
The graph samples them as eager does (RandomNormalLike; ONNX Runtime's generator, so the
same text gives other speech than eager's at the same torch seed), and the frame count
follows from the predicted durations, so `n_samples` is computed in the graph. The two
scales and `config.speaking_rate` are also graph inputs with the config's values as their
defaults (initializers of the same name): clients that feed only input_ids and
attention_mask get the checkpoint's voice; feeding `noise_scale = noise_scale_duration = 0`
makes the output deterministic, which is how validation compares ONNX Runtime with eager.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from onnxport.tasks.specs import Feeds, GraphSpec, Shape, example_ids, example_mask, export_named

__all__ = ["VITS_SCALES", "text_to_audio_graphs"]

# The graph inputs with defaults, each the config attribute it defaults to.
VITS_SCALES = ("noise_scale", "noise_scale_duration", "speaking_rate")


class VitsWaveform(torch.nn.Module):
    """VitsModel with its noise scales and speaking rate as tensor inputs ->
    (waveform, spectrogram)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                noise_scale: torch.Tensor, noise_scale_duration: torch.Tensor,
                speaking_rate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        model = self.model
        # VitsModel.forward reads the two scales from these attributes, and multiplies its
        # normal samples by them: a 0-d tensor takes the float's place.
        saved = model.noise_scale, model.noise_scale_duration
        model.noise_scale, model.noise_scale_duration = noise_scale, noise_scale_duration
        try:
            out = model(input_ids=input_ids, attention_mask=attention_mask,
                        speaking_rate=speaking_rate)
        finally:
            model.noise_scale, model.noise_scale_duration = saved
        return out.waveform, out.spectrogram


def _with_defaults(program: Any, defaults: dict[str, float]) -> Any:
    """Give the graph inputs named in `defaults` their value as an initializer (ONNX's
    overridable default: ONNX Runtime lists them apart from the inputs a client must
    feed); name the outputs' data-dependent axes as optimum does."""
    import onnx_ir as ir

    graph = program.model.graph
    for value in graph.inputs:
        if value.name in defaults:
            value.const_value = ir.tensor(np.array(defaults[value.name], dtype=np.float32),
                                          name=value.name)
            graph.register_initializer(value)
    waveform, spectrogram = graph.outputs[:2]
    if waveform.shape is not None and spectrogram.shape is not None:
        waveform.shape = ir.Shape([waveform.shape[0], "n_samples"])
        spectrogram.shape = ir.Shape([spectrogram.shape[0], spectrogram.shape[1],
                                      "num_frames"])
    return program


def _vits(model: Any, task: str, batch: int, seq: int) -> list[GraphSpec]:
    config = model.config
    defaults = {name: float(getattr(config, name)) for name in VITS_SCALES}
    names = ["input_ids", "attention_mask", *VITS_SCALES]
    outputs = ["waveform", "spectrogram"]
    axes = {0: "text_batch_size", 1: "sequence_length"}
    dims = {"input_ids": dict(axes), "attention_mask": dict(axes)}
    module = VitsWaveform(model).eval()

    def make(shape: Shape) -> Feeds:
        b, s = shape["text_batch_size"], shape["sequence_length"]
        return {"input_ids": example_ids(config, b, s), "attention_mask": example_mask(b, s),
                # no noise: ONNX Runtime's normal samples are not torch's
                "noise_scale": torch.tensor(0.0), "noise_scale_duration": torch.tensor(0.0),
                "speaking_rate": torch.tensor(defaults["speaking_rate"])}

    shapes = [{"text_batch_size": batch, "sequence_length": seq},
              {"text_batch_size": batch + 1, "sequence_length": seq + 5}]

    def export(*, dynamic: bool, **kwargs: Any) -> Any:
        first = make(shapes[0])
        dynamic_shapes = {n: (dict(dims[n]) if dynamic and n in dims else None)
                          for n in names}
        program = export_named(module, tuple(first[n] for n in names), names, outputs,
                               dynamic_shapes, **kwargs)
        return _with_defaults(program, defaults)

    return [GraphSpec("model.onnx", module, names, outputs, dims, make, shapes,
                      export=export)]


def text_to_audio_graphs(model: Any, task: str, batch: int, seq: int) -> list[GraphSpec]:
    """The text-to-audio graphs of `model` (VitsModel)."""
    return _vits(model, task, batch, seq)
