"""`onnxport export --model CHECKPOINT_DIR OUTPUT_DIR` driven as a user drives it (subprocess).

Each tiny checkpoint is exported once per session with the task detected from its
architecture; the folder must hold optimum's files with optimum's input/output names and dim
names, and the validation table must say ok for every output at every shape.
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest

from tests.cli_tasks.checkpoints import CHECKPOINTS, DECODERS, DENSE_VISION, ENCODERS, VISION

pytestmark = pytest.mark.filterwarnings("ignore")


def _dims(path: Any) -> dict[str, list[str]]:
    graph = onnx.load(str(path), load_external_data=False).graph
    return {v.name: [d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim]
            for v in [*graph.input, *graph.output]}


def _check_run(name: str, exported: Any) -> tuple[Any, Any]:
    out, proc = exported(name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    task = CHECKPOINTS[name][1]
    assert f"for {task} (architecture " in proc.stdout  # the detected task, and why
    table = [line for line in proc.stdout.splitlines() if line.startswith("model.onnx")
             or line.startswith("encoder_model.onnx") or line.startswith("decoder_")]
    assert table and all(line.rstrip().endswith("ok") for line in table), proc.stdout
    assert "max abs diff" in proc.stdout and "tolerance" in proc.stdout
    return out, proc


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_with_past(name: str, exported: Any) -> None:
    out, proc = _check_run(name, exported)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["config.json", "genai_config.json", "generation_config.json",
                     "model.onnx"]
    dims = _dims(out / "model.onnx")
    assert dims["input_ids"] == ["batch_size", "sequence_length"]
    assert dims["attention_mask"] == ["batch_size", "past_sequence_length + sequence_length"]
    assert dims["past_key_values.1.value"][0] == "batch_size"
    assert dims["past_key_values.1.value"][2] == "past_sequence_length"
    assert dims["logits"] == ["batch_size", "sequence_length", "99"]
    assert dims["present.0.key"][2] == "past_sequence_length + sequence_length"
    assert ("position_ids" in dims) == (name != "gemma")  # as optimum's GemmaOnnxConfig
    # the prefill (empty past) and a one-token decode step are validated
    assert "past_sequence_length=0" in proc.stdout and "sequence_length=1," in proc.stdout


@pytest.mark.parametrize("name", ENCODERS)
def test_text_encoder(name: str, exported: Any) -> None:
    out, _ = _check_run(name, exported)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.onnx"]
    dims = _dims(out / "model.onnx")
    assert dims["input_ids"] == ["batch_size", "sequence_length"]
    # DeBERTa-v2 has type_vocab_size 0 by default: no token_type_ids, as in optimum
    assert ("token_type_ids" in dims) == (name == "bert")
    task = CHECKPOINTS[name][1]
    if task == "question-answering":
        assert dims["start_logits"] == dims["end_logits"] == ["batch_size", "sequence_length"]
    elif task == "text-classification":
        assert dims["logits"] == ["batch_size", "3"]
    else:
        assert dims["logits"][:2] == ["batch_size", "sequence_length"]


@pytest.mark.parametrize("name", VISION)
def test_vision(name: str, exported: Any) -> None:
    out, _ = _check_run(name, exported)
    dims = _dims(out / "model.onnx")
    assert dims["pixel_values"][0] == "batch_size"
    if name == "convnext":
        assert dims["pixel_values"][2:] == ["height", "width"]
    assert dims["logits"] == ["batch_size", "4"]


@pytest.mark.parametrize("name", DENSE_VISION)
def test_detection_and_segmentation(name: str, exported: Any) -> None:
    """DETR (object-detection), SegFormer (semantic-segmentation): optimum's names, any size."""
    out, proc = _check_run(name, exported)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.onnx"]
    dims = _dims(out / "model.onnx")
    assert dims["pixel_values"] == ["batch_size", "3", "height", "width"]
    if name == "detr":  # 6 queries, 3 labels + "no object"
        assert dims["logits"] == ["batch_size", "6", "4"]
        assert dims["pred_boxes"] == ["batch_size", "6", "4"]
    else:  # 3 labels at a quarter of the image size
        assert list(dims) == ["pixel_values", "logits"]
        assert dims["logits"][:2] == ["batch_size", "3"]
        assert "height" in dims["logits"][2] and "width" in dims["logits"][3]
    assert "height=96,width=80" in proc.stdout  # validated at a second, non-square size


def test_other_task_on_the_same_checkpoint(checkpoints: Any, tmp_path: Any) -> None:
    """--task picks another head of the same architecture (BERT: token-classification)."""
    from tests.cli_tasks.conftest import run_cli

    out = tmp_path / "bert-tokens"
    proc = run_cli("export", "--model", str(checkpoints("bert")), "--task",
                   "token-classification", "--atol", "1e-5", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "for token-classification (given with --task)" in proc.stdout
    assert "1e-05" in proc.stdout
    assert _dims(out / "model.onnx")["logits"][:2] == ["batch_size", "sequence_length"]


@pytest.mark.parametrize("name", ["t5", "bart", "whisper"])
def test_seq2seq(name: str, exported: Any) -> None:
    out, _ = _check_run(name, exported)
    files = {p.name for p in out.iterdir()}
    assert {"encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx",
            "config.json", "generation_config.json"} <= files
    dec = _dims(out / "decoder_model.onnx")
    past = _dims(out / "decoder_with_past_model.onnx")
    assert dec["input_ids"] == ["batch_size", "decoder_sequence_length"]
    assert "present.1.encoder.value" in dec and "present.1.encoder.value" not in past
    assert past["past_key_values.0.decoder.key"][2] == "past_decoder_sequence_length"
    assert past["present.0.decoder.key"][2] == ("past_decoder_sequence_length + "
                                                "decoder_sequence_length")
    if name != "whisper":
        assert _dims(out / "encoder_model.onnx")["input_ids"] == ["batch_size",
                                                                  "encoder_sequence_length"]
        assert past["past_key_values.1.encoder.key"][2] == "encoder_sequence_length"


@pytest.fixture(scope="module")
def bert_float16(checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run serves the --dtype float16 and --report tests (exports are the slow part)."""
    from tests.cli_tasks.conftest import run_cli

    out = tmp_path_factory.mktemp("fp16") / "bert-fp16"
    return out, run_cli("export", "--model", str(checkpoints("bert")), "--dtype", "float16",
                        "--report", str(out))


def test_dtype_float16(bert_float16: Any) -> None:
    """float16: every float weight is float16, validated at the float16 tolerance (1e-2)."""
    out, proc = bert_float16
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("model.onnx")]
    assert len(rows) == 2 and all(line.split()[-2:] == ["1e-02", "ok"] for line in rows), \
        proc.stdout
    model = onnx.load(str(out / "model.onnx"))
    floats = [i for i in model.graph.initializer
              if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                 onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)]
    assert floats and all(i.data_type == onnx.TensorProto.FLOAT16 for i in floats)
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_report_written_into_output_dir(bert_float16: Any) -> None:
    out, proc = bert_float16
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = sorted(out.glob("onnxport_report_*_success.md"))
    assert len(reports) == 1, sorted(p.name for p in out.iterdir())
    assert reports[0].name in proc.stdout  # listed among the files written
    text = reports[0].read_text()
    assert text.startswith("# onnxport export report") and "- result: success" in text
    assert "## ONNX model" in text and "## Timings" in text


def _cli_with_warnings_on(*args: str) -> Any:
    """The CLI as a user's shell runs it: no PYTHONWARNINGS, no logging configuration."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run([sys.executable, "-m", "onnxport.cli", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_float_export_prints_only_onnxport_lines(checkpoints: Any, tmp_path: Any) -> None:
    """Quiet by default: stderr holds onnxport's progress lines and nothing from torch,
    torchao or transformers; --verbose lets the libraries speak again."""
    quiet = _cli_with_warnings_on("export", "--model", str(checkpoints("llama")),
                                  str(tmp_path / "quiet"))
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    lines = [line for line in quiet.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("[") for line in lines), quiet.stderr
    for noise in ("torchao", "_pytree", "Warning", "Failed to load", "Loading weights"):
        assert noise not in quiet.stderr, noise
    loud = _cli_with_warnings_on("export", "--model", str(checkpoints("llama")),
                                 str(tmp_path / "loud"), "--verbose")
    assert loud.returncode == 0, loud.stderr[-3000:]
    # transformers' progress bar and its FutureWarnings (torchao is no longer imported for a
    # float checkpoint: test_imports.py)
    assert "Loading weights" in loud.stderr or "Warning" in loud.stderr, loud.stderr[-3000:]
