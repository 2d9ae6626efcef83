"""Run one fuzz case through an exporter and classify the outcome as exactly one of OUTCOMES.

A variant is (exporter, flavour, shapes): exporter "onnxport" or "torch.onnx", flavour
"dynamo" (dynamo=True) or "torchscript" (dynamo=False), shapes "static" or "dynamic" (the
dims of `case.dynamic`, dim 0 of every input and sometimes another: dynamic_shapes with
Dim.DYNAMIC, named Dims or strings as `case.dim_style` says, or dynamic_axes). The model is
exported into a folder that already holds a good model file at the destination path.

* match: exported; onnx.checker.check_model(full_check=True) passes; ONNX Runtime loads it
  and its outputs equal eager PyTorch's (also at a second batch size when dim 0 stayed
  dynamic in the model and the eager model runs at that size).
* typed: raised a typed error (the exporter's OnnxExporterError, TypeError, ValueError)
  whose message names the op, the module or the argument.
* runtime_rounding: exported; ONNX Runtime's outputs differ from eager's, but the same file
  run by onnx.reference.ReferenceEvaluator (the ONNX spec's semantics, in numpy) on the same
  inputs gives eager's outputs: the file is right and the difference is ONNX Runtime's
  arithmetic (e.g. its tanh rounds to 1.0 where torch and numpy give 1 - 2**-24, and a
  following `.long()` truncates the two to 1 and 0). Counted in its own column, not hidden.
* mismatch: exported, but computes something else (values, shapes, dtypes, output count),
  or a dim asked to be dynamic is static in the file and no warning names it. A dim made
  static with a warning naming it is a match; its detail says "made static (warned): ...".
* ort_invalid: exported a file the checker refuses or ONNX Runtime cannot load or run.
* untyped: raised another exception, or a typed one that names nothing.
* hang: did not finish within the per-case timeout (see `Worker`).
* clobbered: the folder changed on failure, or holds other files than the model on success.

Cases run in a worker process (`Worker`), killed and restarted on a timeout.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any

from tests.processes import WorkerProcess

OUTCOMES = ("match", "typed", "runtime_rounding", "mismatch", "ort_invalid", "untyped", "hang",
            "clobbered")
# Outcomes that do not fail the suite (besides "skip").
ACCEPTED = ("match", "typed", "runtime_rounding")
FLAVOURS = ("dynamo", "torchscript")
SHAPES = ("static", "dynamic")
EXPORTERS = ("onnxport", "torch.onnx")
_NAMES = re.compile(r"aten|prims?[:.]|onnx::|FuzzModule|generator\.py|\bx[01]\b|linear\d|conv\d|"
                    r"norm\d|buf\d|dynamic_shapes|dynamic_axes|opset|dtype|Half|Float|Long|Bool")


@dataclass
class Outcome:
    seed: int
    exporter: str
    flavour: str
    shapes: str
    outcome: str  # one of OUTCOMES, or "skip" (the eager model does not run)
    detail: str = ""
    seconds: float = 0.0

    @property
    def variant(self) -> str:
        return f"{self.exporter}/{self.flavour}/{self.shapes}"


def _other_batch(batch: int) -> int:
    return 2 if batch == 3 else 3


def _clone(x: Any) -> Any:
    import torch

    return torch.utils._pytree.tree_map(
        lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, x)


def eager(case: Any, args: tuple[Any, ...]) -> list[Any] | None:
    """The eager outputs (flattened), or None if the eager model fails or is not deterministic."""
    import torch

    try:
        with torch.no_grad():
            first = torch.utils._pytree.tree_leaves(_clone(case.module(*_clone(args))))
            second = torch.utils._pytree.tree_leaves(_clone(case.module(*_clone(args))))
    except Exception:  # noqa: BLE001  (the eager model does not run on these inputs)
        return None
    if not first or not all(isinstance(t, torch.Tensor) for t in first):
        return None
    for a, b in zip(first, second):
        if a.shape != b.shape or not torch.equal(a.nan_to_num(), b.nan_to_num()):
            return None
    return first


def _export(case: Any, exporter: str, flavour: str, shapes: str, path: str) -> None:
    import torch

    names = [f"x{i}" for i in range(len(case.args))]
    dynamic = shapes == "dynamic"
    kwargs: dict[str, Any] = {}
    if flavour == "dynamo":
        if dynamic:
            dims: dict[str, Any] = {}

            def dim(name: str) -> Any:
                if case.dim_style == "string":
                    return name
                if case.dim_style == "named":
                    return dims.setdefault(name, torch.export.Dim(name))
                return torch.export.Dim.DYNAMIC

            kwargs["dynamic_shapes"] = tuple({a: dim(n) for a, n in axes.items()}
                                             for axes in case.dynamic)
    else:
        kwargs["input_names"] = names
        if dynamic:
            kwargs["dynamic_axes"] = {n: dict(axes) for n, axes in zip(names, case.dynamic)}
    if exporter == "onnxport":
        import onnxport

        onnxport.export(case.module, case.args, path, dynamo=flavour == "dynamo", **kwargs)
    else:
        torch.onnx.export(case.module, case.args, path, dynamo=flavour == "dynamo", **kwargs)


def _typed(exporter: str) -> tuple[type[BaseException], ...]:
    if exporter == "onnxport":
        import onnxport

        return (onnxport.OnnxExporterError, TypeError, ValueError)
    import torch

    return (torch.onnx.errors.OnnxExporterError, TypeError, ValueError)


def _snapshot(folder: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(folder)):
        full = os.path.join(folder, name)
        out[name] = open(full, "rb").read() if os.path.isfile(full) else b"<dir>"
    return out


def _compare(actual: list[Any], expected: list[Any]) -> str:
    """'' when the ONNX outputs equal eager's, else what differs."""
    import numpy as np
    import torch

    if len(actual) != len(expected):
        return f"{len(actual)} outputs, eager has {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        e_np = e.detach().numpy()
        if tuple(a.shape) != tuple(e_np.shape):
            return f"output {k}: shape {tuple(a.shape)}, eager {tuple(e_np.shape)}"
        if a.dtype != e_np.dtype:
            return f"output {k}: dtype {a.dtype}, eager {e_np.dtype}"
        if e.dtype in (torch.float16, torch.float32):
            tol = 2e-2 if e.dtype == torch.float16 else 1e-3
            if not np.allclose(a.astype(np.float64), e_np.astype(np.float64), rtol=tol,
                               atol=tol, equal_nan=True):
                diff = np.nanmax(np.abs(a.astype(np.float64) - e_np.astype(np.float64)))
                return f"output {k}: values differ (max abs diff {diff:.3g})"
        elif not np.array_equal(a, e_np):
            return f"output {k}: values differ ({int((a != e_np).sum())} elements)"
    return ""


def _feed(session: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    import numpy as np

    inputs = session.get_inputs()
    by_name = {f"x{i}": a for i, a in enumerate(args)}
    if all(i.name in by_name for i in inputs):
        return {i.name: np.asarray(by_name[i.name].numpy()) for i in inputs}
    return {i.name: a.numpy() for i, a in zip(inputs, args)}


def _made_static(path: str, case: Any, warned: list[str]) -> tuple[list[str], list[str]]:
    """The dims asked to be dynamic that are static in the file: (warned of, silent).

    A warning names a dim when it says its axis ("dim 0", "axis 0") and its input (x0,
    "input 0") or its name ('batch')."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    by_name = {i.name: i for i in model.graph.input}
    loud, silent = [], []
    for k, axes in enumerate(case.dynamic):
        graph_input = by_name.get(f"x{k}") or (list(model.graph.input)[k]
                                               if k < len(model.graph.input) else None)
        if graph_input is None:
            continue
        dims = graph_input.type.tensor_type.shape.dim
        for axis, name in axes.items():
            if axis >= len(dims) or not dims[axis].HasField("dim_value"):
                continue
            said = [w for w in warned if re.search(rf"\b(dim|axis) {axis}\b", w)
                    and (re.search(rf"\bx{k}\b|input {k}\b", w) or f"'{name}'" in w)]
            (loud if said else silent).append(f"x{k} dim {axis} ({name!r})")
    return loud, silent


def _check_model(path: str, case: Any, expected: list[Any], shapes: str,
                 warned: list[str] | None = None) -> tuple[str, str]:
    """(outcome, detail) for a model that was exported to `path`."""
    import onnx
    import onnxruntime as ort

    try:
        onnx.checker.check_model(path, full_check=True)
    except Exception as e:  # noqa: BLE001
        return "ort_invalid", f"checker: {str(e).splitlines()[0][:300]}"
    made_static = ""
    if shapes == "dynamic":
        loud, silent = _made_static(path, case, warned or [])
        if silent:
            return "mismatch", (f"asked to be dynamic, static in the file and no warning names "
                                f"it: {', '.join(silent)}")
        if loud:
            made_static = f"made static (warned): {', '.join(loud)}"
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return "ort_invalid", f"ORT load: {str(e).splitlines()[0][:300]}"
    feeds = _feed(session, case.args)
    try:
        actual = session.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return "ort_invalid", f"ORT run: {str(e).splitlines()[0][:300]}"
    diff = _compare(actual, expected)
    if diff:
        return _reference_verdict(path, feeds, expected, diff)
    if shapes == "dynamic":
        dims = [i.shape[0] if i.shape else 1 for i in session.get_inputs()]
        if dims and all(not isinstance(d, int) for d in dims):
            batch = _other_batch(case.args[0].shape[0])
            other = case.inputs_with_batch(batch)
            expected2 = eager(case, other)
            if expected2 is not None:
                feeds2 = _feed(session, other)
                try:
                    actual2 = session.run(None, feeds2)
                except Exception as e:  # noqa: BLE001
                    return "mismatch", (f"dim 0 is dynamic but the model fails at batch {batch}: "
                                        f"{str(e).splitlines()[0][:200]}")
                diff = _compare(actual2, expected2)
                if diff:
                    return _reference_verdict(path, feeds2, expected2, f"at batch {batch}: {diff}")
    return "match", made_static


def _reference_verdict(path: str, feeds: dict[str, Any], expected: list[Any],
                       diff: str) -> tuple[str, str]:
    """ORT's outputs differ from eager's (`diff`): "runtime_rounding" if the ONNX reference
    evaluator gives eager's outputs on the same file and inputs, else "mismatch"."""
    try:
        from onnx.reference import ReferenceEvaluator

        reference = ReferenceEvaluator(path).run(None, feeds)
    except Exception as e:  # noqa: BLE001  (no verdict from the reference: a mismatch)
        return "mismatch", f"{diff} (onnx.reference failed: {type(e).__name__})"
    if _compare(list(reference), expected):
        return "mismatch", diff
    return "runtime_rounding", f"ORT {diff}; onnx.reference on the same file matches eager"


def run_variant(case: Any, expected: list[Any], exporter: str, flavour: str, shapes: str,
                good: bytes) -> Outcome:
    """Export `case` with one variant into a folder holding a good model, and classify."""
    start = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="onnxport_fuzz_")
    try:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as fh:
            fh.write(good)
        before = _snapshot(folder)
        error: BaseException | None = None
        sink = io.StringIO()
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught, \
                    contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                warnings.simplefilter("always")
                _export(case, exporter, flavour, shapes, path)
        except Exception as e:  # noqa: BLE001  (classified below)
            error = e
        warned = [str(w.message) for w in caught]
        after = _snapshot(folder)
        if error is not None:
            message = f"{type(error).__name__}: {str(error).strip()[:400]}"
            if after != before:
                return Outcome(case.seed, exporter, flavour, shapes, "clobbered",
                               f"failed and changed the folder ({sorted(after)}): {message}")
            if not isinstance(error, _typed(exporter)):
                return Outcome(case.seed, exporter, flavour, shapes, "untyped", message)
            if not _NAMES.search(str(error)):
                return Outcome(case.seed, exporter, flavour, shapes, "untyped",
                               f"typed but names no op or module: {message}")
            return Outcome(case.seed, exporter, flavour, shapes, "typed", message)
        extra = sorted(set(after) - {"model.onnx", "model.onnx.data"})
        if extra or after.get("model.onnx") == good:
            return Outcome(case.seed, exporter, flavour, shapes, "clobbered",
                           f"after a successful export the folder holds {sorted(after)}")
        outcome, detail = _check_model(path, case, expected, shapes, warned)
        return Outcome(case.seed, exporter, flavour, shapes, outcome, detail)
    except Exception:  # noqa: BLE001  (a harness failure is reported as untyped)
        return Outcome(case.seed, exporter, flavour, shapes, "untyped",
                       "harness: " + traceback.format_exc()[-400:])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        elapsed = time.perf_counter() - start
        _last_seconds[0] = elapsed


_last_seconds = [0.0]
_GOOD: list[bytes] = []


def good_model() -> bytes:
    """A valid model file (a small Linear), what the destination holds before each export."""
    if not _GOOD:
        import onnxport
        import torch

        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            onnxport.export(torch.nn.Linear(3, 2), (torch.rand(1, 3),), buf)
        _GOOD.append(buf.getvalue())
    return _GOOD[0]


def run_seed(seed: int, variants: list[tuple[str, str, str]]) -> list[Outcome]:
    """Every variant of one seed, in this process (no timeout)."""
    from tests.fuzz.generator import generate

    case = generate(seed)
    expected = eager(case, case.args)
    if expected is None:
        return [Outcome(seed, *v, "skip", "the eager model does not run") for v in variants]
    good = good_model()
    out = []
    for v in variants:
        outcome = run_variant(case, expected, *v, good)
        outcome.seconds = _last_seconds[0]
        out.append(outcome)
    return out


def _worker_main(conn: Any) -> None:
    import torch

    import logging

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for name in ("torch", "onnxscript", "onnx_ir", "onnxport"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    good_model()
    while True:
        request = conn.recv()
        if request is None:
            return
        seed, variant = request
        try:
            (result,) = run_seed(seed, [variant])
        except BaseException as e:  # noqa: BLE001
            result = Outcome(seed, *variant, "untyped", f"worker: {type(e).__name__}: {e}")
        conn.send(result)


class Worker:
    """A process running variants one at a time; killed and restarted when one hangs."""

    def __init__(self, timeout: float = 60.0, startup: float = 120.0) -> None:
        self.timeout = timeout
        # The first request also waits for the worker to start (imports, the good model).
        self._process = WorkerProcess(_worker_main, timeout, startup)

    def run(self, seed: int, variant: tuple[str, str, str]) -> Outcome:
        start = time.perf_counter()
        status, result = self._process.request((seed, variant))
        if status == "ok":
            return result
        if status == "died":
            return Outcome(seed, *variant, "untyped", "the worker process died",
                           time.perf_counter() - start)
        return Outcome(seed, *variant, "hang", f"no result within {self.timeout:.0f}s",
                       time.perf_counter() - start)

    def close(self) -> None:
        self._process.close()


def variants(exporters: tuple[str, ...] = ("onnxport",)) -> list[tuple[str, str, str]]:
    return [(e, f, s) for e in exporters for f in FLAVOURS for s in SHAPES]
