"""The markdown export report (`report=True`): what happened, for a bug report."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import os
import traceback
from typing import Any

import onnx_ir as ir


@dataclasses.dataclass
class ExportReport:
    """Facts collected during one export; `write` renders them as markdown."""

    model_name: str
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    attempts: list[Any] = dataclasses.field(default_factory=list)
    decomposed: list[str] = dataclasses.field(default_factory=list)
    exported_program: str = ""
    model: ir.Model | None = None
    verification: list[Any] = dataclasses.field(default_factory=list)
    error: BaseException | None = None
    diagnostics: list[Any] = dataclasses.field(default_factory=list)
    capture_strategy: str | None = None
    refined_dynamic_shapes: str | None = None
    profile_path: str | None = None

    def render(self) -> str:
        """The report as markdown text."""
        ok = self.error is None
        out = [f"# onnxport export report: {self.model_name}", "",
               f"- result: {'success' if ok else 'FAILED'}",
               f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}"]
        if self.capture_strategy:
            out.append(f"- captured by: torch.export ({self.capture_strategy})"
                       if self.capture_strategy in ("strict", "non-strict")
                       else f"- captured by: {self.capture_strategy}")
        if self.refined_dynamic_shapes:
            out.append(f"- dynamic_shapes refined by torch.export's suggested fixes: "
                       f"`{self.refined_dynamic_shapes}`")
        if self.profile_path:
            out.append(f"- profile: {self.profile_path}")
        out.append("")
        if self.error is not None:
            out += ["## Error", "", "```", "".join(traceback.format_exception_only(self.error)).strip(),
                    "```", ""]
        if self.diagnostics:
            out += ["## Diagnostics", "", "| rule | level | message | source |", "|---|---|---|---|"]
            for d in self.diagnostics:
                message = d.message.replace("|", "\\|")
                out.append(f"| {d.rule.id} {d.rule.name} | {d.level_name} | {message} | {d.source} |")
            out.append("")
        if self.attempts:
            out += ["## Capture strategies", "", "| strategy | result | seconds |", "|---|---|---|"]
            for a in self.attempts:
                result = "ok"
                if a.error is not None:
                    first = (str(a.error).strip().splitlines() or [""])[0][:200]
                    result = f"{type(a.error).__name__}: {first}"
                out.append(f"| {a.strategy} | {result} | {a.seconds:.3f} |")
            out.append("")
        if self.decomposed:
            out += ["## Decomposed (no translation)", "", *(f"- `{d}`" for d in self.decomposed), ""]
        if self.timings:
            out += ["## Timings", "", "| stage | seconds |", "|---|---|"]
            out += [f"| {k} | {v:.3f} |" for k, v in self.timings.items()]
            out.append("")
        if self.model is not None:
            counts = collections.Counter(n.op_type for n in self.model.graph.all_nodes())
            out += ["## ONNX model", "",
                    f"- opset: {self.model.graph.opset_imports.get('', '?')}",
                    f"- nodes: {sum(counts.values())}, initializers: {len(self.model.graph.initializers)}",
                    f"- inputs: {', '.join(f'{v.name} {v.dtype} {v.shape}' for v in self.model.graph.inputs)}",
                    f"- outputs: {', '.join(f'{v.name} {v.dtype} {v.shape}' for v in self.model.graph.outputs)}",
                    "", "| op | count |", "|---|---|"]
            out += [f"| {op} | {n} |" for op, n in sorted(counts.items())]
            out.append("")
        if self.verification:
            out += ["## Verification against eager PyTorch", "",
                    "| # | output | torch dtype | onnx dtype | torch shape | onnx shape | max abs | "
                    "max rel | result |", "|---|---|---|---|---|---|---|---|---|"]
            out += [d.row() for d in self.verification]
            out.append("")
        if self.exported_program:
            out += ["## Exported program", "", "```", self.exported_program.strip(), "```", ""]
        return "\n".join(out)

    def write(self, directory: str) -> str:
        """Write the report into `directory`; return its path."""
        stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
        status = "success" if self.error is None else "failure"
        path = os.path.join(directory or ".", f"onnxport_report_{self.model_name}_{stamp}_{status}.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.render())
        return path
