"""Type conversion and identity-like ops: to, _to_copy, clone, detach, alias, dropout.

ONNX values are immutable and have no layout, device or memory format, so every copy,
alias and layout change is the value itself, cast where the dtype changes.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

from onnxport.ops._helpers import cast
from onnxport.ops.random import dropout_train
from onnxport.translate import GraphBuilder, Tensor, aten, register


@register(aten._to_copy.default)
def aten__to_copy(g: GraphBuilder, self: Tensor, *, dtype: torch.dtype | None = None,
                  layout: Any = None, device: Any = None, pin_memory: bool | None = None,
                  non_blocking: bool = False, memory_format: Any = None) -> Tensor:
    """_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor"""  # noqa: E501
    # Float to integer truncates toward zero in both ATen and ONNX Cast.
    return cast(g, self, g.out_dtype())


@register(aten.to.dtype)
def aten_to_dtype(g: GraphBuilder, self: Tensor, dtype: torch.dtype, non_blocking: bool = False,
                  copy: bool = False, memory_format: Any = None) -> Tensor:
    """to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return cast(g, self, g.out_dtype())


@register(aten.to.dtype_layout)
def aten_to_dtype_layout(g: GraphBuilder, self: Tensor, *, dtype: torch.dtype | None = None,
                         layout: Any = None, device: Any = None, pin_memory: bool | None = None,
                         non_blocking: bool = False, copy: bool = False,
                         memory_format: Any = None) -> Tensor:
    """to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return cast(g, self, g.out_dtype())


@register(aten.to.device)
def aten_to_device(g: GraphBuilder, self: Tensor, device: Any, dtype: torch.dtype,
                   non_blocking: bool = False, copy: bool = False,
                   memory_format: Any = None) -> Tensor:
    """to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return cast(g, self, g.out_dtype())


@register(aten.to.other)
def aten_to_other(g: GraphBuilder, self: Tensor, other: Tensor, non_blocking: bool = False,
                  copy: bool = False, memory_format: Any = None) -> Tensor:
    """to.other(Tensor(a) self, Tensor other, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""  # noqa: E501
    return cast(g, self, g.out_dtype())


@register(aten.type_as.default)
def aten_type_as(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """type_as(Tensor self, Tensor other) -> Tensor"""
    return cast(g, self, g.out_dtype())


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
    out = cast(g, src, g.out_dtype())
    if src.shape is not None and self.shape is not None and src.shape == self.shape:
        return out
    return g.op("Expand", out, g.op("Shape", self))


@register(aten._assert_tensor_metadata.default)
def aten__assert_tensor_metadata(g: GraphBuilder, a: Tensor, size: Any = None, stride: Any = None,
                                 dtype: torch.dtype | None = None, *, device: Any = None,
                                 layout: Any = None) -> None:
    """_assert_tensor_metadata(Tensor a, SymInt[]? size=None, SymInt[]? stride=None, ScalarType? dtype=None, *, Device? device=None, Layout? layout=None) -> ()"""  # noqa: E501
    # A trace-time check that torch.export already made; nothing to compute.
    return None


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
