"""Capture-only patch of VITS's rational-quadratic spline (its duration predictor's flows).

* `_unconstrained_rational_quadratic_spline`: transformers writes the spline's result into
  zero tensors through boolean masks (the inputs inside the tail bound go through the spline,
  those outside stay) and sets the bins' end points by assignment into slices. Those in-place
  writes into views made capture re-trace the whole program to functionalize it (half of a
  VITS export's time), and the masks are data-dependent sizes (NonZero in the graph). The
  patch computes the spline for every element, its input clamped to the bound, and selects
  with `where`: per element the same arithmetic, so the same values for the elements inside
  (to the last bit of torch's vectorized kernels) and the inputs themselves (log-determinant
  0) outside. The end points are concatenated,
  not assigned. transformers' checks on the values (inside the bound, a non-negative
  discriminant) are assertions on data, not computations; the patch leaves them out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional

__all__ = ["PATCHES"]


def _bin_edges(unnormalized: torch.Tensor, min_size: float, bound: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(bin sizes, cumulative edges from -bound to bound) along the last axis."""
    count = unnormalized.shape[-1]
    sizes = min_size + (1 - min_size * count) * functional.softmax(unnormalized, dim=-1)
    edges = functional.pad(torch.cumsum(sizes, dim=-1), pad=(1, 0), mode="constant", value=0.0)
    edges = 2 * bound * edges - bound
    ends = torch.ones_like(edges[..., :1]) * bound
    edges = torch.cat([-ends, edges[..., 1:-1], ends], dim=-1)
    return edges[..., 1:] - edges[..., :-1], edges


def _pick(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return table.gather(-1, index)[..., 0]


def _spline(inputs: torch.Tensor, unnormalized_widths: torch.Tensor,
            unnormalized_heights: torch.Tensor, unnormalized_derivatives: torch.Tensor,
            reverse: bool = False, tail_bound: float = 5.0, min_bin_width: float = 1e-3,
            min_bin_height: float = 1e-3, min_derivative: float = 1e-3
            ) -> tuple[torch.Tensor, torch.Tensor]:
    inside = (inputs >= -tail_bound) & (inputs <= tail_bound)
    x = inputs.clamp(-tail_bound, tail_bound)
    edge = math.log(math.exp(1 - min_derivative) - 1)
    derivatives = min_derivative + functional.softplus(
        functional.pad(unnormalized_derivatives, pad=(1, 1), mode="constant", value=edge))
    widths, cumwidths = _bin_edges(unnormalized_widths, min_bin_width, tail_bound)
    heights, cumheights = _bin_edges(unnormalized_heights, min_bin_height, tail_bound)
    locations = cumheights if reverse else cumwidths
    # the last edge a hair beyond the bound, so that x == bound falls in the last bin
    locations = torch.cat([locations[..., :-1], locations[..., -1:] + 1e-6], dim=-1)
    index = (torch.sum(x[..., None] >= locations, dim=-1) - 1)[..., None]

    x_cumwidth, x_width = _pick(cumwidths, index), _pick(widths, index)
    x_cumheight, x_height = _pick(cumheights, index), _pick(heights, index)
    x_delta = _pick(heights / widths, index)
    x_derivative = _pick(derivatives, index)
    x_derivative_next = _pick(derivatives[..., 1:], index)
    curvature = x_derivative + x_derivative_next - 2 * x_delta

    if reverse:  # the root of a quadratic in the bin's relative position
        offset = x - x_cumheight
        a = x_height * (x_delta - x_derivative) + offset * curvature
        b = x_height * x_derivative - offset * curvature
        c = -x_delta * offset
        theta = (2 * c) / (-b - torch.sqrt(b.pow(2) - 4 * a * c))
        outputs = theta * x_width + x_cumwidth
    else:
        theta = (x - x_cumwidth) / x_width
    spread = theta * (1 - theta)
    denominator = x_delta + curvature * spread
    if not reverse:
        outputs = x_cumheight + x_height * (x_delta * theta.pow(2) + x_derivative * spread) \
            / denominator
    slope = x_delta.pow(2) * (x_derivative_next * theta.pow(2) + 2 * x_delta * spread
                              + x_derivative * (1 - theta).pow(2))
    log_abs_det = torch.log(slope) - 2 * torch.log(denominator)
    if reverse:
        log_abs_det = -log_abs_det
    return (torch.where(inside, outputs, inputs),
            torch.where(inside, log_abs_det, torch.zeros_like(log_abs_det)))


PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    ("transformers.models.vits.modeling_vits", "_unconstrained_rational_quadratic_spline"):
        _spline,
}
