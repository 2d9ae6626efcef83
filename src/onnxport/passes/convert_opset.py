"""Reach an opset below the op library's (18) by converting the finished model down.

The weights are detached before conversion and reattached after, so converting never copies
them through protobuf.
"""

from __future__ import annotations

import onnx
import onnx.version_converter
import onnx_ir as ir

from onnxport.errors import PassError

LIBRARY_OPSET = 18


def convert_to_opset(model: ir.Model, opset: int) -> ir.Model:
    """A model equivalent to `model` at `opset` (`model` itself when nothing changes)."""
    current = model.graph.opset_imports.get("", LIBRARY_OPSET)
    if opset == current:
        return model
    graph = model.graph
    weights = {name: v.const_value for name, v in graph.initializers.items()}
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if tensor is not None:
            # A reference that serializes without reading (or copying) the weight's bytes.
            value.const_value = ir.ExternalTensor("__onnxport_detached__", 0, tensor.nbytes,
                                                  tensor.dtype, shape=tensor.shape, name=name)
    try:
        proto = ir.to_proto(model)
        converted = onnx.version_converter.convert_version(proto, opset)
    except Exception as e:  # noqa: BLE001  (re-raised with the target opset)
        raise PassError(f"cannot convert the model from opset {current} to opset {opset}: {e}") from e
    finally:
        for name, tensor in weights.items():
            graph.initializers[name].const_value = tensor
    new = ir.from_proto(converted)
    for name, value in new.graph.initializers.items():
        if weights.get(name) is not None:
            value.const_value = weights[name]
    return new
