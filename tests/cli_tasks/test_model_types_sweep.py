"""A sample of the model-type sweep (benchmarks/bench_model_types.py) as CI runs it: two
types, every task either tool lists, onnxport and optimum-cli (in the client venv) beside
each other, rows resumed from the row file and the report rebuilt from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore")


def test_sweep_sample(client_python: Path, tmp_path: Path) -> None:
    rows_file, report = tmp_path / "rows.jsonl", tmp_path / "report.md"
    env = {**os.environ, "ONNXPORT_CLIENT_VENV": str(client_python.parent.parent)}
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_model_types.py"), "--only",
           "bert,convbert", "--all-tasks", "--optimum", "--jsonl", str(rows_file),
           "--out", str(report)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=1200)
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    tasks = {(r["type"], r["job"]) for r in rows}
    for model_type in ("bert", "convbert"):
        assert {(model_type, t) for t in ("default", "fill-mask", "multiple-choice")} <= tasks
    # Both tools export and validate every task of both types (ConvBERT's im2col included).
    assert all(r["ok"] and r["optimum_ok"] for r in rows), [
        (r["type"], r["job"], r["error"], r["optimum_error"]) for r in rows
        if not (r["ok"] and r["optimum_ok"])]
    # A second run resumes: every row is kept, nothing is exported again.
    again = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env,
                           timeout=600)
    assert " ok " not in again.stderr and "FAIL" not in again.stderr
    assert len(rows_file.read_text().splitlines()) == len(rows)
    text = report.read_text()
    n = len([r for r in rows if not r["default"]])
    assert f"| onnxport exports and validates | 2 / 2 | {n} / {n} |" in text
