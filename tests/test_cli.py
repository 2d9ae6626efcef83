"""The onnxport command line."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

from onnxport.cli import main


def test_export_builtin_example_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mlp.onnx"
    assert main(["export", "--example", "mlp", "-o", str(out), "--verify"]) == 0
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    printed = capsys.readouterr().out
    assert "verified" in printed and "mlp.onnx" in printed


def test_export_from_factory_with_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_models.py").write_text(
        "import torch\n"
        "def make():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (torch.randn(2, 4),)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert main(["export", "my_models:make", "-o", "m.onnx", "--verify", "--report"]) == 0
    assert (tmp_path / "m.onnx").exists()
    assert list(tmp_path.glob("onnxport_report_*_success.md"))


def test_unknown_example_is_a_clear_error() -> None:
    with pytest.raises(SystemExit, match="no example"):
        main(["export", "--example", "nope"])


def _entry(tmp_path, *argv: str):  # type: ignore[no-untyped-def]
    """Run `onnxport.cli.entry()` (the console script) in a child that registered an exit
    function writing a marker file."""
    import subprocess

    marker = tmp_path / "exit-functions-ran"
    code = ("import atexit, sys; from onnxport import cli; "
            f"atexit.register(lambda: open({str(marker)!r}, 'w').close()); "
            f"sys.argv = ['onnxport', *{list(argv)!r}]; cli.entry()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    return proc, marker.exists()


def test_console_script_skips_teardown_but_runs_exit_functions(tmp_path) -> None:
    """`entry()` exits with main()'s status without the interpreter's teardown; files are
    complete and exit functions (temporary folders, logging) have run."""
    out = tmp_path / "mlp.onnx"
    proc, ran = _entry(tmp_path, "export", "--example", "mlp", "-o", str(out), "--verify")
    assert proc.returncode == 0, proc.stderr
    assert ran and "verified" in proc.stdout
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    proc, ran = _entry(tmp_path, "export", "--example", "nope", "-o", str(out))
    assert proc.returncode == 1 and "no example 'nope'" in proc.stderr and ran
