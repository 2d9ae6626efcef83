"""Fixtures of the TorchScript-flavour tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from onnxport.translate import symbolic as _symbolic


@pytest.fixture(autouse=True)
def _clean_symbolics() -> Iterator[None]:
    """Custom symbolic registrations made by a test do not leak into the next one."""
    saved = {k: dict(v) for k, v in _symbolic._SYMBOLICS.items()}
    yield
    _symbolic._SYMBOLICS.clear()
    _symbolic._SYMBOLICS.update(saved)
