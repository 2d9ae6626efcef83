"""State shared by both export flavours, the lowest room `_api` and `_torchscript_api` use.

* The export-in-progress flag (`is_in_onnx_export`) is per thread: an export running in one
  thread is not seen by model code running in another.
* Exports run one at a time in a process (`_exporting` holds a re-entrant lock): torch.export's
  non-strict capture patches `nn.Module.__call__` and torch's tracing state process-wide, so
  two captures in threads at once lose each other's module stacks (node names, metadata) or
  fail. Threads exporting at the same time wait their turn and get what a serial export gives.
* Registry resolution: `None` is the built-in op library (loaded once per process, under a
  lock so that threads exporting at the same time do not race to load it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from onnxport.translate import Registry, default_registry

_local = threading.local()
_registry_lock = threading.Lock()
_export_lock = threading.RLock()


def is_in_onnx_export() -> bool:
    """Whether an onnxport export is running in this thread (in either flavour)."""
    return getattr(_local, "depth", 0) > 0


@contextlib.contextmanager
def _exporting() -> Iterator[None]:
    """Run the with-block as this thread's export: one export at a time per process
    (re-entrant, so an export may run another), `is_in_onnx_export()` true in this thread."""
    with _export_lock:
        _local.depth = getattr(_local, "depth", 0) + 1
        try:
            yield
        finally:
            _local.depth -= 1


def _as_registry(registry: Any) -> Registry:
    """The op library an export uses: the built-in one for None, else the one given."""
    if registry is None:
        with _registry_lock:
            return default_registry()
    if isinstance(registry, Registry):
        return registry
    inner = getattr(registry, "registry", None)
    if isinstance(inner, Registry):
        return inner
    raise TypeError(f"registry must be an OnnxRegistry, not {type(registry).__name__}")
