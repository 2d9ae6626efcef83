"""OnnxRegistry: the public face of the op library (torch.onnx's documented API)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from onnxport._onnxscript import user_translation
from onnxport.translate.registry import Registry, Translation, default_registry


class OnnxRegistry:
    """Translations of ATen (and custom) operators for one export, at one opset.

    Starts as a copy of the built-in op library; `register_op` overrides or extends it for
    the exports that use this registry only.
    """

    def __init__(self, opset_version: int = 18) -> None:
        self._opset_version = opset_version
        self.registry: Registry = default_registry().copy()

    @property
    def opset_version(self) -> int:
        """The ONNX opset the exporter targets (default 18)."""
        return self._opset_version

    def _target(self, namespace: str, op_name: str, overload: str | None) -> Any:
        packet = getattr(getattr(torch.ops, namespace), op_name)
        return getattr(packet, overload or "default")

    def is_registered_op(self, namespace: str, op_name: str, overload: str | None = None) -> bool:
        """Whether torch.ops.<namespace>.<op_name>.<overload> has a translation."""
        return bool(self.get_op_functions(namespace, op_name, overload))

    def get_op_functions(self, namespace: str, op_name: str, overload: str | None = None
                         ) -> list[Translation] | None:
        """The translations of the op, in registration order (custom ones last), or None."""
        try:
            target = self._target(namespace, op_name, overload)
        except (AttributeError, RuntimeError):
            return None
        found = [t for t in self.registry.all_for(target) if t.since_opset <= self._opset_version]
        return found or None

    def register_op(self, function: Callable[..., Any] | Any, namespace: str, op_name: str,
                    overload: str | None = None, is_complex: bool = False) -> None:
        """Register `function` for torch.ops.<namespace>.<op_name>.<overload>.

        `function` is a translation in any form `custom_translation_table` takes: a plain
        function calling onnxscript ops (traced), an onnxscript function, an onnxport
        `fn(g, ...)`, or a list of them.

        Raises:
            ValueError: the name does not name an operator.
        """
        if not namespace or not op_name or "::" in op_name or "." in op_name:
            raise ValueError(f"malformed operator name {namespace}::{op_name}: expected 'namespace::op'")
        try:
            target = self._target(namespace, op_name, overload)
        except (AttributeError, RuntimeError) as e:
            raise ValueError(f"no operator torch.ops.{namespace}.{op_name}.{overload or 'default'}") from e
        self.registry.add(Translation(target, user_translation(function), 1, is_custom=True))
