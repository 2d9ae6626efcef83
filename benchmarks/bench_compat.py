#!/usr/bin/env python
"""The same checks on every supported torch, each beside that torch's own torch.onnx.

    python benchmarks/bench_compat.py --python .venv-2.13/bin/python .venv-2.14/bin/python \\
        .venv-2.15/bin/python --out benchmarks/results/compat_<date>.md

Each interpreter is an environment with its own torch (2.13, 2.14, 2.15) and onnxport
installed (`pip install -e ".[test]"`, see docs/torch_versions.md). In each, one after the
other, this runs in subprocesses:

* the model zoo (`bench_models.py`): onnxport and torch.onnx, both flavours, static and
  dynamic, each compared with eager PyTorch;
* an OpInfo sample (`bench_opinfo.py`): about one OpInfo in `--opinfo-every` (2), chosen by
  a hash of its name (the same ops on each release), in `--opinfo-dtypes` (float32) with `--opinfo-max-samples` (1) samples per op, onnxport
  and torch.onnx dynamo=True;
* fuzz seeds (`bench_fuzz.py`): `--fuzz-seeds` seeds from `--fuzz-start`, both exporters,
  both flavours;

then prints one table per check with a row per torch: pass counts side by side. Raw results
stay in `--work` (JSON per torch), and `--merge-only` rebuilds the report from them.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
ZOO_EXPORTERS = ("onnxport", "ots", "dynamo", "ts")
ZOO_TITLES = {"onnxport": "onnxport dynamo", "ots": "onnxport torchscript",
              "dynamo": "torch.onnx dynamo", "ts": "torch.onnx torchscript"}
FUZZ_BAD = ("mismatch", "ort_invalid", "untyped", "hang", "clobbered")


def torch_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def run_one(python: str, work: Path, args: argparse.Namespace) -> dict[str, float]:
    """Run the three checks in `python`'s environment; the seconds each took."""
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    seconds: dict[str, float] = {}
    jobs = {
        "zoo": [python, str(BENCH / "bench_models.py"), "--json", str(work / "zoo.json"),
                *(["--models", *args.models] if args.models else [])],
        "opinfo": [python, str(BENCH / "bench_opinfo.py"), "--dtypes", *args.opinfo_dtypes,
                   "--max-samples", str(args.opinfo_max_samples), "--every",
                   str(args.opinfo_every), "--jsonl",
                   str(work / "opinfo.jsonl"), "--out", str(work / "opinfo.md")],
        "fuzz": [python, str(BENCH / "bench_fuzz.py"), "--seeds", str(args.fuzz_seeds),
                 "--start", str(args.fuzz_start), "--jsonl", str(work / "fuzz.jsonl"),
                 "--out", str(work / "fuzz.md")],
    }
    for name, cmd in jobs.items():
        if name not in args.checks:
            continue
        for stale in ("opinfo.jsonl", "fuzz.jsonl"):
            if name in stale and (work / stale).exists():
                (work / stale).unlink()
        start = time.perf_counter()
        with open(work / f"{name}.log", "w", encoding="utf-8") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        seconds[name] = round(time.perf_counter() - start, 1)
        print(f"  {name}: {seconds[name] / 60:.1f} min", file=sys.stderr, flush=True)
    (work / "seconds.json").write_text(json.dumps(seconds))
    return seconds


def zoo_rows(work: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    path = work / "zoo.json"
    if not path.exists():
        return 0, {}
    outcomes = json.loads(path.read_text())["outcomes"]
    counts = {}
    for exporter in ZOO_EXPORTERS:
        per = [m[exporter] for m in outcomes.values() if exporter in m]
        counts[exporter] = (sum(o["static"] == "ok" for o in per),
                            sum(o["dynamic"] == "ok" for o in per))
    return len(outcomes), counts


def opinfo_rows(work: Path) -> dict[str, tuple[int, int, int]]:
    """dtype -> (ops tried, onnxport passes, torch.onnx passes)."""
    path = work / "opinfo.jsonl"
    if not path.exists():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for r in records:
        row = rows[r["dtype"]]
        row[0] += 1
        row[1] += bool(r.get("onnxport", {}).get("ok"))
        row[2] += bool(r.get("torch.onnx", {}).get("ok"))
    return {k: tuple(v) for k, v in rows.items()}


def fuzz_rows(work: Path) -> dict[str, collections.Counter[str]]:
    """exporter -> outcome counts."""
    path = work / "fuzz.jsonl"
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                counts[r["exporter"]][r["outcome"]] += 1
    return counts


def report(versions: dict[str, Path], args: argparse.Namespace) -> str:
    lines = [f"# Compatibility, {datetime.date.today().isoformat()}: the same checks on each "
             "torch, beside that torch's torch.onnx", "",
             f"`python benchmarks/bench_compat.py` (OpInfo: about one in {args.opinfo_every} of op_db "
             "by a hash of the name, "
             f"{', '.join(args.opinfo_dtypes)}, {args.opinfo_max_samples} sample(s) per op; fuzz: seeds {args.fuzz_start}-"
             f"{args.fuzz_start + args.fuzz_seeds - 1}). Minutes per check in the last column.",
             "", "## Model zoo (tests/models/zoo.py): models passing, static and dynamic", "",
             "| torch | models | " + " | ".join(ZOO_TITLES[e] for e in ZOO_EXPORTERS)
             + " | minutes |", "|---|---:|" + "---:|" * len(ZOO_EXPORTERS) + "---:|"]
    for version, work in versions.items():
        n, counts = zoo_rows(work)
        secs = _seconds(work).get("zoo")
        cells = [f"static {counts[e][0]}, dynamic {counts[e][1]}" if e in counts else "-"
                 for e in ZOO_EXPORTERS]
        lines.append(f"| {version} | {n} | " + " | ".join(cells) + f" | {_min(secs)} |")
    lines += ["", "## OpInfo sample: ops passing (every sample tried matches eager)", "",
              "| torch | dtype | ops | onnxport | onnxport % | torch.onnx | torch.onnx % | "
              "minutes |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for version, work in versions.items():
        secs = _seconds(work).get("opinfo")
        for dtype, (n, port, ref) in opinfo_rows(work).items():
            lines.append(f"| {version} | {dtype} | {n} | {port} | {100 * port / n:.1f} | {ref} "
                         f"| {100 * ref / n:.1f} | {_min(secs)} |")
    lines += ["", "## Fuzz seeds: outcomes per exporter (both flavours, static and dynamic)",
              "", "| torch | exporter | cases | match | typed | runtime rounding | "
              + " | ".join(FUZZ_BAD) + " | minutes |",
              "|---|---|---:|---:|---:|---:|" + "---:|" * len(FUZZ_BAD) + "---:|"]
    for version, work in versions.items():
        secs = _seconds(work).get("fuzz")
        for exporter, c in sorted(fuzz_rows(work).items()):
            total = sum(v for k, v in c.items() if k != "skip")
            lines.append(f"| {version} | {exporter} | {total} | {c['match']} | {c['typed']} | "
                         f"{c['runtime_rounding']} | " + " | ".join(str(c[b]) for b in FUZZ_BAD)
                         + f" | {_min(secs)} |")
    lines += ["", "Per-torch details (failing models, ops and seeds with their errors) are in "
              "the `--work` folder: `zoo.log`, `opinfo.md`, `fuzz.md`."]
    return "\n".join(lines) + "\n"


def _seconds(work: Path) -> dict[str, float]:
    path = work / "seconds.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _min(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", nargs="+", default=[sys.executable],
                        help="interpreters, one per torch (default: this one)")
    parser.add_argument("--checks", nargs="+", default=["zoo", "opinfo", "fuzz"],
                        choices=["zoo", "opinfo", "fuzz"])
    parser.add_argument("--models", nargs="*", default=None, help="zoo entries (default: all)")
    parser.add_argument("--opinfo-dtypes", nargs="+", default=["float32"])
    parser.add_argument("--opinfo-max-samples", type=int, default=1)
    parser.add_argument("--opinfo-every", type=int, default=2,
                        help="about one OpInfo in N, by a hash of its name (1: the whole op_db)")
    parser.add_argument("--fuzz-seeds", type=int, default=100)
    parser.add_argument("--fuzz-start", type=int, default=0)
    parser.add_argument("--work", default=str(ROOT / "benchmarks" / "results" / "compat-work"))
    parser.add_argument("--merge-only", action="store_true",
                        help="only rebuild the report from --work")
    parser.add_argument("--out", default="", help="also write the report here")
    args = parser.parse_args(argv)
    versions: dict[str, Path] = {}
    for python in args.python:
        version = torch_version(python)
        work = Path(args.work) / version
        versions[version] = work
        if not args.merge_only:
            print(f"torch {version} ({python})", file=sys.stderr, flush=True)
            run_one(python, work, args)
    text = report(versions, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
