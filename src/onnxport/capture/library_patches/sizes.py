"""Size arithmetic the patches share, in forms torch's symbolic shapes simplify."""

from __future__ import annotations

from typing import Any


def ceil_to(size: Any, multiple: int) -> Any:
    """`size` rounded up to a multiple: `size + (multiple - size % multiple) % multiple`,
    written without the remainder, which nests per stage and takes sympy minutes."""
    return (size + multiple - 1) // multiple * multiple
