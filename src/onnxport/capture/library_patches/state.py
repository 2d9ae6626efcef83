"""What the patches share while they apply (library_patches() sets and clears it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The functions patched, while patched (a patch may fall back to the original).
ORIGINALS: dict[tuple[str, str], Callable[..., Any]] = {}
# The example's value of each unbacked size the resize patch made (sympy symbol -> int).
EXAMPLE_SIZES: dict[Any, int] = {}
# The names patches give data-dependent sizes (str(expression) -> name), for the graph's dims.
size_names: dict[str, str] = {}
