"""Validation: eager PyTorch vs ONNX Runtime on generated inputs, as a table."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import warnings
from typing import Any

import numpy as np
import torch

from onnxport.tasks.specs import float_dtype
from onnxport.tasks.ties import eager_with_onnx_ties

__all__ = ["Row", "check_runtime_dtype", "default_atol", "format_table",
           "locate_first_wrong_node", "validate_graph"]


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
    # On the first failing row of a file: the first wrong node (find_first_divergence).
    first_wrong_node: str = ""


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


def _unsupported_dtype(what: str, name: str, detail: str) -> Exception:
    from onnxport.tasks.errors import UnsupportedDtypeError

    others = "float16 or float32" if name == "bfloat16" else "float32"
    return UnsupportedDtypeError(
        f"ONNX Runtime's CPU provider cannot run {what} in {name} ({detail}), so the export "
        f"cannot be validated against eager PyTorch. Export with --dtype {others}, or pass "
        f"--no-validate (validate=False) to write the {name} files unvalidated, for a "
        f"runtime that has {name} kernels")


@functools.lru_cache(maxsize=None)
def _matmul_missing(name: str) -> str:
    """ONNX Runtime's error when its CPU provider has no MatMul in `name`; '' if it has one."""
    import onnxruntime
    from onnx import TensorProto, helper

    elem = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[name]
    values = [helper.make_tensor_value_info(n, elem, [1, 1]) for n in "xwy"]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "probe",
                              values[:2], values[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    try:
        onnxruntime.InferenceSession(model.SerializeToString(), options,
                                     providers=["CPUExecutionProvider"])
    except Exception as e:
        if type(e).__name__ == "NotImplemented":
            return str(e).strip().splitlines()[0]
    return ""


def check_runtime_dtype(dtype: torch.dtype | None) -> None:
    """Before any export: refuse a dtype ONNX Runtime's CPU provider has no MatMul for.

    Every task's graph multiplies matrices; when the CPU provider cannot (bfloat16 in
    onnxruntime 1.32), validation could not run, and saying so before the export saves
    the user its time.

    Raises:
        UnsupportedDtypeError: naming the dtype, ONNX Runtime's message and --no-validate.
    """
    if dtype not in (torch.float16, torch.bfloat16):
        return
    name = str(dtype).removeprefix("torch.")
    detail = _matmul_missing(name)
    if detail:
        raise _unsupported_dtype("MatMul", name, detail)


def locate_first_wrong_node(spec: Any, path: str | os.PathLike[str],
                            feeds: dict[str, torch.Tensor]) -> str:
    """The first wrong node of the file at `path` at the inputs `feeds`, as text.

    The module is captured again as the export captured it (onnxport's generic export, or
    the spec's own), so its FX graph names the file's values; the file itself (its graph and
    weights) is what runs in ONNX Runtime (`onnxport.verification.find_first_divergence`).
    """
    import onnx_ir as ir

    from onnxport.program import ONNXProgram
    from onnxport.verify.localize import find_first_divergence

    try:
        # (the export's own capture has given its warnings already)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            captured = spec.export_program(dynamic=True)
        program = ONNXProgram(ir.load(str(path)), captured.exported_program)
        report = find_first_divergence(program, tuple(feeds[n] for n in spec.input_names), {})
    except Exception as e:  # noqa: BLE001  (the mismatch row stays the result)
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"(locating the first wrong node failed: {type(e).__name__}: {detail})"[:300]
    return str(report)


def validate_graph(spec: Any, path: str | os.PathLike[str], *, atol: float,
                   shapes: list[dict[str, int]] | None = None,
                   seed: int = 0, locate: bool = True) -> list[Row]:
    """Compare the file at `path` with `spec`'s eager outputs at each of `shapes`.

    With `locate`, the first row over the tolerance also names the first wrong node of
    the graph at that shape (`Row.first_wrong_node`; `format_table` prints it).

    Raises:
        UnsupportedDtypeError: ONNX Runtime's CPU provider has no kernel for an op of the
            graph in the model's reduced-precision dtype (bfloat16 MatMul in onnxruntime
            1.2x and 1.3x). Other session failures are a mismatch row.
    """
    file = os.path.basename(path)
    try:
        session = _session(path)
    except Exception as e:  # ORT's NotImplemented, Fail, InvalidGraph, ...
        dtype = float_dtype(spec.module)
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if type(e).__name__ == "NotImplemented" and dtype in (torch.bfloat16, torch.float16):
            name = str(dtype).removeprefix("torch.")
            raise _unsupported_dtype(file, name, detail) from e
        return [Row(file, "-", "(session)", (), math.inf, atol, False,
                    f"ONNX Runtime cannot load {file}: {type(e).__name__}: {detail}"[:300])]
    graph_inputs = {i.name: i for i in session.get_inputs()}
    # Inputs with a default (an initializer of the same name) are fed when the task's
    # inputs name them (VITS's noise scales: 0 makes the graph deterministic).
    defaults = {i.name: i for i in session.get_overridable_initializers()}
    graph_outputs = [o.name for o in session.get_outputs()]
    rows: list[Row] = []
    for shape in shapes or spec.shapes:
        torch.manual_seed(seed)
        feeds = spec.make_inputs(shape)
        label = ",".join(f"{k}={v}" for k, v in shape.items())
        missing = sorted(set(graph_inputs) - set(feeds))
        fed = [*graph_inputs, *(n for n in defaults if n in feeds)]
        if missing:
            rows.append(Row(file, label, "(inputs)", (), math.inf, atol,
                            False, f"the graph wants inputs the task lacks: {missing}"))
            continue
        try:
            expected = spec.eager(feeds)
        except Exception as e:  # the model refuses the task's example inputs at this shape
            detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
            rows.append(Row(file, label, "(eager)", (), math.inf, atol, False,
                            f"eager PyTorch failed: {type(e).__name__}: {detail}"[:300]))
            continue
        try:
            actual = session.run(None, {n: _numpy(feeds[n]) for n in fed})
        except Exception as e:  # ORT errors are plain RuntimeErrors/Fail
            rows.append(Row(file, label, "(run)", (), math.inf, atol, False,
                            f"ONNX Runtime failed: {type(e).__name__}: {e}"[:300]))
            continue
        got = dict(zip(graph_outputs, actual))
        compared = _compare(file, label, spec.output_names, expected, got, atol)
        if not all(row.ok for row in compared):
            # A top-k over equal values keeps other candidates in eager and in ONNX
            # Runtime (tasks/ties.py): eager again with ONNX's lowest-index-first order.
            try:
                expected, ties = eager_with_onnx_ties(spec.eager, feeds)
            except Exception:  # noqa: BLE001  (the first comparison stands)
                ties = []
            if ties:
                note = "top-k tie, compared with ONNX's order: " + "; ".join(sorted(set(ties)))
                compared = [dataclasses.replace(row, note=row.note or note)
                            for row in _compare(file, label, spec.output_names, expected, got,
                                                atol)]
        for row in compared:
            rows.append(row)
            if locate and not row.ok:
                locate = False   # once per file: the first failing shape
                rows[-1] = dataclasses.replace(
                    rows[-1], first_wrong_node=locate_first_wrong_node(spec, path, feeds))
    return rows


def _compare(file: str, label: str, names: list[str], expected: dict[str, Any],
             got: dict[str, Any], atol: float) -> list[Row]:
    rows: list[Row] = []
    for name in names:
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
                      ("ok" if r.ok else "MISMATCH") + (f" ({r.note})" if r.note else "")))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        out.append("  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1])
    for r in rows:
        if r.first_wrong_node:
            out.append(f"{r.file} at {r.shape_label}: " + r.first_wrong_node)
    return "\n".join(out)
