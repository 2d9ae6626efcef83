"""Complex tensors as real pairs: a complex64 (complex128) tensor of shape S is carried as a
float32 (float64) tensor of shape S + [2], real part first, as ONNX's DFT lays them out.

ONNX Runtime has no complex kernels, so the translator never declares a complex ONNX type:
a value whose FX example value is complex gets the real dtype, the extra trailing axis, and
the mark `is_complex(value)`. A node that reads or writes a complex tensor is translated by
its entry in `COMPLEX` (register with `register_complex`), never by its ordinary translation,
which would treat the pair axis as data; a node without one is reported as missing.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
import torch

from onnxport.translate.registry import Registry

_MARK = "onnxport.complex"

# Translations of nodes that read or write complex tensors, keyed like the op library.
COMPLEX = Registry()
register_complex = COMPLEX.register

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def is_complex(value: Any) -> bool:
    """Whether `value` carries a complex tensor as real pairs in its last axis."""
    return isinstance(value, ir.Value) and bool(value.meta.get(_MARK))


def mark_complex(value: ir.Value) -> ir.Value:
    """Mark `value` as a complex tensor carried as real pairs; returns it."""
    value.meta[_MARK] = True
    return value


def unmark_complex(value: ir.Value) -> None:
    """Drop the complex mark of `value` (it carries a real tensor)."""
    value.meta.pop(_MARK, None)


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the real pairs that carry a complex dtype (the dtype itself otherwise).

    Raises:
        ValueError: complex32, which has no ONNX representation.
    """
    if dtype == torch.complex32:
        raise ValueError("complex32 (chalf) has no ONNX representation")
    return _REAL_OF.get(dtype, dtype)


def involves_complex(val: Any) -> bool:
    """Whether an FX example value (or a list/tuple of them) holds a complex tensor."""
    if isinstance(val, torch.Tensor):
        return val.dtype.is_complex
    if isinstance(val, (list, tuple)):
        return any(involves_complex(v) for v in val)
    return False


def complex_rank(value: ir.Value) -> int:
    """The rank of the complex tensor `value` carries (its ONNX rank minus the pair axis)."""
    if value.shape is None:
        raise ValueError(f"value {value.name} has no known rank")
    return len(value.shape) - 1
