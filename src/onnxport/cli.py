"""The onnxport command line: `onnxport export (MODULE:FACTORY | --example NAME) -o OUT`.

Every failure ends in a message on stderr and exit status 1, never a traceback: a wrong
command line or factory raises SystemExit with the message (as argparse's own errors do), a
failed export (any exception, documented or not) prints `onnxport: ...` and returns 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from onnxport.errors import OnnxExporterError

EXIT_FAILED = 1
EXIT_USAGE = 2  # reported by SystemExit(message), whose exit status is 1


class _Failure(Exception):
    """A failure to report on stderr with an exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


# torch logs the tracebacks of failed fake-tensor kernels and trace steps at ERROR level while
# torch.export tries a strategy; the failure is reported once, in onnxport's message.
_NOISY_LOGGERS = ("torch._subclasses.fake_tensor", "torch.export._trace")


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _load_factory(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not attr or not module_name:
        raise _Failure(f"expected PACKAGE.MODULE:FACTORY, got {spec!r}", EXIT_USAGE)
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001  (a module that fails to import: say so, no traceback)
        raise _Failure(f"cannot import {module_name!r}: {type(e).__name__}: {e}",
                       EXIT_USAGE) from e
    if not hasattr(module, attr):
        raise _Failure(f"module {module_name!r} has no {attr!r}", EXIT_USAGE)
    return getattr(module, attr)


def _unpack(made: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise _Failure("the factory must return (model, args) or (model, args, kwargs), got "
                       f"{type(made).__name__}", EXIT_USAGE)
    model, args = made[0], made[1]
    kwargs = made[2] if len(made) == 3 else {}
    return model, tuple(args) if isinstance(args, (tuple, list)) else (args,), dict(kwargs or {})


def _make(ns: argparse.Namespace) -> tuple[Any, str]:
    from onnxport.examples import EXAMPLES

    if ns.example:
        if ns.example not in EXAMPLES:
            raise _Failure(f"no example {ns.example!r}; choose from {', '.join(EXAMPLES)}",
                           EXIT_USAGE)
        factory, default_out = EXAMPLES[ns.example], f"{ns.example}.onnx"
    elif ns.factory:
        factory, default_out = _load_factory(ns.factory), "model.onnx"
    else:
        raise _Failure("give MODULE:FACTORY or --example NAME", EXIT_USAGE)
    try:
        return factory(), default_out
    except Exception as e:  # noqa: BLE001  (the user's factory: report it, no traceback)
        raise _Failure(f"the factory raised {type(e).__name__}: {e}") from e


def _export(ns: argparse.Namespace) -> int:
    from onnxport import export

    made, default_out = _make(ns)
    model, args, kwargs = _unpack(made)
    out = ns.output or default_out
    start = time.perf_counter()
    try:
        with _quiet_torch_logs():
            program = export(model, args, out, kwargs=kwargs, opset_version=ns.opset,
                             verify=ns.verify, report=ns.report, optimize=not ns.no_optimize)
    except OnnxExporterError as e:
        raise _Failure(f"export failed: {type(e).__name__}: {e}") from e
    except (TypeError, ValueError) as e:
        raise _Failure(f"invalid argument: {e}") from e
    except Exception as e:  # noqa: BLE001  (undocumented: still one message, no traceback)
        raise _Failure(f"export failed with an unexpected {type(e).__name__}: {e} (this is a "
                       f"bug in onnxport; please report it)") from e
    seconds = time.perf_counter() - start
    assert program is not None
    graph = program.model.graph
    print(f"exported {type(model).__name__} to {out} in {seconds:.2f}s: "
          f"{len(list(graph.all_nodes()))} nodes, {len(graph.initializers)} initializers, "
          f"opset {graph.opset_imports.get('', '?')}")
    if ns.verify:
        print("verified: ONNX Runtime outputs match eager PyTorch")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `onnxport` console script."""
    parser = argparse.ArgumentParser(prog="onnxport", description="Export PyTorch models to ONNX.")
    sub = parser.add_subparsers(dest="command", required=True)
    from onnxport.tasks import cli as tasks_cli

    p = sub.add_parser("export", help="export a model, or a checkpoint folder by task",
                       epilog=tasks_cli.EXPORT_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", nargs="?", help="PACKAGE.MODULE:FACTORY returning (model, args[, kwargs])")
    p.add_argument("--example", help="a built-in example: mlp, cnn, transformer")
    p.add_argument("-o", "--output", help="the .onnx file to write")
    p.add_argument("--opset", type=int, default=None, help="target opset (default 20, as torch.onnx 2.13)")
    p.add_argument("--verify", action="store_true", help="compare ONNX Runtime with eager PyTorch")
    p.add_argument("--report", action="store_true", help="write a markdown report")
    p.add_argument("--no-optimize", action="store_true", help="skip the optimization passes")
    tasks_cli.add_export_options(p)
    tasks_cli.add_inspect_parser(sub)
    tasks_cli.add_verify_parser(sub)
    ns = parser.parse_args(argv)
    if ns.command == "inspect":
        return tasks_cli.run_inspect(ns)
    if ns.command == "verify":
        with _quiet_torch_logs():
            return tasks_cli.run_verify(ns)
    if ns.command != "export":
        return EXIT_USAGE
    if ns.model:  # export --model CHECKPOINT_DIR OUTPUT_DIR
        if ns.example:
            raise SystemExit("onnxport: give either --model CHECKPOINT_DIR or --example, not both")
        with _quiet_torch_logs():
            return tasks_cli.run_export(ns, ns.factory or ns.output)
    try:
        return _export(ns)
    except _Failure as e:
        if e.status == EXIT_USAGE:
            raise SystemExit(f"onnxport: {e}") from None
        print(f"onnxport: {e}", file=sys.stderr)
        return EXIT_FAILED


# The collector's generation-0 threshold (700 by default) is reached thousands of times while
# torch, transformers and onnx_ir are imported and torch.export traces, and each time it walks
# the young objects, most of them long-lived (modules, functions, FX nodes): in a T5 export
# that was 1.3-1.7 s of CPU in 1320 collections (0.3 s in 17 with these thresholds). Young
# cycles are still collected every 50,000 net allocations; full collections stay under the
# interpreter's own rule (only when a quarter of the long-lived objects is new).
_GC_THRESHOLDS = (50_000, 20, 10)


def entry() -> None:
    """The `onnxport` command: `main()`, then exit without the interpreter's teardown.

    Every file is written, flushed and closed by then; tearing down torch, transformers and the
    exported graphs object by object takes about a second and changes nothing on disk. The
    exit functions (temporary folders, logging) still run.

    The cyclic garbage collector runs less often in this process (`_GC_THRESHOLDS`).
    """
    import atexit
    import gc
    import os

    gc.set_threshold(*_GC_THRESHOLDS)
    try:
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(code or 0)


if __name__ == "__main__":
    entry()
