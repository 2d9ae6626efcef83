#!/usr/bin/env python
"""The model zoo (tests/models/zoo.py) through three exporters, static and dynamic.

    python benchmarks/bench_models.py                      # every zoo model
    python benchmarks/bench_models.py --models bert gpt2 vit
    python benchmarks/bench_models.py --exporters onnxport torchscript

For every zoo entry and every exporter:
  * static: export at the example inputs, run in ONNX Runtime at those inputs;
  * dynamic: export with the entry's dynamic shapes (torch.export `dynamic_shapes` for
    onnxport and torch.onnx dynamo=True; the equivalent `dynamic_axes` for the TorchScript
    exporter), run in ONNX Runtime at the entry's second inputs (another batch size and
    sequence length or image size);
and compare with eager PyTorch at the entry's tolerance. Failures are caught and counted.

The exporters: onnxport.export; torch.onnx.export(dynamo=True); torch.onnx.export(dynamo=False),
the TorchScript exporter, given a wrapper that takes the inputs positionally and returns the
flattened outputs (it cannot trace keyword inputs or dict outputs otherwise).

Columns, per exporter: static ok, dynamic ok, export seconds (static export, wall time, one
run, no warm-up beyond the earlier models), ONNX node count (static model, top-level graph),
max abs diff against eager (the larger of the static and the dynamic run). "FAIL(stage)" says
where it failed: export, ort (session or run) or diff (outputs out of tolerance).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests.models.zoo import ZOO, Positional, ZooModel

import onnxport
from onnxport.verify.compare import flatten_outputs

warnings.filterwarnings("ignore")
for _name in ("torch.onnx", "torch._export", "torch.export", "onnxscript", "torch._dynamo",
              "torch.fx.experimental.symbolic_shapes", "onnxport"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


@dataclasses.dataclass
class Outcome:
    """One exporter on one model: static and dynamic."""

    static: str = "-"
    dynamic: str = "-"
    seconds: float | None = None
    nodes: int | None = None
    max_diff: float | None = None
    errors: list[str] = dataclasses.field(default_factory=list)


# -- exporters: each returns serialized ONNX bytes ----------------------------------------------

def _onnxport(model: torch.nn.Module, entry: ZooModel, inputs: dict[str, Any],
              dynamic: bool) -> bytes:
    program = onnxport.export(model, (), kwargs=inputs,
                              dynamic_shapes=entry.dynamic_shapes if dynamic else None)
    assert program is not None
    return program.model_proto.SerializeToString()


# torch.onnx is banned in onnxport's code (TID251); here it is the baseline compared against.
def _torch_dynamo(model: torch.nn.Module, entry: ZooModel, inputs: dict[str, Any],
                  dynamic: bool) -> bytes:
    shapes = entry.dynamic_shapes if dynamic else None
    program = torch.onnx.export(  # noqa: TID251
        model, (), kwargs=inputs, dynamo=True, verbose=False, dynamic_shapes=shapes)
    assert program is not None
    return program.model_proto.SerializeToString()


def _dynamic_axes(entry: ZooModel) -> dict[str, dict[int, str]]:
    axes: dict[str, dict[int, str]] = {}
    for name, spec in entry.dynamic_shapes.items():
        for axis, dim in (spec or {}).items():
            dim_name = getattr(dim, "__name__", None)
            axes.setdefault(name, {})[axis] = dim_name if isinstance(dim_name, str) \
                and type(dim).__name__ == "Dim" else f"{name}_{axis}"
    return axes


def _torchscript_flavour(export: Callable[..., Any]) -> Callable[..., bytes]:
    """An exporter running `export(..., dynamo=False)` (torch.onnx's or onnxport's) on the
    positional wrapper, with the same dynamic_axes for both."""

    def run(model: torch.nn.Module, entry: ZooModel, inputs: dict[str, Any], dynamic: bool) -> bytes:
        names = list(inputs)
        wrapper = Positional(model, names).eval()
        f = io.BytesIO()
        axes = _dynamic_axes(entry) if dynamic else None
        export(wrapper, tuple(inputs.values()), f, dynamo=False, input_names=names,
               dynamic_axes=axes, opset_version=18)
        return f.getvalue()

    return run


_torchscript = _torchscript_flavour(torch.onnx.export)  # noqa: TID251
_onnxport_torchscript = _torchscript_flavour(onnxport.export)


EXPORTERS: dict[str, Callable[[torch.nn.Module, ZooModel, dict[str, Any], bool], bytes]] = {
    "onnxport": _onnxport,
    "onnxport torchscript": _onnxport_torchscript,
    "torch.onnx dynamo": _torch_dynamo,
    "torch.onnx torchscript": _torchscript,
}
SHORT = {"onnxport": "onnxport", "onnxport torchscript": "ots", "torch.onnx dynamo": "dynamo",
         "torch.onnx torchscript": "ts"}


# -- running and comparing ----------------------------------------------------------------------

def _run(model_bytes: bytes, inputs: dict[str, Any]) -> list[torch.Tensor]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    ordered = list(inputs.values())
    feed = {}
    for i, graph_input in enumerate(session.get_inputs()):
        value = inputs.get(graph_input.name, ordered[i] if i < len(ordered) else None)
        feed[graph_input.name] = value.numpy()
    return [torch.from_numpy(o) for o in session.run(None, feed)]


def _compare(actual: list[torch.Tensor], expected: list[torch.Tensor],
             tolerance: tuple[float, float]) -> tuple[bool, float]:
    if len(actual) != len(expected):
        raise AssertionError(f"{len(actual)} outputs, eager has {len(expected)}")
    ok, worst = True, 0.0
    rtol, atol = tolerance
    for a, e in zip(actual, expected):
        if a.shape != e.shape:
            raise AssertionError(f"shape {tuple(a.shape)}, eager {tuple(e.shape)}")
        if e.numel():
            worst = max(worst, float((a.double() - e.double()).abs().max()))
        ok = ok and torch.allclose(a.to(e.dtype), e, rtol=rtol, atol=atol, equal_nan=True)
    return ok, worst


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1: the TorchScript exporter prints its whole graph from C++
    when it fails, which would bury the table."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _error_line(error: BaseException) -> str:
    """The first line of the error and of its innermost cause, without terminal colours."""
    def first(e: BaseException) -> str:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
        return (text.splitlines() or [""])[0][:200]

    line = f"{type(error).__name__}: {first(error)}"
    cause = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    if cause is not error:
        line += f" (cause: {type(cause).__name__}: {first(cause)})"
    return line


def _one(exporter: str, entry: ZooModel, dynamic: bool, outcome: Outcome) -> None:
    model = entry.factory()
    torch.manual_seed(0)
    inputs = entry.example_inputs()
    check = entry.second_inputs() if dynamic else inputs
    attr = "dynamic" if dynamic else "static"
    try:
        t0 = time.perf_counter()
        with _quiet_stdout():
            model_bytes = EXPORTERS[exporter](model, entry, inputs, dynamic)
        seconds = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001  (each failure is reported in the table)
        setattr(outcome, attr, "FAIL(export)")
        outcome.errors.append(f"{attr} export: {_error_line(e)}")
        return
    if not dynamic:
        outcome.seconds = seconds
        outcome.nodes = len(onnx.load_from_string(model_bytes).graph.node)
    with torch.no_grad():
        expected = flatten_outputs(model(**check))
    try:
        actual = _run(model_bytes, check)
        ok, diff = _compare(actual, expected, entry.tolerance)
    except Exception as e:  # noqa: BLE001
        setattr(outcome, attr, "FAIL(ort)")
        outcome.errors.append(f"{attr} run: {_error_line(e)}")
        return
    outcome.max_diff = diff if outcome.max_diff is None else max(outcome.max_diff, diff)
    setattr(outcome, attr, "ok" if ok else "FAIL(diff)")


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--models", nargs="*", help="zoo entry names (default: all)")
    parser.add_argument("--exporters", nargs="*", choices=list(SHORT.values()),
                        help="exporters to run (default: all)")
    parser.add_argument("--errors", action="store_true", help="print each failure's first line")
    parser.add_argument("--json", default="", help="also write the outcomes to this JSON file")
    opts = parser.parse_args(argv)
    entries = [e for e in ZOO if not opts.models or e.name in opts.models]
    exporters = [x for x in EXPORTERS if not opts.exporters or SHORT[x] in opts.exporters]
    results: dict[str, dict[str, Outcome]] = {}
    for entry in entries:
        results[entry.name] = {}
        for exporter in exporters:
            outcome = Outcome()
            for dynamic in (False, True):
                try:
                    _one(exporter, entry, dynamic, outcome)
                except Exception:  # noqa: BLE001  (a crash in the harness itself)
                    outcome.errors.append(traceback.format_exc().splitlines()[-1])
            results[entry.name][exporter] = outcome
            print(f"{entry.name:14s} {SHORT[exporter]:9s} static={outcome.static} "
                  f"dynamic={outcome.dynamic} {_fmt(outcome.seconds, '.2f')}s", file=sys.stderr,
                  flush=True)

    header = ["model"]
    for exporter in exporters:
        s = SHORT[exporter]
        header += [f"{s} static", f"{s} dynamic", f"{s} s", f"{s} nodes", f"{s} max diff"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, per in results.items():
        row = [name]
        for exporter in exporters:
            o = per[exporter]
            row += [o.static, o.dynamic, _fmt(o.seconds, ".2f"), _fmt(o.nodes, "d"),
                    _fmt(o.max_diff, ".1e")]
        print("| " + " | ".join(row) + " |")
    totals = []
    for exporter in exporters:
        outs = [per[exporter] for per in results.values()]
        totals.append(f"{exporter}: static {sum(o.static == 'ok' for o in outs)}/{len(outs)}, "
                      f"dynamic {sum(o.dynamic == 'ok' for o in outs)}/{len(outs)}, "
                      f"export {sum(o.seconds or 0 for o in outs):.1f}s")
    print("\n" + "; ".join(totals))
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as f:
            json.dump({"torch": torch.__version__,
                       "outcomes": {name: {SHORT[x]: dataclasses.asdict(o) for x, o in per.items()}
                                    for name, per in results.items()}}, f, indent=1)
    if opts.errors:
        print()
        for name, per in results.items():
            for exporter in exporters:
                for err in per[exporter].errors:
                    print(f"- {name} / {exporter}: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
