"""Streaming serialization of a model with its weights inline, straight from tensor memory.

Protobuf would copy every weight several times (tensor -> bytes -> message -> string). The
wire format lets us do better: a message is a sequence of (tag, length, payload) fields in any
order, so the model is written as its small weight-less proto followed by the graph's
initializer fields, each a TensorProto header plus the raw bytes of the tensor, written from
the tensor's own memory in one large write. The result parses as an ordinary ModelProto.
"""

from __future__ import annotations

from typing import IO, Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

_MODEL_GRAPH = (7 << 3) | 2  # ModelProto.graph, length-delimited
_GRAPH_INITIALIZER = (5 << 3) | 2  # GraphProto.initializer
_TENSOR_RAW_DATA = (9 << 3) | 2  # TensorProto.raw_data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _raw_view(tensor: Any) -> memoryview | None:
    """The tensor's bytes without a copy where possible (little-endian, as ONNX stores them)."""
    if isinstance(tensor, TorchTensor):
        raw = tensor.raw
        if isinstance(raw, torch.Tensor):
            t = raw.detach().cpu().contiguous()
            if t.dtype in (torch.bfloat16, torch.bool) or t.dtype.is_floating_point or \
                    t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
                if not t.numel():
                    return memoryview(b"")
                return memoryview(t.reshape(-1).view(torch.uint8).numpy())
    if isinstance(tensor, ir.TensorProtocol) and tensor.dtype not in (ir.DataType.STRING,):
        if tensor.dtype.bitwidth < 8:
            return None
        array = tensor.numpy()
        if array.dtype.kind in "biuf" and array.dtype.byteorder != ">":
            return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    return None


def write_model(model: ir.Model, fh: IO[bytes]) -> None:
    """Write `model` with its main-graph weights inline, streaming them from tensor memory."""
    graph = model.graph
    initializers = list(graph.initializers.values())
    streamed: list[tuple[bytes, memoryview]] = []
    kept: list[ir.Value] = []
    for value in initializers:
        tensor = value.const_value
        raw = _raw_view(tensor) if tensor is not None else None
        if raw is None:
            kept.append(value)
            continue
        header = onnx.TensorProto(name=value.name, dims=list(tensor.shape.numpy()),  # type: ignore[union-attr]
                                  data_type=int(tensor.dtype))  # type: ignore[union-attr]
        streamed.append((header.SerializeToString(), raw))
    graph.initializers.clear()
    try:
        for value in kept:
            graph.initializers[value.name] = value
        proto = ir.to_proto(model)
    finally:
        graph.initializers.clear()
        for value in initializers:
            graph.initializers[value.name] = value
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    fields = []
    total = len(graph_bytes)
    for header, raw in streamed:
        raw_prefix = bytes([_TENSOR_RAW_DATA]) + _varint(raw.nbytes)
        length = len(header) + len(raw_prefix) + raw.nbytes
        prefix = bytes([_GRAPH_INITIALIZER]) + _varint(length) + header + raw_prefix
        fields.append((prefix, raw))
        total += len(prefix) + raw.nbytes
    fh.write(proto.SerializeToString())
    fh.write(bytes([_MODEL_GRAPH]) + _varint(total))
    fh.write(graph_bytes)
    for prefix, raw in fields:
        fh.write(prefix)
        fh.write(raw)


def write_model_external(model: ir.Model, path: str, data_name: str) -> None:
    """Write `model` to `path` with its weights in `data_name`, a file beside it.

    Tensors of at most 256 bytes stay inline (onnx-ir's threshold, as torch.onnx). The
    caller (`program._save_atomically`) writes into a staging folder and renames into place.
    """
    ir.save(model, path, external_data=data_name)
