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


# -- how external data is written (issue 26, item 3) ----------------------------------------------

class _FakeLibc:
    """Stands for `_serialize._libc()`: records `sync_file_range` and `madvise` calls (and
    makes them), or fails `sync_file_range` with `errno`."""

    def __init__(self, errno: int = 0) -> None:
        self.errno = errno
        self.ranges: list[tuple[str, int, int, int]] = []  # (file, offset, bytes, flags)
        self.advice: list[tuple[int, int, int]] = []

    def sync_file_range(self, fd: int, offset: int, nbytes: int, flags: int) -> int:
        import ctypes

        self.ranges.append((os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), offset,
                            nbytes, flags))
        if self.errno:
            ctypes.set_errno(self.errno)
            return -1
        return 0

    def madvise(self, address: int, length: int, advice: int) -> int:
        self.advice.append((address, length, advice))
        return 0

    def __call__(self) -> tuple:
        return self.sync_file_range, self.madvise


def _mlp_program():
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256)).eval()
    x = torch.randn(2, 256)
    return model, x, onnxport.export(model, (x,))


def _crc32_of(path: str) -> str:
    import zlib

    with open(path, "rb") as fh:
        return f"{zlib.crc32(fh.read()):08x}"


@pytest.mark.parametrize("shard", [None, 300_000], ids=["one-file", "shards"])
def test_recorded_checksums_are_the_crc32_of_the_files(tmp_path, shard) -> None:
    # The CRC-32 is computed from the tensors' memory while the writer thread writes: it must
    # still equal a CRC-32 of the bytes on disk, padding included.
    _, _, program = _mlp_program()
    path = str(tmp_path / "m.onnx")
    program.save(path, external_data=True, external_data_max_shard_bytes=shard)
    proto = onnx.load(path, load_external_data=False)
    files = json.loads({p.key: p.value for p in proto.metadata_props}[
        "pkg.onnxport.external_data_crc32"])
    assert (len(files) == 1) == (shard is None)
    for name, record in files.items():
        assert record == {"bytes": os.path.getsize(tmp_path / name),
                          "crc32": _crc32_of(str(tmp_path / name))}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads file names from /proc")
def test_writeback_starts_while_writing(tmp_path, monkeypatch) -> None:
    # Buffered writes (where O_DIRECT is refused): each chunk is handed to the disk as soon as
    # it is written, and the writer waits for the chunks WRITEBACK_LAG bytes behind, before the
    # fsync at the end.
    from onnxport import _serialize

    libc = _FakeLibc()
    monkeypatch.setattr(_serialize, "_libc", libc)
    monkeypatch.setattr(_serialize, "_DIRECT_IO", False)  # buffered writes
    monkeypatch.setattr(_serialize, "WRITE_CHUNK", 64 * 1024)
    monkeypatch.setattr(_serialize, "GATHER_BYTES", 64 * 1024)
    monkeypatch.setattr(_serialize, "WRITEBACK_LAG", 128 * 1024)
    fsynced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        fsynced.append(len(libc.ranges))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    model, x, program = _mlp_program()
    path = str(tmp_path / "m.onnx")
    program.save(path, external_data=True)
    assert verify_external_data(path) == []
    np.testing.assert_allclose(_ort_logits(path, x), model(x).detach().numpy(), atol=1e-5)
    size = os.path.getsize(tmp_path / "m.onnx.data")
    started = [(o, n) for f, o, n, flags in libc.ranges if flags == 2]
    waited = [(o, n) for f, o, n, flags in libc.ranges if flags == 7]
    assert {f for f, *_ in libc.ranges} == {"m.onnx.data"}
    # Started in order from the start of the file, without gaps, each at least a chunk.
    assert started[0][0] == 0 and all(n >= 64 * 1024 for _, n in started)
    assert all(a + n == b for (a, n), (b, _) in zip(started, started[1:]))
    assert size - (started[-1][0] + started[-1][1]) < 64 * 1024
    # Waited for in order, each range started before, and at most WRITEBACK_LAG behind.
    assert waited and waited[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(waited, waited[1:]))
    for i, (_, o, n, flags) in enumerate(libc.ranges):
        if flags == 7:
            begun = [r for r in libc.ranges[:i] if r[3] == 2]
            assert o + n <= begun[-1][1] + begun[-1][2] - 128 * 1024
    assert fsynced[0] == len(libc.ranges)  # the data file's fsync comes after all of it


def test_weights_in_memory_are_read_ahead(tmp_path, monkeypatch) -> None:
    # Parameters that are views of a memory-mapped checkpoint (from_pretrained leaves them so)
    # are read ahead with MADV_WILLNEED before the checksum reaches them.
    from onnxport import _serialize

    libc = _FakeLibc()
    monkeypatch.setattr(_serialize, "_libc", libc)
    model, _, program = _mlp_program()
    program.save(str(tmp_path / "m.onnx"), external_data=True)
    page = __import__("mmap").PAGESIZE
    for p in model.parameters():
        nbytes = p.numel() * p.element_size()
        if nbytes < _serialize.ALIGNMENT:
            continue
        assert any(a % page == 0 and a <= p.data_ptr() and p.data_ptr() + nbytes <= a + n
                   and advice == 3 for a, n, advice in libc.advice), p.shape


def test_writeback_not_supported_is_skipped(tmp_path, monkeypatch) -> None:
    # A file system without sync_file_range (EINVAL): no more calls, the fsync flushes all.
    from onnxport import _serialize

    libc = _FakeLibc(errno=22)
    monkeypatch.setattr(_serialize, "_libc", libc)
    monkeypatch.setattr(_serialize, "_DIRECT_IO", False)
    monkeypatch.setattr(_serialize, "WRITE_CHUNK", 64 * 1024)
    _, _, program = _mlp_program()
    path = str(tmp_path / "m.onnx")
    program.save(path, external_data=True)
    assert len(libc.ranges) == 1 and verify_external_data(path) == []


def _direct_io_supported(folder) -> bool:
    try:
        fd = os.open(os.path.join(folder, "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except (OSError, AttributeError):
        return False
    os.close(fd)
    os.remove(os.path.join(folder, "probe"))
    return True


@pytest.mark.parametrize("shard", [None, 300_000], ids=["one-file", "shards"])
def test_direct_io_writes_what_buffered_writes_write(tmp_path, monkeypatch, shard) -> None:
    # With O_DIRECT (through aligned buffers, smaller than the weights here so that pieces
    # straddle them, the last block written without O_DIRECT) the files are byte for byte those
    # of buffered writes, with the same checksums, and the model runs.
    from onnxport import _serialize

    if not _direct_io_supported(tmp_path):
        pytest.skip("this file system refuses O_DIRECT (the buffered path is tested above)")
    model, x, program = _mlp_program()
    monkeypatch.setattr(_serialize, "_DIRECT_IO", False)
    (tmp_path / "buffered").mkdir()
    program.save(str(tmp_path / "buffered" / "m.onnx"), external_data=True,
                 external_data_max_shard_bytes=shard)
    monkeypatch.setattr(_serialize, "_DIRECT_IO", True)
    monkeypatch.setattr(_serialize, "DIRECT_BUFFER", 3 * 4096 * 8)
    monkeypatch.setattr(_serialize, "DIRECT_BUFFERS", 2)
    opened = []
    real = _serialize._DirectWriter.__init__

    def init(self, path: str) -> None:
        real(self, path)
        opened.append(os.path.basename(path))

    monkeypatch.setattr(_serialize._DirectWriter, "__init__", init)
    path = str(tmp_path / "m.onnx")
    program.save(path, external_data=True, external_data_max_shard_bytes=shard)
    data = sorted(f for f in os.listdir(tmp_path) if f.endswith(".data"))
    assert sorted(opened) == data
    for name in data:
        assert (tmp_path / name).read_bytes() == (tmp_path / "buffered" / name).read_bytes()
    assert verify_external_data(path) == []
    np.testing.assert_allclose(_ort_logits(path, x), model(x).detach().numpy(), atol=1e-5)


def test_direct_io_refused_alignment_falls_back_to_buffered(tmp_path, monkeypatch) -> None:
    # A file system that opens with O_DIRECT but refuses the alignment (EINVAL on write): the
    # rest of the file is written buffered, and the file is whole.
    if not _direct_io_supported(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    real_pwrite = os.pwrite
    refused = []

    def pwrite(fd: int, data, offset: int) -> int:
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(offset)
            raise OSError(22, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    model, x, program = _mlp_program()
    path = str(tmp_path / "m.onnx")
    program.save(path, external_data=True)
    assert refused == [0]
    assert verify_external_data(path) == []
    np.testing.assert_allclose(_ort_logits(path, x), model(x).detach().numpy(), atol=1e-5)
