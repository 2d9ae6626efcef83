"""Translations of the FFT primitives: _fft_r2c, _fft_c2c, _fft_c2r, with ONNX DFT.

torch.fft.* decompose to these three. Complex tensors are real (..., 2) pairs
(`onnxport/translate/complex.py`), which is DFT's own layout; a real signal enters DFT as
(..., 1). Several dims are one-axis DFTs in a chain. ATen's `normalization` scales by 1
(0), 1/sqrt(n) (1) or 1/n (2), n the product of the signal sizes; ONNX's inverse DFT
always divides by n, so inverse transforms are rescaled by n times ATen's factor.
DFT-17 (opsets 18, 19) takes the axis as an attribute, DFT-20 as an input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register
from onnxport.translate.complex import complex_rank, mark_complex, register_complex

INT64 = ir.DataType.INT64


def _dft(g: GraphBuilder, x: Tensor, axis: int, *, inverse: bool = False,
         onesided: bool = False, length: Any = None) -> Tensor:
    """One DFT along `axis` (non-negative, not the pair axis) of (..., 1) or (..., 2) data."""
    size = None
    if length is not None:
        size = (g.op("Reshape", cast(g, length, INT64), g.const([], INT64))
                if isinstance(length, ir.Value) else g.const(int(length), INT64))
    if g.opset >= 20:
        return g.op("DFT", x, size, g.const(axis, INT64), inverse=int(inverse),
                    onesided=int(onesided))
    return g.op("DFT", x, size, axis=axis, inverse=int(inverse), onesided=int(onesided))


def _signal_size(g: GraphBuilder, x: Tensor, dims: Sequence[int]) -> Any:
    """The product of `x`'s sizes along `dims`: an int when static, else an int64 value."""
    sizes = [x.shape[d] if x.shape is not None else None for d in dims]
    if all(isinstance(s, int) for s in sizes):
        return math.prod(int(s) for s in sizes if isinstance(s, int))
    picked = g.op("Gather", g.op("Shape", x), g.const(list(dims), INT64))
    return g.op("ReduceProd", picked, keepdims=0)


def _scale(g: GraphBuilder, x: Tensor, n: Any, normalization: int, *, inverse: bool) -> Tensor:
    """Scale by ATen's normalization factor, undoing ONNX's 1/n of an inverse DFT."""
    # The factor ATen wants, as a power of n: 0 (none), -1/2 (by 1/sqrt(n)) or -1 (by 1/n).
    power = {0: 0.0, 1: -0.5, 2: -1.0}.get(normalization)
    if power is None:
        raise TranslationError(f"unknown FFT normalization mode {normalization}")
    if inverse:
        power += 1.0
    if power == 0:
        return x
    dtype = x.dtype or ir.DataType.FLOAT
    if isinstance(n, int):
        factor: Any = g.const(float(n) ** power if n else 1.0, dtype)
    else:
        factor = g.op("Pow", cast(g, n, dtype), g.const(power, dtype))
    return g.op("Mul", x, factor)


def _dims(dim: Sequence[int], r: int) -> list[int]:
    return [d % max(r, 1) for d in dim]


def _compute_dtype(dtype: ir.DataType, sizes: Sequence[Any]) -> ir.DataType:
    """The dtype to run DFT in for output pairs of `dtype` over signals of `sizes`."""
    is_power_of_two = all(isinstance(n, int) and n & (n - 1) == 0 for n in sizes)
    # ONNX Runtime's float DFT of other lengths than powers of two (a direct sum) is off by
    # ~1e-5 relative, ten times torch's float32 tolerance; double is exact enough.
    if dtype == ir.DataType.FLOAT and not is_power_of_two:
        return ir.DataType.DOUBLE
    return dtype


def _sizes(x: Tensor, dims: Sequence[int]) -> list[Any]:
    return [x.shape[d] if x.shape is not None else None for d in dims]


@register(aten._fft_r2c.default)
@register_complex(aten._fft_r2c.default)
def aten__fft_r2c(g: GraphBuilder, self: Tensor, dim: Sequence[int], normalization: int,
                  onesided: bool) -> Tensor:
    """_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor"""
    dtype = g.out_dtype()
    dims = _dims(dim, rank(self))
    signal = cast(g, self, _compute_dtype(dtype, _sizes(self, dims)))
    out = g.op("Unsqueeze", signal, g.const([-1], INT64))
    # The one-sided DFT needs real input, so the last dim goes first; the rest are complex.
    out = _dft(g, out, dims[-1], onesided=onesided)
    for d in reversed(dims[:-1]):
        out = _dft(g, out, d)
    out = _scale(g, out, _signal_size(g, self, dims), normalization, inverse=False)
    return mark_complex(cast(g, out, dtype))


@register(aten._fft_c2c.default)
@register_complex(aten._fft_c2c.default)
def aten__fft_c2c(g: GraphBuilder, self: Tensor, dim: Sequence[int], normalization: int,
                  forward: bool) -> Tensor:
    """_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor"""
    dtype = g.out_dtype()
    dims = _dims([int(d) for d in dim], complex_rank(self))
    if not dims:
        return mark_complex(g.op("Identity", cast(g, self, dtype)))
    out = cast(g, self, _compute_dtype(dtype, _sizes(self, dims)))
    for d in dims:
        out = _dft(g, out, d, inverse=not forward)
    out = _scale(g, out, _signal_size(g, self, dims), normalization, inverse=not forward)
    return mark_complex(cast(g, out, dtype))


@register(aten._fft_c2r.default)
@register_complex(aten._fft_c2r.default)
def aten__fft_c2r(g: GraphBuilder, self: Tensor, dim: Sequence[int], normalization: int,
                  last_dim_size: Any) -> Tensor:
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor"""
    dtype = g.out_dtype()
    dims = _dims(dim, complex_rank(self))
    last = dims[-1]
    out = cast(g, self, _compute_dtype(dtype, [*_sizes(self, dims[:-1]), last_dim_size]))
    for d in dims[:-1]:
        out = _dft(g, out, d, inverse=True)
    if isinstance(last_dim_size, int):
        # DFT's one-sided inverse reads the first n // 2 + 1 entries of the half spectrum.
        half = last_dim_size // 2 + 1
        size = out.shape[last] if out.shape is not None else None
        if isinstance(size, int) and size < half:
            raise TranslationError(f"_fft_c2r of {size} entries for last_dim_size "
                                   f"{last_dim_size} (needs {half})")
        if size != half:
            out = g.op("Slice", out, g.const([0], INT64), g.const([half], INT64),
                       g.const([last], INT64))
    # The one-sided inverse DFT (IRFFT) rebuilds the Hermitian spectrum and gives real
    # (..., 1) output; like pocketfft it ignores the imaginary parts of the DC and Nyquist terms.
    out = _dft(g, out, last, inverse=True, onesided=True, length=last_dim_size)
    out = g.op("Squeeze", out, g.const([-1], INT64))
    if dims[:-1]:
        other = _signal_size(g, self, dims[:-1])
        n: Any = (other * last_dim_size if isinstance(other, int) and isinstance(last_dim_size, int)
                  else g.op("Mul", cast(g, other, INT64), cast(g, last_dim_size, INT64)))
    else:
        n = last_dim_size
    return cast(g, _scale(g, out, n, normalization, inverse=True), dtype)
