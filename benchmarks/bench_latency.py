"""ONNX Runtime latency of exported transformers: onnxport vs torch.onnx (+ ORT's optimizer).

For each model (random weights, built from a config: nothing is downloaded) the graphs are

* `onnxport`            `onnxport.export(model, args)` (defaults: opset 20, optimize=True);
* `onnxport opset N`    `onnxport.export(model, args, opset_version=N)`, N in `--opsets`
                        (default 18 and 23);
* `onnxport ort-target` `onnxport.export(model, args, target="onnxruntime")` (opset 20 plus the
                        ONNX Runtime target's contrib-op passes);
* `torch.onnx`          `torch.onnx.export(model, args, dynamo=True)` (its defaults);
* `torch.onnx+ortopt`   torch.onnx's file after `onnxruntime.transformers.optimizer.
                        optimize_model(path, model_type, num_heads, hidden_size)`;

and with `--ablation` also onnxport without the fusion passes and with each one alone, to
see what each pass is worth. Each graph runs in ONNX Runtime (CPU, each `--threads` count of
intra-op threads, default 1 and all cores, default graph optimizations); one round runs every
graph once, in a rotating order, and `--repeat` rounds follow `--warmup` rounds. The table gives the median per graph, its
ratio to torch.onnx's, the node count of the file and after ORT's own optimizations, and the
largest difference from eager PyTorch.

    python benchmarks/bench_latency.py                          # all four models
    python benchmarks/bench_latency.py --models bert --repeat 50 --ablation
    python benchmarks/bench_latency.py --out benchmarks/results/latency_<date>.md
    python benchmarks/bench_latency.py --kernels     # Add + norm vs ORT's Skip*LayerNormalization
    python benchmarks/bench_latency.py --vision --threads 1 --repeat 10   # the ViT-style models

`--vision` times timm's ViT-S/16, DeiT-S/16 and Swin-T and torchvision's ViT-B/16 (batch 1,
224 px, random weights) instead of the encoders. Neither package is a dependency of the
project, and torchvision's wheel (built for CUDA torch) breaks `import transformers` when it is
installed beside the CPU torch, so install them aside and put them on the path:

    pip install --no-deps --target /tmp/vision timm "torchvision==0.28.*" pillow
    PYTHONPATH=/tmp/vision python benchmarks/bench_latency.py --vision

(tests/vision/shim.py defines torchvision's operators when its compiled ones do not load.)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import io
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import torch

import onnxport
from onnxport.passes import default_passes, fusion_passes, run_passes

HIDDEN, LAYERS, SEQ = 256, 4, 128


@dataclass
class Spec:
    name: str
    build: Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor]]]
    ort_model_type: str
    heads: int
    hidden: int = HIDDEN


def _bert() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=4,
                     intermediate_size=4 * HIDDEN, vocab_size=1000, max_position_embeddings=512)
    ids = torch.randint(0, 1000, (1, SEQ))
    return BertModel(cfg), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _gpt2() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(n_embd=HIDDEN, n_layer=LAYERS, n_head=4, vocab_size=1000, n_positions=512,
                     use_cache=False)
    return GPT2Model(cfg), {"input_ids": torch.randint(0, 1000, (1, SEQ))}


def _llama() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=8,
                      num_key_value_heads=2, intermediate_size=688, vocab_size=1000,
                      max_position_embeddings=512, use_cache=False)
    return LlamaModel(cfg), {"input_ids": torch.randint(0, 1000, (1, SEQ))}


def _vit() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import ViTConfig, ViTModel
    # 176 / 16 = 11 -> 121 patches + [CLS] = 122 tokens, the nearest square to 128.
    cfg = ViTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=4,
                    intermediate_size=4 * HIDDEN, image_size=176, patch_size=16)
    return ViTModel(cfg, add_pooling_layer=False), {"pixel_values": torch.randn(1, 3, 176, 176)}


class _HandBlocks(torch.nn.Module):
    """Micro model for the passes no transformers model above triggers: blocks of a hand-written
    LayerNorm (`(x - u) / sqrt(var + eps)`) and a 2-D `x @ w + b` MLP."""

    def __init__(self, kind: str = "ln") -> None:
        super().__init__()
        self.kind = kind
        self.w = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(HIDDEN, HIDDEN) / 16)
                                         for _ in range(LAYERS)])
        self.b = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(HIDDEN))
                                         for _ in range(LAYERS)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w, b in zip(self.w, self.b):
            if self.kind == "ln":
                u = x.mean(-1, keepdim=True)
                s = (x - u).pow(2).mean(-1, keepdim=True)
                x = torch.relu((x - u) / torch.sqrt(s + 1e-5) @ w + b)
            elif self.kind == "rms":   # LlamaRMSNorm's formula
                x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * b
                x = torch.relu(x @ w)
            else:                      # erf GELU (nn.GELU, written out below opset 20)
                x = torch.nn.functional.gelu(x @ w + b)
        return x


def _hand(kind: str) -> Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor]]]:
    return lambda: (_HandBlocks(kind), {"x": torch.randn(SEQ, HIDDEN)})


SPECS = {s.name: s for s in [Spec("bert", _bert, "bert", 4), Spec("gpt2", _gpt2, "gpt2", 4),
                             Spec("llama", _llama, "gpt2", 8), Spec("vit", _vit, "vit", 4),
                             Spec("hand-ln-mlp", _hand("ln"), "bert", 4),
                             Spec("hand-rms-mlp", _hand("rms"), "bert", 4),
                             Spec("gelu-mlp", _hand("gelu"), "bert", 4)]}
TRANSFORMERS = ["bert", "gpt2", "llama", "vit"]


def _vision(name: str) -> Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor]]]:
    """timm's or torchvision's model `name` (random weights, nothing downloaded) on one
    224 x 224 image."""
    def build() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "vision"))
        from shim import load_torchvision   # torchvision's operators where its own do not load
        load_torchvision()
        import timm
        import torchvision
        model = (torchvision.models.vit_b_16() if name == "tv_vit_b_16"
                 else timm.create_model(name, pretrained=False))
        return model, {"x": torch.randn(1, 3, 224, 224)}
    return build


VISION_SPECS = [Spec("vit_small_patch16_224", _vision("vit_small_patch16_224"), "vit", 6, 384),
                Spec("deit_small_patch16_224", _vision("deit_small_patch16_224"), "vit", 6, 384),
                Spec("swin_tiny_patch4_window7_224", _vision("swin_tiny_patch4_window7_224"),
                     "swin", 0, 0),
                Spec("tv_vit_b_16", _vision("tv_vit_b_16"), "vit", 12, 768)]
SPECS.update({s.name: s for s in VISION_SPECS})
VISION = [s.name for s in VISION_SPECS]


@dataclass
class Graph:
    label: str
    path: str
    nodes: int
    compute_nodes: int = 0
    ort_nodes: int = 0
    session: ort.InferenceSession | None = None
    feed: dict[str, np.ndarray] = field(default_factory=dict)
    diff: float = math.nan
    times: list[float] = field(default_factory=list)
    error: str = ""


def _count(model: onnx.ModelProto, constants: bool = True) -> int:
    """Nodes in the graph, its subgraphs and functions (without Constant nodes if not
    `constants`: ONNX Runtime turns those into initializers at load, as torch.onnx stores
    its constants)."""
    def walk(g: onnx.GraphProto) -> int:
        n = 0
        for node in g.node:
            n += constants or node.op_type != "Constant"
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    n += walk(a.g)
                n += sum(walk(s) for s in a.graphs)
        return n
    return walk(model.graph) + sum(len(f.node) for f in model.functions)


def _fusion_names() -> list[str]:
    return [type(p).__name__ for p in fusion_passes()]


def _onnxport(model: torch.nn.Module, inputs: dict[str, torch.Tensor], path: str, opset: int | None,
              keep: set[str] | None = None, target: str = "onnx") -> None:
    """Export with onnxport; `keep` (when given) names the fusion passes to run."""
    if keep is None:
        program = onnxport.export(model, (), kwargs=inputs, opset_version=opset, target=target)
    else:
        program = onnxport.export(model, (), kwargs=inputs, opset_version=opset, optimize=False)
        # The default list without its fusions, with the fusions named in `keep` in their place.
        fusions = set(_fusion_names())
        passes = [p for p in default_passes() if type(p).__name__ not in fusions]
        at = 1 + max(i for i, p in enumerate(passes)
                     if type(p).__name__ == "CommonSubexpressionEliminationPass")
        passes[at:at] = [p for p in fusion_passes() if type(p).__name__ in keep]
        run_passes(program.model, passes)
    program.save(path)


def _torch_onnx(model: torch.nn.Module, inputs: dict[str, torch.Tensor], path: str) -> None:
    program = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, verbose=False)
    assert program is not None
    program.save(path, external_data=False)


def _ort_optimizer(src: str, path: str, spec: Spec) -> str:
    """The optimizer's Python fusions (opt_level=0; ORT's own graph optimizations run when the
    session loads the file, as for every other graph). Returns the model_type that worked: the
    gpt2 optimizer fails on torch.onnx's GPT-2 (a Gemm without bias), where bert's is used."""
    from onnxruntime.transformers.optimizer import optimize_model
    for model_type in dict.fromkeys([spec.ort_model_type, "bert"]):
        try:
            optimized = optimize_model(src, model_type=model_type, num_heads=spec.heads,
                                       hidden_size=spec.hidden, opt_level=0)
        except Exception:  # noqa: BLE001  (the next model_type is tried; the last one raises)
            if model_type == "bert":
                raise
            continue
        optimized.save_model_to_file(path)
        return model_type
    raise AssertionError("unreachable")


def _session(path: str, threads: int, optimized_path: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _quiet() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    if not os.environ.get("BENCH_VERBOSE"):
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    for name in ("torch.onnx", "onnxscript", "onnx_ir", "onnxport"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return stack


def bench_model(spec: Spec, args: argparse.Namespace, tmp: str) -> dict[int, list[Graph]]:
    """Export every graph once, then time them for each thread count: {threads: graphs}."""
    torch.manual_seed(0)
    model, inputs = spec.build()
    model.eval()
    with torch.no_grad():
        out = model(**inputs)
    expected = (out if isinstance(out, torch.Tensor) else out[0] if isinstance(out, tuple)
                else out.last_hidden_state).numpy()
    builders: list[tuple[str, Callable[[str], None]]] = [
        ("onnxport", lambda p: _onnxport(model, inputs, p, None)),
        *((f"onnxport opset {o}", lambda p, o=o: _onnxport(model, inputs, p, o))
          for o in args.opsets),
        ("onnxport ort-target", lambda p: _onnxport(model, inputs, p, None, target="onnxruntime")),
    ]
    if args.ablation:
        builders.append(("onnxport no fusion", lambda p: _onnxport(model, inputs, p, None, set())))
        for name in _fusion_names():
            builders.append((f"onnxport +{name.removesuffix('Pass')} only",
                             lambda p, n=name: _onnxport(model, inputs, p, None, {n})))
        builders.append(("onnxport 23 no fusion", lambda p: _onnxport(model, inputs, p, 23, set())))
    builders.append(("torch.onnx", lambda p: _torch_onnx(model, inputs, p)))
    used: list[str] = []
    builders.append(("torch.onnx+ortopt",
                     lambda p: used.append(_ort_optimizer(
                         os.path.join(tmp, f"{spec.name}_torch.onnx.onnx"), p, spec))))
    graphs: list[Graph] = []
    for label, build in builders:
        path = os.path.join(tmp, f"{spec.name}_{label.replace(' ', '_')}.onnx")
        graph = Graph(label, path, 0)
        graphs.append(graph)
        try:
            with _quiet(), torch.no_grad():
                build(path)
            proto = onnx.load(path, load_external_data=False)
            graph.nodes = _count(proto)
            graph.compute_nodes = _count(proto, constants=False)
            _session(path, 1, path + ".ort.onnx")
            graph.ort_nodes = _count(onnx.load(path + ".ort.onnx", load_external_data=False))
            graph.session = _session(path, 1)
            names = [i.name for i in graph.session.get_inputs()]
            given = list(inputs)
            graph.feed = {n: inputs[n if n in inputs else given[i]].numpy()
                          for i, n in enumerate(names)}
            got = graph.session.run(None, graph.feed)[0]
            graph.diff = float(np.abs(got - expected).max())
        except Exception as e:  # noqa: BLE001  (reported under the table)
            graph.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            graph.session = None
    for graph in graphs:
        if graph.label == "torch.onnx+ortopt" and used:
            graph.label = f"torch.onnx+ortopt ({used[0]})"
        graph.session = None
    runs: dict[int, list[Graph]] = {}
    for threads in args.threads:
        copies = [dataclasses.replace(g, times=[]) for g in graphs]
        live = [g for g in copies if not g.error]
        for graph in live:
            graph.session = _session(graph.path, threads)
        for r in range(args.warmup + args.repeat):
            # Alternate the order each round so no graph always runs first (or after a given one).
            shift = r % len(live) if live else 0
            for graph in live[shift:] + live[:shift]:
                assert graph.session is not None
                clock = time.thread_time if args.cpu_time else time.perf_counter
                t0 = clock()
                graph.session.run(None, graph.feed)
                if r >= args.warmup:
                    graph.times.append((clock() - t0) * 1e3)
        for graph in copies:
            graph.session = None
        runs[threads] = copies
    return runs


def table(results: dict[str, list[Graph]]) -> str:
    lines = ["| model | graph | ms | ratio to torch.onnx | nodes | nodes w/o Constant | nodes after ORT opt | max abs diff vs eager |",
             "|---|---|---|---|---|---|---|---|"]
    ratios: dict[tuple[str, str], float] = {}
    errors = []
    for model, graphs in results.items():
        ref = next((g for g in graphs if g.label == "torch.onnx" and g.times), None)
        for g in graphs:
            if g.error or not g.times:
                lines.append(f"| {model} | {g.label} | FAIL | | | | | |")
                errors.append(f"* {model} / {g.label}: {g.error}")
                continue
            ms = statistics.median(g.times)
            # The median of the per-round ratios: each round's time divided by torch.onnx's in
            # the same round, which cancels the load drift of a shared machine.
            ratio = statistics.median(t / r for t, r in zip(g.times, ref.times)) if ref else math.nan
            ratios[model, g.label.split(" (")[0]] = ratio
            lines.append(f"| {model} | {g.label} | {ms:.3f} | {ratio:.3f}x | {g.nodes} | "
                         f"{g.compute_nodes} | {g.ort_nodes} | {g.diff:.1e} |")
    geo = []
    labels = sorted({g.label for graphs in results.values() for g in graphs
                     if g.label.startswith("onnxport") and "+" not in g.label
                     and "no fusion" not in g.label})
    for label in (*labels, "torch.onnx+ortopt"):
        for group, kind in ((TRANSFORMERS, "transformers"), (VISION, "vision")):
            found = [ratios[m, label] for m in results if m in group and (m, label) in ratios
                     and not math.isnan(ratios[m, label])]
            if found:
                geo.append(f"* geometric mean of the ratio to torch.onnx, {label}: "
                           f"{math.exp(sum(map(math.log, found)) / len(found)):.3f}x "
                           f"over {len(found)} {kind} models")
        opt = [ratios[m, label] / ratios[m, "torch.onnx+ortopt"] for m in results
               if m in TRANSFORMERS and (m, label) in ratios and (m, "torch.onnx+ortopt") in ratios
               and label != "torch.onnx+ortopt"]
        if opt:
            geo.append(f"* geometric mean of the ratio to torch.onnx+ortopt, {label}: "
                       f"{math.exp(sum(map(math.log, opt)) / len(opt)):.3f}x (ratio of the two "
                       f"medians of per-round ratios to torch.onnx)")
    return "\n".join(lines + [""] + geo + ([""] + errors if errors else []))


def skip_norm_kernels(repeat: int = 7) -> str:
    """ONNX Runtime's Skip*LayerNormalization against Add + the standard norm, per norm (a
    chain of 32 in one graph, so session overhead does not count), 1 thread, fp32, ORT graph
    optimizations off (so the standard pair is not fused into the contrib op)."""
    from onnx import TensorProto, helper
    n = 32
    kinds = {
        "Add + LayerNormalization": ("LayerNormalization", False),
        "SkipLayerNormalization": ("SkipLayerNormalization", True),
        "Add + SimplifiedLayerNormalization": ("SimplifiedLayerNormalization", False),
        "SkipSimplifiedLayerNormalization": ("SkipSimplifiedLayerNormalization", True),
    }
    lines = ["| rows x hidden | " + " | ".join(f"{k} us" for k in kinds) + " |",
             "|---|" + "---|" * len(kinds)]
    for rows, hidden in [(1, 256), (1, 512), (1, 768), (1, 1024), (1, 2048), (2, 256), (4, 512),
                         (16, 256), (128, 256)]:
        cells = []
        for op, skip in kinds.values():
            w = helper.make_tensor("w", TensorProto.FLOAT, [hidden], np.random.rand(hidden).astype(np.float32))
            b = helper.make_tensor("b", TensorProto.FLOAT, [hidden], np.random.rand(hidden).astype(np.float32))
            nodes, prev = [], "x"
            for i in range(n):
                params = ["w", "b"] if "Simplified" not in op else ["w"]
                if skip:
                    nodes.append(helper.make_node(op, [prev, "r", *params], [f"y{i}"],
                                                  domain="com.microsoft"))
                else:
                    nodes += [helper.make_node("Add", [prev, "r"], [f"s{i}"]),
                              helper.make_node(op, [f"s{i}", *params], [f"y{i}"], axis=-1)]
                prev = f"y{i}"
            graph = helper.make_graph(
                nodes, "chain", [helper.make_tensor_value_info(v, TensorProto.FLOAT, [1, rows, hidden])
                                 for v in ("x", "r")],
                [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)],
                [w] + ([b] if "Simplified" not in op else []))
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                            helper.make_opsetid("com.microsoft", 1)])
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            feed = {"x": np.random.randn(1, rows, hidden).astype(np.float32),
                    "r": np.random.randn(1, rows, hidden).astype(np.float32) * 0.1}
            for _ in range(10):
                sess.run(None, feed)
            best = math.inf
            for _ in range(repeat):
                t0 = time.perf_counter()
                for _ in range(30):
                    sess.run(None, feed)
                best = min(best, (time.perf_counter() - t0) / 30 / n * 1e6)
            cells.append(f"{best:.2f}")
        lines.append(f"| {rows} x {hidden} | " + " | ".join(cells) + " |")
    return (f"ORT {ort.__version__} CPU, 1 thread, fp32, microseconds per norm (best of "
            f"{repeat}x30 runs of a chain of {n}):\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=TRANSFORMERS, choices=list(SPECS),
                        help="hand-ln-mlp, hand-rms-mlp, gelu-mlp: blocks of a hand-written "
                        "LayerNorm / RMSNorm / GELU and a 2-D MLP, (128, 256) (for --ablation)")
    parser.add_argument("--opsets", type=int, nargs="*", default=[18, 23],
                        help="onnxport graphs at these opsets besides the default (20)")
    parser.add_argument("--repeat", type=int, default=30, help="timed rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1],
                        help="ORT intra-op thread counts (default: 1 and all cores)")
    parser.add_argument("--ablation", action="store_true",
                        help="also onnxport without fusion passes and with each one alone")
    parser.add_argument("--vision", action="store_true",
                        help="the ViT-style vision models (timm ViT-S/16, DeiT-S/16, Swin-T; "
                        "torchvision ViT-B/16) instead of the default models")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time each run by the calling thread's CPU time instead of the wall "
                        "clock (with 1 intra-op thread ORT runs every kernel on that thread): "
                        "other processes' load no longer counts, a shared machine's caches do")
    parser.add_argument("--kernels", action="store_true",
                        help="only the Add + norm vs Skip*LayerNormalization kernel comparison")
    parser.add_argument("--out", help="also write the report to this markdown file")
    args = parser.parse_args(argv)
    args.threads = list(dict.fromkeys(args.threads))
    if args.cpu_time and any(t != 1 for t in args.threads):
        parser.error("--cpu-time measures 1 intra-op thread only (--threads 1)")
    if args.vision and args.models == TRANSFORMERS:
        args.models = VISION
    if args.kernels:
        report = skip_norm_kernels()
        print(report)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(report)
        return 0
    torch.set_num_threads(1)
    results: dict[int, dict[str, list[Graph]]] = {t: {} for t in args.threads}
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            print(f"[{name}] exporting and timing", file=sys.stderr, flush=True)
            for threads, graphs in bench_model(SPECS[name], args, tmp).items():
                results[threads][name] = graphs
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    header = (("Times are the calling thread's CPU time per run (--cpu-time). " if args.cpu_time else "") +
              f"ORT {ort.__version__} CPU, median of {args.repeat} rounds after {args.warmup} "
              f"warm-up rounds, graphs alternated in each round; torch {torch.__version__}, "
              f"{os.cpu_count()} cores, load average {load_start:.2f} at the start and "
              f"{load:.2f} at the end; {datetime.date.today().isoformat()}. " + (
                  "Models: batch 1, 224 x 224 images, random weights." if set(args.models) <= set(VISION)
                  else f"Models: hidden {HIDDEN}, {LAYERS} layers, sequence {SEQ} (ViT: 122 "
                  "tokens), batch 1, random weights."))
    report = header + "\n"
    for threads, res in results.items():
        report += f"\n### {threads} intra-op thread(s)\n\n" + table(res) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
