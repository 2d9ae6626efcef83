"""The streamed route of `onnxport export --model`: a model built without weights, exported,
and its weights streamed from the checkpoint files (docs/cli.md, "Large checkpoints").

Tiny checkpoints stand in for large ones: `--stream-weights` forces the route a large
checkpoint takes on its own, and the route choice is tested on its numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from safetensors.torch import load_file

from onnxport.tasks import WeightsError, export_checkpoint, streaming
from tests.cli_tasks.conftest import run_cli

GB = 1024**3


def _tied_llama() -> Any:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def sharded_llama(checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama of the other CLI tests, saved again in 20 KB safetensors shards with
    an index."""
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("sharded") / "llama"
    LlamaForCausalLM.from_pretrained(str(checkpoints("llama"))).save_pretrained(
        str(folder), max_shard_size="20KB")
    return folder


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_cli_streams_a_sharded_decoder_with_past(sharded_llama: Path, exported: Any,
                                                 tmp_path: Path) -> None:
    shards = sorted(p.name for p in sharded_llama.glob("*.safetensors"))
    assert len(shards) > 2 and (sharded_llama / "model.safetensors.index.json").is_file()
    out = tmp_path / "streamed"
    done = run_cli("export", "--model", str(sharded_llama), "--stream-weights", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "route: streamed weights (given with --stream-weights)" in done.stderr
    assert "1 computed by the model (buffers" in done.stderr  # rotary inv_freq
    # A tiny model fits in memory, so the CLI's own comparison with eager ran too.
    assert "validated: ONNX Runtime matches eager PyTorch" in done.stdout
    assert "external data CRC-32 (model.onnx.data): ok" in done.stdout

    # The in-memory route's folder for the same model (the other CLI tests export it): the
    # same files, plus the external data file the streamed route always writes, the same
    # genai_config.json, the same graph inputs and outputs.
    normal, proc = exported("llama")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == \
        sorted([*(p.name for p in normal.iterdir()), "model.onnx.data"])
    assert json.loads((out / "genai_config.json").read_text()) == \
        json.loads((normal / "genai_config.json").read_text())
    a = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    b = onnx.load(str(normal / "model.onnx"), load_external_data=False).graph
    assert [(v.name, str(v.type)) for v in a.input] == [(v.name, str(v.type)) for v in b.input]
    assert [(v.name, str(v.type)) for v in a.output] == \
        [(v.name, str(v.type)) for v in b.output]

    # ONNX Runtime against eager PyTorch, loaded separately: prefill, then decode steps
    # feeding the graph's own present key/values back.
    from transformers import DynamicCache, LlamaForCausalLM

    eager = LlamaForCausalLM.from_pretrained(str(sharded_llama)).eval()
    session = _session(out / "model.onnx")
    names = [o.name for o in session.get_outputs()]
    torch.manual_seed(1)
    ids = torch.randint(3, 99, (2, 6))
    feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones((2, 6), np.int64),
             "position_ids": np.tile(np.arange(6), (2, 1))}
    for i in range(2):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = np.zeros((2, 2, 0, 8), np.float32)
    cache = DynamicCache()
    step_ids, total = ids, 6
    for _ in range(4):
        last = feeds
        got = dict(zip(names, session.run(None, feeds)))
        with torch.no_grad():
            expected = eager(input_ids=step_ids, past_key_values=cache, use_cache=True).logits
        np.testing.assert_allclose(got["logits"], expected.numpy(), atol=1e-4, rtol=0)
        step_ids = expected[:, -1:].argmax(-1)
        assert np.array_equal(got["logits"][:, -1].argmax(-1), step_ids[:, 0].numpy())
        feeds = {"input_ids": step_ids.numpy(), "attention_mask": np.ones((2, total + 1), np.int64),
                 "position_ids": np.full((2, 1), total, np.int64)}
        for i in range(2):
            for kind in ("key", "value"):
                feeds[f"past_key_values.{i}.{kind}"] = got[f"present.{i}.{kind}"]
        total += 1
    np.testing.assert_allclose(got["present.1.value"], cache.layers[1].values.numpy(),
                               atol=1e-4, rtol=0)
    # The in-memory route's file gives the same logits on the last step's inputs.
    again = dict(zip(names, _session(normal / "model.onnx").run(None, last)))
    np.testing.assert_allclose(again["logits"], got["logits"], atol=1e-5, rtol=0)


def test_streamed_float16_from_a_base_model_checkpoint(tmp_path: Path) -> None:
    """--dtype float16 converts tensor by tensor; a LlamaModel checkpoint's names lack the
    `model.` prefix of LlamaForCausalLM's (matched as transformers does) and hold no lm_head
    (tied to embed_tokens); the bytes written are reported as they are written."""
    base = tmp_path / "base"
    _tied_llama().model.save_pretrained(str(base), max_shard_size="20KB")
    calls: list[tuple[str, int, int]] = []
    result = export_checkpoint(base, tmp_path / "out", task="text-generation", dtype="float16",
                               stream_weights=True, validate=False,
                               save_progress=lambda f, done, total: calls.append((f, done, total)))
    assert result.route == "streamed" and "model.onnx.data" in result.files
    data = tmp_path / "out" / "model.onnx.data"
    done = [c[1] for c in calls]
    assert {c[0] for c in calls} == {"model.onnx"} and done == sorted(done)
    assert calls[-1][1] == calls[-1][2] and 0 < calls[-1][2] <= data.stat().st_size

    checkpoint: dict[str, torch.Tensor] = {}
    for shard in base.glob("*.safetensors"):
        checkpoint.update(load_file(str(shard)))
    assert not any(k.startswith("model.") or k.startswith("lm_head") for k in checkpoint)
    model = onnx.load(str(tmp_path / "out" / "model.onnx"))
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for name in ("layers.1.mlp.down_proj.weight", "norm.weight"):
        assert weights[f"model.{name}"].dtype == np.float16
        assert np.array_equal(weights[f"model.{name}"], checkpoint[name].half().numpy()), name

    from transformers import LlamaForCausalLM

    eager = LlamaForCausalLM.from_pretrained(str(base), dtype=torch.float16).eval()
    torch.manual_seed(2)
    ids = torch.randint(3, 99, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    session = _session(tmp_path / "out" / "model.onnx")
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
             "position_ids": np.tile(np.arange(7), (2, 1))}
    got = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})[0]
    with torch.no_grad():
        expected = eager(input_ids=ids, attention_mask=mask).logits.float()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), expected.numpy(), atol=1e-2, rtol=0)


def test_legacy_bin_checkpoint_cannot_stream(tmp_path: Path) -> None:
    model = _tied_llama()
    model.config.save_pretrained(str(tmp_path))
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin",
               _use_new_zipfile_serialization=False)
    with pytest.raises(WeightsError, match="legacy .*cannot be memory-mapped"):
        export_checkpoint(tmp_path, tmp_path / "out", stream_weights=True)
    assert not (tmp_path / "out").exists()


# 16 GB available: the in-memory route is kept while its estimate stays within 12.8 GB.
@pytest.mark.parametrize(("weights", "dtype", "validate", "stream"), [
    (1 * GB, torch.float32, True, False),   # 1 x (1.1 + 1) + 1 = 3.1 GB
    (6 * GB, torch.float32, True, True),    # 6 x (1.1 + 1) + 1 = 13.6 GB
    (3 * GB, torch.float16, True, True),    # 3 x (1.1 + 3) + 1 = 13.3 GB (ORT's fp32 copies)
    (3 * GB, torch.float16, False, False),  # 3 x 1.1 + 1 = 4.3 GB without validation
    (13 * GB, torch.float16, False, True),  # 13 x 1.1 + 1 = 15.3 GB
])
def test_route_choice(weights: int, dtype: torch.dtype, validate: bool, stream: bool) -> None:
    plan = streaming.plan_route(weights, dtype, stream=None, validate=validate,
                                available=16 * GB)
    assert plan.stream == stream, plan.reason
    assert plan.weight_bytes == weights and "16.0 GB available" in plan.reason
    forced = streaming.plan_route(weights, dtype, stream=not stream, validate=validate,
                                  available=16 * GB)
    assert forced.stream == (not stream) and "given with" in forced.reason
