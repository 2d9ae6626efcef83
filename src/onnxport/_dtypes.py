"""torch.dtype <-> onnx_ir.DataType tables, nothing else."""

from __future__ import annotations

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
}
IR_TO_TORCH: dict[ir.DataType, torch.dtype] = {v: k for k, v in TORCH_TO_IR.items()}


def to_ir(dtype: torch.dtype) -> ir.DataType:
    """The ONNX data type of a torch dtype."""
    return TORCH_TO_IR[dtype]


def to_torch(dtype: ir.DataType) -> torch.dtype:
    """The torch dtype of an ONNX data type."""
    return IR_TO_TORCH[dtype]
