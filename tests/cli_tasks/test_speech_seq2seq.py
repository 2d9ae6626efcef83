"""Speech2Text and Moonshine speech recognition with past through the CLI (issue 42):
audio of any length with a mask, in optimum's three files (tasks/speech.py).

Each tiny checkpoint is exported once with the CLI's default task (which validates every
graph against eager at two shapes, a padded row among them), then generated from in
optimum's ORTModelForSpeechSeq2Seq (client venv) on a batch whose second row is padded:
the tokens must be eager's greedy tokens. The decoders take the encoder's input mask, as
optimum feeds it, and subsample it inside the graph; the test checks that the mask changes
eager's tokens, so a graph that ignored it would fail.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from tests.cli_tasks.conftest import CLIENT_SCRIPT

# The CLI warns that the tiny configs' position tables (64 rows) cap the dynamic lengths.
pytestmark = pytest.mark.filterwarnings("ignore")
NEW_TOKENS = 8
# Weights drawn with std 0.5: the default 0.02 gives tiny models the same token at every step.
_STD = 0.5


def _speech_to_text() -> Any:
    import transformers as tf

    return tf.Speech2TextForConditionalGeneration(tf.Speech2TextConfig(
        vocab_size=99, d_model=32, encoder_layers=1, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, conv_channels=16, input_feat_per_channel=16,
        max_source_positions=64, max_target_positions=64, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1, init_std=_STD))


def _moonshine() -> Any:
    import transformers as tf

    return tf.MoonshineForConditionalGeneration(tf.MoonshineConfig(
        vocab_size=99, hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=1,
        decoder_num_hidden_layers=1, encoder_num_attention_heads=4,
        decoder_num_attention_heads=4, encoder_num_key_value_heads=4,
        decoder_num_key_value_heads=4, max_position_embeddings=128, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, initializer_range=_STD))


# name -> (model, main input, audio of one row: frames x 16 features, or samples)
MODELS = {"speech_to_text": (_speech_to_text, "input_features", (40, 16)),
          "moonshine": (_moonshine, "input_values", (5000,))}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path, str]]:
    """name -> (eager model, exported folder, the CLI's output): `onnxport export --model`
    run in this process (the test's torch and transformers imports shared)."""
    from onnxport.cli import main

    root = tmp_path_factory.mktemp("speech")
    done = {}
    for name, (make, _, _) in MODELS.items():
        torch.manual_seed(0)
        model = make().eval()
        model.save_pretrained(str(root / name))
        log = io.StringIO()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            code = main(["export", "--model", str(root / name), str(root / f"{name}-onnx")])
        done[name] = model, root / f"{name}-onnx", log.getvalue()
        assert code == 0, log.getvalue()[-4000:]
    return done


@pytest.fixture(scope="module")
def generated(exported: Any, client_python: Path,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """name -> (eager's tokens, eager's tokens without the mask, the client's result), the
    clients run in one process of the client venv (client.py's run_optimum per folder)."""
    root = tmp_path_factory.mktemp("speech-client")
    options = dict(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                   num_beams=1)
    eager, jobs = {}, []
    for name, (model, out, _) in exported.items():
        _, main, row = MODELS[name]
        audio = torch.randn(2, *row, generator=torch.Generator().manual_seed(1))
        mask = torch.ones(2, row[0], dtype=torch.long)
        mask[1, 3 * row[0] // 4:] = 0
        with torch.no_grad():
            eager[name] = (model.generate(**{main: audio, "attention_mask": mask}, **options),
                           model.generate(**{main: audio}, **options))
        np.savez(root / f"{name}-in.npz", **{main: audio.numpy(), "attention_mask": mask.numpy()})
        jobs.append({"kind": "optimum", "folder": str(out),
                     "task": "automatic-speech-recognition-with-past",
                     "inputs": str(root / f"{name}-in.npz"),
                     "output": str(root / f"{name}-out.npz"), "max_new_tokens": NEW_TOKENS})
    code = ("import json, sys, numpy as np\n"
            f"sys.path.insert(0, {str(CLIENT_SCRIPT.parent)!r})\n"
            "from client import run_optimum\n"
            "for job in json.loads(sys.argv[1]):\n"
            "    np.savez(job['output'], **run_optimum(job, dict(np.load(job['inputs']))))\n")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TRANSFORMERS_VERBOSITY": "error"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(client_python), "-c", code, json.dumps(jobs)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"optimum client failed:\n{proc.stderr[-4000:]}"
    return {name: (*eager[name], dict(np.load(root / f"{name}-out.npz"))) for name in MODELS}


def _io(path: Path) -> tuple[dict[str, list[Any]], list[str]]:
    graph = onnx.load(str(path), load_external_data=False).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in graph.input}
    return dims, [v.name for v in graph.output]


@pytest.mark.parametrize("name", MODELS)
def test_exported_as_optimum_lays_it_out(name: str, exported: Any) -> None:
    _, out, log = exported[name]
    _, main, _ = MODELS[name]
    assert "task: automatic-speech-recognition-with-past" in log
    assert "validated: ONNX Runtime matches eager PyTorch at every shape" in log
    encoder, outputs = _io(out / "encoder_model.onnx")
    assert list(encoder) == [main, "attention_mask"] and outputs == ["last_hidden_state"]
    assert encoder["attention_mask"] == ["batch_size", "encoder_sequence_length"]
    for file in ("decoder_model.onnx", "decoder_with_past_model.onnx"):
        decoder, outputs = _io(out / file)
        assert list(decoder)[:3] == ["input_ids", "encoder_hidden_states",
                                     "encoder_attention_mask"]
        # the mask over the encoder's input, not its subsampled output
        assert decoder["encoder_attention_mask"] == ["batch_size", "encoder_input_length"]
        assert decoder["encoder_hidden_states"][:2] == ["batch_size", "encoder_sequence_length"]
        assert outputs[0] == "logits"
    past, _ = _io(out / "decoder_with_past_model.onnx")
    assert "past_key_values.0.encoder.value" in past


@pytest.mark.parametrize("name", MODELS)
def test_generates_like_eager_with_a_padded_row(name: str, generated: Any) -> None:
    expected, unmasked, got = generated[name]
    assert (expected[1] != unmasked[1]).any(), "the mask must change eager's tokens"
    assert len(set(expected[0].tolist())) > 3  # not one token repeated
    # ORTModelForSpeechSeq2Seq.from_pretrained gives Moonshine its own subclass
    assert str(got["class"]) == {"speech_to_text": "ORTModelForSpeechSeq2Seq",
                                 "moonshine": "ORTModelForMoonshine"}[name]
    np.testing.assert_array_equal(got["tokens"], expected.numpy())
