"""`onnxport export --layout transformers.js` folders loaded by transformers.js in Node.

Tiny BERT (text-classification), Qwen3 (text-generation with past), T5 (text2text with
past) and ViT (image-classification) checkpoints with real tokenizer files, each exported
once by the CLI at fp32, fp16, q8, q4 and bnb4, then run by transformers.js 4.x on
onnxruntime-node in one `node` process (run_node.mjs): its tokenizer, its model classes, its
generate(). Compared with eager PyTorch on the same token ids:

* fp32: logits within 1e-4, greedy tokens equal;
* fp16: logits within 2% of the largest (float16 keeps 11 significant bits; a few layers of
  rounding stay well under it);
* q8, q4, bnb4: finite logits of the right shape, and generation runs; their error is
  printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.web.conftest import DTYPES, KINDS, MAX_NEW_TOKENS, pixels


def _eager(name: str, folder: Path, got: dict[str, Any]) -> tuple[np.ndarray, list[int] | None]:
    """Eager PyTorch's logits (and greedy tokens) for the inputs transformers.js used."""
    import transformers as tf

    auto = {"bert": tf.AutoModelForSequenceClassification, "qwen3": tf.AutoModelForCausalLM,
            "t5": tf.AutoModelForSeq2SeqLM, "vit": tf.AutoModelForImageClassification}[name]
    model = auto.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        if name == "vit":
            return model(pixel_values=torch.from_numpy(pixels())).logits.numpy(), None
        ids = torch.tensor([got["input_ids"]])
        mask = torch.ones_like(ids)
        if name == "bert":
            return model(input_ids=ids, attention_mask=mask,
                         token_type_ids=torch.zeros_like(ids)).logits.numpy(), None
        kwargs: dict[str, Any] = {}
        if name == "t5":
            start = model.config.decoder_start_token_id
            kwargs["decoder_input_ids"] = torch.tensor([[start]])
        logits = model(input_ids=ids, attention_mask=mask, **kwargs).logits.numpy()
        tokens = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                max_new_tokens=MAX_NEW_TOKENS)
        return logits, tokens[0].tolist()


@pytest.mark.parametrize("name", list(KINDS))
def test_transformersjs_loads_every_dtype(name: str, node_results: dict[str, Any],
                                          web_checkpoints: Any) -> None:
    results = node_results[name]
    ref_logits: np.ndarray | None = None
    ref_tokens: list[int] | None = None
    lines = []
    for dtype in DTYPES:
        got = results[dtype]
        assert "error" not in got, f"transformers.js failed on {name} {dtype}:\n{got['error']}"
        if ref_logits is None:
            ref_logits, ref_tokens = _eager(name, web_checkpoints(name), got)
        logits = np.asarray(got["logits"]["data"], np.float64).reshape(got["logits"]["dims"])
        assert logits.shape == ref_logits.shape, (name, dtype, logits.shape, ref_logits.shape)
        assert np.isfinite(logits).all(), (name, dtype)
        diff = float(np.abs(logits - ref_logits).max())
        largest = float(np.abs(ref_logits).max())
        tokens = got.get("tokens")
        lines.append(f"{name} {dtype}: max |logits - eager| {diff:.3g} "
                     f"({diff / largest:.2%} of the largest)"
                     + (f", tokens {tokens} (eager {ref_tokens})" if tokens else ""))
        if dtype == "fp32":
            assert diff <= 1e-4, lines[-1]
            assert tokens == ref_tokens, lines[-1]
        elif dtype == "fp16":
            assert diff <= 0.02 * largest, lines[-1]
        if ref_tokens is not None:  # generation ran: new tokens beyond the prompt/start
            prompt = len(got["input_ids"]) if name == "qwen3" else 1
            assert tokens and len(tokens) > prompt, lines[-1]
    print("\n".join(lines))


def test_layout_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--dtypes without --layout transformers.js, an unknown dtype, --quantize with the
    layout: usage errors (exit 2) before any work."""
    from onnxport.tasks.cli import main

    model = str(tmp_path / "no-such-checkpoint")
    assert main(["export", "--model", model, str(tmp_path / "a"), "--dtypes", "q8"]) == 2
    assert "--dtypes is an option of --layout transformers.js" in capsys.readouterr().err
    assert main(["export", "--model", model, str(tmp_path / "b"), "--layout", "transformers.js",
                 "--quantize", "int4"]) == 2
    assert "--quantize is not an option of --layout transformers.js" in capsys.readouterr().err
    from onnxport.tasks.errors import TaskError
    from onnxport.tasks.layouts.transformersjs import parse_dtypes

    with pytest.raises(TaskError, match="unknown dtype"):
        parse_dtypes("fp32,q3")
    assert parse_dtypes("q4,fp32") == ["fp32", "q4"]
