"""Top-k ties in validation: eager PyTorch again, with ties broken as ONNX's TopK breaks them.

Where a top-k meets equal values across the k-th place (or among the k kept), which ones it
keeps, or their order, is unspecified in PyTorch; ONNX's TopK keeps the lowest index first.
DETR-style detectors select their queries with a top-k over the encoder's class scores, and
the tiny random checkpoints of a sweep give every candidate the same score (their features
vanish to zero, so every position scores the class head's bias): eager and ONNX Runtime then
keep other queries, and their boxes differ by up to the image. Validation runs eager again
with a top-k that breaks ties by the lowest index, compares the same detections, and lists
the ties; a difference that remains is the graph's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["eager_with_onnx_ties"]


def _describe(values: torch.Tensor, k: int, dim: int) -> str | None:
    """What ties a top-k of `values` (sorted along `dim`) meets, or None."""
    ordered = values.movedim(dim, -1)
    n = ordered.shape[-1]
    kept = ordered[..., :k]
    across = (ordered[..., k - 1] == ordered[..., k]) if k < n else torch.zeros(
        ordered.shape[:-1], dtype=torch.bool)
    within = (kept[..., 1:] == kept[..., :-1]).any(-1) if k > 1 else torch.zeros_like(across)
    if not bool((across | within).any()):
        return None
    kth = ordered[..., k - 1]
    tied = (ordered == kth[..., None]).sum(-1)
    worst = int(tied.argmax())
    where = "across the k-th place" if bool(across.any()) else "among the k kept"
    return (f"top-k (k={k} of {n}) with ties {where}: {int(tied.flatten()[worst])} candidates "
            f"share the k-th value {float(kth.flatten()[worst]):.6g}")


def _onnx_topk(ties: list[str], input: torch.Tensor, k: int, dim: int = -1,
               largest: bool = True, sorted: bool = True, *, out: Any = None) -> Any:
    values, indices = torch.sort(input, dim=dim, descending=largest, stable=True)
    note = _describe(values, k, dim)
    if note is not None:
        ties.append(note)
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


class _OnnxTopK(TorchFunctionMode):
    def __init__(self, ties: list[str]) -> None:
        super().__init__()
        self.ties = ties

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func in (torch.topk, torch.Tensor.topk):
            return _onnx_topk(self.ties, *args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def eager_with_onnx_ties(eager: Callable[[Any], Any], feeds: Any) -> tuple[Any, list[str]]:
    """`eager(feeds)` with every top-k keeping the lowest index among equal values, and the
    ties met (empty: no top-k met a tie, the first run's outputs stand)."""
    ties: list[str] = []
    with torch.no_grad(), _OnnxTopK(ties):
        outputs = eager(feeds)
    return outputs, ties
