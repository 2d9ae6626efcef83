"""Big-model route on tiny models: fake-mode / meta-device export, apply_weights from
checkpoints (state_dict, safetensors file, sharded folder), streamed external data (shards,
alignment, checksums), and the error cases. The big figures are in
benchmarks/bench_big_models.py."""

from __future__ import annotations

import gc
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from safetensors.torch import save_file

import onnxport
from onnxport import weights as W
from onnxport.weights import WeightsMismatchError, verify_external_data

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def _config(**kw) -> LlamaConfig:
    base = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    base.update(kw)
    return LlamaConfig(**base)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A real tiny Llama and its checkpoint saved in 7+ safetensors shards with an index."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(_config()).eval()
    folder = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(folder, max_shard_size="100KB")
    return model, str(folder)


def _fake_export(config: LlamaConfig):
    with onnxport.enable_fake_mode():
        fake = LlamaForCausalLM(config)
        ids = torch.randint(0, config.vocab_size, (1, 8))
    return fake, onnxport.export(fake, (ids,), kwargs={"use_cache": False})


def _ort_logits(path: str, ids: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: ids.numpy()})[0]


def test_fake_export_sharded_checkpoint_save_and_run(llama, tmp_path) -> None:
    model, folder = llama
    assert os.path.isfile(os.path.join(folder, "model.safetensors.index.json"))
    assert len([f for f in os.listdir(folder) if f.endswith(".safetensors")]) > 3
    fake, program = _fake_export(model.config)
    report = program.apply_weights(folder, module=fake)
    assert report.materialized == ["model.rotary_emb.inv_freq"]
    assert not report.unused and not report.kept
    path = str(tmp_path / "model.onnx")
    program.save(path, external_data=True, external_data_max_shard_bytes=200_000)
    data = sorted(f for f in os.listdir(tmp_path) if f.endswith(".data"))
    assert len(data) > 1 and data[0] == "model.onnx-00001-of-%05d.data" % len(data)
    assert all(os.path.getsize(tmp_path / f) <= 200_000 for f in data)
    assert verify_external_data(path) == []
    # Offsets: tensors of 64 KiB or more start on 64 KiB boundaries.
    proto = onnx.load(path, load_external_data=False)
    big = 0
    for init in proto.graph.initializer:
        info = {e.key: e.value for e in init.external_data}
        if info and int(info["length"]) >= 65536:
            assert int(info["offset"]) % 65536 == 0
            big += 1
    assert big > 0
    ids = torch.randint(0, 256, (1, 8))
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits.numpy()
    np.testing.assert_allclose(_ort_logits(path, ids), expected, atol=1e-4, rtol=1e-4)
    # The in-memory program runs too (weights still lazy).
    np.testing.assert_allclose(program(ids)[0].numpy(), expected, atol=1e-4, rtol=1e-4)


def test_weights_are_read_only_when_saved(llama, tmp_path, monkeypatch) -> None:
    model, folder = llama
    fake, program = _fake_export(model.config)
    loads: list[str] = []
    original = W.SafetensorsCheckpoint.load
    monkeypatch.setattr(W.SafetensorsCheckpoint, "load",
                        lambda self, name: loads.append(name) or original(self, name))
    program.apply_weights(folder, module=fake)
    assert loads == []
    value = program.model.graph.initializers["model.layers.0.mlp.up_proj.weight"].const_value
    assert isinstance(value, W.CheckpointTensor)
    program.save(str(tmp_path / "m.onnx"), external_data=True)
    # Each weight read once (the two tiny norm weights stay inline in the model, read there).
    assert sorted(loads) == sorted(set(loads))
    assert len(loads) == len(program.model.graph.initializers) - 1  # not inv_freq


def test_meta_device_tied_weights_and_dtype_conversion(tmp_path) -> None:
    config = _config(tie_word_embeddings=True)
    torch.manual_seed(1)
    real = LlamaForCausalLM(config).eval()
    folder = tmp_path / "bf16"
    real.to(torch.bfloat16).save_pretrained(folder, max_shard_size="100KB")
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    assert "lm_head.weight" not in weight_map  # tied: saved once
    with torch.device("meta"):
        meta = LlamaForCausalLM(config)
    ids = torch.randint(0, 256, (1, 8))
    program = onnxport.export(meta, (ids,), kwargs={"use_cache": False})
    with pytest.raises(onnxport.OnnxExporterError, match="no data"):
        program.save(str(tmp_path / "early.onnx"))
    with pytest.raises(WeightsMismatchError, match="dtype='auto'") as info:
        program.apply_weights(folder, module=meta)
    assert info.value.mismatched
    report = program.apply_weights(folder, module=meta, dtype="auto")
    assert report.converted and report.materialized == ["model.rotary_emb.inv_freq"]
    tied = set(program.model.graph.initializers) & {"lm_head.weight", "model.embed_tokens.weight"}
    assert len(tied) == 1 and (tied - set(weight_map) == set() or report.aliased)
    path = str(tmp_path / "model.onnx")
    program.save(path, external_data=True)
    assert verify_external_data(path) == []
    with torch.no_grad():
        expected = real.float()(ids, use_cache=False).logits.numpy()
    np.testing.assert_allclose(_ort_logits(path, ids), expected, atol=1e-4, rtol=1e-4)


def test_missing_buffer_without_module_is_an_error(llama) -> None:
    # The program remembers its module weakly; once the module is gone, a non-persistent
    # buffer the checkpoint lacks needs module= again.
    model, folder = llama
    program = _fake_export(model.config)[1]
    gc.collect()  # torch.export's reference cycles hold the fake model until a collection
    assert program._module is not None and program._module() is None
    with pytest.raises(WeightsMismatchError) as info:
        program.apply_weights(folder)
    assert info.value.missing == ["model.rotary_emb.inv_freq"]
    assert "module=" in str(info.value)
    # Nothing was attached.
    assert all(v.const_value is None for v in program.model.graph.initializers.values())


def test_unmatched_names_are_listed_on_both_sides(llama) -> None:
    model, _ = llama
    fake, program = _fake_export(model.config)
    renamed = {k.removeprefix("model."): v for k, v in model.state_dict().items()}
    with pytest.raises(WeightsMismatchError) as info:
        program.apply_weights(renamed, module=fake)
    error = info.value
    assert "model.layers.0.mlp.up_proj.weight" in error.missing
    assert "layers.0.mlp.up_proj.weight" in error.unused
    assert "lm_head.weight" not in error.missing
    message = str(error)
    assert "not in the checkpoint" in message and "not used by the model" in message
    assert "prefix" in message


def test_unused_checkpoint_tensors_are_fine_unless_strict(llama) -> None:
    model, _ = llama
    fake, program = _fake_export(model.config)
    state = dict(model.state_dict())
    state["extra.head.weight"] = torch.zeros(3)
    report = program.apply_weights(state, module=fake)
    assert report.unused == ["extra.head.weight"]
    with pytest.raises(WeightsMismatchError, match="extra.head.weight"):
        program.apply_weights(state, module=fake, strict=True)


def test_shape_mismatches_are_all_listed(llama) -> None:
    model, _ = llama
    fake, program = _fake_export(model.config)
    state = dict(model.state_dict())
    state["model.norm.weight"] = torch.zeros(3)
    state["lm_head.weight"] = torch.zeros(2, 2)
    with pytest.raises(WeightsMismatchError) as info:
        program.apply_weights(state, module=fake)
    assert len(info.value.mismatched) == 2
    assert "'model.norm.weight' has shape (3,), the model expects (64,)" in str(info.value)


def test_single_safetensors_file_with_float16_conversion(tmp_path) -> None:
    with onnxport.enable_fake_mode():
        fake = torch.nn.Sequential(torch.nn.Linear(64, 300, dtype=torch.float16), torch.nn.ReLU(),
                                   torch.nn.Linear(300, 5, dtype=torch.float16))
        x = torch.randn(2, 64, dtype=torch.float16)
    program = onnxport.export(fake, (x,))
    torch.manual_seed(2)
    real = torch.nn.Sequential(torch.nn.Linear(64, 300), torch.nn.ReLU(), torch.nn.Linear(300, 5))
    save_file(real.state_dict(), str(tmp_path / "w.safetensors"))
    report = program.apply_weights(str(tmp_path / "w.safetensors"), dtype=torch.float16)
    assert sorted(report.converted) == sorted(real.state_dict())
    path = str(tmp_path / "m.onnx")
    program.save(path, external_data=True)
    xr = torch.randn(2, 64)
    expected = real.half()(xr.half()).float()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out = session.run(None, {session.get_inputs()[0].name: xr.half().numpy()})[0]
    np.testing.assert_allclose(out.astype(np.float32), expected.detach().numpy(), atol=2e-2)


def test_real_export_takes_checkpoint_for_pretransposed_weights(tmp_path) -> None:
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(2, 3, 16)
    program = onnxport.export(model, (x,))
    other = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    save_file(other.state_dict(), str(tmp_path / "w.safetensors"))
    program.apply_weights(str(tmp_path / "w.safetensors"))
    path = str(tmp_path / "m.onnx")
    program.save(path, external_data=True)
    out = _ort_logits(path, x)
    np.testing.assert_allclose(out, other(x).detach().numpy(), atol=1e-5)


def test_checksum_detects_corruption(llama, tmp_path) -> None:
    model, folder = llama
    fake, program = _fake_export(model.config)
    program.apply_weights(folder, module=fake)
    path = str(tmp_path / "model.onnx")
    program.save(path, external_data=True)
    data = tmp_path / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    problems = verify_external_data(path)
    assert len(problems) == 1 and "CRC-32" in problems[0]
    data.write_bytes(bytes(raw[:-1]))
    assert "bytes" in verify_external_data(path)[0]
    program.save(str(tmp_path / "inline.onnx"))
    assert "no external-data checksums" in verify_external_data(str(tmp_path / "inline.onnx"))[0]


def test_layout_plan() -> None:
    from onnxport._serialize import plan_layout, shard_names

    layout = plan_layout([100, 70_000, 10, 200_000, 50], max_shard_bytes=150_000)
    assert layout == [(0, 0), (0, 65536), (0, 135552), (1, 0), (2, 0)]
    assert plan_layout([100, 100], None) == [(0, 0), (0, 128)]
    assert shard_names("m.onnx.data", 1) == ["m.onnx.data"]
    assert shard_names("m.onnx.data", 2) == ["m.onnx-00001-of-00002.data",
                                              "m.onnx-00002-of-00002.data"]


def test_resave_removes_stale_data_files(tmp_path) -> None:
    # Saving again over a model replaces its data files: shards of an earlier save (another
    # count, or one file now) are removed; files that only look alike are not.
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    x = torch.randn(2, 64)
    program = onnxport.export(model, (x,))
    path = str(tmp_path / "m.onnx")
    (tmp_path / "other.onnx.data").write_bytes(b"x")
    (tmp_path / "m.onnx-notes.data").write_bytes(b"x")

    def data_files() -> list[str]:
        return sorted(f for f in os.listdir(tmp_path) if f.startswith("m.onnx") and f != "m.onnx")

    program.save(path, external_data=True, external_data_max_shard_bytes=20_000)
    three = ["m.onnx-%05d-of-00003.data" % i for i in (1, 2, 3)]
    assert data_files() == sorted([*three, "m.onnx-notes.data"])
    program.save(path, external_data=True, external_data_max_shard_bytes=40_000)
    assert data_files() == ["m.onnx-00001-of-00002.data", "m.onnx-00002-of-00002.data",
                            "m.onnx-notes.data"]
    program.save(path, external_data=True)
    assert data_files() == ["m.onnx-notes.data", "m.onnx.data"]
    assert verify_external_data(path) == []
    np.testing.assert_allclose(_ort_logits(path, x), model(x).detach().numpy(), atol=1e-5)
    program.save(path, external_data=False)
    assert data_files() == ["m.onnx-notes.data"]
    assert (tmp_path / "other.onnx.data").exists()
    np.testing.assert_allclose(_ort_logits(path, x), model(x).detach().numpy(), atol=1e-5)
