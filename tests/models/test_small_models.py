"""Small end-to-end models: the documentation examples verbatim, a CNN, transformer blocks.

Each model is exported, checked with the full ONNX checker, run in ONNX Runtime and compared
with eager PyTorch (tests.helpers.export_and_compare), then a few structural facts are
checked: op counts, names of inputs, initializers and nodes.
"""

from __future__ import annotations

import collections
import math

import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnxport
from onnxport.examples import SmallCNN
from tests.helpers import check_model, count, export_and_compare, op_types


def _node_names(program: onnxport.ONNXProgram) -> list[str]:
    return [n.name for n in program.model.graph.all_nodes()]


def _assert_weights_keep_state_dict_names(program: onnxport.ONNXProgram, model: nn.Module) -> None:
    """Every initializer that is a parameter or buffer carries its state_dict key."""
    state = model.state_dict()
    initializers = program.model.graph.initializers
    params = {name for name, _ in model.named_parameters()}
    # Every parameter is used by these models, so every one must be an initializer.
    assert params <= set(initializers), sorted(params - set(initializers))
    for name, value in initializers.items():
        if name in state:
            assert tuple(value.shape) == tuple(state[name].shape), name


# -- the torch.onnx documentation examples, verbatim with onnxport for torch.onnx ---------------

def test_doc_mlp_example(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)

    import torch
    import torch.nn as nn

    class MLPModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc0 = nn.Linear(8, 8, bias=True)
            self.fc1 = nn.Linear(8, 4, bias=True)
            self.fc2 = nn.Linear(4, 2, bias=True)
            self.fc3 = nn.Linear(2, 2, bias=True)

        def forward(self, tensor_x: torch.Tensor):
            tensor_x = self.fc0(tensor_x)
            tensor_x = torch.sigmoid(tensor_x)
            tensor_x = self.fc1(tensor_x)
            tensor_x = torch.sigmoid(tensor_x)
            tensor_x = self.fc2(tensor_x)
            tensor_x = torch.sigmoid(tensor_x)
            output = self.fc3(tensor_x)
            return output

    model = MLPModel()
    tensor_x = torch.rand((97, 8), dtype=torch.float32)
    onnx_program = onnxport.export(model, (tensor_x,), dynamo=True)

    onnx_program.save("mlp.onnx")
    via_dynamo_export = onnxport.dynamo_export(model, tensor_x)

    assert isinstance(onnx_program, onnxport.ONNXProgram)
    assert isinstance(onnx_program.model_proto, onnx.ModelProto)
    onnx.checker.check_model(onnx_program.model_proto, full_check=True)
    assert (tmp_path / "mlp.onnx").exists()
    onnx.checker.check_model(str(tmp_path / "mlp.onnx"), full_check=True)

    with torch.no_grad():
        expected = model(tensor_x)
    torch.testing.assert_close(onnx_program(tensor_x)[0], expected)
    torch.testing.assert_close(via_dynamo_export(tensor_x)[0], expected)
    session = ort.InferenceSession(str(tmp_path / "mlp.onnx"), providers=["CPUExecutionProvider"])
    (from_file,) = session.run(None, {"tensor_x": tensor_x.numpy()})
    torch.testing.assert_close(torch.from_numpy(from_file), expected)

    # Structure: four Gemm (one per Linear), three Sigmoid, nothing else; no Cast.
    counts = collections.Counter(op_types(onnx_program))
    assert counts == {"Gemm": 4, "Sigmoid": 3}
    assert count(onnx_program, "Cast") == 0
    assert [v.name for v in onnx_program.model.graph.inputs] == ["tensor_x"]
    assert set(onnx_program.model.graph.initializers) == set(model.state_dict())
    names = _node_names(onnx_program)
    for i in range(4):
        assert f"/fc{i}/Gemm" in names
    assert onnx_program.model.graph.opset_imports[""] == 20     # torch.onnx 2.13's default


def test_doc_conv2d_example(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)

    import torch

    class MyModel(torch.nn.Module):
        def __init__(self):
            super(MyModel, self).__init__()
            self.conv1 = torch.nn.Conv2d(1, 128, 5)

        def forward(self, x):
            return torch.relu(self.conv1(x))

    input_tensor = torch.rand((1, 1, 128, 128), dtype=torch.float32)

    model = MyModel()

    onnxport.export(
        model,                  # model to export
        (input_tensor,),        # inputs of the model,
        "my_model.onnx",        # filename of the ONNX model
        input_names=["input"],  # Rename inputs for the ONNX model
        dynamo=True             # True or False to select the exporter to use
    )

    path = tmp_path / "my_model.onnx"
    assert path.exists()
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["input"]
    assert {i.name for i in proto.graph.initializer} == {"conv1.weight", "conv1.bias"}
    assert collections.Counter(n.op_type for n in proto.graph.node) == {"Conv": 1, "Relu": 1}
    assert [n.name for n in proto.graph.node if n.op_type == "Conv"] == ["/conv1/Conv"]
    (out,) = proto.graph.output
    dims = [d.dim_value for d in out.type.tensor_type.shape.dim]
    assert dims == [1, 128, 124, 124]

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, {"input": input_tensor.numpy()})
    with torch.no_grad():
        expected = model(input_tensor)
    # Conv2d with 25-term dot products: float32 rounding differs by ~1e-6 between backends.
    torch.testing.assert_close(torch.from_numpy(actual), expected)

    # The same model through export_and_compare (in memory).
    program = export_and_compare(model, (input_tensor,), input_names=["input"])
    assert [v.name for v in program.model.graph.inputs] == ["input"]


# -- a small CNN -------------------------------------------------------------------------------

def test_small_cnn() -> None:
    model = SmallCNN().eval()
    # Non-trivial batch-norm statistics, so folding or dropping them would show.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    x = torch.rand(2, 3, 32, 32)
    program = export_and_compare(model, (x,))
    assert count(program, "Conv") == 3
    assert count(program, "MaxPool") == 1
    assert count(program, "Gemm") + count(program, "MatMul") == 1
    assert [v.name for v in program.model.graph.inputs] == ["image"]
    initializers = program.model.graph.initializers
    for name in ("stem.0.weight", "block.0.weight", "block.3.weight", "head.weight", "head.bias"):
        assert tuple(initializers[name].shape) == tuple(model.state_dict()[name].shape)
    names = _node_names(program)
    assert "/stem/0/Conv" in names
    assert "/block/0/Conv" in names and "/block/3/Conv" in names
    assert any(n.startswith("/head/") for n in names)


def test_small_cnn_batch_of_one() -> None:
    model = SmallCNN(num_classes=3).eval()
    export_and_compare(model, (torch.rand(1, 3, 16, 16),))


# -- transformer encoders ----------------------------------------------------------------------

def _encoder_layer(d_model: int = 64, nhead: int = 4, **kwargs) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(d_model=d_model, nhead=nhead, dim_feedforward=128,
                                      batch_first=True, **kwargs)


def test_transformer_encoder_layer() -> None:
    model = _encoder_layer().eval()
    x = torch.rand(2, 16, 64)
    program = export_and_compare(model, (x,), rtol=1e-4, atol=1e-5)
    assert count(program, "Dropout") == 0  # eval mode
    _assert_weights_keep_state_dict_names(program, model)
    assert "self_attn.in_proj_weight" in program.model.graph.initializers


def test_transformer_encoder_layer_gelu_norm_first() -> None:
    model = _encoder_layer(activation="gelu", norm_first=True).eval()
    export_and_compare(model, (torch.rand(3, 7, 64),), rtol=1e-4, atol=1e-5)


def test_transformer_encoder_with_padding_mask() -> None:
    model = nn.TransformerEncoder(_encoder_layer(), num_layers=2, enable_nested_tensor=False).eval()
    x = torch.rand(2, 10, 64)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[1, 6:] = True  # the second sequence is padded
    export_and_compare(model, (x,), {"src_key_padding_mask": mask}, rtol=1e-4, atol=1e-5)


def test_transformer_encoder() -> None:
    model = nn.TransformerEncoder(_encoder_layer(), num_layers=2, enable_nested_tensor=False).eval()
    x = torch.rand(2, 16, 64)
    program = export_and_compare(model, (x,), rtol=1e-4, atol=1e-5)
    _assert_weights_keep_state_dict_names(program, model)
    initializers = program.model.graph.initializers
    assert "layers.0.linear1.weight" in initializers and "layers.1.linear1.weight" in initializers
    names = _node_names(program)
    # A ModuleList is never called, so its items are named by their full path.
    assert any(n.startswith("/layers.0/self_attn/") for n in names)
    assert any(n.startswith("/layers.1/linear1/") for n in names)
    check_model(program)


# -- a decoder-style block with causal attention, written inline -------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, use_sdpa: bool) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.use_sdpa = use_sdpa

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
            att = att.masked_fill(causal, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class DecoderBlock(nn.Module):
    def __init__(self, d_model: int = 64, n_head: int = 4, use_sdpa: bool = True) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, use_sdpa)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int = 100, d_model: int = 64, n_layer: int = 2, max_len: int = 32,
                 use_sdpa: bool = True) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, 4, use_sdpa) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


@pytest.mark.parametrize("use_sdpa", [True, False], ids=["sdpa", "explicit-mask"])
def test_decoder_block_causal_attention(use_sdpa: bool) -> None:
    model = DecoderBlock(use_sdpa=use_sdpa).eval()
    x = torch.randn(2, 12, 64)
    program = export_and_compare(model, (x,), rtol=1e-4, atol=1e-5)
    _assert_weights_keep_state_dict_names(program, model)
    names = _node_names(program)
    assert any(n.startswith("/attn/qkv/") for n in names)
    assert any(n.startswith("/mlp/0/") for n in names)


def test_decoder_causality() -> None:
    """A later token cannot change the outputs at earlier positions (in ONNX Runtime too)."""
    model = DecoderBlock().eval()
    x = torch.randn(1, 8, 64)
    program = onnxport.export(model, (x,))
    y = x.clone()
    y[:, -1] += 5.0
    a, b = program(x)[0], program(y)[0]
    torch.testing.assert_close(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])


@pytest.mark.parametrize("use_sdpa", [True, False], ids=["sdpa", "explicit-mask"])
def test_tiny_decoder_lm(use_sdpa: bool) -> None:
    model = TinyDecoder(use_sdpa=use_sdpa).eval()
    idx = torch.randint(0, 100, (2, 16))
    program = export_and_compare(model, (idx,), rtol=1e-4, atol=1e-5)
    assert [v.name for v in program.model.graph.inputs] == ["idx"]
    assert program.model.graph.inputs[0].dtype == onnx.TensorProto.INT64
    _assert_weights_keep_state_dict_names(program, model)
    assert "blocks.1.attn.qkv.weight" in program.model.graph.initializers
