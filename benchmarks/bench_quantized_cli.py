"""The CLI's fast forms in one run: `--target onnxruntime --quantize int4` against the ONNX
Runtime GenAI builder's `-p int4 -e cpu` on the same checkpoint, and Mixtral's fused MoE.

A random-weight Llama checkpoint (hidden 512, 4 layers, 8 heads / 4 key-value heads, vocab
32000, fp32; weights N(0, 0.05); a made-up word-level tokenizer, which the builder needs) is
saved with `save_pretrained`, then exported

* `onnxport int4`:   `onnxport export --model CKPT OUT --target onnxruntime --quantize int4`
                     (RTN int4 in blocks of 32, MatMulNBits at the ORT target's accuracy level);
* `builder int4`:    `python -m onnxruntime_genai.models.builder -i CKPT -o OUT -p int4 -e cpu`
                     (onnxruntime-genai 0.18 in its own venv on this environment's
                     transformers 5: the 0.18 builder needs classes 4.57 lacks);
* `onnxport int4 (onnx target)`: `... --quantize int4` (standard DequantizeLinear + MatMul);
* `onnxport int8`, `onnxport int8 (onnx target)`: `--quantize int8`, each target;
* `onnxport float`:  `onnxport export --model CKPT OUT --target onnxruntime`;
* `onnxport float (onnx target)`: `onnxport export --model CKPT OUT`.

Measured (ONNX Runtime CPU, 1 intra-op thread): greedy generation with each graph's
`model.onnx`, a prefill of `--prompt` tokens and `--new` decode steps feeding the present
keys/values back; rounds alternate the graphs in a rotating order; medians of the prefill
and of every decode step (wall and calling-thread CPU time). Logit error: each graph's
prefill logits (4 prompts of 64 tokens, empty cache) against float eager PyTorch on the same
ids: max and mean |diff|, top-1 agreement; with `eager RTN int4` (the eager model carrying
onnxport's RTN-dequantized weights) as the quantization's own share. onnxruntime-genai: both
int4 folders loaded by `og.Model`, each in its own process, and generating `--new` tokens (1
thread; ms per token after the first; the folders alternate within each round), and whether onnxport's genai tokens equal its own ORT greedy tokens.

Mixtral (MixtralConfig hidden 256, 4 layers, 8 heads / 4 kv heads, 8 experts, top 2,
intermediate 512, vocab 32000): `onnxport export --model` with the default target and with
`--target onnxruntime` (com.microsoft.MoE): decode per token and greedy tokens = eager's.

Timing holds /tmp/bench.lock (fcntl), as `flock /tmp/bench.lock` would; exports run outside it.

    python benchmarks/bench_quantized_cli.py --out benchmarks/results/quantized_cli_<date>.md
    python benchmarks/bench_quantized_cli.py --int8-forms --out FILE   # the weight forms only
    python benchmarks/bench_quantized_cli.py --int4-decode --repeat 41 [--ckpt DIR]
        [--folder NAME=DIR ...] --out FILE   # int4 decode against the builder only: the ORT
        # loop and genai, per-round ranges, logit errors against float eager (--folder adds
        # already-exported folders of the same checkpoint, e.g. an earlier commit's; named
        # "onnxport int4" or "builder int4", they replace that export)
    python benchmarks/bench_quantized_cli.py --pinned --repeat 200 --folder A=DIR
        --folder B=DIR ... [--core 1]   # the quick low-noise A/B: each folder's model.onnx
        # decoding in its own process pinned to one core (taskset), one process at a time,
        # rounds rotating; CPU time per step; ratios to the first folder, per-round ranges
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decode import Runner, node_counts, save_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LLAMA = dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
             bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
MIXTRAL = dict(vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=4, num_local_experts=8,
               num_experts_per_tok=2, max_position_embeddings=2048, bos_token_id=1,
               eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)

GENAI_WORKER = r'''
import json, sys, time
import numpy as np
import onnxruntime_genai as og
model = og.Model(sys.argv[1])
for line in sys.stdin:
    job = json.loads(line)
    prompt = np.array(job["prompt"], dtype=np.int32)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=prompt.shape[1] + job["new"],
                              min_length=prompt.shape[1] + job["new"])
    gen = og.Generator(model, params)
    gen.append_tokens(prompt)
    times, times_cpu = [], []
    while not gen.is_done():
        t, c = time.perf_counter(), time.thread_time()
        gen.generate_next_token()
        times.append(time.perf_counter() - t)
        times_cpu.append(time.thread_time() - c)
    print(json.dumps({"wall": times[1:], "cpu": times_cpu[1:],
                      "tokens": list(map(int, gen.get_sequence(0)))}), flush=True)
'''

PINNED_WORKER = r'''
import json, sys, time
import numpy as np
import onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
options.log_severity_level = 3
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
inputs = {i.name: i for i in session.get_inputs()}
outputs = [o.name for o in session.get_outputs()]
head_dim = int(sys.argv[2])
for line in sys.stdin:
    job = json.loads(line)
    prompt = np.array(job["prompt"], dtype=np.int64)
    batch = prompt.shape[0]
    past = {n: np.zeros((batch, m.shape[1], 0, m.shape[3] if isinstance(m.shape[3], int)
                         else head_dim), np.float32)
            for n, m in inputs.items() if n.startswith("past_key_values.")}
    tokens, step, cpu, wall = prompt, prompt, [], []
    for _ in range(job["new"]):
        total = tokens.shape[1]
        feed = {"input_ids": step, "attention_mask": np.ones((batch, total), np.int64), **past}
        if "position_ids" in inputs:
            feed["position_ids"] = np.arange(total - step.shape[1], total)[None].repeat(batch, 0)
        w, c = time.perf_counter(), time.thread_time()
        out = dict(zip(outputs, session.run(None, feed)))
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
        step = out["logits"][:, -1, :].argmax(-1).astype(np.int64)[:, None]
        tokens = np.concatenate([tokens, step], axis=1)
        past = {n: out[n.replace("past_key_values", "present")] for n in past}
    print(json.dumps({"cpu": cpu[1:], "wall": wall[1:], "tokens": tokens.tolist()}), flush=True)
'''


@contextlib.contextmanager
def bench_lock() -> Iterator[None]:
    """/tmp/bench.lock, the lock `flock /tmp/bench.lock CMD` takes: one timing at a time."""
    with open("/tmp/bench.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def client_python() -> Path:
    found = sorted((REPO / ".venv-clients").glob("*/bin/python"))
    if not found:
        raise SystemExit("no client venv: run tests/cli_tasks/test_clients.py once to build it")
    return found[0]


def make_llama(path: Path) -> Any:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()
    with torch.no_grad():  # a realistic scale (init std 0.02 is near-flat)
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.05)
    model.save_pretrained(path)
    save_tokenizer(path, LLAMA["vocab_size"])
    return model


def make_mixtral(path: Path) -> Any:
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**MIXTRAL)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.05)
    model.save_pretrained(path)
    return model


def cli(ckpt: Path, out: Path, *args: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "onnxport.cli", "export", "--model", str(ckpt),
                           str(out), *args], capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        raise RuntimeError(f"onnxport export {' '.join(args)} failed:\n{proc.stderr[-3000:]}"
                           f"\n{proc.stdout[-3000:]}")
    return time.perf_counter() - start


def builder_python() -> Path:
    """A venv with onnxruntime-genai 0.18 alone (no dependencies) in front of this
    environment's packages: the 0.18 builder imports transformers classes (Qwen3.5) that the
    client venv's transformers 4.57 lacks, and runs on this environment's transformers 5."""
    import site

    venv = REPO / ".venv-clients" / "genai-builder"
    python = venv / "bin" / "python"
    if not (venv / ".ready").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        inner = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                               check=True, capture_output=True, text=True).stdout.strip()
        Path(inner, "onnxport-bench-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                        "--disable-pip-version-check", "onnxruntime-genai==0.18.*"], check=True,
                       env={**os.environ, "PIP_CONSTRAINT": "/dev/null"})
        (venv / ".ready").write_text("ok")
    return python


def builder(ckpt: Path, out: Path, precision: str = "int4") -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    start = time.perf_counter()
    proc = subprocess.run([str(builder_python()), "-m", "onnxruntime_genai.models.builder", "-i",
                           str(ckpt), "-o", str(out), "-p", precision, "-e", "cpu", "-c",
                           str(out.parent / f"builder-cache-{precision}")], capture_output=True,
                          text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"the builder failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def ops_of(path: Path) -> collections.Counter[str]:
    model = onnx.load(str(path), load_external_data=False)
    return collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}"
                               for n in model.graph.node)


def matmulnbits_attrs(path: Path) -> str:
    model = onnx.load(str(path), load_external_data=False)
    seen = set()
    for n in model.graph.node:
        if n.op_type == "MatMulNBits":
            a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            seen.add((a.get("bits"), a.get("block_size"), a.get("accuracy_level", 0),
                      len(n.input) > 3 and bool(n.input[3])))
    return ", ".join(f"{b}-bit block {s} acc {lvl}" + (" zp" if zp else "")
                     for b, s, lvl, zp in sorted(seen))


def prefill_logits(path: Path, ids: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    b, s = ids.shape
    feeds: dict[str, np.ndarray] = {}
    for meta in session.get_inputs():
        if meta.name == "input_ids":
            feeds[meta.name] = ids
        elif meta.name == "attention_mask":
            feeds[meta.name] = np.ones((b, s), np.int64)
        elif meta.name == "position_ids":
            feeds[meta.name] = np.tile(np.arange(s), (b, 1))
        elif meta.name.startswith("past_key_values."):
            head = meta.shape[3] if isinstance(meta.shape[3], int) else 64
            feeds[meta.name] = np.zeros((b, meta.shape[1], 0, head), np.float32)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))["logits"]


def rtn_eager(model: Any, bits: int = 4, block: int = 32) -> Any:
    import copy

    from onnxport.quantize import dequantize_blocks, quantize_blocks

    twin = copy.deepcopy(model)
    for m in twin.modules():
        if isinstance(m, torch.nn.Linear):
            q, s, z = quantize_blocks(m.weight.detach().T.numpy(), bits=bits, block_size=block)
            m.weight = torch.nn.Parameter(torch.from_numpy(dequantize_blocks(q, s, z, block).T
                                                           .copy()))
    return twin


def time_decode(paths: dict[str, Path], prompt: np.ndarray, new: int, warmup: int,
                repeat: int) -> dict[str, dict[str, Any]]:
    runners = {name: Runner(p) for name, p in paths.items()}
    names = list(runners)
    res: dict[str, dict[str, Any]] = {n: {"prefill": [], "decode": [], "cpu": [], "tokens": None,
                                          "rounds": [], "rounds_cpu": []} for n in names}
    for r in range(warmup + repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            tokens, first, rest, rest_cpu = runners[name].generate(prompt, new)
            res[name]["tokens"] = tokens
            if r >= warmup:
                res[name]["prefill"].append(first)
                res[name]["decode"].extend(rest)
                res[name]["cpu"].extend(rest_cpu)
                res[name]["rounds"].append(statistics.median(rest))
                res[name]["rounds_cpu"].append(statistics.median(rest_cpu))
    return res


def pinned_decode(folders: dict[str, Path], prompt: np.ndarray, new: int, rounds: int,
                  core: int) -> dict[str, dict[str, Any]]:
    """Each folder's model.onnx in its own process pinned to CPU `core` (taskset), 1 intra-op
    thread; rounds alternate the folders in a rotating order (one process runs at a time);
    per step the calling thread's CPU time and the wall time."""
    head_dim = LLAMA["hidden_size"] // LLAMA["num_attention_heads"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    procs = {name: subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c",
                                     PINNED_WORKER, str(folder / "model.onnx"), str(head_dim)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    env=env) for name, folder in folders.items()}
    names = list(procs)
    res: dict[str, dict[str, Any]] = {n: {"cpu": [], "wall": [], "rounds": [], "rounds_cpu": [],
                                          "tokens": None} for n in names}
    job = json.dumps({"prompt": prompt.tolist(), "new": new}) + "\n"
    try:
        for r in range(rounds + 1):   # the first round warms up
            for name in names[r % len(names):] + names[:r % len(names)]:
                proc = procs[name]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(job)
                proc.stdin.flush()
                out = json.loads(proc.stdout.readline())
                res[name]["tokens"] = out["tokens"]
                if r:
                    res[name]["cpu"].extend(out["cpu"])
                    res[name]["wall"].extend(out["wall"])
                    res[name]["rounds_cpu"].append(statistics.median(out["cpu"]))
                    res[name]["rounds"].append(statistics.median(out["wall"]))
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    return res


def pinned_table(res: dict[str, dict[str, Any]], anchor: str) -> list[str]:
    """Markdown rows: median CPU / wall ms per step, the ratio to `anchor`, the median and range
    of the per-round ratios, the ratio of the 20th percentiles of all steps (the least
    disturbed steps), and whether greedy tokens equal the anchor's."""
    med = statistics.median
    rows = ["| graph | CPU ms/step | CPU ratio | per-round CPU ratio: median (range) | CPU "
            "p20 ratio | wall ms/step | wall ratio | tokens = anchor's |",
            "|---|---|---|---|---|---|---|---|"]
    a = res[anchor]
    for name, r in res.items():
        ratios = [x / y for x, y in zip(r["rounds_cpu"], a["rounds_cpu"])]
        p20 = float(np.percentile(r["cpu"], 20) / np.percentile(a["cpu"], 20))
        rows.append(f"| {name} | {med(r['cpu']) * 1e3:.4f} | {med(r['cpu']) / med(a['cpu']):.4f}"
                    f" | {med(ratios):.4f} ({min(ratios):.3f}-{max(ratios):.3f}) | {p20:.4f} | "
                    f"{med(r['wall']) * 1e3:.4f} | {med(r['wall']) / med(a['wall']):.4f} | "
                    f"{'yes' if r['tokens'] == a['tokens'] else 'no'} |")
    return rows


def spread(res: dict[str, dict[str, Any]], name: str, anchor: str, key: str = "rounds") -> str:
    """The range over rounds of the per-round median ratio `name` / `anchor` (same round)."""
    ratios = [a / b for a, b in zip(res[name][key], res[anchor][key])]
    return f"{min(ratios):.3f}-{max(ratios):.3f}"


def genai_run(folders: dict[str, Path], prompt: np.ndarray, new: int, rounds: int,
              tmp: Path) -> dict[str, Any]:
    """Each folder in onnxruntime-genai with 1 intra-op thread (its genai_config set so), each
    in its own process (one og.Model per process: loaded together in one process, identical
    folders differed by up to ~3% with their load order), one generation at a time, rounds
    rotating the order; the first round warms up."""
    for folder in folders.values():
        config = json.loads((folder / "genai_config.json").read_text())
        options = config["model"]["decoder"].setdefault("session_options", {})
        options["intra_op_num_threads"] = 1
        options["inter_op_num_threads"] = 1
        (folder / "genai_config.json").write_text(json.dumps(config, indent=2))
    (tmp / "genai_worker.py").write_text(GENAI_WORKER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    procs = {name: subprocess.Popen([str(client_python()), str(tmp / "genai_worker.py"),
                                     str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env)
             for name, folder in folders.items()}
    names = list(procs)
    out: dict[str, Any] = {n: {"tokens": None, "wall": [], "cpu": [], "rounds": [],
                               "rounds_cpu": []} for n in names}
    job = json.dumps({"prompt": prompt.tolist(), "new": new}) + "\n"
    try:
        for r in range(rounds + 1):
            for name in names[r % len(names):] + names[:r % len(names)]:
                proc = procs[name]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(job)
                proc.stdin.flush()
                line = proc.stdout.readline()
                if not line:
                    assert proc.stderr is not None
                    return {"error": f"{name}: {proc.stderr.read()[-2000:]}"}
                res = json.loads(line)
                out[name]["tokens"] = res["tokens"]
                if r:
                    out[name]["wall"].extend(res["wall"])
                    out[name]["cpu"].extend(res["cpu"])
                    out[name]["rounds"].append(float(np.median(res["wall"])))
                    out[name]["rounds_cpu"].append(float(np.median(res["cpu"])))
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    for r in out.values():
        r["step_ms"] = 1e3 * float(np.median(r.pop("wall")))
        r["cpu_ms"] = 1e3 * float(np.median(r.pop("cpu")))
    return out


def int8_forms(rounds: int = 15) -> str:
    """The forms an 8-bit (and a 4-bit) RTN weight can take, timed on 8 chained MatMuls
    (512 x 1536, 1536 x 512) at M = 1 (a decode step) and M = 64 (a prefill): what
    `--quantize int8` writes under each target is chosen from this."""
    import onnx_ir as ir

    from onnxport.passes.onnxruntime.matmul_nbits import FuseMatMulNBitsPass
    from onnxport.passes.onnxruntime.uint8_weights import Uint8WeightsPass
    from onnxport.quantize import quantize_weights

    k, n = 512, 1536

    def chain() -> ir.Model:
        rng = np.random.default_rng(0)
        x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["M", k]))
        nodes, inits, cur = [], [], x
        for i in range(4):
            for a, b in ((k, n), (n, k)):
                w = ir.Value(name=f"w{i}_{a}", type=ir.TensorType(ir.DataType.FLOAT),
                             shape=ir.Shape([a, b]), const_value=ir.tensor(
                                 (rng.standard_normal((a, b)) * 0.05).astype(np.float32),
                                 name=f"w{i}_{a}"))
                inits.append(w)
                node = ir.node("MatMul", [cur, w])
                node.outputs[0].dtype, node.outputs[0].shape = ir.DataType.FLOAT, ir.Shape(["M", b])
                nodes.append(node)
                cur = node.outputs[0]
        cur.name = "y"
        return ir.Model(ir.Graph([x], [cur], nodes=nodes, initializers=inits,
                                 opset_imports={"": 21}), ir_version=10)

    def variant(bits: int | None, block: int = 32, then: Any = None) -> ort.InferenceSession:
        model = chain()
        if bits:
            quantize_weights(model, bits=bits, block_size=block)
        if then is not None:
            then(model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(ir.serde.serialize_model(model).SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])

    forms = {
        "float MatMul": variant(None),
        "int8 blocked DequantizeLinear + MatMul (--quantize int8, default target)": variant(8),
        "int8 blocked, uint8 (Uint8WeightsPass: --quantize int8 --target onnxruntime)":
            variant(8, then=Uint8WeightsPass()),
        "int8 per channel DequantizeLinear + MatMul (--block-size 0)": variant(8, 0),
        "int8 MatMulNBits accuracy 0": variant(8, then=FuseMatMulNBitsPass(bits=(8,))),
        "int8 MatMulNBits accuracy 4 (the builder's -p int8)":
            variant(8, then=FuseMatMulNBitsPass(bits=(8,), accuracy_level=4)),
        "int4 blocked DequantizeLinear + MatMul (--quantize int4, default target)": variant(4),
        "int4 MatMulNBits accuracy 4 (--quantize int4 --target onnxruntime)":
            variant(4, then=FuseMatMulNBitsPass(bits=(4,), accuracy_level=4)),
        "int4 MatMulNBits accuracy 0 (--accuracy-level 0)":
            variant(4, then=FuseMatMulNBitsPass(bits=(4,), accuracy_level=0)),
        "int4 MatMulNBits accuracy 1": variant(4, then=FuseMatMulNBitsPass(bits=(4,),
                                                                          accuracy_level=1)),
        "int4 block 128 MatMulNBits accuracy 4 (--block-size 128)":
            variant(4, 128, then=FuseMatMulNBitsPass(bits=(4,), accuracy_level=4,
                                                    block_size=128)),
        "int4 block 128 MatMulNBits accuracy 0":
            variant(4, 128, then=FuseMatMulNBitsPass(bits=(4,), accuracy_level=0,
                                                    block_size=128)),
    }
    sizes = ((1, 20), (64, 5), (256, 2))
    times: dict[str, dict[int, list[float]]] = {f: {m: [] for m, _ in sizes} for f in forms}
    with bench_lock():
        for r in range(rounds):
            for name, session in forms.items():
                for m, reps in sizes:
                    x = np.random.default_rng(r).standard_normal((m, k)).astype(np.float32)
                    session.run(None, {"x": x})
                    start = time.thread_time()
                    for _ in range(reps):
                        session.run(None, {"x": x})
                    times[name][m].append((time.thread_time() - start) / reps)
    med = statistics.median
    base = {m: med(times["float MatMul"][m]) for m, _ in sizes}
    lines = [f"Weight forms, {datetime.date.today()}: 8 chained MatMuls ({k} x {n}, {n} x {k}), "
             f"ONNX Runtime {ort.__version__} CPU, 1 thread, median CPU time of the calling "
             f"thread over {rounds} rounds (forms alternating)", "",
             "| form | " + " | ".join(f"M={m} ms | vs float" for m, _ in sizes) + " |",
             "|---|" + "---|---|" * len(sizes)]
    for name in forms:
        lines.append(f"| {name} | " + " | ".join(
            f"{med(times[name][m]) * 1e3:.3f} | {med(times[name][m]) / base[m]:.2f}"
            for m, _ in sizes) + " |")
    return "\n".join(lines)


def logit_error_table(errors: dict[str, np.ndarray], eager: np.ndarray) -> list[str]:
    """Markdown rows: each graph's logit error against float eager, and its ratio to the
    builder's int4 graph's."""
    b_max = float(np.abs(errors["builder int4"] - eager).max())
    b_mean = float(np.abs(errors["builder int4"] - eager).mean())
    rows = ["| graph | max abs error | ratio to builder | mean abs error | ratio to builder | "
            "top-1 = eager |", "|---|---|---|---|---|---|"]
    for name, logits in errors.items():
        diff = np.abs(logits - eager)
        top1 = float(np.mean(logits.argmax(-1) == eager.argmax(-1)))
        rows.append(f"| {name} | {diff.max():.4f} | {diff.max() / b_max:.3f} | "
                    f"{diff.mean():.5f} | {diff.mean() / b_mean:.3f} | {100 * top1:.1f}% |")
    return rows


def int4_decode(ns: argparse.Namespace) -> str:
    """`onnxport int4` against `builder int4` (and `--folder` extras): decode per token in the
    ORT loop (wall and CPU time, per-round ranges) and in onnxruntime-genai, and the prefill
    logits' error against float eager."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if ns.ckpt:
            ckpt = Path(ns.ckpt)
            model = transformers.LlamaForCausalLM.from_pretrained(ckpt).eval()
        else:
            ckpt = tmp / "llama"
            model = make_llama(ckpt)
        given = dict(item.partition("=")[::2] for item in ns.folder or [])
        folders = {"onnxport int4": tmp / "op-int4", "builder int4": tmp / "builder-int4"}
        if "onnxport int4" not in given:
            cli(ckpt, folders["onnxport int4"], "--target", "onnxruntime", "--quantize", "int4")
        if "builder int4" not in given:
            builder(ckpt, folders["builder int4"])
        folders.update({name: Path(path) for name, path in given.items()})
        paths = {k: v / "model.onnx" for k, v in folders.items()}
        rng = np.random.default_rng(1)
        ids = rng.integers(3, LLAMA["vocab_size"], (4, 64)).astype(np.int64)
        with torch.no_grad():
            eager = model(torch.from_numpy(ids)).logits.numpy()
            errors = {"eager RTN int4": rtn_eager(model)(torch.from_numpy(ids)).logits.numpy()}
        errors.update({name: prefill_logits(p, ids) for name, p in paths.items()})
        torch.manual_seed(2)
        prompt = torch.randint(3, LLAMA["vocab_size"], (1, ns.prompt)).numpy()
        with bench_lock():
            res = time_decode(paths, prompt, ns.new, ns.warmup, ns.repeat)
            genai = genai_run(folders, prompt, ns.new, ns.repeat, tmp)
        counts = {name: node_counts(p) for name, p in paths.items()}
    med = statistics.median
    anchor, anchor_cpu = med(res["builder int4"]["decode"]), med(res["builder int4"]["cpu"])
    lines = [f"int4 decode against the builder, {datetime.date.today()}: ONNX Runtime "
             f"{ort.__version__} CPU, 1 intra-op thread, batch 1, prompt {ns.prompt}, "
             f"{ns.new - 1} decode steps, {ns.repeat} rounds (+{ns.warmup} warm-up), graphs "
             "alternating; per-round range: lowest and highest ratio of the rounds' medians.", "",
             "ORT loop (InferenceSession, present keys/values fed back):", "",
             "| graph | decode ms/token | ratio to builder | per-round range | decode CPU "
             "ms/token | CPU ratio | per-round CPU range | nodes (file / ORT-optimized) |",
             "|---|---|---|---|---|---|---|---|"]
    for name in paths:
        r = res[name]
        lines.append(f"| {name} | {med(r['decode']) * 1e3:.3f} | {med(r['decode']) / anchor:.3f}"
                     f" | {spread(res, name, 'builder int4')} | {med(r['cpu']) * 1e3:.3f} | "
                     f"{med(r['cpu']) / anchor_cpu:.3f} | "
                     f"{spread(res, name, 'builder int4', 'rounds_cpu')} | "
                     f"{counts[name][0]} / {counts[name][1]} |")
    lines += ["", "onnxruntime-genai 0.18 (og.Model per folder, each in its own process, 1 "
              "intra-op thread, greedy, median ms per token after the first over the rounds, "
              "wall and calling-thread CPU time):",
              ""]
    if "error" in genai:
        lines.append(f"genai FAILED: {genai['error']}")
    else:
        lines += ["| folder | ms/token | ratio to builder | per-round range | CPU ms/token | CPU "
                  "ratio | per-round CPU range | tokens = onnxport int4's ORT greedy |",
                  "|---|---|---|---|---|---|---|---|"]
        b = genai["builder int4"]
        for name, g in genai.items():
            same = g["tokens"] == res["onnxport int4"]["tokens"][0].tolist()
            lines.append(f"| {name} | {g['step_ms']:.3f} | {g['step_ms'] / b['step_ms']:.3f} | "
                         f"{spread(genai, name, 'builder int4')} | {g['cpu_ms']:.3f} | "
                         f"{g['cpu_ms'] / b['cpu_ms']:.3f} | "
                         f"{spread(genai, name, 'builder int4', 'rounds_cpu')} | "
                         f"{'yes' if same else 'no'} |")
    lines += ["", f"Prefill logits (4 x 64 random tokens) against float eager (std "
              f"{eager.std():.2f}):", "", *logit_error_table(errors, eager)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--int8-forms", action="store_true",
                        help="only time the 8-bit (and 4-bit) weight forms on a MatMul chain")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=33, help="generated tokens (1 prefill + decode)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mix-repeat", type=int, default=15, help="Mixtral's timed rounds")
    parser.add_argument("--out", type=str, default=None)
    parser.add_argument("--int4-decode", action="store_true",
                        help="only int4 decode against the builder (ORT loop and genai)")
    parser.add_argument("--ckpt", type=str, default=None, help="--int4-decode's checkpoint")
    parser.add_argument("--folder", action="append", help="--int4-decode: NAME=DIR, a folder "
                        "exported from the same checkpoint, timed too")
    parser.add_argument("--pinned", action="store_true", help="only --folder NAME=DIR ... "
                        "decoding, each in a process pinned to --core (the first is the anchor)")
    parser.add_argument("--core", type=int, default=1)
    ns = parser.parse_args()
    if ns.pinned:
        given = {k: Path(v) for k, v in (item.partition("=")[::2] for item in ns.folder)}
        torch.manual_seed(2)
        prompt = torch.randint(3, LLAMA["vocab_size"], (1, ns.prompt)).numpy()
        with bench_lock():
            res = pinned_decode(given, prompt, ns.new, ns.repeat, ns.core)
        text = "\n".join([f"pinned decode, core {ns.core}, prompt {ns.prompt}, {ns.new - 1} "
                          f"steps, {ns.repeat} rounds (+1 warm-up)", "",
                          *pinned_table(res, next(iter(given)))])
        print(text)
        if ns.out:
            Path(ns.out).write_text(text + "\n")
        return
    if ns.int4_decode:
        transformers.logging.set_verbosity_error()
        text = int4_decode(ns)
        print(text)
        if ns.out:
            Path(ns.out).write_text(text + "\n")
        return
    if ns.int8_forms:
        text = int8_forms()
        print(text)
        if ns.out:
            Path(ns.out).write_text(text + "\n")
        return
    transformers.logging.set_verbosity_error()
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = make_llama(tmp / "llama")
        seconds = {"onnxport int4": cli(tmp / "llama", tmp / "op-int4", "--target",
                                        "onnxruntime", "--quantize", "int4"),
                   "builder int4": builder(tmp / "llama", tmp / "builder-int4"),
                   "onnxport int4 (onnx target)": cli(tmp / "llama", tmp / "op-int4-onnx",
                                                      "--quantize", "int4"),
                   "onnxport int8": cli(tmp / "llama", tmp / "op-int8", "--target",
                                        "onnxruntime", "--quantize", "int8"),
                   "onnxport int8 (onnx target)": cli(tmp / "llama", tmp / "op-int8-onnx",
                                                      "--quantize", "int8"),
                   "onnxport float": cli(tmp / "llama", tmp / "op-float", "--target",
                                         "onnxruntime"),
                   "onnxport float (onnx target)": cli(tmp / "llama", tmp / "op-float-onnx"),
                   "builder fp32": builder(tmp / "llama", tmp / "builder-fp32", "fp32")}
        folders = {"onnxport int4": tmp / "op-int4", "builder int4": tmp / "builder-int4",
                   "onnxport int4 (onnx target)": tmp / "op-int4-onnx",
                   "onnxport int8": tmp / "op-int8",
                   "onnxport int8 (onnx target)": tmp / "op-int8-onnx",
                   "onnxport float": tmp / "op-float",
                   "onnxport float (onnx target)": tmp / "op-float-onnx",
                   "builder fp32": tmp / "builder-fp32"}
        paths = {k: v / "model.onnx" for k, v in folders.items()}
        print("exported the Llama graphs", file=sys.stderr)

        # logit error against float eager on the same ids
        rng = np.random.default_rng(1)
        ids = rng.integers(3, LLAMA["vocab_size"], (4, 64)).astype(np.int64)
        with torch.no_grad():
            eager = model(torch.from_numpy(ids)).logits.numpy()
            eager_rtn = rtn_eager(model)(torch.from_numpy(ids)).logits.numpy()
        errors = {name: prefill_logits(p, ids) for name, p in paths.items()}
        errors["eager RTN int4"] = eager_rtn
        with torch.no_grad():
            errors["eager RTN int8"] = rtn_eager(model, 8)(torch.from_numpy(ids)).logits.numpy()

        mix = make_mixtral(tmp / "mixtral")
        seconds["mixtral standard"] = cli(tmp / "mixtral", tmp / "mix-onnx")
        seconds["mixtral ort"] = cli(tmp / "mixtral", tmp / "mix-ort", "--target", "onnxruntime")
        mix_paths = {"mixtral standard": tmp / "mix-onnx" / "model.onnx",
                     "mixtral ort": tmp / "mix-ort" / "model.onnx"}
        print("exported the Mixtral graphs", file=sys.stderr)

        torch.manual_seed(2)
        prompt = torch.randint(3, LLAMA["vocab_size"], (1, ns.prompt))
        with torch.no_grad():
            mix_expected = mix.generate(prompt, attention_mask=torch.ones_like(prompt),
                                        do_sample=False, max_new_tokens=ns.new,
                                        eos_token_id=None, pad_token_id=0).numpy()
        with torch.no_grad():
            llama_expected = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                            do_sample=False, max_new_tokens=ns.new,
                                            eos_token_id=None, pad_token_id=0).numpy()
        with bench_lock():
            res = time_decode(paths, prompt.numpy(), ns.new, ns.warmup, ns.repeat)
            mix_res = time_decode(mix_paths, prompt.numpy(), ns.new, ns.warmup, ns.mix_repeat)
            genai = genai_run({"onnxport int4": folders["onnxport int4"],
                               "builder int4": folders["builder int4"]},
                              prompt.numpy(), ns.new, ns.repeat, tmp)
        counts = {name: node_counts(p) for name, p in {**paths, **mix_paths}.items()}
        ops = {name: ops_of(p) for name, p in {**paths, **mix_paths}.items()}
        nbits = {name: matmulnbits_attrs(p) for name, p in paths.items()}
        sizes = {name: sum(f.stat().st_size for f in folders[name].glob("model.onnx*"))
                 for name in folders}

    med = statistics.median
    anchor = med(res["builder int4"]["decode"])
    anchor_cpu = med(res["builder int4"]["cpu"])
    anchor_pre = med(res["builder int4"]["prefill"])
    head = (f"Quantized CLI benchmark, {datetime.date.today()}: Llama hidden "
            f"{LLAMA['hidden_size']}, {LLAMA['num_hidden_layers']} layers, "
            f"{LLAMA['num_attention_heads']} heads / {LLAMA['num_key_value_heads']} kv heads, "
            f"intermediate {LLAMA['intermediate_size']}, vocab {LLAMA['vocab_size']}, fp32 "
            f"checkpoint; batch 1, prompt {ns.prompt}, {ns.new - 1} decode steps; ONNX Runtime "
            f"{ort.__version__} CPU, 1 intra-op thread; {ns.repeat} rounds (+{ns.warmup} "
            f"warm-up), graphs alternating; torch {torch.__version__}, transformers "
            f"{transformers.__version__}; onnxruntime-genai 0.18.")
    lines += [head, "",
              "| graph | export s | model bytes | prefill ms | ratio | decode ms/token | ratio "
              "to builder | decode CPU ms/token | CPU ratio | nodes (file / ORT-optimized) | "
              "MatMulNBits |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in paths:
        r = res[name]
        d, c, p = med(r["decode"]), med(r["cpu"]), med(r["prefill"])
        lines.append(f"| {name} | {seconds[name]:.1f} | {sizes[name]:,} | {p * 1e3:.2f} | "
                     f"{p / anchor_pre:.3f} | {d * 1e3:.3f} | {d / anchor:.3f} | {c * 1e3:.3f} | "
                     f"{c / anchor_cpu:.3f} | {counts[name][0]} / {counts[name][1]} | "
                     f"{nbits[name] or '-'} |")
    fp32 = med(res["builder fp32"]["decode"])
    fp32_cpu = med(res["builder fp32"]["cpu"])
    lines += ["", f"fp32 decode against the builder's `-p fp32 -e cpu` graph (same rounds; "
              f"{ns.new - 1} decode steps a round; per-round range: the lowest and highest "
              f"ratio of the rounds' medians; tokens: all {ns.new} greedy tokens against eager "
              "`generate`):", "",
              "| graph | decode ms/token | ratio to builder fp32 | per-round range | decode CPU "
              "ms/token | CPU ratio | per-round CPU range | tokens = eager |",
              "|---|---|---|---|---|---|---|---|"]
    for name in ("onnxport float", "onnxport float (onnx target)", "builder fp32"):
        r = res[name]
        same = bool(np.array_equal(r["tokens"], llama_expected))
        lines.append(f"| {name} | {med(r['decode']) * 1e3:.3f} | {med(r['decode']) / fp32:.3f} | "
                     f"{spread(res, name, 'builder fp32')} | {med(r['cpu']) * 1e3:.3f} | "
                     f"{med(r['cpu']) / fp32_cpu:.3f} | "
                     f"{spread(res, name, 'builder fp32', 'rounds_cpu')} | "
                     f"{'yes' if same else 'NO'} |")
    lines += ["", f"int4 decode per-round range against the builder's int4: wall "
              f"{spread(res, 'onnxport int4', 'builder int4')}, CPU "
              f"{spread(res, 'onnxport int4', 'builder int4', 'rounds_cpu')}."]
    lines += ["", "Prefill logits (4 x 64 random tokens, empty cache) against float eager "
              "PyTorch (logits' std " f"{eager.std():.2f}):", "",
              *logit_error_table(errors, eager)]
    lines += ["", "onnxruntime-genai 0.18 (og.Model on each folder, 1 intra-op thread, greedy, "
              f"{ns.new} new tokens, median ms per token after the first over {ns.repeat} "
              "runs):", ""]
    if "error" in genai:
        lines.append(f"genai FAILED: {genai['error']}")
    else:
        lines += ["| folder | ms/token | ratio to builder | tokens = onnxport's ORT greedy |",
                  "|---|---|---|---|"]
        for name, g in genai.items():
            same = g["tokens"] == res["onnxport int4"]["tokens"][0].tolist()
            lines.append(f"| {name} | {g['step_ms']:.3f} | "
                         f"{g['step_ms'] / genai['builder int4']['step_ms']:.3f} | "
                         f"{'yes' if same else 'no'} |")
    lines += ["", f"Mixtral (hidden {MIXTRAL['hidden_size']}, {MIXTRAL['num_hidden_layers']} "
              f"layers, {MIXTRAL['num_local_experts']} experts top {MIXTRAL['num_experts_per_tok']}"
              f", intermediate {MIXTRAL['intermediate_size']}, vocab {MIXTRAL['vocab_size']}), "
              "same prompt and steps, "
              f"{ns.mix_repeat} rounds (+{ns.warmup} warm-up):", "",
              "| graph | export s | prefill ms | decode ms/token | ratio to standard | "
              "per-round range | decode CPU ms/token | CPU ratio | per-round CPU range | "
              "com.microsoft ops | tokens = eager |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    mix_anchor_cpu = med(mix_res["mixtral standard"]["cpu"])
    mix_anchor = med(mix_res["mixtral standard"]["decode"])
    for name in mix_paths:
        r = mix_res[name]
        contrib = ", ".join(f"{k.split('.')[-1]} {v}" for k, v in sorted(ops[name].items())
                            if k.startswith("com.microsoft")) or "-"
        same = bool(np.array_equal(r["tokens"], mix_expected))
        lines.append(f"| {name} | {seconds[name]:.1f} | {med(r['prefill']) * 1e3:.2f} | "
                     f"{med(r['decode']) * 1e3:.3f} | {med(r['decode']) / mix_anchor:.3f} | "
                     f"{spread(mix_res, name, 'mixtral standard')} | "
                     f"{med(r['cpu']) * 1e3:.3f} | {med(r['cpu']) / mix_anchor_cpu:.3f} | "
                     f"{spread(mix_res, name, 'mixtral standard', 'rounds_cpu')} | "
                     f"{contrib} | {'yes' if same else 'NO'} |")
    text = "\n".join(lines)
    print(text)
    if ns.out:
        Path(ns.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
