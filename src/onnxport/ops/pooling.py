"""Pooling: max_pool, avg_pool, adaptive_avg_pool and adaptive_max_pool in 1, 2 and 3 dims.

fractional_max_pool lives in fractional_pool.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.ops._layers import (
    _add_batch, _compute_dtype, _dim, _drop_batch, _gather_windows, _gathered_dtype, _ints,
    _mul, _per_dimensionality, _schema_doc, _separable, _static_sizes, _window_index,
)
from onnxport.translate import GraphBuilder, Tensor, aten, register


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _pool_params(kernel_size: Any, stride: Any, padding: Any,
                 n: int) -> tuple[list[int], list[int], list[int]]:
    kernel = _ints(kernel_size, n)
    is_empty = not isinstance(stride, (int, ir.Value)) and len(stride) == 0
    strides = kernel if stride is None or is_empty else _ints(stride, n)
    return kernel, strides, _ints(padding, n)


def _plane_indices(g: GraphBuilder, self: Tensor, indices: Tensor, n: int) -> Tensor:
    """ONNX MaxPool indices count over the whole (N, C, *spatial) tensor; torch's over one plane."""
    r = rank(self)
    plane: int | Tensor = 1
    for i in range(r - n, r):
        plane = _mul(g, plane, _dim(g, self, i))
    return g.op("Mod", indices, cast(g, plane, ir.DataType.INT64))


def _max_pool(g: GraphBuilder, self: Tensor, kernel: list[int], strides: list[int], pads: list[int],
              dilations: list[int], ceil_mode: bool, n: int, with_indices: bool) -> Any:
    dtype = self.dtype
    assert dtype is not None
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, _compute_dtype(self, "MaxPool"))
    ceil, onnx_pads = _ceil_mode_pads(self, kernel, strides, pads, dilations, ceil_mode, n)
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": onnx_pads,
             "dilations": dilations, "ceil_mode": int(ceil)}
    cut = _dropped_windows(g, self, kernel, strides, pads, dilations, ceil, n)
    empty = _empty_windows(self, kernel, strides, pads, dilations, ceil_mode, n)
    if not with_indices:
        y = cut(g.op("MaxPool", x, **attrs))
        if empty is not None:
            y = _fill_empty(g, y, empty[0], -np.inf)
        return cast(g, _drop_batch(g, y, unbatched), dtype)
    y, idx = g.op("MaxPool", x, outputs=2, **attrs)
    y, idx = cut(y), _plane_indices(g, self, cut(idx), n)
    if empty is not None:
        y = _fill_empty(g, y, empty[0], -np.inf)
        idx = _fill_empty(g, idx, empty[0], empty[1])
    return cast(g, _drop_batch(g, y, unbatched), dtype), _drop_batch(g, idx, unbatched)


def _empty_windows(self: Tensor, kernel: list[int], strides: list[int], pads: list[int],
                   dilations: list[int], ceil_mode: bool, n: int,
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """Output positions whose dilated window holds no input element, only padding (possible
    with dilation and ceil mode): torch gives -inf there and, as index, the window's start
    moved past the left padding by whole dilations. (mask, index) over the output's spatial
    shape, or None when no window is empty or a spatial size is dynamic. MaxPool would give
    the type's lowest value instead."""
    sizes = _static_sizes(self, n)
    if sizes is None:
        return None
    masks, starts = [], []
    for v, k, s, p, d in zip(sizes, kernel, strides, pads, dilations):
        out = _pool_out_size(v, k, s, p, ceil_mode, d)
        first = np.arange(out) * s - p
        taps = first[:, None] + d * np.arange(k)[None, :]
        masks.append(~((taps >= 0) & (taps < v)).any(axis=1))
        # torch's start: moved right by whole dilations until it is not negative
        starts.append(np.where(first < 0, first + d * (-(first // d)), first))
    if not any(m.any() for m in masks):
        return None
    mask = np.zeros([len(m) for m in masks], dtype=bool)
    index = np.zeros(mask.shape, dtype=np.int64)
    for i, (m, start) in enumerate(zip(masks, starts)):
        shape = [1] * n
        shape[i] = len(m)
        mask = mask | m.reshape(shape)
        index = index + (start * math.prod(sizes[i + 1:])).reshape(shape)
    return mask, index


def _fill_empty(g: GraphBuilder, y: Tensor, mask: np.ndarray, value: Any) -> Tensor:
    """`value` (a scalar, or an array over the spatial shape) where `mask`, else y."""
    dtype = y.dtype
    assert dtype is not None
    fill = np.broadcast_to(np.asarray(value), mask.shape).astype(dtype.numpy())
    return g.op("Where", g.const(mask), g.const(np.ascontiguousarray(fill), dtype), y)


def _dropped_windows(g: GraphBuilder, self: Tensor, kernel: list[int], strides: list[int],
                     pads: list[int], dilations: list[int], ceil_mode: bool, n: int) -> Any:
    """A ceil-mode MaxPool with some dynamic spatial sizes (it cannot go to floor mode): a
    Slice to torch's size on each static axis whose last window torch drops, which onnx's
    shape inference keeps (ONNX Runtime drops it; the Slice then cuts nothing)."""
    r = rank(self)
    shape = self.shape
    cuts: dict[int, int] = {}
    if ceil_mode and shape is not None:
        for i, (k, s, p, d) in enumerate(zip(kernel, strides, pads, dilations)):
            v = shape[r - n + i]
            if isinstance(v, int):
                out = _pool_out_size(v, k, s, p, True, d)
                if -(-(v + 2 * p - d * (k - 1) - 1) // s) + 1 != out:
                    cuts[i] = out
    if not cuts:
        return lambda y: y
    i64 = ir.DataType.INT64

    def cut(y: Tensor) -> Tensor:
        return g.op("Slice", y, g.const([0] * len(cuts), i64), g.const(list(cuts.values()), i64),
                    g.const([i - n for i in cuts], i64))

    return cut


def _ceil_mode_pads(self: Tensor, kernel: list[int], strides: list[int], pads: list[int],
                    dilations: list[int], ceil_mode: bool, n: int) -> tuple[bool, list[int]]:
    """MaxPool's (ceil_mode, pads) giving torch's output shape, floor mode where it can.

    Where torch drops the last window (it would start in the right padding), ONNX's spec
    drops it too but onnx's shape inference does not, so the checker refuses a ceil-mode node
    whose declared shape is torch's. With static sizes, floor mode says the same: an axis
    whose last window ceil mode adds gets that window's overhang as end padding (max ignores
    padding), as long as ONNX Runtime's rule pad < kernel allows it; else ceil mode stays.
    """
    sizes = _static_sizes(self, n)
    if not ceil_mode or sizes is None:
        return bool(ceil_mode), pads * 2
    ends = []
    for v, k, s, p, d in zip(sizes, kernel, strides, pads, dilations):
        out = _pool_out_size(v, k, s, p, True, d)
        overhang = max(0, (out - 1) * s + d * (k - 1) + 1 - (v + 2 * p))
        if p + overhang >= k:
            return True, pads * 2
        ends.append(p + overhang)
    return False, [*pads, *ends]


def _make_max_pool(n: int, with_indices: bool) -> Any:
    def aten_max_pool(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                      stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                      dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> Any:
        kernel, strides, pads = _pool_params(kernel_size, stride, padding, n)
        return _max_pool(g, self, kernel, strides, pads, _ints(dilation, n), ceil_mode, n,
                         with_indices)

    if with_indices:
        aten_max_pool.__name__ = "aten_max_pool_with_indices"
    return aten_max_pool


_per_dimensionality((aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default),
                    lambda n: _make_max_pool(n, False))
_per_dimensionality((aten.max_pool1d_with_indices.default, aten.max_pool2d_with_indices.default,
                     aten.max_pool3d_with_indices.default), lambda n: _make_max_pool(n, True))


def _pool_out_size(size: int, k: int, s: int, p: int, ceil_mode: bool, d: int = 1) -> int:
    """torch's pooling output size: in ceil mode the last window must start inside input+left pad."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _avg_divisors(sizes: list[int], kernel: list[int], strides: list[int], pads: list[int],
                  ceil_mode: bool, count_include_pad: bool) -> np.ndarray:
    """torch's avg_pool divisor per output position (windows clipped to the padded input)."""
    per_axis = []
    for size, k, s, p in zip(sizes, kernel, strides, pads):
        counts = []
        for o in range(_pool_out_size(size, k, s, p, ceil_mode)):
            start = o * s - p
            end = min(start + k, size + p)
            if not count_include_pad:
                start, end = max(start, 0), min(end, size)
            counts.append(end - start)
        per_axis.append(np.asarray(counts, dtype=np.float64))
    out = per_axis[0]
    for axis in per_axis[1:]:
        out = np.multiply.outer(out, axis)
    return out


def _avg_pool(g: GraphBuilder, self: Tensor, kernel: list[int], strides: list[int], pads: list[int],
              ceil_mode: bool, count_include_pad: bool, divisor_override: int | None, n: int) -> Tensor:
    dtype = self.dtype
    assert dtype is not None
    # integers with static sizes: exact int64 window sums, below; else float (_compute_dtype)
    exact = _gathered_dtype(self) is not None and _static_sizes(self, n) is not None
    compute = _gathered_dtype(self) if exact else _compute_dtype(self, "AveragePool")
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, compute)
    sizes = [self.shape[rank(self) - n + i] for i in range(n)] if self.shape is not None else []
    if ceil_mode and len(sizes) == n and all(isinstance(v, int) for v in sizes) and all(
            _pool_out_size(v, k, s, p, True) == _pool_out_size(v, k, s, p, False)
            for v, k, s, p in zip(sizes, kernel, strides, pads)):
        # Ceil mode adds no window at these sizes (timm's avg-down shortcut, 2x2 stride 2 on
        # even sizes): the windows, and so the divisors, are floor mode's.
        ceil_mode = False
    if not ceil_mode and divisor_override is None and not exact:
        # Without ceil mode every window lies in the padded input, where ONNX's divisor
        # (kernel size, or the valid count without count_include_pad) equals torch's.
        y = g.op("AveragePool", x, kernel_shape=kernel, strides=strides, pads=pads * 2,
                 count_include_pad=int(bool(count_include_pad)))
        return cast(g, _drop_batch(g, y, unbatched), dtype)
    # Otherwise: window sums (an average over zero-padded input times the kernel size, with
    # the ceil-mode overhang padded too) divided by torch's own divisor.
    if len(sizes) != n or not all(isinstance(v, int) for v in sizes):
        y = _dynamic_avg_pool(g, x, kernel, strides, pads, ceil_mode, count_include_pad,
                              divisor_override, n, compute)
        return cast(g, _drop_batch(g, y, unbatched), dtype)
    outs = [_pool_out_size(v, k, s, p, ceil_mode) for v, k, s, p in zip(sizes, kernel, strides, pads)]
    extra = [max(0, (o - 1) * s + k - (v + 2 * p)) for o, v, k, s, p in zip(outs, sizes, kernel, strides, pads)]
    if divisor_override is not None:
        divisors: Any = float(divisor_override)
    else:
        divisors = _avg_divisors(sizes, kernel, strides, pads, ceil_mode, count_include_pad)
    if exact:
        # Exact int64 window sums (see _window_index), divided with truncation toward zero
        # like torch's integer avg_pool (ONNX integer Div truncates too).
        index = _window_index(sizes, outs, kernel, strides, [1] * n, pads, False)
        cols = _gather_windows(g, x, sizes, index)
        total = g.op("ReduceSum", cols, g.const([-1], ir.DataType.INT64), keepdims=0)
        total = g.op("Reshape", total, g.const([0, 0, *outs], ir.DataType.INT64))
        quotient = g.op("Div", total, g.const(np.asarray(divisors), compute))
        return cast(g, _drop_batch(g, quotient, unbatched), dtype)
    zero_pads = [0, 0, *pads, 0, 0, *[p + e for p, e in zip(pads, extra)]]
    padded = g.op("Pad", x, g.const(zero_pads, ir.DataType.INT64), g.const(0, compute))
    mean = g.op("AveragePool", padded, kernel_shape=kernel, strides=strides)
    total = g.op("Mul", mean, g.const(float(math.prod(kernel)), compute))
    divisor = g.const(np.asarray(divisors, dtype=np.float64), compute)
    return cast(g, _drop_batch(g, g.op("Div", total, divisor), unbatched), dtype)


def _axis_windows(g: GraphBuilder, size: Tensor, k: int, s: int, p: int,
                  ceil_mode: bool) -> tuple[Tensor, Tensor]:
    """torch's pooling output size along an axis of dynamic `size` (an int64 scalar), and the
    start of each window in input coordinates (a 1-D int64 vector)."""
    i64 = ir.DataType.INT64
    span = g.op("Add", size, g.const(2 * p - k + (s - 1 if ceil_mode else 0), i64))
    out = g.op("Add", g.op("Div", span, g.const(s, i64)), g.const(1, i64))
    if ceil_mode:
        # The last window must start inside the input or its left padding.
        last = g.op("Mul", g.op("Sub", out, g.const(1, i64)), g.const(s, i64))
        drop = g.op("GreaterOrEqual", last, g.op("Add", size, g.const(p, i64)))
        out = g.op("Sub", out, g.op("Cast", drop, to=i64))
    starts = g.op("Sub", g.op("Mul", g.op("Range", g.const(0, i64), out, g.const(1, i64)),
                              g.const(s, i64)), g.const(p, i64))
    return out, starts


def _dynamic_avg_pool(g: GraphBuilder, x: Tensor, kernel: list[int], strides: list[int],
                      pads: list[int], ceil_mode: bool, count_include_pad: bool,
                      divisor_override: int | None, n: int, compute: ir.DataType) -> Tensor:
    """avg_pool of (N, C, *spatial) x with dynamic spatial sizes, in ceil mode or with a
    divisor override: window sums over the zero-padded input (ceil mode's overhang, at most
    stride - 1, padded too), cut to torch's output size, divided by torch's divisor per
    window (the window clipped to the padded input, or to the input without
    count_include_pad), built per axis from the dynamic size and multiplied out."""
    i64 = ir.DataType.INT64
    extra = [s - 1 if ceil_mode else 0 for s in strides]
    zero_pads = [0, 0, *pads, 0, 0, *[p + e for p, e in zip(pads, extra)]]
    padded = g.op("Pad", x, g.const(zero_pads, i64), g.const(0, compute))
    mean = g.op("AveragePool", padded, kernel_shape=kernel, strides=strides)
    total = g.op("Mul", mean, g.const(float(math.prod(kernel)), compute))
    outs, divisor = [], None
    for i, (k, s, p) in enumerate(zip(kernel, strides, pads)):
        d = _dim(g, x, 2 + i)
        size = g.const(d, i64) if isinstance(d, int) else d
        out, starts = _axis_windows(g, size, k, s, p, ceil_mode)
        outs.append(g.op("Reshape", out, g.const([1], i64)))
        if divisor_override is not None:
            continue
        ends = g.op("Min", g.op("Add", starts, g.const(k, i64)),
                    g.op("Add", size, g.const(p, i64)))
        if not count_include_pad:
            starts, ends = g.op("Max", starts, g.const(0, i64)), g.op("Min", ends, size)
        count = cast(g, g.op("Sub", ends, starts), compute)
        count = g.op("Reshape", count, g.const([-1] + [1] * (n - 1 - i), i64))
        divisor = count if divisor is None else g.op("Mul", divisor, count)
    total = g.op("Slice", total, g.const([0] * n, i64), g.op("Concat", *outs, axis=0),
                 g.const(list(range(2, 2 + n)), i64))
    if divisor is None:
        divisor = g.const(float(divisor_override), compute)  # type: ignore[arg-type]
    return g.op("Div", total, divisor)


def _make_avg_pool(n: int) -> Any:
    if n == 1:
        def aten_avg_pool(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                          stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                          ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
            kernel, strides, pads = _pool_params(kernel_size, stride, padding, n)
            return _avg_pool(g, self, kernel, strides, pads, ceil_mode, count_include_pad, None, n)

        return aten_avg_pool

    def aten_avg_pool_nd(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                         stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                         ceil_mode: bool = False, count_include_pad: bool = True,
                         divisor_override: int | None = None) -> Tensor:
        kernel, strides, pads = _pool_params(kernel_size, stride, padding, n)
        return _avg_pool(g, self, kernel, strides, pads, ceil_mode, count_include_pad,
                         divisor_override, n)

    aten_avg_pool_nd.__name__ = "aten_avg_pool"
    return aten_avg_pool_nd


_per_dimensionality((aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default),
                    _make_avg_pool)


def _adaptive_windows(g: GraphBuilder, self: Tensor, output_size: Any, n: int) -> tuple[list[int], list[int]] | None:
    """(input sizes, output sizes) of the spatial dims, or None if some is dynamic."""
    outs = _as_list(output_size)
    if len(outs) == 1 and n > 1:
        outs = outs * n
    r = rank(self)
    sizes = [self.shape[r - n + i] for i in range(n)] if self.shape is not None else []
    if any(isinstance(v, ir.Value) or v is None for v in outs) or not all(isinstance(v, int) for v in sizes):
        return None
    return [int(v) for v in sizes], [int(v) for v in outs]


def _adaptive_avg_pool(g: GraphBuilder, self: Tensor, output_size: Any, n: int) -> Tensor:
    dtype = self.dtype
    assert dtype is not None
    compute = _compute_dtype(self)
    windows = _adaptive_windows(g, self, output_size, n)
    outs = _as_list(output_size)
    is_global = all(isinstance(o, int) and o == 1 for o in outs)
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, compute)
    if is_global:
        y = g.op("GlobalAveragePool", x)
    elif windows is None:
        y = _dynamic_adaptive_avg_pool(g, x, outs * n if len(outs) == 1 else outs, n, compute)
    else:
        sizes, outs_i = windows
        if all(v % o == 0 for v, o in zip(sizes, outs_i)):
            kernel = [v // o for v, o in zip(sizes, outs_i)]
            y = g.op("AveragePool", x, kernel_shape=kernel, strides=kernel)
        else:
            # torch's windows [floor(i*in/out), ceil((i+1)*in/out)) overlap and differ in size;
            # the average is separable, so each axis is a product with a constant matrix.
            matrices: list[np.ndarray | None] = []
            for v, o in zip(sizes, outs_i):
                matrix = np.zeros((v, o), dtype=np.float64)
                for i in range(o):
                    start, end = (i * v) // o, -(-((i + 1) * v) // o)
                    matrix[start:end, i] = 1.0 / (end - start)
                matrices.append(None if v == o else matrix)
            y = _separable(g, x, sizes, matrices, compute)
    return cast(g, _drop_batch(g, y, unbatched), dtype)


def _dynamic_adaptive_avg_pool(g: GraphBuilder, x: Tensor, outs: list[Any], n: int,
                               compute: ir.DataType) -> Tensor:
    """adaptive_avg_pool of (N, C, *spatial) x whose input (or output) sizes are dynamic: per
    axis, a product with the matrix M[v, o] = 1 / (end_o - start_o) where torch's window
    [floor(o * in / out), ceil((o + 1) * in / out)) holds v, built from the sizes in the graph."""
    i64 = ir.DataType.INT64
    letters = "defgh"[:n]
    y = x
    for axis, o in enumerate(outs):
        d = _dim(g, x, 2 + axis)
        size = g.const(d, i64) if isinstance(d, int) else d
        out = g.const(int(o), i64) if isinstance(o, int) else \
            g.op("Reshape", cast(g, o, i64), g.const([], i64))
        rows = g.op("Range", g.const(0, i64), out, g.const(1, i64))
        starts = g.op("Div", g.op("Mul", rows, size), out)
        ends = g.op("Div", g.op("Sub", g.op("Add", g.op("Mul", g.op("Add", rows, g.const(1, i64)),
                                                               size), out), g.const(1, i64)), out)
        v = g.op("Unsqueeze", g.op("Range", g.const(0, i64), size, g.const(1, i64)),
                 g.const([1], i64))
        inside = g.op("And", g.op("GreaterOrEqual", v, starts), g.op("Less", v, ends))
        weight = g.op("Reciprocal", cast(g, g.op("Sub", ends, starts), compute))
        matrix = g.op("Where", inside, weight, g.const(0.0, compute))
        if axis == n - 1:
            y = g.op("MatMul", y, matrix)
        else:
            before, after = letters[:axis], letters[axis + 1:]
            y = g.op("Einsum", matrix, y,
                     equation=f"vo,nc{before}v{after}->nc{before}o{after}")
    return y


def _make_adaptive_avg_pool(n: int) -> Any:
    def aten_adaptive_avg_pool(g: GraphBuilder, self: Tensor, output_size: Sequence[int]) -> Tensor:
        return _adaptive_avg_pool(g, self, output_size, n)

    return aten_adaptive_avg_pool


_per_dimensionality((aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default,
                     aten.adaptive_avg_pool3d.default), _make_adaptive_avg_pool)
for _n, _target in ((2, aten._adaptive_avg_pool2d.default), (3, aten._adaptive_avg_pool3d.default)):
    _fn = _make_adaptive_avg_pool(_n)
    _fn.__doc__ = _schema_doc(_target)
    _fn.__name__ = _fn.__qualname__ = f"aten__adaptive_avg_pool{_n}d"
    register(_target)(_fn)


def _adaptive_max_pool_windows(g: GraphBuilder, self: Tensor, sizes: list[int],
                               outs: list[int]) -> tuple[Tensor, Tensor]:
    """adaptive_max_pool for any sizes: each output's window gathered from the flattened plane.

    torch's window for output i of an axis is [floor(i*in/out), ceil((i+1)*in/out)); windows
    overlap and differ in size. Every window is gathered as `k` plane positions (k the largest
    window), a short window repeating its last position, which changes neither the max nor
    which position holds it first (ArgMax returns the first, as torch keeps the first max).
    """
    n = len(sizes)
    axis_windows = []
    for v, o in zip(sizes, outs):
        starts = [(i * v) // o for i in range(o)]
        ends = [-(-((i + 1) * v) // o) for i in range(o)]
        k = max(e - s for s, e in zip(starts, ends))
        axis_windows.append(np.minimum(np.asarray(starts)[:, None] + np.arange(k)[None, :],
                                       np.asarray(ends)[:, None] - 1))
    # positions[o_1, .., o_n, j_1, .., j_n]: the flat plane index of window element j.
    strides = [math.prod(sizes[i + 1:]) for i in range(n)]
    positions = np.zeros([*outs, *[w.shape[1] for w in axis_windows]], dtype=np.int64)
    for i, (w, stride) in enumerate(zip(axis_windows, strides)):
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = w.shape
        positions = positions + (w * stride).reshape(shape)
    k = math.prod(positions.shape[n:])
    positions = positions.reshape(math.prod(outs), k)
    dtype = self.dtype
    assert dtype is not None
    x, unbatched = _add_batch(g, self, n)
    x = cast(g, x, _compute_dtype(self))
    # The plane's size, not -1: a batch of 0 makes -1 undefined (ONNX refuses it).
    plane = g.op("Reshape", x, g.const([0, 0, math.prod(sizes)], ir.DataType.INT64))
    windows = g.op("Gather", plane, g.const(positions.reshape(-1), ir.DataType.INT64), axis=2)
    windows = g.op("Reshape", windows, g.const([0, 0, *outs, k], ir.DataType.INT64))
    y = g.op("ReduceMax", windows, g.const([-1], ir.DataType.INT64), keepdims=0)
    j = g.op("ArgMax", windows, axis=-1, keepdims=0)
    # the chosen window element's plane index: positions[output, j]
    flat = g.op("Add", j, g.const(np.arange(math.prod(outs)).reshape(outs) * k, ir.DataType.INT64))
    idx = g.op("Gather", g.const(positions.reshape(-1), ir.DataType.INT64), flat, axis=0)
    return cast(g, _drop_batch(g, y, unbatched), dtype), _drop_batch(g, idx, unbatched)


def _make_adaptive_max_pool(n: int) -> Any:
    def aten_adaptive_max_pool(g: GraphBuilder, self: Tensor,
                               output_size: Sequence[int]) -> tuple[Tensor, Tensor]:
        windows = _adaptive_windows(g, self, output_size, n)
        if windows is None:
            raise TranslationError("adaptive_max_pool with dynamic spatial sizes")
        sizes, outs = windows
        if not all(v % o == 0 for v, o in zip(sizes, outs)) or any(v == 0 for v in sizes):
            return _adaptive_max_pool_windows(g, self, sizes, outs)
        kernel = [v // o for v, o in zip(sizes, outs)]
        return _max_pool(g, self, kernel, kernel, [0] * n, [1] * n, False, n, True)  # type: ignore[no-any-return]

    return aten_adaptive_max_pool


_per_dimensionality((aten.adaptive_max_pool1d.default, aten.adaptive_max_pool2d.default,
                     aten.adaptive_max_pool3d.default), _make_adaptive_max_pool)
