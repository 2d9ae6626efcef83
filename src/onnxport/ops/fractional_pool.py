"""Fractional max pooling (2-D and 3-D) with the window starts given by `random_samples`.

The random draw itself happens before the op (a `rand` node); given the samples, the op is
deterministic: along each pooled dim of size `n` with window `k` and `m` outputs, window `i`
starts at `floor((i + u) * a) - floor(u * a)` with `a = (n - k) / (m - 1)`, computed in the
input's dtype as ATen does, and the last window starts at `n - k`. Every window element is
gathered by its flat index in the plane, then reduced with ReduceMax/ArgMax; the index output
is the flat position of the first maximum, as in eager.
"""

from __future__ import annotations

from collections.abc import Sequence
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast
from onnxport.ops.shape import static_shape
from onnxport.translate import GraphBuilder, Tensor, aten, register

_INT64 = ir.DataType.INT64


def _window_starts(g: GraphBuilder, u: Tensor, size: int, kernel: int, out: int) -> Tensor:
    """Start of each of the `out` windows, shape (N, C, out), from samples `u` of shape (N, C, 1)."""
    last = g.const([size - kernel] * 1, _INT64)
    if out == 1:
        return g.op("Expand", last, g.op("Concat", g.op("Shape", u, end=2), g.const([1], _INT64),
                                         axis=0))
    alpha = g.const((size - kernel) / (out - 1), u.dtype)
    steps = g.const([float(i) for i in range(out - 1)], u.dtype)
    scaled = g.op("Cast", g.op("Mul", g.op("Add", steps, u), alpha), to=_INT64)
    offset = g.op("Cast", g.op("Mul", u, alpha), to=_INT64)
    starts = g.op("Sub", scaled, offset)
    ends = g.op("Expand", last, g.op("Concat", g.op("Shape", u, end=2), g.const([1], _INT64),
                                     axis=0))
    return g.op("Concat", starts, ends, axis=-1)


def _fractional_max_pool(g: GraphBuilder, x: Tensor, kernel: Sequence[int],
                         output_size: Sequence[int], samples: Tensor,
                         sample_column: Sequence[int]) -> tuple[Tensor, Tensor]:
    d = len(kernel)
    shape = static_shape(x)
    if shape is None:
        raise TranslationError("fractional_max_pool needs the input's shape at export time")
    batched = len(shape) == d + 2
    if not batched:
        x = g.op("Unsqueeze", x, g.const([0], _INT64))  # samples are (1, C, d) then
    spatial = shape[-d:]
    samples = cast(g, samples, x.dtype)
    flat_index = None
    stride = 1
    for j in reversed(range(d)):
        col = sample_column[j]
        u = g.op("Slice", samples, g.const([col], _INT64), g.const([col + 1], _INT64),
                 g.const([2], _INT64))
        starts = _window_starts(g, u, spatial[j], kernel[j], output_size[j])
        window = g.op("Add", g.op("Unsqueeze", starts, g.const([-1], _INT64)),
                      g.const(list(range(kernel[j])), _INT64))  # (N, C, out_j, k_j)
        view = [0, 0] + [1] * (2 * d)
        view[2 + j], view[2 + d + j] = output_size[j], kernel[j]
        term = g.op("Reshape", g.op("Mul", window, g.const(stride, _INT64)), g.const(view, _INT64))
        flat_index = term if flat_index is None else g.op("Add", flat_index, term)
        stride *= spatial[j]
    windows = 1
    for k in kernel:
        windows *= k
    assert flat_index is not None
    index = g.op("Reshape", flat_index, g.const([0, 0, *output_size, windows], _INT64))
    planes = g.op("Reshape", x, g.const([0, 0, -1], _INT64))
    gathered = g.op("GatherElements", planes, g.op("Reshape", index, g.const([0, 0, -1], _INT64)),
                    axis=2)
    gathered = g.op("Reshape", gathered, g.const([0, 0, *output_size, windows], _INT64))
    values = g.op("ReduceMax", gathered, g.const([-1], _INT64), keepdims=0)
    first_max = g.op("ArgMax", gathered, axis=-1, keepdims=1)
    indices = g.op("Squeeze", g.op("GatherElements", index, first_max, axis=-1),
                   g.const([-1], _INT64))
    if not batched:
        values = g.op("Squeeze", values, g.const([0], _INT64))
        indices = g.op("Squeeze", indices, g.const([0], _INT64))
    return values, indices


@register(aten.fractional_max_pool2d.default)
def aten_fractional_max_pool2d(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                               output_size: Sequence[int],
                               random_samples: Tensor) -> tuple[Tensor, Tensor]:
    """fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size, Tensor random_samples) -> (Tensor, Tensor)"""  # noqa: E501
    # ATen draws the width's starts from sample 0 and the height's from sample 1.
    return _fractional_max_pool(g, self, kernel_size, output_size, random_samples, (1, 0))


@register(aten.fractional_max_pool3d.default)
def aten_fractional_max_pool3d(g: GraphBuilder, self: Tensor, kernel_size: Sequence[int],
                               output_size: Sequence[int],
                               random_samples: Tensor) -> tuple[Tensor, Tensor]:
    """fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size, Tensor random_samples) -> (Tensor, Tensor)"""  # noqa: E501
    return _fractional_max_pool(g, self, kernel_size, output_size, random_samples, (0, 1, 2))


