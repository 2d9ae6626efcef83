"""nn.LSTM, nn.GRU and nn.RNN exported as ONNX LSTM/GRU/RNN nodes, compared with eager.

OpInfo has no entries for the recurrent layers, so the cases are written here: layer
counts, directions, batch_first, bias, given or default initial states, and dynamic
batch/sequence sizes checked at a second shape.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import onnxport
from tests.helpers import check_model, count, export_and_compare

INPUT, HIDDEN = 5, 6
KINDS = {
    "lstm": (lambda **kw: torch.nn.LSTM(INPUT, HIDDEN, **kw), "LSTM"),
    "gru": (lambda **kw: torch.nn.GRU(INPUT, HIDDEN, **kw), "GRU"),
    "rnn_tanh": (lambda **kw: torch.nn.RNN(INPUT, HIDDEN, nonlinearity="tanh", **kw), "RNN"),
    "rnn_relu": (lambda **kw: torch.nn.RNN(INPUT, HIDDEN, nonlinearity="relu", **kw), "RNN"),
}
CONFIGS = {
    "plain": {},
    "two_layers": {"num_layers": 2},
    "bidirectional": {"bidirectional": True},
    "deep_bidirectional_batch_first": {"num_layers": 3, "bidirectional": True, "batch_first": True},
    "no_bias_batch_first": {"bias": False, "batch_first": True},
    "dropout_eval": {"num_layers": 2, "dropout": 0.5},
}


class WithState(torch.nn.Module):
    """Calls the recurrent layer with explicit initial states."""

    def __init__(self, rnn: torch.nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor | None = None) -> Any:
        return self.rnn(x, h0 if c0 is None else (h0, c0))


def _input(rnn: Any, batch: int, seq: int) -> torch.Tensor:
    return torch.randn((batch, seq, INPUT) if rnn.batch_first else (seq, batch, INPUT))


def _state(rnn: Any, batch: int) -> torch.Tensor:
    directions = 2 if rnn.bidirectional else 1
    return torch.randn(rnn.num_layers * directions, batch, HIDDEN)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", KINDS)
def test_without_initial_state(kind: str, config: str) -> None:
    make, op_type = KINDS[kind]
    rnn = make(**CONFIGS[config]).eval()
    program = export_and_compare(rnn, (_input(rnn, 3, 7),))
    check_model(program)
    # One node per layer, both directions in it.
    assert count(program, op_type) == rnn.num_layers


@pytest.mark.parametrize("config", ["plain", "deep_bidirectional_batch_first", "no_bias_batch_first"])
@pytest.mark.parametrize("kind", KINDS)
def test_with_initial_state(kind: str, config: str) -> None:
    make, op_type = KINDS[kind]
    rnn = make(**CONFIGS[config]).eval()
    args = [_input(rnn, 3, 7), _state(rnn, 3)]
    if kind == "lstm":
        args.append(_state(rnn, 3))
    program = export_and_compare(WithState(rnn), tuple(args))
    assert count(program, op_type) == rnn.num_layers


def _check_dynamic(kind: str, config: str, dynamic_sequence: bool) -> None:
    make, _ = KINDS[kind]
    rnn = make(**CONFIGS[config]).eval()
    model = WithState(rnn)
    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("sequence") if dynamic_sequence else None
    x_dims = {0: batch, 1: seq} if rnn.batch_first else {0: seq, 1: batch}
    shapes: dict[str, Any] = {"x": x_dims, "h0": {1: batch}}
    args = [_input(rnn, 3, 7), _state(rnn, 3)]
    if kind == "lstm":
        shapes["c0"] = {1: batch}
        args.append(_state(rnn, 3))
    program = onnxport.export(model, tuple(args), dynamic_shapes=shapes)
    assert program is not None
    check_model(program)
    x = program.model.graph.inputs[0]
    assert "batch" in {str(d) for d in x.shape}
    second = [_input(rnn, 2, 11 if dynamic_sequence else 7), _state(rnn, 2)]
    if kind == "lstm":
        second.append(_state(rnn, 2))
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(model(*second))
    actual = program(*second)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("config", ["plain", "deep_bidirectional_batch_first"])
@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_batch(kind: str, config: str) -> None:
    _check_dynamic(kind, config, dynamic_sequence=False)


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_sequence(kind: str) -> None:
    _check_dynamic(kind, "plain", dynamic_sequence=True)


def test_weights_stay_initializers() -> None:
    rnn = torch.nn.LSTM(INPUT, HIDDEN, num_layers=2, bidirectional=True).eval()
    x = _input(rnn, 2, 4)
    program = export_and_compare(rnn, (x,))
    names = set(program.model.graph.initializers)
    assert set(dict(rnn.named_parameters())) == names
    # apply_weights changes the output as in torch: the gates are reordered in the graph,
    # not on baked copies of the weights.
    with torch.no_grad():
        for p in rnn.parameters():
            p.mul_(0.5)
    program.apply_weights(rnn.state_dict())
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(rnn(x))
    for a, e in zip(program(x), expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_other_dtypes_run_in_float32(kind: str, dtype: torch.dtype) -> None:
    """ORT implements LSTM/GRU/RNN for float32 only: other dtypes are computed in float32.

    So the result is eager float32 on the same (upcast) weights and inputs, cast back;
    eager float16 itself rounds at every time step and differs by more than its tolerance.
    """
    low = KINDS[kind][0](bidirectional=True).eval().to(dtype)
    x = _input(low, 2, 5).to(dtype)
    reference = copy.deepcopy(low).float()
    with torch.no_grad():
        expected = [t.to(dtype) for t in torch.utils._pytree.tree_leaves(reference(x.float()))]
    program = onnxport.export(low, (x,))
    assert program is not None
    for a, e in zip(program(x), expected):
        assert a.dtype == dtype
        # float64 results carry float32 precision: compare them at float32 tolerances.
        compared = torch.float32 if dtype == torch.float64 else dtype
        torch.testing.assert_close(a.to(compared), e.to(compared))


def test_proj_size_is_rejected() -> None:
    rnn = torch.nn.LSTM(INPUT, HIDDEN, proj_size=3).eval()
    with pytest.raises(onnxport.errors.TranslationError, match="proj_size"):
        onnxport.export(rnn, (_input(rnn, 2, 4),))


@pytest.mark.parametrize("kind", KINDS)
def test_unbatched_input(kind: str) -> None:
    # nn modules unsqueeze a (sequence, features) input to a batch of one before the ATen op.
    rnn = KINDS[kind][0](num_layers=2, bidirectional=True).eval()
    export_and_compare(rnn, (torch.randn(6, INPUT),))
