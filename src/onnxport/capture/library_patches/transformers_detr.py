"""Capture-only patches of transformers' DETR-style detectors (and their relatives).

* `len` in the modules of RT-DETR, RT-DETRv2, D-FINE, DEIMv2, PP-DocLayout v2/v3 and
  OmDet-Turbo: the length of a tensor as its first size, symbolic where the batch is dynamic.
  Their forward reads `batch_size = len(source_flatten)`: Python's `len()` must return an int,
  so the batch was specialized to the example's, non-strict capture failed ("You marked
  batch_size as dynamic but your code specialized it"), and the strict retry that followed took
  most of a minute (RT-DETR and D-FINE: 51-86 s). `len()` of anything else, and of a 0-d
  tensor, is Python's.
* The in-place writes into views of those modules, out of place. An in-place op on a view
  makes capture functionalize the whole program by re-tracing it (`run_decompositions`), which
  cost RT-DETR and D-FINE twice their capture. Two sites, the same in every family:
  - `generate_anchors` (`grid_xy[..., 0] /= width`): the same anchors, with the grid's x and y
    offset and divided before they are stacked (the same float operations, in the same order);
  - the element writes of their modules (`spatial_shapes[level, 0] = height` into a
    `torch.empty`): `Tensor.__setitem__` called from those modules with one int (or symbolic
    int) per dim and a number writes through `index_put_` on the tensor itself, which capture
    translates as its functional form (capture/inplace.py), instead of `copy_` into a view.
    Calls from anywhere else, and any other key or value, are `Tensor.__setitem__`'s own.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable
from typing import Any

import torch

from onnxport.capture.library_patches import state


def _len(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor) and obj.dim() > 0:
        return obj.shape[0]
    return builtins.len(obj)


def _generate_anchors(self: Any, spatial_shapes: Any = None, grid_size: float = 0.05,
                      device: Any = "cpu", dtype: torch.dtype = torch.float32
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    if spatial_shapes is None:
        size, strides = self.config.anchor_image_size, self.config.feat_strides
        spatial_shapes = [(int(size[0] / s), int(size[1] / s)) for s in strides]
    anchors = []
    for level, (height, width) in enumerate(spatial_shapes):
        grid_y, grid_x = torch.meshgrid(torch.arange(end=height, device=device).to(dtype),
                                        torch.arange(end=width, device=device).to(dtype),
                                        indexing="ij")
        grid_xy = torch.stack([(grid_x + 0.5) / width, (grid_y + 0.5) / height], -1)[None]
        wh = torch.ones_like(grid_xy) * grid_size * (2.0**level)
        anchors.append(torch.concat([grid_xy, wh], -1).reshape(-1, height * width, 4))
    eps = 1e-2
    anchors = torch.concat(anchors, 1)
    valid_mask = ((anchors > eps) * (anchors < 1 - eps)).all(-1, keepdim=True)
    anchors = torch.log(anchors / (1 - anchors))
    big = torch.full((), torch.finfo(dtype).max, dtype=dtype, device=device)
    return torch.where(valid_mask, anchors, big), valid_mask


_MODULES = ["rt_detr.modeling_rt_detr", "rt_detr_v2.modeling_rt_detr_v2",
            "d_fine.modeling_d_fine", "deimv2.modeling_deimv2",
            "pp_doclayout_v2.modeling_pp_doclayout_v2",
            "pp_doclayout_v3.modeling_pp_doclayout_v3", "omdet_turbo.modeling_omdet_turbo"]
_WRITERS = frozenset(f"transformers.models.{module}" for module in _MODULES)
_ANCHORS = ["rt_detr.modeling_rt_detr.RTDetrModel", "rt_detr_v2.modeling_rt_detr_v2.RTDetrV2Model",
            "d_fine.modeling_d_fine.DFineModel", "deimv2.modeling_deimv2.Deimv2Model",
            "pp_doclayout_v2.modeling_pp_doclayout_v2.PPDocLayoutV2Model",
            "pp_doclayout_v3.modeling_pp_doclayout_v3.PPDocLayoutV3Model"]


def _is_index(i: Any) -> bool:
    return isinstance(i, (int, torch.SymInt)) and not isinstance(i, bool)


def _setitem(self: torch.Tensor, key: Any, value: Any) -> None:
    element = key if isinstance(key, tuple) else (key,)
    if (sys._getframe(1).f_globals.get("__name__") in _WRITERS
            and builtins.len(element) == self.dim() and all(_is_index(i) for i in element)
            and isinstance(value, (int, float, torch.SymInt, torch.SymFloat))
            and not isinstance(value, bool)):
        index = tuple(torch.as_tensor(i, device=self.device) for i in element)
        self.index_put_(index, torch.as_tensor(value, dtype=self.dtype, device=self.device))
        return
    state.ORIGINALS[("torch.Tensor", "__setitem__")](self, key, value)


PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
    **{(f"transformers.models.{module}", "len"): _len for module in _MODULES},
    **{(f"transformers.models.{model}", "generate_anchors"): _generate_anchors
       for model in _ANCHORS},
    ("torch.Tensor", "__setitem__"): _setitem,
}
