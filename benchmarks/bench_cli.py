"""optimum-cli vs onnxport on the same tiny checkpoints, interleaved, in the same run.

    python benchmarks/bench_cli.py [--only llama,bert] [--rounds 2] [--floor] [--workers]
                                   [--baseline REV] [--rev REV] [--out bench_cli.md]

For each checkpoint of tests/cli_tasks/checkpoints.py (saved with save_pretrained, random
weights; default: llama, qwen2, gpt2, bert, t5, vit, whisper, clip), runs

    optimum-cli export onnx --model CK --task TASK [OPTIMUM_ARGS] OUT_OPTIMUM  (client venv)
    onnxport export --model CK --task TASK OUT_ONNXPORT                  (this environment)

as subprocesses, --rounds times (at least 2), the two tools alternating which goes first in
each round (optimum-cli first in even rounds), and records per tool the median wall-clock
seconds (process start to exit, imports included), pass or fail (exit status 0 in every
round, which for both tools includes their own validation: onnxport validates by default),
the CPU seconds (user + system, the process and those it waited for: a forked export
worker's, tasks/workers.py, included), and the .onnx files written. The ratio per
checkpoint is onnxport's median over optimum-cli's. optimum-onnx 0.1 needs transformers
< 4.58, so optimum-cli runs in the client venv that tests/cli_tasks builds
(`.venv-clients/<key>`, the key conftest.py derives from this interpreter;
ONNXPORT_CLIENT_VENV overrides). Whether the clients load the folders is
what tests/cli_tasks/test_clients.py checks.

onnxport runs through `bench_cli.py --run-onnxport ARGS`, which is `onnxport ARGS` (the
console script's `entry`, exit without teardown included) plus two measurements printed on
stderr: the imports (torch, onnxport, transformers) and the stage times of every graph's
export (capture, translate, passes; onnxport's ExportRun timings). With the CLI's own step
times (load, export, save, validate) they make the second table (from the last round):
where onnxport's seconds go. A first row measures each tool's fixed cost (`--help` of the
export verb, run as users run it: interpreter start and the imports the verb needs).

onnxport is byte-compiled first, as pip compiles an installed package (optimum's are): an
editable install under PYTHONDONTWRITEBYTECODE would compile its modules in every run.

With `--floor`, a third table: the least any export built on torch.export needs on each
checkpoint here, (a) a process that only starts, imports what it must (torch, transformers
and the model's code, onnx_ir, onnxruntime, torch.export's tracer) and loads the checkpoint,
plus (b) the export step of the task's graphs run warm (the second export in one process),
beside optimum-cli's median: where (a) + (b) is above 0.8x optimum-cli, no change to
onnxport's own steps can reach that ratio.

With `--baseline REV`, onnxport as of the git revision REV (its src/ extracted with `git
archive` into a temporary folder and put first on PYTHONPATH) runs as a third command in the
same rounds (the commands rotate), for an A/B of a change on the same machine at the same
time. With `--rev REV`, the onnxport command itself runs REV's sources the same way (not the
working tree, which other work in the same checkout may have changed).

Prints the markdown tables and writes them to --out, with the load average before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT = ["llama", "qwen2", "gpt2", "bert", "t5", "vit", "whisper", "clip"]
# optimum-cli's example inputs where its defaults do not fit a tiny checkpoint: Whisper's are
# 3000 mel frames of 80 features (max_source_positions 1500); the tiny one takes 32 of 16.
OPTIMUM_ARGS = {"whisper": ["--nb_max_frames", "32", "--feature_size", "16"]}
# optimum's name for the task onnxport exports (onnxport's speech recognition has the past).
OPTIMUM_TASK = {"whisper": "automatic-speech-recognition-with-past"}
_MARK = "BENCH_CLI_TIMINGS "


def _run(cmd: list[str], env: dict[str, str] | None = None,
         ) -> tuple[float, int, str, str, float]:
    """(wall seconds, exit status, stdout, stderr, CPU seconds): the CPU time (user + system)
    of the process and of every process it waited for (a forked export worker's too)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, proc.returncode, proc.stdout, proc.stderr, cpu


def _files(folder: Path) -> str:
    if not folder.is_dir():
        return "-"
    return ", ".join(sorted(p.name for p in folder.iterdir() if ".onnx" in p.name)) or "-"


def run_onnxport(argv: list[str]) -> int:
    """The `onnxport ARGV` console script (`onnxport.cli:entry`), printing the import time of
    the command and each export's stage times on stderr before it exits (a graph exported by
    a forked worker, tasks/workers.py, prints its own line)."""
    t0 = time.perf_counter()
    import onnxport.cli as cli
    import onnxport._stages as stages

    imports = time.perf_counter() - t0
    succeeded = stages.ExportRun.succeeded

    def record(self: Any) -> None:
        succeeded(self)
        print(_MARK + json.dumps({"graph": dict(self.timings)}), file=sys.stderr, flush=True)

    stages.ExportRun.succeeded = record  # type: ignore[method-assign]
    main = cli.main

    def timed_main(args: list[str] | None = None) -> int:
        try:
            return main(args)
        finally:
            print(_MARK + json.dumps({"imports": imports}), file=sys.stderr, flush=True)

    cli.main = timed_main  # type: ignore[assignment]
    sys.argv = ["onnxport", *argv]
    cli.entry()
    return 0


_STEP = re.compile(r"\b(load|export|save|validate|total) ([0-9.]+)s\b")


def _onnxport_split(stdout: str, stderr: str, wall: float) -> dict[str, float]:
    """imports, load, capture, translate, passes, export (rest), save, validate, wall."""
    split: dict[str, float] = {}
    graphs = []
    for line in stderr.splitlines():
        if line.startswith(_MARK):
            data = json.loads(line[len(_MARK):])
            if "graph" in data:
                graphs.append(data["graph"])
            else:
                split["imports"] = data["imports"]
    for stage in ("capture", "translate", "passes"):
        split[stage] = sum(g.get(stage, 0.0) for g in graphs)
    split["graphs"] = len(graphs)
    last = [line for line in stdout.splitlines() if line.startswith("exported ")]
    if last:
        steps = dict((k, float(v)) for k, v in _STEP.findall(last[-1].rsplit("(", 1)[-1]))
        split.update({f"cli_{k}": v for k, v in steps.items()})
    split["wall"] = wall
    return split


_FLOOR_IMPORTS = """
import os, sys
import torch, onnx_ir, onnxruntime, torch.export._trace
from onnxport.tasks import checkpoint, registry
config = checkpoint.load_config(sys.argv[1])
task, _ = registry.resolve_task(config, sys.argv[2])
family, auto_class = registry.plan(config.model_type, task)
checkpoint.load_model(sys.argv[1], config, auto_class)
os._exit(0)
"""
_FLOOR_WARM = """
import json, shutil, sys, tempfile
from onnxport.tasks.export import export_checkpoint
seconds = []
for _ in range(2):
    out = tempfile.mkdtemp()
    shutil.rmtree(out)
    seconds.append(export_checkpoint(sys.argv[1], out, sys.argv[2], validate=False).seconds)
    shutil.rmtree(out)
print(json.dumps(seconds[-1]))
"""


def floor(ck: Path, task: str, env: dict[str, str]) -> tuple[float, float]:
    """(a), (b): the least any exporter built on torch.export needs here, in two parts.

    (a) The wall time of a process that only starts, imports what such an export must
    (torch, transformers and the model's code, onnx_ir, onnxruntime, torch.export's tracer)
    and loads the checkpoint. (b) The export step (capture, translate, passes) of the task's
    graphs, warm: the second export in one process, so no import and no first-call cost is in
    it. onnxport's wall time cannot go below (a) + (b) without a cheaper capture than
    torch.export's or fewer imports than transformers' own.
    """
    imports = min(_run([sys.executable, "-c", _FLOOR_IMPORTS, str(ck), task], env)[0]
                  for _ in range(2))
    _, rc, out, err, _ = _run([sys.executable, "-c", _FLOOR_WARM, str(ck), task], env)
    if rc:
        raise RuntimeError(err[-2000:])
    return imports, json.loads(out.strip().splitlines()[-1])["export"]


def client_venv() -> Path:
    """The client venv tests/cli_tasks/conftest.py builds for this interpreter."""
    if os.environ.get("ONNXPORT_CLIENT_VENV"):
        return Path(os.environ["ONNXPORT_CLIENT_VENV"])
    parent = site.getsitepackages()
    key = hashlib.sha1(json.dumps([sys.prefix, *parent]).encode()).hexdigest()[:10]
    return REPO / ".venv-clients" / key


WORKER_MARK = "(in the worker process)"  # onnxport.tasks.export.WORKER_MARK, not imported here


def _compile_onnxport() -> None:
    """Byte-compile onnxport as pip compiles an installed package (optimum's are).

    An editable install compiles on first import, and with PYTHONDONTWRITEBYTECODE set (as in
    the team's shells) every run would compile onnxport's modules again.
    """
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("onnxport")
    assert spec is not None and spec.submodule_search_locations
    compileall.compile_dir(spec.submodule_search_locations[0], quiet=1)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated checkpoint names (default: "
                                       + ",".join(DEFAULT) + ")")
    parser.add_argument("--rounds", type=int, default=2,
                        help="runs of each tool per checkpoint, alternating which goes first "
                             "(default 2, at least 2)")
    parser.add_argument("--out", default="bench_cli.md")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the least a torch.export-based export needs per "
                             "checkpoint (imports + load, and the warm export step) against "
                             "optimum-cli's median")
    parser.add_argument("--workers", action="store_true",
                        help="also run onnxport with ONNXPORT_EXPORT_WORKERS=1 (a forked "
                             "export worker even on a busy machine) in the same rounds, and "
                             "compare")
    parser.add_argument("--baseline", metavar="REV",
                        help="also run onnxport as of git revision REV in the same rounds "
                             "(an A/B of a change), and compare")
    parser.add_argument("--rev", metavar="REV",
                        help="run onnxport as of git revision REV, not the working tree")
    ns = parser.parse_args()
    if ns.rounds < 2:
        parser.error("--rounds must be at least 2 (the order alternates between rounds)")

    from tests.cli_tasks.checkpoints import CHECKPOINTS, save_checkpoint

    names = ns.only.split(",") if ns.only else DEFAULT
    optimum_cli = client_venv() / "bin" / "optimum-cli"
    if not optimum_cli.is_file():
        print(f"no {optimum_cli}: run the client tests once (pytest tests/cli_tasks) to build "
              f"the venv", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    optimum_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    sources = tempfile.TemporaryDirectory()
    baseline_env = _at_revision(env, ns.baseline, Path(sources.name) / "baseline")
    env = _at_revision(env, ns.rev, Path(sources.name) / "rev")
    workers_env = {**env, "ONNXPORT_EXPORT_WORKERS": "1"}
    onnxport_cmd = [sys.executable, str(Path(__file__).resolve()), "--run-onnxport"]
    _compile_onnxport()
    load_before = _load()
    rows = ["| checkpoint | task | optimum-cli s (median) | optimum-cli | onnxport s (median) | "
            "onnxport | onnxport / optimum | optimum-cli s, each round | onnxport s, each "
            "round | CPU s optimum-cli / onnxport (median) | CPU onnxport / optimum | "
            "optimum files | onnxport files |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    splits = ["| checkpoint | graphs | imports | load | capture | translate | passes | "
              "export other | save | validate | rest | wall |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    serials = ["| checkpoint | workers s (median) | onnxport s (median) | workers / onnxport | "
               "workers s, each round | workers CPU s | onnxport CPU s | "
               "CPU workers / onnxport | workers / optimum | onnxport / optimum | workers |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    baselines = ["| checkpoint | baseline s (median) | onnxport s (median) | onnxport / baseline | "
                 "baseline s, each round | onnxport s, each round | baseline CPU s | "
                 "onnxport CPU s | CPU onnxport / baseline | baseline / optimum | "
                 "onnxport / optimum | baseline |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    floors = ["| checkpoint | (a) start, imports, load | (b) warm export step | floor (a) + (b) "
              "| optimum-cli (median) | floor / optimum-cli | onnxport / optimum-cli |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    helps: dict[str, list[float]] = {"optimum": [], "onnxport": []}
    for r in range(ns.rounds):
        for tool in (("optimum", "onnxport") if r % 2 == 0 else ("onnxport", "optimum")):
            cmd = ([str(optimum_cli), "export", "onnx", "--help"] if tool == "optimum" else
                   [sys.executable, "-m", "onnxport.cli", "export", "--help"])
            helps[tool].append(_run(cmd, optimum_env if tool == "optimum" else env)[0])
    h_o, h_p = statistics.median(helps["optimum"]), statistics.median(helps["onnxport"])
    rows.append(f"| (`export --help`: start + imports) | - | {h_o:.1f} | - | {h_p:.1f} | - | "
                f"{h_p / h_o:.2f} | {_each(helps['optimum'])} | {_each(helps['onnxport'])} "
                f"| - | - | - | - |")
    print(rows[-1], flush=True)
    ratios: dict[str, float] = {}
    forked: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in names:
            task = CHECKPOINTS[name][1]
            ck = save_checkpoint(name, root / name)
            out_o, out_p = root / f"{name}-optimum", root / f"{name}-onnxport"
            cmd_o = [str(optimum_cli), "export", "onnx", "--model", str(ck), "--task",
                     OPTIMUM_TASK.get(name, task), *OPTIMUM_ARGS.get(name, []), str(out_o)]
            cmd_p = [*onnxport_cmd, "export", "--model", str(ck), "--task", task,
                     "--overwrite", str(out_p)]
            tools = (["optimum", "onnxport"] + (["workers"] if ns.workers else [])
                     + (["baseline"] if ns.baseline else []))
            times: dict[str, list[float]] = {tool: [] for tool in tools}
            cpu: dict[str, list[float]] = {tool: [] for tool in tools}
            ok = {tool: True for tool in tools}
            last: dict[str, tuple[str, str]] = {}
            stderrs: list[str] = []
            for r in range(ns.rounds):
                for tool in _order(tools, r):
                    if tool == "optimum" and out_o.exists():
                        shutil.rmtree(out_o)  # optimum-cli writes into a folder as it is
                    t, rc, out_text, err, c = _run(cmd_o if tool == "optimum" else cmd_p,
                                                   {"optimum": optimum_env,
                                                    "workers": workers_env,
                                                    "baseline": baseline_env}.get(tool, env))
                    times[tool].append(t)
                    cpu[tool].append(c)
                    ok[tool] &= rc == 0
                    last[tool] = out_text, err
                    if tool == "onnxport":
                        stderrs.append(err)  # the progress lines
                    if rc:
                        tail = [line for line in err.strip().splitlines()
                                if not line.startswith(_MARK)][-6:]
                        print(f"  {tool} failed on {name} (round {r}): ..."
                              + "\n    ".join(tail), file=sys.stderr)
            t_o, t_p = statistics.median(times["optimum"]), statistics.median(times["onnxport"])
            ratios[name] = t_p / t_o
            c_o, c_p = statistics.median(cpu["optimum"]), statistics.median(cpu["onnxport"])
            rows.append(f"| {name} | {task} | {t_o:.1f} | {'pass' if ok['optimum'] else 'FAIL'} "
                        f"| {t_p:.1f} | {'pass' if ok['onnxport'] else 'FAIL'} | {t_p / t_o:.2f} "
                        f"| {_each(times['optimum'])} | {_each(times['onnxport'])} "
                        f"| {c_o:.1f} / {c_p:.1f} | {c_p / c_o:.2f} "
                        f"| {_files(out_o)} | {_files(out_p)} |")
            print(rows[-1], flush=True)
            if ns.workers:  # the forked worker against the default command
                serials.append(_ab_row(name, times, cpu, ok, "workers", t_o, against_default=False))
                print(serials[-1], flush=True)
            if ns.baseline:  # the default command against another commit's
                baselines.append(_ab_row(name, times, cpu, ok, "baseline", t_o, against_default=True))
                print(baselines[-1], flush=True)
            forked[name] = sum(WORKER_MARK in text for text in stderrs)
            s = _onnxport_split(*last["onnxport"], times["onnxport"][-1])
            stages = sum(s.get(k, 0.0) for k in ("capture", "translate", "passes"))
            accounted = s.get("imports", 0.0) + s.get("cli_total", 0.0)
            wall = times["onnxport"][-1]
            splits.append(
                f"| {name} | {int(s.get('graphs', 0))} | {s.get('imports', 0):.1f} | "
                f"{s.get('cli_load', 0):.1f} | {s.get('capture', 0):.1f} | "
                f"{s.get('translate', 0):.1f} | {s.get('passes', 0):.1f} | "
                f"{max(s.get('cli_export', 0) - stages, 0):.1f} | {s.get('cli_save', 0):.1f} | "
                f"{s.get('cli_validate', 0):.1f} | {max(wall - accounted, 0):.1f} | "
                f"{wall:.1f} |")
            print(splits[-1], flush=True)
            if ns.floor:
                imports, warm = floor(ck, task, env)
                floors.append(f"| {name} | {imports:.1f} | {warm:.1f} | {imports + warm:.1f} "
                              f"| {t_o:.1f} | {(imports + warm) / t_o:.2f} | {t_p / t_o:.2f} |")
                print(floors[-1], flush=True)
    worst = max(ratios.values()) if ratios else float("nan")
    text = ((f"onnxport as of {ns.rev} ({_describe(ns.rev)}), not the working tree\n\n"
             if ns.rev else "")
            + f"load average (1, 5, 15 min) before: {load_before}; after: {_load()}; "
            f"{ns.rounds} rounds, order alternating\n\n" + "\n".join(rows)
            + f"\n\nworst onnxport / optimum-cli ratio: {worst:.2f}\n\n"
            "onnxport's seconds, by step, last round (imports: `import onnxport.cli`; "
            "capture/translate/passes: summed over the graphs; export other: the rest of the "
            "CLI's export step; rest: interpreter start, the imports the export does before "
            "it starts its clock, argument parsing, exit):\n\n" + "\n".join(splits) + "\n"
            + "\nonnxport runs (default command) that forked an export worker (a core was "
            "idle over the load, tasks/workers.py): "
            + ", ".join(f"{k} {v}/{ns.rounds}" for k, v in forked.items()) + "\n")
    if ns.workers:
        text += ("\nonnxport as above beside `workers`, the same command with "
                 "ONNXPORT_EXPORT_WORKERS=1 (a forked worker whatever the load: the first "
                 "and last graphs of three exported by it, tasks/workers.py), in the same "
                 "rounds (the three commands rotate):\n\n"
                 + "\n".join(serials) + "\n")
    if ns.baseline:
        text += (f"\nonnxport as above beside `baseline`, the same command with onnxport as of "
                 f"{ns.baseline} ({_describe(ns.baseline)}), in the same rounds (the commands "
                 f"rotate):\n\n" + "\n".join(baselines) + "\n")
    if ns.floor:
        text += ("\nThe floor (`--floor`): (a) a process that starts, imports torch, "
                 "transformers and the model's code, onnx_ir, onnxruntime and torch.export's "
                 "tracer, and loads the checkpoint (best of 2); (b) the export step of the "
                 "task's graphs (capture, translate, passes), warm (the second export in one "
                 "process). No export built on torch.export, with these imports, takes less "
                 "than (a) + (b):\n\n" + "\n".join(floors) + "\n")
    Path(ns.out).write_text(text)
    print(text)
    return 0


def _at_revision(env: dict[str, str], rev: str | None, into: Path) -> dict[str, str]:
    """`env` running onnxport as of git revision `rev` (extracted under `into`); `env` itself
    when `rev` is None."""
    if rev is None:
        return env
    into.mkdir(parents=True)
    return {**env, "PYTHONPATH": os.pathsep.join([_extract(rev, into),
                                                  *filter(None, [env.get("PYTHONPATH")])])}


def _extract(rev: str, into: Path) -> str:
    """onnxport's sources as of git revision `rev`, byte-compiled, under `into`; the folder
    to put on PYTHONPATH."""
    import compileall

    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src/onnxport"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    compileall.compile_dir(str(into / "src" / "onnxport"), quiet=1)
    return str(into / "src")


def _describe(rev: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %s", rev],
                          capture_output=True, text=True).stdout.strip()[:100]


def _order(tools: list[str], r: int) -> list[str]:
    """The tools in round r: optimum-cli first in even rounds (two tools); three rotate."""
    if len(tools) == 2:
        return tools if r % 2 == 0 else tools[::-1]
    return tools[r % len(tools):] + tools[:r % len(tools)]


def _ab_row(name: str, times: dict[str, list[float]], cpu: dict[str, list[float]],
            ok: dict[str, bool], other: str, t_o: float, *, against_default: bool) -> str:
    """A row of the --workers or --baseline table: `other`'s medians beside the default
    command's, the ratio of the newer over the older, and each over optimum-cli's."""
    t_x, c_x = statistics.median(times[other]), statistics.median(cpu[other])
    t_p, c_p = statistics.median(times["onnxport"]), statistics.median(cpu["onnxport"])
    verdict = "pass" if ok[other] else "FAIL"
    if against_default:
        return (f"| {name} | {t_x:.1f} | {t_p:.1f} | {t_p / t_x:.2f} | {_each(times[other])} | "
                f"{_each(times['onnxport'])} | {c_x:.1f} | {c_p:.1f} | {c_p / c_x:.2f} | "
                f"{t_x / t_o:.2f} | {t_p / t_o:.2f} | {verdict} |")
    return (f"| {name} | {t_x:.1f} | {t_p:.1f} | {t_x / t_p:.2f} | {_each(times[other])} | "
            f"{c_x:.1f} | {c_p:.1f} | {c_x / c_p:.2f} | {t_x / t_o:.2f} | {t_p / t_o:.2f} | "
            f"{verdict} |")


def _each(times: list[float]) -> str:
    return ", ".join(f"{t:.1f}" for t in times)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--run-onnxport":
        raise SystemExit(run_onnxport(sys.argv[2:]))
    raise SystemExit(main())
