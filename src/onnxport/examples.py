"""Built-in example models for the CLI (`onnxport export --example NAME`) and the docs.

Each factory returns (model, example args) ready to export.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class MLPModel(nn.Module):
    """The MLP of the torch.onnx documentation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc0 = nn.Linear(8, 8, bias=True)
        self.fc1 = nn.Linear(8, 4, bias=True)
        self.fc2 = nn.Linear(4, 2, bias=True)
        self.fc3 = nn.Linear(2, 2, bias=True)

    def forward(self, tensor_x: torch.Tensor) -> torch.Tensor:
        tensor_x = torch.sigmoid(self.fc0(tensor_x))
        tensor_x = torch.sigmoid(self.fc1(tensor_x))
        tensor_x = torch.sigmoid(self.fc2(tensor_x))
        return self.fc3(tensor_x)


class SmallCNN(nn.Module):
    """A small image classifier: conv, batch norm, pooling, residual add, linear head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(16, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stem(image)
        x = torch.relu(x + self.block(x))
        x = self.pool(x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.head(x)


def mlp() -> tuple[nn.Module, tuple[Any, ...]]:
    """The documentation's MLP on a (97, 8) input."""
    return MLPModel().eval(), (torch.rand(97, 8),)


def cnn() -> tuple[nn.Module, tuple[Any, ...]]:
    """A small CNN on a (2, 3, 32, 32) image batch."""
    return SmallCNN().eval(), (torch.rand(2, 3, 32, 32),)


def transformer() -> tuple[nn.Module, tuple[Any, ...]]:
    """A two-layer nn.TransformerEncoder on a (2, 16, 64) batch."""
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True,
                                       dropout=0.1)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval(), \
        (torch.rand(2, 16, 64),)


EXAMPLES: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...]]]] = {
    "mlp": mlp,
    "cnn": cnn,
    "transformer": transformer,
}
