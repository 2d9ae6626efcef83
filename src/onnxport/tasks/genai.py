"""genai_config.json: what onnxruntime-genai needs to run a decoder-only folder.

The fields follow onnxruntime-genai's configuration format (model.decoder: file, head
geometry, input/output names with %d for the layer; search: the decoding defaults). Only the
plain decoder loop is described: the graph takes the past as inputs and returns the present.

past_present_share_buffer (genai feeds one max-length buffer as both past and present, and
the attention writes the new keys/values into it in place) is on when the graph can take it:
every past input is read only by GroupQueryAttention (as its past) or by Shape, and each
GroupQueryAttention's total length is bounded by the attention mask's length (Min with it, or
the length of a Slice of it: what FuseGroupQueryAttentionPass writes when the mask is the
graph's `attention_mask` input), so
that nothing sizes itself by the buffer. Otherwise the past is fed at its length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["GENAI_MODEL_TYPES", "genai_config", "shares_kv_buffer", "write_genai_config"]

# model_type values onnxruntime-genai accepts; the decoder-only loop is the same for all of
# them, so another decoder-only type is declared as "llama": falcon (genai has no such type)
# and gpt2 (genai's "gpt2" type reads other input names and fails with "Model input was not
# found").
GENAI_MODEL_TYPES = {"gemma", "gemma2", "granite", "llama", "mistral", "olmo", "phi", "phi3",
                     "qwen2", "qwen3"}


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (list, tuple)) and value else value


def shares_kv_buffer(model: Any) -> bool:
    """Whether the decoder graph (an onnx.ModelProto) runs with onnxruntime-genai's shared
    past/present buffer (see the module notes)."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    past = {i.name for i in graph.input if i.name.startswith("past_key_values.")}
    if not past or "attention_mask" not in {i.name for i in graph.input}:
        return False
    gqa = [n for n in graph.node
           if n.op_type == "GroupQueryAttention" and n.domain == "com.microsoft"]
    for n in graph.node:
        for k, name in enumerate(n.input):
            if name in past and not (n in gqa and k in (3, 4) or n.op_type == "Shape"):
                return False
    if {name for n in gqa for name in n.input[3:5]} != past:
        return False

    def bounded(name: str, depth: int = 0) -> bool:
        """Min(len(attention_mask), T), or the length of a Slice of attention_mask (which
        clamps to it), upstream."""
        node = producers.get(name)
        if node is None or depth > 4:
            return False
        if node.op_type == "Min":
            return any(_reads_mask_length(producers, x) for x in node.input)
        if node.op_type == "Shape":
            cut = producers.get(node.input[0])
            return cut is not None and cut.op_type == "Slice" and \
                cut.input[0] == "attention_mask"
        return node.op_type in ("Cast", "Reshape", "Squeeze") and bounded(node.input[0], depth + 1)

    return bool(gqa) and all(len(n.input) > 6 and bounded(n.input[6]) for n in gqa)


def _reads_mask_length(producers: dict[str, Any], name: str) -> bool:
    node = producers.get(name)
    while node is not None and node.op_type in ("Reshape", "Squeeze", "Gather"):
        node = producers.get(node.input[0])
    return node is not None and node.op_type == "Shape" and node.input[0] == "attention_mask"


def genai_config(config: Any, generation: dict[str, Any], *, filename: str = "model.onnx",
                 with_position_ids: bool = True, share_buffer: bool = False) -> dict[str, Any]:
    """The genai_config.json content for a decoder-only `config` exported as optimum does."""
    from onnxport import llm

    config = llm.text_config(config)  # a multimodal model's language model (Gemma 3)
    num_layers, kv_heads, head_dim = llm._cache_geometry(config)
    heads = int(config.num_attention_heads)
    eos = generation.get("eos_token_id", getattr(config, "eos_token_id", None))
    pad = generation.get("pad_token_id", getattr(config, "pad_token_id", None))
    bos = generation.get("bos_token_id", getattr(config, "bos_token_id", None))
    context = int(getattr(config, "max_position_embeddings", None)
                  or getattr(config, "n_positions", None) or 2048)
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask",
              "past_key_names": "past_key_values.%d.key",
              "past_value_names": "past_key_values.%d.value"}
    if with_position_ids:
        inputs["position_ids"] = "position_ids"
    model_type = config.model_type if config.model_type in GENAI_MODEL_TYPES else "llama"
    return {
        "model": {
            "bos_token_id": _first(bos) if bos is not None else 0,
            "context_length": context,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": filename,
                "head_size": head_dim,
                "hidden_size": int(config.hidden_size),
                "inputs": inputs,
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": heads,
                "num_hidden_layers": num_layers,
                "num_key_value_heads": kv_heads,
            },
            "eos_token_id": eos if eos is not None else 0,
            "pad_token_id": _first(pad) if pad is not None else _first(eos) or 0,
            "type": model_type,
            "vocab_size": int(config.vocab_size),
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True,
            "length_penalty": 1.0, "max_length": context, "min_length": 0,
            "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1,
            "past_present_share_buffer": share_buffer, "repetition_penalty": 1.0,
            "temperature": 1.0, "top_k": 1, "top_p": 1.0,
        },
    }


def write_genai_config(folder: str | Path, config: Any, *, with_position_ids: bool) -> Path:
    """Write genai_config.json into `folder`, reading generation_config.json if present."""
    folder = Path(folder)
    generation: dict[str, Any] = {}
    gen_file = folder / "generation_config.json"
    if gen_file.is_file():
        generation = {k: v for k, v in json.loads(gen_file.read_text()).items()
                      if v is not None}
    share = False
    if (folder / "model.onnx").is_file():
        import onnx

        share = shares_kv_buffer(onnx.load(str(folder / "model.onnx"), load_external_data=False))
    path = folder / "genai_config.json"
    path.write_text(json.dumps(genai_config(config, generation, with_position_ids=with_position_ids,
                                            share_buffer=share), indent=4))
    return path
