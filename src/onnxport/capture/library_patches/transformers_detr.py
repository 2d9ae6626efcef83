"""Capture-only patches of transformers' DETR-style detectors (and their relatives).

* `len` in the modules of RT-DETR, RT-DETRv2, D-FINE, DEIMv2, PP-DocLayout v2/v3 and
  OmDet-Turbo: the length of a tensor as its first size, symbolic where the batch is dynamic.
  Their forward reads `batch_size = len(source_flatten)`: Python's `len()` must return an int,
  so the batch was specialized to the example's, non-strict capture failed ("You marked
  batch_size as dynamic but your code specialized it"), and the strict retry that followed took
  most of a minute (RT-DETR and D-FINE: 51-86 s). `len()` of anything else, and of a 0-d
  tensor, is Python's.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import torch


def _len(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor) and obj.dim() > 0:
        return obj.shape[0]
    return builtins.len(obj)


_MODULES = ["rt_detr.modeling_rt_detr", "rt_detr_v2.modeling_rt_detr_v2",
            "d_fine.modeling_d_fine", "deimv2.modeling_deimv2",
            "pp_doclayout_v2.modeling_pp_doclayout_v2",
            "pp_doclayout_v3.modeling_pp_doclayout_v3", "omdet_turbo.modeling_omdet_turbo"]

PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    (f"transformers.models.{module}", "len"): _len for module in _MODULES
}
