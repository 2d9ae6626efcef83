"""Errors: each one says what failed, where in the user's code, and is an OnnxExporterError.

The custom operators below live in their own namespace (`onnxport_errtest`) so that no
translation, built-in or decomposition, can ever exist for them; their bodies go through
numpy, so onnxport cannot inline them either.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import onnxport
from onnxport import errors

THIS_FILE = os.path.basename(__file__)


@torch.library.custom_op("onnxport_errtest::scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() * 2)  # numpy: a body no trace can inline


@_scale.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("onnxport_errtest::shift", mutates_args=())
def _shift(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy() + 1)


@_shift.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _Scaler(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onnxport_errtest.scale(x)  # SCALE-LINE


class _Shifter(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onnxport_errtest.shift(x)  # SHIFT-LINE


class _TwoCustomOps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 4), _Scaler())
        self.decoder = nn.Sequential(nn.Linear(4, 4), _Shifter())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.sigmoid(self.encoder(x)))


class _OneCustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scaler = _Scaler()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scaler(self.fc(x))


class _DataDependentBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x + 1
        return x - 1


def _line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if marker in line and "def _line_of" not in line and "_line_of(" not in line:
                return number
    raise AssertionError(marker)


# -- UnsupportedOperatorError ------------------------------------------------------------------

def test_unsupported_lists_every_missing_op_at_once() -> None:
    with pytest.raises(onnxport.UnsupportedOperatorError) as info:
        onnxport.export(_TwoCustomOps().eval(), (torch.randn(2, 4),))
    error = info.value
    message = str(error)
    # Both operators are reported in one error, not one per export attempt.
    assert "onnxport_errtest.scale.default" in message
    assert "onnxport_errtest.shift.default" in message
    assert {m.target for m in error.missing} == {"onnxport_errtest.scale.default",
                                                 "onnxport_errtest.shift.default"}
    by_target = {m.target: m for m in error.missing}
    scale, shift = by_target["onnxport_errtest.scale.default"], by_target["onnxport_errtest.shift.default"]
    # The module path of each first use ...
    assert scale.module_path == "encoder.1"
    assert shift.module_path == "decoder.1"
    assert "'encoder.1'" in message and "'decoder.1'" in message
    # ... and the user's source line.
    assert f"{THIS_FILE}:{_line_of('# SCALE-LINE')}" in scale.source
    assert f"{THIS_FILE}:{_line_of('# SHIFT-LINE')}" in shift.source
    assert f"{THIS_FILE}:{_line_of('# SCALE-LINE')}" in message
    assert f"{THIS_FILE}:{_line_of('# SHIFT-LINE')}" in message
    assert "2 operators" in message
    assert "fix:" in message


def test_unsupported_op_named_in_registry_queries() -> None:
    registry = onnxport.OnnxRegistry()
    assert not registry.is_registered_op("onnxport_errtest", "scale")
    assert registry.get_op_functions("onnxport_errtest", "scale") is None
    assert registry.is_registered_op("aten", "linear")


def test_custom_translation_makes_the_unsupported_op_exportable() -> None:
    registry = onnxport.OnnxRegistry()

    def scale(g, x):  # type: ignore[no-untyped-def]
        return g.op("Mul", x, 2.0)

    registry.register_op(scale, "onnxport_errtest", "scale")
    assert registry.is_registered_op("onnxport_errtest", "scale")
    # The default registry is untouched by the copy's registration.
    assert not onnxport.OnnxRegistry().is_registered_op("onnxport_errtest", "scale")
    model = _OneCustomOp().eval()
    x = torch.randn(3, 4)
    program = onnxport.export(model, (x,), registry=registry)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(program(x)[0], expected)


def test_register_op_rejects_malformed_names() -> None:
    registry = onnxport.OnnxRegistry()
    with pytest.raises(ValueError):
        registry.register_op(lambda g, x: x, "onnxport_errtest", "scale::default")
    with pytest.raises(ValueError):
        registry.register_op(lambda g, x: x, "onnxport_errtest", "no_such_op_anywhere")


# -- TranslationError --------------------------------------------------------------------------

def test_translation_that_raises_is_wrapped_with_node_module_and_source() -> None:
    registry = onnxport.OnnxRegistry()

    def broken_scale(g, x):  # type: ignore[no-untyped-def]
        raise ValueError("the translation fell over")

    registry.register_op(broken_scale, "onnxport_errtest", "scale")
    with pytest.raises(onnxport.TranslationError) as info:
        onnxport.export(_OneCustomOp().eval(), (torch.randn(3, 4),), registry=registry)
    error = info.value
    message = str(error)
    assert error.target == "onnxport_errtest.scale.default"
    assert error.node  # the FX node's name
    assert error.module_path == "scaler"
    assert f"{THIS_FILE}:{_line_of('# SCALE-LINE')}" in (error.source or "")
    # The message carries everything too, and the original error.
    assert "onnxport_errtest.scale.default" in message
    assert f"'{error.node}'" in message
    assert "'scaler'" in message
    assert f"{THIS_FILE}:{_line_of('# SCALE-LINE')}" in message
    assert "ValueError: the translation fell over" in message
    # Where the faulty translation lives.
    assert "broken_scale" in message
    assert isinstance(error.__cause__, ValueError)


def test_translation_error_stating_a_fact_gets_context() -> None:
    registry = onnxport.OnnxRegistry()

    def refuses(g, x):  # type: ignore[no-untyped-def]
        raise onnxport.TranslationError("scale cannot be expressed for this input")

    registry.register_op(refuses, "onnxport_errtest", "scale")
    with pytest.raises(onnxport.TranslationError) as info:
        onnxport.export(_OneCustomOp().eval(), (torch.randn(3, 4),), registry=registry)
    message = str(info.value)
    assert message.startswith("onnxport_errtest.scale.default: scale cannot be expressed")
    assert info.value.module_path == "scaler"
    assert f"{THIS_FILE}:{_line_of('# SCALE-LINE')}" in message


# -- CaptureError ------------------------------------------------------------------------------

def test_capture_error_names_every_strategy() -> None:
    with pytest.raises(onnxport.CaptureError) as info:
        onnxport.export(_DataDependentBranch(), (torch.randn(3),))
    error = info.value
    message = str(error)
    strategies = [a.strategy for a in error.attempts]
    assert strategies == ["non-strict", "strict"]
    assert all(not a.succeeded for a in error.attempts)
    for name in strategies:
        assert f"  {name}: " in message
    assert "tried 2 strategies" in message
    assert error.__cause__ is error.attempts[0].error


def test_capture_error_for_an_object_that_is_not_a_model() -> None:
    with pytest.raises(onnxport.CaptureError):
        onnxport.export(42, (torch.randn(3),))


# -- the hierarchy -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_is_an_onnx_exporter_error(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, onnxport.OnnxExporterError)
    assert issubclass(cls, Exception)


def test_public_errors_are_the_same_classes() -> None:
    for name in ("CaptureError", "CheckerError", "TranslationError", "UnsupportedOperatorError",
                 "VerificationError", "OnnxExporterError"):
        assert getattr(onnxport, name) is getattr(errors, name)


def test_raised_errors_are_catchable_as_onnx_exporter_error() -> None:
    with pytest.raises(onnxport.OnnxExporterError):
        onnxport.export(_TwoCustomOps().eval(), (torch.randn(2, 4),))
    with pytest.raises(onnxport.OnnxExporterError):
        onnxport.export(_DataDependentBranch(), (torch.randn(3),))
