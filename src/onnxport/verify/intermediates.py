"""Intermediate values of an ONNX model against PyTorch's, value by value, in graph order.

The PyTorch side runs the exported program's FX graph node by node (each value freed after
its last use); the ONNX side runs ONNX Runtime with the values to compare added as graph
outputs. Values are fetched in chunks of bounded size (`chunk_bytes`): PyTorch's values of a
chunk are held until ONNX Runtime has produced the same values, compared, then dropped, so
the memory on top of the model's own stays about twice the chunk.

onnxport names ONNX values after their FX nodes (`<name>__<i>` for the outputs of a tuple);
a value the optimizer removed (fused, folded into a weight) or that aliases another has no
ONNX value of that name, and a value the optimizer kept the name of but gave another layout
(another rank or static dim than PyTorch's) holds something else: neither can be compared,
both are listed as such, never as a mismatch.
Values computed from weights alone are fetched in sessions of their own, so exposing them
never keeps ONNX Runtime from fusing them into their consumers (e.g. DequantizeLinear +
MatMul into MatMulNBits) in the sessions that compare the values that depend on the inputs.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir
import torch

__all__ = ["VerificationInfo", "Compared", "compare_intermediates", "fx_values",
           "DEFAULT_CHUNK_BYTES"]

_ROWS_SUFFIX = "__rows"
# Values fetched from ONNX Runtime per session run (PyTorch holds as much again).
DEFAULT_CHUNK_BYTES = 256 * 1024**2
# The bins of the difference histograms (torch.onnx 2.13's).
_BINS = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 1e6)
_EPS = 1e-7


@dataclasses.dataclass(frozen=True)
class VerificationInfo:
    """How one value of the ONNX program differs from PyTorch's (torch.onnx 2.13's fields).

    Attributes:
        name: The value's name: its FX node (`<node>__<i>` for a tuple's items), or the
            graph output's name.
        max_abs_diff: max |actual - expected|.
        max_rel_diff: max |actual - expected| / (|expected| + 1e-7).
        abs_diff_hist: (counts, bin edges) of the absolute differences.
        rel_diff_hist: (counts, bin edges) of the relative differences.
        expected_dtype: PyTorch's dtype.
        actual_dtype: The ONNX value's dtype.
    """

    name: str
    max_abs_diff: float
    max_rel_diff: float
    abs_diff_hist: tuple[torch.Tensor, torch.Tensor]
    rel_diff_hist: tuple[torch.Tensor, torch.Tensor]
    expected_dtype: torch.dtype
    actual_dtype: torch.dtype

    @classmethod
    def from_tensors(cls, name: str, expected: torch.Tensor | float | int | bool,
                     actual: torch.Tensor | float | int | bool) -> VerificationInfo:
        """Compare two tensors (or Python numbers). Empty tensors, or shapes that differ
        in their element count, give infinite differences."""
        expected = expected if isinstance(expected, torch.Tensor) else torch.tensor(expected)
        actual = actual if isinstance(actual, torch.Tensor) else torch.tensor(actual)
        abs_diff, rel_diff = _differences(expected, actual)
        bins = torch.tensor(_BINS, dtype=torch.float32)
        return cls(name=name,
                   max_abs_diff=float(abs_diff.max()) if abs_diff.numel() else math.inf,
                   max_rel_diff=float(rel_diff.max()) if rel_diff.numel() else math.inf,
                   abs_diff_hist=torch.histogram(abs_diff.float(), bins=bins),
                   rel_diff_hist=torch.histogram(rel_diff.float(), bins=bins),
                   expected_dtype=expected.dtype, actual_dtype=actual.dtype)

    def asdict(self) -> dict[str, Any]:
        """A JSON-friendly dict (histograms as lists, dtypes as strings)."""
        return {"name": self.name, "max_abs_diff": self.max_abs_diff,
                "max_rel_diff": self.max_rel_diff,
                "abs_diff_hist": [self.abs_diff_hist[0].tolist(), self.abs_diff_hist[1].tolist()],
                "rel_diff_hist": [self.rel_diff_hist[0].tolist(), self.rel_diff_hist[1].tolist()],
                "expected_dtype": str(self.expected_dtype),
                "actual_dtype": str(self.actual_dtype)}


def _as_comparable(expected: torch.Tensor, actual: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Both as float64 tensors of one shape, or None when they cannot be lined up."""
    expected = expected.detach().cpu()
    actual = actual.detach().cpu()
    if expected.is_complex():
        expected = torch.view_as_real(expected.resolve_conj())
    if actual.is_complex():
        actual = torch.view_as_real(actual.resolve_conj())
    if expected.numel() == 0 or actual.numel() == 0 or expected.numel() != actual.numel():
        return None
    # A 0-d PyTorch value (a SymInt's size) may be a 1-element ONNX tensor, and back.
    actual = actual.reshape(expected.shape)
    return expected.to(torch.float64), actual.to(torch.float64)


def _differences(expected: torch.Tensor, actual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pair = _as_comparable(expected, actual)
    if pair is None:
        inf = torch.tensor([math.inf])
        return inf, inf
    e, a = pair
    abs_diff = (e - a).abs()
    # NaN where both are NaN is agreement; where one is, infinite.
    both_nan = e.isnan() & a.isnan()
    abs_diff = torch.where(both_nan, torch.zeros_like(abs_diff), abs_diff.nan_to_num(nan=math.inf))
    same_inf = (e == a) & e.isinf()
    abs_diff = torch.where(same_inf, torch.zeros_like(abs_diff), abs_diff)
    return abs_diff, abs_diff / (e.abs().nan_to_num(nan=0.0, posinf=0.0) + _EPS)


def scaled_error(expected: torch.Tensor, actual: torch.Tensor) -> float:
    """The largest difference relative to the value's magnitude (its largest finite |x|).

    0 for equal values; 1 and above means the values are unrelated. Integer and bool
    values are compared exactly: any difference is 1. float32 rounding gives about 1e-7
    per operation and grows with the length of sums (1e-6..1e-5 after a MatMul over
    thousands of terms); a wrong translation gives 1e-2 or more.
    """
    pair = _as_comparable(expected, actual)
    if pair is None:
        return math.inf
    e, a = pair
    exact = not (expected.is_floating_point() or expected.is_complex())
    if exact:
        return 0.0 if torch.equal(e, a) else 1.0
    abs_diff, _ = _differences(e, a)
    worst = float(abs_diff.max())
    if worst == 0.0:
        return 0.0
    finite = e[e.isfinite()]
    magnitude = float(finite.abs().max()) if finite.numel() else 0.0
    return worst / max(magnitude, torch.finfo(expected.dtype).tiny
                       if expected.is_floating_point() else 1e-30)


@dataclasses.dataclass
class Compared:
    """One value compared: its info, scaled error and where it came from."""

    info: VerificationInfo
    error: float
    key: Any
    inputs: tuple[str, ...]
    order: int


@dataclasses.dataclass
class _Item:
    name: str            # the name reported (FX name, `<name>__<i>`, or output name)
    onnx_name: str       # the ONNX value holding it
    expected: torch.Tensor
    key: Any             # the FX node (or TorchScript node) it came from
    inputs: tuple[str, ...]
    constant: bool       # computed from weights alone
    order: int


class _Sessions:
    """ONNX Runtime sessions of one model with chosen values as extra graph outputs.

    The model is serialized once (to a temporary folder with external data when large); each
    session adds its outputs to that proto and is created from it.
    """

    def __init__(self, program: Any, session_options: Any, providers: Sequence[Any] | None) -> None:
        self.program = program
        self.session_options = session_options
        self.providers = providers
        self.values = _values_by_name(program.model.graph)
        self.carried = _carried_as_rows(self.values)
        # FuseRowsPass's 2-D values whose metadata a later rewrite dropped keep the name
        # `<name>__rows`: compared reshaped to PyTorch's shape (same element order).
        for name in self.values:
            original = name.removesuffix(_ROWS_SUFFIX)
            if name.endswith(_ROWS_SUFFIX) and original not in self.values \
                    and original not in self.carried:
                self.carried[original] = (name, None)
        model, self._tempdir = program._session_model()
        if isinstance(model, bytes):
            self.proto = onnx.ModelProto.FromString(model)
            self.folder = None
        else:
            self.proto = onnx.load(model, load_external_data=False)
            self.folder = os.path.dirname(model)
        self.base_outputs = len(self.proto.graph.output)

    def close(self) -> None:
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def has(self, name: str) -> bool:
        return name in self.values or name in self.carried

    def declared_shape(self, name: str) -> ir.Shape | None:
        """The shape the model declares for value `name` (as PyTorch's, for carried rows)."""
        if name in self.values:
            return self.values[name].shape
        shape = self.carried[name][1]
        return None if shape is None else ir.Shape(shape)

    def run(self, feed: Mapping[str, Any], names: Sequence[str]) -> dict[str, torch.Tensor]:
        """The named values (and nothing else) of one run of the model on `feed`."""
        from onnxport.program import _run_session

        wanted: list[str] = []
        for name in names:
            stored = self.carried[name][0] if name not in self.values else name
            if stored not in wanted:
                wanted.append(stored)
        graph = self.proto.graph
        outputs = [o.name for o in graph.output]
        del graph.output[:]
        for stored in wanted:
            graph.output.append(_value_info(self.values[stored]))
        try:
            session = self._session()
        finally:
            del graph.output[:]
            graph.output.extend(_value_info(self.values[n]) if n in self.values
                                else onnx.ValueInfoProto(name=n) for n in outputs)
        results = dict(zip(wanted, _run_session(session, dict(feed))))
        del session
        got: dict[str, torch.Tensor] = {}
        for name in names:
            if name in self.values:
                got[name] = results[name]
            else:
                stored, shape = self.carried[name]
                got[name] = results[stored] if shape is None else results[stored].reshape(shape)
        return got

    def _session(self) -> Any:
        import onnxruntime as ort

        options = self.session_options
        providers = list(self.providers or ["CPUExecutionProvider"])
        if self.folder is None:
            return ort.InferenceSession(self.proto.SerializeToString(), sess_options=options,
                                        providers=providers)
        path = os.path.join(self.folder, "verify_chunk.onnx")
        onnx.save(self.proto, path)
        try:
            return ort.InferenceSession(path, sess_options=options, providers=providers)
        finally:
            os.remove(path)


def _value_info(value: ir.Value) -> onnx.ValueInfoProto:
    if value.type is None:
        return onnx.ValueInfoProto(name=value.name)
    return ir.serde.serialize_value(value)


def _values_by_name(graph: ir.Graph) -> dict[str, ir.Value]:
    from onnxport.program import _values_by_name as by_name

    return by_name(graph)


def _carried_as_rows(values: Mapping[str, ir.Value]) -> dict[str, tuple[str, list[int]]]:
    from onnxport.program import _carried_as_rows as carried

    return carried(values)


def _same_layout(declared: ir.Shape | None, expected: torch.Tensor) -> bool:
    """Whether a value declared with `declared` can hold PyTorch's `expected`: the same rank
    and the same static dims. An optimizer pass may keep a name on a value of another
    layout (e.g. the keys of grouped-query attention before their heads are repeated):
    that value is not comparable. A 0-d PyTorch value may be a 1-element ONNX one."""
    if declared is None:
        return True
    if expected.is_complex():
        expected = torch.view_as_real(expected)
    if expected.dim() == 0:
        return all(isinstance(d, ir.SymbolicDim) or int(d) == 1 for d in declared)
    if len(declared) != expected.dim():
        return False
    return all(isinstance(d, ir.SymbolicDim) or int(d) == n
               for d, n in zip(declared, expected.shape))


def session_options(level: str = "default", base: Any = None) -> Any:
    """ONNX Runtime session options: the program's (`base`), with graph optimizations
    "default" (as given, ORT_ENABLE_ALL unless set) or "off" (ORT_DISABLE_ALL)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if base is not None:
        for attr in ("intra_op_num_threads", "inter_op_num_threads", "execution_mode",
                     "graph_optimization_level", "log_severity_level"):
            setattr(options, attr, getattr(base, attr))
        # Session config entries (e.g. session.qdq_matmulnbits_accuracy_level) are not
        # readable from SessionOptions; a base is used as given when optimizations stay on.
        if level == "default":
            return base
    if level == "off":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def compare_intermediates(program: Any, feed: Mapping[str, Any], items: Iterable[_Item], *,
                          options: Any = None, providers: Sequence[Any] | None = None,
                          chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                          ) -> tuple[list[Compared], list[str]]:
    """Compare `items` (lazily produced, in graph order) with ONNX Runtime's values.

    Returns the comparisons in graph order, and the names of the values that have no ONNX
    value (removed or renamed by the optimizer) and so could not be compared.
    """
    sessions = _Sessions(program, options, providers)
    compared: list[Compared] = []
    missing: list[str] = []
    pending: dict[bool, list[_Item]] = {False: [], True: []}
    sizes = {False: 0, True: 0}

    def flush(constant: bool) -> None:
        batch = pending[constant]
        if not batch:
            return
        actual = sessions.run(feed, [i.onnx_name for i in batch])
        for item in batch:
            got = actual[item.onnx_name]
            compared.append(Compared(VerificationInfo.from_tensors(item.name, item.expected, got),
                                     scaled_error(item.expected, got), item.key, item.inputs,
                                     item.order))
        pending[constant] = []
        sizes[constant] = 0

    try:
        for item in items:
            if not sessions.has(item.onnx_name) or \
                    not _same_layout(sessions.declared_shape(item.onnx_name), item.expected):
                missing.append(item.name)
                continue
            pending[item.constant].append(item)
            sizes[item.constant] += item.expected.numel() * item.expected.element_size()
            if sizes[item.constant] >= chunk_bytes:
                flush(item.constant)
        flush(True)
        flush(False)
    finally:
        sessions.close()
    compared.sort(key=lambda c: c.order)
    return compared, missing


# -- the PyTorch side: an exported program's FX graph ------------------------------------------

def graph_inputs(exported_program: torch.export.ExportedProgram, args: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> list[Any]:
    """The values of the exported program's placeholders: weights, constants, user inputs."""
    kinds = torch.export.graph_signature.InputKind
    flat, _ = exported_program._get_flat_args_with_check(tuple(args), dict(kwargs))
    user = iter(flat)
    state, constants = exported_program.state_dict, exported_program.constants
    values: list[Any] = []
    for spec in exported_program.graph_signature.input_specs:
        if spec.kind == kinds.USER_INPUT:
            values.append(next(user))
        elif spec.kind in (kinds.PARAMETER, kinds.BUFFER):
            values.append(state[spec.target] if spec.target in state else constants[spec.target])
        elif spec.kind in (kinds.CONSTANT_TENSOR, kinds.CUSTOM_OBJ):
            values.append(constants[spec.target])
        else:
            raise NotImplementedError(f"intermediate values of a program with {spec.kind} "
                                      "inputs cannot be computed")
    return values


def fx_values(exported_program: torch.export.ExportedProgram, args: Sequence[Any],
              kwargs: Mapping[str, Any]) -> Iterator[tuple[torch.fx.Node, Any]]:
    """Run the program's FX graph node by node; yield (node, value) of each node in order.

    A value is freed after its last use (the consumer of this iterator may keep it).
    """
    graph_module = exported_program.graph_module
    interpreter = torch.fx.Interpreter(graph_module, garbage_collect_values=True)
    interpreter.env = {}
    interpreter.args_iter = iter(graph_inputs(exported_program, args, kwargs))
    with torch.no_grad():
        for node in graph_module.graph.nodes:
            if node.op == "output":
                break
            value = interpreter.run_node(node)
            interpreter.env[node] = value
            yield node, value
            for dead in interpreter.user_to_last_uses.get(node, []):
                del interpreter.env[dead]


def _depends_on_inputs(exported_program: torch.export.ExportedProgram) -> set[torch.fx.Node]:
    kinds = torch.export.graph_signature.InputKind
    user = {s.arg.name for s in exported_program.graph_signature.input_specs
            if s.kind == kinds.USER_INPUT and hasattr(s.arg, "name")}
    dynamic: set[torch.fx.Node] = set()
    for node in exported_program.graph.nodes:
        if (node.op == "placeholder" and node.name in user) or \
                any(i in dynamic for i in node.all_input_nodes):
            dynamic.add(node)
    return dynamic


def fx_items(program: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Iterator[_Item]:
    """The FX values of `program` to compare, in graph order, with their ONNX names."""
    exported_program = program.exported_program
    graph = exported_program.graph
    dynamic = _depends_on_inputs(exported_program)
    outputs = _output_names(program)
    order = 0
    for node, value in fx_values(exported_program, args, kwargs):
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        inputs = tuple(n.name for n in node.all_input_nodes)
        constant = node not in dynamic
        if isinstance(value, torch.Tensor):
            pieces = [(node.name, value, outputs.get((node.name, None)))]
        elif isinstance(value, (tuple, list)) and value and \
                all(isinstance(v, torch.Tensor) or v is None for v in value):
            pieces = [(f"{node.name}__{i}", v, outputs.get((node.name, i)))
                      for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
        else:
            continue
        for name, tensor, output_name in pieces:
            order += 1
            yield _Item(name, output_name or name, tensor, node, inputs, constant, order)
    del graph


def _output_names(program: Any) -> dict[tuple[str, int | None], str]:
    """(FX node, tuple index) -> the ONNX graph output it became, for renamed outputs."""
    exported_program = program.exported_program
    kinds = torch.export.graph_signature.OutputKind
    output_node = exported_program.graph.output_node()
    flat = output_node.args[0]
    flat = list(flat) if isinstance(flat, (list, tuple)) else [flat]
    user = [a for s, a in zip(exported_program.graph_signature.output_specs, flat)
            if s.kind == kinds.USER_OUTPUT and a is not None]
    onnx_outputs = [v.name for v in program.model.graph.outputs]
    if len(user) != len(onnx_outputs):
        return {}
    names: dict[tuple[str, int | None], str] = {}
    for arg, onnx_name in zip(user, onnx_outputs):
        if not isinstance(arg, torch.fx.Node):
            continue
        if arg.target is operator.getitem and isinstance(arg.args[1], int):
            names.setdefault((arg.args[0].name, arg.args[1]), onnx_name)
        else:
            names.setdefault((arg.name, None), onnx_name)
    return names
