"""Type conversion and identity-like ops: to, _to_copy, clone, detach, alias, dropout.

ONNX values are immutable and have no layout, device or memory format, so every copy,
alias and layout change is the value itself, cast where the dtype changes.

Conversions to the float8 types round like PyTorch (`convert_dtype`): the Cast's `saturate`
follows `_dtypes.CAST_SATURATE`, constants are converted by PyTorch itself, and float8 to
float8 goes through float32, as PyTorch converts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.ops._helpers import cast
from onnxport.ops.random import dropout_train
from onnxport.errors import TranslationError
from onnxport.translate import GraphBuilder, Tensor, aten, register


# ONNX Runtime 1.32 casts float values in [61440, 65536) to NaN for FLOAT8E5M2 with
# saturate=0, where the ONNX spec and PyTorch round them to inf (61440 is the tie between
# the largest finite value 57344 and 65536).
_E5M2_OVERFLOW = 61440.0


def convert_dtype(g: GraphBuilder, x: Any, dtype: ir.DataType) -> Any:
    """`x` converted to `dtype` with PyTorch's rounding (float8 included)."""
    saturate = _dtypes.CAST_SATURATE.get(dtype)
    if saturate is None or not isinstance(x, ir.Value) or x.dtype == dtype:
        return cast(g, x, dtype)
    source = x.dtype
    if source is None:
        raise TranslationError(f"conversion to {_dtypes.to_torch(dtype)} of a value of unknown dtype")
    if x.const_value is not None and not x.is_initializer():
        # A constant: let PyTorch round it (numpy's float8 casts do not saturate).
        array = np.asarray(x.const_value.numpy())
        if source in _dtypes.FLOAT8 or source == ir.DataType.BFLOAT16:
            bits = np.uint8 if source in _dtypes.FLOAT8 else np.uint16
            data = torch.from_numpy(array.view(bits)).view(_dtypes.to_torch(source))
        else:
            data = torch.from_numpy(array)
        converted = data.to(_dtypes.to_torch(dtype)).view(torch.uint8).numpy().view(dtype.numpy())
        return g.const(converted, dtype)
    if source in _dtypes.FLOAT8 or source in (ir.DataType.BFLOAT16, ir.DataType.INT16, ir.DataType.INT32,
                                               ir.DataType.INT64, ir.DataType.UINT16,
                                               ir.DataType.UINT32, ir.DataType.UINT64):
        # PyTorch converts through float32 (exact for bfloat16, which ORT has no Abs for).
        x = g.op("Cast", x, to=ir.DataType.FLOAT)
    if dtype == ir.DataType.FLOAT8E5M2 and x.dtype not in (ir.DataType.BOOL, ir.DataType.INT8,
                                                           ir.DataType.UINT8):
        big = g.op("GreaterOrEqual", g.op("Abs", x), g.const(_E5M2_OVERFLOW, like=x))
        x = g.op("Where", big, g.op("Mul", x, g.const(float("inf"), like=x)), x)
    return g.op("Cast", x, to=dtype, saturate=saturate)


@register(aten._to_copy.default)
def aten__to_copy(g: GraphBuilder, self: Tensor, *, dtype: torch.dtype | None = None,
                  layout: Any = None, device: Any = None, pin_memory: bool | None = None,
                  non_blocking: bool = False, memory_format: Any = None) -> Tensor:
    """_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    # Float to integer truncates toward zero in both ATen and ONNX Cast.
    return convert_dtype(g, self, g.out_dtype())


@register(aten.to.dtype)
def aten_to_dtype(g: GraphBuilder, self: Tensor, dtype: torch.dtype, non_blocking: bool = False,
                  copy: bool = False, memory_format: Any = None) -> Tensor:
    """to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return convert_dtype(g, self, g.out_dtype())


@register(aten.to.dtype_layout)
def aten_to_dtype_layout(g: GraphBuilder, self: Tensor, *, dtype: torch.dtype | None = None,
                         layout: Any = None, device: Any = None, pin_memory: bool | None = None,
                         non_blocking: bool = False, copy: bool = False,
                         memory_format: Any = None) -> Tensor:
    """to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return convert_dtype(g, self, g.out_dtype())


@register(aten.to.device)
def aten_to_device(g: GraphBuilder, self: Tensor, device: Any, dtype: torch.dtype,
                   non_blocking: bool = False, copy: bool = False,
                   memory_format: Any = None) -> Tensor:
    """to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return convert_dtype(g, self, g.out_dtype())


@register(aten.to.other)
def aten_to_other(g: GraphBuilder, self: Tensor, other: Tensor, non_blocking: bool = False,
                  copy: bool = False, memory_format: Any = None) -> Tensor:
    """to.other(Tensor(a) self, Tensor other, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return convert_dtype(g, self, g.out_dtype())


@register(aten.type_as.default)
def aten_type_as(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """type_as(Tensor self, Tensor other) -> Tensor"""
    return convert_dtype(g, self, g.out_dtype())


def _same_value(target: Any):  # type: ignore[no-untyped-def]
    def translate(g: GraphBuilder, self: Tensor) -> Tensor:
        return self

    name = target._schema.name.split("::")[-1]
    translate.__name__ = f"aten_{name}"
    translate.__doc__ = str(target._schema).removeprefix("aten::")
    return translate


for _target in (aten.detach.default, aten.alias.default, aten.lift_fresh_copy.default,
                aten.lift_fresh.default, aten.positive.default):
    register(_target)(_same_value(_target))


@register(aten.clone.default)
def aten_clone(g: GraphBuilder, self: Tensor, *, memory_format: Any = None) -> Tensor:
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor"""
    return self


@register(aten.contiguous.default)
def aten_contiguous(g: GraphBuilder, self: Tensor, *, memory_format: Any = 0) -> Tensor:
    """contiguous(Tensor(a) self, *, MemoryFormat memory_format=0) -> Tensor(a)"""
    return self


@register(aten.copy.default)
def aten_copy(g: GraphBuilder, self: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor"""
    # The result has self's shape and dtype with src's values broadcast into it.
    out = convert_dtype(g, src, g.out_dtype())
    if src.shape is not None and self.shape is not None and src.shape == self.shape:
        return out
    return g.op("Expand", out, g.op("Shape", self))


def _dropout(name: str):  # type: ignore[no-untyped-def]
    is_feature = "feature" in name
    is_alpha = "alpha" in name

    def translate(g: GraphBuilder, input: Tensor, p: float, train: bool) -> Tensor:
        if train and p > 0:
            out, _ = dropout_train(g, input, p, is_feature=is_feature, is_alpha=is_alpha)
            return out
        return input

    translate.__name__ = f"aten_{name}"
    translate.__doc__ = f"{name}(Tensor input, float p, bool train) -> Tensor"
    return translate


for _name in ("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"):
    register(getattr(aten, _name).default)(_dropout(_name))


@register(aten.native_dropout.default)
def aten_native_dropout(g: GraphBuilder, input: Tensor, p: float,
                        train: bool | None) -> tuple[Tensor, Tensor]:
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)"""
    if train and p > 0:
        return dropout_train(g, input, p)
    # In eval mode the mask keeps everything.
    keep = g.op("ConstantOfShape", g.op("Shape", input),
                value=ir.tensor([True], dtype=ir.DataType.BOOL))
    return input, keep
