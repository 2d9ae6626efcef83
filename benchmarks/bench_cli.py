"""optimum-cli vs onnxport on the same tiny checkpoints, in the same run.

    python benchmarks/bench_cli.py [--only llama,bert] [--out bench_cli.md]

For each checkpoint of tests/cli_tasks/checkpoints.py (saved with save_pretrained, random
weights; default: llama, gpt2, bert, t5, whisper, vit, clip), runs back to back

    optimum-cli export onnx --model CK --task TASK [OPTIMUM_ARGS] OUT_OPTIMUM  (client venv)
    onnxport export --model CK --task TASK OUT_ONNXPORT                  (this environment)

as subprocesses, and records wall-clock seconds (process start to exit, imports included),
pass or fail (exit status 0, which for both tools includes their own validation), and the
.onnx files written. optimum-onnx 0.1 needs transformers < 4.58, so optimum-cli runs in the
client venv that tests/cli_tasks builds (`.venv-clients`; ONNXPORT_CLIENT_VENV overrides).

onnxport runs through `bench_cli.py --run-onnxport ARGS`, which is `onnxport ARGS` plus two
measurements printed on stderr: the imports (torch, onnxport, transformers) and the stage
times of every graph's export (capture, translate, passes; onnxport's ExportRun timings).
With the CLI's own step times (load, export, save, validate) they make the second table:
where onnxport's seconds go. A first row measures each tool's fixed cost (`--help` of the
export verb, run as users run it: interpreter start and the imports the verb needs).

Prints two markdown tables and writes them to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT = ["llama", "gpt2", "bert", "t5", "whisper", "vit", "clip"]
# optimum-cli's example inputs where its defaults do not fit a tiny checkpoint: Whisper's are
# 3000 mel frames of 80 features (max_source_positions 1500); the tiny one takes 32 of 16.
OPTIMUM_ARGS = {"whisper": ["--nb_max_frames", "32", "--feature_size", "16"]}
# optimum's name for the task onnxport exports (onnxport's speech recognition has the past).
OPTIMUM_TASK = {"whisper": "automatic-speech-recognition-with-past"}
_MARK = "BENCH_CLI_TIMINGS "


def _run(cmd: list[str], env: dict[str, str] | None = None,
         ) -> tuple[float, int, str, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    return time.perf_counter() - start, proc.returncode, proc.stdout, proc.stderr


def _files(folder: Path) -> str:
    if not folder.is_dir():
        return "-"
    return ", ".join(sorted(p.name for p in folder.iterdir() if ".onnx" in p.name)) or "-"


def run_onnxport(argv: list[str]) -> int:
    """`onnxport ARGV`, printing the import time and each export's stage times on stderr."""
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import onnxport._stages as stages
    from onnxport.cli import main

    imports = time.perf_counter() - t0
    graphs: list[dict[str, float]] = []
    succeeded = stages.ExportRun.succeeded

    def record(self: Any) -> None:
        succeeded(self)
        graphs.append(dict(self.timings))

    stages.ExportRun.succeeded = record  # type: ignore[method-assign]
    try:
        return main(argv)
    finally:
        print(_MARK + json.dumps({"imports": imports, "graphs": graphs}), file=sys.stderr,
              flush=True)


_STEP = re.compile(r"\b(load|export|save|validate|total) ([0-9.]+)s\b")


def _onnxport_split(stdout: str, stderr: str, wall: float) -> dict[str, float]:
    """imports, load, capture, translate, passes, export (rest), save, validate, wall."""
    split: dict[str, float] = {}
    for line in stderr.splitlines():
        if line.startswith(_MARK):
            data = json.loads(line[len(_MARK):])
            split["imports"] = data["imports"]
            for stage in ("capture", "translate", "passes"):
                split[stage] = sum(g.get(stage, 0.0) for g in data["graphs"])
            split["graphs"] = len(data["graphs"])
    last = [line for line in stdout.splitlines() if line.startswith("exported ")]
    if last:
        steps = dict((k, float(v)) for k, v in _STEP.findall(last[-1].rsplit("(", 1)[-1]))
        split.update({f"cli_{k}": v for k, v in steps.items()})
    split["wall"] = wall
    return split


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated checkpoint names (default: "
                                       + ",".join(DEFAULT) + ")")
    parser.add_argument("--out", default="bench_cli.md")
    ns = parser.parse_args()

    from tests.cli_tasks.checkpoints import CHECKPOINTS, save_checkpoint

    names = ns.only.split(",") if ns.only else DEFAULT
    venv = Path(os.environ.get("ONNXPORT_CLIENT_VENV", REPO / ".venv-clients"))
    optimum_cli = venv / "bin" / "optimum-cli"
    if not optimum_cli.is_file():
        print(f"no {optimum_cli}: run the client tests once (pytest tests/cli_tasks) to build "
              f"the venv", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    optimum_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    onnxport_cmd = [sys.executable, str(Path(__file__).resolve()), "--run-onnxport"]
    rows = ["| checkpoint | task | optimum-cli s | optimum-cli | onnxport s | onnxport | "
            "onnxport / optimum | optimum files | onnxport files |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    splits = ["| checkpoint | graphs | imports | load | capture | translate | passes | "
              "export other | save | validate | rest | wall |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    t_o, _, _, _ = _run([str(optimum_cli), "export", "onnx", "--help"], optimum_env)
    t_p, _, _, _ = _run([sys.executable, "-m", "onnxport.cli", "export", "--help"], env)
    rows.append(f"| (`export --help`: start + imports) | - | {t_o:.1f} | - | {t_p:.1f} | - | "
                f"{t_p / t_o:.2f} | - | - |")
    print(rows[-1], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in names:
            task = CHECKPOINTS[name][1]
            ck = save_checkpoint(name, root / name)
            out_o, out_p = root / f"{name}-optimum", root / f"{name}-onnxport"
            t_o, rc_o, _, err_o = _run([str(optimum_cli), "export", "onnx", "--model", str(ck),
                                        "--task", OPTIMUM_TASK.get(name, task),
                                        *OPTIMUM_ARGS.get(name, []),
                                        str(out_o)], optimum_env)
            t_p, rc_p, out_text, err_p = _run([*onnxport_cmd, "export", "--model", str(ck),
                                               "--task", task, str(out_p)], env)
            rows.append(f"| {name} | {task} | {t_o:.1f} | {'pass' if rc_o == 0 else 'FAIL'} | "
                        f"{t_p:.1f} | {'pass' if rc_p == 0 else 'FAIL'} | {t_p / t_o:.2f} | "
                        f"{_files(out_o)} | {_files(out_p)} |")
            print(rows[-1], flush=True)
            s = _onnxport_split(out_text, err_p, t_p)
            stages = sum(s.get(k, 0.0) for k in ("capture", "translate", "passes"))
            accounted = s.get("imports", 0.0) + s.get("cli_total", 0.0)
            splits.append(
                f"| {name} | {int(s.get('graphs', 0))} | {s.get('imports', 0):.1f} | "
                f"{s.get('cli_load', 0):.1f} | {s.get('capture', 0):.1f} | "
                f"{s.get('translate', 0):.1f} | {s.get('passes', 0):.1f} | "
                f"{max(s.get('cli_export', 0) - stages, 0):.1f} | {s.get('cli_save', 0):.1f} | "
                f"{s.get('cli_validate', 0):.1f} | {max(t_p - accounted, 0):.1f} | {t_p:.1f} |")
            print(splits[-1], flush=True)
            for tool, rc, err in (("optimum-cli", rc_o, err_o), ("onnxport", rc_p, err_p)):
                if rc:
                    tail = [line for line in err.strip().splitlines()
                            if not line.startswith(_MARK)][-6:]
                    print(f"  {tool} failed on {name}: ..." + "\n    ".join(tail),
                          file=sys.stderr)
    text = ("\n".join(rows) + "\n\nonnxport's seconds, by step (imports: torch, onnxport, "
            "transformers; capture/translate/passes: summed over the graphs; export other: "
            "the rest of the CLI's export step; rest: interpreter start, argument parsing, "
            "exit):\n\n" + "\n".join(splits) + "\n")
    Path(ns.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--run-onnxport":
        raise SystemExit(run_onnxport(sys.argv[2:]))
    raise SystemExit(main())
