"""FuseSkipNormPass: residual Add (+ bias Add) feeding a norm -> ORT's Skip*LayerNormalization.

Matched wherever a normalization over the last axis reads a sum of two tensors of its own
shape (the residual connection), with or without a 1-D bias added to that sum:

    s   = Add(input, skip) [+ bias]            input, skip: same shape, rank 2 or 3
    out = LayerNormalization(s, gamma[, beta])  -> com.microsoft.SkipLayerNormalization
    out = RMSNormalization(s, gamma)            -> com.microsoft.SkipSimplifiedLayerNormalization
    out = Div(s, Sqrt(ReduceMean(Pow(s, 2)) + eps)) [* gamma]   (the RMS form the default
                                                    passes write below opset 23) -> the same

The sum itself is the kernel's `input_skip_bias_sum` output when other nodes read it (the
pre-norm residual stream of GPT-2/Llama blocks). The bias is folded in for SkipLayerNormalization
only (ORT documents a `bias` input for SkipSimplifiedLayerNormalization, but its CPU kernel does
not add it to the returned sum in every release).

A residual that the default passes put into a Linear's Gemm as its C (Gemm(A, W, C=skip)
feeding the norm) is taken back out: Gemm(A, W) is the input and C the skip.

When it pays: ONNX Runtime 1.32's CPU kernels (fp32, 1 thread, measured by
`benchmarks/bench_latency.py --kernels`, docs/benchmarks.md "ORT latency") are *slower* than
Add + LayerNormalization for every size measured (1.4x at one 256-wide row, 7x at 128 rows),
and SkipSimplifiedLayerNormalization is faster than Add + SimplifiedLayerNormalization only up
to ~512 elements (1 x 256, 2 x 256, 1 x 512; even at 1 x 768, slower from 1 x 1024: decode
steps of small models). ORT also forms SkipLayerNormalization by itself when the Add's inputs
are 3-D (FuseRowsPass keeps them 2-D, which avoids that). The pass therefore takes a gate:
`max_elements` (the static element count of the normalized tensor; None = no limit),
`layer_norm` (whether LayerNormalization is fused at all) and `decode_rows` (in a graph that
attends over a KV cache, i.e. holds a GroupQueryAttention or an Attention with past_key, a norm over dynamic rows counts as
one row: such a graph runs one token a step after its prefill, and the prefill's slower norms
cost less than the steps gain). The instance the ONNX Runtime target runs uses the measured
gate: RMS norms only, <= 512 elements, decode rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f
from onnxport.passes import fuse_rms_norm
from onnxport.passes.onnxruntime import CONTRIB_DOMAIN

_KERNEL_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)


@dataclass
class _Norm:
    kind: str                    # "layer" or "rms"
    x: ir.Value                  # the normalized input: the residual sum
    gamma: ir.Value | None       # None: ones of the hidden size
    beta: ir.Value | None
    eps: float
    nodes: list[ir.Node]         # the norm's nodes, ending with the one producing `output`
    output: ir.Value


def _attr(node: ir.Node, name: str, default: int) -> int:
    a = node.attributes.get(name)
    return default if a is None else a.as_int()


def _last_axis(node: ir.Node, r: int) -> bool:
    axis = _attr(node, "axis", -1)
    return axis in (-1, r - 1)


def _unused(values: list[ir.Value]) -> bool:
    return all(not v.uses() and not v.is_graph_output() for v in values)


def _hidden_vector(value: ir.Value | None, hidden: int) -> bool:
    return value is not None and value.shape is not None and list(value.shape) == [hidden]


def _norm(node: ir.Node) -> _Norm | None:
    """`node` as the anchor of a normalization over the last axis."""
    if node.domain:
        return None
    if node.op_type in ("LayerNormalization", "RMSNormalization"):
        x = node.inputs[0]
        r = f.rank(x)
        if x is None or r is None or not _last_axis(node, r) or _attr(node, "stash_type", 1) != 1 \
                or not _unused(list(node.outputs[1:])):
            return None
        kind = "layer" if node.op_type == "LayerNormalization" else "rms"
        eps_attr = node.attributes.get("epsilon")
        eps = 1e-5 if eps_attr is None else eps_attr.as_float()
        beta = node.inputs[2] if kind == "layer" and len(node.inputs) > 2 else None
        return _Norm(kind, x, node.inputs[1], beta, eps, [node], node.outputs[0])
    if node.op_type == "ReduceMean":
        m = fuse_rms_norm._match(node)
        if m is None or not m.ort_form or m.k != 1:
            return None
        return _Norm("rms", m.x, m.weight, None, m.eps, m.nodes, m.nodes[-1].outputs[0])
    return None


@dataclass
class _Sum:
    input: ir.Value
    skip: ir.Value
    bias: ir.Value | None
    nodes: list[ir.Node]
    gemm: ir.Node | None = None   # Gemm(A, B, C=residual): input is this Gemm without C


def _residual_gemm(s: ir.Value, shape: list[int]) -> _Sum | None:
    """`s` as Gemm(A, B, C) with C a residual of s's shape (the default passes put a Linear's
    residual Add into its Gemm): the product is the input, C the skip."""
    gemm = f.producer(s, "Gemm")
    if gemm is None or len(gemm.inputs) < 3 or len(shape) != 2:
        return None
    c = gemm.inputs[2]
    beta = gemm.attributes.get("beta")
    if c is None or not _full(c, shape) or f.constant(c) is not None or \
            (beta is not None and beta.as_float() != 1.0):
        return None
    attrs = {k: a.value for k, a in gemm.attributes.items() if k != "beta"}
    product = ir.node("Gemm", list(gemm.inputs[:2]), attributes=attrs, name=f"{gemm.name}_product",
                      metadata_props=dict(gemm.metadata_props))
    product.outputs[0].name = f"{s.name}_product" if s.name else None
    product.outputs[0].dtype, product.outputs[0].shape = s.dtype, s.shape
    return _Sum(product.outputs[0], c, None, [gemm], product)


def _full(value: ir.Value | None, shape: list[int]) -> bool:
    return f.dims_of(value) == shape


def _sum(s: ir.Value, shape: list[int], with_bias: bool) -> _Sum | None:
    """`s` as Add(input, skip) or, with `with_bias`, Add(Add(input, skip), bias) /
    Add(Add(input, bias), skip) (the inner Add read only by the outer)."""
    add = f.producer(s, "Add")
    if add is None:
        return _residual_gemm(s, shape)
    a, b = add.inputs[0], add.inputs[1]
    if _full(a, shape) and _full(b, shape):
        assert a is not None and b is not None
        if with_bias:   # one side may itself be Add(x, bias)
            for inner_v, other in ((a, b), (b, a)):
                inner = f.producer(inner_v, "Add")
                if inner is None or inner_v.is_graph_output() or len(inner_v.uses()) != 1:
                    continue
                for i in (0, 1):
                    bias = inner.inputs[1 - i]
                    x = inner.inputs[i]
                    if _full(x, shape) and _hidden_vector(bias, shape[-1]) \
                            and f.constant(bias) is not None:
                        assert x is not None
                        return _Sum(x, other, bias, [inner, add])
        return _Sum(a, b, None, [add])
    if not with_bias:
        return None
    for i in (0, 1):
        inner_v, bias = add.inputs[i], add.inputs[1 - i]
        if inner_v is None or not _hidden_vector(bias, shape[-1]) or f.constant(bias) is None:
            continue
        inner = f.producer(inner_v, "Add")
        if inner is None or inner_v.is_graph_output() or len(inner_v.uses()) != 1:
            continue
        x, y = inner.inputs[0], inner.inputs[1]
        if _full(x, shape) and _full(y, shape):
            assert x is not None and y is not None
            return _Sum(x, y, bias, [inner, add])
    return None


def _reads_cache(node: ir.Node) -> bool:
    if node.op_type == "GroupQueryAttention" and node.domain == CONTRIB_DOMAIN:
        return True
    return node.op_type == "Attention" and not node.domain and len(node.inputs) > 4 and \
        node.inputs[4] is not None


class FuseSkipNormPass(ir.passes.InPlacePass):
    """Add(input, skip) [+ bias] -> norm  =>  Skip(Simplified)LayerNormalization (gated)."""

    def __init__(self, max_elements: int | None = None, layer_norm: bool = True,
                 decode_rows: bool = False) -> None:
        super().__init__()
        self.max_elements = max_elements
        self.layer_norm = layer_norm
        self.decode_rows = decode_rows
        self._decoding = False

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in f.graphs(model):
            namer = f.Namer(graph)
            # A graph attending over a KV cache (GroupQueryAttention, or ONNX Attention with a
            # past_key input) runs mostly as decode steps: with `decode_rows`, its norms of
            # dynamic rows are gated as one row each.
            self._decoding = self.decode_rows and any(_reads_cache(n) for n in graph)
            for node in list(graph):
                if node.graph is not graph:
                    continue
                norm = _norm(node)
                if norm is not None and self._fuse(graph, namer, norm):
                    modified = True
        if modified and CONTRIB_DOMAIN not in model.opset_imports:
            model.opset_imports[CONTRIB_DOMAIN] = 1
        return ir.passes.PassResult(model, modified)

    def _fuse(self, graph: ir.Graph, namer: f.Namer, norm: _Norm) -> bool:
        x = norm.x
        if norm.kind == "layer" and not self.layer_norm:
            return False
        if x.dtype not in _KERNEL_TYPES or x.shape is None or len(x.shape) not in (2, 3):
            return False
        shape: list | None = f.static_dims(x, range(len(x.shape)))  # type: ignore[type-arg]
        rows = 1
        if shape is None and self._decoding:    # dynamic rows, counted as one (a decode step)
            dims = list(x.shape)
            if isinstance(dims[-1], int) and all(
                    isinstance(d, int) or d.value is not None for d in dims):
                shape = dims
            rows = int(np.prod([d for d in dims[:-1] if isinstance(d, int)]))
        elif shape is not None:
            rows = int(np.prod(shape[:-1]))
        if shape is None or 0 in shape:
            return False
        hidden = shape[-1]
        if self.max_elements is not None and rows * hidden > self.max_elements:
            return False
        if norm.gamma is not None and not _hidden_vector(norm.gamma, hidden):
            return False
        if norm.beta is not None and not _hidden_vector(norm.beta, hidden):
            return False
        if any(v is not None and v.dtype != x.dtype for v in (norm.gamma, norm.beta)):
            return False
        s = _sum(x, shape, with_bias=norm.kind == "layer")
        if s is None or (s.bias is not None and s.bias.dtype != x.dtype):
            return False
        if s.input is s.skip:
            return False
        inside = {id(n) for n in norm.nodes}
        outside = x.is_graph_output() or any(id(u.node) not in inside for u in x.uses())
        anchor = norm.nodes[0]
        gamma = norm.gamma
        if gamma is None:
            gamma = f.unit_scale(namer, anchor, x, 1)
            if gamma is None:
                return False
        if norm.kind == "layer":
            op = "SkipLayerNormalization"
            inputs: list[ir.Value | None] = [s.input, s.skip, gamma, norm.beta, s.bias]
            while inputs[-1] is None:
                inputs.pop()
        else:
            op = "SkipSimplifiedLayerNormalization"
            inputs = [s.input, s.skip, gamma]
        node = ir.node(op, inputs, attributes={"epsilon": float(norm.eps)}, domain=CONTRIB_DOMAIN,
                       name=namer(anchor, op), metadata_props=dict(anchor.metadata_props),
                       num_outputs=4 if outside else 1)
        out = node.outputs[0]
        out.name = f"{node.name.lstrip('/').replace('/', '_')}_out"
        out.dtype, out.shape = x.dtype, x.shape
        old_nodes = [*s.nodes, *norm.nodes]
        if outside:
            total = node.outputs[3]
            total.dtype, total.shape = x.dtype, x.shape
            order = {id(n): i for i, n in enumerate(graph)}
            # The sum's other readers now read the kernel's input_skip_bias_sum: the fused node
            # goes where the sum was produced (every reader of it comes after that point), so
            # the norm's parameters must be known there.
            last_add = max(s.nodes, key=lambda n: order[id(n)])
            late = []
            for v in (gamma, norm.beta):
                p = None if v is None else v.producer()
                if p is not None and order.get(id(p), -1) > order[id(last_add)]:
                    if p.op_type != "Constant" or p.domain:
                        return False
                    late.append(p)
            for p in late:     # a Constant has no inputs: it can move up
                graph.remove(p)
                graph.insert_before(last_add, p)
            if s.gemm is not None:
                graph.insert_before(s.nodes[0], s.gemm)
            graph.insert_before(last_add, node)
            name = x.name
            x.name = f"{name}__fused" if name else None
            total.name = name
            ir.convenience.replace_all_uses_with(x, total, replace_graph_outputs=True)
            # The norm's own output keeps its name and readers.
            old_out = norm.output
            oname = old_out.name
            old_out.name = f"{oname}__fused" if oname else None
            out.name = oname
            if old_out.shape is not None:
                out.shape = old_out.shape
            ir.convenience.replace_all_uses_with(old_out, out, replace_graph_outputs=True)
            graph.remove(sorted(old_nodes, key=lambda n: -order[id(n)]), safe=True)
        else:
            if s.gemm is not None:
                graph.insert_before(s.nodes[0], s.gemm)
            f.replace(graph, old_nodes, [node], norm.output, out)
        return True


__all__ = ["FuseSkipNormPass"]
