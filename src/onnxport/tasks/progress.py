"""The export command's progress lines and its report of a failed export (both layouts)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

__all__ = ["export_failed", "human_bytes", "progress", "progress_with_bytes",
           "usage_error"]


def progress() -> tuple[Callable[[str], None], Callable[[], None]]:
    """(say, close): a rich status line on a terminal, plain lines on stderr otherwise."""
    say, close, _ = progress_with_bytes()
    return say, close


def progress_with_bytes() -> tuple[Callable[[str], None], Callable[[], None],
                                    Callable[[str, int, int], None] | None]:
    """(say, close, saving): `saving(file, bytes_written, total)` shows the bytes written in
    the rich status line on a terminal; None when stderr is not a terminal (the step lines
    then say the bytes and MB/s of each file once it is saved)."""
    start = time.perf_counter()
    if sys.stderr.isatty():
        try:
            from rich.console import Console

            console = Console(stderr=True)
            status = console.status("loading")
            status.start()

            def say(line: str) -> None:
                console.log(line)
                status.update(line)

            def saving(file: str, done: int, total: int) -> None:
                seconds = time.perf_counter() - saving_since.setdefault(file, time.perf_counter())
                rate = f", {done / 1e6 / seconds:.0f} MB/s" if seconds > 0.5 else ""
                status.update(f"saving {file}: {human_bytes(done)} of {human_bytes(total)} written "
                              f"({100 * done / max(total, 1):.0f}%{rate})")

            saving_since: dict[str, float] = {}
            return say, status.stop, saving
        except ImportError:
            pass

    def plain(line: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {line}", file=sys.stderr, flush=True)

    return plain, lambda: None, None


def usage_error(e: BaseException) -> bool:
    from onnxport.errors import QuantizationError
    from onnxport.tasks.errors import OutputDirError, UnknownTaskError, UnsupportedTaskError

    return isinstance(e, (UnknownTaskError, UnsupportedTaskError, OutputDirError,
                          QuantizationError)) or type(e).__name__ == "TaskError"


def export_failed(e: Exception, close: Callable[[], None]) -> int:
    """Report a failed checkpoint export (any layout) as the command does; its exit code:
    1 for a failed validation (the table on stdout, the files kept) or export, 2 for a usage
    error."""
    from onnxport.tasks import ValidationError

    close()
    if isinstance(e, ValidationError):
        print(e.table, file=sys.stdout)
        print(f"onnxport: validation failed: ONNX Runtime differs from eager PyTorch beyond "
              f"the tolerance; the files are kept for inspection in {e.output_dir}",
              file=sys.stderr)
        return 1
    print(f"onnxport: export failed: {type(e).__name__}: {e}", file=sys.stderr)
    return 2 if usage_error(e) else 1


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
