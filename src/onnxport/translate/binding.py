"""Binds an FX node's args/kwargs to its ATen schema: names and defaults filled in."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch


@functools.cache
def _keyword_only(fn: Callable[..., Any]) -> frozenset[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def bind(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
         convert: Callable[[Any], Any], fn: Callable[..., Any] | None = None
         ) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments for the translation `fn` of `target`.

    For an `OpOverload`, every schema argument is present, in schema order, with defaults
    filled in. Keyword-only schema arguments go by name, and so does any argument the
    translation declares keyword-only (one function can serve `add.Tensor`, whose `alpha` is
    keyword-only, and `add.Scalar`, whose `alpha` is positional). Other targets get their
    arguments as given.
    """
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
        elif arg.has_default_value():
            value = arg.default_value
        else:
            value = None
        if arg.kwarg_only or arg.name in by_name:
            keywords[arg.name] = convert(value)
        else:
            positional.append(convert(value))
    return positional, keywords
