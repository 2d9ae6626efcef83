"""Every model type transformers can build from a shrunk config, exported by its default task.

    python benchmarks/bench_model_types.py [--only llama,vit] [--limit N] [--all-tasks]
        [--optimum] [--optimum-minutes 15] [--optimum-subprocess] [--cli] [--timeout 120]
        [--shard K/N] [--jsonl ROWS.jsonl [--rerun-failed]] [--out FILE.md]
    python benchmarks/bench_model_types.py --report ROWS.jsonl ... [--out FILE.md]

The whole sweep, both tools, on two cores (about an hour each):

    python benchmarks/bench_model_types.py --all-tasks --optimum --optimum-minutes 1000 \
        --shard 0/2 --jsonl s0.jsonl     # and --shard 1/2 --jsonl s1.jsonl beside it
    python benchmarks/bench_model_types.py --report s0.jsonl s1.jsonl --out report.md

After a fix in onnxport, `--rerun-failed` with the same --jsonl runs onnxport again where it
failed and keeps optimum's row (optimum's result does not depend on onnxport); the report
takes the latest row of each type and task.

For each model type of transformers' CONFIG_MAPPING_NAMES: its config class with defaults,
shrunk (hidden size 32, 2 layers, 4 heads, 2 key/value heads, vocabulary 99, intermediate
size 64, image size 32, and the same in its sub-configs), a tiny checkpoint with random
weights saved with save_pretrained (the base AutoModel class, or the first Auto class that
lists the type), and onnxport's export of the task it detects from that architecture
(`export_checkpoint` in this process, or `onnxport export --model` with --cli), validated
(ONNX Runtime == eager). Types whose config cannot be built or shrunk (remote backbones,
missing optional packages, more than 20M parameters after shrinking) are skipped with the
reason. --optimum runs optimum-cli on the same checkpoints (in the client venv of
tests/cli_tasks, as bench_cli.py finds it) for --optimum-minutes at most: the default run gives
it the task onnxport detected (optimum-cli cannot infer a task from a local folder: "Cannot
infer the task from a local directory yet"). --all-tasks then runs, for each type, every task that
either tool lists for it (onnxport: `tasks_for`; optimum: its TasksManager, asked in the
venv), each tool explicitly on each task (a checkpoint per onnxport Auto class). A task one
tool does not list for the type is a failure of that tool without a run, and so is a model
type optimum's TasksManager does not know. optimum-cli runs as `optimum-cli export onnx` does
(its `main`, so its own validation included), in one long-lived process of the client venv
that takes one export after another (`--optimum-subprocess`: a process per export, which adds
its start-up, about 10 s of imports, to each); both tools' seconds are then in-process times.

Prints a markdown report: pass counts, and per type the task, the result, seconds and error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO), str(Path(__file__).parent)]

_SIZES = {
    **dict.fromkeys(["hidden_size", "d_model", "n_embd", "dim", "embed_dim", "embedding_size",
                     "projection_dim", "word_embed_proj_dim"], 32),
    **dict.fromkeys(["num_hidden_layers", "n_layer", "num_layers", "encoder_layers",
                     "decoder_layers", "num_decoder_layers", "n_layers"], 2),
    **dict.fromkeys(["num_attention_heads", "n_head", "encoder_attention_heads",
                     "decoder_attention_heads", "num_heads", "n_heads"], 4),
    "num_key_value_heads": 2,
    **dict.fromkeys(["intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim",
                     "d_ff", "hidden_dim", "n_inner"], 64),
    "head_dim": 8, "d_kv": 8, "vocab_size": 99, "image_size": 32, "patch_size": 8,
    **dict.fromkeys(["rotary_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"], 8),
    **dict.fromkeys(["kv_lora_rank", "q_lora_rank"], 16),
}
MAX_PARAMS = 20_000_000


_DERIVED_KEYS = ("layer_types", "stage_names", "out_features", "out_indices", "mlp_layer_types",
                 "attn_layer_indices", "full_attn_idxs", "layers_block_type")


def shrunk_kwargs(config: Any, depth: int = 0) -> dict[str, Any]:
    """Constructor arguments that shrink `config` (sub-configs as shrunk dicts).

    Lists derived from the number of layers (layer types, backbone stages) are left out, for
    the constructor to derive them again from the shrunk sizes.
    """
    from transformers import PretrainedConfig

    kwargs: dict[str, Any] = {}
    for key, value in _SIZES.items():
        current = getattr(config, key, None)
        if isinstance(current, int) and not isinstance(current, bool) and current > value:
            kwargs[key] = value
    if getattr(config, "hidden_sizes", None):
        kwargs.pop("hidden_size", None)  # the last stage's width: derived from hidden_sizes
    if getattr(config, "depths", None):
        kwargs.pop("num_hidden_layers", None)  # the number of stages: len(depths)
        kwargs.pop("num_layers", None)
        depths = list(config.depths)
        if all(isinstance(d, int) for d in depths) and max(depths) > 2:
            kwargs["depths"] = [min(d, 2) for d in depths]
    for key in ("num_heads", "num_attention_heads"):
        heads = getattr(config, key, None)
        # Per-stage heads (Swin-like) must divide the shrunk widths: 4 in every stage.
        if isinstance(heads, (list, tuple)) and heads and any(k in kwargs for k in (
                "embed_dim", "hidden_size", "d_model")):
            kwargs[key] = [4] * len(heads)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
                "sep_token_id", "cls_token_id"):
        current = getattr(config, key, None)
        if isinstance(current, int) and current >= 99:
            kwargs[key] = 2
    if depth < 2:
        for key, value in list(vars(config).items()):
            if isinstance(value, PretrainedConfig):
                sub = value.to_dict()
                inner = shrunk_kwargs(value, depth + 1)
                if inner:
                    for derived in _DERIVED_KEYS:
                        sub.pop(derived, None)
                    sub.update(inner)
                    kwargs[key] = sub
    return kwargs


def shrunk_config(model_type: str) -> Any:
    """The config of `model_type` with defaults, shrunk (see `shrunk_kwargs`)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    return cls(**shrunk_kwargs(cls()))


def checkpoint_class(model_type: str) -> tuple[str, str]:
    """(Auto class, task) of the tiny checkpoint: the base model where there is one."""
    from onnxport.tasks.derive import auto_class, derived_tasks

    tasks = derived_tasks(model_type)
    task = "feature-extraction" if "feature-extraction" in tasks else (tasks[0] if tasks
                                                                       else "")
    return (auto_class(model_type, task) if task else "AutoModel"), task


def build(model_type: str, folder: Path, auto: str) -> str:
    """Save a tiny `auto` checkpoint of `model_type` into folder; '' or why not."""
    import torch
    import transformers

    try:
        config = shrunk_config(model_type)
        torch.manual_seed(0)
        with contextlib.redirect_stderr(io.StringIO()):
            cls = getattr(transformers, auto)
            model = cls.from_config(config) if auto.startswith("Auto") else cls(config)
    except Exception as e:
        return f"cannot build: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    n = sum(p.numel() for p in model.parameters())
    if n > MAX_PARAMS:
        return f"not shrunk: {n / 1e6:.0f}M parameters"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            model.save_pretrained(str(folder))
    except Exception as e:
        return f"cannot save: {type(e).__name__}: {str(e)[:160]}"
    return ""


def transformers_dir() -> str:
    import transformers

    return str(Path(transformers.__file__).parent)


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def run_onnxport(ck: Path, out: Path, task: str | None, timeout: int,
                 cli: bool) -> tuple[bool, float, str, str]:
    """(ok, seconds, task, error) of onnxport's export of `ck`."""
    start = time.perf_counter()
    if cli:
        cmd = [sys.executable, "-m", "onnxport.cli", "export", "--model", str(ck), str(out),
               "--overwrite", *(["--task", task] if task else [])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, time.perf_counter() - start, task or "", f"timeout {timeout}s"
        seconds = time.perf_counter() - start
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("task: ")), "")
        got = line.split()[1] if line else (task or "")
        error = proc.stderr.strip().splitlines()[-1] if proc.returncode else ""
        return proc.returncode == 0, seconds, got, error
    from onnxport.tasks import checkpoint, export_checkpoint, registry

    with contextlib.suppress(Exception):
        task = task or registry.detect_task(checkpoint.load_config(ck))[0]
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            result = export_checkpoint(ck, out, task, overwrite=True)
        return result.ok, time.perf_counter() - start, result.task, ""
    except _Timeout:
        return False, time.perf_counter() - start, task or "", f"timeout {timeout}s"
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        message = str(e).splitlines()[0][:220] if str(e) else ""
        return (False, time.perf_counter() - start, task or "",
                f"{type(e).__name__}: {message} ({Path(where.filename).name}:{where.lineno})"
                .replace(str(Path(transformers_dir()).parent) + "/", ""))
    finally:
        signal.alarm(0)


_OPTIMUM_TASKS = """
import json, warnings
warnings.simplefilter("ignore")
from optimum.exporters.tasks import TasksManager
import optimum.exporters.onnx.model_configs  # registers the ONNX configs
print(json.dumps({t: sorted(d["onnx"]) for t, d in
                  TasksManager._SUPPORTED_MODEL_TYPE.items() if "onnx" in d}))
"""


def optimum_tasks(optimum_cli: Path) -> dict[str, list[str]]:
    """model_type -> the tasks optimum's TasksManager exports to ONNX (its own list, asked in
    the client venv)."""
    import json
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(optimum_cli.parent / "python"), "-c", _OPTIMUM_TASKS],
                          capture_output=True, text=True, env=env, timeout=600)
    line = proc.stdout.strip().splitlines()[-1]
    return {t.replace("_", "-"): v for t, v in json.loads(line).items()}


_OPTIMUM_WORKER = r"""
import io, json, os, sys, time, traceback, warnings
warnings.simplefilter("ignore")
results = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # optimum's prints go to the log, the pipe carries only results
sys.stdout = sys.stderr
from optimum.commands.optimum_cli import main
results.write("ready\n"); results.flush()
for line in sys.stdin:
    job = json.loads(line)
    sys.argv = ["optimum-cli", "export", "onnx", "--model", job["model"],
                *(["--task", job["task"]] if job["task"] else []), job["output"]]
    start = time.perf_counter()
    try:
        main()
        ok, error = True, ""
    except SystemExit as e:
        ok, error = not e.code, "" if not e.code else f"exit status {e.code}"
    except BaseException as e:
        ok, error = False, (f"{type(e).__name__}: {str(e).strip().splitlines()[0][:220]}"
                            if str(e).strip() else type(e).__name__)
    results.write(json.dumps({"ok": ok, "seconds": time.perf_counter() - start,
                              "error": error}) + "\n")
    results.flush()
"""


class _OptimumWorker:
    """optimum-cli's `main`, run in one long-lived process of the client venv per export:
    the same code path as `optimum-cli export onnx --model CK --task T OUT`, without paying
    its start-up (about 10 s of imports on this machine) on every run. A run past the
    timeout kills the process; the next run starts a new one."""

    def __init__(self, optimum_cli: Path) -> None:
        self.python = optimum_cli.parent / "python"
        self.proc: subprocess.Popen[str] | None = None
        self.log = open(tempfile.mktemp(prefix="optimum-worker-", suffix=".log"), "w")

    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", TQDM_DISABLE="1")
        self.proc = subprocess.Popen([str(self.python), "-c", _OPTIMUM_WORKER],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"optimum worker did not start; see {self.log.name}")

    def run(self, ck: Path, out: Path, task: str | None,
            timeout: int) -> tuple[bool, float, str]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        start = time.perf_counter()
        self.proc.stdin.write(json.dumps({"model": str(ck), "output": str(out),
                                          "task": task}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            return (False, time.perf_counter() - start,
                    f"timeout {timeout}s" if not ready else "optimum process died")
        result = json.loads(line)
        return result["ok"], result["seconds"], result["error"]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def run_optimum(optimum_cli: Path, ck: Path, out: Path, task: str | None,
                timeout: int) -> tuple[bool, float, str]:
    """(ok, seconds, error) of optimum-cli's export (and its validation) of `ck`; task None:
    optimum-cli's own default (`--task auto`)."""
    start = time.perf_counter()
    cmd = [str(optimum_cli), "export", "onnx", "--model", str(ck),
           *(["--task", task] if task else []), str(out)]
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - start, f"timeout {timeout}s"
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    error = "" if proc.returncode == 0 else (lines[-1][:220] if lines else "failed")
    return proc.returncode == 0, time.perf_counter() - start, error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--all-tasks", action="store_true")
    parser.add_argument("--optimum", action="store_true")
    parser.add_argument("--optimum-minutes", type=float, default=15.0)
    parser.add_argument("--cli", action="store_true", help="onnxport as a subprocess")
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--out", default="")
    parser.add_argument("--shard", default="", help="K/N: every N-th type from the K-th (0-based)")
    parser.add_argument("--jsonl", default="",
                        help="append each row to this file; rows already in it are not run again")
    parser.add_argument("--rerun-failed", action="store_true",
                        help="with --jsonl: run onnxport again where it failed, keeping "
                             "optimum's row (optimum's result does not depend on onnxport)")
    parser.add_argument("--rerun-timeouts", action="store_true",
                        help="with --rerun-failed: also the runs that timed out (kept otherwise)")
    parser.add_argument("--report", nargs="*", default=None, metavar="JSONL",
                        help="only print the report of these row files (later rows win)")
    parser.add_argument("--optimum-subprocess", action="store_true",
                        help="optimum-cli as one process per export (default: one long-lived "
                             "process in the client venv running optimum-cli's main per export)")
    ns = parser.parse_args()
    if ns.report is not None:
        rows, skipped, total = _read_rows(ns.report)
        report = _report(rows, skipped, total, ns)
        print(report)
        if ns.out:
            Path(ns.out).write_text(report)
        return 0

    import warnings

    warnings.simplefilter("ignore")
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from onnxport.tasks.registry import SUPPORTED, tasks_for

    transformers.logging.set_verbosity_error()
    types = ns.only.split(",") if ns.only else sorted(CONFIG_MAPPING_NAMES)
    if ns.limit:
        types = types[:ns.limit]
    if ns.shard:
        k, n = map(int, ns.shard.split("/"))
        types = types[k::n]
    done: dict[tuple[str, str], dict[str, Any]] = {}
    if ns.jsonl and Path(ns.jsonl).exists():
        for row in map(json.loads, Path(ns.jsonl).read_text().splitlines()):
            done[(row["type"], row.get("job", ""))] = row
    optimum_cli = None
    if ns.optimum:
        from bench_cli import client_venv

        optimum_cli = client_venv() / "bin" / "optimum-cli"
        if not optimum_cli.is_file():
            print(f"no optimum-cli at {optimum_cli}", file=sys.stderr)
            return 2
    optimum_deadline = time.monotonic() + 60 * ns.optimum_minutes
    known = optimum_tasks(optimum_cli) if optimum_cli is not None else None
    worker = (_OptimumWorker(optimum_cli) if optimum_cli is not None
              and not ns.optimum_subprocess else None)
    root = Path(tempfile.mkdtemp(prefix="bench-model-types-"))
    rows: list[dict[str, Any]] = []
    skipped: list[tuple[str, str]] = []
    try:
        for model_type in types:
            auto, _ = checkpoint_class(model_type)
            p_tasks = tasks_for(model_type)
            o_list = known.get(model_type.replace("_", "-")) if known is not None else None
            if not p_tasks and o_list is None:
                _skip(skipped, model_type, "no task: transformers' Auto mappings list none "
                                           "onnxport exports, and optimum does not know it",
                      ns.jsonl)
                continue
            if (model_type, "skipped") in done:
                skipped.append((model_type, done[(model_type, "skipped")]["why"]))
                continue
            # The default task (each tool's own), then with --all-tasks every task either
            # tool lists for the type, run explicitly by both.
            jobs: list[str | None] = [None]
            if ns.all_tasks:
                jobs += list(p_tasks) + [t for t in (o_list or []) if t not in p_tasks]

            def kept(task: str | None, model_type: str = model_type) -> dict[str, Any] | None:
                previous = done.get((model_type, task or "default"))
                if previous is not None and (previous["ok"] or not ns.rerun_failed or (
                        previous["error"].startswith("timeout") and not ns.rerun_timeouts)):
                    return previous
                return None

            if all(kept(task) is not None for task in jobs):
                rows += [kept(task) for task in jobs]  # type: ignore[misc]
                continue
            ck = root / model_type
            why = build(model_type, ck, auto)
            if why:
                _skip(skipped, model_type, why, ns.jsonl)
                continue
            for task in jobs:
                previous = done.get((model_type, task or "default"))
                if kept(task) is not None:
                    rows.append(previous)  # type: ignore[arg-type]
                    continue
                folder = ck
                if task is not None and task in p_tasks:
                    from onnxport.tasks.registry import plan

                    task_auto = plan(model_type, task)[1]
                    if task_auto != auto:
                        folder = root / f"{model_type}--{task}"
                        if not folder.exists() and build(model_type, folder, task_auto):
                            folder = ck
                out = root / "out" / f"{model_type}--{task or 'default'}"
                if task is None and not p_tasks:
                    ok, seconds, got, error = False, 0.0, "", "onnxport lists no task"
                elif task is not None and task not in p_tasks:
                    ok, seconds, got, error = (False, 0.0, task,
                                               "not a task onnxport lists for this type")
                else:
                    ok, seconds, got, error = run_onnxport(folder, out, task, ns.timeout,
                                                           ns.cli)
                row = {"type": model_type, "job": task or "default", "task": got or (task or ""),
                       "default": task is None, "ok": ok, "seconds": seconds,
                       "error": error, "listed": model_type in SUPPORTED}
                if previous is not None and "optimum_ok" in previous:
                    row.update({k: v for k, v in previous.items() if k.startswith("optimum_")})
                elif optimum_cli is not None and time.monotonic() < optimum_deadline:
                    if o_list is None:
                        o_ok, o_sec, o_err = (False, 0.0, "model type not in optimum's "
                                              "TasksManager (not run)")
                    elif task is not None and task not in o_list:
                        o_ok, o_sec, o_err = (False, 0.0, "task not in optimum's "
                                              "TasksManager for this type (not run)")
                    elif task is None and got not in o_list:
                        o_ok, o_sec, o_err = (False, 0.0, f"{got or 'no task'}: not in "
                                              f"optimum's TasksManager for this type (not run)")
                    else:
                        # optimum-cli cannot infer a task from a local folder: the default
                        # run gets the task onnxport detected.
                        o_ok, o_sec, o_err = (
                            worker.run(folder, root / "optimum" / out.name, task or got,
                                       ns.timeout) if worker is not None else
                            run_optimum(optimum_cli, folder, root / "optimum" / out.name,
                                        task or got, ns.timeout))
                    row.update(optimum_ok=o_ok, optimum_seconds=o_sec, optimum_error=o_err)
                rows.append(row)
                if ns.jsonl:
                    with open(ns.jsonl, "a") as f:
                        f.write(json.dumps(row) + "\n")
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(root / "optimum" / out.name, ignore_errors=True)
                print(f"{model_type:32} {row['task']:34} {'ok' if ok else 'FAIL'} "
                      f"{seconds:6.1f}s {error[:120]}"
                      + (f" | optimum {'ok' if row['optimum_ok'] else 'FAIL'} "
                         f"{row['optimum_seconds']:.1f}s {row['optimum_error'][:80]}"
                         if "optimum_ok" in row else ""), file=sys.stderr, flush=True)
    finally:
        if worker is not None:
            worker.close()
        shutil.rmtree(root, ignore_errors=True)
    if ns.jsonl:
        rows, skipped, _ = _read_rows([ns.jsonl])
    report = _report(rows, skipped, len(types), ns)
    print(report)
    if ns.out:
        Path(ns.out).write_text(report)
    return 0


def _skip(skipped: list[tuple[str, str]], model_type: str, why: str, jsonl: str) -> None:
    skipped.append((model_type, why))
    if jsonl:
        with open(jsonl, "a") as f:
            f.write(json.dumps({"type": model_type, "job": "skipped", "why": why}) + "\n")


def _read_rows(files: list[str]) -> tuple[list[dict[str, Any]], list[tuple[str, str]], int]:
    """(rows, skipped, number of types) from --jsonl files; a later row of the same type and
    job replaces an earlier one."""
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for file in files:
        for row in map(json.loads, Path(file).read_text().splitlines()):
            by_key[(row["type"], row.get("job", ""))] = row
    keys = sorted(by_key, key=lambda k: (k[0], k[1] != "default", k[1]))
    rows = [by_key[k] for k in keys if k[1] != "skipped"]
    skipped = [(k[0], by_key[k]["why"]) for k in keys if k[1] == "skipped"]
    return rows, skipped, len({k[0] for k in keys})


def _report(rows: list[dict[str, Any]], skipped: list[tuple[str, str]], total: int,
            ns: argparse.Namespace) -> str:
    default = [r for r in rows if r["default"]]
    ns.all_tasks = ns.all_tasks or any(not r["default"] for r in rows)
    # All tasks: the explicit per-task rows (--all-tasks), else the default rows.
    tasks = [r for r in rows if not r["default"]] if ns.all_tasks else default
    lines = [f"# onnxport export on every model type ({time.strftime('%Y-%m-%d')})", "",
             f"{total} model types in CONFIG_MAPPING_NAMES; {len(default)} built as tiny "
             f"checkpoints, {len(skipped)} skipped (reasons below). onnxport "
             f"{'as a subprocess (onnxport export --model)' if ns.cli else 'in process (export_checkpoint)'}.",
             "",
             "| | default task | all tasks |", "|---|---|---|",
             f"| onnxport exports and validates | {sum(r['ok'] for r in default)} / "
             f"{len(default)} | {sum(r['ok'] for r in tasks)} / {len(tasks)} |"]
    both = [r for r in rows if "optimum_ok" in r]
    if both:
        bd = [r for r in both if r["default"]]
        bt = [r for r in both if not r["default"]] if ns.all_tasks else bd
        lines.append(f"| on the {len(bd) + (len(bt) if ns.all_tasks else 0)} runs optimum-cli "
                     f"also had: onnxport | {sum(r['ok'] for r in bd)} / {len(bd)} | "
                     f"{sum(r['ok'] for r in bt)} / {len(bt)} |")
        lines.append(f"| optimum-cli (same checkpoints; onnxport's default task, then each task "
                     f"either tool lists) | {sum(r['optimum_ok'] for r in bd)} / {len(bd)} | "
                     f"{sum(r['optimum_ok'] for r in bt)} / {len(bt)} |")
        only = [r for r in both if r["optimum_ok"] and not r["ok"]]
        lines += ["", f"Runs only optimum-cli passes ({len(only)}), with onnxport's cause:", ""]
        lines += [f"* {r['type']} {r['task'] or '(default)'}"
                  f"{' (default)' if r['default'] else ''}: {r['error']}" for r in only]
    lines += ["", "| model type | task | listed family | onnxport | s | error |"
              + (" optimum-cli | s | error |" if both else ""),
              "|---|---|---|---|---|---|" + ("---|---|---|" if both else "")]
    for r in rows:
        line = (f"| {r['type']} | {r['task']}{' (default)' if r['default'] else ''} | "
                f"{'yes' if r['listed'] else ''} | {'ok' if r['ok'] else 'FAIL'} | "
                f"{r['seconds']:.1f} | {r['error'].replace('|', '/')} |")
        if both:
            line += (f" {('ok' if r['optimum_ok'] else 'FAIL') if 'optimum_ok' in r else ''} |"
                     f" {r.get('optimum_seconds', 0):.1f} |"
                     f" {r.get('optimum_error', '').replace('|', '/')} |")
        lines.append(line)
    lines += ["", "## Skipped", "", "| model type | reason |", "|---|---|"]
    lines += [f"| {t} | {why.replace('|', '/')} |" for t, why in skipped]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
