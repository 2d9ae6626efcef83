"""The op library: translation functions, one module per ATen family.

Importing this package registers every built-in translation into the default registry.
"""

from __future__ import annotations

import importlib
import pkgutil


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_all()
