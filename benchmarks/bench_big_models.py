"""Big models on a small machine: fake-mode export, weights streamed from safetensors.

    python benchmarks/bench_big_models.py --dir /work/bigbench            # 1.1B + 7B/70B fake
    python benchmarks/bench_big_models.py --dir /work/bigbench --seven-b  # + 7B bf16 checkpoint
    python benchmarks/bench_big_models.py --dir /work/bigbench --only fake  # quick

Every measurement runs in a child process of its own; peak RSS is the child's
`resource.getrusage(RUSAGE_SELF).ru_maxrss` (resident pages, including pages of memory-mapped
files it touched). Steps:

* `checkpoint`: a ~1.1 B-parameter Llama (TinyLlama's shape, float32, 4.4 GB) built on the meta
  device, its random weights written as safetensors shards of 2 GB with an HF index (weights
  filled from one random block, scaled 0.02: the values do not matter, only their bytes).
* `onnxport-fake`: `enable_fake_mode()` export, `apply_weights(folder, module=model)`,
  `save(external_data=True)`: export seconds, apply seconds, save seconds, peak RSS,
  write throughput.
* `dd`: in the same child, right before and right after each onnxport save: `dd if=/dev/zero
  bs=64M` of the same number of bytes into a fresh file on the same disk, with
  `conv=fdatasync` (flushed to disk, as onnxport's save is) and without (into the page cache),
  after an `os.sync()` (as each save is); the save's ratio to each is reported. The disk is
  shared and its speed varies from minute to minute, hence the bracket; it is also slow for
  the first gigabytes written after a pause, so one unreported `dd` warms it up first.
* `onnxport-real` / `torch.onnx-real`: the model loaded with `from_pretrained` (4.4 GB; with
  transformers 5 its parameters are views of the memory-mapped checkpoint, which the save
  reads: the share of the checkpoint in the page cache before the save is reported), exported
  and saved with external data (the one-call route), by onnxport and by torch.onnx
  (`dynamo=True`).
* `eager` / `ort`: logits of the eager model, and ONNX Runtime's load + run of onnxport's
  model (max abs difference).
* `fake-7b`, `fake-70b`: fake-mode exports of 7B- and 70B-shaped Llama configs (no weights).
* `--seven-b`: a 7B bf16 checkpoint in shards (~13.5 GB) through the API (meta-device build,
  export, streamed apply_weights + save), then ORT load; files removed afterwards.
* `cli-7b` (with `--seven-b`; `--cli-only` skips the API run): the same checkpoint through the
  command line, `onnxport export --model DIR --task text-generation-with-past --dtype float16
  OUT`, which chooses the streamed route on its own; seconds, peak RSS of the CLI's process
  tree (sampled every 0.2 s, and the process's own `ru_maxrss` from `wait4`), bytes written,
  what the CLI checked; then ORT session creation on the folder's model.onnx.
* `cli-1.1b` (with `--cli`): the 1.1 B float32 checkpoint through the CLI with
  `--stream-weights` (validation included: it fits in memory) and without (in memory).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIGS: dict[str, dict[str, Any]] = {
    "1.1b": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                 num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048),
    "7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096),
    "70b": dict(vocab_size=32000, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=4096),
}
SEQ = 16


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _config(name: str, dtype: str = "float32") -> Any:
    from transformers import LlamaConfig

    config = LlamaConfig(**CONFIGS[name])
    config.torch_dtype = dtype
    return config


def _ids() -> Any:
    import torch

    return torch.arange(SEQ).reshape(1, SEQ) % 1000 + 7


def dd(path: str, nbytes: int, sync: bool = True) -> dict[str, Any]:
    """`dd` of `nbytes` zeros into the fresh file `path` (removed after), with `conv=fdatasync`
    or without, after an `os.sync()` so that earlier writes do not slow it."""
    block = 64 * 1024**2
    count = math.ceil(nbytes / block)
    os.sync()
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", f"bs={block}", f"count={count}",
                    *(["conv=fdatasync"] if sync else [])], check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    os.remove(path)
    os.sync()
    return {"seconds": seconds, "bytes": count * block, "MBps": count * block / 1e6 / seconds}


def dd_both(folder: str, nbytes: int) -> dict[str, Any]:
    """`dd` with and without `conv=fdatasync`, same bytes, into `folder`."""
    path = os.path.join(folder, "dd.bin")
    return {"fdatasync": dd(path, nbytes, True), "no_sync": dd(path, nbytes, False)}


def cached_share(folder: str) -> float | None:
    """The share of the checkpoint's files in the page cache (`fincore`), None if unknown."""
    files = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors")]
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-o", "RES,SIZE", *files], check=True,
                             capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    cached, size = sum(map(int, out[0::2])), sum(map(int, out[1::2]))
    return cached / size if size else None


def timed_save(program: Any, out: str, folder: str, **options: Any) -> dict[str, Any]:
    """`program.save(out, external_data=True, **options)` bracketed by `dd` runs of the same
    bytes on the same disk: seconds, MB/s, and the ratios to `dd`."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    nbytes = sum(v.const_value.nbytes for v in program.model.graph.initializers.values()
                 if v.const_value is not None)
    # The shared disk writes the first gigabytes after a pause 2-3x slower than the next ones
    # (measured: 147, 225, 361, 343 MB/s for four dd runs in a row): one run warms it up.
    warmup = dd(os.path.join(os.path.dirname(out), "dd.bin"), nbytes, True)
    before = dd_both(os.path.dirname(out), nbytes)
    cached = cached_share(folder)
    os.sync()
    t0 = time.perf_counter()
    program.save(out, external_data=True, **options)
    seconds = time.perf_counter() - t0
    after = dd_both(os.path.dirname(out), nbytes)
    data = _data_bytes(out)
    mbps = data / 1e6 / seconds
    result: dict[str, Any] = {"save_s": seconds, "data_bytes": data, "write_MBps": mbps,
                              "dd_warmup": warmup, "dd_before": before, "dd_after": after,
                              "checkpoint_cached": cached}
    for kind in ("fdatasync", "no_sync"):
        result[f"ratio_{kind}"] = [mbps / before[kind]["MBps"], mbps / after[kind]["MBps"]]
    return result


# -- child steps ---------------------------------------------------------------------------------

def step_checkpoint(folder: str, size: str, dtype: str) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    torch_dtype = getattr(torch, dtype)
    config = _config(size, dtype)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    os.makedirs(folder, exist_ok=True)
    config.save_pretrained(folder)
    gen = torch.Generator().manual_seed(0)
    block = (torch.randn(1 << 24, generator=gen) * 0.02).to(torch_dtype)
    shard_bytes = 2 * 1024**3
    shards: list[dict[str, Any]] = [{}]
    size_now = 0
    total = 0
    params = 0
    weight_map: dict[str, str] = {}
    names = [(n, p) for n, p in model.state_dict().items()]
    plan: list[list[tuple[str, Any]]] = [[]]
    for name, p in names:
        nbytes = p.numel() * block.element_size()
        if size_now and size_now + nbytes > shard_bytes:
            plan.append([])
            size_now = 0
        plan[-1].append((name, p))
        size_now += nbytes
    start = time.perf_counter()
    for i, entries in enumerate(plan):
        file = f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors"
        tensors = {}
        for name, p in entries:
            n = p.numel()
            offset = int(torch.randint(0, 1 << 20, (1,), generator=gen))
            reps = math.ceil((n + offset) / block.numel())
            flat = block.repeat(reps)[offset:offset + n] if reps > 1 else block[offset:offset + n]
            if "norm" in name:
                flat = torch.ones(n, dtype=torch_dtype)
            tensors[name] = flat.clone().reshape(p.shape)
            weight_map[name] = file
            total += n * block.element_size()  # the meta model is float32; the file is not
            params += n
        save_file(tensors, os.path.join(folder, file), metadata={"format": "pt"})
        del tensors
        shards.append({})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh)
    return {"seconds": time.perf_counter() - start, "bytes": total, "params": params,
            "shards": len(plan)}


def _data_bytes(path: str) -> int:
    folder = os.path.dirname(path)
    base = os.path.basename(path)
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
               if f.startswith(base) and f.endswith(".data"))


def step_onnxport_fake(folder: str, out: str, size: str, meta: bool, dtype: str,
                       shard: int | None) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM

    import onnxport
    from onnxport.weights import verify_external_data

    config = _config(size, dtype)
    t0 = time.perf_counter()
    if meta:
        with torch.device("meta"):
            model = LlamaForCausalLM(config).to(getattr(torch, dtype))
        ids = _ids()
    else:
        with onnxport.enable_fake_mode():
            model = LlamaForCausalLM(config)
            ids = _ids()
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    program = onnxport.export(model, (ids,), kwargs={"use_cache": False})
    export = time.perf_counter() - t0
    rss_export = _peak_rss_mb()
    t0 = time.perf_counter()
    program.apply_weights(folder, module=model, dtype="auto")
    apply = time.perf_counter() - t0
    saved = timed_save(program, out, folder, external_data_max_shard_bytes=shard)
    save = saved["save_s"]
    result = {"build_s": build, "export_s": export, "apply_s": apply, **saved,
              "total_s": build + export + apply + save, "peak_rss_MB": _peak_rss_mb(),
              "export_peak_rss_MB": rss_export}
    t0 = time.perf_counter()
    result["verify_problems"] = verify_external_data(out)
    result["verify_s"] = time.perf_counter() - t0
    return result


def step_fake_only(size: str, meta: bool) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM

    import onnxport

    config = _config(size)
    t0 = time.perf_counter()
    if meta:
        with torch.device("meta"):
            model = LlamaForCausalLM(config)
        ids = _ids()
    else:
        with onnxport.enable_fake_mode():
            model = LlamaForCausalLM(config)
            ids = _ids()
    program = onnxport.export(model, (ids,), kwargs={"use_cache": False})
    seconds = time.perf_counter() - t0
    params = sum(math.prod(v.shape) for v in program.model.graph.initializers.values()
                 if v.shape is not None)
    return {"seconds": seconds, "peak_rss_MB": _peak_rss_mb(), "params": params,
            "nodes": sum(1 for _ in program.model.graph)}


def step_real(folder: str, out: str, exporter: str) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM

    t0 = time.perf_counter()
    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    load = time.perf_counter() - t0
    rss_model = _peak_rss_mb()
    ids = _ids()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    t0 = time.perf_counter()
    if exporter == "onnxport":
        import onnxport

        program = onnxport.export(model, (ids,), kwargs={"use_cache": False}, dynamo=True)
        export = time.perf_counter() - t0
        saved = timed_save(program, out, folder)
    else:
        program = torch.onnx.export(model, (ids,), kwargs={"use_cache": False}, dynamo=True)
        export = time.perf_counter() - t0
        t1 = time.perf_counter()
        program.save(out, external_data=True)
        saved = {"save_s": time.perf_counter() - t1, "data_bytes": _data_bytes(out)}
        saved["write_MBps"] = saved["data_bytes"] / 1e6 / saved["save_s"]
    return {"load_s": load, "export_s": export, **saved, "total_s": export + saved["save_s"],
            "model_rss_MB": rss_model, "peak_rss_MB": _peak_rss_mb()}


def step_eager(folder: str, logits_path: str) -> dict[str, Any]:
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(_ids(), use_cache=False).logits.float().numpy()
    np.save(logits_path, logits)
    return {"peak_rss_MB": _peak_rss_mb()}


def step_ort(path: str, logits_path: str | None, load_only: bool = False) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort

    t0 = time.perf_counter()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if load_only:
        # The CPU provider has no float16 Gemm: with optimizations on it folds a float32 copy
        # of every weight at load (docs/benchmarks.md); off, the data stays memory-mapped.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    load = time.perf_counter() - t0
    result: dict[str, Any] = {"load_s": load}
    if load_only:
        result["peak_rss_MB"] = _peak_rss_mb()
        result["note"] = "ORT_DISABLE_ALL, session creation only (no run)"
        return result
    name = session.get_inputs()[0].name
    t0 = time.perf_counter()
    try:
        out = session.run(None, {name: _ids().numpy()})[0]
        result["run_s"] = time.perf_counter() - t0
        if logits_path:
            expected = np.load(logits_path)
            result["max_abs_diff"] = float(np.abs(out.astype(np.float32) - expected).max())
    except Exception as e:  # noqa: BLE001 - reported
        result["run_error"] = str(e).splitlines()[0][:200]
    result["peak_rss_MB"] = _peak_rss_mb()
    return result


STEPS = {
    "checkpoint": lambda a: step_checkpoint(a.folder, a.size, a.dtype),
    "onnxport-fake": lambda a: step_onnxport_fake(a.folder, a.out, a.size, a.meta, a.dtype, a.shard),
    "fake-only": lambda a: step_fake_only(a.size, a.meta),
    "real": lambda a: step_real(a.folder, a.out, a.exporter),
    "eager": lambda a: step_eager(a.folder, a.logits),
    "ort": lambda a: step_ort(a.out, a.logits),
    "ort-load": lambda a: step_ort(a.out, None, load_only=True),
}


def child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("step")
    parser.add_argument("--folder")
    parser.add_argument("--out")
    parser.add_argument("--size", default="1.1b")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--meta", action="store_true")
    parser.add_argument("--shard", type=int, default=None)
    parser.add_argument("--exporter", default="onnxport")
    parser.add_argument("--logits")
    args = parser.parse_args(argv)
    result = STEPS[args.step](args)
    print("RESULT " + json.dumps(result))


# -- parent --------------------------------------------------------------------------------------

def _available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def run_child(*args: str, timeout: float = 3600, guard_mb: float | None = None) -> dict[str, Any]:
    """Run one step in a child; with `guard_mb`, kill it if the machine's available memory
    falls below that (the machine is shared)."""
    command = [sys.executable, os.path.abspath(__file__), "--child", *args]
    print("$", " ".join(args), flush=True)
    t0 = time.perf_counter()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        killed = False
        if guard_mb is not None:
            while child.poll() is None:
                if _available_mb() < guard_mb:
                    child.kill()
                    killed = True
                    break
                time.sleep(0.2)
        stdout, stderr = child.communicate(timeout=timeout)
    if killed:
        print(f"   killed: available memory fell below {guard_mb} MB", flush=True)
        return {"error": f"killed: the machine's available memory fell below {guard_mb} MB",
                "wall_s": time.perf_counter() - t0}
    proc = subprocess.CompletedProcess(command, child.returncode, stdout, stderr)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            result["wall_s"] = time.perf_counter() - t0
            print("  ", result, flush=True)
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    print("   failed:", tail, flush=True)
    return {"error": " | ".join(tail)[-300:], "wall_s": time.perf_counter() - t0}


def _tree_rss_bytes(root: int) -> int:
    """Resident bytes of process `root` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # field 24: rss in pages
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def run_cli(folder: str, out: str, *options: str, guard_mb: float | None = None,
            timeout: float = 7200) -> dict[str, Any]:
    """`onnxport export --model folder OPTIONS out` as a user runs it: seconds, peak RSS of its
    process tree, bytes written, the CLI's own account of the route and checks."""
    import re
    import tempfile

    command = [sys.executable, "-m", "onnxport.cli", "export", "--model", folder, *options,
               "--overwrite", out]
    print("$ onnxport export --model", folder, *options, out, flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        child = subprocess.Popen(command, stdout=so, stderr=se, text=True)
        peak_tree, killed, status, usage = 0, False, 0, None
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            peak_tree = max(peak_tree, _tree_rss_bytes(child.pid))
            if guard_mb is not None and _available_mb() < guard_mb and not killed:
                child.kill()
                killed = True
            if time.perf_counter() - t0 > timeout and not killed:
                child.kill()
                killed = True
            time.sleep(0.2)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    result: dict[str, Any] = {"wall_s": wall, "exit": child.returncode,
                              "peak_tree_rss_MB": peak_tree / 1024**2,
                              "ru_maxrss_MB": usage.ru_maxrss / 1024 if usage else None}
    if killed:
        result["error"] = f"killed (memory guard {guard_mb} MB or timeout)"
    if os.path.isdir(out):
        files = sorted(os.listdir(out))
        result["files"] = files
        result["data_bytes"] = sum(os.path.getsize(os.path.join(out, f)) for f in files)
    for line in stdout.splitlines():
        if line.startswith("exported "):
            result["seconds"] = {k: float(v) for k, v in
                                 re.findall(r"(\w+) ([\d.]+)s(?=[,)])", line.rsplit("(", 1)[1])}
        elif line.startswith(("checked: ", "not validated: ", "validated: ")):
            result[line.split(":")[0].replace(" ", "_")] = line.split(": ", 1)[1]
    result["route"] = next((line.split("route: ", 1)[1] for line in stderr.splitlines()
                            if "route: " in line), None)
    result["saved"] = [line.split("] ", 1)[-1] for line in stderr.splitlines() if "saved " in line]
    if child.returncode != 0 and "error" not in result:
        result["error"] = " | ".join(stderr.strip().splitlines()[-3:])[-400:]
    print("  ", {k: v for k, v in result.items() if k != "files"}, flush=True)
    return result


def _f(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, help="work folder (needs ~25 GB; ~40 with --seven-b)")
    parser.add_argument("--only", choices=["fake", "1.1b", "all", "none"], default="all",
                        help="which parts to run (none: only --seven-b)")
    parser.add_argument("--seven-b", action="store_true", help="also the 7B bf16 checkpoint run")
    parser.add_argument("--no-torch-onnx", action="store_true")
    parser.add_argument("--no-ort", action="store_true",
                        help="skip the eager and ONNX Runtime runs of the 1.1B (saves only)")
    parser.add_argument("--keep", action="store_true", help="keep the files written")
    parser.add_argument("--suffix", default="", help="results file: big_models_<date><suffix>.md")
    parser.add_argument("--cli", action="store_true",
                        help="also the 1.1B checkpoint through the CLI (streamed and in memory)")
    parser.add_argument("--cli-only", action="store_true",
                        help="with --seven-b: only the CLI run of the 7B (not the API run)")
    opts = parser.parse_args(argv)
    os.makedirs(opts.dir, exist_ok=True)
    results: dict[str, Any] = {"date": datetime.date.today().isoformat()}
    folder = os.path.join(opts.dir, "ckpt-1.1b")
    logits = os.path.join(opts.dir, "eager_logits.npy")
    if opts.only in ("all", "1.1b"):
        if not os.path.isfile(os.path.join(folder, "model.safetensors.index.json")):
            results["checkpoint"] = run_child("checkpoint", "--folder", folder, "--size", "1.1b")
        out = os.path.join(opts.dir, "onnxport-fake", "model.onnx")
        results["onnxport-fake"] = run_child("onnxport-fake", "--folder", folder, "--out", out)
        if not opts.no_ort:
            results["eager"] = run_child("eager", "--folder", folder, "--logits", logits)
            results["ort-fake"] = run_child("ort", "--out", out, "--logits", logits)
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        out = os.path.join(opts.dir, "onnxport-real", "model.onnx")
        results["onnxport-real"] = run_child("real", "--folder", folder, "--out", out,
                                             "--exporter", "onnxport")
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        if opts.cli:
            out = os.path.join(opts.dir, "cli-1.1b")
            results["cli-1.1b-streamed"] = run_cli(folder, out, "--task",
                                                   "text-generation-with-past",
                                                   "--stream-weights", guard_mb=2500)
            shutil.rmtree(out, ignore_errors=True)
            results["cli-1.1b-in-memory"] = run_cli(folder, out, "--task",
                                                    "text-generation-with-past",
                                                    "--no-stream-weights", guard_mb=2500)
            shutil.rmtree(out, ignore_errors=True)
        if not opts.no_torch_onnx:
            out = os.path.join(opts.dir, "torch-onnx", "model.onnx")
            results["torch.onnx-real"] = run_child("real", "--folder", folder, "--out", out,
                                                   "--exporter", "torch.onnx")
            if "error" not in results["torch.onnx-real"]:
                results["ort-torch.onnx"] = run_child("ort", "--out", out, "--logits", logits)
            shutil.rmtree(os.path.dirname(out), ignore_errors=True)
    if opts.only in ("all", "fake"):
        for size in ("7b", "70b"):
            results[f"fake-{size}"] = run_child("fake-only", "--size", size)
        results["meta-7b"] = run_child("fake-only", "--size", "7b", "--meta")
    if opts.seven_b:
        folder7 = os.path.join(opts.dir, "ckpt-7b-bf16")
        if not os.path.isfile(os.path.join(folder7, "model.safetensors.index.json")):
            results["checkpoint-7b"] = run_child("checkpoint", "--folder", folder7, "--size", "7b",
                                                 "--dtype", "bfloat16")
        out = os.path.join(opts.dir, "onnxport-7b", "model.onnx")
        # ONNX Runtime's CPU provider has no bfloat16 MatMul: the model is built in float16
        # and the bfloat16 weights are converted as they are streamed (dtype="auto").
        if not opts.cli_only:
            results["onnxport-7b"] = run_child("onnxport-fake", "--folder", folder7, "--out",
                                               out, "--size", "7b", "--dtype", "float16",
                                               "--meta", "--shard", str(4 * 1024**3))
            results["ort-7b-load"] = run_child("ort-load", "--out", out, guard_mb=2500)
            results["ort-7b"] = run_child("ort", "--out", out, guard_mb=2500)
            shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        # The command line, as a user runs it: the route is chosen by the CLI (streamed: the
        # model and a session cannot both be in memory), float16 for the same reason as above.
        out = os.path.join(opts.dir, "cli-7b")
        results["cli-7b"] = run_cli(folder7, out, "--task", "text-generation-with-past",
                                    "--dtype", "float16", guard_mb=2500)
        if os.path.isfile(os.path.join(out, "model.onnx")):
            results["cli-7b-ort-load"] = run_child("ort-load", "--out",
                                                   os.path.join(out, "model.onnx"),
                                                   guard_mb=2500)
        shutil.rmtree(out, ignore_errors=True)
        if not opts.keep:
            shutil.rmtree(folder7, ignore_errors=True)
    if not opts.keep:
        shutil.rmtree(folder, ignore_errors=True)
        with_logits = os.path.exists(logits)
        if with_logits:
            os.remove(logits)
    table = render(results)
    print(table)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", f"big_models_{results['date']}{opts.suffix}.md")
    with open(path, "w") as fh:
        fh.write(f"# Big models ({results['date']})\n\n`python benchmarks/bench_big_models.py "
                 f"{' '.join(argv)}`\n\n{table}\n\n```json\n{json.dumps(results, indent=1)}\n```\n")
    print("written", path)
    return 0


def render(r: dict[str, Any]) -> str:
    lines = ["| run | seconds | peak RSS MB | data GB | write MB/s | notes |",
             "|---|---|---|---|---|---|"]

    def row(name: str, key: str, seconds_key: str = "total_s", note: str = "") -> None:
        x = r.get(key)
        if x is None:
            return
        if "error" in x:
            lines.append(f"| {name} | - | - | - | - | failed: {x['error'][:150]} |")
            return
        gb = x.get("data_bytes")
        lines.append(f"| {name} | {_f(x.get(seconds_key), '.1f')} | {_f(x.get('peak_rss_MB'), '.0f')} | "
                     f"{_f(gb / 1e9 if gb else None, '.2f')} | {_f(x.get('write_MBps'), '.0f')} | {note} |")

    c = r.get("checkpoint", {})
    if c and "error" not in c:
        lines.append(f"| checkpoint 1.1B f32 written (safetensors shards) | {_f(c['seconds'])} | - | "
                     f"{c['bytes'] / 1e9:.2f} | {c['bytes'] / 1e6 / c['seconds']:.0f} | "
                     f"{c['params'] / 1e9:.3f} B params, {c['shards']} shards |")
    x = r.get("onnxport-fake", {})
    if x and "error" not in x:
        row("onnxport 1.1B: fake export + apply_weights(folder) + save", "onnxport-fake",
            note=f"export {x['export_s']:.1f} s (peak {x['export_peak_rss_MB']:.0f} MB), apply "
                 f"{x['apply_s']:.2f} s, save {x['save_s']:.1f} s; CRC verify {x['verify_s']:.1f} s "
                 f"{'ok' if not x['verify_problems'] else x['verify_problems']}")
    else:
        row("onnxport 1.1B fake", "onnxport-fake")
    for key, name in (("onnxport-real", "onnxport 1.1B: from_pretrained + export + save"),
                      ("torch.onnx-real", "torch.onnx 1.1B (dynamo=True): from_pretrained + export + save")):
        y = r.get(key)
        if y and "error" not in y:
            row(name, key, note=f"model alone {y['model_rss_MB']:.0f} MB RSS; export {y['export_s']:.1f} s, "
                                f"save {y['save_s']:.1f} s (load {y['load_s']:.1f} s not counted)")
        else:
            row(name, key)
    for key, name in (("ort-fake", "ORT load + run, onnxport 1.1B (fake route)"),
                      ("ort-torch.onnx", "ORT load + run, torch.onnx 1.1B"),
                      ("ort-7b-load", "ORT session creation only (ORT_DISABLE_ALL), onnxport 7B float16"),
                      ("ort-7b", "ORT load + run, onnxport 7B (float16 from the bf16 checkpoint)")):
        y = r.get(key)
        if y and "error" not in y:
            note = f"load {y['load_s']:.1f} s"
            if "run_s" in y:
                note += f", run {y['run_s']:.2f} s"
            if "max_abs_diff" in y:
                note += f", max |ORT - eager| = {y['max_abs_diff']:.2e}"
            if "run_error" in y:
                note += f", run failed: {y['run_error'][:120]}"
            lines.append(f"| {name} | {y['wall_s']:.1f} | {y['peak_rss_MB']:.0f} | - | - | {note} |")
        elif y:
            row(name, key)
    for key, name in (("fake-7b", "onnxport 7B-shaped, enable_fake_mode export"),
                      ("fake-70b", "onnxport 70B-shaped, enable_fake_mode export"),
                      ("meta-7b", "onnxport 7B-shaped, meta-device export")):
        y = r.get(key)
        if y and "error" not in y:
            lines.append(f"| {name} | {y['seconds']:.1f} | {y['peak_rss_MB']:.0f} | - | - | "
                         f"{y['params'] / 1e9:.2f} B params, {y['nodes']} nodes |")
        elif y:
            row(name, key)
    c = r.get("checkpoint-7b", {})
    if c and "error" not in c:
        lines.append(f"| checkpoint 7B bf16 written | {_f(c['seconds'])} | - | {c['bytes'] / 1e9:.2f} | "
                     f"{c['bytes'] / 1e6 / c['seconds']:.0f} | {c['shards']} shards |")
    y = r.get("onnxport-7b")
    if y and "error" not in y:
        row("onnxport 7B: meta export (float16) + apply_weights(bf16 folder, dtype='auto') + save (4 GB shards)", "onnxport-7b",
            note=f"export {y['export_s']:.1f} s, apply {y['apply_s']:.2f} s, save {y['save_s']:.1f} s; "
                 f"CRC {'ok' if not y['verify_problems'] else y['verify_problems']}")
    elif y:
        row("onnxport 7B bf16", "onnxport-7b")
    for key, name in (("cli-1.1b-streamed", "CLI 1.1B f32, text-generation-with-past, --stream-weights"),
                      ("cli-1.1b-in-memory", "CLI 1.1B f32, text-generation-with-past, --no-stream-weights"),
                      ("cli-7b", "CLI 7B bf16 -> `--dtype float16`, text-generation-with-past (route chosen by the CLI)")):
        y = r.get(key)
        if not y:
            continue
        if "error" in y:
            lines.append(f"| {name} | {y['wall_s']:.1f} | {y['peak_tree_rss_MB']:.0f} | - | - | "
                         f"failed: {y['error'][:200]} |")
            continue
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in y.get("seconds", {}).items())
        said = [f"{k.replace('_', ' ')}: {y[k]}" for k in ("validated", "checked", "not_validated")
                if k in y]
        note = "; ".join([f"route: {y.get('route')}", steps,
                          f"process ru_maxrss {y['ru_maxrss_MB']:.0f} MB", *said])
        save_s = y.get("seconds", {}).get("save")
        mbps = y["data_bytes"] / 1e6 / save_s if save_s else None
        lines.append(f"| {name} | {y['wall_s']:.1f} | **{y['peak_tree_rss_MB']:.0f}** | "
                     f"{y['data_bytes'] / 1e9:.2f} | {_f(mbps, '.0f')} | {note} |")
    y = r.get("cli-7b-ort-load")
    if y and "error" not in y:
        lines.append(f"| ORT session creation only (ORT_DISABLE_ALL), the CLI's 7B model.onnx | "
                     f"{y['wall_s']:.1f} | {y['peak_rss_MB']:.0f} | - | - | load {y['load_s']:.1f} s |")
    elif y:
        row("ORT session creation, CLI 7B", "cli-7b-ort-load")
    return "\n".join(lines) + "\n\n" + render_saves(r)


def render_saves(r: dict[str, Any]) -> str:
    """onnxport's saves against `dd` of the same bytes on the same disk, run right before and
    right after each save in the same process."""
    lines = ["| save (external data) | seconds | MB/s | dd fdatasync MB/s (before / after) | "
             "**save / dd fdatasync** | dd no sync MB/s (before / after) | save / dd no sync | "
             "checkpoint in page cache |", "|---|---|---|---|---|---|---|---|"]
    for key, name in (("onnxport-fake", "1.1B streamed: fake export, apply_weights(folder), save"),
                      ("onnxport-real", "1.1B one call: from_pretrained, export, save"),
                      ("onnxport-7b", "7B streamed (bf16 -> float16, 4 GB shards)")):
        x = r.get(key)
        if not x or "error" in x or "dd_before" not in x:
            continue
        dd = {k: " / ".join(f"{x[w][k]['MBps']:.0f}" for w in ("dd_before", "dd_after"))
              for k in ("fdatasync", "no_sync")}
        ratio = {k: " / ".join(f"{v:.0%}" for v in x[f"ratio_{k}"]) for k in ("fdatasync", "no_sync")}
        cached = x.get("checkpoint_cached")
        lines.append(f"| {name} | {x['save_s']:.1f} | {x['write_MBps']:.0f} | {dd['fdatasync']} | "
                     f"**{ratio['fdatasync']}** | {dd['no_sync']} | {ratio['no_sync']} | "
                     f"{_f(cached * 100 if cached is not None else None, '.0f')}% |")
    return "\n".join(lines) if len(lines) > 2 else ""


if __name__ == "__main__":
    sys.exit(main())
