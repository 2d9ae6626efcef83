"""Export diagnostics: structured findings with stable rule ids, as a list or a SARIF log.

Each stage reports what a user may want to know (a capture strategy failed, an operator was
decomposed, the whole program had to be re-traced, an operator is unsupported, ...). The
`DiagnosticOptions` of an export decide which are kept (`verbosity_level`) and whether
warnings fail the export (`warnings_as_errors`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

from onnxport.options import DiagnosticOptions


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """A kind of diagnostic; `id` is stable across releases."""

    id: str
    name: str
    description: str


RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("OPX001", "capture-strategy-failed",
         "A torch.export strategy failed and the next one was tried."),
    Rule("OPX002", "operator-decomposed",
         "An operator without a translation was decomposed into ATen operators that have one."),
    Rule("OPX003", "program-retraced",
         "The whole program went through run_decompositions (in-place ops on inputs or views, or a "
         "node whose decomposition could not be traced alone); this costs export time."),
    Rule("OPX004", "unsupported-operator",
         "An operator has no translation at the target opset and no decomposition."),
    Rule("OPX005", "translation-failed", "A translation function failed on a node."),
    Rule("OPX006", "capture-failed", "torch.export could not capture the model in any strategy."),
    Rule("OPX007", "verification-mismatch",
         "ONNX Runtime's outputs differ from eager PyTorch beyond tolerance."),
    Rule("OPX008", "opset-converted",
         "The model was translated at opset 18 and converted down to the requested opset."),
    Rule("OPX009", "export-failed", "The export failed for another reason."),
    Rule("OPX010", "dynamic-shapes-refined",
         "torch.export rejected dynamic_shapes; its suggested fixes were applied and it retried."),
    Rule("OPX011", "dynamic-size-capped",
         "torch.export capped the size of a dim dynamic_shapes asks to be dynamic while "
         "capturing; the graph holds only up to it."),
)}

_SARIF_LEVEL = {logging.ERROR: "error", logging.WARNING: "warning", logging.INFO: "note",
                logging.DEBUG: "none"}


@dataclasses.dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding of an export."""

    rule: Rule
    level: int
    message: str
    source: str = ""
    node: str = ""

    @property
    def level_name(self) -> str:
        return _SARIF_LEVEL.get(self.level, "note")


class DiagnosticContext:
    """Collects the diagnostics of one export."""

    def __init__(self, options: DiagnosticOptions | None = None) -> None:
        self.options = options or DiagnosticOptions()
        self.diagnostics: list[Diagnostic] = []

    def log(self, rule_id: str, level: int, message: str, *, source: str = "", node: str = "") -> None:
        """Record a diagnostic if its level reaches the verbosity level."""
        if level >= self.options.verbosity_level:
            self.diagnostics.append(Diagnostic(RULES[rule_id], level, message, source, node))

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == logging.WARNING]

    def to_sarif(self) -> dict[str, Any]:
        """The diagnostics as a SARIF 2.1.0 log."""
        from onnxport import __version__

        results = []
        for d in self.diagnostics:
            result: dict[str, Any] = {"ruleId": d.rule.id, "level": d.level_name,
                                      "message": {"text": d.message}}
            location = _location(d.source)
            if location is not None:
                result["locations"] = [location]
            if d.node:
                result["properties"] = {"fxNode": d.node}
            results.append(result)
        rules = [{"id": r.id, "name": r.name, "shortDescription": {"text": r.description}}
                 for r in RULES.values()]
        return {
            "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
            "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "onnxport", "version": __version__,
                                          "rules": rules}},
                      "results": results}],
        }

    def save_sarif(self, path: str | os.PathLike[str]) -> None:
        """Write the SARIF log to `path`."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_sarif(), fh, indent=2)


def _location(source: str) -> dict[str, Any] | None:
    """A SARIF location from `file:line in fn: code`."""
    if not source or ":" not in source:
        return None
    file, _, rest = source.partition(":")
    line = rest.split(" ", 1)[0]
    if not line.isdigit():
        return None
    return {"physicalLocation": {"artifactLocation": {"uri": file},
                                 "region": {"startLine": int(line)}}}
