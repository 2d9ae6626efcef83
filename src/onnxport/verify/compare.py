"""compare_outputs: per-output differences between ONNX Runtime and eager PyTorch."""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch

from onnxport.errors import VerificationError
from onnxport.verify.inputs import flatten_outputs


@dataclasses.dataclass(frozen=True, slots=True)
class OutputDiff:
    """How one output of the ONNX model differs from PyTorch's."""

    index: int
    name: str
    expected_dtype: str
    actual_dtype: str
    expected_shape: tuple[int, ...]
    actual_shape: tuple[int, ...]
    max_abs_diff: float
    max_rel_diff: float
    passed: bool

    def row(self) -> str:
        """One markdown table row."""
        mark = "ok" if self.passed else "MISMATCH"
        return (f"| {self.index} | {self.name} | {self.expected_dtype} | {self.actual_dtype} | "
                f"{self.expected_shape} | {self.actual_shape} | {self.max_abs_diff:.3g} | "
                f"{self.max_rel_diff:.3g} | {mark} |")


def as_complex_like(actual: Any, expected: Any) -> Any:
    """`actual` as a complex tensor when it holds the real (..., 2) pairs of complex `expected`.

    ONNX models (onnxport's and torch.onnx's) carry complex tensors as real pairs in the last
    axis, and `ONNXProgram.__call__` returns them so; this turns one back for comparing with
    eager PyTorch. Anything else is returned unchanged.
    """
    if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)):
        return actual
    if not expected.is_complex() or actual.dtype not in (torch.float32, torch.float64):
        return actual
    if tuple(actual.shape) != (*expected.shape, 2):
        return actual
    if actual.numel() == 0:
        # view_as_complex wants a unit stride, which an empty tensor need not have.
        dtype = torch.complex128 if actual.dtype == torch.float64 else torch.complex64
        return torch.zeros(actual.shape[:-1], dtype=dtype)
    return torch.view_as_complex(actual.contiguous())


def compare_outputs(expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor],
                    names: Sequence[str] = (), *, rtol: float | None = None,
                    atol: float | None = None) -> list[OutputDiff]:
    """Compare flattened outputs with torch.testing.assert_close's default tolerances.

    A complex expected output is compared with the complex tensor whose real (..., 2) pairs
    the actual output holds (see `as_complex_like`).
    """
    diffs: list[OutputDiff] = []
    for i, (e, a) in enumerate(zip(expected, actual)):
        e = torch.as_tensor(e).detach().cpu()
        a = as_complex_like(torch.as_tensor(a), e)
        name = names[i] if i < len(names) else f"output {i}"
        passed = True
        max_abs = max_rel = 0.0
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError:
            passed = False
        if e.shape == a.shape and e.numel() and not e.dtype.is_complex:
            ef, af = e.double(), a.double()
            finite = torch.isfinite(ef) & torch.isfinite(af)
            if finite.any():
                delta = (ef - af).abs()[finite]
                max_abs = float(delta.max())
                max_rel = float((delta / ef.abs()[finite].clamp_min(1e-12)).max())
        diffs.append(OutputDiff(i, name, str(e.dtype), str(a.dtype), tuple(e.shape), tuple(a.shape),
                                max_abs, max_rel, passed))
    if len(expected) != len(actual):
        diffs.append(OutputDiff(len(diffs), "count", str(len(expected)), str(len(actual)), (), (),
                                float("inf"), float("inf"), False))
    return diffs


def verify_program(program: Any, model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None,
                   *, rtol: float | None = None, atol: float | None = None) -> list[OutputDiff]:
    """Run `program` in ONNX Runtime and `model` eagerly on the same inputs and compare.

    Raises:
        VerificationError: an output differs beyond tolerance; holds the diff table.
    """
    kwargs = dict(kwargs or {})
    if isinstance(model, torch.export.ExportedProgram):
        model = model.module()
    with torch.no_grad():
        expected = flatten_outputs(model(*args, **kwargs))
    names = [v.name for v in program.model.graph.outputs]
    approximate = _approximate_matmuls(program.model)
    if approximate:
        # The user chose int8 activations (OnnxRuntimeTarget's int4_accuracy_level): ORT's
        # approximation, not the export's. Check the export with the exact kernel and say how
        # far the chosen one moves the outputs.
        chosen = program(*args, **kwargs)
        with _exact_matmuls(program, approximate):
            actual = program(*args, **kwargs)
    else:
        actual = program(*args, **kwargs)
    diffs = compare_outputs(expected, actual, names, rtol=rtol, atol=atol)
    bad = [d for d in diffs if not d.passed]
    if approximate and not bad:
        moved = compare_outputs(expected, chosen, names, rtol=rtol, atol=atol)
        warnings.warn(
            f"verify: {len(approximate)} MatMulNBits nodes run with accuracy_level > 0 (int8 "
            "activations, OnnxRuntimeTarget(int4_accuracy_level=...)); the export was checked "
            "with accuracy_level 0 (exact). At the chosen level the outputs differ from eager by "
            f"up to {max((d.max_abs_diff for d in moved), default=0.0):.3g}.", UserWarning,
            stacklevel=3)
    if bad:
        header = ("| # | output | torch dtype | onnx dtype | torch shape | onnx shape | max abs | "
                  "max rel | result |\n|---|---|---|---|---|---|---|---|---|")
        table = "\n".join([header, *(d.row() for d in diffs)])
        report, where = first_wrong_node(program, args, kwargs)
        error = VerificationError(
            f"{len(bad)} of {len(diffs)} outputs differ from eager PyTorch:\n{table}\n{where}\n"
            "  fix: see docs/debugging.md (onnxport.verification.find_first_divergence)", diffs)
        error.divergence = report  # type: ignore[attr-defined]
        raise error
    return diffs


def first_wrong_node(program: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None
                     ) -> tuple[Any, str]:
    """(report, text) of `find_first_divergence` for a failed verification; (None, why not)
    when it cannot run (no exported program) or fails."""
    if getattr(program, "exported_program", None) is None:
        return None, "(no exported program: the first wrong node cannot be located)"
    from onnxport.verify.localize import find_first_divergence

    # The comparison's sessions hold the weights: drop the one the check used meanwhile.
    program.release()
    try:
        report = find_first_divergence(program, tuple(args), dict(kwargs or {}))
    except Exception as e:  # noqa: BLE001  (the mismatch stays the error reported)
        return None, f"(locating the first wrong node failed: {type(e).__name__}: {e})"
    return report, str(report)


def _approximate_matmuls(model: ir.Model) -> list[ir.Node]:
    """ONNX Runtime's MatMulNBits nodes that quantize their activations (accuracy_level > 0)."""
    found = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        level = node.attributes.get("accuracy_level")
        if node.op_type == "MatMulNBits" and level is not None and level.value:
            found.append(node)
    return found


@contextlib.contextmanager
def _exact_matmuls(program: Any, nodes: list[ir.Node]) -> Iterator[None]:
    """`program` with `nodes` at accuracy_level 0 while inside (the session rebuilt)."""
    levels = [node.attributes["accuracy_level"] for node in nodes]
    program.release()
    for node in nodes:
        node.attributes["accuracy_level"] = ir.AttrInt64("accuracy_level", 0)
    try:
        yield
    finally:
        for node, level in zip(nodes, levels):
            node.attributes["accuracy_level"] = level
        program.release()
