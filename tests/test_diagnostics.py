"""Diagnostics: stable rule ids, verbosity, warnings_as_errors, SARIF logs, markdown reports."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

import onnxport


class InPlaceOnInput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)  # mutates a graph input: needs the whole-program re-trace (OPX003)
        return torch.special.xlog1py(x, x)  # no translation: decomposed (OPX002)


@torch.library.custom_op("onnxport_diag::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(x.numpy().copy())  # numpy: a body no trace can inline


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mystery(x) + 1


def _rules(program: onnxport.ONNXProgram) -> set[str]:
    return {d.rule.id for d in program.diagnostics}


def test_diagnostics_are_recorded_with_stable_rule_ids() -> None:
    program = onnxport.dynamo_export(InPlaceOnInput(), torch.rand(3))
    assert {"OPX002", "OPX003"} <= _rules(program)
    retraced = next(d for d in program.diagnostics if d.rule.id == "OPX003")
    assert retraced.level == logging.WARNING and retraced.rule.name == "program-retraced"


def test_verbosity_level_filters_notes() -> None:
    options = onnxport.ExportOptions(
        diagnostic_options=onnxport.DiagnosticOptions(verbosity_level=logging.WARNING))
    program = onnxport.dynamo_export(InPlaceOnInput(), torch.rand(3), export_options=options)
    assert _rules(program) == {"OPX003"}


def test_warnings_as_errors_fails_the_export() -> None:
    options = onnxport.ExportOptions(
        diagnostic_options=onnxport.DiagnosticOptions(warnings_as_errors=True))
    with pytest.raises(onnxport.OnnxExporterError, match="OPX003 program-retraced"):
        onnxport.dynamo_export(InPlaceOnInput(), torch.rand(3), export_options=options)


def test_save_diagnostics_writes_sarif(tmp_path: Path) -> None:
    program = onnxport.dynamo_export(InPlaceOnInput(), torch.rand(3))
    path = tmp_path / "diag.sarif"
    program.save_diagnostics(str(path))
    log = json.loads(path.read_text())
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    assert run["tool"]["driver"]["name"] == "onnxport"
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} >= {"OPX001", "OPX004"}
    assert {r["ruleId"] for r in run["results"]} >= {"OPX002", "OPX003"}


def test_failed_dynamo_export_writes_sarif_with_source(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(onnxport.UnsupportedOperatorError) as info:
        onnxport.dynamo_export(Unsupported(), torch.rand(3))
    sarif = tmp_path / "report_dynamo_export.sarif"
    assert Path(info.value.sarif_path) == sarif  # type: ignore[attr-defined]
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    (result,) = [r for r in results if r["ruleId"] == "OPX004"]
    assert result["level"] == "error" and "onnxport_diag.mystery" in result["message"]["text"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("test_diagnostics.py")
    assert location["region"]["startLine"] > 0


def test_markdown_report_on_failure_lists_the_unsupported_op(tmp_path: Path) -> None:
    with pytest.raises(onnxport.UnsupportedOperatorError):
        onnxport.export(Unsupported(), (torch.rand(3),), report=True, artifacts_dir=tmp_path)
    (report,) = tmp_path.glob("onnxport_report_Unsupported_*_failure.md")
    text = report.read_text()
    assert "FAILED" in text and "OPX004" in text and "onnxport_diag.mystery" in text
    assert "test_diagnostics.py" in text and "## Capture strategies" in text
