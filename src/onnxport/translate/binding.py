"""Binds an FX node's args/kwargs to its ATen schema: names and defaults filled in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def bind(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
         convert: Callable[[Any], Any]) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword-only arguments for the translation of `target`.

    For an `OpOverload`, every schema argument is present, in schema order, with defaults
    filled in; keyword-only ones go by name. Other targets get their arguments as given.
    """
    if not isinstance(target, torch._ops.OpOverload):
        return [convert(a) for a in args], {k: convert(v) for k, v in kwargs.items()}
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
        if arg.kwarg_only:
            keywords[arg.name] = convert(value)
        else:
            positional.append(convert(value))
    return positional, keywords
