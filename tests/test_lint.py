"""The package boundaries (STYLE.md) and basic lint, checked by ruff on every test run.

ops/ never imports onnx or onnxruntime, passes/ never imports torch, and nothing imports
torch.onnx or onnxscript's torchlib (ruff's banned-api, configured in pyproject.toml and the
ruff.toml files of those folders).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes_on_src_and_tests() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    result = subprocess.run([ruff, "check", "src", "tests", "--output-format", "concise"],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
