"""FoldConstantsPass: replace nodes whose inputs are all known constants with a Constant.

Uses the same numpy evaluations as build-time folding (`translate.folding`), so only
cheap integer/shape arithmetic is folded and weights are never copied. One forward sweep
in topological order: a folded node makes its users foldable in the same sweep.

Beyond build-time folding's 1,024-element limit, integer and boolean results of up to
`MASK_ELEMENTS` elements computed from Constant nodes (never from initializers, which
apply_weights may replace) are folded too: the attention masks a static sequence length
determines (a causal (1, 1, S, S) mask built from arange/cumsum/comparisons), so the
attention fusion and ONNX Runtime see a constant mask. Floating-point data is never folded
beyond build-time folding (its values must come from the runtime's own kernels).

A floating-point Mul or Div by a constant 1 (a rotary embedding's `attention_scaling` of 1.0,
written into the graph by the module) is dropped: its result is its other operand, exactly.
So is an Identity whose result is not a graph output (a zero `F.pad`, as Swin's windows pad
at 224 px: 15 of them in timm's Swin-T, benchmarks/bench_vision_graphs.py).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f
from onnxport.translate import folding

MASK_ELEMENTS = 1 << 16
_MASK_OPS = set(folding._FOLDERS) | {"Cast", "Concat", "Expand", "Gather", "CumSum", "GatherND",
                                     "Trilu"}


def _gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int = 0) -> np.ndarray | None:
    if batch_dims:
        return None
    k = indices.shape[-1]
    flat = indices.reshape(-1, k)
    out = np.stack([data[tuple(int(i) for i in row)] for row in flat]) if len(flat) else \
        np.zeros((0, *data.shape[k:]), dtype=data.dtype)
    return out.reshape(*indices.shape[:-1], *data.shape[k:])


def _cumsum(x: np.ndarray, axis: np.ndarray, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    a = int(axis.reshape(()))
    y = np.flip(x, a) if reverse else x
    out = np.cumsum(y, axis=a, dtype=x.dtype)
    if exclusive:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=a)),
                              np.take(out, range(out.shape[a] - 1), axis=a)], axis=a)
    return np.flip(out, a) if reverse else out


def _fold_mask(node: ir.Node, attrs: dict[str, object]) -> np.ndarray | None:
    """Integer/boolean results up to MASK_ELEMENTS from Constant-node inputs, else None."""
    if node.op_type not in _MASK_OPS:
        return None
    arrays: list[np.ndarray | None] = []
    for v in node.inputs:
        if v is None:
            arrays.append(None)
            continue
        if v.is_initializer() or v.is_graph_input():
            return None
        data = folding.constant_data(v)
        if data is None or data.size > MASK_ELEMENTS or data.dtype.kind not in "biu":
            return None
        arrays.append(data)
    if not arrays or any(a is None for a in arrays[:1]):
        return None
    try:
        if node.op_type == "GatherND":
            result = _gather_nd(arrays[0], arrays[1], int(attrs.get("batch_dims", 0)))  # type: ignore[arg-type]
        elif node.op_type == "Trilu":
            x = arrays[0]
            k = 0 if len(arrays) < 2 or arrays[1] is None else int(arrays[1].reshape(()))
            assert x is not None and x.ndim >= 2
            result = np.triu(x, k) if int(attrs.get("upper", 1)) else np.tril(x, k)
        elif node.op_type == "CumSum":
            result = _cumsum(arrays[0], arrays[1], int(attrs.get("exclusive", 0)),  # type: ignore[arg-type]
                             int(attrs.get("reverse", 0)))
        else:
            result = folding._evaluate(node.op_type, arrays, attrs)
    except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, AssertionError):
        return None
    if result is None:
        return None
    result = np.asarray(result)
    if result.dtype.kind not in "biu" or result.size > MASK_ELEMENTS:
        return None
    return result


def _unit_operand(node: ir.Node) -> ir.Value | None:
    """x of Mul(x, 1), Mul(1, x) or Div(x, 1) with the 1 a Constant node (never an initializer,
    which apply_weights may replace) of at most x's rank, one element, x's dtype: the product
    is x exactly (x * 1 is x in IEEE arithmetic, NaN and -0 included) and of x's shape."""
    if node.op_type not in ("Mul", "Div") or len(node.inputs) != 2:
        return None
    out = node.outputs[0]
    for i, j in ((1, 0), (0, 1)) if node.op_type == "Mul" else ((1, 0),):
        data, x = f.literal_scalar(node.inputs[i]), node.inputs[j]
        if data is None or x is None or float(data.reshape(())) != 1.0:
            continue
        if x.dtype is None or x.dtype != out.dtype or x.dtype.numpy() != data.dtype or \
                x.shape is None or data.ndim > len(x.shape):
            continue
        return x
    return None


class FoldConstantsPass(ir.passes.InPlacePass):
    """Fold constant subexpressions of the main graph; drop multiplications by a constant 1
    and Identity nodes (not graph outputs)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph
        for node in list(graph):
            if node.domain or len(node.outputs) != 1 or node.op_type == "Constant":
                continue
            x = node.inputs[0] if node.op_type == "Identity" and len(node.inputs) == 1 \
                else _unit_operand(node)
            if x is not None and not node.outputs[0].is_graph_output():
                ir.convenience.replace_all_uses_with(node.outputs[0], x)
                graph.remove(node, safe=True)
                modified = True
                continue
            attrs = {name: _attr_value(a) for name, a in node.attributes.items()}
            result = folding.try_fold(node.op_type, list(node.inputs), attrs)
            if result is None:
                result = _fold_mask(node, attrs)
            if result is None:
                continue
            tensor = ir.tensor(result)
            old = node.outputs[0]
            const = ir.Node("", "Constant", [], [ir.AttrTensor("value", tensor)], name=node.name)
            new = const.outputs[0]
            new.name = old.name
            new.const_value = tensor
            new.dtype = tensor.dtype
            new.shape = ir.Shape(result.shape)
            graph.insert_before(node, const)
            ir.convenience.replace_all_uses_with(old, new)
            if old.is_graph_output():
                graph.outputs[graph.outputs.index(old)] = new
            graph.remove(node, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)


def _attr_value(attr: ir.Attr) -> object:
    if attr.type == ir.AttributeType.TENSOR:
        return attr.as_tensor()
    return attr.value
