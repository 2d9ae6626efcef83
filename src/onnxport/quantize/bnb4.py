"""bitsandbytes-style 4-bit weights (NF4 or FP4) as `com.microsoft.MatMulBnb4`, on onnx-ir.

Every MatMul/Gemm of the main graph whose second operand is a constant 2-D float weight
W[K, N] (the operands `quantize_weights` takes) becomes

    MatMulBnb4(A, B, absmax; K, N, block_size, quant_type)      (+ Add of a Gemm's bias)

ONNX Runtime's contrib op (CPU, CUDA, WebGPU): B is W transposed to [N, K], flattened,
cut into blocks of `block_size` consecutive values, each block divided by its largest
magnitude (`absmax`, one float per block, the activation's dtype) and rounded to the nearest
of 16 levels: NF4's (quant_type 1, the normal-distribution quantiles of QLoRA) or FP4's
(quant_type 0, a 1-2-1 float with a bias of 3). Two codes share a byte, the even flat index
in the high nibble; the value is level[code] * absmax[flat // block_size].

transformers.js's `dtype: "bnb4"` file (`model_bnb4.onnx`) is this form, NF4 in blocks of 64.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.errors import QuantizationError
from onnxport.passes import _fusion as f
from onnxport.quantize.rtn import (_attr_int, _initializer, _plain_gemm, _remove_dead,
                                   _weight)

__all__ = ["FP4", "NF4", "LEVELS", "dequantize_bnb4", "quantize_bnb4", "quantize_bnb4_weights"]

FP4, NF4 = 0, 1
# The 16 levels of each type, by code (levels in units of the block's absmax).
LEVELS = {
    NF4: np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                   -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                   0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                   0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                   0.7229568362236023, 1.0], np.float32),
    # sign bit, 2 exponent bits (bias 3), 1 mantissa bit, scaled so that the largest is 1
    FP4: np.array([0.0, 0.005208333333, 0.66666667, 1.0, 0.33333333, 0.5, 0.16666667,
                   0.25, -0.0, -0.005208333333, -0.66666667, -1.0, -0.33333333, -0.5,
                   -0.16666667, -0.25], np.float32),
}


def quantize_bnb4(w_nk: np.ndarray, *, block_size: int = 64, quant_type: int = NF4
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(packed uint8 [(N*K + 1) // 2], absmax float32 [ceil(N*K / block_size)]) of the
    [N, K] matrix `w_nk`, MatMulBnb4's B and absmax."""
    if quant_type not in LEVELS:
        raise QuantizationError(f"bnb4 quant_type must be {FP4} (FP4) or {NF4} (NF4), "
                                f"not {quant_type}")
    if block_size < 16 or block_size & (block_size - 1):
        raise QuantizationError(f"bnb4 block_size must be a power of two >= 16, not "
                                f"{block_size}")
    flat = np.asarray(w_nk, np.float32).ravel()
    n = flat.size
    blocks = -(-n // block_size)
    padded = np.zeros(blocks * block_size, np.float32)
    padded[:n] = flat
    padded = padded.reshape(blocks, block_size)
    absmax = np.abs(padded).max(axis=1)
    scaled = padded / np.where(absmax == 0, 1, absmax)[:, None]
    levels = LEVELS[quant_type]
    # nearest level: the midpoints between the sorted levels split the range
    order = np.argsort(levels, kind="stable")
    ordered = levels[order]
    mids = (ordered[1:] + ordered[:-1]) / 2
    codes = order[np.searchsorted(mids, scaled.ravel()[:n], side="left")].astype(np.uint8)
    if n % 2:
        codes = np.append(codes, np.uint8(0))
    packed = (codes[0::2] << 4) | codes[1::2]
    return packed.astype(np.uint8), absmax.astype(np.float32)


def dequantize_bnb4(packed: np.ndarray, absmax: np.ndarray, n: int, k: int, *,
                    block_size: int = 64, quant_type: int = NF4) -> np.ndarray:
    """The [N, K] float32 matrix `quantize_bnb4` packed."""
    codes = np.empty(packed.size * 2, np.uint8)
    codes[0::2], codes[1::2] = packed >> 4, packed & 0xF
    values = LEVELS[quant_type][codes[:n * k]]
    return (values * np.repeat(absmax, block_size)[:n * k]).reshape(n, k).astype(np.float32)


def quantize_bnb4_weights(model: ir.Model, *, block_size: int = 64, quant_type: int = NF4
                          ) -> list[str]:
    """Rewrite, in place, `model`'s MatMul/Gemm nodes with constant 2-D weights as
    MatMulBnb4 (see the module notes). Returns the names of the nodes rewritten."""
    quantize_bnb4(np.zeros((1, 1), np.float32), block_size=block_size, quant_type=quant_type)
    graph = model.graph
    namer = f.Namer(graph)
    taken = set(graph.initializers) | namer.taken
    done: list[str] = []
    for node in list(graph):
        if node.domain or node.op_type not in ("MatMul", "Gemm"):
            continue
        a, b = node.inputs[0], node.inputs[1]
        if a is None or b is None:
            continue
        dtype = a.dtype or b.dtype  # an activation not typed yet computes in the weight's
        if dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16):
            continue
        if node.op_type == "Gemm" and not _plain_gemm(node):
            continue
        found = _weight(b)
        if found is None:
            continue
        data, sources, computed = found
        if node.op_type == "Gemm" and _attr_int(node, "transB"):
            data = data.T
        k, n = data.shape
        packed, absmax = quantize_bnb4(data.T, block_size=block_size, quant_type=quant_type)
        base = sources[0][0] if len(sources) == 1 and sources[0][0] else f"{node.name}.weight"
        inputs = [a, _initializer(graph, taken, f"{base}_Bnb4", packed, ir.DataType.UINT8),
                  _initializer(graph, taken, f"{base}_absmax",
                               absmax.astype(dtype.numpy()), dtype)]
        mm = f.make_node(namer, node, "MatMulBnb4", inputs,
                         {"K": k, "N": n, "block_size": block_size, "quant_type": quant_type},
                         dtype=dtype, domain="com.microsoft")
        bias = node.inputs[2] if node.op_type == "Gemm" and len(node.inputs) > 2 else None
        new = [mm] + ([f.make_node(namer, node, "Add", [mm.outputs[0], bias], dtype=dtype)]
                      if bias is not None else [])
        f.replace(graph, [node], new, node.outputs[0], new[-1].outputs[0])
        old_inputs = [v for c in computed for v in c.inputs if v is not None]
        _remove_dead(graph, computed, [b, *old_inputs])
        done.append(node.name or "")
    if done:
        model.opset_imports.setdefault("com.microsoft", 1)
    return done
