"""Loop-shaped shape kernels for aten.lstm/gru/rnn_tanh/rnn_relu during capture.

torch.export keeps these ops whole in its graph (the op library emits ONNX LSTM/GRU/RNN for
them), but it computes their output metadata by running their CompositeImplicitAutograd
kernel on fake tensors. The stock kernels unroll a Python loop over the time steps, which
pins the sequence length to the example's. Inside `loop_shaped_rnns()` the kernels step
through time with `torch.while_loop` instead, so a dynamic sequence length stays symbolic.
LSTM and GRU use torch.export's own while_loop kernels; plain RNNs use the one below.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._decomp.decompositions import _rnn_helper, gather_params
from torch._higher_order_ops.while_loop import while_loop
from torch.export._patches import (
    register_gru_while_loop_decomposition,
    register_lstm_while_loop_decomposition,
)

_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def _one_layer_rnn(inp: torch.Tensor, hidden: torch.Tensor, params: list[torch.Tensor],
                   has_biases: bool, reverse: bool = False, *,
                   activation: Callable[[torch.Tensor], torch.Tensor]) -> tuple[Any, Any]:
    """One direction of one layer: h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)."""
    w_ih, w_hh = params[0], params[1]
    b_ih, b_hh = (params[2], params[3]) if has_biases else (None, None)
    projected = torch.nn.functional.linear(inp, w_ih, b_ih)
    if reverse:
        projected = projected.flip(0)
    # while_loop refuses closure inputs that share storage (flattened RNN weights can).
    w_hh = w_hh.clone()
    b_hh = b_hh.clone() if b_hh is not None else None
    steps = projected.size(0)

    def cond(i: torch.Tensor, out: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return i < steps

    def body(i: torch.Tensor, out: torch.Tensor, h: torch.Tensor) -> tuple[Any, Any, Any]:
        t = i.item()
        torch._check_is_size(t, max=steps - 1)
        h = activation(projected[t] + torch.nn.functional.linear(h, w_hh, b_hh))
        out = out.clone()
        out[t] = h
        return i + 1, out, h

    start = torch.tensor(0, dtype=torch.int64)
    _, out, last = while_loop(cond, body, [start, torch.zeros_like(projected), hidden])
    return (out.flip(0) if reverse else out), last


def _rnn_kernel(activation: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def kernel(input: torch.Tensor, hx: torch.Tensor, params: list[torch.Tensor],
               has_biases: bool, num_layers: int, dropout: float, train: bool,
               bidirectional: bool, batch_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
        out, finals = _rnn_helper(input, list(hx.unbind(0)), gather_params(params, has_biases, False),
                                  has_biases, num_layers, dropout, train, bidirectional,
                                  batch_first, functools.partial(_one_layer_rnn, activation=activation))
        return out, torch.stack(finals, 0)

    return kernel


@contextlib.contextmanager
def _cia_kernel(op: Any, kernel: Callable[..., Any]) -> Iterator[None]:
    previous = op.py_kernels.get(_CIA)
    op.py_kernels[_CIA] = kernel
    try:
        yield
    finally:
        if previous is None:
            op.py_kernels.pop(_CIA, None)
        else:
            op.py_kernels[_CIA] = previous


@contextlib.contextmanager
def loop_shaped_rnns() -> Iterator[None]:
    """Within this context, capturing an RNN keeps its sequence length symbolic."""
    aten = torch.ops.aten
    ops = (aten.lstm.input, aten.gru.input, aten.rnn_tanh.input, aten.rnn_relu.input)
    with contextlib.ExitStack() as stack:
        # The dispatcher caches the kernel it picked for an op: drop it on entry and on exit.
        stack.callback(_forget_kernels, ops)
        stack.enter_context(register_lstm_while_loop_decomposition())
        stack.enter_context(register_gru_while_loop_decomposition())
        stack.enter_context(_cia_kernel(aten.rnn_tanh.input, _rnn_kernel(torch.tanh)))
        stack.enter_context(_cia_kernel(aten.rnn_relu.input, _rnn_kernel(torch.relu)))
        _forget_kernels(ops)
        yield


def _forget_kernels(ops: tuple[Any, ...]) -> None:
    for op in ops:
        op._dispatch_cache.clear()
