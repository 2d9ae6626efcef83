"""What the graphs of a task share: `GraphSpec`, example inputs, and the generic export.

The families (`graphs.py`, `seq2seq.py`, `derive.py`) build specs from these; `export.py`
and `validate.py` only read them. Nothing here imports the families back.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Feeds", "GraphSpec", "Shape", "TEXT_FIELDS", "decoder_uses_position_ids",
           "example_ids", "example_mask", "export_named", "float_dtype", "named_inputs",
           "raw_audio_shapes"]

Shape = dict[str, int]
Feeds = dict[str, torch.Tensor]


@dataclasses.dataclass
class GraphSpec:
    """One graph of a task's output folder.

    Attributes:
        filename: The file in the output folder (model.onnx, encoder_model.onnx, ...).
        module: The torch module exported; called positionally with the inputs in
            `input_names` order (`call` when the inputs are nested).
        input_names / output_names: The graph's names (optimum's).
        dims: Per input, axis -> dim name; those axes are dynamic.
        make_inputs: shape -> feeds (name -> tensor) for the graph's inputs.
        shapes: The export shape first, then the other shapes validation runs.
        export: Custom export (the decoders with a cache); None: the generic one.
        call: Custom eager call, feeds -> outputs by name; None: module(*inputs).
    """

    filename: str
    module: torch.nn.Module
    input_names: list[str]
    output_names: list[str]
    dims: dict[str, dict[int, str]]
    make_inputs: Callable[[Shape], Feeds]
    shapes: list[Shape]
    export: Callable[..., Any] | None = None
    call: Callable[[Feeds], dict[str, torch.Tensor]] | None = None

    def eager(self, feeds: Feeds) -> dict[str, torch.Tensor]:
        """The eager PyTorch outputs for `feeds`, by output name."""
        with torch.no_grad():
            if self.call is not None:
                return self.call(feeds)
            out = self.module(*[feeds[n] for n in self.input_names])
        flat = torch.utils._pytree.tree_leaves(out)
        return dict(zip(self.output_names, flat))

    def export_program(self, *, dynamic: bool, **kwargs: Any) -> Any:
        """The ONNXProgram of this graph: the spec's own export, or `onnxport.export` of
        `module` at the first shape (named dims dynamic unless `dynamic` is False)."""
        if self.export is not None:
            return self.export(dynamic=dynamic, **kwargs)
        first = self.make_inputs(self.shapes[0])
        dynamic_shapes = ({n: dict(self.dims.get(n, {})) or None for n in self.input_names}
                          if dynamic else None)
        return export_named(self.module, tuple(first[n] for n in self.input_names),
                            self.input_names, self.output_names, dynamic_shapes, **kwargs)


def export_named(module: torch.nn.Module, args: tuple[Any, ...], input_names: list[str],
                 output_names: list[str], dynamic_shapes: Any, **kwargs: Any) -> Any:
    """`onnxport.export` of a wrapper module; initializers named after the wrapper
    ("model.<key>") get the model's own keys."""
    from onnxport._api import export

    program = export(module, args, input_names=input_names, output_names=output_names,
                     dynamic_shapes=dynamic_shapes, **kwargs)
    assert program is not None
    for name, value in list(program.model.graph.initializers.items()):
        if name.startswith("model."):
            value.name = name.removeprefix("model.")
    return program


def named_inputs(module: torch.nn.Module, names: list[str]) -> torch.nn.Module:
    """`module`, its class swapped for a subclass whose forward's signature lists `names`
    (torch.export names and binds inputs by it); forward takes them positionally."""
    base = type(module)

    def forward(self: torch.nn.Module, *args: torch.Tensor) -> Any:
        return base.forward(self, *args)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", kind)] + [inspect.Parameter(n, kind) for n in names])
    module.__class__ = type(f"{base.__name__}Graph", (base,), {"forward": forward})
    return module


# -- example inputs --------------------------------------------------------------------------

def float_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the model's first floating-point parameter (float32 when none)."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def example_ids(config: Any, b: int, s: int, *shape_prefix: int) -> torch.Tensor:
    """Random token ids of shape (b, *shape_prefix, s) clear of the special ids at the
    bottom of the vocabulary."""
    vocab = int(getattr(config, "vocab_size", None) or 99)
    low = 3 if vocab > 6 else 0
    return torch.randint(low, vocab, (b, *shape_prefix, s), dtype=torch.long)


def example_mask(b: int, s: int, *, pad: bool = True) -> torch.Tensor:
    """An attention mask of ones, its last row right-padded by two (`pad`, b > 1, s > 3)."""
    mask = torch.ones(b, s, dtype=torch.long)
    if pad and b > 1 and s > 3:
        mask[-1, s - 2:] = 0
    return mask


def raw_audio_shapes(config: Any, batch: int) -> list[Shape]:
    """Two example shapes of raw audio: about 24 and 30 frames after the feature encoder's
    strides (one frame would make the length a constant; an x-vector head's dilated kernels
    span about 16 frames)."""
    rate = math.prod(getattr(config, "conv_stride", None) or [40])
    return [{"batch_size": batch, "sequence_length": 24 * rate + 80},
            {"batch_size": batch + 1, "sequence_length": 30 * rate + 80}]


def decoder_uses_position_ids(config: Any) -> bool:
    """Whether optimum's decoder graph for this config has a position_ids input."""
    if config.model_type in ("gemma", "gemma2"):
        return False
    return not (config.model_type == "falcon" and getattr(config, "alibi", False))


TEXT_FIELDS = {
    "feature-extraction": ["last_hidden_state"],
    "fill-mask": ["logits"],
    "text-classification": ["logits"],
    "token-classification": ["logits"],
    "question-answering": ["start_logits", "end_logits"],
    "multiple-choice": ["logits"],
}
