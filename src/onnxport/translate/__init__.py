"""The translation stage: builder, registry, binding and the node loop.

Op authors import from here: `GraphBuilder`, `Tensor`, `register`, `aten`, `prims`.
"""

from __future__ import annotations

import torch

from onnxport.translate.builder import GraphBuilder, Tensor
from onnxport.translate.registry import Registry, Translation, default_registry, register

aten = torch.ops.aten
prims = torch.ops.prims

__all__ = ["GraphBuilder", "Tensor", "Registry", "Translation", "register", "default_registry",
           "aten", "prims"]
