"""Weight quantizers on the ONNX IR: model -> model transforms, independent of any CLI.

`quantize_weights` (rtn.py) rewrites the constant weights of MatMul/Gemm nodes as integers
read through a DequantizeLinear: standard ONNX that any runtime loads, and that the ONNX
Runtime target's `FuseMatMulNBitsPass` turns into `com.microsoft.MatMulNBits`.
"""

from __future__ import annotations

from onnxport.quantize.rtn import (
    QuantizedWeights,
    dequantize_blocks,
    quantize_blocks,
    quantize_weights,
)

__all__ = ["QuantizedWeights", "dequantize_blocks", "quantize_blocks", "quantize_weights"]
