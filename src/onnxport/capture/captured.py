"""Captured: what capture hands to translation, whichever front end produced it."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from onnxport.errors import CaptureAttempt


@dataclasses.dataclass(slots=True)
class Captured:
    """An exported program plus how it was obtained.

    `exported_program` is the torch.export result the translator walks; `attempts` records
    every capture strategy tried (the last one succeeded); `decomposed` names the operators
    that were decomposed because the op library has no translation for them; `retraced` says
    whether the whole program had to go through `run_decompositions`;
    `refined_dynamic_shapes` is the spec torch.export's suggested fixes gave, when the user's
    was rejected and the fixed one worked; `size_names` names data-dependent sizes (their
    expression, as in a FakeTensor's shape) that library patches know the meaning of;
    `narrowed` the dynamic input dims whose range torch.export narrowed while capturing.
    """

    exported_program: torch.export.ExportedProgram
    strategy: str
    attempts: list[CaptureAttempt]
    decomposed: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    decompose_seconds: float = 0.0
    retraced: bool = False
    refined_dynamic_shapes: Any = None
    refined_because: str = ""
    size_names: dict[str, str] = dataclasses.field(default_factory=dict)
    # The input dims asked to be dynamic whose range torch.export narrowed ("input 'x' axis
    # 2: 2..224"), beyond the spec's bounds.
    narrowed: list[str] = dataclasses.field(default_factory=list)

    @property
    def graph(self) -> torch.fx.Graph:
        return self.exported_program.graph_module.graph


def node_value(node: torch.fx.Node) -> Any:
    """The example value (FakeTensor, SymInt, tuple of them, ...) torch.export recorded."""
    return node.meta.get("val")
