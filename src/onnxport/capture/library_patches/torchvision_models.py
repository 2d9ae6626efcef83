"""Capture-only patches of torchvision's classification and video models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PATCHES: dict[tuple[str, str], Callable[..., Any]] = {
}
