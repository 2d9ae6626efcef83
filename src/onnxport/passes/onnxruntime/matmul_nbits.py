"""FuseMatMulNBitsPass: a weight-only quantized matmul as ONNX Runtime's MatMulNBits.

Matched wherever a MatMul or Gemm multiplies a float activation by a dequantized constant
weight, in any of the layouts the translations and other exporters write:

    MatMul(A, DequantizeLinear(W[K, N], axis=0, block_size) )       blocks along K
    MatMul(A, Transpose(DequantizeLinear(W[N, K], axis=1, block_size)))
    Gemm(A, DequantizeLinear(W[N, K], ...), [bias], transB=1)      a Linear
    Gemm(A, DequantizeLinear(W[K, N], ...), [bias], transB=0)

and the per-output-channel (axis along N, no block size) and per-tensor forms of each, which
are the blocked form with every block of a row sharing its scale; each also with the weight
as the Cast/Reshape/Sub/Mul arithmetic FoldableWeightDequantPass (a default pass) writes. W is a 4-bit (INT4/UINT4)
or 8-bit (INT8/UINT8) constant. It becomes

    com.microsoft.MatMulNBits(A, B, scales, [zero_points], bias=...)   K, N, bits, block_size

following ORT's ContribOperators.md: B is uint8 [N, n_blocks, block_size * bits / 8], the
values of each block packed along K (4 bits: the first value in the low nibble); scales are
[N, n_blocks] of A's type; zero points are uint8 [N, ceil(n_blocks * bits / 8)] packed the
same way, omitted when they are all the default 2^(bits-1). Signed weights are stored as
unsigned (q + 2^(bits-1), zero point + 2^(bits-1)): the same (q - zero_point) * scale.
block_size must be a power of two >= 16: a blocked DequantizeLinear of another block size is
left alone; per channel / per tensor take the pass's `block_size` (32, as ONNX Runtime GenAI's
builder for CPU int4), K padded to whole blocks (with zero-point values, which multiply
nothing).

`accuracy_level` (default 0: A stays float32, the weight is dequantized exactly and the sum
is a float32 matmul, matching DequantizeLinear + MatMul up to summation order) is passed to
the node; 4 lets ORT quantize A to int8 per block, faster but no longer exact.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f
from onnxport.passes.foldable_weight_dequant import dequantized_weight
from onnxport.passes.onnxruntime import CONTRIB_DOMAIN

_BITS = {ir.DataType.INT4: (4, True), ir.DataType.UINT4: (4, False),
         ir.DataType.INT8: (8, True), ir.DataType.UINT8: (8, False)}
_KERNEL_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16)


def _attr(node: ir.Node, name: str, default: int | float) -> int | float:
    a = node.attributes.get(name)
    return default if a is None else a.value


def _pow2(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


def _pack(values: np.ndarray, bits: int) -> np.ndarray:
    """uint8 values (< 2^bits) along the last axis, packed: 8 bits as is, 4 bits two per byte
    with the first in the low nibble (an odd count padded with 0)."""
    if bits == 8:
        return values.astype(np.uint8)
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros((*values.shape[:-1], 1), values.dtype)], -1)
    v = values.astype(np.uint8)
    return (v[..., 0::2] | (v[..., 1::2] << 4)).astype(np.uint8)


class _Weight:
    """A dequantized constant weight, normalized to [N, K] with per-(row, block) parameters."""

    def __init__(self, q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, block: int,
                 bits: int, signed: bool) -> None:
        self.q, self.scale, self.zero = q, scale, zero   # [N, K], [N, K/block], [N, K/block]
        self.block, self.bits, self.signed = block, bits, signed


def _read_weight(value: ir.Value | None, n_axis: int, block_size: int,
                 bits_allowed: tuple[int, ...] = (4, 8)) -> tuple[_Weight, list[ir.Node]] | None:
    """The constant weight `value` dequantizes (DequantizeLinear, or the arithmetic
    FoldableWeightDequantPass writes), [K, N] (`n_axis` 1) or [N, K] (`n_axis` 0), as [N, K]
    with the nodes computing it; None when it is not a 4/8-bit 2-D weight. Per channel and per
    tensor weights take `block_size`."""
    d = dequantized_weight(value)
    if d is None or d.dtype not in _BITS or len(d.shape) != 2 \
            or _BITS[d.dtype][0] not in bits_allowed:
        return None
    bits, signed = _BITS[d.dtype]
    q, s, z = d.ints(), d.scale, d.zero
    if n_axis == 1:
        q = q.T
    n, k = q.shape
    k_axis = 1 - n_axis
    block = d.block
    if block:
        if d.axis != k_axis or not _pow2(block):
            return None
        s = s.T if n_axis == 1 else s
        z = None if z is None else (z.T if n_axis == 1 else z)
    else:
        if s.ndim == 0:
            s_row, z_row = np.full(n, s), None if z is None else np.full(n, z)
        elif d.axis == n_axis:
            s_row, z_row = s, z
        else:
            return None
        block = block_size
        nb = -(-k // block)
        s = np.repeat(s_row.reshape(n, 1), nb, 1)
        z = None if z_row is None else np.repeat(np.asarray(z_row).reshape(n, 1), nb, 1)
    return _Weight(q, s.astype(np.float32), None if z is None else np.asarray(z, np.int32),
                   block, bits, signed), d.nodes


class FuseMatMulNBitsPass(f.MatchRewritePass):
    """MatMul/Gemm of a 4- or 8-bit dequantized constant weight as com.microsoft.MatMulNBits."""

    def __init__(self, bits: tuple[int, ...] = (4, 8), accuracy_level: int = 0,
                 block_size: int = 32, pack: bool = True) -> None:
        super().__init__()
        if not _pow2(block_size):
            raise ValueError(f"block_size must be a power of two >= 16, got {block_size}")
        self.bits = bits
        self.accuracy_level = accuracy_level
        self.block_size = block_size
        self.pack = pack

    op_types = ("Gemm", "MatMul")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        result = super().call(model)
        if result.modified:
            model.opset_imports.setdefault(CONTRIB_DOMAIN, 1)
            if self.pack:
                for graph in f.graphs(model):
                    _pack_siblings(graph, f.Namer(graph))
        return result

    def _match(self, node: ir.Node) -> tuple[list[ir.Node], _Weight, ir.Value | None] | None:
        """(the weight's nodes to drop if unused, the weight, the bias)."""
        a = node.inputs[0]
        if a is None or a.dtype not in _KERNEL_TYPES or f.rank(a) is None or f.rank(a) < 1:
            return None
        bias = None
        if node.op_type == "Gemm":
            if _attr(node, "transA", 0) or _attr(node, "alpha", 1.0) != 1.0 \
                    or _attr(node, "beta", 1.0) != 1.0:
                return None
            w, chain = node.inputs[1], []
            n_axis = 0 if _attr(node, "transB", 0) else 1
            bias = node.inputs[2] if len(node.inputs) > 2 else None
        else:
            transpose = f.producer(node.inputs[1], "Transpose")
            if transpose is not None:
                perm = transpose.attributes.get("perm")
                if perm is not None and list(perm.as_ints()) != [1, 0]:
                    return None
                w, n_axis, chain = transpose.inputs[0], 0, [transpose]
            else:
                w, n_axis, chain = node.inputs[1], 1, []
        read = _read_weight(w, n_axis, self.block_size, self.bits)
        if read is None or read[0].bits not in self.bits:
            return None
        weight = read[0]
        if weight.q.shape[1] != (a.shape[-1] if a.shape is not None else None):
            return None
        return chain + read[1], weight, bias

    def _rewrite(self, graph: ir.Graph, namer: f.Namer, node: ir.Node, chain: list[ir.Node],
                 weight: _Weight, bias: ir.Value | None) -> None:
        a = node.inputs[0]
        dtype = a.dtype
        n, k = weight.q.shape
        bits, block = weight.bits, weight.block
        nb = -(-k // block)
        offset = 1 << (bits - 1) if weight.signed else 0
        zero = (np.full((n, nb), 0, np.int32) if weight.zero is None else weight.zero) + offset
        # values as unsigned, K padded to whole blocks with each block's zero point
        q = weight.q + offset
        pad = nb * block - k
        if pad:
            q = np.concatenate([q, np.repeat(zero[:, -1:], pad, 1)], 1)
        b_data = _pack(q.reshape(n, nb, block), bits)
        inputs: list[ir.Value | None] = [
            a, namer.constant(node, b_data),
            namer.constant(node, weight.scale.astype(dtype.numpy())),
        ]
        if not np.all(zero == 1 << (bits - 1)):  # else the default zero point
            inputs.append(namer.constant(node, _pack(zero.astype(np.uint8), bits)))
        # a [N] bias is the node's input; any other (broadcast) bias an Add after it
        vector_bias = bias is not None and bias.dtype == dtype and bias.shape is not None \
            and list(bias.shape) == [n]
        if vector_bias:
            inputs += [None] * (5 - len(inputs)) + [bias]
        attrs = {"K": k, "N": n, "bits": bits, "block_size": block}
        if self.accuracy_level:
            attrs["accuracy_level"] = self.accuracy_level
        new = [f.make_node(namer, node, "MatMulNBits", inputs, attrs, domain=CONTRIB_DOMAIN,
                           dtype=dtype)]
        y = new[0].outputs[0]
        if bias is not None and not vector_bias:
            new.append(f.make_node(namer, node, "Add", [y, bias], dtype=dtype))
            y = new[-1].outputs[0]
        f.replace(graph, [node], new, node.outputs[0], y)
        for dead in chain:
            if dead.graph is graph and not any(o.uses() or o.is_graph_output()
                                               for o in dead.outputs):
                inputs_of_dead = [v for v in dead.inputs if v is not None]
                graph.remove(dead, safe=True)
                for v in inputs_of_dead:  # the integer weight and its parameters
                    if v.uses() or v.is_graph_output() or v.is_graph_input():
                        continue
                    const = f.producer(v, "Constant")
                    if const is not None and const.graph is graph:
                        graph.remove(const, safe=True)
                    elif v.name in graph.initializers:
                        del graph.initializers[v.name]


def _packable(node: ir.Node) -> tuple[object, ...] | None:
    """What MatMulNBits nodes packed together share: input, attributes, which inputs they have
    (zero points, bias)."""
    if node.op_type != "MatMulNBits" or node.domain != CONTRIB_DOMAIN or node.inputs[0] is None \
            or (len(node.inputs) > 4 and node.inputs[4] is not None):  # no g_idx
        return None
    attrs = tuple(sorted((k, a.value) for k, a in node.attributes.items() if k != "N"))
    present = tuple(v is not None for v in node.inputs)
    return (id(node.inputs[0]), attrs, present, node.outputs[0].dtype)


def _constants(node: ir.Node) -> list[np.ndarray | None] | None:
    """B, scales, zero points, g_idx, bias of `node` (None where absent); None if one is not
    a constant."""
    data = [None if v is None else f.constant(v) for v in node.inputs[1:]]
    if any(d is None and v is not None for d, v in zip(data, node.inputs[1:])):
        return None
    return data


def _pack_siblings(graph: ir.Graph, namer: f.Namer) -> None:
    """MatMulNBits nodes of the same input (a layer's Q, K, V; gate and up) as one node over
    their weights concatenated along N, then a Split: one kernel call where there were two or
    three (as ONNX Runtime GenAI's builder packs them). Exact: each output column is computed
    from its own packed column of B, scales, zero points and bias. Where the parts are exactly
    a GroupQueryAttention's query, key and value, the packed output is its packed-QKV input."""
    groups: dict[tuple[object, ...], list[ir.Node]] = {}
    for node in graph:
        key = _packable(node)
        if key is not None:
            groups.setdefault(key, []).append(node)
    for nodes in groups.values():
        if len(nodes) < 2:
            continue
        gqa = _gqa_of(nodes)
        if gqa is not None:  # q, k, v in GQA's order
            nodes = [v.producer() for v in gqa.inputs[:3]]  # type: ignore[misc,union-attr]
        consts = [_constants(n) for n in nodes]
        if any(c is None for c in consts):
            continue
        first = nodes[0]
        widths = [int(n.attributes["N"].value) for n in nodes]  # type: ignore[union-attr]
        inputs: list[ir.Value | None] = [first.inputs[0]]
        for i, d in enumerate(consts[0]):  # type: ignore[arg-type]
            inputs.append(None if d is None else namer.constant(
                first, np.concatenate([c[i] for c in consts], 0)))  # type: ignore[index]
        attrs = {k: a.value for k, a in first.attributes.items()}
        attrs["N"] = sum(widths)
        dtype = first.outputs[0].dtype
        packed = f.make_node(namer, first, "MatMulNBits", inputs, attrs, domain=CONTRIB_DOMAIN,
                             dtype=dtype)
        graph.insert_before(first, packed)
        if gqa is not None:
            gqa.replace_input_with(0, packed.outputs[0])
            gqa.replace_input_with(1, None)
            gqa.replace_input_with(2, None)
        else:
            split = ir.node("Split", [packed.outputs[0],
                                      namer.constant(first, np.array(widths, np.int64))],
                            attributes={"axis": -1}, num_outputs=len(nodes),
                            name=namer(first, "Split"), metadata_props=dict(first.metadata_props))
            graph.insert_after(packed, split)
            for node, out in zip(nodes, split.outputs):
                old = node.outputs[0]  # type: ignore[union-attr]
                name = old.name
                old.name = f"{name}__packed" if name else None
                out.name, out.dtype, out.shape = name, old.dtype, old.shape
                ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
        for node in nodes:
            graph.remove(node, safe=True)  # type: ignore[arg-type]


def _gqa_of(nodes: list[ir.Node]) -> ir.Node | None:
    """The GroupQueryAttention whose query, key and value are exactly `nodes`' outputs."""
    if len(nodes) != 3:
        return None
    users = [n.outputs[0].uses() for n in nodes]
    if any(len(u) != 1 or n.outputs[0].is_graph_output() for u, n in zip(users, nodes)):
        return None
    gqa = users[0][0][0]
    if gqa.op_type != "GroupQueryAttention" or gqa.domain != CONTRIB_DOMAIN:
        return None
    if {(u[0][0] is gqa, u[0][1]) for u in users} != {(True, 0), (True, 1), (True, 2)}:
        return None
    return gqa
