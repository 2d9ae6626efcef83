"""genai_config.json: what onnxruntime-genai needs to run a decoder-only folder.

The fields follow onnxruntime-genai's configuration format (model.decoder: file, head
geometry, input/output names with %d for the layer; search: the decoding defaults). Only the
plain decoder loop is described: the graph takes the past as inputs of length
past_sequence_length and returns the present (past_present_share_buffer off).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["GENAI_MODEL_TYPES", "genai_config", "write_genai_config"]

# model_type values onnxruntime-genai accepts; the decoder-only loop is the same for all of
# them, so another decoder-only type is declared as "llama": falcon (genai has no such type)
# and gpt2 (genai's "gpt2" type reads other input names and fails with "Model input was not
# found").
GENAI_MODEL_TYPES = {"gemma", "gemma2", "granite", "llama", "mistral", "olmo", "phi", "phi3",
                     "qwen2", "qwen3"}


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (list, tuple)) and value else value


def genai_config(config: Any, generation: dict[str, Any], *, filename: str = "model.onnx",
                 with_position_ids: bool = True) -> dict[str, Any]:
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
            "past_present_share_buffer": False, "repetition_penalty": 1.0,
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
    path = folder / "genai_config.json"
    path.write_text(json.dumps(genai_config(config, generation,
                                            with_position_ids=with_position_ids), indent=4))
    return path
