"""Fixtures: tiny checkpoints, the CLI run as a user runs it, and the client venv.

optimum-onnx 0.1 pins transformers < 4.58, which conflicts with the project's transformers 5,
so its client tests (and onnxruntime-genai's) run in their own venv, built here on first use
under `<repo>/.venv-clients/`, one per environment the tests run in (`python -m venv`, a `.pth`
file that puts the test environment's site-packages behind the venv's own, then pip install of
CLIENT_REQUIREMENTS): torch, onnx and onnxruntime come from the environment under test, so the
clients run on the same torch (2.13, 2.14 or 2.15). Set ONNXPORT_CLIENT_VENV to use another
folder, or ONNXPORT_SKIP_CLIENTS=1 to skip those tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli_tasks.checkpoints import save_checkpoint
from tests.processes import file_lock

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "onnxport.cli"]
CLIENT_REQUIREMENTS = ["optimum-onnx==0.1.*", "onnxruntime-genai==0.18.*",
                       "transformers>=4.57,<4.58"]
CLIENT_SCRIPT = Path(__file__).with_name("client.py")


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `onnxport ARGS` in a subprocess, as a user would; never raises on exit codes."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> the tiny checkpoint folder (saved once per session)."""
    root = tmp_path_factory.mktemp("checkpoints")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = save_checkpoint(name, root / name)
        return made[name]

    return get


@pytest.fixture(scope="session")
def exported(checkpoints: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> (OUTPUT_DIR, the CompletedProcess of `onnxport export --model CK OUT`)."""
    root = tmp_path_factory.mktemp("exported")
    done: dict[str, tuple[Path, subprocess.CompletedProcess[str]]] = {}

    def get(name: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
        if name not in done:
            out = root / f"{name}-onnx"
            done[name] = out, run_cli("export", "--model", str(checkpoints(name)), str(out))
        return done[name]

    return get


@pytest.fixture(scope="session")
def client_python() -> Path:
    """The client venv's python, building the venv if missing (once, under a file lock)."""
    if os.environ.get("ONNXPORT_SKIP_CLIENTS"):
        pytest.skip("ONNXPORT_SKIP_CLIENTS is set")
    parent = site.getsitepackages()
    key = hashlib.sha1(json.dumps([sys.prefix, *parent]).encode()).hexdigest()[:10]
    venv = Path(os.environ.get("ONNXPORT_CLIENT_VENV", REPO / ".venv-clients" / key))
    python = venv / "bin" / "python"
    stamp = venv / ".onnxport-clients-ready"
    ready = json.dumps([CLIENT_REQUIREMENTS, parent])
    with file_lock(Path(tempfile.gettempdir()) / f"onnxport-venv-clients-{key}.lock"):
        if not stamp.is_file() or stamp.read_text() != ready:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            inner = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                                   check=True, capture_output=True, text=True).stdout.strip()
            # Behind the venv's own packages (a .pth appends to sys.path): the client's
            # transformers 4.57 shadows the test environment's 5.x, torch is the tested one.
            Path(inner, "onnxport-test-env.pth").write_text("\n".join(parent) + "\n")
            # torch comes from the test environment; a machine-wide pip constraint on torch
            # (this machine caps it at 2.14.1) must not make pip replace a newer one.
            env = {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
            subprocess.run([str(python), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", *CLIENT_REQUIREMENTS], check=True,
                           env=env)
            stamp.write_text(ready)
            print(f"built the client venv {venv} in {time.perf_counter() - start:.0f}s",
                  file=sys.stderr)
    return python


@pytest.fixture
def run_client(client_python: Path, tmp_path: Path) -> Any:
    """kind, folder, task, inputs -> the client's results (dict of arrays)."""

    def run(kind: str, folder: Path, task: str, inputs: dict[str, np.ndarray],
            max_new_tokens: int = 0) -> dict[str, np.ndarray]:
        tag = f"{kind}-{folder.name}"
        np.savez(tmp_path / f"{tag}-in.npz", **inputs)
        job = {"kind": kind, "folder": str(folder), "task": task,
               "inputs": str(tmp_path / f"{tag}-in.npz"),
               "output": str(tmp_path / f"{tag}-out.npz"), "max_new_tokens": max_new_tokens}
        (tmp_path / f"{tag}.json").write_text(json.dumps(job))
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "TRANSFORMERS_VERBOSITY": "error"}
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([str(client_python), str(CLIENT_SCRIPT), str(tmp_path / f"{tag}.json")],
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, f"{kind} client failed:\n{proc.stderr[-4000:]}"
        return dict(np.load(job["output"]))

    return run
