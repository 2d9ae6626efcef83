"""Processes the tests and benchmarks share: a worker answering requests with a timeout,
and a file lock for work done once per environment across pytest-xdist workers."""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the block."""
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class WorkerProcess:
    """A spawned process running `target(conn)`, which answers each request sent on `conn`
    with one result; killed and restarted when a request hangs or the process dies.

    `request(payload)` returns ("ok", result), ("died", None) or ("hang", None). The first
    request after a (re)start also waits `startup` seconds more (imports, warm-up).
    """

    def __init__(self, target: Callable[[Any], None], timeout: float,
                 startup: float = 0.0) -> None:
        self.target = target
        self.timeout = timeout
        self.startup = startup
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self._fresh = True

    def request(self, payload: Any) -> tuple[str, Any]:
        if self._proc is None or not self._proc.is_alive():
            parent, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=self.target, args=(child,), daemon=True)
            self._proc.start()
            self._conn, self._fresh = parent, True
        self._conn.send(payload)
        if self._conn.poll(self.timeout + (self.startup if self._fresh else 0)):
            try:
                result = self._conn.recv()
            except EOFError:
                self.close()
                return "died", None
            self._fresh = False
            return "ok", result
        self.close()
        return "hang", None

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(10)
        self._proc = None
        self._conn = None
