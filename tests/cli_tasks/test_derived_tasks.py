"""Tasks derived from transformers' Auto mappings, for types and tasks without explicit code.

Each tiny checkpoint (tests/cli_tasks/checkpoints.py `DERIVED`) is exported with the task
detected from its architecture; ONNX Runtime must equal eager at every validated shape, and
the graph must have optimum's input, output and dim names. Twenty-one folders (text, vision,
audio and two-tower types) are loaded by optimum's ORTModelFor* classes in the client venv and
compared with eager there too: outputs within 1e-4, Marian's greedy tokens equal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from tests.cli_tasks.checkpoints import DERIVED

pytestmark = pytest.mark.filterwarnings("ignore")

# name -> (inputs, outputs) of model.onnx: optimum's names and dims.
# A decoder's base model defaults to feature-extraction-with-past, as in optimum-cli: its
# prompt's hidden states and the cache the prompt makes (no past inputs).
_PRESENT = {f"present.{i}.{kv}": None for i in range(2) for kv in ("key", "value")}
EXPECTED = {
    "llama_base": ({"input_ids": ["batch_size", "sequence_length"],
                    "attention_mask": ["batch_size", "sequence_length"],
                    "position_ids": ["batch_size", "sequence_length"]},
                   {"last_hidden_state": ["batch_size", "sequence_length", "32"], **_PRESENT}),
    "gpt2_base": ({"input_ids": ["batch_size", "sequence_length"],
                   "attention_mask": ["batch_size", "sequence_length"],
                   "position_ids": ["batch_size", "sequence_length"]},
                  {"last_hidden_state": ["batch_size", "sequence_length", "32"], **_PRESENT}),
    # CamembertConfig's default type_vocab_size is 2 (camembert-base's is 1: no input)
    "camembert": ({"input_ids": ["batch_size", "sequence_length"],
                   "attention_mask": ["batch_size", "sequence_length"],
                   "token_type_ids": ["batch_size", "sequence_length"]},
                  {"logits": ["batch_size", "sequence_length", "99"]}),
    "dinov2": ({"pixel_values": ["batch_size", "3", "32", "32"]},
               {"logits": ["batch_size", "4"]}),
    "vit_masked_im": ({"pixel_values": ["batch_size", "3", "32", "32"]},
                      {"reconstruction": ["batch_size", "3", "32", "32"]}),
    "wav2vec2_ctc": ({"input_values": ["batch_size", "sequence_length"]}, {"logits": None}),
    "data2vec_audio": ({"input_values": ["batch_size", "sequence_length"]},
                       {"logits": ["batch_size", "3"]}),
    # ConvBERT's span-based convolution (im2col) keeps the sequence dynamic
    "convbert": ({"input_ids": ["batch_size", "sequence_length"],
                  "attention_mask": ["batch_size", "sequence_length"],
                  "token_type_ids": ["batch_size", "sequence_length"]},
                 {"logits": ["batch_size", "sequence_length", "99"]}),
}


def _dims(values: Any) -> dict[str, list[str]]:
    return {v.name: [d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim]
            for v in values}


@pytest.fixture(scope="module")
def derived(checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> the ExportResult of its export (once per module)."""
    from onnxport.tasks import export_checkpoint

    root = tmp_path_factory.mktemp("derived")
    done: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in done:
            done[name] = export_checkpoint(checkpoints(name), root / f"{name}-onnx")
        return done[name]

    return get


@pytest.mark.parametrize("name", list(EXPECTED))
def test_derived_task_exports_and_validates(name: str, derived: Any) -> None:
    result = derived(name)
    assert result.task == DERIVED[name][1]
    assert result.task_reason.startswith("architecture ")
    _check_names(result, EXPECTED[name])


def test_seq2seq_feature_extraction_is_one_file(checkpoints: Any, tmp_path: Path) -> None:
    """An encoder-decoder's feature-extraction (not -with-past, its default) is optimum's
    single file: encoder inputs and decoder_input_ids -> the decoder's last_hidden_state."""
    from onnxport.tasks import export_checkpoint

    result = export_checkpoint(checkpoints("bart_base"), tmp_path / "out",
                               "feature-extraction")
    _check_names(result, (
        {"input_ids": ["batch_size", "encoder_sequence_length"],
         "attention_mask": ["batch_size", "encoder_sequence_length"],
         "decoder_input_ids": ["batch_size", "decoder_sequence_length"]},
        {"last_hidden_state": ["batch_size", "decoder_sequence_length", "32"]}))


def _check_names(result: Any, expected: Any) -> None:
    assert len(result.rows) >= 2 and all(r.ok for r in result.rows), result.table
    assert len({r.shape_label for r in result.rows}) >= 2  # two shapes validated
    graph = onnx.load(str(result.output_dir / "model.onnx"), load_external_data=False).graph
    inputs, outputs = expected
    assert _dims(graph.input) == inputs
    got = _dims(graph.output)
    assert list(got) == list(outputs)
    for field, dims in outputs.items():
        if dims is not None:
            assert got[field] == dims, field
    assert "config.json" in result.files


def test_unlisted_seq2seq_uses_the_seq2seq_family(derived: Any) -> None:
    result = derived("marian")
    assert result.task == "text2text-generation-with-past"
    assert [f for f in result.files if f.endswith(".onnx")] == [
        "decoder_model.onnx", "decoder_with_past_model.onnx", "encoder_model.onnx"]
    assert {r.file for r in result.rows} == {"encoder_model.onnx", "decoder_model.onnx",
                                             "decoder_with_past_model.onnx"}
    assert all(r.ok for r in result.rows), result.table


def test_tasks_listed_from_mappings() -> None:
    from onnxport.tasks import tasks_for

    assert "feature-extraction" in tasks_for("llama")  # a listed type gains derived tasks
    assert tasks_for("llama")[0] == "text-generation-with-past"  # its family's come first
    assert "masked-im" in tasks_for("vit")
    assert "automatic-speech-recognition" in tasks_for("wav2vec2")
    assert "text-generation-with-past" not in tasks_for("bert")  # an encoder's LM head
    assert "multiple-choice" not in tasks_for("deberta")  # transformers has no such class
    assert tasks_for("marian")[:2] == ("text2text-generation-with-past",
                                       "text2text-generation")


def _eager(folder: Path, auto_class: str) -> Any:
    import transformers

    return getattr(transformers, auto_class).from_pretrained(str(folder)).eval()


# name -> (eager Auto class, the optimum class that loads the folder, fields compared)
IN_OPTIMUM = {
    "llama_base": ("AutoModel", "ORTModelForFeatureExtraction", ["last_hidden_state"]),
    "camembert": ("AutoModelForMaskedLM", "ORTModelForMaskedLM", ["logits"]),
    "convbert": ("AutoModelForMaskedLM", "ORTModelForMaskedLM", ["logits"]),
    "albert": ("AutoModelForMaskedLM", "ORTModelForMaskedLM", ["logits"]),
    "electra": ("AutoModelForTokenClassification", "ORTModelForTokenClassification",
                ["logits"]),
    "xlm_roberta": ("AutoModelForSequenceClassification", "ORTModelForSequenceClassification",
                    ["logits"]),
    "mpnet": ("AutoModelForQuestionAnswering", "ORTModelForQuestionAnswering",
              ["start_logits", "end_logits"]),
    "mobilebert": ("AutoModel", "ORTModelForFeatureExtraction", ["last_hidden_state"]),
    "ernie": ("AutoModelForMultipleChoice", "ORTModelForMultipleChoice", ["logits"]),
    "dinov2": ("AutoModelForImageClassification", "ORTModelForImageClassification", ["logits"]),
    "deit": ("AutoModelForImageClassification", "ORTModelForImageClassification", ["logits"]),
    "beit": ("AutoModelForImageClassification", "ORTModelForImageClassification", ["logits"]),
    "swin": ("AutoModelForImageClassification", "ORTModelForImageClassification", ["logits"]),
    "mobilevit": ("AutoModelForImageClassification", "ORTModelForImageClassification",
                  ["logits"]),
    "resnet": ("AutoModelForImageClassification", "ORTModelForImageClassification", ["logits"]),
    "hubert_ctc": ("AutoModelForCTC", "ORTModelForCTC", ["logits"]),
    "data2vec_audio": ("AutoModelForAudioClassification", "ORTModelForAudioClassification",
                       ["logits"]),
    "wavlm": ("AutoModelForAudioFrameClassification", "ORTModelForAudioFrameClassification",
              ["logits"]),
    "unispeech_sat": ("AutoModelForAudioXVector", "ORTModelForAudioXVector",
                      ["logits", "embeddings"]),
    "siglip": ("AutoModelForZeroShotImageClassification",
               "ORTModelForZeroShotImageClassification", ["logits_per_image"]),
    "chinese_clip": ("AutoModelForZeroShotImageClassification",
                     "ORTModelForZeroShotImageClassification", ["logits_per_image"]),
}


def _client_inputs(model: Any, task: str, graph: Any) -> dict[str, torch.Tensor]:
    """The inputs a user passes the optimum class, by the model's modality."""
    dims = _dims(graph.input)
    main = model.main_input_name
    if main == "pixel_values" and "input_ids" not in dims:
        # a size the export did not see where the graph takes any (convolutional models)
        free = {"height": 72, "width": 56}
        return {"pixel_values": torch.rand(3, *[int(free.get(d, d))
                                                for d in dims["pixel_values"][1:]])}
    if main == "input_values":
        return {"input_values": torch.randn(2, 1600)}
    two_towers = "pixel_values" in dims
    rows = (3, 2) if task == "multiple-choice" else (2,) if two_towers else (3,)
    ids = torch.randint(3, 99, (*rows, 9))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "position_ids" in dims:  # a decoder: no padding
        inputs["position_ids"] = torch.arange(9).expand(*rows, 9)
    else:
        inputs["attention_mask"][..., -1, -2:] = 0
    if "token_type_ids" in dims:
        inputs["token_type_ids"] = torch.randint(0, 2, ids.shape)
    if two_towers:
        inputs["pixel_values"] = torch.rand(3, *map(int, dims["pixel_values"][1:]))
    return inputs


@pytest.mark.parametrize("name", list(IN_OPTIMUM))
def test_derived_folder_in_optimum(name: str, derived: Any, checkpoints: Any,
                                   run_client: Any) -> None:
    """Each folder loads in the ORTModelFor* class optimum serves its task with and equals
    eager (transformers 5, this process) there."""
    auto_class, ort_class, fields = IN_OPTIMUM[name]
    result = derived(name)
    graph = onnx.load(str(result.output_dir / "model.onnx"), load_external_data=False).graph
    model = _eager(checkpoints(name), auto_class)
    torch.manual_seed(6)
    inputs = _client_inputs(model, result.task, graph)
    with torch.no_grad():
        eager = model(**inputs)
    got = run_client("optimum", result.output_dir, result.task,
                     {k: v.numpy() for k, v in inputs.items()})
    assert str(got["class"]) == ort_class
    for field in fields:
        expected = getattr(eager, field).numpy()
        np.testing.assert_allclose(got[field], expected, rtol=0, atol=1e-4, err_msg=field)
        assert np.abs(expected).max() > 1e-3, field  # well above the tolerance


def test_derived_seq2seq_generates_in_optimum(derived: Any, checkpoints: Any,
                                              run_client: Any) -> None:
    """Marian (no explicit code) in ORTModelForSeq2SeqLM: eager's greedy tokens."""
    result = derived("marian")
    model = _eager(checkpoints("marian"), "AutoModelForSeq2SeqLM")
    torch.manual_seed(7)
    ids = torch.randint(3, 99, (2, 7))
    mask = torch.ones_like(ids)
    mask[-1, -2:] = 0
    with torch.no_grad():
        expected = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                  max_new_tokens=12, min_new_tokens=12, num_beams=1).numpy()
    got = run_client("optimum", result.output_dir, result.task,
                     {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, 12)
    assert str(got["class"]) == "ORTModelForSeq2SeqLM"
    np.testing.assert_array_equal(got["tokens"], expected)
    assert len(set(expected[:, 1:].ravel().tolist())) > 2  # not one repeated token


def test_config_naming_a_hub_backbone(tmp_path: Path) -> None:
    """A backbone named on the hub without its config: a CheckpointError naming the fix,
    raised before anything is fetched or written."""
    import json

    import transformers

    from onnxport.tasks import CheckpointError, export_checkpoint

    raw = transformers.UperNetConfig().to_dict()
    raw.update(backbone="openmmlab/upernet-convnext-tiny", backbone_config=None)
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="backbone 'openmmlab/upernet-convnext-tiny'.*"
                                              "never downloads.*backbone_config"):
        export_checkpoint(tmp_path / "ck", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_verify_takes_a_derived_type(derived: Any, checkpoints: Any) -> None:
    # `onnxport verify` finds the graph family and Auto class the same way export does.
    from tests.cli_tasks.conftest import run_cli

    result = derived("camembert")
    res = run_cli("verify", str(result.output_dir / "model.onnx"), "--model",
                  str(checkpoints("camembert")))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "verified:" in res.stdout
