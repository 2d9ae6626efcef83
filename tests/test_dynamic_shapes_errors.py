"""dynamic_shapes that torch.export cannot honour: which dim, why, what to do.

When torch.export suggests fixes, they are applied and the export retried once (as torch.onnx
does); the warning says which dim, why, and the spec that worked. Without a usable fix the
export fails with a CaptureError that says the same.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import onnxport


class _FixedBroadcast(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.ones(6, 4)  # dim 0 must be 6


class _Add(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class _Branch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] > 4:
            return x * 2
        return x


def _capture_error(model: torch.nn.Module, args: tuple,
                   dynamic_shapes: object) -> onnxport.CaptureError:
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(model, args, dynamic_shapes=dynamic_shapes)
    return info.value


def _refined(model: torch.nn.Module, args: tuple, dynamic_shapes: object,
             *args_seen: torch.Tensor) -> str:
    """Export with a spec torch.export fixes; return the warning, check the program runs."""
    with pytest.warns(UserWarning, match="suggested fixes") as record:
        program = onnxport.export(model, args, dynamic_shapes=dynamic_shapes)
    for inputs in (args, args_seen):
        if inputs:
            torch.testing.assert_close(program(*inputs)[0], model(*inputs))
    return "\n".join(str(w.message) for w in record if "suggested fixes" in str(w.message))


def test_specialized_named_dim() -> None:
    message = _refined(_FixedBroadcast(), (torch.randn(6, 4),), {"x": {0: Dim("batch")}})
    assert "input 'x' dim 0 (Dim 'batch')" in message
    assert "only works when it is 6" in message
    assert "Dim.STATIC" in message
    assert "batch = 6" in message  # torch's suggested fix is kept
    assert "dynamic_shapes={'x': {0: 6}}" in message  # the spec that worked, to paste


def test_specialization_without_a_fix_is_a_capture_error() -> None:
    error = _capture_error(_FixedBroadcast(), (torch.randn(6, 4),), {"x": {0: Dim.DYNAMIC}})
    assert "input 'x' dim 0 was marked dynamic" in str(error)
    # The original torch error stays the cause.
    assert error.__cause__ is error.attempts[0].error


def test_specialized_unnamed_dim() -> None:
    error = _capture_error(_FixedBroadcast(), (torch.randn(6, 4),), {"x": {0: Dim.DYNAMIC}})
    assert "input 'x' dim 0 was marked dynamic" in str(error)


def test_specialized_positional_spec() -> None:
    message = _refined(_FixedBroadcast(), (torch.randn(6, 4),), ({0: Dim("batch")},))
    assert "positional input 0 dim 0 (Dim 'batch')" in message
    assert "dynamic_shapes=({0: 6},)" in message


def test_dims_that_must_be_equal() -> None:
    message = _refined(_Add(), (torch.randn(3, 4), torch.randn(3, 4)),
                       {"x": {0: Dim("a")}, "y": {0: Dim("b")}},
                       torch.randn(5, 4), torch.randn(5, 4))
    assert "input 'y' dim 0 (Dim 'b') must always equal input 'x' dim 0 (Dim 'a')" in message
    assert "same Dim" in message
    assert "dynamic_shapes={'x': {0: Dim('a')}, 'y': {0: Dim('a')}}" in message


def test_range_the_model_cannot_take() -> None:
    message = _refined(_Branch(), (torch.randn(3, 8),), {"x": {1: Dim("len")}},
                       torch.randn(3, 11))
    assert "input 'x' dim 1 (Dim 'len'): the model only works when 5 <= len" in message
    assert "Dim('len', min=5)" in message


def test_other_capture_errors_keep_their_message() -> None:
    from onnxport.capture.dynamo import explain_constraint_violation

    assert explain_constraint_violation(RuntimeError("data-dependent branch"), None) == ""
