"""tasks/workers.py: one export step in a forked worker, and export_checkpoint's use of it.

The worker runs when a core is idle (ONNXPORT_EXPORT_WORKERS=1 forces it, =0 switches it
off). Here: the worker's protocol; the idle-core decision; that T5's encoder_model.onnx and
decoder_with_past_model.onnx written by the worker give the bytes of the CLI's serial export
and validate in the parent; and that a failing worker leaves the parent to export the graphs
itself, into the same bytes.
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


def test_on_when_a_core_is_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset: a worker when the machine left about a core idle since the sample; 0: never;
    1: always (two CPUs here)."""
    monkeypatch.delenv(workers.ENV_VAR, raising=False)
    monkeypatch.setattr(workers.threading, "active_count", lambda: 1)  # pytest-xdist runs threads
    now = workers.cpu_sample()
    assert now is not None  # Linux: /proc/stat
    wall, idle, busy = now
    one_core_idle = (wall - 2.0, idle - 2.0, busy - 2.0)  # 2 s ago: 1 core idle, 1 busy
    none_idle = (wall - 2.0, idle, busy - 4.0)
    assert workers.can_fork(one_core_idle)
    assert not workers.can_fork(none_idle)
    monkeypatch.setenv(workers.ENV_VAR, "0")
    assert not workers.can_fork(one_core_idle)
    monkeypatch.setenv(workers.ENV_VAR, "1")
    assert workers.can_fork(none_idle)


@pytest.mark.parametrize("worker_fails", [False, True], ids=["worker", "worker-fails"])
def test_worker_export_gives_the_serial_bytes(worker_fails: bool, checkpoints: Any,
                                              exported: Any, tmp_path: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """T5 with the worker asked for: its encoder_model.onnx and decoder_with_past_model.onnx
    are written by the worker (or, when the worker fails, by the parent); all three files
    are byte for byte those of the CLI's serial run, and validation passes."""
    out_cli, proc = exported("t5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    monkeypatch.setenv(workers.ENV_VAR, "1")
    if not workers.can_fork():
        pytest.fail("the worker path needs POSIX fork and two CPUs")
    forked: list[int] = []
    fork = workers.fork

    def counted(fn: Any) -> Any:
        forked.append(1)
        return fork(fn)

    monkeypatch.setattr(workers, "fork", counted)
    if worker_fails:
        def fail(*args: Any) -> Any:
            raise RuntimeError("worker failed")

        monkeypatch.setattr(export, "_exported_in_worker", fail)
    lines: list[str] = []
    result = export.export_checkpoint(checkpoints("t5"), tmp_path / "t5",
                                      "text2text-generation-with-past", progress=lines.append)
    assert result.ok and forked == [1]
    for name in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"):
        assert sum(line.startswith(f"saved {name}") for line in lines) == 1, name
    for name in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"):
        assert (tmp_path / "t5" / name).read_bytes() == (out_cli / name).read_bytes(), name


def test_a_stuck_worker_is_stopped_at_its_timeout() -> None:
    """A worker past its timeout is killed and reaped, and gives no result."""
    worker = workers.fork(lambda: __import__("time").sleep(60))
    start = time.monotonic()
    assert worker.result(timeout=0.5) is None
    assert time.monotonic() - start < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(worker.pid, os.WNOHANG)  # reaped


def test_off_while_another_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset: no worker while another Python thread runs (a lock it holds at the fork would
    stay held in the child); asked for with 1: a worker all the same."""
    monkeypatch.delenv(workers.ENV_VAR, raising=False)
    monkeypatch.setattr(workers, "idle_cores", lambda since: 2.0)
    monkeypatch.setattr(workers, "_cpus", lambda: 2)
    monkeypatch.setattr(workers.threading, "active_count", lambda: 1)
    assert workers.can_fork(None)
    monkeypatch.setattr(workers.threading, "active_count", lambda: 2)
    assert not workers.can_fork(None)
    monkeypatch.setenv(workers.ENV_VAR, "1")
    assert workers.can_fork(None)
