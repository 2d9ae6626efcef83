"""tasks/workers.py: one export step in a forked worker, and export_checkpoint's use of it.

The CLI tests export T5, BART and Whisper with the worker (their decoder_with_past_model.onnx
is written by it, then validated by the parent). Here: the worker's protocol, and that a
failing worker leaves the parent to export the graph itself, into the same bytes the
worker wrote.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from onnxport.tasks import export, workers

pytestmark = pytest.mark.filterwarnings("ignore")


def test_fork_returns_what_the_function_returned() -> None:
    assert workers.fork(lambda: {"lines": ["a"], "seconds": 1.5}).result() == {
        "lines": ["a"], "seconds": 1.5}


@pytest.mark.parametrize("fn", [lambda: 1 / 0, lambda: os._exit(3), lambda: (lambda: 0)],
                         ids=["raises", "exits", "unpicklable"])
def test_a_failed_worker_gives_none(fn: Any) -> None:
    assert workers.fork(fn).result() is None


def test_cancel_stops_and_reaps_the_worker() -> None:
    worker = workers.fork(lambda: time.sleep(60))
    t0 = time.perf_counter()
    worker.cancel()
    assert time.perf_counter() - t0 < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(worker.pid, os.WNOHANG)


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(workers.ENV_VAR, "0")
    assert not workers.can_fork()


def test_failed_worker_parent_exports_the_same_files(checkpoints: Any, exported: Any,
                                                     tmp_path: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker fails: the parent exports decoder_with_past_model.onnx itself; all three
    files are byte for byte those of the CLI run where the worker wrote it."""
    out_cli, proc = exported("t5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    def fail(*args: Any) -> Any:
        raise RuntimeError("worker failed")

    monkeypatch.setattr(export, "_exported_in_worker", fail)
    lines: list[str] = []
    result = export.export_checkpoint(checkpoints("t5"), tmp_path / "t5",
                                      "text2text-generation-with-past", progress=lines.append)
    assert result.ok
    assert sum(line.startswith("saved decoder_with_past_model.onnx") for line in lines) == 1
    assert "saved decoder_with_past_model.onnx" in proc.stderr  # the worker's line, said
    for name in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"):
        assert (tmp_path / "t5" / name).read_bytes() == (out_cli / name).read_bytes(), name
