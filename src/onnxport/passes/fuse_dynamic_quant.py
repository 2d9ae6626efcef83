"""FuseDynamicQuantMatMulPass: dynamically quantized matmuls as MatMulInteger.

PT2E's dynamic quantization exports as
`DynamicQuantizeLinear(x) -> DequantizeLinear -> Gemm/MatMul <- DequantizeLinear <- int8 W`.
ONNX Runtime fuses static Q/DQ pairs into QLinear* kernels, but it does not turn this dynamic
pattern into an integer matmul: it dequantizes both sides and multiplies in float. This pass
writes what ONNX Runtime's own dynamic quantizer writes:

    DynamicQuantizeLinear(x) -> (q, s, z)
    MatMulInteger(q, W^T, z, w_zero_point)  -> Cast(float) -> Mul(s * w_scale) [-> Add(bias)]

which ONNX Runtime runs as one DynamicQuantizeMatMul kernel. The result is the same sum of
(q - z)(w - w_z) products, computed exactly in int32 instead of in float32, then scaled: it
differs from the float path only by float32 accumulation rounding.

Matched: Gemm (transA=0, transB=1, alpha=beta=1) and MatMul whose weight is a rank-2
per-tensor or per-output-channel DequantizeLinear of a constant int8/uint8 tensor, directly
(`[K, N]`, axis 1) or through Transpose (`[N, K]`, axis 0).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_INT8 = (ir.DataType.INT8, ir.DataType.UINT8)


def _attr(node: ir.Node, name: str, default: object) -> object:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return True
    if value.is_graph_input():
        return False
    return value.const_value is not None or f.producer(value, "Constant") is not None


def _size(value: ir.Value) -> int | None:
    if value.shape is None or not value.shape.is_static():
        return None
    return int(np.prod(value.shape.numpy())) if len(value.shape) else 1


class FuseDynamicQuantMatMulPass(f.MatchRewritePass):
    """DynamicQuantizeLinear -> DequantizeLinear -> Gemm/MatMul as MatMulInteger."""

    op_types = ("Gemm", "MatMul")

    # -- matching --------------------------------------------------------------------------
    def _match(self, node: ir.Node) -> tuple[ir.Node, ir.Node, bool, ir.Value | None] | None:
        """(activation DequantizeLinear, weight DequantizeLinear, weight is [N, K], bias)."""
        dq_a = f.producer(node.inputs[0], "DequantizeLinear")
        if dq_a is None or len(dq_a.inputs) < 3:
            return None
        dql = f.producer(dq_a.inputs[0], "DynamicQuantizeLinear")
        if dql is None or list(dq_a.inputs[:3]) != list(dql.outputs):
            return None
        bias = None
        if node.op_type == "Gemm":
            if (_attr(node, "transA", 0), _attr(node, "transB", 0)) != (0, 1) \
                    or _attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0:
                return None
            dq_w, transposed = f.producer(node.inputs[1], "DequantizeLinear"), True
            bias = node.inputs[2] if len(node.inputs) > 2 else None
        else:
            transpose = f.producer(node.inputs[1], "Transpose")
            if transpose is not None:
                if list(_attr(transpose, "perm", [1, 0])) != [1, 0]:  # type: ignore[arg-type]
                    return None
                dq_w, transposed = f.producer(transpose.inputs[0], "DequantizeLinear"), True
            else:
                dq_w, transposed = f.producer(node.inputs[1], "DequantizeLinear"), False
        if dq_w is None or not self._weight_ok(dq_w, transposed):
            return None
        return dq_a, dq_w, transposed, bias

    @staticmethod
    def _weight_ok(dq_w: ir.Node, transposed: bool) -> bool:
        w, scale = dq_w.inputs[0], dq_w.inputs[1]
        zero = dq_w.inputs[2] if len(dq_w.inputs) > 2 else None
        if w is None or scale is None or w.dtype not in _INT8 or w.shape is None \
                or len(w.shape) != 2 or not all(_is_constant(v) for v in (w, scale, zero)):
            return False
        if _attr(dq_w, "block_size", 0):
            return False
        n = w.shape[0] if transposed else w.shape[1]
        count = _size(scale)
        if count == 1:
            return True
        axis = int(_attr(dq_w, "axis", 1))  # type: ignore[call-overload]
        axis = axis + 2 if axis < 0 else axis
        return count == n and axis == (0 if transposed else 1)

    # -- rewriting -------------------------------------------------------------------------
    def _rewrite(self, graph: ir.Graph, namer: f.Namer, node: ir.Node, dq_a: ir.Node,
                 dq_w: ir.Node, transposed: bool, bias: ir.Value | None) -> None:
        weight_input = node.inputs[1]
        q, s, z = dq_a.inputs[:3]
        w, w_scale = dq_w.inputs[0], dq_w.inputs[1]
        w_zero = dq_w.inputs[2] if len(dq_w.inputs) > 2 else None
        new: list[ir.Node] = []

        def add(op_type: str, inputs: list[ir.Value | None], **attrs: object) -> ir.Value:
            new.append(f.make_node(namer, node, op_type, inputs, attrs))
            return new[-1].outputs[0]

        if transposed:
            w = add("Transpose", [w], perm=[1, 0])
            w.dtype = dq_w.inputs[0].dtype
        if w_zero is None:
            zero = np.zeros((), dtype=dq_w.inputs[0].dtype.numpy())
            w_zero = add("Constant", [], value=ir.tensor(zero))
            w_zero.dtype = dq_w.inputs[0].dtype
        product = add("MatMulInteger", [q, w, z, w_zero])
        product.dtype = ir.DataType.INT32
        out_dtype = node.outputs[0].dtype or ir.DataType.FLOAT
        as_float = add("Cast", [product], to=int(out_dtype))
        as_float.dtype = out_dtype
        scale = add("Mul", [s, w_scale])
        scale.dtype = out_dtype
        y = add("Mul", [as_float, scale])
        y.dtype = out_dtype
        if bias is not None:
            y = add("Add", [y, bias])
            y.dtype = out_dtype
        f.replace(graph, [node], new, node.outputs[0], y)
        # The float path's dequantizes (and weight transpose), unless something else reads them.
        for dead in (dq_a, f.producer(weight_input, "Transpose"), dq_w):
            if dead is not None and dead.graph is graph and not any(
                    o.uses() or o.is_graph_output() for o in dead.outputs):
                graph.remove(dead, safe=True)
