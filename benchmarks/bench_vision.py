#!/usr/bin/env python
"""The vision and diffusion breadth benchmark: every case of tests/vision/models.py through
onnxport and torch.onnx (dynamo=True), static and dynamic, each compared with eager PyTorch.

    python benchmarks/bench_vision.py                          # every case, both exporters
    python benchmarks/bench_vision.py --source timm --exporters onnxport --jsonl a.jsonl
    python benchmarks/bench_vision.py --only video/mvit_v2_s flow/raft_small
    python benchmarks/bench_vision.py --merge a.jsonl b.jsonl --out FILE   # one report of shards

Per case and exporter, in a worker process per exporter (killed and restarted when a variant
takes longer than `--timeout`; each variant is its own request, so a dynamic export that hangs
keeps the static result):

* static: export at batch 2 and the case's size, run in ONNX Runtime at the same inputs;
* dynamic: export with `batch` dynamic, plus `height`/`width` (or the model's spatial dims)
  where the model allows another size (eager PyTorch runs at the case's second size), run in
  ONNX Runtime at batch 3 and that second size;

compared with eager PyTorch at the transformers zoo's tolerance (rtol 1e-3, atol 1e-4). Both
exporters get the same call: positional or keyword inputs, `input_names`, `output_names` and
`dynamic_shapes` with string dims. ONNX Runtime runs with one intra-op thread.

The report: per source, the pass counts of both exporters, static and dynamic; then every
failure with its stage (export, ort, diff) and error; with `--details`, a row per case.
A run can be split in shards (by `--source`, `--only` or `--exporters`) that each append to a
JSON-lines file (`--jsonl`); `--merge` reports several (a later line for a case wins).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import logging
import os
import sys
import time
import traceback
import warnings
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.processes import WorkerProcess  # noqa: E402

EXPORTERS = ("onnxport", "torch.onnx")
SOURCES = ("timm", "torchvision", "segmentation", "video", "flow", "diffusers")
TITLES = {"timm": "timm (one model per family)", "torchvision": "torchvision classification",
          "segmentation": "torchvision segmentation", "video": "torchvision video",
          "flow": "torchvision optical flow", "diffusers": "diffusers"}


# -- the worker -----------------------------------------------------------------------------------
def _quiet() -> None:
    warnings.filterwarnings("ignore")
    for name in ("torch.onnx", "torch._export", "torch.export", "onnxscript", "torch._dynamo",
                 "torch.fx.experimental.symbolic_shapes", "onnxport", "torch._subclasses"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _export(exporter: str, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
            options: dict[str, Any]) -> Any:
    """The ModelProto of one export."""
    import torch

    if exporter == "onnxport":
        import onnxport

        program = onnxport.export(model, args, kwargs=kwargs, dynamo=True, **options)
    else:
        # torch.onnx is banned in onnxport's code (TID251); here it is the baseline.
        program = torch.onnx.export(  # noqa: TID251
            model, args, kwargs=kwargs, dynamo=True, verbose=False, **options)
    assert program is not None
    return program.model_proto


def _run_ort(proto: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """ONNX Runtime's outputs, the tensor inputs fed in torch.export's order."""
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    leaves = [x for x in torch.utils._pytree.tree_leaves((args, kwargs))
              if isinstance(x, torch.Tensor)]
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(leaves):
        raise RuntimeError(f"the model has {len(names)} inputs, the call gives {len(leaves)} "
                           "tensors")
    feeds = {n: t.detach().numpy() for n, t in zip(names, leaves)}
    return [torch.from_numpy(a) for a in session.run(None, feeds)]


def _variant(exporter: str, case: Any, model: Any, export_inputs: Any, run_inputs: Any,
             expected: list[Any], options: dict[str, Any]) -> dict[str, Any]:
    from onnxport.verify.compare import compare_outputs

    stage = "export"
    start = time.perf_counter()
    try:
        proto = _export(exporter, model, *export_inputs, options)
        seconds = time.perf_counter() - start
        stage = "ort"
        actual = _run_ort(proto, *run_inputs)
        stage = "diff"
        rtol, atol = case.tolerance
        diffs = compare_outputs(expected, actual, rtol=rtol, atol=atol)
        worst = max((d.max_abs_diff for d in diffs), default=0.0)
        bad = [d for d in diffs if not d.passed]
        names = {"inputs": [(v.name, [d.dim_param or d.dim_value for d in
                                      v.type.tensor_type.shape.dim]) for v in proto.graph.input],
                 "outputs": [v.name for v in proto.graph.output]}
        if bad:
            return {"ok": False, "stage": "diff", "seconds": seconds, "max_diff": worst,
                    "error": "; ".join(f"{d.name}: shape {d.expected_shape} vs {d.actual_shape}, "
                                       f"max abs {d.max_abs_diff:.3g}, max rel "
                                       f"{d.max_rel_diff:.3g}" for d in bad)[:600], **names}
        return {"ok": True, "stage": "", "seconds": seconds, "max_diff": worst,
                "nodes": len(proto.graph.node), **names}
    except Exception as e:  # noqa: BLE001 - every failure is a result
        text = f"{type(e).__name__}: {e}"
        if os.environ.get("BENCH_TRACEBACK"):
            text += "\n" + traceback.format_exc()
        return {"ok": False, "stage": stage, "seconds": time.perf_counter() - start,
                "error": text[:1500]}


def run_case(exporter: str, case: Any, variants: tuple[str, ...] = ("static", "dynamic")
             ) -> dict[str, Any]:
    """One case through one exporter: the `variants` asked for (static, dynamic)."""
    import torch

    from onnxport.verify.compare import flatten_outputs
    from tests.vision.models import BATCH, BATCH2

    torch.manual_seed(0)
    record: dict[str, Any] = {"case": case.name, "source": case.source, "exporter": exporter}
    start = time.perf_counter()
    try:
        model = case.build()
        inputs = case.inputs(BATCH, case.size)
        with torch.no_grad():
            expected = flatten_outputs(model(*inputs[0], **inputs[1]))
        spatial = case.size2 is not None
        expected2 = None
        if spatial:
            try:
                inputs2 = case.inputs(BATCH2, case.size2)
                with torch.no_grad():
                    expected2 = flatten_outputs(model(*inputs2[0], **inputs2[1]))
            except Exception as e:  # noqa: BLE001 - eager refuses the size: batch only
                record["eager_size2"] = f"{type(e).__name__}: {e}"[:300]
                spatial = False
        if not spatial:
            inputs2 = case.inputs(BATCH2, case.size)
            with torch.no_grad():
                expected2 = flatten_outputs(model(*inputs2[0], **inputs2[1]))
    except Exception as e:  # noqa: BLE001
        record.update({v: {"ok": False, "stage": "eager", "error": f"{type(e).__name__}: {e}"}
                       for v in variants}, spatial=False, seconds=time.perf_counter() - start)
        return record
    record["spatial"] = spatial
    with torch.no_grad():
        if "static" in variants:
            record["static"] = _variant(exporter, case, model, inputs, inputs, expected,
                                        case.export_kwargs(*inputs, dynamic=False,
                                                           spatial=False))
        if "dynamic" in variants:
            record["dynamic"] = _variant(exporter, case, model, inputs, inputs2, expected2,
                                         case.export_kwargs(*inputs, dynamic=True,
                                                            spatial=spatial))
    record["seconds"] = time.perf_counter() - start
    return record


def _worker_main(conn: Any) -> None:
    _quiet()
    from tests.vision.packages import import_vision

    if import_vision() is None:
        raise SystemExit("the worker could not import torchvision (tests/vision/packages.py)")
    from tests.vision.models import by_name

    cases = by_name()
    while True:
        try:
            exporter, name, variant = conn.recv()
        except EOFError:
            return
        conn.send(run_case(exporter, cases[name], (variant,)))


class Worker:
    """A process running cases one at a time; killed and restarted when one hangs."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        # The first case also waits for the worker's imports (torchvision, timm, diffusers).
        self._process = WorkerProcess(_worker_main, timeout, startup=600)

    def run(self, exporter: str, case: Any) -> dict[str, Any]:
        """The static and the dynamic variant, each its own request: a variant that hangs
        (and the worker restarted) does not take the other's result with it."""
        start = time.perf_counter()
        record: dict[str, Any] = {"case": case.name, "source": case.source,
                                  "exporter": exporter, "spatial": case.size2 is not None}
        for variant in ("static", "dynamic"):
            status, result = self._process.request((exporter, case.name, variant))
            if status == "ok":
                record.update({k: v for k, v in result.items() if k != "seconds"})
                continue
            why = ("the worker process died" if status == "died"
                   else f"no result within {self.timeout:.0f}s")
            record[variant] = {"ok": False, "stage": "hang", "error": why}
        record["seconds"] = time.perf_counter() - start
        return record

    def close(self) -> None:
        self._process.close()


# -- the report -----------------------------------------------------------------------------------
def report(records: list[dict[str, Any]], *, details: bool, seconds: float | None) -> str:
    by_key = {(r["case"], r["exporter"]): r for r in records}
    exporters = [e for e in EXPORTERS if any(k[1] == e for k in by_key)]
    per_source: dict[str, set[str]] = collections.defaultdict(set)
    for case, _ in by_key:
        per_source[case.split("/", 1)[0]].add(case)
    spatial = {r["case"] for r in records if r.get("spatial")}
    lines = [f"{len({k[0] for k in by_key})} cases"
             + (f" ({seconds / 60:.1f} min)" if seconds else "") + ". Static: batch 2 at the "
             "case's size. Dynamic: `batch`, plus `height`/`width` where the model allows "
             "another size (column `sized`), run at batch 3 and that size.", "",
             "| source | cases | sized | " + " | ".join(
                 f"{e} static | {e} dynamic" for e in exporters) + " |",
             "| --- | ---: | ---: | " + " | ".join("---: | ---:" for _ in exporters) + " |"]
    totals = collections.Counter()
    for source in SOURCES:
        names = per_source.get(source)
        if not names:
            continue
        cells = []
        for e in exporters:
            for variant in ("static", "dynamic"):
                ok = sum(bool(by_key.get((n, e), {}).get(variant, {}).get("ok")) for n in names)
                ran = sum((n, e) in by_key for n in names)
                totals[(e, variant)] += ok
                totals[(e, "ran")] += ran
                cells.append(f"{ok}/{ran}")
        lines.append(f"| {TITLES[source]} | {len(names)} | {len(names & spatial)} | "
                     + " | ".join(cells) + " |")
    n = len({k[0] for k in by_key})
    lines.append(f"| **all** | {n} | {len(spatial)} | " + " | ".join(
        f"{totals[(e, v)]}/{totals[(e, 'ran')] // 2} ({100 * totals[(e, v)] / max(1, totals[(e, 'ran')] // 2):.1f}%)"
        for e in exporters for v in ("static", "dynamic")) + " |")
    failures = [(r, v) for r in records for v in ("static", "dynamic")
                if not r.get(v, {}).get("ok") and (r["case"], r["exporter"]) in by_key
                and by_key[(r["case"], r["exporter"])] is r]
    for exporter in exporters:
        mine = [(r, v) for r, v in failures if r["exporter"] == exporter]
        if mine:
            lines += ["", f"Failures, {exporter}:", ""]
            for r, v in sorted(mine, key=lambda x: (x[0]["case"], x[1])):
                error = " ".join(str(r[v].get("error", "")).split())[:300]
                lines.append(f"* {r['case']} {v}: **{r[v].get('stage')}** {error}")
    if details:
        lines += ["", "| case | sized | " + " | ".join(
            f"{e} static | {e} dynamic | {e} export s" for e in exporters) + " |",
            "| --- | --- | " + " | ".join("--- | --- | ---:" for _ in exporters) + " |"]
        for case in sorted({k[0] for k in by_key}):
            cells = []
            for e in exporters:
                r = by_key.get((case, e))
                if r is None:
                    cells.append("- | - | -")
                    continue
                marks = ["ok" if r[v].get("ok") else f"FAIL({r[v].get('stage')})"
                         for v in ("static", "dynamic")]
                export_s = r["static"].get("seconds")
                cells.append(" | ".join(marks) + f" | {export_s:.1f}" if export_s is not None
                             else " | ".join(marks) + " | -")
            lines.append(f"| {case} | {'yes' if case in spatial else 'no'} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _read(paths: list[str]) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            records += [json.loads(line) for line in fh if line.strip()]
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=None, help="these cases (names or prefixes)")
    parser.add_argument("--source", nargs="+", default=None, choices=SOURCES)
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds per case and variant (static, dynamic)")
    parser.add_argument("--jsonl", default=None, help="append every record to this file")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSONL",
                        help="report these files instead of running")
    parser.add_argument("--details", action="store_true", help="a row per case")
    parser.add_argument("--out", default=None, help="write the markdown report here")
    parser.add_argument("--list", action="store_true", help="print the case names and stop")
    ns = parser.parse_args(argv)
    command = "python benchmarks/bench_vision.py " + " ".join(argv or sys.argv[1:])
    if ns.merge:
        text = report(_read(ns.merge), details=ns.details, seconds=None)
    else:
        _quiet()
        from tests.vision.packages import import_vision

        if import_vision() is None:
            print("no torchvision release for this torch: nothing to run", file=sys.stderr)
            return 0
        from tests.vision.models import cases

        selected = [c for c in cases()
                    if (ns.source is None or c.source in ns.source)
                    and (ns.only is None or any(c.name == o or c.name.startswith(o)
                                                for o in ns.only))]
        if ns.list:
            print("\n".join(c.name for c in selected))
            return 0
        exporters = ns.exporters.split(",")
        workers = {e: Worker(ns.timeout) for e in exporters}
        sink = open(ns.jsonl, "a", encoding="utf-8") if ns.jsonl else None
        records = []
        start = time.perf_counter()
        try:
            for i, case in enumerate(selected):
                for exporter in exporters:
                    r = workers[exporter].run(exporter, case)
                    records.append(r)
                    if sink is not None:
                        sink.write(json.dumps(r) + "\n")
                        sink.flush()
                    marks = " ".join(f"{v}={'ok' if r[v].get('ok') else r[v].get('stage')}"
                                     for v in ("static", "dynamic"))
                    print(f"[{i + 1}/{len(selected)}] {case.name} {exporter}: {marks} "
                          f"({r.get('seconds', 0):.0f}s)", file=sys.stderr, flush=True)
        finally:
            for w in workers.values():
                w.close()
            if sink is not None:
                sink.close()
        text = report(records, details=ns.details, seconds=time.perf_counter() - start)
    print(text)
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as fh:
            fh.write(f"# Vision and diffusion models, {datetime.date.today().isoformat()}\n\n"
                     f"`{command.strip()}`\n\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
