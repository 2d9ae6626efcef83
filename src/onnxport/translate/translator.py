"""The node loop: find every missing op first, then dispatch each FX node to its translation.

The translator owns all node bookkeeping, so translations only build math:
* values take their FX node's name (`<name>__<i>` for multiple outputs), initializers
  keep their state_dict key, graph inputs take forward's parameter names;
* node names follow the module hierarchy (`/encoder/layer.0/attention/MatMul`) and carry
  the module path and user source line as metadata;
* output dtypes and shapes come from the FX metadata; where a translation's result has
  another dtype than PyTorch's (type promotion), a Cast is inserted here, once, for all ops;
* complex tensors are real pairs (`complex.py`): a complex FX value becomes a float value of
  shape S + [2], marked complex; nodes touching one are translated from the COMPLEX table;
  the model lists its complex inputs and outputs in `pkg.onnxport.complex_inputs/_outputs`;
* failures are re-raised with the node, target, module path and source line.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import re
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport import _dtypes
from onnxport.capture.captured import Captured, node_value
from onnxport.capture.explicit_scalars import SCALAR_KEY, SCALAR_TENSOR
from onnxport.capture.inplace import effective_target
from onnxport.errors import MissingOp, OnnxExporterError, TranslationError, UnsupportedOperatorError
from onnxport.translate.binding import bind
from onnxport.translate.builder import GraphBuilder
from onnxport.translate.complex import (
    COMPLEX,
    involves_complex,
    mark_complex,
    real_dtype,
    unmark_complex,
)
from onnxport.translate.registry import Registry, target_name
from onnxport.translate.torch_folding import TorchFolder

_META_SOURCE = "pkg.onnxport.source"
_META_MODULE = "pkg.onnxport.module"
_META_FX_NODE = "pkg.onnxport.fx_node"
META_COMPLEX_INPUTS = "pkg.onnxport.complex_inputs"
META_COMPLEX_OUTPUTS = "pkg.onnxport.complex_outputs"
_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)(?:\n(?![ \t]*File ")[ \t]*(.*))?')

IR_VERSION = 10


@dataclasses.dataclass(frozen=True, slots=True)
class NodeContext:
    """Where an FX node comes from in the user's code."""

    module_path: str
    source: str
    name_prefix: str


def node_context(node: torch.fx.Node) -> NodeContext:
    """Module path, user source line and ONNX node-name prefix of an FX node."""
    stack = node.meta.get("nn_module_stack") or {}
    parts: list[str] = []
    previous = ""
    module_path = ""
    for path, _type in stack.values():
        if not path:
            continue
        if previous and path.startswith(previous + "."):
            parts.append(path[len(previous) + 1:])
        else:
            parts.append(path)
        previous = path
        module_path = path
    return NodeContext(module_path, _user_source(node.meta.get("stack_trace")),
                       "/" + "/".join(parts) if parts else "")


def _user_source(stack_trace: str | None) -> str:
    if not stack_trace:
        return ""
    frames = _FRAME.findall(stack_trace)
    if not frames:
        return ""
    user = [f for f in frames if not f[0].startswith(_TORCH_DIR)]
    file, line, fn, code = (user or frames)[-1]
    return f"{file}:{line} in {fn}: {code.strip()}" if code.strip() else f"{file}:{line} in {fn}"


def _all_nodes(graph_module: torch.fx.GraphModule) -> Any:
    """The nodes of a graph module and of the subgraphs (cond branches, loop bodies) it holds."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            yield from module.graph.nodes


def find_missing(graph_module: torch.fx.GraphModule, registry: Registry, opset: int) -> list[MissingOp]:
    """Every call target without a translation at `opset`, each with its first use."""
    missing: dict[str, MissingOp] = {}
    for node in _all_nodes(graph_module):
        if node.op != "call_function":
            continue
        target = effective_target(node)
        is_complex = _touches_complex(node)
        if (COMPLEX if is_complex else registry).lookup(target, opset) is not None:
            continue
        name = target_name(target) + (" (complex)" if is_complex else "")
        if name not in missing:
            ctx = node_context(node)
            missing[name] = MissingOp(name, node.name, ctx.module_path, ctx.source)
    return list(missing.values())


def check_dtype_opsets(graph_module: torch.fx.GraphModule, opset: int) -> None:
    """Raise at the first value whose dtype ONNX only has at a higher opset (float8: 19,
    float4: 23)."""
    for node in _all_nodes(graph_module):
        val = node_value(node)
        for v in val if isinstance(val, (tuple, list)) else (val,):
            reason = _dtypes.opset_error(v.dtype, opset) if isinstance(v, torch.Tensor) else None
            if reason is not None:
                ctx = node_context(node)
                where = f" ({ctx.source})" if ctx.source else ""
                raise TranslationError(f"'{node.name}'{where}: {reason}", node=node.name,
                                       target=target_name(node.target), module_path=ctx.module_path,
                                       source=ctx.source)


def dtype_opset(graph_module: torch.fx.GraphModule) -> tuple[int, str, torch.dtype] | None:
    """The highest opset a value's dtype needs (float8: 19, float4: 23), with the first node
    needing it and its dtype; None when every dtype exists in every opset."""
    found: tuple[int, str, torch.dtype] | None = None
    for node in _all_nodes(graph_module):
        val = node_value(node)
        for v in val if isinstance(val, (tuple, list)) else (val,):
            if not isinstance(v, torch.Tensor):
                continue
            onnx_type = _dtypes.TORCH_TO_IR.get(v.dtype)
            needed = _dtypes.MIN_OPSET.get(onnx_type) if onnx_type is not None else None
            if needed is not None and (found is None or needed > found[0]):
                found = (needed, node.name, v.dtype)
    return found


def _touches_complex(node: torch.fx.Node) -> bool:
    """Whether an FX node reads or writes a complex tensor."""
    if involves_complex(node_value(node)):
        return True
    return any(involves_complex(node_value(n)) for n in node.all_input_nodes)


def unsupported_error(missing: Sequence[MissingOp], opset: int) -> UnsupportedOperatorError:
    """The error listing every missing operator with where the model first uses it."""
    lines = [
        f"  {m.target:<34} first used by '{m.node}'"
        + (f" in module '{m.module_path}'" if m.module_path else "")
        + (f" ({m.source})" if m.source else "")
        + ("\n    (a custom op: its Python body was not inlined because torch.export cannot "
           "trace it, e.g. data-dependent control flow)" if _is_custom_op(m.target) else "")
        for m in missing
    ]
    noun = "operator has" if len(missing) == 1 else "operators have"
    return UnsupportedOperatorError(
        f"{len(missing)} {noun} no translation at opset {opset}:\n" + "\n".join(lines)
        + "\n  fix: register a translation, e.g. "
        f"@onnxport.register({_qualified(missing[0].target.removesuffix(' (complex)'))}) "
        "(docs/adding_an_op.md)",
        list(missing),
    )


def _is_custom_op(name: str) -> bool:
    """Whether `ns.op.overload` names a `torch.library.custom_op` with a Python body."""
    from onnxport.capture.decompose import custom_op_implementation

    parts = name.split(".")
    if len(parts) != 3:
        return False
    try:
        overload = getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError):
        return False
    return custom_op_implementation(overload) is not None


def _qualified(name: str) -> str:
    return name if name.startswith("torch.") or "." not in name else f"torch.ops.{name}"


class Translator:
    """Translates one captured program into an onnx_ir Model."""

    def __init__(
        self,
        captured: Captured,
        registry: Registry,
        opset: int,
        *,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        custom_opsets: dict[str, int] | None = None,
        dim_names: dict[str, dict[int, str]] | None = None,
        leaf_dim_names: dict[int, dict[int, str]] | None = None,
    ) -> None:
        self.captured = captured
        self.input_dim_names = dict(dim_names or {})
        # {position among the user inputs (constants included): {axis: name}}
        self.leaf_dim_names = dict(leaf_dim_names or {})
        self.dim_names: dict[str, str] = dict(captured.size_names)
        self.registry = registry
        self.opset = opset
        self.input_names = list(input_names or [])
        self.output_names = list(output_names or [])
        graph = ir.Graph([], [], nodes=[], name="main_graph", opset_imports={"": opset})
        self.g = GraphBuilder(graph, opset, custom_opsets=dict(custom_opsets or {}))
        self.env: dict[torch.fx.Node, Any] = {}
        self._bound: set[int] = set()
        self.folder = TorchFolder()
        self.model_metadata: dict[str, str] = {}

    def run(self) -> ir.Model:
        """Translate every node; return the model."""
        program = self.captured.exported_program
        fx_graph = program.graph
        missing = find_missing(program.graph_module, self.registry, self.opset)
        if missing:
            raise unsupported_error(missing, self.opset)
        check_dtype_opsets(program.graph_module, self.opset)
        for node in fx_graph.nodes:
            self.g.reserve_name(node.name)
        self._add_inputs(program)
        self.g.translator = self
        for node in fx_graph.nodes:
            if node.op == "call_function":
                self._translate_node(node)
            elif node.op == "get_attr":
                self.env[node] = _fetch_attr(program.graph_module, str(node.target))
            elif node.op == "output":
                self._add_outputs(program, node)
            elif node.op != "placeholder":
                raise TranslationError(f"unexpected FX node kind {node.op!r}", node=node.name)
        graph = self.g.graph
        for domain in sorted(self.g.used_domains):
            graph.opset_imports.setdefault(domain, self.g.custom_opsets.get(domain, 1))
        model = ir.Model(graph, ir_version=IR_VERSION, producer_name="onnxport",
                         producer_version=_version(), functions=list(self.g.functions.values()))
        model.metadata_props.update(self.model_metadata)
        return model

    # -- subgraphs -----------------------------------------------------------------------
    def inline(self, g: GraphBuilder, graph_module: torch.fx.GraphModule, inputs: Sequence[Any]
               ) -> list[Any]:
        """Translate `graph_module` into the graph `g` builds, its placeholders bound to `inputs`.

        Returns the flattened outputs. Control-flow translations build If/Loop bodies with it:
        `g.subgraph(...)` makes the body's builder, `inline` fills it.
        """
        outer = self.g
        self.g = g
        g.translator = self
        try:
            placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
            if len(placeholders) != len(inputs):
                raise TranslationError(f"subgraph takes {len(placeholders)} inputs, got {len(inputs)}")
            for placeholder, value in zip(placeholders, inputs):
                self._bind(placeholder, value)
            outputs: list[Any] = []
            for node in graph_module.graph.nodes:
                if node.op == "call_function":
                    self._translate_node(node)
                elif node.op == "get_attr":
                    self.env[node] = _fetch_attr(graph_module, str(node.target))
                elif node.op == "output":
                    flat = torch.utils._pytree.tree_leaves(node.args[0])
                    outputs = [self._convert(a) for a in flat]
            return outputs
        finally:
            self.g = outer

    # -- inputs --------------------------------------------------------------------------
    def _add_inputs(self, program: torch.export.ExportedProgram) -> None:
        specs = {s.arg.name: s for s in program.graph_signature.input_specs if hasattr(s.arg, "name")}
        state = program.state_dict
        constants = program.constants
        kind = torch.export.graph_signature.InputKind
        user_inputs: list[tuple[torch.fx.Node, str]] = []
        leaf_of: dict[torch.fx.Node, int] = {}
        for node in program.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs.get(node.name)
            val = node_value(node)
            if spec is not None and spec.kind in (kind.PARAMETER, kind.BUFFER, kind.CONSTANT_TENSOR):
                target = spec.target
                tensor = state[target] if target in state else constants.get(target)
                self._bind(node, self._initializer(target, tensor, val))
                if spec.kind is kind.CONSTANT_TENSOR:
                    self.folder.add_constant(node, tensor)
            elif spec is not None and spec.kind is not kind.USER_INPUT:
                raise TranslationError(f"unsupported graph input kind {spec.kind.name}", node=node.name)
            elif isinstance(val, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
                leaf_of[node] = len(leaf_of)
                index = len(user_inputs)
                name = self.input_names[index] if index < len(self.input_names) else node.name
                user_inputs.append((node, name))
            else:
                # Python constants among the inputs were specialised by torch.export.
                leaf_of[node] = len(leaf_of)
                self.env[node] = val
        # Names the user gave win over the `<input>_dim_<axis>` defaults, whichever input
        # mentions the symbol first.
        for is_explicit in (True, False):
            for index, (node, name) in enumerate(user_inputs):
                given = (self.leaf_dim_names.get(leaf_of[node])
                         or self.input_dim_names.get(name) or self.input_dim_names.get(node.name)
                         or self.input_dim_names.get(f"#{index}"))
                self._learn_dim_names(node_value(node), given, name, explicit=is_explicit)
        complex_inputs = []
        for index, (node, name) in enumerate(user_inputs):
            value = ir.Value(name=name)
            _set_type(value, node_value(node), self.dim_names)
            if involves_complex(node_value(node)):
                complex_inputs.append(str(index))
            self.g.reserve_name(name)
            self.g.graph.inputs.append(value)
            self._bind(node, value)
        if complex_inputs:
            self.model_metadata[META_COMPLEX_INPUTS] = ",".join(complex_inputs)

    def _learn_dim_names(self, val: Any, names: dict[int, str] | None, input_name: str, *,
                         explicit: bool) -> None:
        """Name the symbols of an input's dynamic dims: the user's name, else `<input>_dim_<i>`."""
        if not isinstance(val, torch.Tensor):
            return
        for axis, size in enumerate(val.shape):
            symbol = dim_of(size)
            if not isinstance(symbol, str) or not _SYMBOL.fullmatch(symbol):
                continue
            given = (names or {}).get(axis)
            if explicit and given is not None:
                self.dim_names.setdefault(symbol, given)
            elif not explicit:
                self.dim_names.setdefault(symbol, f"{input_name}_dim_{axis}")

    def _initializer(self, name: str, tensor: torch.Tensor | None, val: Any) -> ir.Value:
        value = ir.Value(name=name)
        _set_type(value, val if tensor is None else tensor)
        if tensor is not None and not isinstance(tensor, torch._subclasses.FakeTensor):
            data = tensor.detach()
            if data.is_complex():
                data = torch.view_as_real(data.resolve_conj())
            if data.dtype == torch.float4_e2m1fn_x2:
                # Two FP4 values per byte in torch, one per element in ONNX (_dtypes).
                value.const_value = ir.Tensor(_dtypes.unpack_float4(data), name=name)
            else:
                value.const_value = TorchTensor(data, name=name)
        self.g.reserve_name(name)
        # Weights of a fake-mode export have no data yet (apply_weights attaches them).
        self.g.graph.initializers[name] = value
        return value

    # -- nodes ---------------------------------------------------------------------------
    def _convert(self, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            if arg.target is SCALAR_TENSOR and SCALAR_KEY in arg.meta:
                # a number made explicit in capture: the op reads the number, whose constant
                # is the scalar node's value (GraphBuilder.const caches small constants)
                return arg.meta[SCALAR_KEY]
            return self.env[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._convert(a) for a in arg)
        return arg

    def _translate_node(self, node: torch.fx.Node) -> None:
        target = effective_target(node)
        table = COMPLEX if _touches_complex(node) else self.registry
        translation = table.lookup(target, self.opset)
        assert translation is not None  # find_missing ran first
        ctx = node_context(node)
        g = self.g
        metadata = {_META_FX_NODE: node.name}
        if ctx.module_path:
            metadata[_META_MODULE] = ctx.module_path
        if ctx.source:
            metadata[_META_SOURCE] = ctx.source
        g.scope.name_prefix = ctx.name_prefix
        g.scope.value_prefix = node.name
        g.scope.metadata = metadata
        val = node_value(node)
        vals = val if isinstance(val, (tuple, list)) else (val,)
        g.out_vals = tuple(vals)
        g.out_read = _outputs_read(node, len(vals))
        g.fx_node = node
        g.out_dtypes = tuple(_ir_dtype_of(v) for v in vals)
        if self.folder.evaluate(node, node.target) is not None:
            folded = self.folder.constant_for(node)
            if folded is not None:
                # torch's value, bit for bit (translate/torch_folding.py)
                result = self._finish(node, g.const(folded.numpy()), val, self._value_name(node))
                self._bind(node, result)
                return
        try:
            args, kwargs = bind(target, node.args, node.kwargs, self._convert,
                                translation.function)
            result = translation.function(g, *args, **kwargs)
        except OnnxExporterError as e:
            raise _with_context(e, node, ctx, translation.location) from e
        except Exception as e:  # noqa: BLE001  (re-raised with the node's context)
            raise _with_context(
                TranslationError(f"{type(e).__name__}: {e}"), node, ctx, translation.location
            ) from e
        g.fx_node = None
        result = self._finish(node, result, val, self._value_name(node))
        self._bind(node, result)
        if target is not node.target:
            # A functionalized in-place op: later reads of the mutated tensor see the result.
            self.env[node.args[0]] = result  # type: ignore[index]

    def _value_name(self, node: torch.fx.Node) -> str:
        # Main-graph names were reserved up front; subgraph nodes take the next free name.
        is_main = node.graph is self.captured.exported_program.graph
        return node.name if is_main else self.g.unique_name(node.name)

    def _finish(self, node: torch.fx.Node, result: Any, val: Any, name: str) -> Any:
        if isinstance(val, (tuple, list)) and isinstance(result, (tuple, list)):
            return type(result)(
                self._finish_one(r, v, self.g.unique_name(f"{name}__{i}"))
                for i, (r, v) in enumerate(zip(result, val))
            )
        return self._finish_one(result, val, name)

    def _finish_one(self, value: Any, val: Any, name: str) -> Any:
        if not isinstance(value, ir.Value):
            return value
        expected = _ir_dtype_of(val)
        if expected is not None and value.dtype is not None and value.dtype != expected:
            value = self.g.op("Cast", value, to=expected)
        if id(value) in self._bound or value.is_graph_input() or value.is_initializer():
            return value
        value.name = name
        if expected is not None:
            _set_type(value, val, self.dim_names)
        return value

    def _bind(self, node: torch.fx.Node, value: Any) -> None:
        self.env[node] = value
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, ir.Value):
                self._bound.add(id(v))

    # -- outputs -------------------------------------------------------------------------
    def _add_outputs(self, program: torch.export.ExportedProgram, node: torch.fx.Node) -> None:
        kind = torch.export.graph_signature.OutputKind
        specs = program.graph_signature.output_specs
        flat = list(node.args[0]) if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
        g = self.g
        g.scope.name_prefix, g.scope.value_prefix, g.scope.metadata = "", "output", {}
        index = 0
        seen: set[int] = set()
        complex_outputs: list[str] = []
        keys = _output_keys(program, sum(1 for s in specs if s.kind == kind.USER_OUTPUT))
        for position, arg in enumerate(
                a for s, a in zip(specs, flat) if s.kind == kind.USER_OUTPUT):
            if arg is None:
                # A None output (e.g. MultiheadAttention's weights with need_weights=False) is
                # no tensor: dropped, as flatten_outputs drops it from eager results.
                continue
            value = self.env[arg] if isinstance(arg, torch.fx.Node) else g.const(arg)
            if not isinstance(value, ir.Value):
                value = g.const(value)
            if id(value) in seen or value.is_graph_input() or value.is_initializer() \
                    or value.producer() is None:
                value = _identity(g, value)
            seen.add(id(value))
            if index < len(self.output_names):
                value.name = self._rename(value, self.output_names[index])
            elif not self.output_names and keys[position]:
                value.name = self._rename(value, keys[position])
            if isinstance(arg, torch.fx.Node) and involves_complex(node_value(arg)):
                complex_outputs.append(str(index))
            g.graph.outputs.append(value)
            index += 1
        if complex_outputs:
            self.model_metadata[META_COMPLEX_OUTPUTS] = ",".join(complex_outputs)

    def _rename(self, value: ir.Value, name: str) -> str:
        if value.name == name:
            return name
        return self.g.unique_name(name)


def _output_keys(program: torch.export.ExportedProgram, count: int) -> list[str | None]:
    """Per flat user output, the string key it has in what the model returns (a dict key or
    a dataclass field: `[{"boxes": ...}]` gives "boxes"), or None: the default output names."""
    try:
        tree = torch.utils._pytree.tree_unflatten(list(range(count)), program.call_spec.out_spec)
        leaves = torch.utils._pytree.tree_flatten_with_path(tree)[0]
    except Exception:  # noqa: BLE001  (no usable spec: FX names)
        return [None] * count
    keys: list[str | None] = [None] * count
    for path, leaf in leaves:
        last = path[-1] if path else None
        key = getattr(last, "key", getattr(last, "name", None))
        if isinstance(leaf, int) and 0 <= leaf < count and isinstance(key, str) and key:
            keys[leaf] = key
    return keys


def _fetch_attr(graph_module: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = graph_module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _identity(g: GraphBuilder, value: ir.Value) -> ir.Value:
    out = g.op("Identity", value)
    out.shape = value.shape
    return out


def _with_context(error: OnnxExporterError, node: torch.fx.Node, ctx: NodeContext,
                  location: str) -> OnnxExporterError:
    if not isinstance(error, TranslationError) or error.node is not None:
        return error
    target = target_name(node.target)
    where = f"  at node '{node.name}'"
    if ctx.module_path:
        where += f" in module '{ctx.module_path}'"
    if ctx.source:
        where += f" ({ctx.source})"
    message = (
        f"{target}: {error}\n{where}\n  translation: {location}\n"
        "  fix: change the model code at that line, or register your own translation "
        "(docs/adding_an_op.md)"
    )
    return TranslationError(message, node=node.name, target=target, module_path=ctx.module_path,
                            source=ctx.source)


def _outputs_read(node: torch.fx.Node, count: int) -> tuple[bool, ...]:
    """For each output of a multi-output node, whether a `getitem` of it has users."""
    if count < 2:
        return (True,) * count
    read = [False] * count
    for user in node.users:
        if user.target is not operator.getitem or not isinstance(user.args[1], int):
            return (True,) * count
        if user.users:
            read[user.args[1]] = True
    return tuple(read)


def _ir_dtype_of(val: Any) -> ir.DataType | None:
    # Never a complex type: complex tensors are carried as real pairs (complex.py), so the
    # automatic Cast in _finish_one can only ever target a real dtype.
    if isinstance(val, torch.Tensor):
        return _dtypes.to_ir(_real_dtype(val.dtype))
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
        return ir.DataType.INT64
    if isinstance(val, (torch.SymFloat, float)):
        return ir.DataType.FLOAT
    if isinstance(val, (torch.SymBool, bool)):
        return ir.DataType.BOOL
    return None


def dim_of(d: Any) -> int | str:
    """An ONNX dim from a torch size entry: an int, or the symbol's name (never guards)."""
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr) if expr.is_number else str(expr)
    return int(d)


def _real_dtype(dtype: torch.dtype) -> torch.dtype:
    try:
        return real_dtype(dtype)
    except ValueError as e:
        raise TranslationError(str(e)) from e


def _set_type(value: ir.Value, val: Any, dim_names: dict[str, str] | None = None) -> None:
    if isinstance(val, torch.Tensor):
        value.dtype = _dtypes.to_ir(_real_dtype(val.dtype))
        shape = _dtypes.float4_shape(val.shape) if val.dtype == torch.float4_e2m1fn_x2 else val.shape
        dims = [_dim(d, dim_names) for d in shape]
        if val.dtype.is_complex:
            # A complex tensor of shape S is carried as real pairs of shape S + [2].
            dims.append(2)
            mark_complex(value)
        else:
            unmark_complex(value)
        value.shape = ir.Shape(dims)
        return
    dtype = _ir_dtype_of(val)
    if dtype is not None:
        value.dtype = dtype
        value.shape = ir.Shape([])


_SYMBOL = re.compile(r"\b[su]\d+\b")


def _dim(d: Any, dim_names: dict[str, str] | None) -> int | ir.SymbolicDim:
    out = dim_of(d)
    if isinstance(out, int):
        return out
    if dim_names:
        out = dim_names.get(out) or _SYMBOL.sub(lambda m: dim_names.get(m.group(0), m.group(0)), out)
    return ir.SymbolicDim(out)


def _version() -> str:
    from onnxport import __version__

    return __version__
