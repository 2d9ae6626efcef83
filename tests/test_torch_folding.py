"""Input-independent float values are computed by torch at export (translate/torch_folding.py).

A sinusoidal timestep embedding computes its frequencies with `exp` from an `arange`, then
multiplies them by timesteps of ~1e6 before `sin` (diffusers' Flux and AuraFlow): one ulp of
difference between ORT's Exp and torch's moved their outputs by 2e-4. Computed by torch at
export time, the frequencies are eager's bits and the outputs match.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import torch

import onnxport


class _TimestepEmbedding(torch.nn.Module):
    def __init__(self, dim: int = 64, scale: float = 1000.0) -> None:
        super().__init__()
        self.dim, self.scale = dim, scale

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        exponent = -math.log(10000) * torch.arange(half, dtype=torch.float32) / half
        freqs = torch.exp(exponent)
        args = (t[:, None].float() * self.scale) * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def _ops(program: onnxport.ONNXProgram) -> list[str]:
    return [n.op_type for n in program.model.graph]


def test_frequencies_are_torch_bits_and_outputs_match_eager() -> None:
    model = _TimestepEmbedding()
    t = torch.tensor([999.0, 500.5, 1.0])
    program = onnxport.export(model, (t,), dynamic_shapes={"t": {0: "batch"}}, dynamo=True)
    assert program is not None
    assert "Exp" not in _ops(program) and "Range" not in _ops(program)
    for timesteps in (t, torch.tensor([998.0, 3.25, 0.0, 750.0, 999.0])):
        with torch.no_grad():
            expected = model(timesteps)
        actual = torch.as_tensor(np.asarray(program(timesteps)[0]))
        # sin/cos of arguments near 1e6: 1e-4 of difference if the frequencies differ by an ulp
        torch.testing.assert_close(actual, expected, rtol=0, atol=2e-6)


class _FromBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("log_scale", torch.linspace(-2, 2, 8))
        self.weight = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.exp(self.log_scale) + torch.exp(self.weight)


def test_parameters_and_buffers_are_not_folded() -> None:
    # The user may replace weights (apply_weights, fake mode): they stay initializers and the
    # graph computes from them.
    model = _FromBuffer()
    x = torch.randn(3, 8)
    program = onnxport.export(model, (x,), dynamo=True)
    assert program is not None
    assert _ops(program).count("Exp") == 2
    names = set(program.model.graph.initializers)
    assert {"log_scale", "weight"} <= names
    torch.testing.assert_close(torch.as_tensor(np.asarray(program(x)[0])), model(x).detach())


def test_random_values_are_not_folded() -> None:
    class Noise(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.exp(torch.rand(4))

    program = onnxport.export(Noise(), (torch.zeros(4),), dynamo=True)
    assert program is not None
    ops = _ops(program)
    assert "Exp" in ops and any(op.startswith("Random") for op in ops)


def test_large_tables_stay_computed() -> None:
    class Table(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.exp(torch.arange(300 * 300, dtype=torch.float32) / 1e5)

    program = onnxport.export(Table(), (torch.zeros(300 * 300),), dynamo=True)
    assert program is not None
    assert "Exp" in _ops(program)
    largest = max((v.const_value.size for v in program.model.graph.initializers.values()
                   if v.const_value is not None), default=0)
    assert largest < 300 * 300
    assert all(n.op_type != "Constant" or
               ir.convenience.get_const_tensor(n.outputs[0]) is None or
               ir.convenience.get_const_tensor(n.outputs[0]).size < 300 * 300
               for n in program.model.graph)
