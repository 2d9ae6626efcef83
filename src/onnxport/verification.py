"""torch.onnx.verification: 2.13's `verify_onnx_program` / `VerificationInfo`, onnxport's
`find_first_divergence` (the first wrong node, explained; verify/localize.py), and 2.1's
TorchScript-flavour `find_mismatch` / `GraphInfo`.

`find_mismatch` traces the model, runs the TorchScript graph once in PyTorch (node by node,
recording every value), then checks partitions of the graph: each partition (a run of the
graph's essential nodes; constants and attribute reads are copied in where used) becomes a
TorchScript graph of its own whose inputs are the values it reads from outside; it is
exported, run in ONNX Runtime on the recorded inputs and compared with the recorded outputs.
A mismatching partition is split in two (first half: n // 2 nodes) until single nodes.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import io
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from onnxport.capture.torchscript import (
    ScriptCaptured,
    TrainingMode,
    capture_torchscript,
)
from onnxport.verify.inputs import example_inputs as _example_inputs
from onnxport.verify.inputs import flatten_outputs
from onnxport.verify.inputs import own_program as _own_program
from onnxport.verify.intermediates import VerificationInfo
from onnxport.verify.localize import Divergence, DivergenceReport, find_first_divergence
from onnxport.verify.torchscript_values import Interpreter as _Interpreter

__all__ = ["find_mismatch", "GraphInfo", "VerificationOptions", "OnnxBackend",
           "VerificationInfo", "verify_onnx_program", "find_first_divergence", "Divergence",
           "DivergenceReport"]

# Nodes that compute nothing worth checking: copied into each partition that reads them.
_NON_ESSENTIAL = frozenset({"prim::Constant", "prim::GetAttr", "prim::ListConstruct",
                            "prim::TupleConstruct", "prim::ListUnpack", "prim::TupleUnpack"})
_CLONED = frozenset({"prim::Constant", "prim::ListConstruct", "prim::TupleConstruct"})


class OnnxBackend(enum.Enum):
    """Where the ONNX side runs."""

    REFERENCE = "ONNXReferenceEvaluator"
    ONNX_RUNTIME_CPU = "CPUExecutionProvider"


@dataclasses.dataclass
class VerificationOptions:
    """Options for ONNX export verification.

    Attributes:
        flatten: Compare flattened outputs (nested tuples/lists as one list).
        ignore_none: Drop None outputs of the PyTorch side before comparing.
        check_shape: Require equal shapes (False: broadcastable is enough).
        check_dtype: Require equal dtypes.
        backend: OnnxBackend.ONNX_RUNTIME_CPU (default) or REFERENCE (onnx's evaluator).
        rtol, atol: Tolerances (torch.testing.assert_close).
        remained_onnx_input_idx: Indices of the ONNX model's inputs kept (the others were
            removed by the export, e.g. unused): used to pick the inputs to feed.
        acceptable_error_percentage: A fraction (0..1) of elements allowed to mismatch.
    """

    flatten: bool = True
    ignore_none: bool = True
    check_shape: bool = True
    check_dtype: bool = True
    backend: OnnxBackend = OnnxBackend.ONNX_RUNTIME_CPU
    rtol: float = 1e-3
    atol: float = 1e-7
    remained_onnx_input_idx: Sequence[int] | None = None
    acceptable_error_percentage: float | None = None


@dataclasses.dataclass
class _ExportSettings:
    do_constant_folding: bool = True
    training: TrainingMode = TrainingMode.EVAL
    opset_version: int | None = None
    keep_initializers_as_inputs: bool = True
    verbose: bool = False


def _key(node: torch._C.Node) -> tuple[str, int]:
    return (node.kind(), node.outputsAt(0).unique() if node.outputsSize() else -id(node))


class GraphInfo:
    """A partition of a TorchScript graph, its ONNX export and how their outputs compare.

    `upper_graph_info` / `lower_graph_info` are the two halves it was split into when it
    mismatched; `id` is its path in the tree ("" for the whole graph, then "0"/"1" per level).
    """

    def __init__(self, graph: torch._C.Graph, input_args: tuple[Any, ...],
                 params_dict: dict[str, Any] | None = None,
                 export_options: _ExportSettings | None = None, id: str = "",
                 *, _nodes: list[torch._C.Node] | None = None,
                 _outer: _MismatchSearch | None = None) -> None:
        self.graph = graph
        self.input_args = input_args
        self.params_dict = params_dict or {}
        self.export_options = export_options or _ExportSettings()
        self.id = id
        self.mismatch_error: AssertionError | None = None
        self.pt_outs: list[Any] | None = None
        self.onnx_model: Any = None
        self.upper_graph_info: GraphInfo | None = None
        self.lower_graph_info: GraphInfo | None = None
        self._nodes = _nodes or []
        self._outer = _outer

    # -- queries -------------------------------------------------------------------------
    def essential_node_count(self) -> int:
        return sum(1 for n in self.graph.nodes() if n.kind() not in _NON_ESSENTIAL)

    def essential_node_kinds(self) -> set[str]:
        return {n.kind() for n in self.graph.nodes() if n.kind() not in _NON_ESSENTIAL}

    def has_mismatch(self) -> bool:
        return self.mismatch_error is not None

    def all_mismatch_leaf_graph_info(self) -> list[GraphInfo]:
        """The mismatching partitions whose halves (if split) both match."""
        if not self.has_mismatch():
            return []
        children = [c for c in (self.upper_graph_info, self.lower_graph_info) if c is not None]
        leaves = [leaf for c in children for leaf in c.all_mismatch_leaf_graph_info()]
        return leaves or [self]

    def find_partition(self, id: str) -> GraphInfo | None:
        if id == self.id:
            return self
        for child in (self.upper_graph_info, self.lower_graph_info):
            if child is not None and id.startswith(child.id):
                return child.find_partition(id)
        return None

    # -- printing ------------------------------------------------------------------------
    def pretty_print_tree(self) -> None:
        """Print the partition tree, the mismatching leaves and their node kinds."""
        print(_banner("Tree:"))
        print("\n".join(_tree_lines(self)))
        print(_banner("Mismatch leaf subgraphs:"))
        leaves = self.all_mismatch_leaf_graph_info()
        print([leaf.id for leaf in leaves])
        print(_banner("Mismatch node kinds:"))
        counts: collections.Counter[str] = collections.Counter()
        for leaf in leaves:
            counts.update(n.kind() for n in leaf.graph.nodes() if n.kind() not in _NON_ESSENTIAL)
        print(dict(counts))

    def pretty_print_mismatch(self, graph: bool = False) -> None:
        """Print the mismatch of this partition (and its graphs), then the tree."""
        print(_banner(f"Mismatch info for graph partition {self.id}:"))
        if graph:
            print(_banner("TorchScript graph"))
            print(self.graph)
            if self.onnx_model is not None:
                import onnx

                print(_banner("ONNX graph"))
                print(onnx.printer.to_text(self.onnx_model.graph))
        if self.mismatch_error is not None:
            print(_banner("Mismatch error"))
            print(self.mismatch_error)
        self.pretty_print_tree()

    def __repr__(self) -> str:
        return (f"GraphInfo(id={self.id!r}, nodes={self.essential_node_count()}, "
                f"mismatch={self.has_mismatch()})")

    # -- checking ------------------------------------------------------------------------
    def verify_export(self, options: VerificationOptions | None = None) -> AssertionError | None:
        """Export this partition, run it and compare; sets and returns `mismatch_error`."""
        options = options or VerificationOptions()
        search = self._outer
        if search is None:
            raise ValueError("this GraphInfo was not made by find_mismatch")
        try:
            onnx_outs = search.run_onnx(self)
        except Exception as e:  # noqa: BLE001  (an export/run failure is a mismatch too)
            self.mismatch_error = AssertionError(f"{type(e).__name__}: {e}")
            return self.mismatch_error
        self.mismatch_error = _compare(self.pt_outs or [], onnx_outs, options)
        return self.mismatch_error


def _banner(text: str) -> str:
    return f"{' ' + text + ' ':=^80}"


def _tree_lines(info: GraphInfo) -> list[str]:
    n = info.essential_node_count()
    mark = "X" if info.has_mismatch() else "\u2713"
    head0 = f"{n} {mark}"
    if info.has_mismatch() and n == 1:
        head0 += f" ({next(iter(info.essential_node_kinds()))})"
    head = [head0, f"id: {info.id}"]
    children = [c for c in (info.upper_graph_info, info.lower_graph_info) if c is not None]
    if not children:
        return head
    width = max(len(line) for line in head)
    lines: list[str] = []
    upper = _tree_lines(children[0])
    lower = _tree_lines(children[1]) if len(children) > 1 else []
    for i, line in enumerate(upper):
        own = head[i] if i < len(head) else ""
        if i == 0:
            lines.append(own.ljust(width + 2) + "__" + line)
        else:
            lines.append(own.ljust(width + 1) + "|" + "  " + line)
    if lower:
        lines.append(" " * (width + 1) + "|")
        for i, line in enumerate(lower):
            prefix = " " * (width + 1) + ("|__" if i == 0 else "   ")
            lines.append(prefix + line)
    return [line.rstrip() for line in lines]


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    if isinstance(x, dict):
        return [y for item in x.values() for y in _flatten(item)]
    return [x]


def _compare(expected: list[Any], actual: list[Any], options: VerificationOptions
             ) -> AssertionError | None:
    if options.ignore_none:
        expected = [e for e in expected if e is not None]
    expected = [torch.as_tensor(e) for e in expected]
    if len(expected) != len(actual):
        return AssertionError(f"{len(expected)} PyTorch outputs, {len(actual)} ONNX outputs")
    for e, a in zip(expected, actual):
        a = torch.from_numpy(np.asarray(a))
        if not options.check_shape:
            e, a = torch.broadcast_tensors(e, a)
        try:
            torch.testing.assert_close(a, e, rtol=options.rtol, atol=options.atol,
                                       check_dtype=options.check_dtype, equal_nan=True)
        except AssertionError as error:
            percentage = options.acceptable_error_percentage
            if percentage is not None and e.numel() and a.shape == e.shape:
                close = torch.isclose(a.to(e.dtype), e, rtol=options.rtol, atol=options.atol,
                                      equal_nan=True)
                if 1.0 - close.float().mean().item() <= percentage:
                    continue
            return error
    return None


class _MismatchSearch:
    """The whole traced graph, its recorded values, and how to export a partition."""

    def __init__(self, captured: ScriptCaptured, settings: _ExportSettings,
                 options: VerificationOptions, registry: Any) -> None:
        self.captured = captured
        self.settings = settings
        self.options = options
        self.registry = registry
        self.values = _Interpreter(captured).values
        self.graph = captured.graph
        self.return_node = captured.graph.return_node()
        self.essential = [n for n in captured.graph.nodes() if n.kind() not in _NON_ESSENTIAL]

    def partition(self, nodes: list[torch._C.Node], id: str, input_args: tuple[Any, ...]
                  ) -> GraphInfo:
        members = {_key(n) for n in nodes}
        sub = torch._C.Graph()
        vmap: dict[int, torch._C.Value] = {}
        inputs: list[Any] = []

        def resolve(v: torch._C.Value) -> torch._C.Value:
            hit = vmap.get(v.unique())
            if hit is not None:
                return hit
            producer = v.node()
            recorded = self.values.get(v.unique())
            if producer.kind() in _CLONED and not isinstance(recorded, torch.Tensor):
                clone = sub.createClone(producer, resolve)
                sub.appendNode(clone)
                for o, no in zip(producer.outputs(), clone.outputs()):
                    vmap[o.unique()] = no
                return vmap[v.unique()]
            new = sub.addInput()
            new.setType(v.type())
            vmap[v.unique()] = new
            inputs.append(recorded)
            return new

        for node in nodes:
            clone = sub.createClone(node, resolve)
            sub.appendNode(clone)
            for o, no in zip(node.outputs(), clone.outputs()):
                vmap[o.unique()] = no
        outputs: list[Any] = []
        for node in nodes:
            for out in node.outputs():
                users = [u.user for u in out.uses()]
                used_outside = any(u.kind() == "prim::Return" or _key(u) not in members
                                   for u in users)
                recorded = self.values.get(out.unique())
                if used_outside and isinstance(recorded, torch.Tensor):
                    sub.registerOutput(vmap[out.unique()])
                    outputs.append(recorded)
        info = GraphInfo(sub, input_args, export_options=self.settings, id=id, _nodes=nodes,
                         _outer=self)
        info.pt_outs = outputs
        info._inputs = inputs  # type: ignore[attr-defined]
        return info

    def run_onnx(self, info: GraphInfo) -> list[Any]:
        import onnxruntime as ort

        from onnxport._torchscript_api import translate_captured
        from onnxport.program import ONNXProgram

        inputs = info._inputs  # type: ignore[attr-defined]
        names = [f"input_{i}" for i in range(len(inputs))]
        captured = ScriptCaptured(graph=info.graph, module=None,
                                  input_names=names, example_inputs=list(inputs),
                                  strategy="partition")
        tensor_names = [n for n, x in zip(names, inputs) if isinstance(x, torch.Tensor)]
        model = translate_captured(
            captured, self.registry, target_opset=self.settings.opset_version or 17,
            input_names=tensor_names,
            fold=self.settings.do_constant_folding
            and self.settings.training != TrainingMode.TRAINING)
        buf = io.BytesIO()
        ONNXProgram(model, None).save(buf, keep_initializers_as_inputs=True)
        import onnx

        info.onnx_model = onnx.load_from_string(buf.getvalue())
        feeds_by_name = {n: x.detach().cpu().numpy() for n, x in zip(names, inputs)
                         if isinstance(x, torch.Tensor)}
        if self.options.backend == OnnxBackend.REFERENCE:
            from onnx.reference import ReferenceEvaluator

            evaluator = ReferenceEvaluator(info.onnx_model)
            wanted = list(evaluator.input_names)
            return list(evaluator.run(None, {n: feeds_by_name[n] for n in wanted}))
        session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
        wanted = [i.name for i in session.get_inputs()]
        return list(session.run(None, {n: feeds_by_name[n] for n in wanted}))

    def search(self, nodes: list[torch._C.Node], id: str, input_args: tuple[Any, ...]
               ) -> GraphInfo:
        info = self.partition(nodes, id, input_args)
        info.verify_export(self.options)
        if info.has_mismatch() and len(nodes) > 1:
            half = len(nodes) // 2
            info.upper_graph_info = self.search(nodes[:half], id + "0", input_args)
            info.lower_graph_info = self.search(nodes[half:], id + "1", input_args)
        return info


def find_mismatch(
    model: torch.nn.Module | torch.jit.ScriptModule,
    input_args: tuple[Any, ...],
    do_constant_folding: bool = True,
    training: TrainingMode = TrainingMode.EVAL,
    opset_version: int | None = None,
    keep_initializers_as_inputs: bool = True,
    verbose: bool = False,
    options: VerificationOptions | None = None,
) -> GraphInfo:
    """Find all mismatches between the model and its export (dynamo=False), by bisection.

    Returns the root GraphInfo (the whole graph); when it mismatches, its mismatch, the
    partition tree and the smallest mismatching partitions are printed.
    """
    from onnxport._state import _exporting
    from onnxport.translate import default_registry

    options = options or VerificationOptions()
    if isinstance(input_args, torch.Tensor):
        input_args = (input_args,)
    settings = _ExportSettings(do_constant_folding=do_constant_folding, training=training,
                               opset_version=opset_version,
                               keep_initializers_as_inputs=keep_initializers_as_inputs,
                               verbose=verbose)
    with _exporting():
        captured = capture_torchscript(model, input_args, None, training=training)
        if verbose:
            print(captured.graph)
        search = _MismatchSearch(captured, settings, options, default_registry())
        root = search.search(search.essential, "", tuple(input_args))
    if root.has_mismatch():
        root.pretty_print_mismatch()
    return root



# -- torch.onnx 2.13: verify_onnx_program, VerificationInfo -------------------------------------

def verify_onnx_program(onnx_program: Any, args: tuple[Any, ...] | None = None,
                        kwargs: dict[str, Any] | None = None,
                        compare_intermediates: bool = False) -> list[VerificationInfo]:
    """Compare the ONNX program's values with its ExportedProgram's (torch.onnx 2.13's API).

    Args:
        onnx_program: An ONNXProgram from `export(..., dynamo=True)`.
        args, kwargs: The inputs; None for both: the exported program's example inputs.
            Dynamic dims may take other sizes than the example's.
        compare_intermediates: Also compare every intermediate value of the main graph, named
            by its FX node (`<node>__<i>` for a tuple's items), in graph order. Values that
            the optimizer removed or renamed cannot be compared; a UserWarning lists them.
            Values are fetched from ONNX Runtime in chunks of bounded size, so large models
            need little more memory than a run.

    Returns:
        One VerificationInfo per graph output (named as the ONNX output), or with
        `compare_intermediates`, per compared value (the outputs included).
    """
    from onnxport.verify.intermediates import fx_items

    args, kwargs = _example_inputs(onnx_program, args, kwargs)
    exported_program = onnx_program.exported_program
    if not compare_intermediates:
        with torch.no_grad():
            expected = flatten_outputs(exported_program.module()(*args, **kwargs))
        actual = onnx_program(*args, **kwargs)
        return [VerificationInfo.from_tensors(str(v.name), e, a)
                for e, a, v in zip(expected, actual, onnx_program.model.graph.outputs)]
    onnx_program = _own_program(onnx_program)
    compared, missing = _compare_values(onnx_program, fx_items(onnx_program, args, kwargs), args,
                                 kwargs)
    if missing:
        warnings.warn(_missing_text(missing, len(compared)), UserWarning, stacklevel=2)
    return [c.info for c in compared]


def _compare_values(program: Any, items: Any, args: Any, kwargs: Any, level: str = "default"
             ) -> tuple[list[Any], list[str]]:
    from onnxport.verify.intermediates import compare_intermediates, session_options

    program = _own_program(program)
    runtime = program.runtime_options
    base = runtime.session_options if runtime is not None else None
    providers = runtime.execution_providers if runtime is not None else None
    feed = program._feed(args, kwargs)
    return compare_intermediates(program, feed, items, options=session_options(level, base),
                                 providers=providers)


def _missing_text(missing: list[str], compared: int) -> str:
    shown = ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
    return (f"{len(missing)} FX values have no ONNX value of their name (fused or folded away "
            f"by the optimizer, or aliases of another value) and were not compared: {shown}; "
            f"{compared} values were compared")


class _VerificationInterpreter(torch.fx.Interpreter):
    """torch.onnx 2.13's private `_VerificationInterpreter`: runs the exported program node by
    node and compares each node's value with the ONNX value of the same name.

    After `run(*args)`, `verification_infos` holds one VerificationInfo per compared value,
    in graph order (a node returning a tuple: its items, `<node>__<i>`). Nodes without an
    ONNX value of their name (folded or fused away) are not compared.
    """

    def __init__(self, onnx_program: Any) -> None:
        program = _own_program(onnx_program)
        if program.exported_program is None:
            raise ValueError("The ONNX program does not contain an exported_program; export "
                             "with dynamo=True to verify it")
        super().__init__(program.exported_program.module())
        self._program = program
        self._names = {v.name for v in program.model.graph.inputs}
        self._names.update(program.model.graph.initializers)
        self._names.update(v.name for node in program.model.graph for v in node.outputs)
        self._args: tuple[Any, ...] = ()
        self._order: list[str] = []  # the compared names, in graph order
        self._fetched: dict[str, torch.Tensor] = {}
        self.verification_infos: list[VerificationInfo] = []

    def run(self, *args: Any, initial_env: dict[torch.fx.Node, Any] | None = None,
            enable_io_processing: bool = True) -> Any:
        """Run the program on `args`, filling `verification_infos`; returns its outputs."""
        self.verification_infos = []
        self._args = tuple(torch.utils._pytree.tree_leaves(args))
        self._fetched = {}
        self._order = [name for n in self.module.graph.nodes if n.op == "call_function"
                       for name in (n.name, *(f"{n.name}__{i}" for i in range(_items(n))))
                       if name in self._names]
        return super().run(*args, initial_env=initial_env,
                           enable_io_processing=enable_io_processing)

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op != "call_function":
            return result
        if isinstance(result, torch.Tensor):
            pairs = [(n.name, result)]
        elif isinstance(result, (tuple, list)):
            pairs = [(f"{n.name}__{i}", r) for i, r in enumerate(result)
                     if isinstance(r, torch.Tensor)]
        else:
            pairs = []
        pairs = [(name, value) for name, value in pairs if name in self._names]
        for name, value in pairs:
            self.verification_infos.append(
                VerificationInfo.from_tensors(name, value, self._onnx_value(name)))
        return result

    def _onnx_value(self, name: str) -> torch.Tensor:
        """The ONNX value `name`, fetched with the next names in one run (a run per
        `_CHUNK` values, not per node)."""
        if name not in self._fetched:
            self._fetched.clear()
            start = self._order.index(name) if name in self._order else -1
            names = self._order[start:start + _CHUNK] if start >= 0 else [name]
            self._fetched = dict(zip(names, self._program.compute_values(names, self._args)))
        return self._fetched[name]


_CHUNK = 64  # ONNX values fetched per ONNX Runtime run: bounded memory, few sessions


def _items(node: torch.fx.Node) -> int:
    """How many items a tuple-valued FX node has (0 for a tensor)."""
    val = node.meta.get("val")
    return len(val) if isinstance(val, (tuple, list)) else 0
