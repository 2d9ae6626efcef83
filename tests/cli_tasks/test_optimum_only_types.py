"""Model types optimum-cli exported and onnxport did not (issue 42), through the CLI.

* Perceiver's text classification: its main input is `inputs` (token ids), which the graph
  names input_ids, as optimum does.
* ViTMAE's feature extraction: its random masking draws `torch.rand` unless given `noise`
  [batch_size, num_patches]; `noise` is an input of the graph (the same patches kept in eager
  and in ONNX Runtime).
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


def test_vit_mae_feature_extraction_takes_the_noise(tmp_path: Path) -> None:
    import transformers as tf

    torch.manual_seed(0)
    model = tf.ViTMAEModel(tf.ViTMAEConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64)).eval()
    model.save_pretrained(str(tmp_path / "ck"))
    done = run_cli("export", "--model", str(tmp_path / "ck"), str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    assert [i.name for i in session.get_inputs()] == ["pixel_values", "noise"]
    generator = torch.Generator().manual_seed(1)
    pixels, noise = torch.rand(3, 3, 32, 32, generator=generator), torch.rand(3, 16,
                                                                           generator=generator)
    with torch.no_grad():
        expected = model(pixel_values=pixels, noise=noise).last_hidden_state
    (got,) = session.run(None, {"pixel_values": pixels.numpy(), "noise": noise.numpy()})
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
    # other noise, other patches kept: the graph reads it
    with torch.no_grad():
        other = model(pixel_values=pixels, noise=noise.flip(1)).last_hidden_state
    assert not np.allclose(got, other.numpy(), atol=1e-3)
