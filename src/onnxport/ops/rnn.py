"""Recurrent layers: aten.lstm / gru / rnn_tanh / rnn_relu as ONNX LSTM, GRU and RNN nodes.

One ONNX node per layer (both directions in one node when bidirectional); the next layer
takes the previous layer's output. PyTorch and ONNX order the gate blocks of the weights
differently, so each weight is split into its gate blocks and concatenated again in ONNX
order inside the graph: the weights stay the model's initializers, replaceable by name.

Gate orders: LSTM torch (i, f, g, o) -> ONNX (i, o, f, c); GRU torch (r, z, n) -> ONNX
(z, r, h), with linear_before_reset=1, which is torch's formula
n = tanh(W_in x + b_in + r * (W_hn h + b_hn)). ONNX nodes take time-major input (layout=0;
ONNX Runtime does not implement layout=1), so batch_first input and output are transposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
# ONNX Runtime implements LSTM, GRU and RNN for float32 only; other dtypes run in float32.
_NATIVE = (ir.DataType.FLOAT,)


def _reorder_gates(g: GraphBuilder, w: Tensor, order: Sequence[int]) -> Tensor:
    """The gate blocks (rows) of a torch weight or bias in ONNX order."""
    if list(order) == sorted(order):
        return w
    blocks = g.op("Split", w, axis=0, num_outputs=len(order), outputs=len(order))
    return g.op("Concat", *[blocks[i] for i in order], axis=0)


def _stack(g: GraphBuilder, tensors: Sequence[Tensor]) -> Tensor:
    """[num_directions, ...]: each direction's tensor with a leading axis, concatenated."""
    parts = [g.op("Unsqueeze", t, g.const([0], _I64)) for t in tensors]
    return parts[0] if len(parts) == 1 else g.op("Concat", *parts, axis=0)


def _state_slice(g: GraphBuilder, state: Tensor, layer: int, num_directions: int) -> Tensor:
    """The initial state of one layer: rows [layer*D, (layer+1)*D) of a (L*D, N, H) tensor."""
    start = layer * num_directions
    return g.op("Slice", state, g.const([start], _I64), g.const([start + num_directions], _I64),
                g.const([0], _I64))


def _recurrent(
    g: GraphBuilder,
    op_type: str,
    input: Tensor,
    states: Sequence[Tensor],
    params: Sequence[Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
    order: Sequence[int],
    attrs: dict[str, Any],
) -> tuple[Tensor, ...]:
    """The layer stack; returns (output, final state per entry of `states`)."""
    if train and dropout > 0 and num_layers > 1:
        raise TranslationError(
            f"{op_type.lower()} with dropout={dropout} in training mode: random dropout has no "
            "deterministic ONNX equivalent; export the model in eval mode")
    num_directions = 2 if bidirectional else 1
    per_direction = 4 if has_biases else 2
    if len(params) != num_layers * num_directions * per_direction:
        # LSTM with proj_size adds a projection weight per direction; ONNX LSTM has none.
        raise TranslationError(
            f"{op_type.lower()} with {len(params)} weights for {num_layers} layer(s) and "
            f"{num_directions} direction(s): projections (proj_size > 0) have no ONNX equivalent")
    out_dtype = input.dtype
    assert out_dtype is not None
    dtype = out_dtype if out_dtype in _NATIVE else ir.DataType.FLOAT
    x = cast(g, input, dtype)
    if batch_first:
        x = g.op("Transpose", x, perm=[1, 0, 2])
    hidden_size = params[1].shape[1] if params[1].shape is not None else None
    if not isinstance(hidden_size, int):
        raise TranslationError("recurrent weights of unknown hidden size")
    finals: list[list[Tensor]] = [[] for _ in states]
    for layer in range(num_layers):
        weights = [params[(layer * num_directions + d) * per_direction:
                          (layer * num_directions + d + 1) * per_direction]
                   for d in range(num_directions)]
        w = _stack(g, [_reorder_gates(g, cast(g, p[0], dtype), order) for p in weights])
        r = _stack(g, [_reorder_gates(g, cast(g, p[1], dtype), order) for p in weights])
        b = None
        if has_biases:
            b = _stack(g, [g.op("Concat", _reorder_gates(g, cast(g, p[2], dtype), order),
                                _reorder_gates(g, cast(g, p[3], dtype), order), axis=0)
                           for p in weights])
        initial = [cast(g, _state_slice(g, s, layer, num_directions), dtype) for s in states]
        outputs = g.op(op_type, x, w, r, b, None, *initial, outputs=1 + len(states),
                       hidden_size=hidden_size,
                       direction="bidirectional" if bidirectional else "forward", **attrs)
        for out in outputs:
            out.dtype = dtype
        y, *last = outputs
        for kept, state in zip(finals, last):
            kept.append(state)
        # Y is (T, D, N, H): the next layer and torch want (T, N, D*H).
        y = g.op("Transpose", y, perm=[0, 2, 1, 3])
        x = g.op("Reshape", y, g.const([0, 0, -1], _I64))
    if batch_first:
        x = g.op("Transpose", x, perm=[1, 0, 2])
    results = [x, *(k[0] if len(k) == 1 else g.op("Concat", *k, axis=0) for k in finals)]
    return tuple(cast(g, v, out_dtype) for v in results)


@register(aten.lstm.input)
def aten_lstm_input(g: GraphBuilder, input: Tensor, hx: Sequence[Tensor], params: Sequence[Tensor],
                    has_biases: bool, num_layers: int, dropout: float, train: bool,
                    bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    """lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)"""
    if len(hx) != 2:
        raise TranslationError(f"lstm takes (h0, c0), got {len(hx)} state tensors")
    y, h, c = _recurrent(g, "LSTM", input, hx, params, has_biases, num_layers, dropout, train,
                         bidirectional, batch_first, (0, 3, 1, 2), {})
    return y, h, c


@register(aten.gru.input)
def aten_gru_input(g: GraphBuilder, input: Tensor, hx: Tensor, params: Sequence[Tensor],
                   has_biases: bool, num_layers: int, dropout: float, train: bool,
                   bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
    """gru.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)"""
    y, h = _recurrent(g, "GRU", input, [hx], params, has_biases, num_layers, dropout, train,
                      bidirectional, batch_first, (1, 0, 2), {"linear_before_reset": 1})
    return y, h


@register(aten.rnn_tanh.input)
def aten_rnn_tanh_input(g: GraphBuilder, input: Tensor, hx: Tensor, params: Sequence[Tensor],
                        has_biases: bool, num_layers: int, dropout: float, train: bool,
                        bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
    """rnn_tanh.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)"""
    y, h = _recurrent(g, "RNN", input, [hx], params, has_biases, num_layers, dropout, train,
                      bidirectional, batch_first, (0,),
                      {"activations": ["Tanh"] * (2 if bidirectional else 1)})
    return y, h


@register(aten.rnn_relu.input)
def aten_rnn_relu_input(g: GraphBuilder, input: Tensor, hx: Tensor, params: Sequence[Tensor],
                        has_biases: bool, num_layers: int, dropout: float, train: bool,
                        bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
    """rnn_relu.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)"""
    y, h = _recurrent(g, "RNN", input, [hx], params, has_biases, num_layers, dropout, train,
                      bidirectional, batch_first, (0,),
                      {"activations": ["Relu"] * (2 if bidirectional else 1)})
    return y, h
