"""optimum's tasks beyond the first derived set: feature-extraction-with-past,
image-segmentation, image-to-image, keypoint-detection, image-to-text, zero-shot-object-detection, time
series, composite encoder-decoders, and output names optimum gives per type (MGP-STR).

optimum-cli 0.1 exports feature-extraction-with-past for decoder-only types as model.onnx with
inputs input_ids, attention_mask and position_ids (no past inputs) and outputs
last_hidden_state and present.{i}.key/.value; image-segmentation with the fields of the type's
segmentation class (MaskFormer: class_queries_logits, masks_queries_logits; semantic models:
logits); keypoint-detection (VitPose) as heatmaps. onnxport's folders have the same names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore")


def _dims(values: Any) -> dict[str, list[str]]:
    return {v.name: [d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim]
            for v in values}


def _exported(folder: Any, out: Any, task: str | None = None) -> tuple[Any, Any]:
    """(ExportResult, model.onnx's graph) of a checkpoint validated at two shapes at least,
    every row ONNX Runtime == eager."""
    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(folder, out, task=task)
    assert len({r.shape_label for r in result.rows}) >= 2
    assert all(r.ok for r in result.rows), result.table
    return result, onnx.load(str(result.output_dir / "model.onnx"),
                             load_external_data=False).graph


def test_task_listed_for_models_with_a_cache() -> None:
    from onnxport.tasks import tasks_for

    assert "feature-extraction-with-past" in tasks_for("llama")
    assert "feature-extraction-with-past" in tasks_for("gpt2")
    assert "feature-extraction-with-past" in tasks_for("t5")  # three files, see below
    assert "feature-extraction-with-past" not in tasks_for("bert")
    # BART's family: its decoder alone is a causal LM (BartForCausalLM), as in optimum
    assert "text-generation-with-past" in tasks_for("bart")
    assert "text-generation-with-past" not in tasks_for("t5")  # T5 has no ForCausalLM
    assert tasks_for("whisper")[:2] == ("automatic-speech-recognition-with-past",
                                        "automatic-speech-recognition")


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_exports_optimums_graph(name: str, checkpoints: Any, tmp_path: Any) -> None:
    result, graph = _exported(checkpoints(name), tmp_path / "out",
                              "feature-extraction-with-past")
    assert "genai_config.json" not in result.files  # no logits: not a generation folder
    text = ["batch_size", "sequence_length"]
    assert _dims(graph.input) == {"input_ids": text, "attention_mask": text,
                                  "position_ids": text}
    outputs = _dims(graph.output)
    assert list(outputs) == ["last_hidden_state", "present.0.key", "present.0.value",
                             "present.1.key", "present.1.value"]
    assert outputs["last_hidden_state"] == ["batch_size", "sequence_length", "32"]
    assert outputs["present.1.value"][:1] == ["batch_size"]

    # The cache it returns is the one eager's prompt makes, at a new size.
    import transformers

    model = transformers.AutoModel.from_pretrained(str(checkpoints(name))).eval()
    ids = torch.randint(3, 90, (3, 11))
    feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "position_ids": torch.arange(11).repeat(3, 1)}
    with torch.no_grad():
        out = model(**feeds, use_cache=True)
    session = onnxruntime.InferenceSession(str(result.output_dir / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    got = dict(zip(outputs, session.run(None, {k: v.numpy() for k, v in feeds.items()})))
    np.testing.assert_allclose(got["last_hidden_state"], out.last_hidden_state.numpy(),
                               rtol=0, atol=1e-4)
    np.testing.assert_allclose(got["present.1.value"],
                               out.past_key_values.layers[1].values.numpy(), rtol=0, atol=1e-4)


def test_export_decoder_with_cache_of_a_base_model() -> None:
    """The Python API: a base model's hidden states with past inputs, for incremental use."""
    import transformers

    from onnxport import llm

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    program = llm.export_decoder_with_cache(model, field="last_hidden_state")
    names = [v.name for v in program.model.graph.outputs]
    assert names[:2] == ["last_hidden_state", "present.0.key"]
    ids = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        full = model(input_ids=ids).last_hidden_state
    # Prefill 6 tokens, then feed 3 with their cache: the last 3 hidden states equal eager's.
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    empty = np.zeros((2, 2, 0, 8), dtype=np.float32)
    past = {f"past_key_values.{i}.{kv}": empty for i in range(2) for kv in ("key", "value")}
    first = dict(zip(names, session.run(None, {"input_ids": ids[:, :6].numpy(),
                                               "attention_mask": np.ones((2, 6), np.int64),
                                               **past})))
    past = {f"past_key_values.{i}.{kv}": first[f"present.{i}.{kv}"]
            for i in range(2) for kv in ("key", "value")}
    second = dict(zip(names, session.run(None, {"input_ids": ids[:, 6:].numpy(),
                                                "attention_mask": np.ones((2, 9), np.int64),
                                                **past})))
    np.testing.assert_allclose(second["last_hidden_state"], full[:, 6:].numpy(),
                               rtol=0, atol=1e-4)


# (checkpoint, task, whether the task is given (else detected from the architecture), outputs)
@pytest.mark.parametrize("name, task, given, outputs", [
    ("maskformer", "image-segmentation", False,
     ["class_queries_logits", "masks_queries_logits"]),
    # a semantic-segmentation class also serves optimum's image-segmentation
    ("mobilevit_segmentation", "image-segmentation", True, ["logits"]),
    ("detr_segmentation", "image-segmentation", True, ["logits", "pred_masks"]),
    ("vitpose", "keypoint-detection", False, ["heatmaps"]),
    ("swin2sr", "image-to-image", False, ["reconstruction"]),
    # optimum's names for MGP-STR's three heads (a tuple field in transformers)
    ("mgp_str", "feature-extraction", False, ["char_logits", "bpe_logits", "wp_logits"]),
])
def test_vision_task(name: str, task: str, given: bool, outputs: list[str],
                     checkpoints: Any, tmp_path: Any) -> None:
    result, graph = _exported(checkpoints(name), tmp_path / "out", task if given else None)
    assert result.task == task
    assert [v.name for v in graph.input] == ["pixel_values"]
    assert [v.name for v in graph.output] == outputs
    # The eager outputs compared are not all zero.
    model = _eager_model(checkpoints(name), task)
    size = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim][1:]
    with torch.no_grad():
        out = model(pixel_values=torch.rand(2, *size))
    values = list(out.logits) if name == "mgp_str" else [getattr(out, f) for f in outputs]
    assert all(v.abs().max() > 1e-3 for v in values)


def _eager_model(folder: Any, task: str) -> Any:
    import transformers

    from onnxport.tasks.registry import plan

    config = transformers.AutoConfig.from_pretrained(str(folder))
    return getattr(transformers, plan(config.model_type, task)[1]).from_pretrained(
        str(folder)).eval()


def test_staged_output_is_the_last_hidden_state(checkpoints: Any, tmp_path: Any) -> None:
    """MaskFormer's base model has no last_hidden_state: feature-extraction gives its last
    stage's (the transformer decoder's), as optimum does."""
    _, graph = _exported(checkpoints("maskformer"), tmp_path / "out", "feature-extraction")
    assert _dims(graph.output) == {"last_hidden_state": ["batch_size", "6", "32"]}


@pytest.mark.parametrize("name, auto_class, client_class", [
    ("vision_encoder_decoder", "VisionEncoderDecoderModel", "ORTModelForVision2Seq"),
    ("bert2bert", "EncoderDecoderModel", "ORTModelForSeq2SeqLM"),
])
def test_composite_encoder_decoder_generates_in_optimum(
        name: str, auto_class: str, client_class: str, checkpoints: Any, tmp_path: Any,
        run_client: Any) -> None:
    """Encoder-decoders assembled from two configs (an image or text encoder, a decoder with
    cross-attention): optimum's three files, and eager's greedy tokens in optimum's class."""
    import transformers

    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints(name), tmp_path / "out")
    assert all(r.ok for r in result.rows), result.table
    assert [f for f in result.files if f.endswith(".onnx")] == [
        "decoder_model.onnx", "decoder_with_past_model.onnx", "encoder_model.onnx"]
    model = getattr(transformers, auto_class).from_pretrained(str(checkpoints(name))).eval()
    torch.manual_seed(8)
    if name == "vision_encoder_decoder":
        inputs = {"pixel_values": torch.rand(2, 3, 32, 32)}
        decoder = onnx.load(str(result.output_dir / "decoder_model.onnx"),
                            load_external_data=False).graph
        assert [v.name for v in decoder.input] == ["input_ids", "encoder_hidden_states"]
    else:
        ids = torch.randint(3, 99, (2, 7))
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        inputs["attention_mask"][-1, -2:] = 0
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False, max_new_tokens=10,
                                  min_new_tokens=10, num_beams=1).numpy()
    got = run_client("optimum", result.output_dir, result.task,
                     {k: v.numpy() for k, v in inputs.items()}, 10)
    assert str(got["class"]) == client_class
    np.testing.assert_array_equal(got["tokens"], expected)
    assert len(set(expected[:, 1:].ravel().tolist())) > 2  # not one repeated token


def test_zero_shot_object_detection(checkpoints: Any, tmp_path: Any) -> None:
    """OWL-ViT: text queries (2 per image) and images, each batch dynamic; optimum's names."""
    result, graph = _exported(checkpoints("owlvit"), tmp_path / "out")
    assert result.task == "zero-shot-object-detection"
    dims = _dims(graph.input)
    assert dims["input_ids"] == ["text_batch_size", "sequence_length"]
    assert dims["pixel_values"][0] == "image_batch_size"
    assert [v.name for v in graph.output] == ["logits", "pred_boxes", "text_embeds",
                                              "image_embeds"]
    # Three queries per image at a new batch: boxes and scores equal eager's.
    import transformers

    model = transformers.OwlViTForObjectDetection.from_pretrained(
        str(checkpoints("owlvit"))).eval()
    ids = torch.randint(3, 99, (6, 7))
    feeds = {"input_ids": ids, "pixel_values": torch.rand(2, 3, 32, 32),
             "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        out = model(**feeds)
    session = onnxruntime.InferenceSession(str(result.output_dir / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    got = dict(zip([v.name for v in graph.output],
                   session.run(None, {k: v.numpy() for k, v in feeds.items()})))
    for field in ("logits", "pred_boxes"):
        np.testing.assert_allclose(got[field], getattr(out, field).numpy(), rtol=0, atol=1e-4)
    assert got["logits"].shape == (2, 16, 3)


def test_time_series_feature_extraction(checkpoints: Any, tmp_path: Any) -> None:
    """PatchTST: past_values [batch_size, context_length, channels] -> last_hidden_state."""
    result, graph = _exported(checkpoints("patchtst"), tmp_path / "out")
    assert result.task == "feature-extraction"
    assert _dims(graph.input) == {"past_values": ["batch_size", "32", "3"]}
    assert [v.name for v in graph.output] == ["last_hidden_state"]


def test_time_series_forecasting(checkpoints: Any, tmp_path: Any) -> None:
    """PatchTST's forecasting head, a class no transformers mapping lists (optimum names it
    itself): past_values -> prediction_outputs."""
    from onnxport.tasks import tasks_for

    assert tasks_for("patchtsmixer")[0] == "time-series-forecasting"
    result, graph = _exported(checkpoints("patchtst"), tmp_path / "out",
                              "time-series-forecasting")
    assert _dims(graph.input) == {"past_values": ["batch_size", "32", "3"]}
    assert [v.name for v in graph.output] == ["prediction_outputs"]


def _onnx_files(result: Any) -> list[str]:
    return sorted(f for f in result.files if f.endswith(".onnx"))


def _validated(result: Any) -> None:
    assert len({r.shape_label for r in result.rows}) >= 2
    assert all(r.ok for r in result.rows), result.table


def test_seq2seq_feature_extraction_with_past(checkpoints: Any, tmp_path: Any) -> None:
    """optimum's feature-extraction-with-past for an encoder-decoder: its three files, the
    decoders giving the base model's last_hidden_state before the cache."""
    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints("t5"), tmp_path / "out",
                               "feature-extraction-with-past")
    _validated(result)
    assert _onnx_files(result) == ["decoder_model.onnx", "decoder_with_past_model.onnx",
                                   "encoder_model.onnx"]
    assert {r.file for r in result.rows} == set(_onnx_files(result))
    for name in ("decoder_model.onnx", "decoder_with_past_model.onnx"):
        graph = onnx.load(str(result.output_dir / name), load_external_data=False).graph
        assert graph.output[0].name == "last_hidden_state"
        assert graph.output[1].name == "present.0.decoder.key"


def test_seq2seq_decoder_as_causal_lm(checkpoints: Any, tmp_path: Any) -> None:
    """BART's decoder alone (BartForCausalLM, loaded from a BartForConditionalGeneration
    checkpoint) as optimum's text-generation-with-past: one file with the cache."""
    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints("bart"), tmp_path / "out",
                               "text-generation-with-past")
    _validated(result)
    graph = onnx.load(str(result.output_dir / "model.onnx"), load_external_data=False).graph
    assert [v.name for v in graph.input][:3] == ["input_ids", "attention_mask",
                                                 "past_key_values.0.key"]
    assert [v.name for v in graph.output][:2] == ["logits", "present.0.key"]


def test_seq2seq_classifier_reads_the_eos(checkpoints: Any, tmp_path: Any) -> None:
    """BART's classifier takes each row's <eos> state and refuses rows without one: the
    example rows end with it, as a tokenizer's do."""
    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints("bart"), tmp_path / "out", "text-classification")
    _validated(result)


def test_speech_recognition_with_and_without_past(checkpoints: Any, tmp_path: Any) -> None:
    """Whisper's default is optimum's automatic-speech-recognition-with-past (three files);
    automatic-speech-recognition is the encoder and the first-step decoder."""
    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints("whisper"), tmp_path / "out",
                               "automatic-speech-recognition")
    _validated(result)
    assert _onnx_files(result) == ["decoder_model.onnx", "encoder_model.onnx"]


def test_vision_language_model_as_a_text_decoder(checkpoints: Any, tmp_path: Any) -> None:
    """Gemma 3 (a vision-language model) as text-generation-with-past: the cache's geometry
    and genai_config.json come from its text sub-config."""
    import json

    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints("gemma3"), tmp_path / "out")
    assert result.task == "text-generation-with-past"
    _validated(result)
    genai = json.loads((result.output_dir / "genai_config.json").read_text())["model"]
    assert genai["decoder"]["num_hidden_layers"] == 2
    assert genai["decoder"]["num_key_value_heads"] == 2
    assert genai["vocab_size"] == 99


def test_sliding_window_without_layer_types(checkpoints: Any, tmp_path: Any) -> None:
    """Mistral's config gives a window and no layer_types: every layer slides, and the
    graph's sequence bounds follow the window (before: a CaptureError for the listed type)."""
    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints("mistral_window"), tmp_path / "out")
    assert result.task == "text-generation-with-past"
    _validated(result)


def test_eager_failure_is_a_mismatch_row(tmp_path: Any) -> None:
    """A model that refuses the task's example inputs at a shape fails validation (a typed
    ValidationError from export_checkpoint), not with the model's own exception."""
    from types import SimpleNamespace

    import onnxport
    from onnxport.tasks.validate import validate_graph

    class Refuses(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not torch.compiler.is_exporting() and x.shape[0] > 2:
                raise ValueError("Each example must contain at least one <eos> token.")
            return x + 1

    program = onnxport.export(Refuses(), (torch.ones(2, 3),), dynamo=True,
                              input_names=["x"], output_names=["y"],
                              dynamic_shapes=({0: "batch"},))
    program.save(str(tmp_path / "model.onnx"))
    spec = SimpleNamespace(
        module=Refuses(), output_names=["y"], shapes=[{"batch": 2}, {"batch": 3}],
        make_inputs=lambda shape: {"x": torch.ones(shape["batch"], 3)},
        eager=lambda feeds: {"y": Refuses()(feeds["x"])})
    rows = validate_graph(spec, tmp_path / "model.onnx", atol=1e-4)
    assert [r.ok for r in rows] == [True, False]
    assert rows[1].note.startswith("eager PyTorch failed: ValueError: Each example")


def test_dims_stay_dynamic_in_the_range_a_branch_allows(checkpoints: Any,
                                                        tmp_path: Any) -> None:
    """LongT5's local attention computes one block up to block_len tokens (a guard torch
    records without enforcing): the sequence stays dynamic within that range, with a
    warning naming it, and ONNX Runtime equals eager at two lengths in it."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, graph = _exported(checkpoints("longt5"), tmp_path / "out",
                                  "feature-extraction")
    assert _dims(graph.input)["input_ids"] == ["batch_size", "encoder_sequence_length"]
    assert any("stay dynamic within it" in str(w.message) and "2..32" in str(w.message)
               for w in caught)


@pytest.mark.parametrize("name, main, size", [("speech_to_text", "input_features", ["16"]),
                                               ("moonshine", "input_values", [])])
def test_speech_feature_extraction_of_any_length(name: str, main: str, size: list[str],
                                                 checkpoints: Any, tmp_path: Any) -> None:
    """The single-file feature-extraction of speech encoder-decoders whose audio has any
    length, with a mask (Whisper's is a fixed number of mel frames): Speech2Text's filter
    banks and Moonshine's raw samples (its encoder's length computed in integers during
    capture, capture/library_patches/), then decoder_input_ids."""
    result, graph = _exported(checkpoints(name), tmp_path / "out", "feature-extraction")
    frames = ["batch_size", "encoder_sequence_length"]
    assert _dims(graph.input) == {
        main: [*frames, *size], "attention_mask": frames,
        "decoder_input_ids": ["batch_size", "decoder_sequence_length"]}
    assert [v.name for v in graph.output] == ["last_hidden_state"]


def test_library_patches_import_nothing() -> None:
    """The capture-only patches of a library apply to the modules already imported: entering
    them imports no model code (transformers' lazy modules would import on attribute access)."""
    import subprocess
    import sys

    code = ("import sys, transformers\n"
            "from onnxport.capture.library_patches import library_patches\n"
            "with library_patches():\n    pass\n"
            "assert 'transformers.models.moonshine.modeling_moonshine' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
