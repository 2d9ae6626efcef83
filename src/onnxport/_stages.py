"""ExportRun: the bookkeeping of one export (timings, diagnostics, report, profile).

The pipeline in `_api.py` reads as its stages; everything recorded along the way (how long
each stage took, what capture did, what failed) is kept here, in one place, for the report,
the diagnostics and `profile=True`.
"""

from __future__ import annotations

import contextlib
import cProfile
import datetime
import io
import logging
import os
import pstats
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from onnxport.diagnostics import DiagnosticContext
from onnxport.errors import (
    CaptureError,
    OnnxExporterError,
    TranslationError,
    UnsupportedOperatorError,
    VerificationError,
)
from onnxport.verify.report import ExportReport

logger = logging.getLogger(__name__)


class ExportRun:
    """What one export records: stage timings, diagnostics, the report and the profile."""

    def __init__(self, name: str, diagnostics: DiagnosticContext, *, report: bool = False,
                 profile: bool = False, artifacts_dir: str | os.PathLike[str] = ".") -> None:
        self.name = name
        self.diagnostics = diagnostics
        self.report = ExportReport(name) if report else None
        self.profile = profile
        self.artifacts_dir = os.fspath(artifacts_dir)
        self.timings: dict[str, float] = {}
        self.capture_strategy: str | None = None
        self._profiler: cProfile.Profile | None = None
        self._start = time.perf_counter()

    # -- stages ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time one stage of the pipeline."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0

    @contextlib.contextmanager
    def profiling(self) -> Iterator[None]:
        """With profile=True, run the export under cProfile."""
        if not self.profile:
            yield
            return
        self._profiler = cProfile.Profile()
        self._profiler.enable()
        try:
            yield
        finally:
            self._profiler.disable()

    def captured(self, captured: Any, dynamic_shapes: Any) -> None:
        """Record what capture did: strategies tried, decompositions, a refined spec."""
        self.capture_strategy = captured.strategy
        self.timings["decompose"] = captured.decompose_seconds
        for attempt in captured.attempts:
            if attempt.error is not None:
                first = (str(attempt.error).strip().splitlines() or [""])[0]
                self.diagnostics.log(
                    "OPX001", logging.WARNING,
                    f"capture strategy '{attempt.strategy}' failed "
                    f"({type(attempt.error).__name__}: {first}); used '{captured.strategy}'")
        for op in captured.decomposed:
            self.diagnostics.log("OPX002", logging.INFO, f"{op} has no translation; it was decomposed")
        if captured.retraced:
            self.diagnostics.log("OPX003", logging.WARNING,
                                 "the whole program was re-traced by run_decompositions")
        if captured.refined_dynamic_shapes is not None:
            why = captured.refined_because.replace(
                "torch.export could not keep the input dimensions dynamic as dynamic_shapes "
                "asks:\n", "")
            lead = ("the model's code branches on dims dynamic_shapes asks to be dynamic (a "
                    "guard torch.export did not enforce); they were kept dynamic within the "
                    "sizes where it holds and the export retried"
                    if "stay dynamic within it" in why else
                    "the model's code pins dims dynamic_shapes asks to be dynamic (a guard "
                    "torch.export did not enforce); they were made static and the export retried"
                    if "recorded without enforcing" in why else
                    "torch.export rejected dynamic_shapes and suggested fixes; they were applied "
                    "and the export retried")
            message = (f"{lead}.\n{why}\nThe spec that worked:\n"
                       f"  dynamic_shapes={spec_source(captured.refined_dynamic_shapes)}\n"
                       f"(was {spec_source(dynamic_shapes)})")
            self.diagnostics.log("OPX010", logging.WARNING, message)
            warnings.warn(message, UserWarning, stacklevel=5)
        if captured.narrowed:
            message = (
                "torch.export capped the size of dims dynamic_shapes asks to be dynamic while "
                "capturing, because the model's code assumes it (a branch on the size, a "
                "position table of that many rows, a size it divides into one window, which "
                "torch specialises to 1): "
                + "; ".join(captured.narrowed)
                + ". The graph keeps the dims symbolic but was captured for these sizes only: "
                "above them the model's code may take another branch, or the graph fail in the "
                "runtime (export at another size, or make the branch size-independent)")
            self.diagnostics.log("OPX011", logging.WARNING, message)
            warnings.warn(message, UserWarning, stacklevel=5)
        if self.report is not None:
            self.report.attempts = captured.attempts
            self.report.decomposed = captured.decomposed
            self.report.exported_program = str(captured.exported_program)
            self.report.capture_strategy = captured.strategy
            if captured.refined_dynamic_shapes is not None:
                self.report.refined_dynamic_shapes = spec_source(captured.refined_dynamic_shapes)

    def dump_exported_program(self, program: torch.export.ExportedProgram) -> str:
        """dump_exported_program=True: save the ExportedProgram into artifacts_dir."""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        path = os.path.join(self.artifacts_dir, f"onnx_export_{stamp}.pt2")
        torch.export.save(program, path)
        logger.info("ExportedProgram saved to %s", path)
        return path

    def program(self, program: Any) -> Any:
        """Attach what the run knows to the ONNXProgram."""
        program.diagnostic_context = self.diagnostics
        program.capture_strategy = self.capture_strategy
        if self.report is not None:
            self.report.model = program.model
        self._program = program
        return program

    def verified(self, diffs: list[Any]) -> None:
        if self.report is not None:
            self.report.verification = diffs

    def check_warnings(self) -> None:
        """With warnings_as_errors, any warning diagnostic fails the export."""
        if self.diagnostics.options.warnings_as_errors and self.diagnostics.warnings:
            listed = "\n".join(f"  {d.rule.id} {d.rule.name}: {d.message}"
                               for d in self.diagnostics.warnings)
            raise OnnxExporterError(
                f"{len(self.diagnostics.warnings)} warning diagnostics with "
                f"warnings_as_errors=True:\n{listed}\n  fix: address them, or set "
                f"warnings_as_errors=False")

    # -- endings -----------------------------------------------------------------------------
    def succeeded(self) -> None:
        self.timings["total"] = time.perf_counter() - self._start
        program = getattr(self, "_program", None)
        if program is not None and self.profile:
            program.profile = dict(self.timings)
        self._write_profile()
        if self.report is not None:
            self.report.timings = self.timings
            self.report.diagnostics = self.diagnostics.diagnostics
            self.report.write(self.artifacts_dir)

    def failed(self, error: BaseException) -> None:
        self.timings["total"] = time.perf_counter() - self._start
        _diagnose_failure(self.diagnostics, error)
        if isinstance(error, OnnxExporterError):
            error.diagnostic_context = self.diagnostics  # type: ignore[attr-defined]
        self._write_profile()
        if self.report is not None:
            self.report.error = error
            self.report.timings = self.timings
            self.report.diagnostics = self.diagnostics.diagnostics
            if isinstance(error, OnnxExporterError) and getattr(error, "diffs", None):
                self.report.verification = error.diffs  # type: ignore[attr-defined]
            path = self.report.write(self.artifacts_dir)
            logger.warning("export failed; report written to %s", path)

    def _write_profile(self) -> None:
        if self._profiler is None:
            return
        text = io.StringIO()
        text.write(f"# onnxport export profile: {self.name}\n\nstage seconds\n")
        for stage, seconds in self.timings.items():
            text.write(f"{stage:<10} {seconds:.4f}\n")
        text.write("\n")
        pstats.Stats(self._profiler, stream=text).sort_stats("cumulative").print_stats(40)
        stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
        path = os.path.join(self.artifacts_dir, f"onnxport_profile_{self.name}_{stamp}.txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text.getvalue())
        if self.report is not None:
            self.report.profile_path = path
        logger.info("profile written to %s", path)


def spec_source(spec: Any) -> str:
    """A dynamic_shapes spec as Python source a user can paste (Dims with their ranges)."""
    if isinstance(spec, dict):
        return "{" + ", ".join(f"{k!r}: {spec_source(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, (list, tuple)):
        inner = ", ".join(spec_source(v) for v in spec)
        if isinstance(spec, tuple):
            return f"({inner}{',' if len(spec) == 1 else ''})"
        return f"[{inner}]"
    if type(spec).__name__ == "_DimHint":
        return f"Dim.{getattr(spec, 'type', spec).name}" if hasattr(spec, "type") else repr(spec)
    if hasattr(spec, "min") and hasattr(spec, "max") and isinstance(getattr(spec, "__name__", None), str):
        name = spec.__name__
        if type(spec).__name__ == "_DerivedDim" or "*" in name or "+" in name:
            return name
        args = [repr(name)]
        if spec.min not in (0, 2):
            args.append(f"min={spec.min}")
        if spec.max < 2**62:
            args.append(f"max={spec.max}")
        return f"Dim({', '.join(args)})"
    return repr(spec)


def _diagnose_failure(diagnostics: DiagnosticContext, error: BaseException) -> None:
    if isinstance(error, UnsupportedOperatorError) and error.missing:
        for m in error.missing:
            diagnostics.log("OPX004", logging.ERROR, f"{m.target} has no translation",
                            source=m.source, node=m.node)
    elif isinstance(error, TranslationError):
        diagnostics.log("OPX005", logging.ERROR, str(error).splitlines()[0],
                        source=error.source or "", node=error.node or "")
    elif isinstance(error, CaptureError):
        diagnostics.log("OPX006", logging.ERROR, str(error).splitlines()[0])
    elif isinstance(error, VerificationError):
        diagnostics.log("OPX007", logging.ERROR, str(error).splitlines()[0])
    else:
        diagnostics.log("OPX009", logging.ERROR, f"{type(error).__name__}: {error}")
