#!/usr/bin/env python
"""Vision graphs beside torch.onnx's: node counts and ONNX Runtime latency (issue 40).

Twelve classifiers (timm's ResNet-50, ConvNeXt-T, EfficientNet-B0, MobileNetV3-L, ViT-S/16,
DeiT-S/16, Swin-T, RegNetY-1.6GF; torchvision's ResNet-18, MobileNetV2, EfficientNet-B0,
ViT-B/16), batch 1, 224 px, random weights, eval mode. Each is exported in the same run by

* `onnxport`    `onnxport.export(model, (x,))` (defaults: opset 20, optimize=True);
* `torch.onnx`  `torch.onnx.export(model, (x,), dynamo=True)` (its defaults);
* `onnxport+foldbn` (with `--fold-bn`) onnxport's graph after the opt-in FoldBatchNormPass
                (BatchNormalization folded into the Conv weights, as torch.onnx's optimizer
                does; not a default pass: it takes the state_dict names out of the graph);

and for each graph the table gives the export time, the nodes of the file (all, and without
Constant nodes: ONNX Runtime makes those initializers at load, as torch.onnx stores its
constants), the nodes after ONNX Runtime's optimizations (ORT_ENABLE_ALL, written with
`optimized_model_filepath`), the median ORT latency (CPU, 1 intra-op thread, ORT_ENABLE_ALL;
one round runs every graph once, in rotating order, `--rounds` rounds after `--warmup`), the
median of the per-round ratios to torch.onnx, and the largest difference from eager (and it
relative to the largest eager logit: torchvision's random weights give logits of 1e-15 to 1e-20;
its ViT's zero-initialized head is drawn again, N(0, 0.02), so the logits check something).

    python benchmarks/bench_vision_graphs.py                       # the twelve models
    python benchmarks/bench_vision_graphs.py --models tv-resnet18 timm-vit_s --rounds 50
    python benchmarks/bench_vision_graphs.py --histograms          # op counts that differ
    python benchmarks/bench_vision_graphs.py --profile             # ORT profiler, ms per op type
    python benchmarks/bench_vision_graphs.py --fold-bn             # + onnxport with FoldBatchNormPass
    python benchmarks/bench_vision_graphs.py --random-bn           # BatchNorm stats drawn, not initial
    python benchmarks/bench_vision_graphs.py --suite-counts [--sources timm torchvision] [--only NAME..]
        # node counts (file and after ORT) of tests/vision/models.py cases, static, both exporters

Run timing under `flock /tmp/bench.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import io
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnxport  # noqa: E402
from benchmarks.bench_latency import _count as count  # noqa: E402  (nodes, subgraphs included)

# key -> (source, constructor name)
MODELS = {
    "timm-resnet50": ("timm", "resnet50"),
    "timm-convnext_t": ("timm", "convnext_tiny"),
    "timm-efficientnet_b0": ("timm", "efficientnet_b0"),
    "timm-mobilenetv3_l": ("timm", "mobilenetv3_large_100"),
    "timm-vit_s": ("timm", "vit_small_patch16_224"),
    "timm-deit_s": ("timm", "deit_small_patch16_224"),
    "timm-swin_t": ("timm", "swin_tiny_patch4_window7_224"),
    "timm-regnety_016": ("timm", "regnety_016"),
    "tv-resnet18": ("torchvision", "resnet18"),
    "tv-mobilenet_v2": ("torchvision", "mobilenet_v2"),
    "tv-efficientnet_b0": ("torchvision", "efficientnet_b0"),
    "tv-vit_b_16": ("torchvision", "vit_b_16"),
}
VIT_STYLE = {"timm-vit_s", "timm-deit_s", "timm-swin_t", "tv-vit_b_16"}
EXPORTERS = ("onnxport", "torch.onnx")


def _vision() -> None:
    """torchvision (CPU shim for its compiled ops), timm importable, as tests/vision does."""
    from tests.vision.packages import import_vision

    if import_vision() is None:
        raise SystemExit("no torchvision release for this torch")


def build(key: str, random_bn: bool = False) -> torch.nn.Module:
    model = _build(key)
    if random_bn:
        # Initialized BatchNorms (mean 0, var 1, weight 1, bias 0) fold into Convs with zero
        # biases, which torch.onnx's optimizer drops and ORT then skips; a trained model has none.
        g = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                    for t, lo, hi in ((m.running_mean, -0.1, 0.1), (m.running_var, 0.5, 1.5),
                                      (m.weight, 0.5, 1.5), (m.bias, -0.1, 0.1)):
                        if t is not None:
                            t.copy_(torch.empty(t.shape).uniform_(lo, hi, generator=g))
    return model


def _build(key: str) -> torch.nn.Module:
    source, name = MODELS[key]
    torch.manual_seed(0)
    if source == "timm":
        import timm

        return timm.create_model(name, pretrained=False).eval()
    import torchvision

    model = getattr(torchvision.models, name)(weights=None).eval()
    # torchvision's ViT zero-initializes its head: every logit 0 would check nothing.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                m.weight.normal_(0, 0.02)
    return model


@contextlib.contextmanager
def _quiet() -> Any:
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        if not os.environ.get("BENCH_VERBOSE"):
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
        for name in ("torch.onnx", "onnxscript", "onnx_ir", "onnxport", "torch._export",
                     "torch.export", "torch._dynamo", "torch.fx.experimental.symbolic_shapes"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        yield


def export(exporter: str, model: torch.nn.Module, args: tuple[Any, ...], path: str,
           **options: Any) -> float:
    """Export to `path`; the export's seconds (save excluded)."""
    with _quiet(), torch.no_grad():
        start = time.perf_counter()
        if exporter.startswith("onnxport"):
            program = onnxport.export(model, args, **options)
            if exporter == "onnxport+foldbn":
                from onnx_ir.passes.common import RemoveUnusedNodesPass

                from onnxport.passes import run_passes
                from onnxport.passes.fold_batch_norm import FoldBatchNormPass

                run_passes(program.model, [FoldBatchNormPass(), RemoveUnusedNodesPass()])
        else:
            program = torch.onnx.export(  # noqa: TID251  (the baseline)
                model, args, dynamo=True, verbose=False, **options)
        seconds = time.perf_counter() - start
        assert program is not None
        program.save(path)
    return seconds


def histogram(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in model.graph.node)


def session(path: str, optimized: str | None = None, profile: str | None = None
            ) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if optimized:
        so.optimized_model_filepath = optimized
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


@dataclass
class Graph:
    exporter: str
    path: str
    export_s: float = math.nan
    nodes: int = 0
    compute_nodes: int = 0
    ort_nodes: int = 0
    file_ops: collections.Counter[str] = field(default_factory=collections.Counter)
    ort_ops: collections.Counter[str] = field(default_factory=collections.Counter)
    diff: float = math.nan
    rel: float = math.nan
    times: list[float] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)
    error: str = ""


def _profile(path: str, feed: dict[str, np.ndarray], tmp: str, runs: int) -> dict[str, float]:
    """ms per run spent in each op type, from ORT's profiler (1 thread, ENABLE_ALL)."""
    sess = session(path, profile=os.path.join(tmp, "prof"))
    for _ in range(runs):
        sess.run(None, feed)
    with open(sess.end_profiling()) as fh:
        events = json.load(fh)
    per: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["args"]["op_name"]] += e["dur"] / 1e3 / runs
    return dict(per)


def bench_model(key: str, args: argparse.Namespace, tmp: str) -> list[Graph]:
    model = build(key, args.random_bn)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x).numpy()
    exporters = (*EXPORTERS, "onnxport+foldbn") if args.fold_bn else EXPORTERS
    graphs = [Graph(e, os.path.join(tmp, f"{key}_{e}.onnx")) for e in exporters]
    feed = {}
    for g in graphs:
        try:
            g.export_s = export(g.exporter, model, (x,), g.path)
            proto = onnx.load(g.path, load_external_data=False)
            g.nodes, g.compute_nodes = count(proto), count(proto, constants=False)
            g.file_ops = histogram(proto)
            sess = session(g.path, optimized=g.path + ".ort.onnx")
            opt = onnx.load(g.path + ".ort.onnx", load_external_data=False)
            g.ort_nodes, g.ort_ops = count(opt), histogram(opt)
            feed = {sess.get_inputs()[0].name: x.numpy()}
            g.diff = float(np.abs(sess.run(None, feed)[0] - expected).max())
            g.rel = g.diff / float(np.abs(expected).max())
        except Exception as e:  # noqa: BLE001  (reported under the table)
            g.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    live = [g for g in graphs if not g.error]
    sessions = {g.exporter: session(g.path) for g in live}
    for r in range(args.warmup + args.rounds):
        # Rotate the order each round, so no graph always runs first (or after another).
        shift = r % len(live) if live else 0
        for g in live[shift:] + live[:shift]:
            name = sessions[g.exporter].get_inputs()[0].name
            t0 = time.perf_counter()
            sessions[g.exporter].run(None, {name: x.numpy()})
            if r >= args.warmup:
                g.times.append((time.perf_counter() - t0) * 1e3)
    if args.profile:
        for g in live:
            name = sessions[g.exporter].get_inputs()[0].name
            g.profile = _profile(g.path, {name: x.numpy()}, tmp, args.profile_runs)
    return graphs


def _ratio(g: Graph, ref: Graph | None) -> float:
    if ref is None or not g.times or not ref.times:
        return math.nan
    # The median of per-round ratios: both graphs ran in the same round, which cancels the
    # load drift of a shared machine.
    return statistics.median(t / r for t, r in zip(g.times, ref.times))


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def table(results: dict[str, list[Graph]], args: argparse.Namespace) -> str:
    lines = ["| model | exporter | export s | nodes | w/o Constant | after ORT | ms | ratio to torch.onnx | max abs diff (relative) |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratios: dict[str, float] = {}
    errors, notes = [], []
    for key, graphs in results.items():
        ref = next((g for g in graphs if g.exporter == "torch.onnx"), None)
        for g in graphs:
            if g.error:
                lines.append(f"| {key} | {g.exporter} | FAIL | | | | | | |")
                errors.append(f"* {key} / {g.exporter}: {g.error}")
                continue
            ratio = _ratio(g, ref)
            if g.exporter == "onnxport":
                ratios[key] = ratio
            lines.append(f"| {key} | {g.exporter} | {g.export_s:.1f} | {g.nodes} | "
                         f"{g.compute_nodes} | {g.ort_nodes} | {statistics.median(g.times):.2f} | "
                         f"{ratio:.3f}x | {g.diff:.1e} ({g.rel:.0e}) |")
        ours = next((g for g in graphs if g.exporter == "onnxport" and not g.error), None)
        if ours and ref and not ref.error:
            if ours.nodes > ref.nodes or ours.ort_nodes > ref.ort_nodes:
                notes.append(f"* {key}: more nodes than torch.onnx ({ours.nodes} vs {ref.nodes} "
                             f"in the file, {ours.ort_nodes} vs {ref.ort_nodes} after ORT)")
            if args.histograms:
                for label, a, b in (("file", ours.file_ops, ref.file_ops),
                                    ("after ORT", ours.ort_ops, ref.ort_ops)):
                    diff = ", ".join(f"{op} {a[op]}/{b[op]}" for op in sorted(set(a) | set(b))
                                     if a[op] != b[op])
                    notes.append(f"* {key}, ops that differ ({label}, onnxport/torch.onnx): "
                                 f"{diff or 'none'}")
            if args.profile:
                ops = sorted(set(ours.profile) | set(ref.profile),
                             key=lambda o: -max(ours.profile.get(o, 0), ref.profile.get(o, 0)))
                cells = ", ".join(f"{o} {ours.profile.get(o, 0):.2f}/{ref.profile.get(o, 0):.2f}"
                                  for o in ops[:12])
                notes.append(f"* {key}, ORT profiler ms per run by op type (onnxport/torch.onnx): "
                             f"{cells}")
    out = lines + [""]
    if ratios:
        vit = [ratios[k] for k in ratios if k in VIT_STYLE]
        cnn = [ratios[k] for k in ratios if k not in VIT_STYLE]
        out.append(f"* geometric mean of onnxport's ratio to torch.onnx: {_geomean(list(ratios.values())):.3f}x "
                   f"over {len(ratios)} models (ViT-style {_geomean(vit):.3f}x over {len(vit)}, "
                   f"others {_geomean(cnn):.3f}x over {len(cnn)}); max {max(ratios.values()):.3f}x")
    return "\n".join(out + notes + ([""] + errors if errors else []))


# -- node counts over the vision suite ----------------------------------------------------------
def suite_counts(args: argparse.Namespace, tmp: str) -> str:
    from tests.vision import models as suite

    cases = [c for c in suite.cases() if (not args.sources or c.source in args.sources)
             and (not args.only or c.name in args.only or c.name.split(":")[-1] in args.only)]
    lines = ["| case | onnxport nodes | torch.onnx nodes | onnxport w/o Constant | "
             "onnxport after ORT | torch.onnx after ORT |", "|---|---|---|---|---|---|"]
    tallies: collections.Counter[str] = collections.Counter()
    for case in cases:
        print(f"[{case.name}]", file=sys.stderr, flush=True)
        cells: dict[str, tuple[Any, ...]] = {}
        try:
            torch.manual_seed(0)
            model = case.build()
            call_args, kwargs = case.inputs(1, case.size)
        except Exception as e:  # noqa: BLE001
            lines.append(f"| {case.name} | build failed: {type(e).__name__} | | | | |")
            continue
        for exporter in EXPORTERS:
            path = os.path.join(tmp, f"suite_{exporter}.onnx")
            try:
                with _quiet(), torch.no_grad():
                    options = case.export_kwargs(call_args, kwargs, dynamic=False, spatial=False)
                    if exporter == "onnxport":
                        program = onnxport.export(model, call_args, kwargs=kwargs, **options)
                    else:
                        program = torch.onnx.export(  # noqa: TID251  (the baseline)
                            model, call_args, kwargs=kwargs, dynamo=True, verbose=False, **options)
                    program.save(path)
                proto = onnx.load(path, load_external_data=False)
                session(path, optimized=path + ".ort.onnx")
                cells[exporter] = (count(proto), count(proto, constants=False),
                                   count(onnx.load(path + ".ort.onnx", load_external_data=False)))
            except Exception as e:  # noqa: BLE001
                cells[exporter] = (f"FAIL {type(e).__name__}", "", "")
        a, b = cells["onnxport"], cells["torch.onnx"]
        if isinstance(a[0], int) and isinstance(b[0], int):
            tallies["both"] += 1
            tallies["le file"] += a[0] <= b[0]
            tallies["le compute"] += a[1] <= b[1]
            tallies["le ort"] += a[2] <= b[2]
            for i, what in enumerate(("file", "compute", "ort")):
                tallies[f"onnxport {what}"] += a[i]
                tallies[f"torch.onnx {what}"] += b[i]
        lines.append(f"| {case.name} | {a[0]} | {b[0]} | {a[1]} | {a[2]} | {b[2]} |")
    summary = (f"{len(cases)} cases (static, batch 1, the case's size); both exported: "
               f"{tallies['both']}; onnxport has no more nodes than torch.onnx in "
               f"{tallies['le file']} files ({tallies['le compute']} without Constant nodes; "
               f"torch.onnx writes none), {tallies['le ort']} after ORT's optimizations. Nodes "
               f"over the cases both exported: onnxport {tallies['onnxport file']} "
               f"({tallies['onnxport compute']} without Constant), torch.onnx "
               f"{tallies['torch.onnx file']}; after ORT {tallies['onnxport ort']} vs "
               f"{tallies['torch.onnx ort']}.")
    return summary + "\n\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--histograms", action="store_true",
                        help="list the op types whose counts differ from torch.onnx's")
    parser.add_argument("--profile", action="store_true",
                        help="ORT profiler: ms per run by op type, both graphs")
    parser.add_argument("--profile-runs", type=int, default=10)
    parser.add_argument("--random-bn", action="store_true",
                        help="draw BatchNorm statistics and affine weights (as trained models have "
                        "them) instead of their initial values, which give zero Conv biases")
    parser.add_argument("--fold-bn", action="store_true",
                        help="also onnxport's graph after the opt-in FoldBatchNormPass")
    parser.add_argument("--suite-counts", action="store_true",
                        help="node counts over tests/vision/models.py cases instead")
    parser.add_argument("--sources", nargs="*", help="with --suite-counts: these sources only")
    parser.add_argument("--only", nargs="*", help="with --suite-counts: these case names only")
    parser.add_argument("--out", help="also write the report to this markdown file")
    args = parser.parse_args(argv)
    _vision()
    torch.set_num_threads(1)
    load_start = os.getloadavg()[0]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if args.suite_counts:
            body = suite_counts(args, tmp)
        else:
            results = {}
            for key in args.models:
                print(f"[{key}]", file=sys.stderr, flush=True)
                results[key] = bench_model(key, args, tmp)
            body = table(results, args)
    header = (f"ORT {ort.__version__} CPU, 1 intra-op thread, ORT_ENABLE_ALL; torch "
              f"{torch.__version__}, onnxport opset 20 defaults; {os.cpu_count()} cores, load "
              f"average {load_start:.2f} at the start and {os.getloadavg()[0]:.2f} at the end; "
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
              f"{time.perf_counter() - start:.0f} s.")
    if not args.suite_counts:
        header += (f" Median of {args.rounds} rounds after {args.warmup} warm-up rounds, both "
                   f"graphs in each round, rotating which runs first; batch 1, 224 px, "
                   f"random weights" + (", BatchNorm statistics drawn (--random-bn)."
                                        if args.random_bn else "."))
    report = header + "\n\n" + body + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
