"""The first wrong node, explained: where an ONNX model starts to differ from PyTorch.

Every value of the main graph is compared with PyTorch's (verify/intermediates.py) by its
*scaled error*, max |onnx - torch| / max |torch|: the error relative to the value's own
magnitude, so that large activations and small ones are judged alike (an element-wise
relative error explodes at values near zero, an absolute one at large values).

"Beyond float32 noise" means both of:

* the scaled error is above `THRESHOLD` (1e-3). float32 rounds each operation to 6e-8
  relative; a sum over K terms accumulates about sqrt(K) of those (1e-5 for K = 16k, far
  less in practice since rounding errors cancel), and errors in a value's inputs carry
  through at most in proportion. Every model in tests/verify stays below 1e-5 end to end; a
  wrong translation (a wrong activation, axis, constant) moves a value by 1e-2 or more.
* the node's own error is at least `JUMP` (10) times the largest error of its inputs: the
  node made the error, it did not just pass on (or amplify a little) an error from before.

The first value in graph order meeting both is the first wrong node. When errors only grow
gradually (no node jumps, but values end over the threshold), the first value over the
threshold is reported, marked as accumulated error.

Whether the divergence is there with ONNX Runtime's graph optimizations off (ORT_DISABLE_ALL)
tells an exporter bug (the graph as written computes the wrong value) from a change made by
the runtime's optimizer (a fusion that computes differently).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from onnxport.verify.intermediates import (
    DEFAULT_CHUNK_BYTES,
    Compared,
    VerificationInfo,
    compare_intermediates,
    fx_items,
    session_options,
)

__all__ = ["Divergence", "DivergenceReport", "find_first_divergence", "THRESHOLD", "JUMP"]

THRESHOLD = 1e-3
JUMP = 10.0

_META_FX_NODE = "pkg.onnxport.fx_node"
_META_MODULE = "pkg.onnxport.module"
_META_SOURCE = "pkg.onnxport.source"


@dataclasses.dataclass(frozen=True)
class InputError:
    """The error of one input of the diverging node (None: not compared, and why)."""

    name: str
    error: float | None
    note: str = ""

    def __str__(self) -> str:
        if self.error is None:
            return f"{self.name}: {self.note}"
        return f"{self.name}: {self.error:.2g}"


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first value whose error jumps beyond float32 noise, and where it comes from.

    Attributes:
        name: The value (its FX node; `<node>__<i>` for a tuple's items; for the
            TorchScript flavour, the traced graph's value).
        op: The ATen op (`aten.tanh.default`; `aten::tanh` for TorchScript).
        onnx_nodes: The ONNX nodes it became, as "name (OpType)".
        module_path: The module that called it (`model.layers.0.mlp.act_fn`), or "".
        source: The model's source line (file:line and code), or "".
        error: Its scaled error (max abs difference / max |PyTorch value|).
        max_abs_diff: Its largest absolute difference.
        inputs: Its inputs' errors.
        accumulated: True when no node jumps: the error grew gradually, this is the first
            value over the threshold.
        without_ort_optimizations: Whether it diverges with ORT_DISABLE_ALL as well (None:
            not checked).
    """

    name: str
    op: str
    onnx_nodes: tuple[str, ...]
    module_path: str
    source: str
    error: float
    max_abs_diff: float
    inputs: tuple[InputError, ...]
    accumulated: bool
    without_ort_optimizations: bool | None

    @property
    def cause(self) -> str:
        """"exporter" (wrong with ORT's optimizations off too), "onnxruntime optimizer"
        (right without them), or "unknown"."""
        if self.without_ort_optimizations is None:
            return "unknown"
        return "exporter" if self.without_ort_optimizations else "onnxruntime optimizer"

    def __str__(self) -> str:
        where = self.module_path or "(top level)"
        lines = [f"first wrong node: {self.name} ({self.op}) in module {where}",
                 f"  source: {self.source or '(unknown)'}",
                 f"  onnx nodes: {', '.join(self.onnx_nodes) or '(none found)'}",
                 f"  error: {self.error:.3g} (max abs diff {self.max_abs_diff:.3g}); inputs: "
                 + (", ".join(str(i) for i in self.inputs) or "(none)")]
        if self.accumulated:
            lines.append("  no single node jumps: the error accumulates; this is the first "
                         f"value over {THRESHOLD:g}")
        if self.cause == "exporter":
            lines.append("  also wrong with ONNX Runtime's graph optimizations off: the "
                         "exported graph computes it wrongly (an exporter or translation bug)")
        elif self.cause == "onnxruntime optimizer":
            lines.append("  right with ONNX Runtime's graph optimizations off "
                         "(ORT_DISABLE_ALL): ONNX Runtime's optimizer changes it")
        return "\n".join(lines)


@dataclasses.dataclass
class DivergenceReport:
    """What `find_first_divergence` found.

    Attributes:
        first: The first wrong node, or None when no value diverges.
        outputs: The graph outputs' VerificationInfo from a plain run (no values exposed).
        outputs_diverge: Whether a graph output is over the threshold in that run.
        outputs_diverge_without_ort_optimizations: The same with ORT_DISABLE_ALL (None:
            not checked).
        compared: The number of values compared.
        not_compared: Values without an ONNX value of their name (the optimizer removed or
            renamed them), not compared.
        values: Every comparison, in graph order (name -> scaled error).
    """

    first: Divergence | None
    outputs: list[VerificationInfo]
    outputs_diverge: bool
    outputs_diverge_without_ort_optimizations: bool | None
    compared: int
    not_compared: list[str]
    values: dict[str, float]

    def __str__(self) -> str:
        if self.first is not None:
            text = str(self.first)
        elif self.outputs_diverge and self.outputs_diverge_without_ort_optimizations is False:
            text = ("the outputs diverge only with ONNX Runtime's graph optimizations on, and no "
                    "intermediate value does once exposed (exposing values keeps ONNX Runtime "
                    "from fusing them): ONNX Runtime's optimizer changes the result")
        elif self.outputs_diverge:
            text = "the outputs diverge, but no compared intermediate value does"
        else:
            text = f"no value diverges beyond float32 noise ({self.compared} compared)"
        if self.not_compared:
            text += (f"\n  {len(self.not_compared)} values not compared (fused or renamed by "
                     "the optimizer)")
        return text


def _jumps(compared: list[Compared]) -> tuple[Compared | None, bool]:
    errors = {c.info.name: c.error for c in compared}
    first_over: Compared | None = None
    for c in compared:
        if not c.error > THRESHOLD:
            continue
        before = max((errors.get(i, 0.0) for i in c.inputs), default=0.0)
        exact = not (c.info.expected_dtype.is_floating_point or c.info.expected_dtype.is_complex)
        if exact and 0.0 < before <= THRESHOLD:
            continue   # a comparison or index flipped by float32 rounding of its inputs
        first_over = first_over or c
        if c.error >= JUMP * before:
            return c, False
    return first_over, first_over is not None


def _input_errors(c: Compared, errors: Mapping[str, float], kinds: Mapping[str, str],
                  shown: Any) -> tuple[InputError, ...]:
    out = []
    for name in c.inputs:
        if name in errors:
            out.append(InputError(shown(name), errors[name]))
        else:
            out.append(InputError(shown(name), None, kinds.get(name, "not compared")))
    return tuple(out)


def _onnx_nodes(program: Any, fx_name: str, value_name: str) -> tuple[list[str], str, str]:
    """The ONNX nodes an FX node became (metadata), its module path and source."""
    nodes, module, source = [], "", ""
    for node in program.model.graph.all_nodes() if hasattr(program.model.graph, "all_nodes") \
            else program.model.graph:
        meta = node.metadata_props
        produced = any(o.name == value_name for o in node.outputs)
        if meta.get(_META_FX_NODE) == fx_name or (produced and not meta.get(_META_FX_NODE)):
            nodes.append(f"{node.name or '?'} ({node.op_type})")
            module = module or meta.get(_META_MODULE, "")
            source = source or meta.get(_META_SOURCE, "")
    return nodes, module, source


def _dynamo_inputs(node: torch.fx.Node) -> tuple[str, ...]:
    names = []
    for n in node.all_input_nodes:
        if n.target is operator.getitem and isinstance(n.args[1], int):
            names.append(f"{n.args[0].name}__{n.args[1]}")
        else:
            names.append(n.name)
    return tuple(names)


def _placeholder_kinds(exported_program: torch.export.ExportedProgram) -> dict[str, str]:
    kinds = torch.export.graph_signature.InputKind
    words = {kinds.USER_INPUT: "graph input (exact)", kinds.PARAMETER: "weight (exact)",
             kinds.BUFFER: "buffer (exact)", kinds.CONSTANT_TENSOR: "constant (exact)"}
    return {s.arg.name: words.get(s.kind, "input") for s in
            exported_program.graph_signature.input_specs if hasattr(s.arg, "name")}


def _plain_outputs(program: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                   expected: Sequence[torch.Tensor], level: str) -> list[VerificationInfo]:
    from onnxport.verify.intermediates import _Sessions

    runtime = program.runtime_options
    base = runtime.session_options if runtime is not None else None
    providers = runtime.execution_providers if runtime is not None else None
    sessions = _Sessions(program, session_options(level, base), providers)
    try:
        names = [str(v.name) for v in program.model.graph.outputs]
        got = sessions.run(program._feed(args, kwargs), names)
    finally:
        sessions.close()
    return [VerificationInfo.from_tensors(n, e, got[n]) for n, e in zip(names, expected)]


def find_first_divergence(program_or_model: Any, args: Sequence[Any] | None = None,
                          kwargs: Mapping[str, Any] | None = None, *, dynamo: bool = True,
                          chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                          **export_options: Any) -> DivergenceReport:
    """Find the first value in graph order that diverges from PyTorch beyond float32 noise.

    Args:
        program_or_model: An ONNXProgram from `export(..., dynamo=True)`; or, with
            `dynamo=False`, the model itself (it is traced and translated as
            `export(..., dynamo=False)` does, with `export_options` such as opset_version).
        args, kwargs: The inputs (dynamic dims may take other sizes than the example's);
            None: the exported program's example inputs.
        dynamo: False for the TorchScript flavour.
        chunk_bytes: Values fetched from ONNX Runtime per run (memory bound).

    Returns:
        A DivergenceReport; `report.first` is the first wrong node (None if none), with its
        ATen op, ONNX nodes, module path, source line, its inputs' errors, and whether it
        diverges with ONNX Runtime's graph optimizations off (`first.cause`).
    """
    if not dynamo:
        from onnxport.verify.torchscript_values import torchscript_case

        case = torchscript_case(program_or_model, args, kwargs, **export_options)
    else:
        if export_options:
            raise TypeError(f"find_first_divergence: {sorted(export_options)} apply to "
                            "dynamo=False only")
        case = _DynamoCase(program_or_model, args, kwargs)
    return _localize(case, chunk_bytes)


class _DynamoCase:
    """An ONNXProgram with its ExportedProgram: FX values, FX names."""

    def __init__(self, program: Any, args: Any, kwargs: Any) -> None:
        from onnxport.verify.inputs import example_inputs, own_program

        self.program = own_program(program)
        self.args, self.kwargs = example_inputs(program, args, kwargs)
        self.kinds = _placeholder_kinds(program.exported_program)

    def items(self, wanted: set[str] | None = None) -> Any:
        for item in fx_items(self.program, self.args, self.kwargs):
            item.inputs = _dynamo_inputs(item.key)
            if wanted is None or item.name in wanted:
                yield item

    def shown(self, name: str) -> str:
        return name

    def expected_outputs(self) -> list[torch.Tensor]:
        from onnxport.verify.inputs import flatten_outputs

        with torch.no_grad():
            return flatten_outputs(
                self.program.exported_program.module()(*self.args, **self.kwargs))

    def describe(self, c: Compared) -> tuple[str, str, tuple[str, ...], str, str]:
        from onnxport.translate.translator import node_context

        node = c.key
        nodes, module, source = _onnx_nodes(self.program, node.name, c.info.name)
        if not (module and source):
            ctx = node_context(node)
            module, source = module or ctx.module_path, source or ctx.source
        return c.info.name, str(node.target), tuple(nodes), module, source


def _localize(case: Any, chunk_bytes: int) -> DivergenceReport:
    program = case.program
    compared, missing = _run(case, case.items(), "default", chunk_bytes)
    errors = {c.info.name: c.error for c in compared}
    expected = case.expected_outputs()
    outputs = _plain_outputs(program, case.args, case.kwargs, expected, "default")
    outputs_diverge = any(_output_error(i, e) > THRESHOLD for i, e in zip(outputs, expected))
    found, accumulated = _jumps(compared)
    first = None
    without: bool | None = None
    if found is not None:
        wanted = {found.info.name, *found.inputs}
        again, _ = _run(case, case.items(wanted), "off", chunk_bytes)
        again_errors = {c.info.name: c.error for c in again}
        without = again_errors.get(found.info.name, math.inf) > THRESHOLD
        name, op, nodes, module, source = case.describe(found)
        first = Divergence(name, op, nodes, module, source, found.error,
                           found.info.max_abs_diff, _input_errors(found, errors, case.kinds, case.shown),
                           accumulated, without)
    outputs_off: bool | None = None
    if found is None and outputs_diverge:
        plain_off = _plain_outputs(program, case.args, case.kwargs, expected, "off")
        outputs_off = any(_output_error(i, e) > THRESHOLD for i, e in zip(plain_off, expected))
    elif found is not None:
        outputs_off = without
    return DivergenceReport(first, outputs, outputs_diverge, outputs_off, len(compared),
                            missing, errors)


def _output_error(info: VerificationInfo, expected: torch.Tensor) -> float:
    """The scaled error of an output from its info (max abs diff / max |expected|)."""
    if info.max_abs_diff == 0.0:
        return 0.0
    if not (expected.is_floating_point() or expected.is_complex()):
        return 1.0
    e = expected.detach()
    e = torch.view_as_real(e) if e.is_complex() else e
    finite = e[e.isfinite()]
    magnitude = float(finite.abs().max()) if finite.numel() else 0.0
    return info.max_abs_diff / max(magnitude, 1e-30)


def _run(case: Any, items: Any, level: str, chunk_bytes: int) -> tuple[list[Compared], list[str]]:
    program = case.program
    runtime = program.runtime_options
    base = runtime.session_options if runtime is not None else None
    providers = runtime.execution_providers if runtime is not None else None
    return compare_intermediates(program, program._feed(case.args, case.kwargs), items,
                                 options=session_options(level, base), providers=providers,
                                 chunk_bytes=chunk_bytes)
