"""FoldScaleIntoGemmPass: a constant scale applied after a Gemm's output has gone through
linear, data-moving ops becomes the Gemm's own `alpha` (and `beta`).

Matched wherever it appears (the query scale of attention below opset 23 is the common case):

    Y = Mul(chain(Gemm(A, B, C, alpha, beta)), s)      s: a one-element float constant
    -> chain(Gemm(A, B, C, alpha * s, beta * s)), the Mul gone

where `chain` is built from the Gemm's output by Reshape, Transpose, Squeeze, Unsqueeze,
Flatten, Identity, Slice, Split, Concat, Neg, Add / Sub of two chain values, and Mul / Div
of a chain value by a value that does not depend on it (a rotary embedding's cos and sin):
every op is linear in the Gemm's output, so scaling that output scales Y. The Gemm's weight
is a float initializer (a dequantized weight's Gemm is left to the quantization passes, which
read it as it is). Every value the
chain computes (the Gemm's output included) must be read only inside it, so no other reader
sees the scaled values. One node fewer and one elementwise pass over the query fewer a
layer; the product is the same up to float rounding (the scale is applied inside the
matrix product instead of after the rotation).
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.passes import _fusion as f

_MOVES = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice",
          "Split", "Neg"}
_MAX_CHAIN = 32
_DTYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE)


def _plain_weight(value: ir.Value | None) -> bool:
    """A float weight (an initializer, maybe transposed): not a dequantized one, whose Gemm the
    ONNX Runtime target's weight-quantization passes read as it is."""
    node = f.producer(value, "Transpose")
    if node is not None:
        value = node.inputs[0]
    return value is not None and value.is_initializer() and value.dtype in _DTYPES


class _Chain:
    """The nodes between one Gemm and a value, if the value is linear in the Gemm's output."""

    def __init__(self) -> None:
        self.nodes: dict[int, ir.Node] = {}
        self.gemm: ir.Node | None = None

    def reaches(self, value: ir.Value | None) -> bool:
        """Whether `value` is (linear in) the Gemm's output; records the nodes on the way."""
        node = value.producer() if value is not None else None
        if node is None or node.domain or value.is_graph_output():  # type: ignore[union-attr]
            return False
        if id(node) in self.nodes or node is self.gemm:
            return True
        if len(self.nodes) >= _MAX_CHAIN:
            return False
        op = node.op_type
        if op == "Gemm":
            if self.gemm is not None or node.outputs[0].dtype not in _DTYPES or \
                    not _plain_weight(node.inputs[1]):
                return False
            self.gemm = node
            return True
        if op in _MOVES:
            ok = self.reaches(node.inputs[0])
        elif op in ("Concat", "Add", "Sub"):
            ok = len(node.inputs) > 0 and all(self.reaches(v) for v in node.inputs)
        elif op in ("Mul", "Div") and len(node.inputs) == 2:
            # linear in exactly one factor (the numerator of a Div); closed() rejects a
            # factor that depends on the chain some other way
            first, second = self.reaches(node.inputs[0]), self.reaches(node.inputs[1])
            ok = first != second and (first or op == "Mul")
        else:
            return False
        if ok:
            self.nodes[id(node)] = node
        return ok

    def closed(self, end: ir.Node) -> bool:
        """Every value the chain computes is read inside it (or by `end`) only."""
        inside = set(self.nodes) | {id(end)}
        assert self.gemm is not None
        for node in [self.gemm, *self.nodes.values()]:
            for out in node.outputs:
                if out.is_graph_output() or any(id(u.node) not in inside for u in out.uses()):
                    return False
        return True


class FoldScaleIntoGemmPass(ir.passes.InPlacePass):
    """Mul(linear chain of a Gemm, constant) -> the Gemm's alpha / beta."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph, _, node in f.standard_nodes(model, ("Mul",)):
            if node.graph is not graph or len(node.inputs) != 2:
                continue
            for i, j in ((1, 0), (0, 1)):
                data, x = f.literal_scalar(node.inputs[i]), node.inputs[j]
                if data is None or x is None or x.shape is None or data.ndim > len(x.shape) or \
                        x.dtype != node.outputs[0].dtype or node.outputs[0].is_graph_output():
                    continue
                s = float(data.reshape(()))
                chain = _Chain()
                if not chain.reaches(x) or chain.gemm is None or not chain.closed(node):
                    continue
                gemm = chain.gemm
                for name in ("alpha", "beta"):
                    attr = gemm.attributes.get(name)
                    value = attr.as_float() if attr is not None else 1.0
                    gemm.attributes[name] = ir.AttrFloat32(name, value * s)
                ir.convenience.replace_all_uses_with(node.outputs[0], x)
                graph.remove(node, safe=True)
                modified = True
                break
        return ir.passes.PassResult(model, modified)


__all__ = ["FoldScaleIntoGemmPass"]
