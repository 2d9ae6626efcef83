"""torch.dtype <-> onnx_ir.DataType tables, and what the 8- and 4-bit floats need.

* The float8 types exist in ONNX from opset 19, FLOAT4E2M1 from opset 23
  (`MIN_OPSET`); `opset_error` is the message for a lower opset.
* `torch.float4_e2m1fn_x2` packs two FP4 values per byte (low nibble first) and its shape
  counts bytes; ONNX's FLOAT4E2M1 counts values, so the ONNX shape doubles the last axis
  (`float4_shape`) and initializers are unpacked one value per element (`unpack_float4`),
  as ONNX's numpy representation (ml_dtypes.float4_e2m1fn) holds them.
* `CAST_SATURATE`: the `saturate` attribute of a Cast to a float8 type that rounds like
  PyTorch's conversion: float8_e4m3fn saturates to +-448 (inf included), the other three
  do not (e5m2 overflows to +-inf, the fnuz types to NaN).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import torch

TORCH_TO_IR: dict[torch.dtype, ir.DataType] = {
    torch.float32: ir.DataType.FLOAT,
    torch.float16: ir.DataType.FLOAT16,
    torch.bfloat16: ir.DataType.BFLOAT16,
    torch.float64: ir.DataType.DOUBLE,
    torch.int8: ir.DataType.INT8,
    torch.int16: ir.DataType.INT16,
    torch.int32: ir.DataType.INT32,
    torch.int64: ir.DataType.INT64,
    torch.uint8: ir.DataType.UINT8,
    torch.uint16: ir.DataType.UINT16,
    torch.uint32: ir.DataType.UINT32,
    torch.uint64: ir.DataType.UINT64,
    torch.bool: ir.DataType.BOOL,
    torch.complex64: ir.DataType.COMPLEX64,
    torch.complex128: ir.DataType.COMPLEX128,
    torch.float8_e4m3fn: ir.DataType.FLOAT8E4M3FN,
    torch.float8_e4m3fnuz: ir.DataType.FLOAT8E4M3FNUZ,
    torch.float8_e5m2: ir.DataType.FLOAT8E5M2,
    torch.float8_e5m2fnuz: ir.DataType.FLOAT8E5M2FNUZ,
    torch.float4_e2m1fn_x2: ir.DataType.FLOAT4E2M1,
}
IR_TO_TORCH: dict[ir.DataType, torch.dtype] = {v: k for k, v in TORCH_TO_IR.items()}

FLOAT8 = frozenset({ir.DataType.FLOAT8E4M3FN, ir.DataType.FLOAT8E4M3FNUZ,
                    ir.DataType.FLOAT8E5M2, ir.DataType.FLOAT8E5M2FNUZ})

MIN_OPSET: dict[ir.DataType, int] = {
    **{t: 19 for t in FLOAT8},
    ir.DataType.FLOAT4E2M1: 23,
}

CAST_SATURATE: dict[ir.DataType, int] = {
    ir.DataType.FLOAT8E4M3FN: 1,
    ir.DataType.FLOAT8E4M3FNUZ: 0,
    ir.DataType.FLOAT8E5M2: 0,
    ir.DataType.FLOAT8E5M2FNUZ: 0,
}


def to_ir(dtype: torch.dtype) -> ir.DataType:
    """The ONNX data type of a torch dtype."""
    return TORCH_TO_IR[dtype]


def to_torch(dtype: ir.DataType) -> torch.dtype:
    """The torch dtype of an ONNX data type."""
    return IR_TO_TORCH[dtype]


def opset_error(dtype: torch.dtype, opset: int) -> str | None:
    """Why `dtype` cannot appear in a model of `opset`, or None when it can."""
    onnx_type = TORCH_TO_IR.get(dtype)
    needed = MIN_OPSET.get(onnx_type) if onnx_type is not None else None
    if needed is None or opset >= needed:
        return None
    return (f"{dtype} (ONNX {onnx_type.name}) needs opset {needed} or higher, the export "
            f"targets opset {opset}; pass opset_version={needed} (or higher)")


def float4_shape(shape: Any) -> list[Any]:
    """The ONNX (one value per element) shape of a float4_e2m1fn_x2 tensor shape."""
    dims = list(shape)
    if not dims:
        raise ValueError("a float4_e2m1fn_x2 tensor has at least one axis (two values per byte)")
    dims[-1] = dims[-1] * 2
    return dims


def unpack_float4(tensor: torch.Tensor) -> np.ndarray:
    """A float4_e2m1fn_x2 tensor as ONNX holds FLOAT4E2M1: one value per element, low
    nibble first, as ml_dtypes.float4_e2m1fn."""
    packed = tensor.detach().cpu().contiguous().view(torch.uint8).numpy()
    out = np.empty((*packed.shape[:-1], packed.shape[-1], 2), dtype=np.uint8)
    out[..., 0] = packed & 0x0F
    out[..., 1] = packed >> 4
    return out.reshape(float4_shape(packed.shape)).view(ir.DataType.FLOAT4E2M1.numpy())
