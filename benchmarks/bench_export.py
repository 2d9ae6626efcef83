#!/usr/bin/env python
"""Export speed, memory, graph size and runtime latency: onnxport vs torch.export vs torch.onnx.

    python benchmarks/bench_export.py                       # every model, 20 ORT runs
    python benchmarks/bench_export.py --models mlp cnn --repeat 50
    python benchmarks/bench_export.py --models bert-small --no-memory --no-save

For each model, in one process and one run:
  * torch.export.export alone (non-strict, what onnxport captures with), wall time;
  * onnxport.export, wall time;
  * torch.onnx.export(..., dynamo=True), wall time (failures are caught and reported);
each after one warm-up call of the same exporter on the same model. Then, in a separate pass
(tracing slows the code down, so it never overlaps the timings): peak memory per exporter.
Then the ONNX node count of each model and its ONNX Runtime latency (median of --repeat runs).
Finally the save speed of ONNXProgram.save on a model with ~200 MB of weights.

See benchmarks/README.md for what each column means.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import io
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import onnxport
from onnxport import examples

warnings.filterwarnings("ignore")
logging.getLogger("torch.onnx").setLevel(logging.ERROR)
logging.getLogger("torch._export").setLevel(logging.ERROR)
logging.getLogger("torch.export").setLevel(logging.ERROR)
logging.getLogger("onnxscript").setLevel(logging.ERROR)


# -- models ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Case:
    """One model to benchmark: (model, args, kwargs) built on demand."""

    name: str
    build: Callable[[], tuple[nn.Module, tuple[Any, ...], dict[str, Any]]]
    group: str = ""


def _mlp() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    model, args = examples.mlp()
    return model, args, {}


def _cnn() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    return examples.SmallCNN().eval(), (torch.rand(8, 3, 64, 64),), {}


def _encoder(depth: int) -> Callable[[], tuple[nn.Module, tuple[Any, ...], dict[str, Any]]]:
    def build() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
        layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512,
                                           batch_first=True)
        model = nn.TransformerEncoder(layer, num_layers=depth, enable_nested_tensor=False).eval()
        return model, (torch.rand(2, 64, 128),), {}

    return build


def _bert_small() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    import transformers

    # BERT-Small (L=4, H=512, A=8) of "Well-Read Students Learn Better", random weights.
    config = transformers.BertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                                     intermediate_size=2048, attn_implementation="sdpa")
    model = transformers.BertModel(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, 128))
    return model, (input_ids,), {"attention_mask": torch.ones_like(input_ids)}


def _gpt2_small() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    import transformers

    # GPT-2 small (124M parameters: 12 layers, 768 wide), random weights.
    config = transformers.GPT2Config(use_cache=False, attn_implementation="sdpa")
    model = transformers.GPT2LMHeadModel(config).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, 128))
    return model, (input_ids,), {"use_cache": False}


CASES = [
    Case("mlp", _mlp),
    Case("cnn", _cnn),
    *(Case(f"encoder-{d}", _encoder(d), group="encoder") for d in (2, 4, 8, 16)),
    Case("bert-small", _bert_small),
    Case("gpt2-small", _gpt2_small),
]


# -- exporters ---------------------------------------------------------------------------------

def _torch_export(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return torch.export.export(model, args, kwargs=kwargs or None, strict=False)


def _onnxport(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return onnxport.export(model, args, kwargs=kwargs or None)


def _torch_onnx(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Its progress lines go to stdout; keep the table readable.
    with contextlib.redirect_stdout(io.StringIO()):
        return torch.onnx.export(model, args, kwargs=kwargs or None, dynamo=True, verbose=False)


EXPORTERS: dict[str, Callable[..., Any]] = {
    "torch.export": _torch_export,
    "onnxport": _onnxport,
    "torch.onnx": _torch_onnx,
}


# -- measurement -------------------------------------------------------------------------------

def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass
class Result:
    """What one exporter did on one model."""

    seconds: float | None = None
    error: str | None = None
    py_peak_mb: float | None = None
    rss_peak_mb: float | None = None
    nodes: int | None = None
    ort_ms: float | None = None
    ort_error: str | None = None


def _short_error(e: BaseException) -> str:
    missing = getattr(e, "missing", None)
    if missing:
        return f"{type(e).__name__}: no translation for " + ", ".join(m.target for m in missing)
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:200]


def _onnx_model_bytes(exporter: str, output: Any) -> bytes | None:
    if exporter == "torch.export":
        return None
    buffer = io.BytesIO()
    if exporter == "onnxport":
        output.save(buffer)
    else:
        buffer.write(output.model_proto.SerializeToString())
    return buffer.getvalue()


def _node_count(exporter: str, output: Any) -> int | None:
    if exporter == "torch.export":
        return None
    model = output.model  # both are onnx_ir Models
    nodes = sum(1 for _ in model.graph.all_nodes())
    nodes += sum(len(list(f.all_nodes())) for f in model.functions.values())
    return nodes


def _ort_latency(model_bytes: bytes, model: nn.Module, args: tuple[Any, ...],
                 kwargs: dict[str, Any], repeat: int, threads: int) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model_bytes, sess_options=options,
                                   providers=["CPUExecutionProvider"])
    leaves = [x for x in torch.utils._pytree.tree_leaves((args, kwargs))
              if isinstance(x, torch.Tensor)]
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(leaves):
        raise RuntimeError(f"model has {len(names)} inputs, the example has {len(leaves)} tensors")
    feed = {n: t.numpy() for n, t in zip(names, leaves)}
    session.run(None, feed)  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _rss_in_fresh_process(case: str, exporter: str) -> float | None:
    """Peak RSS growth of one export in a new process (so no allocator reuse hides it)."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--rss-child", case, exporter],
                          capture_output=True, text=True, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line).get("rss_delta_mb")
    return None


def _rss_child(case_name: str, exporter: str) -> int:
    """Build the model, note RSS, export once, print the peak RSS growth as JSON."""
    import json
    import resource

    case = next(c for c in CASES if c.name == case_name)
    torch.manual_seed(0)
    model, args, kwargs = case.build()
    with torch.no_grad():
        model(*args, **kwargs)  # lazily-initialised kernels and buffers are not the exporter's
    gc.collect()
    reset = _reset_peak_rss()
    before = _rss_bytes()
    try:
        with torch.no_grad():
            EXPORTERS[exporter](model, args, kwargs)
    except Exception:  # noqa: BLE001
        print(json.dumps({"rss_delta_mb": None}))
        return 1
    peak = _peak_rss_bytes() if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rss_delta_mb": max(peak - before, 0) / 2**20}))
    return 0


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def bench_case(case: Case, exporters: list[str], *, export_repeat: int, repeat: int, threads: int,
               memory: bool) -> dict[str, Result]:
    model, args, kwargs = case.build()
    results = {name: Result() for name in exporters}
    outputs: dict[str, Any] = {}
    with torch.no_grad():
        for name in exporters:
            fn = EXPORTERS[name]
            result = results[name]
            try:
                outputs[name] = fn(model, args, kwargs)  # warm-up (and the output we inspect)
                times: list[float] = []
                # Up to `export_repeat` timed exports, stopping once they add up to 3 s.
                while len(times) < export_repeat and sum(times) < 3.0:
                    gc.collect()
                    t0 = time.perf_counter()
                    fn(model, args, kwargs)
                    times.append(time.perf_counter() - t0)
                result.seconds = statistics.median(times)
            except Exception as e:  # noqa: BLE001  (reported in the table)
                result.error = _short_error(e)
                if os.environ.get("BENCH_TRACEBACK"):
                    traceback.print_exc()
        if memory:
            # Python-heap peak, in this process, after the warm-up (tracemalloc slows Python
            # code several times, so this pass never overlaps the timings).
            for name in exporters:
                if results[name].error is not None:
                    continue
                gc.collect()
                tracemalloc.start()
                try:
                    EXPORTERS[name](model, args, kwargs)
                    _, py_peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                results[name].py_peak_mb = py_peak / 2**20
                results[name].rss_peak_mb = _rss_in_fresh_process(case.name, name)
        for name, output in outputs.items():
            result = results[name]
            result.nodes = _node_count(name, output)
            try:
                data = _onnx_model_bytes(name, output)
                if data is not None:
                    result.ort_ms = _ort_latency(data, model, args, kwargs, repeat, threads)
            except Exception as e:  # noqa: BLE001
                result.ort_error = _short_error(e)
    return results


# -- save speed --------------------------------------------------------------------------------

def bench_save(directory: str, megabytes: int, repeat: int) -> list[tuple[str, float, float]]:
    """(method, seconds, MB/s) for saving ~`megabytes` MB of weights three ways."""
    width = int((megabytes * 2**20 / 4 / 4) ** 0.5)
    model = nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(4))).eval()
    args = (torch.rand(2, width),)
    program = onnxport.export(model, args)
    raw = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    size_mb = len(raw) / 2**20
    path = os.path.join(directory, "big.onnx")

    def clean() -> None:
        for name in ("big.onnx", "big.onnx.data", "raw.bin"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))

    def raw_write() -> None:
        with open(os.path.join(directory, "raw.bin"), "wb") as fh:
            fh.write(raw)

    methods: list[tuple[str, Callable[[], None]]] = [
        ("raw open().write()", raw_write),
        ("program.save(path)", lambda: program.save(path)),
        ("program.save(path, external_data=True)", lambda: program.save(path, external_data=True)),
    ]
    rows = []
    for label, fn in methods:
        times = []
        for _ in range(repeat):
            clean()
            gc.collect()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        clean()
        seconds = statistics.median(times)
        rows.append((label, seconds, size_mb / seconds))
    return [(f"{label} ({size_mb:.0f} MB)", s, mbs) for label, s, mbs in rows]


# -- output ------------------------------------------------------------------------------------

def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def render(all_results: dict[str, dict[str, Result]], exporters: list[str], memory: bool) -> str:
    header = ["model"]
    for name in exporters:
        header.append(f"{name} s")
    if "onnxport" in exporters and "torch.export" in exporters:
        header.append("onnxport/torch.export")
    if "onnxport" in exporters and "torch.onnx" in exporters:
        header.append("onnxport/torch.onnx")
    if memory:
        for name in exporters:
            header += [f"{name} py-heap MB", f"{name} RSS Δ MB"]
    onnx_exporters = [e for e in exporters if e != "torch.export"]
    for name in onnx_exporters:
        header += [f"{name} nodes", f"{name} ORT ms"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    errors: list[str] = []
    for model_name, results in all_results.items():
        row = [model_name]
        for name in exporters:
            r = results[name]
            if r.error:
                row.append("FAIL")
                errors.append(f"- {model_name} / {name}: {r.error}")
            else:
                row.append(_fmt(r.seconds, ".3f"))
        if "onnxport" in exporters and "torch.export" in exporters:
            row.append(_ratio(results["onnxport"].seconds, results["torch.export"].seconds))
        if "onnxport" in exporters and "torch.onnx" in exporters:
            row.append(_ratio(results["onnxport"].seconds, results["torch.onnx"].seconds))
        if memory:
            for name in exporters:
                row += [_fmt(results[name].py_peak_mb, ".1f"), _fmt(results[name].rss_peak_mb, ".1f")]
        for name in onnx_exporters:
            r = results[name]
            row.append(_fmt(r.nodes, "d"))
            if r.ort_error:
                row.append("FAIL")
                errors.append(f"- {model_name} / {name} in ONNX Runtime: {r.ort_error}")
            else:
                row.append(_fmt(r.ort_ms, ".3f"))
        lines.append("| " + " | ".join(row) + " |")
    if errors:
        lines += ["", "Failures:", *errors]
    return "\n".join(lines)


def render_linearity(all_results: dict[str, dict[str, Result]], exporters: list[str]) -> str:
    depths = [(int(k.split("-")[1]), v) for k, v in all_results.items() if k.startswith("encoder-")]
    if len(depths) < 2:
        return ""
    depths.sort()
    lines = ["| exporter | " + " | ".join(f"s/layer {a}->{b}" for (a, _), (b, _) in
                                             zip(depths, depths[1:])) + " |"]
    lines.append("|" + "---|" * (len(depths)))
    for name in exporters:
        cells = []
        for (a, ra), (b, rb) in zip(depths, depths[1:]):
            sa, sb = ra[name].seconds, rb[name].seconds
            cells.append("-" if sa is None or sb is None else f"{(sb - sa) / (b - a):.4f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=[c.name for c in CASES],
                        choices=[c.name for c in CASES], metavar="MODEL",
                        help=f"models to run (default: all of {', '.join(c.name for c in CASES)})")
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=list(EXPORTERS))
    parser.add_argument("--repeat", type=int, default=20,
                        help="ONNX Runtime runs per model; the median is reported (default 20)")
    parser.add_argument("--export-repeat", type=int, default=5,
                        help="timed exports per exporter and model after the warm-up, at most; they "
                             "stop once they add up to 3 s; the median is reported (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1)")
    parser.add_argument("--no-memory", dest="memory", action="store_false",
                        help="skip the peak-memory pass")
    parser.add_argument("--no-save", dest="save", action="store_false", help="skip the save benchmark")
    parser.add_argument("--save-mb", type=int, default=200, help="weights of the save benchmark (MB)")
    parser.add_argument("--save-repeat", type=int, default=3, help="saves per method; median (default 3)")
    parser.add_argument("--save-dir", default=None, help="directory for the save benchmark (default: a temp dir)")
    parser.add_argument("--rss-child", nargs=2, metavar=("MODEL", "EXPORTER"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.rss_child:
        return _rss_child(*opts.rss_child)

    torch.manual_seed(0)
    print(f"# onnxport export benchmark\n\n- python {platform.python_version()}, torch {torch.__version__}, "
          f"onnxport {onnxport.__version__}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}, ORT threads {opts.threads}\n- export time: median of up to "
          f"{opts.export_repeat} (stopping after 3 s) after 1 warm-up; ORT latency: median of "
          f"{opts.repeat} runs\n",
          flush=True)
    all_results: dict[str, dict[str, Result]] = {}
    for case in CASES:
        if case.name not in opts.models:
            continue
        t0 = time.perf_counter()
        print(f"running {case.name} ...", file=sys.stderr, flush=True)
        all_results[case.name] = bench_case(case, opts.exporters, export_repeat=opts.export_repeat,
                                            repeat=opts.repeat, threads=opts.threads,
                                            memory=opts.memory)
        print(f"  done in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    print("## Export\n")
    print(render(all_results, opts.exporters, opts.memory))
    linearity = render_linearity(all_results, opts.exporters)
    if linearity:
        print("\n## Depth scaling (TransformerEncoder, seconds per added layer)\n")
        print(linearity)
    if opts.save:
        directory = opts.save_dir or tempfile.mkdtemp(prefix="onnxport_bench_")
        try:
            rows = bench_save(directory, opts.save_mb, opts.save_repeat)
        finally:
            if opts.save_dir is None:
                shutil.rmtree(directory, ignore_errors=True)
        print(f"\n## Save speed (median of {opts.save_repeat})\n")
        print("| method | seconds | MB/s |\n|---|---|---|")
        for label, seconds, mbs in rows:
            print(f"| {label} | {seconds:.3f} | {mbs:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
