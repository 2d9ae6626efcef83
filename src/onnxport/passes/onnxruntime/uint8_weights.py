"""Uint8WeightsPass: constant int8 weights of integer kernels re-encoded as uint8.

ONNX Runtime's fused integer kernels (QGemm and QLinearConv, formed from Q/DQ pairs; its
DynamicQuantizeMatMul, formed from MatMulInteger) multiply uint8 activations by int8 weights
(U8S8) with `vpmaddubsw` on AVX2 CPUs without VNNI. That instruction saturates each pair of
products at int16, so outputs move by many quantization steps (up to 75 measured on this
project's CI machine, an AVX2 CPU without VNNI). Its U8U8 kernels are exact on every CPU, and
ORT's own quantization docs recommend U8U8 on such CPUs. The default target writes the int8
weights the user quantized (what TensorRT's explicit quantization needs: symmetric int8, zero
point 0); this pass, in the ONNX Runtime target only, rewrites

    DequantizeLinear(W int8, scale, [zero_point])             (standard domain)
    MatMulInteger(A, W int8 | Transpose(W int8), a_zp, b_zp)  (FuseDynamicQuantMatMulPass)

with W a constant int8 initializer (not a graph input) and a constant or absent zero point, as
W + 128 (uint8) and zero point + 128 (uint8; shaped like the original zero point, or like the
scale / a scalar when absent): the same `(q + 128) - (z + 128) = q - z`. One uint8
initializer per int8 weight, shared by all its readers; the int8 one is dropped when nothing
else reads it. Other bit widths (int4), float8 and computed values are left alone.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_INT8 = ir.DataType.INT8


def _constant_int8(value: ir.Value | None) -> np.ndarray | None:
    """The data of an int8 initializer that is not a graph input, else None."""
    if value is None or value.dtype != _INT8 or not value.is_initializer() \
            or value.is_graph_input() or value.const_value is None:
        return None
    return np.asarray(value.const_value.numpy())


def _shift(data: np.ndarray) -> np.ndarray:
    return (np.rint(np.asarray(data)).astype(np.int16) + 128).astype(np.uint8)


class Uint8WeightsPass(ir.passes.InPlacePass):
    """Constant int8 DequantizeLinear / MatMulInteger weights as uint8 (+128)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self._shifted: dict[object, ir.Value] = {}
        self._names = {v.name for g in f.graphs(model) for v in g.initializers.values()}
        # the graph holding each initializer (a subgraph may read its parent's)
        self._owner = {id(v): g for g in f.graphs(model) for v in g.initializers.values()}
        old: list[ir.Value] = []
        modified = False
        for graph in f.graphs(model):
            for node in list(graph):
                if node.domain not in ("", "ai.onnx"):
                    continue
                if node.op_type == "DequantizeLinear":
                    modified |= self._dequantize(graph, node, old)
                elif node.op_type == "MatMulInteger":
                    modified |= self._matmul_integer(graph, node, old)
        dropped = {id(v) for v in old if not v.uses() and not v.is_graph_output()}
        for graph in f.graphs(model):
            for name, value in list(graph.initializers.items()):
                if id(value) in dropped:
                    graph.initializers.pop(name)
        return ir.passes.PassResult(model, modified)

    # -- helpers -------------------------------------------------------------------------------
    def _initializer(self, graph: ir.Graph, base: str, data: np.ndarray) -> ir.Value:
        name, i = f"{base}_u8", 0
        while name in self._names:
            i += 1
            name = f"{base}_u8_{i}"
        self._names.add(name)
        tensor = ir.tensor(data, name=name)
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.UINT8),
                         shape=ir.Shape(list(data.shape)), const_value=tensor)
        graph.initializers[name] = value
        return value

    def _weight(self, w: ir.Value, data: np.ndarray) -> ir.Value:
        """The shared uint8 copy of int8 initializer `w`, in the graph that owns `w`."""
        if id(w) not in self._shifted:
            self._shifted[id(w)] = self._initializer(self._owner[id(w)], w.name or "weight",
                                                     _shift(data))
        return self._shifted[id(w)]

    def _zero(self, graph: ir.Graph, zero: ir.Value | None, shape: tuple[int, ...],
              base: str) -> ir.Value | None:
        """The uint8 zero point (+128) of a constant or absent (zeros of `shape`) one."""
        if zero is None:
            z = np.zeros(shape, np.int64)
        else:
            z = f.constant(zero)
            if z is None or np.asarray(z).dtype != np.int8:
                return None
        return self._initializer(graph, base, _shift(z))

    # -- rewrites ------------------------------------------------------------------------------
    def _dequantize(self, graph: ir.Graph, node: ir.Node, old: list[ir.Value]) -> bool:
        w = node.inputs[0]
        data = _constant_int8(w)
        scale = node.inputs[1] if len(node.inputs) > 1 else None
        zero = node.inputs[2] if len(node.inputs) > 2 else None
        if data is None or scale is None or scale.shape is None or not scale.shape.is_static():
            return False
        z = self._zero(graph, zero, tuple(int(d) for d in scale.shape),
                       zero.name if zero is not None and zero.name else f"{w.name}_zero_point")
        if z is None:
            return False
        node.replace_input_with(0, self._weight(w, data))
        if len(node.inputs) < 3:
            node.resize_inputs(3)
        node.replace_input_with(2, z)
        old.append(w)
        if zero is not None:
            old.append(zero)
        return True

    def _matmul_integer(self, graph: ir.Graph, node: ir.Node, old: list[ir.Value]) -> bool:
        b = node.inputs[1]
        zero = node.inputs[3] if len(node.inputs) > 3 else None
        data = _constant_int8(b)
        transpose = None
        if data is None:  # FuseDynamicQuantMatMulPass writes Transpose(W) for a [N, K] weight
            transpose = f.producer(b, "Transpose")
            source = None if transpose is None else transpose.inputs[0]
            data = _constant_int8(source)
            perm = None if transpose is None else transpose.attributes.get("perm")
            if data is None or data.ndim != 2 or (perm is not None and list(perm.value) != [1, 0]):
                return False
        z = self._zero(graph, zero, (), zero.name if zero is not None and zero.name
                       else f"{b.name}_zero_point")
        if z is None:
            return False
        if transpose is None:
            node.replace_input_with(1, self._weight(b, data))
            old.append(b)
        else:
            w = transpose.inputs[0]
            key = ("T", id(w))
            if key not in self._shifted:
                self._shifted[key] = self._initializer(self._owner[id(w)],
                                                       f"{w.name or 'weight'}_T",
                                                       np.ascontiguousarray(_shift(data).T))
            node.replace_input_with(1, self._shifted[key])
            if not transpose.outputs[0].uses() and not transpose.outputs[0].is_graph_output():
                transpose.graph.remove(transpose, safe=True)
            old.append(w)
        if len(node.inputs) < 4:
            node.resize_inputs(4)
        node.replace_input_with(3, z)
        if zero is not None:
            producer = zero.producer()
            if producer is not None and producer.op_type == "Constant" and not zero.uses() \
                    and not zero.is_graph_output():
                producer.graph.remove(producer, safe=True)
            else:
                old.append(zero)
        return True
