"""The command imports what its verb needs and nothing more (issue 26: CLI wall time).

`--help` imports neither torch nor transformers; a float checkpoint's export imports neither
torchao nor scipy (transformers imports them at the top of its modeling code: checkpoint.py
`deferred_imports`), nor onnxscript, nor rich when stderr is no terminal. Each check runs in
a fresh interpreter, since this one has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_tasks.conftest import REPO

HEAVY = ["torch", "transformers", "torchao", "scipy", "scipy.optimize", "onnxscript", "rich",
         "onnx.reference"]


def _python(code: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


_REPORT = f"""
import json, sys
print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))
"""


def test_help_imports_no_torch() -> None:
    loaded = _python("""
import contextlib, io
import onnxport.cli
with contextlib.redirect_stdout(io.StringIO()):
    try:
        onnxport.cli.main(["export", "--help"])
    except SystemExit:
        pass
""" + _REPORT)
    assert not any(loaded.values()), loaded


def test_float_checkpoint_export_imports_no_torchao_scipy_onnxscript_rich(
        checkpoints: Any, tmp_path: Path) -> None:
    loaded = _python(f"""
import contextlib, io, sys
import onnxport.cli
from onnxport.tasks.checkpoint import _DeferredModule
with contextlib.redirect_stdout(io.StringIO()):
    code = onnxport.cli.main(["export", "--model", {str(checkpoints("llama"))!r},
                              {str(tmp_path / "out")!r}])
assert code == 0, code
assert not [k for k, v in sys.modules.items() if isinstance(v, _DeferredModule)]
""" + _REPORT)
    assert loaded["torch"] and loaded["transformers"]
    for name in ("torchao", "scipy", "scipy.optimize", "onnxscript", "rich", "onnx.reference"):
        assert not loaded[name], name
    assert (tmp_path / "out" / "model.onnx").is_file()


@pytest.mark.parametrize("quantized", [False, True])
def test_deferred_functions_work_when_called(quantized: bool) -> None:
    """A deferred function imports its module on the first call and returns the real result;
    after the block, imports get the real modules; a quantized checkpoint gets torchao at
    once."""
    pytest.importorskip("scipy")
    result = _python(f"""
import json, sys
from onnxport.tasks.checkpoint import deferred_imports, _DeferredModule
with deferred_imports(quantized={quantized}):
    from scipy.optimize import linear_sum_assignment
    placed = sorted(k for k, v in sys.modules.items() if isinstance(v, _DeferredModule))
    imported_inside = "scipy" in sys.modules
rows, cols = linear_sum_assignment([[4, 1, 3], [2, 0, 5], [3, 2, 2]])
import scipy.optimize
print(json.dumps({{"placed": placed, "imported_inside": imported_inside,
                  "cols": cols.tolist(), "real": not isinstance(scipy.optimize, _DeferredModule),
                  "same": linear_sum_assignment.__name__ == "linear_sum_assignment",
                  "left": [k for k, v in sys.modules.items() if isinstance(v, _DeferredModule)]}}))
""")
    assert not result["imported_inside"]
    assert "scipy.optimize" in result["placed"]
    torchao = "torchao.prototype.safetensors.safetensors_support"
    if quantized:
        assert torchao not in result["placed"]
    assert result["cols"] == [1, 0, 2]
    assert result["real"] and result["same"] and not result["left"]
