"""`onnxport export --model DIR OUT --target onnxruntime --quantize int4|int8`.

The folder's graph is run here in ONNX Runtime and compared with eager PyTorch, independently
of the CLI's own validation: against the eager model carrying the RTN-dequantized weights
within e_q + 1e-4, and against the float model within 2 e_q + 1e-4, with e_q the largest
change RTN itself makes to eager's logits on the same inputs (docs/cli.md, "Quantized
export": accuracy level 4 quantizes activations to int8, so the graph is not the float
computation; its own error must stay below the weights' rounding). A graph with wrong
scales, layout or zero points misses both by far more than e_q.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from tests.cli_tasks.conftest import run_cli

pytestmark = pytest.mark.filterwarnings("ignore")
NEW_TOKENS = 8


def _ops(path: Path) -> collections.Counter[str]:
    model = onnx.load(str(path), load_external_data=False)
    return collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}"
                               for n in model.graph.node)


def _float_matrices(folder: Path) -> list[str]:
    """The float 2-D tensors of the file with at least 512 elements (the smallest Linear of
    the tiny Llama is 16 x 32; block scales are [N, K / 32]): the float weights left."""
    proto = onnx.load(str(folder / "model.onnx"))
    tensors = [*proto.graph.initializer,
               *(n.attribute[0].t for n in proto.graph.node if n.op_type == "Constant")]
    return [t.name or "(constant)" for t in tensors if t.data_type == onnx.TensorProto.FLOAT
            and len(t.dims) == 2 and t.dims[0] * t.dims[1] >= 512]


def _eager(checkpoint: Path) -> Any:
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint)).eval()


def _rtn_copy(model: Any, bits: int, block: int = 32) -> Any:
    """`model` with every Linear's weight (decoder and LM head) RTN-dequantized."""
    import copy

    from onnxport.quantize import dequantize_blocks, quantize_blocks

    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, torch.nn.Linear):
            w = module.weight.detach().T.numpy()
            q, s, z = quantize_blocks(w, bits=bits, block_size=block)
            module.weight = torch.nn.Parameter(
                torch.from_numpy(dequantize_blocks(q, s, z, block).T.copy()))
    return twin


def _session_logits(path: Path, config: Any, ids: torch.Tensor) -> np.ndarray:
    """The prompt's logits from the exported decoder (empty past)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    b, s = ids.shape
    kv = config.num_key_value_heads
    head = config.hidden_size // config.num_attention_heads
    feeds: dict[str, np.ndarray] = {"input_ids": ids.numpy(),
                                    "attention_mask": np.ones((b, s), np.int64),
                                    "position_ids": np.tile(np.arange(s), (b, 1))}
    for i in range(config.num_hidden_layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = np.zeros((b, kv, 0, head), np.float32)
    names = {i.name for i in session.get_inputs()}
    return session.run(["logits"], {k: v for k, v in feeds.items() if k in names})[0]


def _greedy(path: Path, config: Any, prompt: torch.Tensor, n: int) -> np.ndarray:
    """Greedy decoding with the graph's cache fed back, as a client does."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    b, s = prompt.shape
    kv = config.num_key_value_heads
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    past = {f"past_key_values.{i}.{k}": np.zeros((b, kv, 0, head), np.float32)
            for i in range(config.num_hidden_layers) for k in ("key", "value")}
    tokens = prompt.numpy()
    step = tokens
    for _ in range(n):
        total = tokens.shape[1]
        feeds = {"input_ids": step, "attention_mask": np.ones((b, total), np.int64),
                 "position_ids": np.tile(np.arange(total - step.shape[1], total), (b, 1)),
                 **past}
        got = dict(zip(outputs, session.run(None, {k: v for k, v in feeds.items()
                                                   if k in names})))
        step = got["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        tokens = np.concatenate([tokens, step], 1)
        past = {k: got[k.replace("past_key_values", "present")] for k in past}
    return tokens


@pytest.fixture(scope="module")
def llama_int4(checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quantize") / "llama-int4"
    proc = run_cli("export", "--model", str(checkpoints("llama")), str(out),
                   "--target", "onnxruntime", "--quantize", "int4")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "vs eager RTN-int4" in proc.stdout and "vs eager float" in proc.stdout
    return out


def test_int4_onnxruntime_folder(llama_int4: Path, checkpoints: Any) -> None:
    model = _eager(checkpoints("llama"))
    config = model.config
    ops = _ops(llama_int4 / "model.onnx")
    # every Linear and the LM head (Q/K/V, gate/up may share one MatMulNBits)
    assert ops["com.microsoft.MatMulNBits"] >= 4 * config.num_hidden_layers + 1, ops
    assert ops["com.microsoft.GroupQueryAttention"] == config.num_hidden_layers, ops
    assert ops["com.microsoft.SkipSimplifiedLayerNormalization"] >= 1, ops
    assert ops["MatMul"] == 0 and ops["DequantizeLinear"] == 0 and ops["Gemm"] == 0, ops
    proto = onnx.load(str(llama_int4 / "model.onnx"))
    assert {o.domain: o.version for o in proto.opset_import}[""] == 21
    assert _float_matrices(llama_int4) == ["model.embed_tokens.weight"]
    assert "position_ids" not in {i.name for i in proto.graph.input}  # rotary inside GQA
    torch.manual_seed(7)
    ids = torch.randint(3, 99, (2, 9))
    got = _session_logits(llama_int4 / "model.onnx", config, ids)
    with torch.no_grad():
        float_logits = model(ids).logits.numpy()
        rtn_logits = _rtn_copy(model, 4)(ids).logits.numpy()
    e_q = np.abs(rtn_logits - float_logits).max()
    assert e_q > 1e-3  # RTN int4 really changes the model
    assert np.abs(got - rtn_logits).max() <= e_q + 1e-4
    assert np.abs(got - float_logits).max() <= 2 * e_q + 1e-4
    genai = json.loads((llama_int4 / "genai_config.json").read_text())
    # the GQA graph takes genai's shared max-length KV buffer (the builder's setting)
    assert genai["search"]["past_present_share_buffer"] is True


def test_int4_folder_in_clients(llama_int4: Path, checkpoints: Any, run_client: Any) -> None:
    """onnxruntime-genai and optimum's ORTModelForCausalLM load the int4 folder and generate
    the tokens greedy decoding with the graph gives here."""
    model = _eager(checkpoints("llama"))
    torch.manual_seed(8)
    prompt = torch.randint(3, 99, (2, 6))
    want = _greedy(llama_int4 / "model.onnx", model.config, prompt, NEW_TOKENS)
    inputs = {"input_ids": prompt.numpy(), "attention_mask": np.ones((2, 6), np.int64)}
    genai = run_client("genai", llama_int4, "text-generation-with-past", inputs, NEW_TOKENS)
    np.testing.assert_array_equal(genai["tokens"], want)
    got = run_client("optimum", llama_int4, "text-generation-with-past", inputs, NEW_TOKENS)
    assert str(got["class"]) == "ORTModelForCausalLM"
    np.testing.assert_array_equal(got["tokens"], want)


def test_int4_accuracy_level_0_is_exact(checkpoints: Any, tmp_path: Path) -> None:
    """--accuracy-level 0: MatMulNBits keeps float activations, so the graph is the eager
    model with the RTN weights up to float32 summation order (1e-4)."""
    out = tmp_path / "llama-int4-acc0"
    proc = run_cli("export", "--model", str(checkpoints("llama")), str(out), "--target",
                   "onnxruntime", "--quantize", "int4", "--accuracy-level", "0")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    proto = onnx.load(str(out / "model.onnx"), load_external_data=False)
    levels = {a.i for n in proto.graph.node if n.op_type == "MatMulNBits"
              for a in n.attribute if a.name == "accuracy_level"}
    assert levels <= {0} and _ops(out / "model.onnx")["com.microsoft.MatMulNBits"] >= 9
    model = _eager(checkpoints("llama"))
    torch.manual_seed(11)
    ids = torch.randint(3, 99, (2, 9))
    got = _session_logits(out / "model.onnx", model.config, ids)
    with torch.no_grad():
        want = _rtn_copy(model, 4)(ids).logits.numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("target", ["onnx", "onnxruntime"])
def test_int8(target: str, checkpoints: Any, tmp_path: Path) -> None:
    out = tmp_path / f"llama-int8-{target}"
    proc = run_cli("export", "--model", str(checkpoints("llama")), str(out), "--target",
                   target, "--quantize", "int8")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    model = _eager(checkpoints("llama"))
    ops = _ops(out / "model.onnx")
    assert ops["DequantizeLinear"] + ops["com.microsoft.MatMulNBits"] >= 4 * 2 + 1, ops
    assert _float_matrices(out) == ["model.embed_tokens.weight"]
    if target == "onnx":
        assert not any(op.startswith("com.microsoft") for op in ops), ops
    torch.manual_seed(9)
    ids = torch.randint(3, 99, (3, 7))
    got = _session_logits(out / "model.onnx", model.config, ids)
    with torch.no_grad():
        float_logits = model(ids).logits.numpy()
        rtn_logits = _rtn_copy(model, 8)(ids).logits.numpy()
    e_q = np.abs(rtn_logits - float_logits).max()
    assert 0 < e_q < 2e-2  # int8: far smaller than int4's
    assert np.abs(got - rtn_logits).max() <= e_q + 1e-4
    assert np.abs(got - float_logits).max() <= 2 * e_q + 1e-4


def test_mixtral_onnxruntime_target(checkpoints: Any, tmp_path: Path) -> None:
    """The CLI's ORT target reaches the fused MoE node; greedy tokens equal eager's."""
    out = tmp_path / "mixtral-ort"
    proc = run_cli("export", "--model", str(checkpoints("mixtral")), str(out),
                   "--target", "onnxruntime")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    model = _eager(checkpoints("mixtral"))
    ops = _ops(out / "model.onnx")
    assert ops["com.microsoft.MoE"] == model.config.num_hidden_layers, ops
    assert ops["com.microsoft.GroupQueryAttention"] == model.config.num_hidden_layers, ops
    torch.manual_seed(10)
    prompt = torch.randint(3, 99, (2, 5))
    with torch.no_grad():
        want = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              num_beams=1).numpy()
    np.testing.assert_array_equal(_greedy(out / "model.onnx", model.config, prompt,
                                          NEW_TOKENS), want)


@pytest.mark.parametrize("args,message", [
    (["--quantize", "int4", "--opset", "20"], "opset 21"),
    (["--accuracy-level", "0"], "target='onnxruntime'"),
    (["--quantize", "int4", "--block-size", "0"], "per-channel"),
    (["--quantize", "int8", "--stream-weights"], "--stream-weights"),
])
def test_option_errors(args: list[str], message: str, checkpoints: Any, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    """Usage errors (exit 2) before any export; in process: the command's own main."""
    from onnxport.tasks.cli import main

    status = main(["export", "--model", str(checkpoints("llama")), str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    assert status == 2, err
    assert message in err, err
    assert not (tmp_path / "out").exists()


def test_ort_target_gets_the_context_length() -> None:
    """The checkpoint road hands the config's max_position_embeddings to the ORT target (GQA's
    cos/sin caches become constant tables); an explicit max_positions and the default target
    are kept."""
    from types import SimpleNamespace

    from onnxport.options import OnnxRuntimeTarget
    from onnxport.tasks.export import _with_context_length

    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=4096))
    got = _with_context_length("onnxruntime", model)
    assert isinstance(got, OnnxRuntimeTarget) and got.max_positions == 4096
    level0 = _with_context_length(OnnxRuntimeTarget(int4_accuracy_level=0), model)
    assert level0.int4_accuracy_level == 0 and level0.max_positions == 4096
    explicit = OnnxRuntimeTarget(max_positions=64)
    assert _with_context_length(explicit, model) is explicit
    assert _with_context_length("onnx", model) == "onnx"


def test_ort_target_constant_rotary_tables(tmp_path: Path) -> None:
    """A head size GQA rotates itself (a multiple of 16): the exported decoder holds its cos/sin
    caches as constant tables (no Cos/Sin/Range left) and still validates against eager."""
    import transformers

    from onnxport.tasks.export import export_checkpoint

    config = transformers.LlamaConfig(vocab_size=100, hidden_size=128, intermediate_size=256,
                                      num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=256)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(tmp_path / "ck")
    result = export_checkpoint(tmp_path / "ck", tmp_path / "out", target="onnxruntime")
    assert result.rows and all(row.ok for row in result.rows)
    proto = onnx.load(str(tmp_path / "out" / "model.onnx"))
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert ops["GroupQueryAttention"] == 2 and ops["Cos"] == ops["Sin"] == ops["Range"] == 0, ops
