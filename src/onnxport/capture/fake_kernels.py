"""Shape-only kernels for the ops whose fake output torch computes the slow way at symbolic sizes.

torch.export runs every op on fake tensors to learn its output's size, strides and dtype. Ops
without a C++ meta kernel that handles symbolic sizes get them from their Python
decomposition, run op by op on fake tensors, and each of those ops does symbolic size and
stride arithmetic. Some composite ops that capture keeps whole (linear) get them from their
composite kernel the same way. With a dynamic batch this dominated D-FINE's capture:
`_native_batch_norm_legit_no_training` took 18 ms a call, `linear` 17, `native_layer_norm` 29,
`clamp` 30 (89, 47, 9 and 7 calls), where an op with a meta kernel takes about 3.

While `capture_kernels()` is active (capture/kernels.py), these ops get their output's
metadata directly: the same sizes (the input's own symbols), strides and dtypes as the stock
computation, and the same checks (`torch._check`) on the sizes that must agree. Each kernel
covers the common case only: float inputs of one dtype, dense layouts (any layout for the
pointwise ones) without size-1 dims, no autograd. Anything
else, and any call made while an FX tracer records (a decomposition being traced into a
graph), runs the stock computation. Only fake tensors are concerned: a call on real tensors
always runs the stock kernel. tests/capture/test_fake_kernels.py compares every kernel's
output metadata with the stock one's, case by case, and whole captured programs node by node.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch._prims_common import (
    compute_elementwise_output_strides,
    is_contiguous_for_memory_format_or_false,
)
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.fx.experimental.symbolic_shapes import guard_or_false

__all__ = ["COMPOSITE_SHAPE_KERNELS", "FAKE_KERNELS", "standing_in_for"]

_FLOATS = (torch.float32, torch.float64)
_aten = torch.ops.aten


def _fake_only(*tensors: Any) -> bool:
    """Whether torch is computing a fake output, not tracing: every tensor given (None aside)
    is fake, no FX tracer records, and no autograd history would be built."""
    if get_proxy_mode() is not None:
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, FakeTensor) or (grad and t.requires_grad):
            return False
    return True


def _no_unit_dims(t: torch.Tensor) -> bool:
    """Whether no dim of `t` is known to be 1 (a symbolic size counts as not 1, as in torch's
    own stride computations; no guard is added). The strides torch gives an output's size-1
    dims depend on how each op computes them; the kernels leave those to it."""
    return not any(guard_or_false(d == 1) for d in t.shape)


def _dense_layout(t: torch.Tensor) -> torch.memory_format | None:
    """The memory format `t` is densely laid out in (contiguous or channels-last), without
    adding a guard; None when neither is known to hold."""
    if is_contiguous_for_memory_format_or_false(t, memory_format=torch.contiguous_format):
        return torch.contiguous_format
    if t.dim() == 4 and is_contiguous_for_memory_format_or_false(
            t, memory_format=torch.channels_last):
        return torch.channels_last
    return None


def _like(t: torch.Tensor, layout: torch.memory_format) -> torch.Tensor:
    return torch.empty_like(t, memory_format=layout)


def _same_dtype(dtype: torch.dtype, *tensors: torch.Tensor | None) -> bool:
    return all(t is None or t.dtype == dtype for t in tensors)


def _symbolic(args: tuple[Any, ...]) -> bool:
    return any(isinstance(t, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in t.shape)
               for t in args)


def standing_in_for(stock: Callable[..., Any], shape: Callable[..., Any]) -> Callable[..., Any]:
    """`shape(*args)` at symbolic sizes where it gives an output (not NotImplemented), else
    `stock(*args)`. It carries `stock`'s name and module (where it has them), by which torch
    decides whether to run a decomposition at static sizes, so that choice is torch's own."""

    @functools.wraps(stock)
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if _symbolic(args):
            out = shape(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return stock(*args, **kwargs)

    return kernel


def _grid_sampler_2d(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int,
                     padding_mode: int, align_corners: bool) -> Any:
    if not _fake_only(input, grid):
        return NotImplemented
    # ATen's checks (torch/_meta_registrations.check_grid_sampler_common), then the output of
    # the CPU kernel: contiguous (N, C, H_out, W_out) in the input's dtype
    torch._check(input.dim() == 4 and grid.dim() == 4,
                 lambda: "grid_sampler(): expected 4D input and grid")
    torch._check(input.shape[0] == grid.shape[0] and grid.shape[-1] == 2,
                 lambda: "grid_sampler(): expected grid of shape (N, H_out, W_out, 2)")
    torch._check(input.dtype == grid.dtype,
                 lambda: "grid_sampler(): expected input and grid to have the same dtype")
    torch._check(0 <= interpolation_mode <= 2 and 0 <= padding_mode <= 2,
                 lambda: "grid_sampler(): unknown interpolation or padding mode")
    return input.new_empty((input.shape[0], input.shape[1], grid.shape[1], grid.shape[2]))


def _batch_norm_no_training(input: torch.Tensor, weight: torch.Tensor | None,
                            bias: torch.Tensor | None, running_mean: torch.Tensor,
                            running_var: torch.Tensor, momentum: float, eps: float) -> Any:
    if not (_fake_only(input, weight, bias, running_mean, running_var)
            and input.dtype in _FLOATS and input.dim() >= 2 and input.device.type == "cpu"
            and _same_dtype(input.dtype, weight, bias, running_mean, running_var)
            and _no_unit_dims(input)):
        return NotImplemented
    layout = _dense_layout(input)
    if layout is None:
        return NotImplemented
    channels = input.shape[1]
    for t in (weight, bias, running_mean, running_var):
        if t is not None:
            torch._check(t.dim() == 1 and t.shape[0] == channels,
                         lambda: "batch_norm: expected per-channel parameters")
    # on CPU the statistics of an eval-mode batch norm are empty (CUDA returns them)
    return _like(input, layout), input.new_zeros((0,)), input.new_zeros((0,))


def _native_layer_norm(input: torch.Tensor, normalized_shape: list[int],
                       weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                       ) -> Any:
    n = len(normalized_shape)
    if not (_fake_only(input, weight, bias) and input.dtype in _FLOATS
            and _same_dtype(input.dtype, weight, bias) and 0 < n <= input.dim()
            and _no_unit_dims(input) and _dense_layout(input) is torch.contiguous_format):
        return NotImplemented
    trailing = input.shape[input.dim() - n:]
    for got, want in zip(trailing, normalized_shape, strict=True):
        torch._check(got == want, lambda: "layer_norm: input shape does not end in "
                                          "normalized_shape")
    for t in (weight, bias):
        if t is not None:
            torch._check(t.dim() == n and all(
                a == b for a, b in zip(t.shape, normalized_shape, strict=True)),
                lambda: "layer_norm: weight and bias must have normalized_shape")
    stats = (*input.shape[:input.dim() - n], *([1] * n))
    return (torch.empty_like(input, memory_format=torch.contiguous_format),
            input.new_empty(stats), input.new_empty(stats))


def _pointwise(input: torch.Tensor) -> torch.Tensor:
    # the strides torch's elementwise meta gives a one-input op (size-1 dims included)
    return torch.empty_strided(input.shape, compute_elementwise_output_strides(input),
                               dtype=input.dtype, device=input.device)


def _relu(input: torch.Tensor) -> Any:
    if not (_fake_only(input) and input.dtype in _FLOATS and _no_unit_dims(input)):
        return NotImplemented
    return _pointwise(input)


def _clamp(input: torch.Tensor, min: Any = None, max: Any = None) -> Any:
    if not (_fake_only(input) and input.dtype in _FLOATS and (min is not None or max is not None)
            and all(v is None or (isinstance(v, numbers.Real) and not isinstance(v, bool))
                    for v in (min, max)) and _no_unit_dims(input)):
        return NotImplemented
    return _pointwise(input)


FAKE_KERNELS: dict[Any, Callable[..., Any]] = {
    _aten.grid_sampler_2d.default: _grid_sampler_2d,
    _aten._native_batch_norm_legit_no_training.default: _batch_norm_no_training,
    _aten.native_layer_norm.default: _native_layer_norm,
    _aten.relu.default: _relu,
    _aten.clamp.default: _clamp,
}
"""Op -> its output's metadata at symbolic sizes (NotImplemented where not covered), run by
FakeTensorMode in place of the op's decomposition (`standing_in_for` it)."""


def _linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
            ) -> Any:
    if not (_fake_only(input, weight, bias) and input.dtype in _FLOATS and input.dim() >= 2
            and weight.dim() == 2 and _same_dtype(input.dtype, weight, bias)
            and (bias is None or bias.dim() == 1) and input.device == weight.device):
        return NotImplemented
    torch._check(input.shape[-1] == weight.shape[1],
                 lambda: "linear: input's last dim and weight's in_features differ")
    if bias is not None:
        torch._check(bias.shape[0] == weight.shape[0],
                     lambda: "linear: bias and weight's out_features differ")
    # addmm, mm and the folded matmul all give a contiguous output
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


COMPOSITE_SHAPE_KERNELS: dict[Any, Callable[..., Any]] = {
    _aten.linear.default: _linear,
}
"""Composite ops capture keeps whole -> their output's metadata at symbolic sizes
(NotImplemented where not covered), run as the op's composite kernel `standing_in_for` ATen's."""
