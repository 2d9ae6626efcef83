"""The text and vision towers of two-tower models (CLIP, SigLIP), as transformers.js loads them.

transformers.js runs `CLIPModel` / `SiglipModel` from `onnx/model.onnx` (both towers, the
default layout's graph), and its single-tower classes from files of their own:
`CLIPTextModelWithProjection` and `SiglipTextModel` from `onnx/text_model.onnx`,
`CLIPVisionModelWithProjection` and `SiglipVisionModel` from `onnx/vision_model.onnx` (the
image-feature-extraction pipeline's class for these types). Each tower is transformers' own
class of that name, built from the checkpoint's sub-config and given the two-tower model's
weights, so its eager outputs are the reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from onnxport.tasks.graphs import GraphSpec

__all__ = ["TOWERS", "tower_specs"]

# model_type -> per file: (transformers class, sub-config, inputs, outputs in file order)
TOWERS: dict[str, dict[str, tuple[str, str, list[str], list[str]]]] = {
    "clip": {
        "text_model.onnx": ("CLIPTextModelWithProjection", "text_config",
                            ["input_ids", "attention_mask"], ["text_embeds", "last_hidden_state"]),
        "vision_model.onnx": ("CLIPVisionModelWithProjection", "vision_config",
                              ["pixel_values"], ["image_embeds", "last_hidden_state"]),
    },
    "siglip": {
        "text_model.onnx": ("SiglipTextModel", "text_config",
                            ["input_ids"], ["last_hidden_state", "pooler_output"]),
        "vision_model.onnx": ("SiglipVisionModel", "vision_config",
                              ["pixel_values"], ["last_hidden_state", "pooler_output"]),
    },
}


class _Tower(torch.nn.Module):
    """Calls a tower with keyword inputs and returns the named output fields."""

    def __init__(self, model: torch.nn.Module, outputs: list[str]) -> None:
        super().__init__()
        self.model, self.outputs = model, outputs

    def _pick(self, out: Any) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(out, f) for f in self.outputs)


class _TextWithMask(_Tower):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self._pick(self.model(input_ids=input_ids, attention_mask=attention_mask))


class _Text(_Tower):
    def forward(self, input_ids: torch.Tensor) -> Any:
        return self._pick(self.model(input_ids=input_ids))


class _Vision(_Tower):
    def forward(self, pixel_values: torch.Tensor) -> Any:
        return self._pick(self.model(pixel_values=pixel_values))


def _tower_model(model: Any, cls_name: str, sub: str) -> torch.nn.Module:
    """transformers' `cls_name` on `model`'s `sub` config, holding `model`'s weights."""
    import copy

    import transformers

    config = copy.deepcopy(getattr(model.config, sub))
    if hasattr(model.config, "projection_dim"):  # the projection's width is the parent's
        config.projection_dim = model.config.projection_dim
    tower = getattr(transformers, cls_name)(config).to(next(model.parameters()).dtype).eval()
    state = model.state_dict()
    # a tower class holds its transformer as `text_model` (CLIP) or is it (SigLIP in
    # transformers 5): the parent's keys under both names
    prefix = sub.removesuffix("_config") + "_model."
    state.update({k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)})
    missing, _ = tower.load_state_dict(state, strict=False)
    if missing:
        from onnxport.tasks.errors import TaskError

        raise TaskError(f"{cls_name} has weights the {type(model).__name__} checkpoint lacks: "
                        f"{missing[:5]}")
    return tower


def tower_specs(model: Any, batch: int = 2, sequence: int = 8) -> list[GraphSpec]:
    """The text_model.onnx and vision_model.onnx graphs of a two-tower `model`; [] for a
    type transformers.js has no single-tower classes for."""
    towers = TOWERS.get(model.config.model_type)
    if not towers:
        return []
    config = model.config
    dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
    size = int(config.vision_config.image_size)
    vocab = int(config.text_config.vocab_size)
    seq = min(sequence, int(config.text_config.max_position_embeddings))
    specs = []
    for filename, (cls_name, sub, inputs, outputs) in towers.items():
        wrapper = (_Vision if sub == "vision_config" else
                   _TextWithMask if "attention_mask" in inputs else _Text)
        module = wrapper(_tower_model(model, cls_name, sub), outputs)
        if sub == "text_config":
            dims = {n: {0: "batch_size", 1: "sequence_length"} for n in inputs}

            def make(shape: dict[str, int], inputs: list[str] = inputs) -> dict[str, torch.Tensor]:
                b, s = shape["batch_size"], shape["sequence_length"]
                feeds = {"input_ids": torch.randint(3, vocab, (b, s))}
                if "attention_mask" in inputs:
                    mask = torch.ones(b, s, dtype=torch.long)
                    if b > 1 and s > 3:
                        mask[-1, s - 2:] = 0
                    feeds["attention_mask"] = mask
                return feeds

            shapes = [{"batch_size": batch, "sequence_length": seq},
                      {"batch_size": batch + 1, "sequence_length": max(2, seq - 3)}]
        else:
            dims = {"pixel_values": {0: "batch_size"}}

            def make(shape: dict[str, int]) -> dict[str, torch.Tensor]:
                return {"pixel_values": torch.rand(shape["batch_size"], 3, size, size).to(dtype)}

            shapes = [{"batch_size": batch}, {"batch_size": batch + 1}]
        specs.append(GraphSpec(filename, module, inputs, outputs, dims, make, shapes))
    return specs


def export_towers(model: Any, folder: Path, *, batch: int, sequence: int, dynamic: bool,
                  opset: int | None, optimize: bool) -> list[GraphSpec]:
    """Export `tower_specs(model)` into `folder` (float32); returns the specs written."""
    from onnxport import export

    specs = tower_specs(model, batch, sequence)
    for spec in specs:
        first = spec.make_inputs(spec.shapes[0])
        dynamic_shapes = ({n: dict(spec.dims[n]) for n in spec.input_names} if dynamic
                          else None)
        with torch.no_grad():
            program = export(spec.module, tuple(first[n] for n in spec.input_names),
                             input_names=spec.input_names, output_names=spec.output_names,
                             dynamic_shapes=dynamic_shapes, opset_version=opset,
                             optimize=optimize)
        for name, value in list(program.model.graph.initializers.items()):
            if name.startswith("model."):  # the wrapper's prefix: the tower's own keys
                value.name = name.removeprefix("model.")
        program.save(folder / spec.filename)
    return specs
