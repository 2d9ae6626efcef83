"""ExportableModule: a module that carries its own example inputs, names and dynamic shapes."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import torch


class ExportableModule(torch.nn.Module, abc.ABC):
    """A module that knows how it is exported (torch.onnx 2.13's `ExportableModule`).

    Subclass it, implement `forward` and `example_arguments`, and optionally `dynamic_shapes`,
    `input_names` and `output_names`; then `module.to_onnx()` or `onnxport.export(module)`
    exports it with those. It is abstract, as torch.onnx's: a class without
    `example_arguments` cannot be instantiated (TypeError).

    Example:
        >>> import torch, onnxport
        >>> class Doubler(onnxport.ExportableModule):
        ...     def forward(self, x):
        ...         return x * 2
        ...     def example_arguments(self):
        ...         return (torch.randn(2, 3),), None
        ...     def dynamic_shapes(self):
        ...         return ({0: "batch"},)
        >>> str(Doubler().to_onnx().model.graph.inputs[0].shape[0])
        'batch'
    """

    @abc.abstractmethod
    def example_arguments(self) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
        """The example (args, kwargs) the module is exported with."""

    def dynamic_shapes(self) -> Any:
        """The dynamic_shapes spec (strings name the ONNX dims); None: all static."""
        return None

    def input_names(self) -> Sequence[str] | None:
        """The graph input names; None: forward's parameter names."""
        return None

    def output_names(self) -> Sequence[str] | None:
        """The graph output names; None: automatic."""
        return None

    def to_onnx(self, **kwargs: Any) -> Any:
        """`onnxport.export(self, **kwargs)` with this module's example inputs and names."""
        from onnxport._api import export

        program = export(self, **kwargs)
        if program is None:
            raise TypeError("to_onnx() returns an ONNXProgram: do not pass dynamo=False")
        return program
