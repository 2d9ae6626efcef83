"""`onnxport inspect FILE` and `onnxport verify FILE --model CHECKPOINT_DIR`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli_tasks.conftest import run_cli

pytestmark = pytest.mark.filterwarnings("ignore")


def test_inspect(exported: Any) -> None:
    out, proc = exported("llama")
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = run_cli("inspect", str(out / "model.onnx"))
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "opsets: ai.onnx" in text
    assert "attention_mask: int64[batch_size, past_sequence_length + sequence_length]" in text
    assert "present.1.value: float[batch_size, 2, past_sequence_length + sequence_length, 8]" \
        in text
    assert "initializers: " in text and "external data files: none" in text
    assert "MatMul" in text


def test_verify_matches_and_detects_another_checkpoint(exported: Any, checkpoints: Any,
                                                       tmp_path: Any) -> None:
    out, proc = exported("bert")
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = run_cli("verify", str(out / "model.onnx"), "--model", str(checkpoints("bert")))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "verified:" in res.stdout and "max abs diff" in res.stdout
    # Same architecture, other weights: verify must fail with exit 1 and a MISMATCH row.
    import transformers

    other = tmp_path / "other"
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(checkpoints("bert")))
    for p in model.parameters():
        p.data.add_(0.05)
    model.save_pretrained(str(other))
    res = run_cli("verify", str(out / "model.onnx"), "--model", str(other))
    assert res.returncode == 1
    assert "MISMATCH" in res.stdout


def test_help_has_examples() -> None:
    for verb in ("export", "inspect", "verify"):
        res = run_cli(verb, "--help")
        assert res.returncode == 0 and "examples:" in res.stdout
