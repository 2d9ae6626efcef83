"""The exported folders in their real clients: optimum's ORTModelFor* and onnxruntime-genai.

The clients run in the client venv (see conftest.py); the eager results come from the same
checkpoint in this process (transformers 5). Logits must agree within 1e-4 and greedy
generation must produce the same tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.cli_tasks.checkpoints import CHECKPOINTS, DECODERS, ENCODERS, MOE_DECODERS, VISION

pytestmark = pytest.mark.filterwarnings("ignore")
ATOL = 1e-4
NEW_TOKENS = 12


def _eager(checkpoint: Any, auto_class: str) -> Any:
    import transformers

    return getattr(transformers, auto_class).from_pretrained(str(checkpoint)).eval()


def _folder(name: str, exported: Any) -> Any:
    out, proc = exported(name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.parametrize("name", DECODERS + MOE_DECODERS)
def test_decoder_generates_like_eager(name: str, exported: Any, checkpoints: Any,
                                      run_client: Any) -> None:
    out = _folder(name, exported)
    model = _eager(checkpoints(name), "AutoModelForCausalLM")
    torch.manual_seed(1)
    prompt = torch.randint(3, 99, (2, 6))
    mask = torch.ones_like(prompt)
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=mask, do_sample=False,
                                  max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                  num_beams=1).numpy()
        logits = model(prompt, attention_mask=mask).logits.numpy()
    inputs = {"input_ids": prompt.numpy(), "attention_mask": mask.numpy()}
    got = run_client("optimum", out, "text-generation-with-past", inputs, NEW_TOKENS)
    assert str(got["class"]) == "ORTModelForCausalLM"
    np.testing.assert_array_equal(got["tokens"], expected)
    genai = run_client("genai", out, "text-generation-with-past", inputs, NEW_TOKENS)
    np.testing.assert_array_equal(genai["tokens"], expected)
    assert np.abs(logits).max() > 0  # the eager logits are not degenerate


_TEXT_AUTO = {"text-classification": "AutoModelForSequenceClassification",
              "fill-mask": "AutoModelForMaskedLM",
              "question-answering": "AutoModelForQuestionAnswering",
              "token-classification": "AutoModelForTokenClassification"}


@pytest.mark.parametrize("name", ENCODERS)
def test_text_encoder_like_eager(name: str, exported: Any, checkpoints: Any,
                                 run_client: Any) -> None:
    out = _folder(name, exported)
    task = CHECKPOINTS[name][1]
    model = _eager(checkpoints(name), _TEXT_AUTO[task])
    torch.manual_seed(2)
    ids = torch.randint(3, 99, (3, 11))
    mask = torch.ones_like(ids)
    mask[-1, -3:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if name == "bert":
        inputs["token_type_ids"] = torch.zeros_like(ids)
    with torch.no_grad():
        eager = model(**inputs)
    got = run_client("optimum", out, task, {k: v.numpy() for k, v in inputs.items()})
    fields = ["start_logits", "end_logits"] if task == "question-answering" else ["logits"]
    for field in fields:
        np.testing.assert_allclose(got[field], getattr(eager, field).numpy(), rtol=0,
                                   atol=ATOL)


@pytest.mark.parametrize("name", VISION)
def test_vision_like_eager(name: str, exported: Any, checkpoints: Any, run_client: Any) -> None:
    out = _folder(name, exported)
    model = _eager(checkpoints(name), "AutoModelForImageClassification")
    size = 32 if name == "vit" else 80
    pixels = torch.rand(3, 3, size, size)
    with torch.no_grad():
        expected = model(pixel_values=pixels).logits.numpy()
    got = run_client("optimum", out, "image-classification", {"pixel_values": pixels.numpy()})
    assert str(got["class"]) == "ORTModelForImageClassification"
    np.testing.assert_allclose(got["logits"], expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("name", ["t5", "bart", "whisper"])
def test_seq2seq_generates_like_eager(name: str, exported: Any, checkpoints: Any,
                                      run_client: Any) -> None:
    out = _folder(name, exported)
    task = CHECKPOINTS[name][1]
    auto = "AutoModelForSpeechSeq2Seq" if name == "whisper" else "AutoModelForSeq2SeqLM"
    model = _eager(checkpoints(name), auto)
    torch.manual_seed(3)
    if name == "whisper":
        inputs = {"input_features": torch.randn(2, 16, 32)}
    else:
        inputs = {"input_ids": torch.randint(3, 99, (2, 7)),
                  "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS,
                                  min_new_tokens=NEW_TOKENS, num_beams=1).numpy()
    got = run_client("optimum", out, task, {k: v.numpy() for k, v in inputs.items()},
                     NEW_TOKENS)
    np.testing.assert_array_equal(got["tokens"], expected)


def test_object_detection_in_onnxruntime(exported: Any, checkpoints: Any) -> None:
    """optimum-onnx 0.1 has no ORTModel class for object-detection (no
    ORTModelForObjectDetection): the DETR folder's model.onnx runs in ONNX Runtime itself, at
    a size and batch it was not exported with."""
    import onnxruntime

    out = _folder("detr", exported)
    model = _eager(checkpoints("detr"), "AutoModelForObjectDetection")
    torch.manual_seed(4)
    pixels = torch.rand(3, 3, 72, 56)
    with torch.no_grad():
        expected = model(pixel_values=pixels)
    session = onnxruntime.InferenceSession(str(out / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {"pixel_values": pixels.numpy()})))
    assert names == ["logits", "pred_boxes"]
    for field in names:
        np.testing.assert_allclose(got[field], getattr(expected, field).numpy(), rtol=0,
                                   atol=ATOL)
    assert expected.logits.abs().max() > 0.1 and expected.pred_boxes.std() > 0.01


def test_semantic_segmentation_like_eager(exported: Any, checkpoints: Any,
                                          run_client: Any) -> None:
    out = _folder("segformer", exported)
    model = _eager(checkpoints("segformer"), "AutoModelForSemanticSegmentation")
    torch.manual_seed(5)
    pixels = torch.rand(2, 3, 72, 56)
    with torch.no_grad():
        expected = model(pixel_values=pixels).logits.numpy()
    got = run_client("optimum", out, "semantic-segmentation", {"pixel_values": pixels.numpy()})
    assert str(got["class"]) == "ORTModelForSemanticSegmentation"
    assert got["logits"].shape == expected.shape == (2, 3, 18, 14)
    np.testing.assert_allclose(got["logits"], expected, rtol=0, atol=ATOL)
    assert np.abs(expected).max() > 0.1


def test_audio_classification_like_eager(exported: Any, checkpoints: Any,
                                         run_client: Any) -> None:
    out = _folder("wav2vec2", exported)
    model = _eager(checkpoints("wav2vec2"), "AutoModelForAudioClassification")
    audio = torch.randn(2, 1600)
    with torch.no_grad():
        expected = model(input_values=audio).logits.numpy()
    got = run_client("optimum", out, "audio-classification", {"input_values": audio.numpy()})
    assert str(got["class"]) == "ORTModelForAudioClassification"
    np.testing.assert_allclose(got["logits"], expected, rtol=0, atol=ATOL)


def test_zero_shot_image_classification_like_eager(exported: Any, checkpoints: Any,
                                                   run_client: Any) -> None:
    out = _folder("clip", exported)
    model = _eager(checkpoints("clip"), "CLIPModel")
    ids = torch.tensor([[1, 5, 9, 2], [1, 7, 3, 2]])
    mask = torch.ones_like(ids)
    pixels = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, pixel_values=pixels)
    got = run_client("optimum", out, "zero-shot-image-classification",
                     {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                      "pixel_values": pixels.numpy()})
    assert str(got["class"]) == "ORTModelForZeroShotImageClassification"
    np.testing.assert_allclose(got["logits_per_image"], expected.logits_per_image.numpy(),
                               rtol=0, atol=ATOL)
