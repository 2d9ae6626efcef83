"""optimum-cli vs onnxport on the same tiny checkpoints, in the same run.

    python benchmarks/bench_cli.py [--only llama,bert] [--out bench_cli.md]

For each checkpoint of tests/cli_tasks/checkpoints.py (saved with save_pretrained, random
weights), runs

    optimum-cli export onnx --model CK --task TASK OUT_OPTIMUM     (in the client venv)
    onnxport export --model CK --task TASK OUT_ONNXPORT            (in this environment)

as subprocesses, and records wall-clock seconds (process start to exit, imports included),
pass or fail (exit status 0, which for both tools includes their own validation), and the
.onnx files written. optimum-onnx 0.1 needs transformers < 4.58, so optimum-cli runs in the
client venv that tests/cli_tasks builds (`.venv-clients`; ONNXPORT_CLIENT_VENV overrides).
Prints a markdown table and writes it to --out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.cli_tasks.checkpoints import CHECKPOINTS, save_checkpoint  # noqa: E402


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    return time.perf_counter() - start, proc.returncode, proc.stderr[-400:]


def _files(folder: Path) -> str:
    if not folder.is_dir():
        return "-"
    return ", ".join(sorted(p.name for p in folder.iterdir() if ".onnx" in p.name)) or "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated checkpoint names")
    parser.add_argument("--out", default="bench_cli.md")
    ns = parser.parse_args()
    names = ns.only.split(",") if ns.only else list(CHECKPOINTS)
    venv = Path(os.environ.get("ONNXPORT_CLIENT_VENV", REPO / ".venv-clients"))
    optimum_cli = venv / "bin" / "optimum-cli"
    if not optimum_cli.is_file():
        print(f"no {optimum_cli}: run the client tests once (pytest tests/cli_tasks) to build "
              f"the venv", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    optimum_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    rows = ["| checkpoint | task | optimum-cli s | optimum-cli | onnxport s | onnxport | "
            "optimum files | onnxport files |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in names:
            task = CHECKPOINTS[name][1]
            ck = save_checkpoint(name, root / name)
            out_o, out_p = root / f"{name}-optimum", root / f"{name}-onnxport"
            t_o, rc_o, err_o = _run([str(optimum_cli), "export", "onnx", "--model", str(ck),
                                     "--task", task, str(out_o)], optimum_env)
            t_p, rc_p, err_p = _run([sys.executable, "-m", "onnxport.cli", "export", "--model",
                                     str(ck), "--task", task, str(out_p)], env)
            row = (f"| {name} | {task} | {t_o:.1f} | {'pass' if rc_o == 0 else 'FAIL'} | "
                   f"{t_p:.1f} | {'pass' if rc_p == 0 else 'FAIL'} | {_files(out_o)} | "
                   f"{_files(out_p)} |")
            rows.append(row)
            print(row, flush=True)
            for tool, rc, err in (("optimum-cli", rc_o, err_o), ("onnxport", rc_p, err_p)):
                if rc:
                    print(f"  {tool} failed on {name}: ...{err.strip()[-300:]}", file=sys.stderr)
    table = "\n".join(rows)
    Path(ns.out).write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
