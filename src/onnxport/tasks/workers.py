"""One step of the checkpoint export run in a forked worker process, beside the parent.

`export_checkpoint` exports a task's graphs one after another. With ONNXPORT_EXPORT_WORKERS=1
on a machine with two cores or more, the last graph of a task with three or more (the
seq2seq decoder with a cache) is exported by a forked copy of the process while the parent
exports the others. It is off by default: on the shared two-core machine of
benchmarks/results/cli_2026-12-06.md it made T5's and Whisper's CLI exports slower, not
faster (copy-on-write faults of the forked heap, no idle core). The fork comes
after the first graph, so the worker inherits what the first export paid once per process
(imports, the op registry, torch.export's first-call setup) and the loaded model, copy on
write. The worker sends back a picklable result and exits; anything that goes wrong in it
(an exception, a crash, a result that does not unpickle) makes `Worker.result` return None,
and the caller does the step itself, where its error is raised as usual.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["ENV_VAR", "Worker", "can_fork", "fork"]

ENV_VAR = "ONNXPORT_EXPORT_WORKERS"
"""Set to 1 to export the last graph of a task with three or more in a forked worker."""


def can_fork() -> bool:
    """Whether a forked worker runs beside this process: asked for with
    ONNXPORT_EXPORT_WORKERS=1, POSIX fork, and two CPUs or more available to it."""
    if os.environ.get(ENV_VAR, "").strip() != "1" or not hasattr(os, "fork"):
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cpus = os.cpu_count() or 1
    return cpus >= 2


class Worker:
    """A forked process running one function; `result()` waits for what it returned."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self._pipe: Any = os.fdopen(fd, "rb")
        self._reaped = False

    def result(self) -> Any | None:
        """The function's return value; None when the worker failed in any way."""
        with self._pipe:
            data = self._pipe.read()
        _, status = os.waitpid(self.pid, 0)
        self._reaped = True
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or not data:
            return None
        try:
            return pickle.loads(data)
        except Exception:  # noqa: BLE001  (a result that does not unpickle is a failure)
            return None

    def cancel(self) -> None:
        """Stop the worker and reap it (the caller failed, or was interrupted while waiting;
        its staging folder goes away)."""
        self._pipe.close()
        if self._reaped:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self._reaped = True


def fork(fn: Callable[[], Any]) -> Worker:
    """Run `fn()` in a forked copy of this process; its return value must pickle.

    The worker runs torch single-threaded (the parent keeps its cores busy, and an OpenMP
    pool the parent started does not exist in the child) and leaves with `os._exit`, so no
    exit handler of the parent runs twice.
    """
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.close(write)
        return Worker(pid, read)
    code = 1
    try:
        os.close(read)
        import torch

        torch.set_num_threads(1)
        data = pickle.dumps(fn())
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        code = 0
    except BaseException:  # noqa: BLE001  (the parent does the step itself)
        pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
