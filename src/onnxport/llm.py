"""Export decoder-only language models with a key/value cache, and run greedy decoding in ORT.

The exported graph has the input/output contract that ONNX Runtime generation loops use:

    inputs:  input_ids [batch, sequence], attention_mask [batch, total_sequence],
             past_key_values.{i}.key / .value [batch, kv_heads, past_sequence, head_dim],
             and with `with_position_ids=True`, position_ids [batch, sequence]
    outputs: logits [batch, sequence, vocab],
             present.{i}.key / .value [batch, kv_heads, past_sequence + sequence, head_dim]

transformers keeps the cache in a `DynamicCache` object, which is no tensor. `DecoderWithCache`
takes the cache as a list of (key, value) tuples instead, builds the `DynamicCache` inside
forward (torch.export traces through it) and returns the updated cache flattened the same
way, so the graph inputs and outputs are plain tensors in pytree order
(layer 0 key, layer 0 value, layer 1 key, ...), which `cache_input_names` and
`cache_output_names` name. A prefill step passes past tensors with past_sequence = 0.

Without a position_ids input, the model numbers the new tokens past_sequence,
past_sequence + 1, ...; with left-padded batches, transformers' `generate` numbers them
from the attention mask instead, which changes the results of models with absolute
position embeddings (GPT-2; rotary models are shift-invariant): export with
`with_position_ids=True` for them, and `greedy_generate` feeds the positions `generate` uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from onnxport._api import export
from onnxport.program import ONNXProgram

__all__ = [
    "DEFAULT_DIM_NAMES",
    "DecoderWithCache",
    "OPTIMUM_DIM_NAMES",
    "cache_input_names",
    "cache_output_names",
    "empty_past",
    "export_decoder_with_cache",
    "greedy_generate",
]


def cache_input_names(num_layers: int, *, with_position_ids: bool = False) -> list[str]:
    """Graph input names: input_ids, attention_mask, past_key_values.{i}.key / .value, ...

    and position_ids last when `with_position_ids`.

    Example:
        >>> cache_input_names(1)
        ['input_ids', 'attention_mask', 'past_key_values.0.key', 'past_key_values.0.value']
    """
    names = ["input_ids", "attention_mask"]
    for i in range(num_layers):
        names += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
    return [*names, "position_ids"] if with_position_ids else names


def cache_output_names(num_layers: int, field: str = "logits") -> list[str]:
    """Graph output names: `field` (logits, or a base model's last_hidden_state), then
    present.{i}.key / .value.

    Example:
        >>> cache_output_names(1)
        ['logits', 'present.0.key', 'present.0.value']
    """
    names = [field]
    for i in range(num_layers):
        names += [f"present.{i}.key", f"present.{i}.value"]
    return names


class DecoderWithCache(torch.nn.Module):
    """A transformers causal LM (or its base model) whose cache goes in and out as tensors.

    forward(input_ids, attention_mask, past_key_values, position_ids=None) takes
    past_key_values as a list of (key, value) tuples, one per layer, each
    [batch, kv_heads, past_sequence, head_dim], and returns (the output `field`, present)
    with present a flat list [key 0, value 0, key 1, value 1, ...]. `field` is "logits" for
    a causal LM, "last_hidden_state" for a base model.
    """

    def __init__(self, model: torch.nn.Module, field: str = "logits") -> None:
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                past_key_values: Sequence[tuple[torch.Tensor, torch.Tensor]],
                position_ids: torch.Tensor | None = None) -> Any:
        from transformers import DynamicCache

        config = self.model.config  # type: ignore[union-attr]
        cache = DynamicCache([tuple(kv) for kv in past_key_values], config=config)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, past_key_values=cache, use_cache=True)
        present: list[torch.Tensor] = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return getattr(out, self.field), present


def text_config(config: Any) -> Any:
    """The language model's config: a multimodal config's text sub-config (Gemma 3's
    `text_config`), else the config itself."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if callable(get) else config


def _cache_geometry(config: Any) -> tuple[int, int, int]:
    """(num_layers, kv_heads, head_dim) from a transformers config."""
    config = text_config(config)
    num_layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    if getattr(config, "model_type", None) == "falcon" and not config.new_decoder_architecture:
        # Falcon-7B style: one key/value head with multi_query, else one per head.
        kv_heads = 1 if config.multi_query else heads
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return num_layers, kv_heads, head_dim


def _cache_layout(model: torch.nn.Module) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """((key heads, key dim), (value heads, value dim)) per layer, as the model's own cache
    holds them after one token, or None when it cannot run (fake or meta weights).

    The config's geometry is not always the cache's: DeepSeek's latent attention caches keys
    of qk_nope + qk_rope dims and values of v_head_dim, in its own number of heads.
    """
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_meta or isinstance(tensor, torch._subclasses.FakeTensor):
            return None
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)  # type: ignore[union-attr]
    with torch.no_grad():
        model(input_ids=torch.ones(1, 1, dtype=torch.long), past_key_values=cache, use_cache=True)
    return [((layer.keys.shape[1], layer.keys.shape[3]),
             (layer.values.shape[1], layer.values.shape[3])) for layer in cache.layers]


def _sliding_window(config: Any) -> int | None:
    """The window of a config whose layers include sliding-window attention, else None."""
    config = text_config(config)
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    # No layer types (Mistral): every layer attends within the window.
    if window and (layer_types is None or "sliding_attention" in layer_types):
        return int(window)
    return None


def empty_past(config: Any, batch: int, past_sequence: int = 0, *,
               dtype: torch.dtype = torch.float32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Zero past keys/values of `past_sequence` positions (0: the prefill step) for `config`."""
    num_layers, kv_heads, head_dim = _cache_geometry(config)
    shape = (batch, kv_heads, past_sequence, head_dim)
    return [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
            for _ in range(num_layers)]


DEFAULT_DIM_NAMES = {"batch": "batch", "sequence": "sequence", "past_sequence": "past_sequence",
                     "total_sequence": "total_sequence"}
# optimum's names for the same dims (ORTModelForCausalLM, onnxruntime-genai folders).
OPTIMUM_DIM_NAMES = {"batch": "batch_size", "sequence": "sequence_length",
                     "past_sequence": "past_sequence_length",
                     "total_sequence": "past_sequence_length + sequence_length"}


def export_decoder_with_cache(model: torch.nn.Module, *, batch: int = 2, sequence: int = 3,
                              past_sequence: int = 4, with_position_ids: bool = False,
                              dim_names: dict[str, str] | None = None,
                              dynamic: bool = True, field: str = "logits",
                              **export_kwargs: Any) -> ONNXProgram:
    """Export a transformers causal LM with its key/value cache as graph inputs and outputs.

    Batch, sequence and past_sequence are dynamic (named dims `batch`, `sequence`,
    `past_sequence`); the attention mask's length is its own dynamic dim `total_sequence`
    (transformers slices the mask to past_sequence + sequence). The example sizes only guide
    tracing; use at least 2 for each, as torch.export specializes sizes 0 and 1.

    Args:
        model: A transformers causal LM (e.g. LlamaForCausalLM, GPT2LMHeadModel), in eval mode.
        batch: Example batch size.
        sequence: Example number of new tokens.
        past_sequence: Example number of cached positions.
        with_position_ids: Add a position_ids input [batch, sequence] (see the module notes).
        dim_names: The ONNX names of the dims `batch`, `sequence`, `past_sequence` and
            `total_sequence` (the mask's length); missing keys keep those names.
            `OPTIMUM_DIM_NAMES` gives optimum's (batch_size, sequence_length, ...).
        dynamic: False exports every dim static, at the example sizes.
        field: The model output the graph returns before the cache: "logits", or
            "last_hidden_state" for a base model (`AutoModel`).
        export_kwargs: Passed on to `onnxport.export`.

    Returns:
        The ONNXProgram, with inputs named as `cache_input_names`, outputs as
        `cache_output_names` and weights by the model's state_dict keys.

    Example:
        >>> import transformers
        >>> config = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2)
        >>> lm = transformers.GPT2LMHeadModel(config).eval()
        >>> program = export_decoder_with_cache(lm)
        >>> [v.name for v in program.model.graph.outputs]
        ['logits', 'present.0.key', 'present.0.value']
    """
    config = model.config  # type: ignore[union-attr]
    num_layers, _, _ = _cache_geometry(config)
    names = {**DEFAULT_DIM_NAMES, **(dim_names or {})}
    vocab = int(text_config(config).vocab_size)
    float_dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()),
                       torch.float32)
    input_ids = torch.randint(0, vocab, (batch, sequence), dtype=torch.long)
    attention_mask = torch.ones(batch, past_sequence + sequence, dtype=torch.long)
    layout = _cache_layout(model)
    if layout is None:
        layout = [((k.shape[1], k.shape[3]), (v.shape[1], v.shape[3]))
                  for k, v in empty_past(config, 1, 0)]
    past = [(torch.randn(batch, kh, past_sequence, kd).to(float_dtype),
             torch.randn(batch, vh, past_sequence, vd).to(float_dtype))
            for (kh, kd), (vh, vd) in layout]
    window = _sliding_window(config)
    # A sliding-window cache (gpt-oss) drops its oldest positions once past + new tokens
    # reach the window, a branch on sizes the graph cannot hold: the graph covers the
    # lengths before it, past and new tokens up to half the window each.
    bound = {} if window is None else {"max": max((window - 1) // 2, 2)}
    dims = {key: torch.export.Dim(names[key], **(bound if key != "batch" else {}))
            for key in ("batch", "sequence", "past_sequence")}
    cache_dims = {0: dims["batch"], 2: dims["past_sequence"]}
    dynamic_shapes: dict[str, Any] | None = {
        "input_ids": {0: dims["batch"], 1: dims["sequence"]},
        # The mask's length equals past_sequence + sequence, a sum of two dims that
        # dynamic_shapes cannot state; AUTO lets torch.export keep it as its own symbol.
        "attention_mask": {0: dims["batch"], 1: torch.export.Dim.AUTO},
        "past_key_values": [(cache_dims, cache_dims) for _ in range(num_layers)],
    }
    args: tuple[Any, ...] = (input_ids, attention_mask, past)
    if with_position_ids:
        args += (torch.arange(past_sequence, past_sequence + sequence).repeat(batch, 1),)
        dynamic_shapes["position_ids"] = {0: dims["batch"], 1: dims["sequence"]}
    input_names = cache_input_names(num_layers, with_position_ids=with_position_ids)
    # Name the cache inputs' dims too: dynamic_shapes names only top-level inputs' dims.
    dim_axes: dict[str, Any] | None = {
        name: {0: names["batch"], 2: names["past_sequence"]} for name in input_names
        if name.startswith("past_key_values.")}
    dim_axes["attention_mask"] = {0: names["batch"], 1: names["total_sequence"]}
    if not dynamic:
        dynamic_shapes = dim_axes = None
    program = export(DecoderWithCache(model, field).eval(), args,
                     input_names=input_names,
                     output_names=cache_output_names(num_layers, field),
                     dynamic_shapes=dynamic_shapes, dynamic_axes=dim_axes, **export_kwargs)
    assert program is not None
    # Initializers are named after the wrapper's state_dict ("model.<key>"): give them the
    # model's own keys, so apply_weights(model.state_dict()) finds them.
    for name, value in list(program.model.graph.initializers.items()):
        if name.startswith("model."):
            value.name = name.removeprefix("model.")
    return program


def greedy_generate(program: ONNXProgram, input_ids: torch.Tensor, max_new_tokens: int,
                    *, attention_mask: torch.Tensor | None = None,
                    eos_token_id: int | None = None,
                    pad_token_id: int | None = None) -> torch.Tensor:
    """Greedy decoding with the exported model in ONNX Runtime, feeding inputs by name.

    A prefill step runs the prompt with an empty past; each decode step feeds the one new
    token and the previous step's present.{i}.key/.value as past_key_values.{i}.key/.value.
    If the model has a position_ids input, positions count the unmasked tokens, as
    transformers' generate does: cumsum(attention_mask) - 1, and 1 at masked positions.
    As in transformers' greedy search, a sequence that produced `eos_token_id` is finished:
    its later tokens are `pad_token_id` (default: eos), and decoding stops once all are.

    Args:
        program: From `export_decoder_with_cache`.
        input_ids: The prompt, [batch, prompt_length] int64.
        max_new_tokens: How many tokens to generate.
        attention_mask: The prompt's mask (default: all ones).
        eos_token_id: Stop token, or None to always generate `max_new_tokens`.
        pad_token_id: The token after eos in finished sequences (default: `eos_token_id`).

    Returns:
        The prompt followed by the generated tokens, [batch, prompt_length + new tokens].
    """
    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    input_meta = {i.name: i for i in session.get_inputs()}
    output_names = [o.name for o in session.get_outputs()]
    batch = input_ids.shape[0]
    tokens = input_ids.numpy().astype(np.int64)
    mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).numpy()
    mask = mask.astype(np.int64)
    past: dict[str, np.ndarray] = {}
    for name, meta in input_meta.items():
        if name.startswith("past_key_values."):
            _, heads, _, head_dim = meta.shape
            past[name] = np.zeros((batch, heads, 0, head_dim), dtype=np.float32)
    step_ids = tokens
    finished = np.zeros(batch, dtype=bool)
    for _ in range(max_new_tokens):
        feed = {"input_ids": step_ids, "attention_mask": mask, **past}
        if "position_ids" in input_meta:
            positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)
            feed["position_ids"] = positions[:, -step_ids.shape[1]:].astype(np.int64)
        outputs = dict(zip(output_names, session.run(None, feed)))
        next_tokens = outputs["logits"][:, -1, :].argmax(-1).astype(np.int64)
        if eos_token_id is not None:
            pad = eos_token_id if pad_token_id is None else pad_token_id
            next_tokens = np.where(finished, pad, next_tokens)
            finished |= next_tokens == eos_token_id
        tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)
        past = {name: outputs[name.replace("past_key_values.", "present.", 1)] for name in past}
        step_ids = next_tokens[:, None]
        if finished.all():
            break
    return torch.from_numpy(tokens)
