"""Helpers shared by three or more op files: dtype promotion, int lists, ranks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.translate import GraphBuilder, Tensor


def cast(g: GraphBuilder, x: Any, dtype: ir.DataType) -> Any:
    """`x` as `dtype`: a Cast for a value of another dtype, a constant for a Python number."""
    if isinstance(x, ir.Value):
        if x.dtype == dtype:
            return x
        return g.op("Cast", x, to=dtype)
    return g.const(x, dtype)


def torch_dtype_of(x: Any) -> torch.dtype:
    """The dtype PyTorch would give `x` in type promotion (Python numbers are weak)."""
    if isinstance(x, ir.Value):
        if x.dtype is None:
            raise ValueError(f"value {x.name} has no known dtype")
        return _dtypes.to_torch(x.dtype)
    if isinstance(x, bool):
        return torch.bool
    if isinstance(x, int):
        return torch.int64
    return torch.get_default_dtype()


def result_dtype(*xs: Any) -> ir.DataType:
    """ATen's type promotion over values and Python scalars (scalars do not widen tensors)."""
    tensors = [x for x in xs if isinstance(x, ir.Value)]
    scalars = [x for x in xs if not isinstance(x, ir.Value) and x is not None]
    dtype: torch.dtype | None = None
    # zero-dim tensors participate like scalars when a dimensioned tensor is present
    dimensioned = [t for t in tensors if t.shape is None or len(t.shape) > 0]
    zero_dim = [t for t in tensors if t.shape is not None and len(t.shape) == 0]
    primary = dimensioned or zero_dim
    for t in primary:
        d = torch_dtype_of(t)
        dtype = d if dtype is None else torch.promote_types(dtype, d)
    weak = [*(zero_dim if dimensioned else []), *scalars]
    for w in weak:
        d = torch_dtype_of(w)
        if dtype is None:
            dtype = d
            continue
        if _category(d) > _category(dtype):
            if isinstance(w, ir.Value):
                dtype = d
            else:
                dtype = torch.get_default_dtype() if _category(d) == 2 else torch.int64
    assert dtype is not None
    return _dtypes.to_ir(dtype)


def _category(dtype: torch.dtype) -> int:
    if dtype == torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 1


def rank(x: Tensor) -> int:
    """The rank of a value whose shape is known (FX metadata always gives it)."""
    if x.shape is None:
        raise ValueError(f"value {x.name} has no known rank")
    return len(x.shape)


def int_list(g: GraphBuilder, items: Sequence[Any] | Tensor) -> Tensor:
    """A 1-D int64 tensor from ints and symbolic-int values (SymInt inputs)."""
    if isinstance(items, ir.Value):
        return items
    if all(not isinstance(i, ir.Value) for i in items):
        return g.const([int(i) for i in items], ir.DataType.INT64)
    parts = []
    for i in items:
        if isinstance(i, ir.Value):
            v = cast(g, i, ir.DataType.INT64)
            parts.append(g.op("Reshape", v, g.const([1], ir.DataType.INT64)))
        else:
            parts.append(g.const([int(i)], ir.DataType.INT64))
    return g.op("Concat", *parts, axis=0)


def normalize_dim(dim: int, r: int) -> int:
    """A non-negative axis; rank-0 tensors accept dims -1 and 0."""
    return dim % max(r, 1)
