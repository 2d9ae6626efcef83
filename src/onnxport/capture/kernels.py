"""Python kernels torch.export runs for a few composite ops whose stock kernels defeat capture.

torch.export keeps composite (CompositeImplicitAutograd) ATen ops whole and computes their
output metadata by running their composite kernel on fake tensors. For these ops that kernel
cannot be traced: ATen's cov/corrcoef read tensor data (`aten.equal`, `is_nonzero`) to check
weights and warn about degrees of freedom. While `capture_kernels()` is active they run the
Python kernels below, which compute the same values without reading data; the op library
translates the ops themselves. (RNNs get loop-shaped kernels from capture/rnn.py.)

Some ops have no meta kernel of their own: on fake tensors of symbolic sizes, torch runs their
Python decomposition (or, for a composite op capture keeps whole, its composite kernel) just to
learn the output's metadata, and every one of its ops computes symbolic sizes. While
`capture_kernels()` is active, capture/fake_kernels.py gives that metadata directly for the
costly ones (batch norm, layer norm, linear, relu, clamp, grid_sampler_2d).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnxport.capture.fake_kernels import COMPOSITE_SHAPE_KERNELS, FAKE_KERNELS, standing_in_for
from onnxport.capture.trace_cost import cheaper_trace

_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def _cov(input: torch.Tensor, *, correction: int = 1, fweights: torch.Tensor | None = None,
         aweights: torch.Tensor | None = None) -> torch.Tensor:
    x = input if input.dim() == 2 else input.reshape(1, -1)
    if not x.is_floating_point() and not x.is_complex():
        x = x.to(torch.get_default_dtype())
    weights = None
    for w in (fweights, aweights):
        if w is not None:
            weights = w if weights is None else weights * w
    if weights is None:
        mean = x.mean(1, keepdim=True)
        norm = torch.full((), x.size(1) - correction, dtype=x.dtype)
    else:
        w_sum = weights.sum()
        mean = (x * weights).sum(1, keepdim=True) / w_sum
        if correction == 0:
            norm = w_sum
        elif aweights is None:
            norm = w_sum - correction
        else:
            norm = w_sum - correction * (weights * aweights).sum() / w_sum
    centred = x - mean
    left = centred if weights is None else centred * weights
    c = left @ centred.transpose(0, 1).conj() / norm.clamp(min=0).to(x.dtype)
    return c.squeeze() if input.dim() < 2 or input.size(0) == 1 else c


def _corrcoef(input: torch.Tensor) -> torch.Tensor:
    c = _cov(input)
    if c.dim() == 0:
        return c / c
    std = c.diagonal().sqrt()
    return (c / std[:, None] / std[None, :]).clamp(-1, 1)


KERNELS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.cov.default: _cov,
    torch.ops.aten.corrcoef.default: _corrcoef,
}


@contextlib.contextmanager
def capture_kernels() -> Iterator[None]:
    """Within this context the ops of `KERNELS` run their Python kernel as composite, fake
    tensors of symbolic sizes take the metadata of `FAKE_KERNELS`' and
    `COMPOSITE_SHAPE_KERNELS`' ops from them, and torch's trace skips the bookkeeping
    capture/trace_cost.py defers."""
    from torch._decomp import decomposition_table

    composites = {**KERNELS, **{
        op: standing_in_for(functools.partial(op._op_dk, _CIA), shape)
        for op, shape in COMPOSITE_SHAPE_KERNELS.items()}}
    previous = {op: op.py_kernels.get(_CIA) for op in composites}
    decompositions = {op: decomposition_table.get(op) for op in FAKE_KERNELS}
    try:
        for op, kernel in composites.items():
            op.py_kernels[_CIA] = kernel
            op._dispatch_cache.clear()
        for op, shape in FAKE_KERNELS.items():
            if decompositions[op] is not None:  # else the op keeps its own fake kernel
                decomposition_table[op] = standing_in_for(decompositions[op], shape)
        with cheaper_trace():
            yield
    finally:
        for op, decomposition in decompositions.items():
            if decomposition is None:
                decomposition_table.pop(op, None)
            else:
                decomposition_table[op] = decomposition
        for op, kernel in previous.items():
            if kernel is None:
                op.py_kernels.pop(_CIA, None)
            else:
                op.py_kernels[_CIA] = kernel
            op._dispatch_cache.clear()
