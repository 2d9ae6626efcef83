"""A `torch.library.custom_op` without a translation is inlined from its Python body.

torch.export keeps a custom op as one opaque node; onnxport traces the op's own body in its
place when it has no translation (the report lists it under "Decomposed"). A body torch.export
cannot trace (data-dependent control flow, numpy) keeps the UnsupportedOperatorError, which
names the op, the module, the source line, and says why it was not inlined.
"""

from __future__ import annotations

import pytest
import torch

import onnxport


@torch.library.custom_op("onnxport_inline::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.nn.functional.gelu(x) * scale + x.mean(dim=-1, keepdim=True)


@scaled_gelu.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("onnxport_inline::repeat_double", mutates_args=())
def repeat_double(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for _ in range(int(n.sum().item())):  # data-dependent: no trace can inline it
        out = out * 2
    return out


@repeat_double.register_fake
def _(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Traceable(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_gelu(x, 0.5) + 1


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return repeat_double(x, n)  # REPEAT-LINE


def test_traceable_body_is_inlined() -> None:
    x = torch.randn(3, 4)
    program = onnxport.export(Traceable(), (x,), dynamic_shapes=({0: "batch"},),
                              dynamo=True)
    assert program is not None
    ops = [n.op_type for n in program.model.graph]
    assert "Gelu" in ops and "ReduceMean" in ops
    for batch in (3, 5):
        y = torch.randn(batch, 4)
        torch.testing.assert_close(torch.as_tensor(program(y)[0]), Traceable()(y))


def test_data_dependent_body_keeps_the_typed_error() -> None:
    with pytest.raises(onnxport.UnsupportedOperatorError) as info:
        onnxport.export(DataDependent(), (torch.randn(3, 4), torch.tensor([2])), dynamo=True)
    message = str(info.value)
    assert "onnxport_inline.repeat_double.default" in message
    assert "REPEAT-LINE" in message or "test_custom_op_inlining.py" in message
    assert "its Python body was not inlined" in message
    assert "fix: register a translation" in message
