"""JitScalarType: torch's scalar types (torch.onnx.JitScalarType), with ONNX and name mappings."""

from __future__ import annotations

import enum
from typing import Any

import onnx_ir as ir
import torch

from onnxport import _dtypes


class JitScalarType(enum.IntEnum):
    """Scalar types defined in torch, numbered as torch.onnx numbers them (c10::ScalarType's
    numbers up to BFLOAT16; the float8 types follow on, as in torch.onnx)."""

    UINT8 = 0
    INT8 = 1
    INT16 = 2
    INT = 3
    INT64 = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    COMPLEX32 = 8
    COMPLEX64 = 9
    COMPLEX128 = 10
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    FLOAT8E5M2 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E5M2FNUZ = 18
    FLOAT8E4M3FNUZ = 19
    UNDEFINED = 20

    @classmethod
    def from_dtype(cls, dtype: torch.dtype | None) -> JitScalarType:
        if dtype not in _TORCH:
            raise ValueError(f"unknown dtype: {dtype}")
        return _TORCH[dtype]

    @classmethod
    def from_onnx_type(cls, onnx_type: int | ir.DataType | None) -> JitScalarType:
        if onnx_type is None:
            return cls.UNDEFINED
        return cls.from_dtype(_dtypes.to_torch(ir.DataType(int(onnx_type))))

    @classmethod
    def from_value(cls, value: Any, default: JitScalarType | None = None) -> JitScalarType:
        """The scalar type of a tensor, a graph value (`ir.Value`, symbolic value) or a number."""
        dtype = None
        if isinstance(value, torch.Tensor):
            return cls.from_dtype(value.dtype)
        if isinstance(value, bool):
            return cls.BOOL
        if isinstance(value, int):
            return cls.INT64
        if isinstance(value, float):
            return cls.DOUBLE
        inner = getattr(value, "value", value)
        if isinstance(inner, ir.Value):
            dtype = inner.dtype
        if dtype is None:
            if default is not None:
                return default
            raise ValueError(f"cannot tell the scalar type of {value!r}")
        return cls.from_onnx_type(dtype)

    def scalar_name(self) -> str:
        """torch's name ('Float', 'Long', ...)."""
        return _NAMES[self]

    def torch_name(self) -> str:
        return str(self.dtype()).removeprefix("torch.")

    def dtype(self) -> torch.dtype:
        return _DTYPES[self]

    def onnx_type(self) -> int:
        """The onnx.TensorProto data type."""
        if self not in _DTYPES or self in (JitScalarType.QINT8, JitScalarType.QUINT8,
                                           JitScalarType.QINT32, JitScalarType.COMPLEX32):
            raise ValueError(f"{self.name} has no ONNX type")
        return int(_dtypes.to_ir(self.dtype()))

    def onnx_compatible(self) -> bool:
        try:
            self.onnx_type()
        except (ValueError, KeyError, TypeError):
            return False
        return True


_DTYPES = {
    JitScalarType.UINT8: torch.uint8, JitScalarType.INT8: torch.int8,
    JitScalarType.INT16: torch.int16, JitScalarType.INT: torch.int32,
    JitScalarType.INT64: torch.int64, JitScalarType.HALF: torch.float16,
    JitScalarType.FLOAT: torch.float32, JitScalarType.DOUBLE: torch.float64,
    JitScalarType.COMPLEX32: torch.complex32, JitScalarType.COMPLEX64: torch.complex64,
    JitScalarType.COMPLEX128: torch.complex128, JitScalarType.BOOL: torch.bool,
    JitScalarType.QINT8: torch.qint8, JitScalarType.QUINT8: torch.quint8,
    JitScalarType.QINT32: torch.qint32, JitScalarType.BFLOAT16: torch.bfloat16,
    JitScalarType.FLOAT8E5M2: torch.float8_e5m2, JitScalarType.FLOAT8E4M3FN: torch.float8_e4m3fn,
    JitScalarType.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
    JitScalarType.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
}
_TORCH = {v: k for k, v in _DTYPES.items()}
_NAMES = {
    JitScalarType.UINT8: "Byte", JitScalarType.INT8: "Char", JitScalarType.INT16: "Short",
    JitScalarType.INT: "Int", JitScalarType.INT64: "Long", JitScalarType.HALF: "Half",
    JitScalarType.FLOAT: "Float", JitScalarType.DOUBLE: "Double",
    JitScalarType.COMPLEX32: "ComplexHalf", JitScalarType.COMPLEX64: "ComplexFloat",
    JitScalarType.COMPLEX128: "ComplexDouble", JitScalarType.BOOL: "Bool",
    JitScalarType.QINT8: "QInt8", JitScalarType.QUINT8: "QUInt8", JitScalarType.QINT32: "QInt32",
    JitScalarType.BFLOAT16: "BFloat16", JitScalarType.FLOAT8E5M2: "Float8E5M2",
    JitScalarType.FLOAT8E4M3FN: "Float8E4M3FN", JitScalarType.FLOAT8E5M2FNUZ: "Float8E5M2FNUZ",
    JitScalarType.FLOAT8E4M3FNUZ: "Float8E4M3FNUZ", JitScalarType.UNDEFINED: "Undefined",
}
