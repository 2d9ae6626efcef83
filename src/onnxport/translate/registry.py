"""The op library's registry: ATen overload (or any FX target) -> translation functions.

One registry serves both front ends. Keys are `torch._ops.OpOverload` objects (or plain
callables such as `operator.getitem`); each key holds translations by `since_opset`, and a
lookup takes the newest one at or below the target opset. A translation registered later
for the same key and opset wins, so a user's registration overrides a built-in.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch


@dataclasses.dataclass(frozen=True, slots=True)
class Translation:
    """A translation function and when it applies."""

    target: Any
    function: Callable[..., Any]
    since_opset: int = 1
    is_custom: bool = False

    @property
    def location(self) -> str:
        """`file:line name` of the function, for error messages."""
        fn = inspect.unwrap(self.function)
        try:
            file = inspect.getsourcefile(fn) or "?"
            line = inspect.getsourcelines(fn)[1]
        except (OSError, TypeError):
            return getattr(fn, "__qualname__", repr(fn))
        short = file.split("/src/")[-1] if "/src/" in file else file
        return f"{short}:{line} {getattr(fn, '__qualname__', '')}"


def target_name(target: Any) -> str:
    """A stable printable name: `aten.add.Tensor`, `operator.getitem`."""
    if isinstance(target, str):  # an operator registered by name before it existed
        return target.replace("::", ".")
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    if isinstance(target, torch._ops.OpOverloadPacket):
        return f"{target._qualified_op_name.replace('::', '.')}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", repr(target))
    if module in ("_operator", "operator"):
        module = "operator"
    return f"{module}.{name}" if module else name


class Registry:
    """Translations keyed by FX target and opset."""

    def __init__(self) -> None:
        self._table: dict[Any, list[Translation]] = {}

    def register(
        self, *targets: Any, since_opset: int = 1, is_custom: bool = False
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register the function for every target in `targets`."""

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            for target in _expand(targets):
                self.add(Translation(target, fn, since_opset, is_custom))
            return fn

        return decorator

    def add(self, translation: Translation) -> None:
        """Add one translation; later additions win over earlier ones at the same opset."""
        self._table.setdefault(translation.target, []).append(translation)

    def lookup(self, target: Any, opset: int) -> Translation | None:
        """The translation for `target` at `opset`, or None. A user's (custom) translation
        wins over the library's at every opset, whatever `since_opset` the library's has."""
        candidates = self._table.get(target) or self._by_name(target)
        if not candidates:
            return None
        best: Translation | None = None
        for t in candidates:
            if t.since_opset <= opset and (best is None or (t.is_custom, t.since_opset) >=
                                           (best.is_custom, best.since_opset)):
                best = t
        return best

    def all_for(self, target: Any) -> list[Translation]:
        """Every translation of `target`, in registration order."""
        return list(self._table.get(target, ()) or self._by_name(target))

    def _by_name(self, target: Any) -> list[Translation]:
        """Translations registered by qualified name (`"onnx::Attention.opset23"`) for an
        operator that did not exist yet at registration (defined by a module imported later)."""
        if not isinstance(target, torch._ops.OpOverload):
            return []
        return self._table.get(f"{target._schema.name}.{target._overloadname}", [])

    def targets(self) -> list[Any]:
        """Every registered key."""
        return list(self._table)

    def copy(self) -> Registry:
        """An independent copy: per-export edits never touch the default registry."""
        new = Registry()
        new._table = {k: list(v) for k, v in self._table.items()}
        return new


class MissingOverload:
    """An ATen overload the installed torch does not have (removed or not yet added).

    `OpNamespace` hands these out instead of raising, so a translation module written for
    several torch releases loads on each; registering one is a no-op recorded in
    `Registry.unavailable`.
    """

    __slots__ = ("qualified_name",)

    def __init__(self, qualified_name: str) -> None:
        self.qualified_name = qualified_name  # "aten::cholesky.default"

    def __repr__(self) -> str:
        return f"<{self.qualified_name}: not in torch {torch.__version__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self.qualified_name} does not exist in torch "
                                  f"{torch.__version__}")


class MissingPacket:
    """An ATen operator name the installed torch does not have; every overload is missing."""

    __slots__ = ("qualified_name",)

    def __init__(self, qualified_name: str) -> None:
        self.qualified_name = qualified_name  # "aten::cholesky"

    def __getattr__(self, overload: str) -> MissingOverload:
        if overload.startswith("__"):
            raise AttributeError(overload)
        return MissingOverload(f"{self.qualified_name}.{overload}")

    def overloads(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        return f"<{self.qualified_name}: not in torch {torch.__version__}>"


class OpNamespace:
    """`torch.ops.<namespace>` that answers a name this torch lacks with a `MissingPacket`.

    Translations are written once for every supported torch: `aten.cholesky.default` is an
    OpOverload on torch 2.13 and a `MissingOverload` on 2.14, which removed it.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._namespace = getattr(torch.ops, name)

    def __getattr__(self, op: str) -> Any:
        try:
            return getattr(self._namespace, op)
        except AttributeError:
            if op.startswith("__"):
                raise
            return MissingPacket(f"{self._name}::{op}")

    def __repr__(self) -> str:
        return f"<OpNamespace torch.ops.{self._name}>"


def _expand(targets: Iterable[Any]) -> Iterable[Any]:
    for target in targets:
        if isinstance(target, (MissingOverload, MissingPacket)):
            UNAVAILABLE.add(target.qualified_name)
        elif isinstance(target, str):
            # "namespace::op.overload": the OpOverload if it exists now, else the name itself
            # (looked up by name once the operator exists).
            qualified, _, overload = target.rpartition(".")
            namespace, _, op = qualified.partition("::")
            try:
                yield getattr(getattr(getattr(torch.ops, namespace), op), overload)
            except (AttributeError, RuntimeError):
                yield target
        elif isinstance(target, torch._ops.OpOverloadPacket):
            for overload in target.overloads():
                yield getattr(target, overload)
        else:
            yield target


UNAVAILABLE: set[str] = set()
"""Qualified names of overloads the library translates that this torch does not have."""

DEFAULT = Registry()
register = DEFAULT.register

_loaded = False


def default_registry() -> Registry:
    """The built-in op library, loaded once per process."""
    global _loaded
    if not _loaded:
        import onnxport.ops  # noqa: F401  (registers every built-in translation)

        _loaded = True
    return DEFAULT
