"""Binds an FX node's args/kwargs to its ATen schema: names and defaults filled in."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

OWN_SIGNATURE = "_onnxport_binds_own_signature"
"""Set (True) on a translation that binds the node's arguments to a signature of its own: it
is called `fn(g, NodeArguments)` instead of with the schema's arguments spread out."""


@dataclasses.dataclass(frozen=True, slots=True)
class Argument:
    """One argument of a node, as its schema names it."""

    name: str | None  # the schema's name; None for a positional argument of a schema-less target
    value: Any
    given: bool  # the node gives it; False: `value` is the schema's default
    kwarg_only: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class NodeArguments:
    """Every argument of a node in schema order, and whether the node gave it."""

    arguments: tuple[Argument, ...]

    def __iter__(self) -> Iterator[Argument]:
        return iter(self.arguments)

    @classmethod
    def from_values(cls, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
                    ) -> NodeArguments:
        """Arguments given as plain values (no schema): positional ones, then named ones."""
        return cls(tuple(Argument(None, a, True) for a in args)
                   + tuple(Argument(k, v, True, kwarg_only=True) for k, v in kwargs.items()))

    def for_translation(self, fn: Callable[..., Any] | None
                        ) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments for an onnxport translation `fn(g, ...)`: schema
        order, keyword-only schema arguments (and any `fn` declares keyword-only) by name."""
        by_name = _keyword_only(fn) if fn is not None else frozenset()
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for arg in self.arguments:
            if arg.name is not None and (arg.kwarg_only or arg.name in by_name):
                keywords[arg.name] = arg.value
            else:
                positional.append(arg.value)
        return positional, keywords


@functools.cache
def _keyword_only(fn: Callable[..., Any]) -> frozenset[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def node_arguments(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                   convert: Callable[[Any], Any]) -> NodeArguments:
    """The node's arguments bound to `target`'s schema (an `OpOverload`), defaults filled in
    and marked as not given; other targets' arguments as given."""
    if not isinstance(target, torch._ops.OpOverload):
        return NodeArguments.from_values([convert(a) for a in args],
                                         {k: convert(v) for k, v in kwargs.items()})
    bound: list[Argument] = []
    for i, arg in enumerate(target._schema.arguments):
        given = True
        if i < len(args):
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        else:
            given = False
            value = arg.default_value if arg.has_default_value() else None
        bound.append(Argument(arg.name, convert(value), given, bool(arg.kwarg_only)))
    return NodeArguments(tuple(bound))


def bind(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
         convert: Callable[[Any], Any], fn: Callable[..., Any] | None = None
         ) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments for the translation `fn` of `target`.

    For an `OpOverload`, every schema argument is present, in schema order, with defaults
    filled in. Keyword-only schema arguments go by name, and so does any argument the
    translation declares keyword-only (one function can serve `add.Tensor`, whose `alpha` is
    keyword-only, and `add.Scalar`, whose `alpha` is positional). Other targets get their
    arguments as given. A translation marked `OWN_SIGNATURE` gets one `NodeArguments`.
    """
    if fn is not None and getattr(fn, OWN_SIGNATURE, False):
        return [node_arguments(target, args, kwargs, convert)], {}
    # Every node of every export comes through here: no per-argument objects.
    if not isinstance(target, torch._ops.OpOverload):
        return [convert(a) for a in args], {k: convert(v) for k, v in kwargs.items()}
    by_name = _keyword_only(fn) if fn is not None else frozenset()
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args):
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        else:
            value = arg.default_value if arg.has_default_value() else None
        if arg.kwarg_only or arg.name in by_name:
            keywords[arg.name] = convert(value)
        else:
            positional.append(convert(value))
    return positional, keywords
