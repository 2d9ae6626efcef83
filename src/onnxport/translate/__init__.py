"""The translation stage: builder, registry, binding and the node loop.

Op authors import from here: `GraphBuilder`, `Tensor`, `register`, `aten`, `prims`.
"""

from __future__ import annotations

from onnxport.translate.builder import GraphBuilder, Tensor
from onnxport.translate.registry import (OpNamespace, Registry, Translation, default_registry,
                                         register)

# A name this torch lacks (an overload removed in 2.14, say) is a MissingOverload, which
# `register` skips: the library loads on every supported torch.
aten = OpNamespace("aten")
prims = OpNamespace("prims")

__all__ = ["GraphBuilder", "Tensor", "Registry", "Translation", "register", "default_registry",
           "aten", "prims"]
