"""ONNXProgram: saving (all initializer modes, external data, file objects), weights, sessions.

Uses the documentation's MLP (Linear + sigmoid only) so these tests depend on no op family
beyond linalg and elementwise; the tests of the module a program remembers (for
apply_weights after a fake-mode export) use a tiny transformers Llama.
"""

from __future__ import annotations

import glob
import io
import os

import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import onnxport
from onnxport.examples import MLPModel

WEIGHT_NAMES = {f"fc{i}.{kind}" for i in range(4) for kind in ("weight", "bias")}


@torch.library.custom_op("onnxport_progtest::mystery", mutates_args=())
def _mystery(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy().copy())  # numpy: a body no trace can inline


@_mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _Unsupported(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onnxport_progtest.mystery(self.fc(x))


@pytest.fixture
def mlp() -> tuple[nn.Module, torch.Tensor]:
    return MLPModel().eval(), torch.rand(97, 8)


@pytest.fixture
def program(mlp: tuple[nn.Module, torch.Tensor]) -> onnxport.ONNXProgram:
    model, x = mlp
    return onnxport.export(model, (x,))


def _eager(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def _run_file(path: str, feed: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outputs = session.run(None, {k: v.numpy() for k, v in feed.items()})
    return [torch.from_numpy(o) for o in outputs]


# -- save / load -------------------------------------------------------------------------------

def test_save_load_roundtrip(tmp_path, mlp, program) -> None:
    model, x = mlp
    path = tmp_path / "mlp.onnx"
    program.save(path)
    assert path.exists()
    assert not (tmp_path / "mlp.onnx.data").exists()
    loaded = onnx.load(str(path))
    onnx.checker.check_model(loaded, full_check=True)
    assert [i.name for i in loaded.graph.input] == ["tensor_x"]
    assert {i.name for i in loaded.graph.initializer} == WEIGHT_NAMES
    # Nothing but the model is left in the directory (no staging leftovers).
    assert sorted(os.listdir(tmp_path)) == ["mlp.onnx"]
    (actual,) = _run_file(str(path), {"tensor_x": x})
    torch.testing.assert_close(actual, _eager(model, x))


def test_save_accepts_str_path(tmp_path, mlp, program) -> None:
    path = os.path.join(tmp_path, "mlp.onnx")
    program.save(path)
    assert onnx.load(path).graph.node


class _WideMLP(nn.Module):
    """Weights above onnx-ir's 256-byte external-data threshold, and one below it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc0 = nn.Linear(32, 64)
        self.fc1 = nn.Linear(64, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(torch.sigmoid(self.fc0(x)))


def test_save_external_data(tmp_path) -> None:
    model, x = _WideMLP().eval(), torch.rand(5, 32)
    program = onnxport.export(model, (x,))
    path = tmp_path / "wide.onnx"
    program.save(path, external_data=True)
    data = tmp_path / "wide.onnx.data"
    assert data.exists()
    # The weights are in the .data file, not in the model; tensors of at most 256 bytes
    # (fc0.bias: 256 bytes, fc1.bias: 8) stay inline, as onnx-ir (and torch.onnx) do.
    proto = onnx.load(str(path), load_external_data=False)
    external = {}
    for init in proto.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in init.external_data}
            assert info["location"] == "wide.onnx.data"
            external[init.name] = int(info["length"])
    assert set(external) == {"fc0.weight", "fc1.weight"}
    assert external["fc0.weight"] == 64 * 32 * 4
    assert data.stat().st_size >= sum(external.values())
    assert path.stat().st_size < 64 * 32 * 4
    assert sorted(os.listdir(tmp_path)) == ["wide.onnx", "wide.onnx.data"]
    (actual,) = _run_file(str(path), {"x": x})
    torch.testing.assert_close(actual, _eager(model, x))
    # onnx.load follows the data file too.
    onnx.checker.check_model(str(path), full_check=True)


@pytest.mark.parametrize("include_initializers", [True, False])
@pytest.mark.parametrize("keep_initializers_as_inputs", [False, True])
def test_initializer_modes(tmp_path, mlp, program, include_initializers: bool,
                           keep_initializers_as_inputs: bool) -> None:
    model, x = mlp
    path = tmp_path / "mlp.onnx"
    program.save(path, include_initializers=include_initializers,
                 keep_initializers_as_inputs=keep_initializers_as_inputs)
    proto = onnx.load(str(path))
    inputs = [i.name for i in proto.graph.input]
    initializers = {i.name for i in proto.graph.initializer}
    assert inputs[0] == "tensor_x"
    assert initializers == (WEIGHT_NAMES if include_initializers else set())
    assert set(inputs[1:]) == (WEIGHT_NAMES if keep_initializers_as_inputs else set())
    # The in-memory model is unchanged by the save.
    assert [v.name for v in program.model.graph.inputs] == ["tensor_x"]
    assert set(program.model.graph.initializers) == WEIGHT_NAMES
    expected = _eager(model, x)
    if include_initializers:
        (actual,) = _run_file(str(path), {"tensor_x": x})
        torch.testing.assert_close(actual, expected)
    elif keep_initializers_as_inputs:
        # Weights supplied at inference time.
        feed = {"tensor_x": x, **{k: v.detach() for k, v in model.state_dict().items()}}
        (actual,) = _run_file(str(path), feed)
        torch.testing.assert_close(actual, expected)
    # The program itself still runs with its weights.
    torch.testing.assert_close(program(x)[0], expected)


def test_overridable_weights_when_kept_as_inputs(tmp_path, mlp, program) -> None:
    model, x = mlp
    path = tmp_path / "mlp.onnx"
    program.save(path, keep_initializers_as_inputs=True)
    override = {"fc3.bias": torch.full((2,), 100.0)}
    (actual,) = _run_file(str(path), {"tensor_x": x, **override})
    torch.testing.assert_close(actual, _eager(model, x) - model.fc3.bias.detach() + 100.0)


def test_external_data_to_file_object_is_a_type_error(program) -> None:
    buffer = io.BytesIO()
    with pytest.raises(TypeError):
        program.save(buffer, external_data=True)
    assert buffer.getvalue() == b""


def test_save_to_bytesio(mlp, program) -> None:
    model, x = mlp
    buffer = io.BytesIO()
    program.save(buffer)
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, {"tensor_x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(actual), _eager(model, x))


def test_export_with_f_writes_the_file(tmp_path, mlp) -> None:
    model, x = mlp
    path = tmp_path / "mlp.onnx"
    program = onnxport.export(model, (x,), path)
    assert program is not None and path.exists()
    (actual,) = _run_file(str(path), {"tensor_x": x})
    torch.testing.assert_close(actual, _eager(model, x))


def test_export_with_f_and_export_params_false(tmp_path, mlp) -> None:
    model, x = mlp
    path = tmp_path / "mlp.onnx"
    onnxport.export(model, (x,), path, export_params=False)
    assert not onnx.load(str(path)).graph.initializer


# -- weights and sessions ----------------------------------------------------------------------

def test_apply_weights_changes_outputs(mlp, program) -> None:
    model, x = mlp
    before = program(x)[0]
    torch.testing.assert_close(before, _eager(model, x))
    other = MLPModel().eval()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    program.apply_weights(other.state_dict())
    after = program(x)[0]
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, _eager(other, x))


def test_apply_weights_partial(mlp, program) -> None:
    model, x = mlp
    program.apply_weights({"fc3.bias": torch.tensor([10.0, -10.0])})
    expected = _eager(model, x) - model.fc3.bias.detach() + torch.tensor([10.0, -10.0])
    torch.testing.assert_close(program(x)[0], expected)


def test_apply_weights_rejects_wrong_shape(program) -> None:
    with pytest.raises(onnxport.OnnxExporterError, match="fc0.weight"):
        program.apply_weights({"fc0.weight": torch.zeros(3, 3)})


def test_initialize_inference_session_and_release(mlp, program) -> None:
    model, x = mlp
    program.initialize_inference_session()
    assert program._session is not None
    torch.testing.assert_close(program(x)[0], _eager(model, x))
    program.release()
    assert program._session is None
    # Calling again re-creates the session on demand.
    torch.testing.assert_close(program(x)[0], _eager(model, x))
    program.release()


def test_initialize_inference_session_custom_initializer(mlp, program) -> None:
    model, x = mlp
    seen: list[type] = []

    def initializer(model_bytes_or_path):  # type: ignore[no-untyped-def]
        seen.append(type(model_bytes_or_path))
        return ort.InferenceSession(model_bytes_or_path, providers=["CPUExecutionProvider"])

    program.initialize_inference_session(initializer)
    assert seen == [bytes]
    torch.testing.assert_close(program(x)[0], _eager(model, x))
    program.release()


def test_optimize_keeps_outputs(mlp) -> None:
    model, x = mlp
    program = onnxport.export(model, (x,), optimize=False)
    before = program(x)[0]
    program.optimize()
    onnx.checker.check_model(program.model_proto, full_check=True)
    after = program(x)[0]
    torch.testing.assert_close(after, before)
    torch.testing.assert_close(after, _eager(model, x))


def test_model_proto_is_valid(program) -> None:
    assert isinstance(program.model_proto, onnx.ModelProto)
    onnx.checker.check_model(program.model_proto, full_check=True)


# -- failures, reports, verification -----------------------------------------------------------

def test_failed_export_leaves_nothing_at_f(tmp_path) -> None:
    path = tmp_path / "broken.onnx"
    with pytest.raises(onnxport.UnsupportedOperatorError):
        onnxport.export(_Unsupported().eval(), (torch.rand(2, 8),), path)
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_failed_export_keeps_an_existing_file(tmp_path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"previous")
    with pytest.raises(onnxport.UnsupportedOperatorError):
        onnxport.export(_Unsupported().eval(), (torch.rand(2, 8),), path)
    assert path.read_bytes() == b"previous"


def test_report_on_success(tmp_path, mlp) -> None:
    model, x = mlp
    onnxport.export(model, (x,), report=True, artifacts_dir=tmp_path)
    reports = glob.glob(str(tmp_path / "*.md"))
    assert len(reports) == 1
    assert reports[0].endswith("_success.md")
    text = open(reports[0], encoding="utf-8").read()
    assert "MLPModel" in text
    assert "success" in text
    assert "| Gemm | 4 |" in text


def test_report_on_failure(tmp_path) -> None:
    with pytest.raises(onnxport.UnsupportedOperatorError):
        onnxport.export(_Unsupported().eval(), (torch.rand(2, 8),), report=True,
                        artifacts_dir=tmp_path)
    reports = glob.glob(str(tmp_path / "*.md"))
    assert len(reports) == 1
    assert reports[0].endswith("_failure.md")
    text = open(reports[0], encoding="utf-8").read()
    assert "FAILED" in text
    assert "UnsupportedOperatorError" in text
    assert "onnxport_progtest.mystery.default" in text


def test_verify_passes_for_a_good_model(tmp_path, mlp) -> None:
    model, x = mlp
    program = onnxport.export(model, (x,), verify=True, report=True, artifacts_dir=tmp_path)
    assert program is not None
    (report,) = glob.glob(str(tmp_path / "*.md"))
    text = open(report, encoding="utf-8").read()
    assert "Verification against eager PyTorch" in text
    assert "MISMATCH" not in text


def test_streamed_save_matches_protobuf_serialization(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The streaming writer's file parses to the same model as onnx-ir's own serialization."""
    import onnx_ir as ir

    class Mixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 16)
            self.register_buffer("steps", torch.arange(16))
            self.register_buffer("scale_bf16", torch.full((16,), 0.5, dtype=torch.bfloat16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.scale_bf16.float() + self.steps

    model = Mixed().eval()
    program = onnxport.export(model, (torch.randn(2, 8),))
    assert program is not None
    path = tmp_path / "streamed.onnx"
    program.save(str(path))
    ours = onnx.load(str(path))
    reference = ir.to_proto(program.model)
    assert {i.name for i in ours.graph.initializer} == {i.name for i in reference.graph.initializer}
    for name in ("lin.weight", "steps", "scale_bf16"):
        mine = next(i for i in ours.graph.initializer if i.name == name)
        theirs = next(i for i in reference.graph.initializer if i.name == name)
        assert onnx.numpy_helper.to_array(mine).tolist() == onnx.numpy_helper.to_array(theirs).tolist()
    onnx.checker.check_model(str(path), full_check=True)
    x = torch.randn(2, 8)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    torch.testing.assert_close(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]),
                               model(x).detach())


def test_call_with_runtime_options_and_fake_weights() -> None:
    import onnxruntime

    with onnxport.enable_fake_mode():
        fake = nn.Linear(3, 2)
        x_fake = torch.randn(4, 3)
    program = onnxport.export(fake, (x_fake,))
    real = nn.Linear(3, 2)
    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = 1
    options = onnxport.ONNXRuntimeOptions(session_options=[session_options],
                                          execution_providers=["CPUExecutionProvider"])
    x = torch.randn(4, 3)
    (out,) = program(x, model_with_state_dict=real, options=options)
    torch.testing.assert_close(out, real(x).detach())
    assert program.runtime_options is options
    program.release()
    assert program._session is None


# -- the exported module, remembered weakly (issue 26, item B) -----------------------------------

def _llama_config(**kw):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=128, **kw)


def _fake_llama(config):  # type: ignore[no-untyped-def]
    from transformers import LlamaForCausalLM

    with onnxport.enable_fake_mode():
        fake = LlamaForCausalLM(config)
        ids = torch.randint(0, config.vocab_size, (1, 8))
    return fake, onnxport.export(fake, (ids,), kwargs={"use_cache": False})


@pytest.fixture(scope="module")
def llama_checkpoint(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A real tiny Llama (random weights) and its safetensors folder."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    real = transformers.LlamaForCausalLM(_llama_config()).eval()
    folder = tmp_path_factory.mktemp("llama")
    real.save_pretrained(folder, safe_serialization=True)
    return real, str(folder)


@pytest.mark.parametrize("source", ["folder", "state_dict"])
def test_apply_weights_uses_the_exported_module(llama_checkpoint, source) -> None:
    """Without module=, the rotary inv_freq (a non-persistent buffer) is computed from the
    module the program was exported from."""
    real, folder = llama_checkpoint
    fake, program = _fake_llama(real.config)
    assert program._module() is fake
    weights = folder if source == "folder" else real.state_dict()
    report = program.apply_weights(weights)
    assert report.materialized == ["model.rotary_emb.inv_freq"]
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        expected = real(ids, use_cache=False).logits
    torch.testing.assert_close(program(ids)[0], expected, atol=1e-4, rtol=1e-4)


def test_apply_weights_reads_tied_weights_through_the_exported_module(tmp_path) -> None:
    LlamaForCausalLM = pytest.importorskip("transformers").LlamaForCausalLM

    torch.manual_seed(1)
    real = LlamaForCausalLM(_llama_config(tie_word_embeddings=True)).eval()
    real.save_pretrained(tmp_path, safe_serialization=True)  # lm_head.weight not saved
    fake, program = _fake_llama(real.config)
    assert "lm_head.weight" in program.model.graph.initializers
    report = program.apply_weights(str(tmp_path))
    assert report.aliased == {"lm_head.weight": "model.embed_tokens.weight"}
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        expected = real(ids, use_cache=False).logits
    torch.testing.assert_close(program(ids)[0], expected, atol=1e-4, rtol=1e-4)
    assert program._module() is fake  # alive until here: the program holds it weakly


def test_explicit_module_wins_over_the_exported_one(llama_checkpoint) -> None:
    from transformers import LlamaForCausalLM

    real, folder = llama_checkpoint
    fake, program = _fake_llama(real.config)
    other_config = _llama_config(rope_theta=500.0)
    with onnxport.enable_fake_mode():
        other = LlamaForCausalLM(other_config)
    program.apply_weights(folder, module=other)
    inv_freq = program.model.graph.initializers["model.rotary_emb.inv_freq"].const_value.numpy()
    expected = LlamaForCausalLM(other_config).model.rotary_emb.inv_freq
    torch.testing.assert_close(torch.from_numpy(inv_freq), expected)
    assert not torch.allclose(expected, real.model.rotary_emb.inv_freq)
    assert program._module() is fake


def test_dead_module_gives_the_module_error(llama_checkpoint) -> None:
    """The program holds its module weakly: once the model is gone, apply_weights needs
    module= again, and says so."""
    import gc

    from onnxport.weights import WeightsMismatchError

    real, folder = llama_checkpoint
    fake, program = _fake_llama(real.config)
    ref = program._module
    del fake
    gc.collect()
    assert ref() is None
    with pytest.raises(WeightsMismatchError, match="pass module=") as info:
        program.apply_weights(folder)
    assert info.value.missing == ["model.rotary_emb.inv_freq"]
    assert all(v.const_value is None for v in program.model.graph.initializers.values())


def test_functions_and_exported_programs_have_no_module() -> None:
    x = torch.randn(2, 3)
    assert onnxport.export(lambda t: t * 2, (x,))._module is None
    exported = torch.export.export(nn.Linear(3, 2), (x,))
    assert onnxport.export(exported, (x,))._module is None
