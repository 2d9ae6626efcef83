"""What the TorchScript node handlers use of the translator that calls them.

`ts_prims`, `ts_scalars` and `ts_symbolic` handle nodes for `torchscript.TorchScriptTranslator`,
which passes itself to each handler as `t`. They see it through this protocol, so that
nothing imports the translator back (the import graph stays one-way: torchscript -> ts_*).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import onnx_ir as ir
import torch

if TYPE_CHECKING:
    from onnxport.capture.torchscript import OperatorExportTypes, ScriptCaptured
    from onnxport.translate.builder import GraphBuilder

__all__ = ["ScriptTranslation"]


class ScriptTranslation(Protocol):
    """The translator's state and steps a node handler reads or calls."""

    captured: ScriptCaptured
    g: GraphBuilder
    export_type: OperatorExportTypes
    env: dict[int, Any]  # TorchScript value (unique id) -> its translation
    _hints: dict[int, list[int]]  # example sizes of values whose dims are unknown
    _appended_dtypes: dict[int, ir.DataType]  # per list: the dtype of its first element
    _appended_ranks: dict[int, int]

    def _get(self, value: torch._C.Value) -> Any: ...

    def _set(self, value: torch._C.Value, result: Any) -> None: ...

    def _initializer(self, path: str, tensor: torch.Tensor) -> ir.Value: ...

    def _aten(self, node: torch._C.Node, *, remake: bool = False) -> None: ...

    def info(self, out: torch._C.Value) -> tuple[ir.DataType | None, Any]: ...

    def _bind_outputs(self, node: torch._C.Node, result: Any,
                      infos: Sequence[tuple[ir.DataType | None, Any]]) -> None: ...

    def _finish(self, out: torch._C.Value, value: Any, info: tuple[Any, Any]) -> Any: ...

    def inlines(self, node: torch._C.Node) -> bool: ...

    def translate_block(self, sub: GraphBuilder, block: Any,
                        inputs: Sequence[Any]) -> list[Any]: ...
