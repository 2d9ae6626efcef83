"""Bookkeeping of torch.export's trace that capture makes cheaper, graph unchanged.

Stack traces: for every FX node torch builds the whole Python stack as `FrameSummary`s that
read each frame's source line (~75 frames a node), then keeps the few frames of the model's
`forward`s. Within `cheaper_trace()` the frames are built without their line; the lines of the
kept frames are read when the trace is formatted, so `node.meta["stack_trace"]` is the same
text. It applies only where the installed torch has the helper it replaces, with the same
parameters.

(Deferring the fake-tensor cache's check of each new entry, which rebuilds the op's output a
second time, was tried too and dropped: it changed which dims torch specialises, e.g. a
dynamic dim of `torch.fft.rfft(x, dim=0, norm="ortho")` came out static;
tests/ops/test_fft_edge.py::test_dynamic_batch.)
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import traceback
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_depth = 0  # contexts open, in every thread
_saved: list[tuple[Any, str, Any]] = []  # (owner, attribute, torch's original)


def _frames_without_lines(tb: Any, skip: int) -> traceback.StackSummary:
    stack = traceback.StackSummary()
    for frame in reversed(tb[skip:]):
        stack.append(traceback.FrameSummary(frame["filename"], frame["line"], frame["name"],
                                            lookup_line=False))
    return stack


def _apply() -> None:
    import torch.utils._traceback as tracebacks

    extract = getattr(tracebacks, "_extract_symbolized_tb", None)
    if extract is not None and list(inspect.signature(extract).parameters) == ["tb", "skip"]:
        _saved.append((tracebacks, "_extract_symbolized_tb", tracebacks._extract_symbolized_tb))
        tracebacks._extract_symbolized_tb = _frames_without_lines


def _restore() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        setattr(owner, name, original)


@contextlib.contextmanager
def cheaper_trace() -> Iterator[None]:
    """Within this context torch.export's trace defers the work described in this module.
    Nested and concurrent contexts share one application: the last to exit restores torch."""
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            try:
                _apply()
            except BaseException:
                _restore()
                _depth -= 1
                raise
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore()
