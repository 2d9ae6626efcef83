"""Tasks derived from transformers' Auto mappings, for types and tasks without explicit code.

Each tiny checkpoint (tests/cli_tasks/checkpoints.py `DERIVED`) is exported with the task
detected from its architecture; ONNX Runtime must equal eager at every validated shape, and
the graph must have optimum's input, output and dim names. Three folders are loaded by
optimum's ORTModelFor* classes in the client venv and compared with eager there too.
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
EXPECTED = {
    "llama_base": ({"input_ids": ["batch_size", "sequence_length"],
                    "attention_mask": ["batch_size", "sequence_length"],
                    "position_ids": ["batch_size", "sequence_length"]},
                   {"last_hidden_state": ["batch_size", "sequence_length", "32"]}),
    "gpt2_base": ({"input_ids": ["batch_size", "sequence_length"],
                   "attention_mask": ["batch_size", "sequence_length"],
                   "position_ids": ["batch_size", "sequence_length"]},
                  {"last_hidden_state": ["batch_size", "sequence_length", "32"]}),
    "bart_base": ({"input_ids": ["batch_size", "encoder_sequence_length"],
                   "attention_mask": ["batch_size", "encoder_sequence_length"],
                   "decoder_input_ids": ["batch_size", "decoder_sequence_length"]},
                  {"last_hidden_state": ["batch_size", "decoder_sequence_length", "32"]}),
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
    assert len(result.rows) >= 2 and all(r.ok for r in result.rows), result.table
    assert len({r.shape_label for r in result.rows}) >= 2  # two shapes validated
    graph = onnx.load(str(result.output_dir / "model.onnx"), load_external_data=False).graph
    inputs, outputs = EXPECTED[name]
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
    assert tasks_for("marian")[:2] == ("text2text-generation-with-past",
                                       "text2text-generation")


def _eager(folder: Path, auto_class: str) -> Any:
    import transformers

    return getattr(transformers, auto_class).from_pretrained(str(folder)).eval()


@pytest.mark.parametrize("name, auto_class, field", [
    ("llama_base", "AutoModel", "last_hidden_state"),
    ("camembert", "AutoModelForMaskedLM", "logits"),
    ("dinov2", "AutoModelForImageClassification", "logits"),
])
def test_derived_folder_in_optimum(name: str, auto_class: str, field: str, derived: Any,
                                   checkpoints: Any, run_client: Any) -> None:
    result = derived(name)
    model = _eager(checkpoints(name), auto_class)
    torch.manual_seed(6)
    if name == "dinov2":
        inputs = {"pixel_values": torch.rand(3, 3, 32, 32)}
    else:
        ids = torch.randint(3, 99, (3, 9))
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if name == "llama_base":
            inputs["position_ids"] = torch.arange(9).repeat(3, 1)
        else:
            inputs["attention_mask"][-1, -2:] = 0
    with torch.no_grad():
        expected = getattr(model(**inputs), field).numpy()
    got = run_client("optimum", result.output_dir, result.task,
                     {k: v.numpy() for k, v in inputs.items()})
    np.testing.assert_allclose(got[field], expected, rtol=0, atol=1e-4)
    assert np.abs(expected).max() > 0


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
