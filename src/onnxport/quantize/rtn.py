"""Round-to-nearest (RTN) weight quantization in blocks, on an onnx-ir model.

Every MatMul/Gemm of the main graph whose second operand is a constant 2-D float weight (an
initializer, its Transpose, or a Concat of those along the output axis, as the ONNX Runtime
target's fused Q/K/V projection writes it) gets an integer weight read through

    DequantizeLinear(Wq[K, N], scale[ceil(K / block), N], [zero_point], axis=0, block_size)

(blocks of `block_size` consecutive input features of one output column), the form ONNX
Runtime folds into MatMulNBits at load (a Gemm becomes MatMul + Add of its bias, as ORT folds
no DequantizeLinear + Gemm) and that `FuseMatMulNBitsPass` rewrites under the ONNX
Runtime target. `block_size=0` quantizes per output channel instead (scale [N], axis 1),
which needs no opset 21 for 8 bits. Embedding tables (Gather) and products of two
activations are left alone.

The arithmetic is the one ONNX Runtime's own blockwise quantizer (MLAS, which the GenAI
builder's `-p int4` calls) uses, so the two produce the same integers up to ties:

* symmetric: the block's value of largest magnitude `m` (with its sign) maps to the lowest
  integer, scale = m / -2^(bits-1); q = clip(round(w / scale), -2^(bits-1), 2^(bits-1)-1),
  stored signed (INT4/INT8) with no zero point. The whole [-8, 7] range is used, one more
  step than the absmax / 7 convention.
* asymmetric: the range [min(w, 0), max(w, 0)] over 2^bits - 1 steps, zero point
  round(-min / scale), q = clip(round(w / scale) + zero point, 0, 2^bits - 1), stored
  unsigned (UINT4/UINT8) with its zero point.

Rounding is to nearest even, as ONNX's QuantizeLinear. A block of zeros gets scale 0 (its
values dequantize to 0 exactly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np
import onnx_ir as ir

from onnxport.errors import QuantizationError
from onnxport.passes import _fusion as f

__all__ = ["QuantizedWeights", "dequantize_blocks", "quantize_blocks", "quantize_weights"]

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_QTYPES = {(4, True): ir.DataType.INT4, (4, False): ir.DataType.UINT4,
           (8, True): ir.DataType.INT8, (8, False): ir.DataType.UINT8}


@dataclasses.dataclass
class QuantizedWeights:
    """What `quantize_weights` did: the quantized products and the weights they read."""

    bits: int
    block_size: int
    symmetric: bool
    nodes: list[str] = dataclasses.field(default_factory=list)
    # The initializers whose values were quantized, by name (several for a fused Q/K/V
    # weight): each quantized [K, N] as `quantize_blocks` does, whatever its stored layout.
    weights: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    layouts: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> "kn" | "nk"


def quantize_blocks(w: np.ndarray, *, bits: int = 4, block_size: int = 32,
                    symmetric: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """RTN-quantize a [K, N] weight in blocks along K (see the module notes).

    Returns (q [K, N] int32, scale [ceil(K / block), N] float32, zero point of the scale's
    shape int32, or None when symmetric); `block_size=0`: one block per column, scale [N].
    """
    if bits not in (4, 8):
        raise QuantizationError(f"bits must be 4 or 8, got {bits!r}")
    if block_size < 0 or (block_size and block_size & (block_size - 1)) or 0 < block_size < 16:
        raise QuantizationError(f"block_size must be 0 (per channel) or a power of two >= 16, "
                                f"got {block_size!r}")
    w = np.asarray(w, dtype=np.float32)
    k, n = w.shape
    block = block_size or k
    nb = -(-k // block)
    padded = np.zeros((nb * block, n), np.float32)
    padded[:k] = w  # zeros change neither the largest magnitude nor [min(w, 0), max(w, 0)]
    blocks = padded.reshape(nb, block, n)
    half = 1 << (bits - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if symmetric:
            idx = np.abs(blocks).argmax(axis=1)
            m = np.take_along_axis(blocks, idx[:, None, :], axis=1)[:, 0, :]
            scale = (m / np.float32(-half)).astype(np.float32)
            q = np.rint(blocks / scale[:, None, :])
            q = np.where(scale[:, None, :] == 0, 0, q)
            q = np.clip(q, -half, half - 1)
            zero = None
        else:
            lo = np.minimum(blocks.min(axis=1), 0)
            hi = np.maximum(blocks.max(axis=1), 0)
            scale = ((hi - lo) / np.float32(2 * half - 1)).astype(np.float32)
            zero = np.where(scale == 0, half, np.clip(np.rint(-lo / scale), 0, 2 * half - 1))
            q = np.rint(blocks / scale[:, None, :]) + zero[:, None, :]
            q = np.where(scale[:, None, :] == 0, zero[:, None, :], q)
            q = np.clip(q, 0, 2 * half - 1)
            zero = zero.astype(np.int32)
    q = q.reshape(nb * block, n)[:k].astype(np.int32)
    if not block_size:
        return q, scale[0], None if zero is None else zero[0]
    return q, scale, zero


def dequantize_blocks(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None,
                      block_size: int) -> np.ndarray:
    """(q - zero) * scale per block along K: what DequantizeLinear computes, float32 [K, N]."""
    k = q.shape[0]
    s = np.asarray(scale, np.float32).reshape(-1, q.shape[1])
    z = np.zeros(s.shape, np.int32) if zero is None else np.asarray(zero).reshape(s.shape)
    block = block_size or k
    s = np.repeat(s, block, axis=0)[:k]
    z = np.repeat(z, block, axis=0)[:k]
    return ((q.astype(np.int32) - z).astype(np.float32) * s).astype(np.float32)


def _weight(value: ir.Value | None) -> tuple[np.ndarray, list[tuple[str, str]], list[ir.Node]] | None:
    """The constant [K, N] operand `value` of a MatMul: (data, [(initializer, "kn"|"nk")],
    the Transpose/Concat nodes computing it); None when it is not a constant weight."""
    if value is None or value.dtype not in _FLOATS:
        return None
    if value.shape is not None and len(value.shape) != 2:
        return None
    node = value.producer()
    if node is None or node.op_type == "Constant":
        data = f.constant(value)
        if data is None or data.ndim != 2:
            return None
        return data, [(value.name or "", "kn")], []
    if node.domain:
        return None
    if node.op_type == "Transpose":
        perm = node.attributes.get("perm")
        src = node.inputs[0]
        data = f.constant(src)
        if data is None or data.ndim != 2 or (perm is not None and list(perm.as_ints()) != [1, 0]):
            return None
        return data.T, [(src.name or "", "nk")], [node]  # type: ignore[union-attr]
    if node.op_type == "Concat":
        axis = node.attributes.get("axis")
        if axis is None or axis.as_int() not in (1, -1):
            return None
        parts = [_weight(v) for v in node.inputs]
        if any(p is None for p in parts):
            return None
        data = np.concatenate([p[0] for p in parts], axis=1)  # type: ignore[index]
        sources = [s for p in parts for s in p[1]]  # type: ignore[union-attr]
        return data, sources, [node] + [n for p in parts for n in p[2]]  # type: ignore[union-attr]
    return None


def _plain_gemm(node: ir.Node) -> bool:
    """A Gemm that is A @ B (+ C): no transposed A, alpha and beta 1."""
    def attr(name: str, default: float) -> float:
        a = node.attributes.get(name)
        return default if a is None else float(a.value)

    return not attr("transA", 0) and attr("alpha", 1.0) == 1.0 and attr("beta", 1.0) == 1.0


def _attr_int(node: ir.Node, name: str) -> int:
    a = node.attributes.get(name)
    return 0 if a is None else int(a.as_int())


def _initializer(graph: ir.Graph, taken: set[str], name: str, array: np.ndarray,
                 dtype: ir.DataType) -> ir.Value:
    if dtype in (ir.DataType.INT4, ir.DataType.UINT4):
        import ml_dtypes  # onnx-ir's representation of 4-bit types

        array = array.astype(np.int8).astype(
            ml_dtypes.int4 if dtype == ir.DataType.INT4 else ml_dtypes.uint4)
    elif dtype in (ir.DataType.INT8, ir.DataType.UINT8):
        array = array.astype(dtype.numpy())
    unique, i = name, 0
    while unique in taken:
        i += 1
        unique = f"{name}_{i}"
    taken.add(unique)
    tensor = ir.Tensor(array, dtype=dtype, name=unique)
    value = ir.Value(name=unique, type=ir.TensorType(dtype), shape=ir.Shape(list(array.shape)),
                     const_value=tensor)
    graph.initializers[unique] = value
    return value


def _remove_dead(graph: ir.Graph, nodes: Iterable[ir.Node], values: Iterable[ir.Value]) -> None:
    for node in nodes:
        if node.graph is graph and not any(o.uses() or o.is_graph_output() for o in node.outputs):
            graph.remove(node, safe=True)
    for v in values:
        if v.name in graph.initializers and not v.uses() and not v.is_graph_output():
            del graph.initializers[v.name]


def quantize_weights(model: ir.Model, *, bits: int = 4, block_size: int = 32,
                     symmetric: bool = True, exclude: Iterable[str] = (),
                     ) -> QuantizedWeights:
    """RTN-quantize, in place, the constant weights of `model`'s MatMul and Gemm nodes.

    Args:
        model: An onnx-ir model; blocked quantization (and any 4-bit type) needs its default
            opset to be 21 or newer.
        bits: 4 (INT4/UINT4) or 8 (INT8/UINT8).
        block_size: Input features per scale, a power of two >= 16 (32, as the GenAI
            builder); 0: one scale per output channel.
        symmetric: Signed values and no zero point (the builder's default) or unsigned values
            with a zero point per block.
        exclude: Names of MatMul/Gemm nodes, or of weight initializers, to leave in float.

    Returns:
        A `QuantizedWeights` naming the nodes rewritten and the initializers they read.

    Raises:
        QuantizationError: bits, block size or the model's opset cannot express the request.
    """
    opset = model.opset_imports.get("", 0)
    if (bits == 4 or block_size) and opset < 21:
        what = "4-bit weights" if bits == 4 else "blocked DequantizeLinear (block_size)"
        raise QuantizationError(f"{what} need opset 21 or newer; the model has opset {opset} "
                                f"(export with opset_version=21, or use block_size=0 with "
                                f"bits=8)")
    quantize_blocks(np.zeros((1, 1), np.float32), bits=bits, block_size=block_size)  # checks
    skip = set(exclude)
    graph = model.graph
    namer = f.Namer(graph)
    taken = set(graph.initializers) | namer.taken
    qtype = _QTYPES[(bits, symmetric)]
    done = QuantizedWeights(bits, block_size, symmetric)
    for node in list(graph):
        if node.domain or node.op_type not in ("MatMul", "Gemm") or node.name in skip:
            continue
        a, b = node.inputs[0], node.inputs[1]
        if a is None or a.dtype not in _FLOATS or b is None:
            continue
        trans_b = False
        if node.op_type == "Gemm":
            if _attr_int(node, "transA"):
                continue
            trans_b = bool(_attr_int(node, "transB"))
        found = _weight(b)
        if found is None:
            continue
        data, sources, computed = found
        if trans_b:
            data = data.T
            sources = [(s, "kn" if lay == "nk" else "nk") for s, lay in sources]
        if any(s in skip for s, _ in sources) or data.ndim != 2:
            continue
        k, n = data.shape
        q, scale, zero = quantize_blocks(data, bits=bits, block_size=block_size,
                                         symmetric=symmetric)
        base = sources[0][0] if len(sources) == 1 and sources[0][0] else f"{node.name}.weight"
        inputs = [_initializer(graph, taken, f"{base}_Q{bits}", q, qtype),
                  _initializer(graph, taken, f"{base}_scale",
                               scale.astype(b.dtype.numpy()), b.dtype)]  # type: ignore[union-attr]
        if zero is not None:
            inputs.append(_initializer(graph, taken, f"{base}_zero_point", zero, qtype))
        attrs: dict[str, object] = {"axis": 0, "block_size": block_size} if block_size \
            else {"axis": 1}
        dq = f.make_node(namer, node, "DequantizeLinear", inputs, attrs, dtype=b.dtype,
                         shape=ir.Shape([k, n]))
        graph.insert_before(node, dq)
        name = node.name or ""
        if node.op_type == "Gemm" and _plain_gemm(node):
            # ONNX Runtime fuses DequantizeLinear + MatMul into MatMulNBits at load, never
            # DequantizeLinear + Gemm (which would dequantize at every call).
            bias = node.inputs[2] if len(node.inputs) > 2 else None
            mm = f.make_node(namer, node, "MatMul", [a, dq.outputs[0]], dtype=a.dtype)
            new = [mm] + ([f.make_node(namer, node, "Add", [mm.outputs[0], bias],
                                       dtype=a.dtype)] if bias is not None else [])
            f.replace(graph, [node], new, node.outputs[0], new[-1].outputs[0])
        else:
            node.replace_input_with(1, dq.outputs[0])
            if trans_b:
                node.attributes["transB"] = ir.AttrInt64("transB", 0)
        old_inputs = [v for c in computed for v in c.inputs if v is not None]
        _remove_dead(graph, computed, [b, *old_inputs])
        done.nodes.append(name)
        done.weights[name] = tuple(s for s, _ in sources)
        done.layouts.update(dict(sources))
    return done
