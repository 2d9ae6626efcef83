"""Validation: eager PyTorch vs ONNX Runtime on generated inputs, as a table."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np
import torch

__all__ = ["Row", "default_atol", "format_table", "validate_graph"]


@dataclasses.dataclass(frozen=True)
class Row:
    """One compared output at one shape."""

    file: str
    shape_label: str
    output: str
    shape: tuple[int, ...]
    max_abs_diff: float
    atol: float
    ok: bool
    note: str = ""


def default_atol(dtype: torch.dtype) -> float:
    """The default absolute tolerance for outputs computed in `dtype`."""
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-4)


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.detach().cpu().numpy()


def _session(path: str | os.PathLike[str]) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _float_dtype(module: torch.nn.Module) -> torch.dtype:
    return next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)


def validate_graph(spec: Any, path: str | os.PathLike[str], *, atol: float,
                   shapes: list[dict[str, int]] | None = None,
                   seed: int = 0) -> list[Row]:
    """Compare the file at `path` with `spec`'s eager outputs at each of `shapes`.

    Raises:
        UnsupportedDtypeError: ONNX Runtime's CPU provider has no kernel for an op of the
            graph in the model's reduced-precision dtype (bfloat16 MatMul in onnxruntime
            1.2x and 1.3x). Other session failures are a mismatch row.
    """
    file = os.path.basename(path)
    try:
        session = _session(path)
    except Exception as e:  # ORT's NotImplemented, Fail, InvalidGraph, ...
        dtype = _float_dtype(spec.module)
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if type(e).__name__ == "NotImplemented" and dtype in (torch.bfloat16, torch.float16):
            from onnxport.tasks.errors import UnsupportedDtypeError

            name = str(dtype).removeprefix("torch.")
            others = "float16 or float32" if dtype == torch.bfloat16 else "float32"
            raise UnsupportedDtypeError(
                f"ONNX Runtime's CPU provider cannot run {file} in {name} ({detail}), so it "
                f"cannot be validated against eager PyTorch. Export with --dtype {others}, "
                f"or pass --no-validate (validate=False) to write the {name} files "
                f"unvalidated, for a runtime that has {name} kernels") from e
        return [Row(file, "-", "(session)", (), math.inf, atol, False,
                    f"ONNX Runtime cannot load {file}: {type(e).__name__}: {detail}"[:300])]
    graph_inputs = {i.name: i for i in session.get_inputs()}
    graph_outputs = [o.name for o in session.get_outputs()]
    rows: list[Row] = []
    for shape in shapes or spec.shapes:
        torch.manual_seed(seed)
        feeds = spec.make_inputs(shape)
        label = ",".join(f"{k}={v}" for k, v in shape.items())
        missing = sorted(set(graph_inputs) - set(feeds))
        if missing:
            rows.append(Row(file, label, "(inputs)", (), math.inf, atol,
                            False, f"the graph wants inputs the task lacks: {missing}"))
            continue
        expected = spec.eager(feeds)
        try:
            actual = session.run(None, {n: _numpy(feeds[n]) for n in graph_inputs})
        except Exception as e:  # ORT errors are plain RuntimeErrors/Fail
            rows.append(Row(file, label, "(run)", (), math.inf, atol, False,
                            f"ONNX Runtime failed: {type(e).__name__}: {e}"[:300]))
            continue
        got = dict(zip(graph_outputs, actual))
        for name in spec.output_names:
            if name not in got:
                rows.append(Row(file, label, name, (), math.inf, atol, False,
                                "missing from the graph's outputs"))
                continue
            e = _numpy(expected[name]).astype(np.float64)
            a = np.asarray(got[name]).astype(np.float64)
            if a.shape != e.shape:
                rows.append(Row(file, label, name, tuple(a.shape), math.inf,
                                atol, False, f"shape differs: eager {tuple(e.shape)}"))
                continue
            diff = float(np.max(np.abs(a - e))) if a.size else 0.0
            finite = bool(np.array_equal(np.isfinite(a), np.isfinite(e)))
            if not math.isfinite(diff):
                both = np.isfinite(a) & np.isfinite(e)
                diff = float(np.max(np.abs(a[both] - e[both]))) if both.any() else 0.0
            rows.append(Row(file, label, name, tuple(a.shape), diff, atol,
                            finite and diff <= atol,
                            "" if finite else "non-finite values differ"))
    return rows


def format_table(rows: list[Row]) -> str:
    """A fixed-width table: file, inputs, output, shape, max abs diff, tolerance, ok."""
    header = ("file", "inputs", "output", "shape", "max abs diff", "tolerance", "ok")
    lines = [header]
    for r in rows:
        lines.append((r.file, r.shape_label, r.output, "x".join(map(str, r.shape)) or "-",
                      f"{r.max_abs_diff:.2e}", f"{r.atol:.0e}",
                      "ok" if r.ok else "MISMATCH" + (f" ({r.note})" if r.note else "")))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        out.append("  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1])
    return "\n".join(out)
