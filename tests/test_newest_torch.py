"""A smoke run on the newest supported torch, in an environment of its own.

The suite runs on the torch of the environment it is started in (2.13.0 in CI, from the
README's command). This test checks the other end of the supported range: it builds
`<repo>/.venv-torch-newest` on first use (torch as pinned in requirements/torch-newest.txt,
from the package registry: a CUDA build of about 6 GB that runs on the CPU; then onnxport with
its test extras), and runs SMOKE there: the public API, the
conformance tests against that torch's own torch.onnx, a sample of the model zoo in both
flavours, the CLI and its optimum and onnxruntime-genai clients on one checkpoint, and a sample
of the OpInfo op tests. docs/torch_versions.md lists what was run on each supported torch.

Set ONNXPORT_SKIP_NEWEST_TORCH=1 to skip it locally (it costs a few minutes and a download).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements" / "torch-newest.txt"
NEWEST = next(line.split("==")[1].strip() for line in REQUIREMENTS.read_text().splitlines()
              if line.startswith("torch=="))
VENV = Path(os.environ.get("ONNXPORT_NEWEST_TORCH_VENV", REPO / ".venv-torch-newest"))

SMOKE = [
    "tests/test_public_api.py",
    "tests/test_torch_onnx_213.py",
    "tests/test_dynamo_api.py",
    "tests/models/test_zoo.py::test_static[bert-static]",
    "tests/models/test_zoo.py::test_static[llama-static]",
    "tests/models/test_zoo.py::test_static[resnet-static]",
    "tests/models/test_zoo.py::test_dynamic[bert-dynamic-dims]",
    "tests/models/test_zoo.py::test_dynamic[llama-dynamic-strings]",
    "tests/models/test_zoo.py::test_dynamic[distilbert-dynamic-dynamic_axes]",
    "tests/models/test_zoo.py::test_torchscript_flavour",
    "tests/models/test_kv_cache.py",
    "tests/torchscript/test_export.py",
    "tests/cli_tasks/test_export_cli.py::test_decoder_with_past[llama]",
    "tests/cli_tasks/test_clients.py::test_decoder_generates_like_eager[llama]",
    "tests/ops/test_ops.py",
    "tests/ops/test_core_coverage.py",
]
# One OpInfo-backed test in five of tests/ops/test_ops.py (every op family is spread over it).
OPS_SAMPLE = "--ops-sample=5"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:3])


def _build_venv() -> Path:
    python = VENV / "bin" / "python"
    stamp = VENV / ".onnxport-ready"
    want = json.dumps([REQUIREMENTS.read_text(), (REPO / "pyproject.toml").read_text()])
    if stamp.is_file() and stamp.read_text() == want:
        return python
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    # A machine-wide pip constraint may cap torch below NEWEST (this machine's caps it at
    # 2.14.1): lift it for this one install.
    env = {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-r", str(REQUIREMENTS), "-e", f"{REPO}[test]"], check=True, env=env)
    stamp.write_text(want)
    print(f"built {VENV} (torch {NEWEST}) in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return python


@pytest.mark.skipif(bool(os.environ.get("ONNXPORT_SKIP_NEWEST_TORCH")),
                    reason="ONNXPORT_SKIP_NEWEST_TORCH is set")
@pytest.mark.skipif(_version(torch.__version__) >= _version(NEWEST),
                    reason=f"this environment runs torch {torch.__version__}: the whole suite "
                           "is the newest-torch run")
def test_smoke_on_the_newest_torch() -> None:
    python = _build_venv()
    version = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.split()[-1]
    assert _version(version) == _version(NEWEST), version
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)
    start = time.perf_counter()
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           OPS_SAMPLE, *SMOKE], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=40 * 60)
    summary = proc.stdout.strip().splitlines()[-1:] or [""]
    print(f"torch {version} smoke: {summary[0]} ({time.perf_counter() - start:.0f} s)",
          file=sys.stderr)
    assert proc.returncode == 0, (f"smoke run on torch {version} failed:\n"
                                  f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
