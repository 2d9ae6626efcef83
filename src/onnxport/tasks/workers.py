"""Graphs of a task exported in a forked worker process, beside the parent.

`export_checkpoint` exports a task's graphs one after another. For a task with three graphs
or more (the seq2seq encoder, decoder and decoder with a cache), a forked copy of the
process exports some of them while the parent exports the others, when a second core is
idle: `can_fork` compares the CPU time the whole machine left idle while the model loaded
(/proc/stat, sampled by `cpu_sample` when the export starts) with half a core (IDLE_CORES;
a CPU quota of a container is not seen there, only the affinity mask). On a busy
machine (the shared two-core one of benchmarks/results/cli_2026-12-06.md) the worker made
the exports slower, not faster (copy-on-write faults of the forked heap, no idle core), so
there it stays off. ONNXPORT_EXPORT_WORKERS=1 forces it on (with two CPUs), =0 off. The
fork comes after the model is loaded, so the worker inherits the imports and the loaded
model, copy on write. The worker passes picklable messages on the way (`send`: a graph
saved, which the parent can validate while the worker goes on), then a result, and exits;
anything that goes wrong in it (an exception, a crash, a result that does not unpickle) makes
`Worker.result` return None, and the caller does what is left of the step itself, where its
error is raised as usual.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ENV_VAR", "IDLE_CORES", "Worker", "can_fork", "cpu_sample", "fork", "idle_cores",
           "send"]

ENV_VAR = "ONNXPORT_EXPORT_WORKERS"
"""1: a forked worker whenever two CPUs are available; 0: never; unset: when a core is idle."""

IDLE_CORES = 0.5
"""The idle CPU time, in cores, the machine must have left over the sampled interval (the
model's load) for a worker to be forked: more than half a core. The export keeps about one
core busy while it loads (0.97 measured), so a quiet two-core machine leaves about one idle;
with another process busy on the second core, none (0.0 measured)."""

_MIN_INTERVAL = 0.2  # seconds: below this, /proc/stat's 10 ms ticks say too little


def cpu_sample() -> tuple[float, float, float] | None:
    """(wall time, idle seconds, busy seconds) of the whole machine so far, summed over its
    CPUs (/proc/stat); None where there is no /proc/stat."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    idle = ticks[3] + ticks[4]
    return time.monotonic(), idle / hz, (sum(ticks) - idle) / hz


def idle_cores(since: tuple[float, float, float] | None) -> float | None:
    """The machine's idle CPU time since `since` (a `cpu_sample`), in cores (idle CPU seconds
    per second of wall time); None when it cannot be told (no sample, too short a time)."""
    now = cpu_sample()
    if since is None or now is None or now[0] - since[0] < _MIN_INTERVAL:
        return None
    return (now[1] - since[1]) / (now[0] - since[0])


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def can_fork(since: tuple[float, float, float] | None = None) -> bool:
    """Whether a forked worker runs beside this process: POSIX fork, two CPUs or more
    available to it, and ONNXPORT_EXPORT_WORKERS=1 or, unset, about a core left idle by the
    whole machine since `since` (`cpu_sample`; without /proc/stat: the 1-minute load average
    at most the CPUs less one) and no other Python thread running."""
    setting = os.environ.get(ENV_VAR, "").strip()
    if setting == "0" or not hasattr(os, "fork"):
        return False
    cpus = _cpus()
    if cpus < 2:
        return False
    if setting == "1":
        return True
    if threading.active_count() > 1:  # a lock another thread holds would stay held in the child
        return False
    idle = idle_cores(since)
    if idle is None:
        try:
            return os.getloadavg()[0] <= cpus - 1
        except OSError:
            return False
    return idle >= IDLE_CORES


class Worker:
    """A forked process running one function: `messages()` gives what it `send`s as it goes,
    `result()` waits for what it returned."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self._fd: int | None = fd
        self._buffer = bytearray()
        self._reaped = False
        self._finished = False
        self._result: Any | None = None

    def messages(self, timeout: float | None = None) -> Iterator[Any]:
        """The objects the function passed to `send`, each as soon as it arrives; ends when
        the function has returned, or failed, or `timeout` seconds (from this call) have
        passed (then the worker is stopped). `result()` then says which."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._finished:
            frame = self._frame(deadline)
            if frame is None:
                self._finish(None)
            elif frame[0] == _RESULT:
                self._finish(frame)
            else:
                yield frame[1]

    def result(self, timeout: float | None = None) -> Any | None:
        """The function's return value; None when the worker failed in any way, or has not
        finished within `timeout` seconds (then it is stopped: a worker forked while another
        thread held a lock can wait on it forever). Messages not yet taken are dropped."""
        for _ in self.messages(timeout):
            pass
        return self._result

    def _frame(self, deadline: float | None) -> tuple[str, Any] | None:
        """The next (kind, object) the worker wrote; None at its end, or past `deadline`."""
        buf = self._buffer
        while True:
            if len(buf) >= _HEADER:
                size = int.from_bytes(buf[:_HEADER], "little")
                if len(buf) >= _HEADER + size:
                    data = bytes(buf[_HEADER:_HEADER + size])
                    del buf[:_HEADER + size]
                    try:
                        return pickle.loads(data)
                    except Exception:  # noqa: BLE001  (a frame that does not unpickle: failed)
                        return None
            if self._fd is None:
                return None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                    return None
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                os.close(self._fd)
                self._fd = None
            buf += chunk

    def _finish(self, frame: tuple[str, Any] | None) -> None:
        self._finished = True
        if frame is None:  # ended without a result, or past its time
            self.cancel()
            return
        self.close()
        _, status = os.waitpid(self.pid, 0)
        self._reaped = True
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            self._result = frame[1]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def cancel(self) -> None:
        """Stop the worker and reap it (the caller failed, or was interrupted while waiting;
        its staging folder goes away)."""
        self._finished = True
        self.close()
        if self._reaped:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self._reaped = True


_HEADER = 8  # bytes: a frame's length, then the frame (a pickled (kind, object))
_MESSAGE, _RESULT = "message", "result"
_channel: int | None = None  # in a worker: the pipe's writing end


def _write(fd: int, kind: str, obj: Any) -> None:
    data = pickle.dumps((kind, obj))
    view = memoryview(len(data).to_bytes(_HEADER, "little") + data)
    while view:
        view = view[os.write(fd, view):]


def send(obj: Any) -> None:
    """In a forked worker: pass `obj` (picklable) to the parent now (`Worker.messages`);
    elsewhere: nothing."""
    if _channel is not None:
        _write(_channel, _MESSAGE, obj)


def fork(fn: Callable[[], Any]) -> Worker:
    """Run `fn()` in a forked copy of this process; its return value, and what it passes to
    `send` on the way, must pickle.

    The objects alive at the fork are frozen for the child's collector (`gc.freeze`), so its
    collections neither scan them nor write to their pages (copy-on-write faults); the
    parent unfreezes its own. The worker runs torch single-threaded (the parent keeps its cores busy, and an OpenMP
    pool the parent started does not exist in the child) and leaves with `os._exit`, so no
    exit handler of the parent runs twice.
    """
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    pid = os.fork()
    if pid:
        gc.unfreeze()
        os.close(write)
        return Worker(pid, read)
    global _channel
    code = 1
    try:
        os.close(read)
        import torch

        torch.set_num_threads(1)
        _channel = write
        result = fn()
        _channel = None
        _write(write, _RESULT, result)
        os.close(write)
        code = 0
    except BaseException:  # noqa: BLE001  (the parent does the step itself)
        pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
