"""tasks/workers.py: one export step in a forked worker, and export_checkpoint's use of it.

The worker runs when a core is idle (ONNXPORT_EXPORT_WORKERS=1 forces it, =0 switches it
off). Here: the worker's protocol; the idle-core decision; that T5's encoder_model.onnx and
decoder_with_past_model.onnx written by the worker give the bytes of the CLI's serial export
and validate in the parent (each as soon as the worker has saved it: the worker's messages);
and that a worker failing at once or after one graph leaves the parent to export the graphs
not saved yet itself, into the same bytes.
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


def test_messages_arrive_while_the_worker_runs() -> None:
    """What the worker `send`s reaches the parent before the worker returns: here the worker
    waits, after its first message, for the parent's reply to it."""
    reply_read, reply_write = os.pipe()

    def fn() -> str:
        workers.send("first")
        answer = os.read(reply_read, 16).decode()
        workers.send({"second": answer})
        return "done"

    worker = workers.fork(fn)
    received = []
    for message in worker.messages(timeout=60):
        received.append(message)
        if message == "first":
            os.write(reply_write, b"go")
    os.close(reply_read)
    os.close(reply_write)
    assert received == ["first", {"second": "go"}]
    assert worker.result() == "done"


def test_a_worker_failing_after_a_message_gives_none() -> None:
    def fn() -> None:
        workers.send("saved one")
        os._exit(3)

    worker = workers.fork(fn)
    assert list(worker.messages(timeout=60)) == ["saved one"]
    assert worker.result() is None


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


@pytest.mark.parametrize("worker_fails", [None, "at once", "after a graph"],
                         ids=["worker", "worker-fails", "worker-fails-midway"])
def test_worker_export_gives_the_serial_bytes(worker_fails: str | None, checkpoints: Any,
                                              exported: Any, tmp_path: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """T5 with the worker asked for: its encoder_model.onnx and decoder_with_past_model.onnx
    are written by the worker (or, when the worker fails, by the parent: both, or the one
    the worker had not saved yet); the parent validates each file once, the worker's as
    they arrive; all three files are byte for byte those of the CLI's serial run, and
    validation passes."""
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
    in_worker = export._exported_in_worker
    if worker_fails:
        def fail(plan: Any, model: Any, specs: Any, staging: Any) -> Any:
            if worker_fails == "after a graph":
                in_worker(plan, model, specs[:1], staging)
            raise RuntimeError("worker failed")

        monkeypatch.setattr(export, "_exported_in_worker", fail)
    lines: list[str] = []
    result = export.export_checkpoint(checkpoints("t5"), tmp_path / "t5",
                                      "text2text-generation-with-past", progress=lines.append)
    assert result.ok and forked == [1]
    names = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
    by_worker = {None: (names[0], names[2]), "at once": (), "after a graph": names[:1]}
    for name in names:
        assert sum(line.startswith(f"saved {name}") for line in lines) == 1, name
        assert sum(line.startswith(f"validating {name}") for line in lines) == 1, name
        assert any(line.startswith(f"saved {name}") and line.endswith(export.WORKER_MARK)
                   for line in lines) == (name in by_worker[worker_fails]), name
    assert [row.file for row in result.rows] == sorted(
        (row.file for row in result.rows), key=names.index)  # in the graphs' order
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
