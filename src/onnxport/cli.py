"""The onnxport command line: `onnxport export (MODULE:FACTORY | --example NAME) -o OUT`."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence
from typing import Any

from onnxport.errors import OnnxExporterError


def _load_factory(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"onnxport: expected PACKAGE.MODULE:FACTORY, got {spec!r}")
    sys.path.insert(0, ".")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def _unpack(made: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise SystemExit("onnxport: the factory must return (model, args) or (model, args, kwargs)")
    model, args = made[0], made[1]
    kwargs = made[2] if len(made) == 3 else {}
    return model, tuple(args) if isinstance(args, (tuple, list)) else (args,), dict(kwargs or {})


def _export(ns: argparse.Namespace) -> int:
    from onnxport import export
    from onnxport.examples import EXAMPLES

    if ns.example:
        if ns.example not in EXAMPLES:
            raise SystemExit(f"onnxport: no example {ns.example!r}; choose from {', '.join(EXAMPLES)}")
        made = EXAMPLES[ns.example]()
        default_out = f"{ns.example}.onnx"
    elif ns.factory:
        made = _load_factory(ns.factory)()
        default_out = "model.onnx"
    else:
        raise SystemExit("onnxport export: give MODULE:FACTORY or --example NAME")
    model, args, kwargs = _unpack(made)
    out = ns.output or default_out
    start = time.perf_counter()
    try:
        program = export(model, args, out, kwargs=kwargs, opset_version=ns.opset,
                         verify=ns.verify, report=ns.report, optimize=not ns.no_optimize)
    except OnnxExporterError as e:
        print(f"onnxport: export failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
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
    p = sub.add_parser("export", help="export a model")
    p.add_argument("factory", nargs="?", help="PACKAGE.MODULE:FACTORY returning (model, args[, kwargs])")
    p.add_argument("--example", help="a built-in example: mlp, cnn, transformer")
    p.add_argument("-o", "--output", help="the .onnx file to write")
    p.add_argument("--opset", type=int, default=None, help="target opset (default 18)")
    p.add_argument("--verify", action="store_true", help="compare ONNX Runtime with eager PyTorch")
    p.add_argument("--report", action="store_true", help="write a markdown report")
    p.add_argument("--no-optimize", action="store_true", help="skip the optimization passes")
    ns = parser.parse_args(argv)
    if ns.command == "export":
        return _export(ns)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
