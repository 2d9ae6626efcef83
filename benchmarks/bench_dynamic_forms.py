#!/usr/bin/env python
"""Dynamic exports of the model zoo in the three spec forms, onnxport beside torch.onnx.

    python benchmarks/bench_dynamic_forms.py                    # every zoo model, both exporters
    python benchmarks/bench_dynamic_forms.py --models bert vit --exporters onnxport

For every zoo entry (tests/models/zoo.py; models are called with keyword inputs), every spec
form and every exporter (onnxport.export; torch.onnx.export(dynamo=True)):

* `dims`: the entry's dynamic_shapes with named `torch.export.Dim`s;
* `strings`: the same with each named Dim replaced by its name as a string
  (`{"input_ids": {0: "batch", 1: "sequence"}}`), torch.onnx 2.13's common form;
* `dynamic_axes`: the legacy `{input: {axis: name}}` with `input_names` left unset.

A case passes when the export succeeds, ONNX Runtime runs the model at the entry's second
inputs (another batch size and sequence length or image size) and matches eager PyTorch at the
entry's tolerance, and every named input dim of the ONNX graph carries the user's name.
"FAIL(stage)" says where it failed: export, ort (session or run), diff (out of tolerance),
names (a dim lost its name).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import re
import sys
import traceback
import warnings
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests.models.test_zoo import spec_forms
from tests.models.zoo import ZOO, ZooModel

import onnxport
from onnxport.verify.compare import as_complex_like, flatten_outputs

warnings.filterwarnings("ignore")
for _name in ("torch.onnx", "torch._export", "torch.export", "onnxscript", "torch._dynamo",
              "torch.fx.experimental.symbolic_shapes", "onnxport"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

FORMS = ("dims", "strings", "dynamic_axes")
EXPORTERS = ("onnxport", "torch.onnx")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(e: BaseException) -> str:
    return _ANSI.sub("", str(e).strip().splitlines()[0] if str(e).strip() else "")[:80]


def _export(exporter: str, model: torch.nn.Module, inputs: dict[str, Any],
            spec: dict[str, Any]) -> Any:
    if exporter == "onnxport":
        return onnxport.export(model, (), kwargs=inputs, **spec)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return torch.onnx.export(model, (), kwargs=inputs, dynamo=True, **spec)


def run_case(entry: ZooModel, form: str, exporter: str) -> str:
    torch.manual_seed(0)
    model = entry.factory()
    inputs = entry.example_inputs()
    spec, names = spec_forms(entry.dynamic_shapes)[form]
    try:
        program = _export(exporter, model, inputs, spec)
    except Exception as e:  # noqa: BLE001
        if os.environ.get("BENCH_TRACEBACK"):
            traceback.print_exc()
        return f"FAIL(export): {type(e).__name__}: {_first_line(e)}"
    shapes = {v.name: v.shape for v in program.model.graph.inputs}
    for input_name, axes in names.items():
        for axis, dim_name in axes.items():
            shape = shapes.get(input_name)
            if shape is None or str(shape[axis]) != dim_name:
                return f"FAIL(names): {input_name}[{axis}] is {shape[axis] if shape else '?'}"
    second = entry.second_inputs()
    try:
        actual = program(**second)
    except Exception as e:  # noqa: BLE001
        return f"FAIL(ort): {type(e).__name__}: {_first_line(e)}"
    with torch.no_grad():
        expected = flatten_outputs(model(**second))
    if len(actual) != len(expected):
        return f"FAIL(diff): {len(actual)} outputs, eager has {len(expected)}"
    rtol, atol = entry.tolerance
    for a, e in zip(actual, expected):
        a = as_complex_like(torch.as_tensor(a), e)
        if a.shape != e.shape or not torch.allclose(a.to(e.dtype), e, rtol=rtol, atol=atol,
                                                    equal_nan=True):
            return "FAIL(diff)"
    return "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="zoo entry names (default: all)")
    parser.add_argument("--exporters", nargs="*", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--forms", nargs="*", default=list(FORMS), choices=FORMS)
    parser.add_argument("--out", help="also write the markdown table to this file")
    opts = parser.parse_args()
    entries = [e for e in ZOO if not opts.models or e.name in opts.models]
    results: dict[tuple[str, str, str], str] = {}
    for entry in entries:
        for form in opts.forms:
            for exporter in opts.exporters:
                results[(entry.name, form, exporter)] = run_case(entry, form, exporter)
                print(f"{entry.name:24} {form:13} {exporter:11} {results[(entry.name, form, exporter)]}",
                      file=sys.stderr, flush=True)
    lines = [f"# Dynamic exports in three spec forms ({datetime.date.today()}, torch "
             f"{torch.__version__})", "",
             f"{len(entries)} zoo models, keyword inputs, run in ONNX Runtime at a second batch "
             f"and sequence/image size against eager PyTorch; the graph's input dims must carry "
             f"the user's names.", "", "| form | " + " | ".join(opts.exporters) + " |",
             "|---|" + "---|" * len(opts.exporters)]
    for form in opts.forms:
        cells = [f"{sum(results[(e.name, form, x)] == 'ok' for e in entries)}/{len(entries)}"
                 for x in opts.exporters]
        lines.append(f"| {form} | " + " | ".join(cells) + " |")
    lines += ["", "| model | form | " + " | ".join(opts.exporters) + " |",
              "|---|---|" + "---|" * len(opts.exporters)]
    for entry in entries:
        for form in opts.forms:
            cells = [results[(entry.name, form, x)].replace("|", "\\|") for x in opts.exporters]
            lines.append(f"| {entry.name} | {form} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
