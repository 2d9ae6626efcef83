"""Model types optimum-cli exported and onnxport did not (issue 42), through the CLI.

* Perceiver's text classification: its main input is `inputs` (token ids), which the graph
  names input_ids, as optimum does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from tests.cli_tasks.conftest import run_cli


def _perceiver() -> torch.nn.Module:
    import transformers as tf

    torch.manual_seed(0)
    return tf.PerceiverForSequenceClassification(tf.PerceiverConfig(
        num_latents=8, d_latents=32, d_model=32, num_blocks=1, num_self_attends_per_block=2,
        num_self_attention_heads=4, num_cross_attention_heads=4, qk_channels=32, v_channels=32,
        vocab_size=99, max_position_embeddings=64, num_labels=3, initializer_range=0.1)).eval()


def test_perceiver_text_classification(tmp_path: Path) -> None:
    model = _perceiver()
    model.save_pretrained(str(tmp_path / "ck"))
    done = run_cli("export", "--model", str(tmp_path / "ck"), str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "task: text-classification" in done.stdout + done.stderr
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    ids = torch.randint(3, 99, (3, 11), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    with torch.no_grad():
        expected = model(inputs=ids, attention_mask=mask).logits
    (got,) = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    assert float(expected.abs().max()) > 1e-2  # values that a 1e-4 tolerance tests
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
