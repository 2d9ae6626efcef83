"""Tiny models for tests/verify, and the deliberately wrong translations they are exported with.

Each wrong translation computes another function than its op (sigmoid for tanh or silu), so
the value it produces differs from PyTorch's by about its own magnitude; every value before
it in graph order stays within float32 rounding.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

TOLERANCE = 1e-3
"""Absolute tolerance of "over tolerance" for one value in these tests: the models' values
are O(1) (random init), float32 rounding leaves them within 1e-5 of PyTorch's, and every
wrong translation below moves its value by more than 0.05."""


def first_over(infos: list[Any], tolerance: float = TOLERANCE) -> str | None:
    """The name of the first VerificationInfo over `tolerance`, or None."""
    return next((i.name for i in infos if i.max_abs_diff > tolerance), None)


# -- onnxport's wrong translations (written against `g`) ----------------------------------------

def sigmoid_for_tanh(g: Any, x: Any) -> Any:
    return g.op("Sigmoid", x)


def _module_path(g: Any) -> str:
    stack = g.fx_node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


def silu_wrong_in_layer_1(g: Any, x: Any) -> Any:
    """silu, right in every layer but layer 1, where it is sigmoid alone."""
    if ".layers.1." in _module_path(g) + ".":
        return g.op("Sigmoid", x)
    return g.op("Mul", x, g.op("Sigmoid", x))


# -- the same for torch.onnx (onnxscript) -------------------------------------------------------

def torch_onnx_sigmoid(x: Any) -> Any:
    from onnxscript import opset18 as op

    return op.Sigmoid(x)


# -- models -------------------------------------------------------------------------------------

class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(6, 16)
        self.act = torch.nn.Tanh()
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x))).relu()


class CNN(torch.nn.Module):
    """Two conv blocks; tanh first occurs in the second."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block1 = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1),
                                          torch.nn.BatchNorm2d(8), torch.nn.ReLU())
        self.block2 = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Tanh(),
                                          torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block2(self.block1(x)).flatten(1))


class Logits(torch.nn.Module):
    """A transformers model called with input_ids alone, returning its logits."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if isinstance(self.model, transformers.LlamaForCausalLM):
            return self.model(input_ids=input_ids, use_cache=False).logits
        return self.model(input_ids=input_ids).logits


def bert() -> torch.nn.Module:
    """2 layers, hidden 32; tanh first occurs in the pooler, after both layers."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=48,
                                     max_position_embeddings=64, num_labels=3,
                                     attn_implementation="eager")
    return Logits(transformers.BertForSequenceClassification(config)).eval()


def llama() -> torch.nn.Module:
    """2 layers, hidden 32, grouped-query attention."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=48, max_position_embeddings=64,
                                      attn_implementation="eager", use_cache=False)
    return Logits(transformers.LlamaForCausalLM(config)).eval()


def ids(batch: int, seq: int) -> torch.Tensor:
    torch.manual_seed(batch * 100 + seq)
    return torch.randint(0, 99, (batch, seq))
