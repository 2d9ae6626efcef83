"""Capture-only patches of timm's models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
}
