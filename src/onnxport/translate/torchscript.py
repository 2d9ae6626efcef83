"""The TorchScript node loop: walk an inlined torch._C.Graph and call the ONE op library.

An `aten::` node finds its OpOverload from its schema (`aten::add.Tensor(...)`), binds its
inputs to the schema (prim::Constant inputs become Python values, tensors `ir.Value`s, lists
Python lists) and calls the same translation function the FX path calls, with the same
GraphBuilder `g`. `prim::` nodes (constants, lists, tuples, attributes, If, Loop) and the
scalar ops tracing emits (`aten::size`, `aten::Int`, ...) are translated here.

Bookkeeping follows the FX translator: output dtypes (and shapes, where static) come from
the TorchScript value types, a Cast is inserted where a translation's dtype differs; graph
inputs take forward's parameter names (or `input_names`), initializers their state_dict
path, nodes the module path of their scope.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport import _dtypes
from onnxport.capture.inplace import functional_variant
from onnxport.capture.torchscript import OperatorExportTypes, ScriptCaptured
from onnxport.errors import MissingOp, OnnxExporterError, TranslationError
from onnxport.translate.binding import _keyword_only
from onnxport.translate.builder import GraphBuilder
from onnxport.translate.registry import Registry, Translation
from onnxport.translate.symbolic import call_symbolic, lookup_symbolic
from onnxport.translate.translator import IR_VERSION, _identity, _version, unsupported_error

_TORCH_DIR = os.path.dirname(torch.__file__)
_META_SOURCE = "pkg.onnxport.source"
_META_MODULE = "pkg.onnxport.module"
_INT64_MAX = 9223372036854775807

# ScalarType codes (TorchScript passes dtypes as ints) -> torch dtypes.
_SCALAR_TYPES = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
    5: torch.float16, 6: torch.float32, 7: torch.float64, 8: torch.complex32,
    9: torch.complex64, 10: torch.complex128, 11: torch.bool, 15: torch.bfloat16,
}
_TORCH_TO_CODE = {v: k for k, v in _SCALAR_TYPES.items()}


class _Obj:
    """A module (or other object) reached through prim::GetAttr, with its attribute path."""

    __slots__ = ("obj", "path")

    def __init__(self, path: str, obj: Any) -> None:
        self.path = path
        self.obj = obj


@functools.cache
def overload_of(schema: str) -> Any:
    """The OpOverload a node schema string names, or None."""
    parsed = torch._C.parse_schema(schema)
    namespace, _, name = parsed.name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, parsed.overload_name or "default")
    except (AttributeError, RuntimeError):
        return None


def _node_overload(node: torch._C.Node) -> Any:
    try:
        schema = node.schema()
    except RuntimeError:
        return None
    if schema == "(no schema)":
        return None
    return overload_of(schema)


def _dispatch_overload(node: torch._C.Node) -> tuple[Any, bool]:
    """(the overload to translate, whether it is an in-place op translated functionally)."""
    overload = _node_overload(node)
    functional = functional_variant(overload) if overload is not None else None
    return (functional, True) if functional is not None else (overload, False)


def _scope_path(node: torch._C.Node) -> tuple[str, str]:
    """(module path, node-name prefix) from a node's tracing scope."""
    scope = node.scopeName()
    if not scope:
        return "", ""
    paths = [p.split("__module.", 1)[-1] for p in scope.split("/") if p]
    paths = [p for p in paths if p]
    if paths and paths[0] == "model":
        paths = paths[1:]
    paths = [p.removeprefix("model.") for p in paths]
    parts: list[str] = []
    previous = ""
    for path in paths:
        parts.append(path[len(previous) + 1:] if previous and path.startswith(previous + ".") else path)
        previous = path
    return (paths[-1] if paths else ""), ("/" + "/".join(parts) if parts else "")


def _source(node: torch._C.Node) -> str:
    """The first user frame of a node's source range: `file:line`."""
    try:
        text = node.sourceRange()
    except RuntimeError:
        return ""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(_TORCH_DIR) and "(" in line and "): " in line:
            return line
    first = text.splitlines()[0].strip() if text else ""
    return first if first.startswith("/") or ":" in first else ""


def _has_symbolic(node: torch._C.Node) -> bool:
    return getattr(getattr(node.pyobj(), "__self__", None), "symbolic", None) is not None


def _all_nodes(block: Any, inline_functions: bool = True) -> Iterable[torch._C.Node]:
    """Nodes of a block, of its nested blocks and of inlined autograd.Function subgraphs."""
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _all_nodes(sub, inline_functions)
        if inline_functions and node.kind() == "prim::PythonOp" and \
                node.hasAttribute("Subgraph") and not _has_symbolic(node):
            yield from _all_nodes(node.g("Subgraph"), inline_functions)


def _type_info(ty: Any) -> tuple[ir.DataType | None, list[int] | None]:
    """(dtype, static sizes) of a TorchScript value type, where known."""
    if isinstance(ty, torch._C.TensorType):
        dtype = ty.dtype()
        sizes = ty.sizes()
        return (_dtypes.to_ir(dtype) if dtype is not None else None,
                list(sizes) if sizes is not None and all(s is not None for s in sizes) else None)
    if isinstance(ty, torch._C.IntType):
        return ir.DataType.INT64, []
    if isinstance(ty, torch._C.FloatType):
        return ir.DataType.FLOAT, []
    if isinstance(ty, torch._C.BoolType):
        return ir.DataType.BOOL, []
    return None, None


class TorchScriptTranslator:
    """Translates one TorchScript graph into an onnx_ir Model."""

    def __init__(self, captured: ScriptCaptured, registry: Registry, opset: int, *,
                 input_names: Sequence[str] | None = None,
                 output_names: Sequence[str] | None = None,
                 operator_export_type: OperatorExportTypes = OperatorExportTypes.ONNX,
                 dim_names: Mapping[str, Mapping[int, str]] | None = None,
                 custom_opsets: dict[str, int] | None = None,
                 symbolic_opset: int | None = None,
                 autograd_inlining: bool = True) -> None:
        self.captured = captured
        # The opset user symbolic functions are looked up for (the export's target opset).
        self.symbolic_opset = symbolic_opset or opset
        self.autograd_inlining = autograd_inlining
        self.registry = registry
        self.opset = opset
        self.input_names = list(input_names or [])
        self.output_names = list(output_names or [])
        self.export_type = OperatorExportTypes(operator_export_type)
        self.dim_names = {k: dict(v) for k, v in (dim_names or {}).items()}
        # With dynamic axes the traced sizes are one example: a value keeps only the dims
        # `dynamic_dims` proves static (else only its rank), so no translation folds a size
        # that changes at run time.
        self.static = not self.dim_names
        # For a traced graph with dynamic axes: which dims of each value (by unique id) vary
        # with the dynamic input dims (found by tracing again with those dims grown).
        self.dynamic_dims: dict[int, list[bool]] | None = captured.dynamic_dims
        graph = ir.Graph([], [], nodes=[], name="main_graph", opset_imports={"": opset})
        self.g = GraphBuilder(graph, opset, custom_opsets=dict(custom_opsets or {}))
        self.g.translator = self
        self.env: dict[int, Any] = {}
        self._initializers: dict[str, ir.Value] = {}
        self._by_tensor: dict[int, ir.Value] = {}
        # The dtype of the first tensor appended to each list (by the list's unique id).
        self._appended_dtypes: dict[int, ir.DataType] = {}
        self._appended_ranks: dict[int, int] = {}
        # Example sizes of values whose dims are unknown (script graphs): for meta inference.
        self._hints: dict[int, list[int]] = {}
        # Values made by select/slice: (viewed value, view op, its arguments after self).
        self._views: dict[int, tuple[torch._C.Value, Any, list[Any]]] = {}
        self._bound: set[int] = set()

    # -- driver --------------------------------------------------------------------------
    def run(self) -> ir.Model:
        graph = self.captured.graph
        missing = self.find_missing()
        if missing and self.export_type == OperatorExportTypes.ONNX:
            raise unsupported_error(missing, self.opset)
        self._add_inputs()
        self._block(graph.nodes())
        self._add_outputs([self._get(v) for v in graph.outputs()], list(graph.outputs()))
        self._order_initializers()
        out = self.g.graph
        for domain in sorted(self.g.used_domains):
            out.opset_imports.setdefault(domain, self.g.custom_opsets.get(domain, 1))
        return ir.Model(out, ir_version=IR_VERSION, producer_name="onnxport",
                        producer_version=_version(), functions=list(self.g.functions.values()))

    def _order_initializers(self) -> None:
        """Initializers in state_dict order (the order of the inputs without export_params)."""
        module = self.captured.module
        if module is None:
            return
        prefix = self.captured.strip_prefix
        order = {(k[len(prefix):] if prefix and k.startswith(prefix) else k): i
                 for i, k in enumerate(module.state_dict(keep_vars=True))}
        inits = self.g.graph.initializers
        values = sorted(inits.values(), key=lambda v: order.get(v.name or "", len(order)))
        inits.clear()
        for value in values:
            inits[value.name] = value

    def symbolic(self, node: torch._C.Node) -> Callable[..., Any] | None:
        """The user symbolic function registered for this node's kind, or None."""
        kind = node.kind()
        fn = lookup_symbolic(kind, self.symbolic_opset)
        if fn is None and kind.startswith("aten::") and kind.endswith("_") and \
                not kind.endswith("__"):
            fn = lookup_symbolic(kind[:-1], self.symbolic_opset)  # in-place variant
        return fn

    def unconvertible(self) -> list[str]:
        """The kind of every node no translation or symbolic function handles, in order."""
        return [node.kind() for node in _all_nodes(self.captured.graph, self.inlines(None))
                if not self._convertible(node)]

    def _convertible(self, node: torch._C.Node) -> bool:
        kind = node.kind()
        if self.symbolic(node) is not None:
            return True
        if kind == "prim::PythonOp":
            return self.inlines(node) or _has_symbolic(node) or \
                self.export_type != OperatorExportTypes.ONNX
        return kind.startswith("prim::") or kind in _SPECIAL or is_scalar_node(node) \
            or self.lookup(node) is not None

    def inlines(self, node: torch._C.Node) -> bool:
        """Whether an autograd.Function without `symbolic` is exported as the ops it ran.

        With autograd_inlining=False, or an export type that keeps unconverted ops
        (ONNX_FALLTHROUGH, ONNX_ATEN_FALLBACK), it stays one `prim::PythonOp` node.
        """
        return self.autograd_inlining and self.export_type not in (
            OperatorExportTypes.ONNX_FALLTHROUGH, OperatorExportTypes.ONNX_ATEN_FALLBACK)

    def lookup(self, node: torch._C.Node) -> Translation | None:
        """The translation of an `aten::` (or other namespaced) node, or None."""
        overload, _ = _dispatch_overload(node)
        return None if overload is None else self.registry.lookup(overload, self.opset)

    def find_missing(self) -> list[MissingOp]:
        """Every operator without a translation, each with its first use (all at once)."""
        missing: dict[str, MissingOp] = {}
        for node in _all_nodes(self.captured.graph, self.inlines(None)):
            kind = node.kind()
            if self._convertible(node):
                continue
            overload = _node_overload(node)
            if kind == "prim::PythonOp":
                # An autograd.Function kept as one node: named by its class.
                overload, kind = None, f"prim::PythonOp[{node.pyname()}]"
            name = (f"{overload.namespace}.{overload._schema.name.split('::')[-1]}."
                    f"{overload._overloadname}" if overload is not None else kind.replace("::", "."))
            if name not in missing:
                module_path, _ = _scope_path(node)
                out = node.outputsAt(0).debugName() if node.outputsSize() else kind
                missing[name] = MissingOp(name, out, module_path, _source(node))
        return list(missing.values())

    # -- values --------------------------------------------------------------------------
    def _get(self, value: torch._C.Value) -> Any:
        return self.env[value.unique()]

    def _set(self, value: torch._C.Value, result: Any) -> None:
        self.env[value.unique()] = result
        if isinstance(result, ir.Value):
            self._bound.add(id(result))

    def _add_inputs(self) -> None:
        captured = self.captured
        inputs = list(captured.graph.inputs())
        if captured.module is not None:
            self._set(inputs[0], _Obj("", captured.module))
            inputs = inputs[1:]
        index = 0
        for value, example in zip(inputs, captured.example_inputs):
            if not isinstance(example, torch.Tensor):
                self._set(value, example)
                continue
            default = captured.input_names[index] if index < len(captured.input_names) \
                else f"input_{index}"
            name = self.input_names[index] if index < len(self.input_names) else default
            index += 1
            axes = self.dim_names.get(name, {})
            dims = [ir.SymbolicDim(axes[i]) if i in axes else int(d)
                    for i, d in enumerate(example.shape)]
            out = ir.Value(name=name, type=ir.TensorType(_dtypes.to_ir(example.dtype)),
                           shape=ir.Shape(dims))
            self.g.reserve_name(name)
            self.g.graph.inputs.append(out)
            self._hints[id(out)] = list(example.shape)
            self._set(value, out)
        for value in inputs[len(captured.example_inputs):]:
            self._set(value, None)

    def _initializer(self, path: str, tensor: torch.Tensor) -> ir.Value:
        name = path[len(self.captured.strip_prefix):] if self.captured.strip_prefix and \
            path.startswith(self.captured.strip_prefix) else path
        value = self._initializers.get(name) or self._by_tensor.get(id(tensor))
        if value is not None:
            return value
        name = self.g.unique_name(name)
        value = ir.Value(name=name, type=ir.TensorType(_dtypes.to_ir(tensor.dtype)),
                         shape=ir.Shape(list(tensor.shape)))
        value.const_value = TorchTensor(tensor.detach(), name=name)
        self.g.graph.initializers[name] = value
        self._initializers[name] = value
        # A weight shared by two modules is one initializer, named after its first path.
        self._by_tensor[id(tensor)] = value
        self._bound.add(id(value))
        return value

    # -- nodes ---------------------------------------------------------------------------
    def _block(self, nodes: Iterable[torch._C.Node]) -> None:
        for node in nodes:
            self._node(node)

    def _node(self, node: torch._C.Node) -> None:
        kind = node.kind()
        g = self.g
        module_path, prefix = _scope_path(node)
        source = _source(node)
        g.scope.name_prefix = prefix
        out0 = node.outputsAt(0) if node.outputsSize() else None
        g.scope.value_prefix = (_debug_name(out0) if out0 is not None else None) or \
            kind.split("::")[-1]
        metadata = {}
        if module_path:
            metadata[_META_MODULE] = module_path
        if source:
            metadata[_META_SOURCE] = source
        g.scope.metadata = metadata
        try:
            symbolic = self.symbolic(node)
            if symbolic is not None:
                self._user_symbolic(node, symbolic)
                return
            handler = _PRIM.get(kind) or _SPECIAL.get(kind)
            if handler is None and is_scalar_node(node):
                handler = _SCALAR_HANDLERS[kind[6:]]
            if handler is not None:
                handler(self, node)
            else:
                self._aten(node)
        except OnnxExporterError as e:
            raise self._context(e, node, module_path, source) from e
        except Exception as e:  # noqa: BLE001  (re-raised with the node's context)
            raise self._context(TranslationError(f"{type(e).__name__}: {e}"), node,
                                module_path, source) from e

    def _context(self, error: OnnxExporterError, node: torch._C.Node, module_path: str,
                 source: str) -> OnnxExporterError:
        if not isinstance(error, TranslationError) or error.node is not None:
            return error
        kind = node.kind()
        name = node.outputsAt(0).debugName() if node.outputsSize() else kind
        where = f"  at node '{name}'"
        if module_path:
            where += f" in module '{module_path}'"
        if source:
            where += f" ({source})"
        return TranslationError(f"{kind}: {error}\n{where}", node=name, target=kind,
                                module_path=module_path, source=source)

    def _user_symbolic(self, node: torch._C.Node, fn: Callable[..., Any]) -> None:
        """A node translated by a function given to register_custom_op_symbolic."""
        args = [self._get(v) for v in node.inputs()]
        outs = list(node.outputs())
        infos = [self.info(o) for o in outs]
        self.g.out_dtypes = tuple(d for d, _ in infos)
        self.g.out_vals = tuple(_OutVal(d, s, True) for d, s in infos)
        result = call_symbolic(fn, self.g, args)
        if result is None and any(_is_tensor_type(o.type()) for o in outs):
            raise TranslationError(f"the symbolic function registered for {node.kind()} "
                                   "returned None")
        self._bind_outputs(node, result, infos)
        kind = node.kind()
        if kind.endswith("_") and not kind.endswith("__") and outs:
            self._set(node.inputsAt(0), self._get(outs[0]))

    def _aten(self, node: torch._C.Node) -> None:
        overload, inplace = _dispatch_overload(node)
        translation = None
        if overload is not None and self.export_type != OperatorExportTypes.ONNX_ATEN:
            translation = self.registry.lookup(overload, self.opset)
        if translation is None:
            self._fallback(node, overload)
            return
        args, kwargs = self._bind(node, overload, translation.function)
        if overload in _FROM_SEQUENCE and isinstance(args[0], ir.Value) and \
                isinstance(args[0].type, ir.SequenceType):
            # A list built in a loop is a sequence: concatenated from it.
            out = self.g.op("ConcatFromSequence", args[0], axis=int(args[1]),
                            new_axis=_FROM_SEQUENCE[overload])
            out.dtype = args[0].type.elem_type.dtype
            rank = args[0].meta.get(_ELEM_RANK)
            if rank is not None:
                out.shape = ir.Shape([None] * (rank + _FROM_SEQUENCE[overload]))
            self._set(node.outputsAt(0), self._finish(node.outputsAt(0), out,
                                                      self.info(node.outputsAt(0))))
            return
        outs = _element_outputs(node)
        infos = [self.info(o) for o in outs]
        hints: dict[int, list[int]] = {}
        if any(d is None for d, _ in infos) and any(_is_tensor_type(o.type()) for o in outs):
            hints = self._hints
            infos = _meta_infos(overload, args, kwargs, infos, hints)
        g = self.g
        g.out_dtypes = tuple(d for d, _ in infos)
        g.out_vals = tuple(_OutVal(d, s, True) for d, s in infos)
        result = translation.function(g, *args, **kwargs)
        if overload in _SCATTER_OF and not inplace:
            self._views[node.outputsAt(0).unique()] = (node.inputsAt(0), overload, args[1:])
        if outs and outs[0].node().kind() == "prim::ListUnpack":
            # A Tensor[] result: its elements are named and typed after the ListUnpack outputs.
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            self._set(node.outputsAt(0), [self._finish(o, r, i) for o, r, i in
                                          zip(outs, results, infos)])
        else:
            self._bind_outputs(node, result, infos)
        for i, out in enumerate(outs):
            hint = hints.pop(-1 - i, None)
            value = self.env.get(out.unique())
            if hint is not None and isinstance(value, ir.Value):
                self._hints[id(value)] = hint
        if inplace:
            # Later reads of the mutated tensor see the result; a write through select/slice
            # views is scattered back into the tensors they view.
            self._set(node.inputsAt(0), self._get(node.outputsAt(0)))
            self._write_back(node.inputsAt(0), self._get(node.outputsAt(0)))

    def _write_back(self, view: torch._C.Value, value: Any) -> None:
        # A write through another kind of view (view, reshape, ...) updates only that view:
        # reading the viewed tensor afterwards would not see it.
        while view.unique() in self._views:
            base, overload, view_args = self._views[view.unique()]
            old = self._get(base)
            scatter = _SCATTER_OF[overload]
            translation = self.registry.lookup(scatter, self.opset)
            if translation is None:
                raise TranslationError(f"no translation for {scatter} to write through a view")
            g = self.g
            g.out_dtypes = (old.dtype,)
            g.out_vals = (_OutVal(old.dtype, list(old.shape) if old.shape is not None else None,
                                  True),)
            value = translation.function(g, old, value, *view_args)
            value.shape = old.shape
            self._set(base, value)
            view = base

    def info(self, out: torch._C.Value) -> tuple[ir.DataType | None, Any]:
        """(dtype, sizes) of a TorchScript value; sizes with None where a dim is dynamic."""
        dtype, sizes = _type_info(out.type())
        if self.static or not sizes:
            return dtype, sizes
        flags = self.dynamic_dims.get(out.unique()) if self.dynamic_dims is not None else None
        if flags is None or len(flags) != len(sizes):
            return dtype, [None] * len(sizes)
        return dtype, [None if f else d for d, f in zip(sizes, flags)]

    def _bind(self, node: torch._C.Node, overload: Any, fn: Callable[..., Any] | None
              ) -> tuple[list[Any], dict[str, Any]]:
        by_name = _keyword_only(fn) if fn is not None else frozenset()
        inputs = list(node.inputs())
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for i, arg in enumerate(overload._schema.arguments):
            if i < len(inputs):
                value = self._get(inputs[i])
            elif arg.has_default_value():
                value = arg.default_value
            else:
                value = None
            if isinstance(value, int) and not isinstance(value, bool) and \
                    "ScalarType" in str(arg.real_type):
                value = _SCALAR_TYPES.get(value, value)
            if arg.kwarg_only or arg.name in by_name:
                keywords[arg.name] = value
            else:
                positional.append(value)
        return positional, keywords

    def _bind_outputs(self, node: torch._C.Node, result: Any,
                      infos: Sequence[tuple[ir.DataType | None, Any]]) -> None:
        outs = list(node.outputs())
        if len(outs) == 1:
            results = [result[0] if isinstance(result, (tuple, list)) and len(result) == 1
                       and _is_tensor_type(outs[0].type()) else result]
        else:
            results = list(result) if isinstance(result, (tuple, list)) else [result]
        for out, res, info in zip(outs, results, infos):
            self._set(out, self._finish(out, res, info))

    def _finish(self, out: torch._C.Value, value: Any, info: tuple[Any, Any]) -> Any:
        if not isinstance(value, ir.Value):
            return value
        dtype, sizes = info
        if dtype is not None and value.dtype is not None and value.dtype != dtype:
            value = self.g.op("Cast", value, to=dtype)
        if id(value) in self._bound or value.is_graph_input() or value.is_initializer():
            return value
        name = _debug_name(out)
        value.name = self.g.unique_name(name or f"{out.node().kind().split('::')[-1]}")
        if dtype is not None:
            value.dtype = dtype
        shape = _shape(sizes, True)
        if shape is not None:
            value.shape = shape
        return value

    def _fallback(self, node: torch._C.Node, overload: Any) -> None:
        """An operator without translation under ONNX_FALLTHROUGH / ONNX_ATEN(_FALLBACK)."""
        kind = node.kind()
        if self.export_type == OperatorExportTypes.ONNX:
            raise TranslationError(f"no translation for {kind} at opset {self.opset}")
        namespace, _, name = kind.partition("::")
        inputs: list[Any] = []
        attrs: dict[str, Any] = {}
        raw = [self._get(v) for v in node.inputs()]
        args = overload._schema.arguments if overload is not None else []
        aten = self.export_type in (OperatorExportTypes.ONNX_ATEN,
                                    OperatorExportTypes.ONNX_ATEN_FALLBACK) and namespace == "aten"
        for i, value in enumerate(raw):
            if isinstance(value, list) and any(isinstance(v, ir.Value) for v in value):
                value = _int_list(self.g, value)
            if isinstance(value, ir.Value):
                inputs.append(value)
            elif value is None:
                inputs.append(None) if aten else None
            elif aten:
                inputs.append(self.g.const(value if not isinstance(value, torch.dtype)
                                           else _TORCH_TO_CODE[value]))
            elif isinstance(value, (int, float, str, bool, list, tuple)):
                attrs[args[i].name if i < len(args) else f"arg{i}"] = value
        outs = list(node.outputs())
        if aten:
            overload_name = overload._overloadname if overload is not None else ""
            results = self.g.op("ATen", *inputs, domain="org.pytorch.aten", outputs=len(outs),
                                operator=name,
                                overload_name="" if overload_name == "default" else overload_name)
        else:
            results = self.g.op(name, *inputs, domain=namespace, outputs=len(outs), **attrs)
        results = results if isinstance(results, tuple) else (results,)
        for out, res in zip(outs, results):
            dtype, sizes = self.info(out)
            if dtype is not None:
                res.dtype = dtype
            shape = _shape(sizes, True)
            if shape is not None:
                res.shape = shape
            self._set(out, self._finish(out, res, (dtype, sizes)))

    # -- control flow --------------------------------------------------------------------
    def translate_block(self, sub: GraphBuilder, block: Any, inputs: Sequence[Any]) -> list[Any]:
        """Translate `block` into the graph `sub` builds; returns the block's outputs."""
        outer = self.g
        self.g = sub
        try:
            for param, value in zip(block.inputs(), inputs):
                self._set(param, value)
            self._block(block.nodes())
            return [self._get(v) for v in block.outputs()]
        finally:
            self.g = outer

    # -- outputs -------------------------------------------------------------------------
    def _add_outputs(self, results: list[Any], outs: list[torch._C.Value]) -> None:
        g = self.g
        g.scope.name_prefix, g.scope.value_prefix, g.scope.metadata = "", "output", {}
        flat: list[tuple[Any, Any]] = []

        def walk(result: Any, ty: Any) -> None:
            if isinstance(result, dict):
                # A dict output becomes the sequence of its values (keys dropped).
                elems = [ty.getValueType()] * len(result) if isinstance(ty, torch._C.DictType) \
                    else [None] * len(result)
                for r, t in zip(result.values(), elems):
                    walk(r, t)
            elif isinstance(result, (tuple, list)):
                elems = ty.elements() if isinstance(ty, torch._C.TupleType) else [None] * len(result)
                for r, t in zip(result, elems):
                    walk(r, t)
            elif result is not None and not isinstance(result, (str, torch.device)):
                flat.append((result, ty))

        for result, out in zip(results, outs):
            walk(result, out.type())
        seen: set[int] = set()
        for index, (value, ty) in enumerate(flat):
            if not isinstance(value, ir.Value):
                value = g.const(value)
            if id(value) in seen or value.is_graph_input() or value.is_initializer() \
                    or value.producer() is None or value.producer().graph is not g.graph:
                value = _identity(g, value)
            seen.add(id(value))
            name = self.output_names[index] if index < len(self.output_names) else None
            if name is not None and value.name != name:
                value.name = g.unique_name(name)
            dtype, sizes = _type_info(ty) if ty is not None else (None, None)
            if dtype is not None and value.dtype is None:
                value.dtype = dtype
            axes = self.dim_names.get(value.name, {})
            if sizes is not None and not self.static:
                # Dims that follow dynamic inputs, as translation found them (else unknown).
                known = value.shape
                sizes = list(known) if known is not None and len(known) == len(sizes) \
                    else [None] * len(sizes)
            if sizes is not None:
                value.shape = ir.Shape([ir.SymbolicDim(axes[i]) if i in axes else d
                                        for i, d in enumerate(sizes)])
            g.graph.outputs.append(value)


_ELEM_RANK = "onnxport.sequence_element_rank"
_FROM_SEQUENCE = {torch.ops.aten.cat.default: 0, torch.ops.aten.stack.default: 1}

_SCATTER_OF = {
    torch.ops.aten.select.int: torch.ops.aten.select_scatter.default,
    torch.ops.aten.slice.Tensor: torch.ops.aten.slice_scatter.default,
}


def _returns_alias(node: torch._C.Node) -> bool:
    overload = _node_overload(node)
    if overload is None:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in overload._schema.returns)


def cast(g: GraphBuilder, x: Any, dtype: ir.DataType) -> Any:
    """`x` as `dtype`: a Cast for a value of another dtype, a constant for a Python number."""
    if isinstance(x, ir.Value):
        return x if x.dtype == dtype else g.op("Cast", x, to=dtype)
    return g.const(x, dtype)


def _int_list(g: GraphBuilder, items: Sequence[Any]) -> ir.Value:
    """A 1-D int64 tensor from Python ints and int64 scalar values."""
    if all(not isinstance(i, ir.Value) for i in items):
        return g.const([int(i) for i in items], ir.DataType.INT64)
    parts = [g.op("Reshape", cast(g, i, ir.DataType.INT64), g.const([1], ir.DataType.INT64))
             if isinstance(i, ir.Value) else g.const([int(i)], ir.DataType.INT64) for i in items]
    return g.op("Concat", *parts, axis=0)


def _floor_div_int(g: GraphBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """Python's floor division on ints (ONNX Div truncates toward zero)."""
    q = g.op("Div", a, b)
    inexact = g.op("Not", g.op("Equal", g.op("Mul", q, b), a))
    signs_differ = g.op("Xor", g.op("Less", a, g.const(0, like=a)), g.op("Less", b, g.const(0, like=b)))
    return g.op("Sub", q, g.op("Cast", g.op("And", inexact, signs_differ), to=q.dtype))


class _OutVal:
    """What `g.out_vals` holds for a TorchScript output: `.dtype` and `.shape`.

    Dims unknown at export time (dynamic axes, script graphs) are None, so translations that
    read a static output shape see none.
    """

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: ir.DataType | None, sizes: Any, static: bool) -> None:
        self.dtype = _dtypes.to_torch(dtype) if dtype is not None else None
        if isinstance(sizes, int):
            self.shape: tuple[Any, ...] | None = (None,) * sizes
        elif sizes is None:
            self.shape = None
        else:
            self.shape = tuple(sizes) if static else (None,) * len(sizes)


def _element_outputs(node: torch._C.Node) -> list[torch._C.Value]:
    """The node's outputs; for one `Tensor[]` output unpacked by prim::ListUnpack, its elements."""
    outs = list(node.outputs())
    if len(outs) == 1 and isinstance(outs[0].type(), torch._C.ListType) and \
            isinstance(outs[0].type().getElementType(), torch._C.TensorType):
        for use in outs[0].uses():
            if use.user.kind() == "prim::ListUnpack":
                return list(use.user.outputs())
    return outs


def _debug_name(value: torch._C.Value) -> str | None:
    """A value's source-level name (`input` for `input.3`), None for numbered temporaries."""
    name = value.debugName().split(".")[0]
    return None if not name or name.isdigit() else name


def _is_tensor_type(ty: Any) -> bool:
    return isinstance(ty, torch._C.TensorType)


def _shape(sizes: Any, static: bool) -> ir.Shape | None:
    if sizes is None:
        return None
    if isinstance(sizes, int):  # a rank only
        return ir.Shape([None] * sizes)
    return ir.Shape(list(sizes) if static else [None] * len(sizes))


def _meta_infos(overload: Any, args: list[Any], kwargs: dict[str, Any],
                infos: list[tuple[Any, Any]], hints: dict[int, list[int]] | None = None
                ) -> list[tuple[Any, Any]]:
    """Output dtypes (and ranks) by running the op on meta tensors, for untyped script graphs.

    Unknown dims take the example sizes in `hints` (by value id), else 2; the outputs' example
    sizes are recorded in `hints` under the keys `-1 - i` for the caller to attach.
    """
    hints = hints if hints is not None else {}

    def meta(x: Any) -> Any:
        if isinstance(x, ir.Value):
            if x.dtype is None:
                raise ValueError("unknown dtype")
            shape = x.shape
            hint = hints.get(id(x))
            if hint is not None and shape is not None and len(hint) == len(shape):
                shape = ir.Shape([d if isinstance(d, int) else h for d, h in zip(shape, hint)])
            dims = [d if isinstance(d, int) else 2 for d in shape] if shape is not None else None
            if dims is None:
                raise ValueError("unknown rank")
            if len(dims) == 0 and x.dtype in (ir.DataType.INT64, ir.DataType.FLOAT,
                                                ir.DataType.BOOL) and _scalar_arg(x):
                return {ir.DataType.INT64: 1, ir.DataType.FLOAT: 1.0, ir.DataType.BOOL: True}[x.dtype]
            return torch.empty(dims, dtype=_dtypes.to_torch(x.dtype), device="meta")
        if isinstance(x, list):
            return [meta(v) for v in x]
        return x

    try:
        out = overload(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001  (no metadata then: translations needing it will say so)
        return infos
    outs = out if isinstance(out, (tuple, list)) else (out,)
    new = []
    for i, ((dtype, sizes), o) in enumerate(zip(infos, outs)):
        if isinstance(o, torch.Tensor):
            hints[-1 - i] = list(o.shape)
            new.append((dtype or _dtypes.to_ir(o.dtype), sizes if sizes is not None else o.dim()))
        else:
            new.append((dtype, sizes))
    return new


def _scalar_arg(x: ir.Value) -> bool:
    return bool(x.meta.get("onnxport.ts_scalar"))


def _mark_scalar(x: Any) -> Any:
    if isinstance(x, ir.Value):
        x.meta["onnxport.ts_scalar"] = True
    return x


# -- prim:: nodes ----------------------------------------------------------------------------
def _constant(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    out = node.output()
    value = out.toIValue()
    if isinstance(value, torch.Tensor):
        value = t.g.const(value) if value.numel() <= 16 else t._initializer(
            t.g.unique_name(f"const_{out.debugName()}"), value)
    t._set(out, value)


def _list_construct(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    t._set(node.output(), [t._get(v) for v in node.inputs()])


def _dict_construct(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    items = [t._get(v) for v in node.inputs()]
    t._set(node.output(), dict(zip(items[0::2], items[1::2])))


def _tuple_construct(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    t._set(node.output(), tuple(t._get(v) for v in node.inputs()))


def _unpack(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    seq = t._get(node.input())
    outs = list(node.outputs())
    if isinstance(seq, ir.Value):
        seq = [t.g.op("SequenceAt", seq, t.g.const(i, ir.DataType.INT64)) for i in range(len(outs))]
    for out, value in zip(outs, seq):
        t._set(out, value)


def _tuple_index(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    seq, index = (t._get(v) for v in node.inputs())
    t._set(node.output(), seq[index])


def _get_attr(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    parent = t._get(node.input())
    name = node.s("name")
    if not isinstance(parent, _Obj):
        raise TranslationError(f"prim::GetAttr '{name}' on a value that is not a module")
    if name == "training" and t.captured.training is not None:
        t._set(node.output(), t.captured.training)
        return
    obj = getattr(parent.obj, name)
    path = f"{parent.path}.{name}" if parent.path else name
    if isinstance(obj, torch.Tensor):
        t._set(node.output(), t._initializer(path, obj))
    elif isinstance(obj, (torch.nn.Module, torch.jit.ScriptModule)) or hasattr(obj, "_c"):
        t._set(node.output(), _Obj(path, obj))
    else:
        t._set(node.output(), obj)


def _num_to_tensor(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    value = t._get(node.input())
    if not isinstance(value, ir.Value):
        value = t.g.const(value, ir.DataType.INT64 if isinstance(value, int)
                          and not isinstance(value, bool) else None)
    t._set(node.output(), value)


def _to_scalar(dtype: ir.DataType | None, py: Callable[[Any], Any]) -> Callable[..., None]:
    def handler(t: TorchScriptTranslator, node: torch._C.Node) -> None:
        value = t._get(node.input())
        if not isinstance(value, ir.Value):
            t._set(node.output(), py(value) if py is not None else value)
            return
        if value.const_value is not None and value.const_value.size == 1:
            t._set(node.output(), py(value.const_value.numpy().item()))
            return
        if value.shape is None or len(value.shape) != 0:
            value = t.g.op("Reshape", value, t.g.const([], ir.DataType.INT64))
            value.shape = ir.Shape([])
        result = cast(t.g, value, dtype) if dtype is not None else value
        t._set(node.output(), _mark_scalar(result))

    return handler


def _size(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    inputs = [t._get(v) for v in node.inputs()]
    x = inputs[0]
    shape = x.shape
    static = shape is not None and all(isinstance(d, int) for d in shape)
    if len(inputs) == 1:
        result = list(shape) if static else t.g.op("Shape", x)
    else:
        dim = inputs[1]
        if static and isinstance(dim, int):
            result = int(shape[dim])
        else:
            result = t.g.op("Gather", t.g.op("Shape", x), cast(t.g, dim, ir.DataType.INT64), axis=0)
            result.shape = ir.Shape([])
            _mark_scalar(result)
    t._set(node.output(), result)


def _dim(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    x = t._get(node.input())
    t._set(node.output(), len(x.shape))


def _device(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    t._set(node.output(), torch.device("cpu"))


def _dtype(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    x = t._get(node.input())
    t._set(node.output(), _TORCH_TO_CODE[_dtypes.to_torch(x.dtype)])


def _getitem(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    seq, index = (t._get(v) for v in node.inputs())
    if isinstance(seq, dict):
        t._set(node.output(), seq[index])
        return
    if isinstance(seq, (list, tuple)) and isinstance(index, int):
        t._set(node.output(), seq[index])
        return
    g = t.g
    index = cast(g, index, ir.DataType.INT64)
    if isinstance(seq, (list, tuple)):
        if all(isinstance(v, ir.Value) and v.shape is not None and len(v.shape) == 0 for v in seq) \
                or all(not isinstance(v, ir.Value) for v in seq):
            seq = _int_list(g, seq)
        else:
            seq = g.op("SequenceConstruct", *seq)
    if seq.type is not None and isinstance(seq.type, ir.SequenceType):
        t._set(node.output(), g.op("SequenceAt", seq, index))
        return
    out = g.op("Gather", seq, index, axis=0)
    out.shape = ir.Shape([])
    t._set(node.output(), _mark_scalar(out))


def _append(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    seq, item = (t._get(v) for v in node.inputs())
    if isinstance(item, ir.Value) and item.dtype is not None:
        t._appended_dtypes.setdefault(node.inputsAt(0).unique(), item.dtype)
        if item.shape is not None:
            t._appended_ranks.setdefault(node.inputsAt(0).unique(), len(item.shape))
    if isinstance(seq, ir.Value) and isinstance(seq.type, ir.SequenceType):
        new = t.g.op("SequenceInsert", seq, cast(t.g, item, seq.type.elem_type.dtype))
        new.type = seq.type
        new.meta.update(seq.meta)
        t._set(node.inputsAt(0), new)
        t._set(node.output(), new)
        return
    if isinstance(seq, list) and t.g.graph.name == "scratch":
        seq.append(item)
        t._set(node.output(), seq)
        return
    if not isinstance(seq, list) or t.g.parent is not None:
        raise TranslationError("appending to a list inside data-dependent control flow is not "
                               "supported (build the list in a loop with a constant trip count)")
    seq.append(item)
    t._set(node.output(), seq)


def _len(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    seq = t._get(node.input())
    if isinstance(seq, (list, tuple)):
        t._set(node.output(), len(seq))
    elif isinstance(seq, ir.Value) and isinstance(seq.type, ir.SequenceType):
        t._set(node.output(), _mark_scalar(t.g.op("SequenceLength", seq)))
    else:
        out = t.g.op("Gather", t.g.op("Shape", seq), t.g.const(0, ir.DataType.INT64), axis=0)
        out.shape = ir.Shape([])
        t._set(node.output(), _mark_scalar(out))


def _scalar_binary(op_type: str, py: Callable[..., Any]) -> Callable[..., None]:
    def handler(t: TorchScriptTranslator, node: torch._C.Node) -> None:
        operands = [t._get(v) for v in node.inputs()]
        if not any(isinstance(x, ir.Value) for x in operands):
            t._set(node.output(), py(*operands))
            return
        if len(operands) == 1:
            out = t.g.op(op_type, operands[0])
            out.shape = ir.Shape([])
            t._set(node.output(), _mark_scalar(out))
            return
        a, b = operands
        dtype, _ = _type_info(node.output().type())
        g = t.g
        if dtype == ir.DataType.BOOL and op_type in ("And", "Or"):
            operand = ir.DataType.BOOL
        elif dtype == ir.DataType.BOOL:
            operand = ir.DataType.FLOAT if any(
                isinstance(x, float) or (isinstance(x, ir.Value) and x.dtype is not None
                                         and x.dtype.is_floating_point()) for x in (a, b)) \
                else ir.DataType.INT64
        else:
            operand = dtype or ir.DataType.INT64
        a, b = cast(g, a, operand), cast(g, b, operand)
        if op_type == "FloorDiv":
            out = _floor_div_int(g, a, b) if not operand.is_floating_point() else \
                g.op("Floor", g.op("Div", a, b))
        elif op_type == "Mod":
            out = g.op("Mod", a, b, fmod=1 if operand.is_floating_point() else 0)
            if operand.is_floating_point():
                # Python's float % takes the divisor's sign.
                fix = g.op("And", g.op("Not", g.op("Equal", out, g.const(0.0, like=out))),
                           g.op("Xor", g.op("Less", out, g.const(0.0, like=out)),
                                g.op("Less", b, g.const(0.0, like=b))))
                out = g.op("Where", fix, g.op("Add", out, b), out)
        elif op_type == "NotEqual":
            out = g.op("Not", g.op("Equal", a, b))
        else:
            out = g.op(op_type, a, b)
        out.shape = ir.Shape([])
        t._set(node.output(), _mark_scalar(out))

    return handler


def _if(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    cond = t._get(node.input())
    blocks = list(node.blocks())
    outs = list(node.outputs())
    if not isinstance(cond, ir.Value):
        results = t.translate_block(t.g, blocks[0 if cond else 1], [])
        for out, value in zip(outs, results):
            t._set(out, value)
        return
    g = t.g
    subs = [g.subgraph([], name) for name in ("then_branch", "else_branch")]
    then_results, else_results = (t.translate_block(sub, block, []) for sub, block in zip(subs, blocks))
    # Each TorchScript output becomes: a Python value both branches agree on (no If output),
    # one If output per element of a list both branches build with the same length, or one.
    layout: list[tuple[str, Any]] = []
    pairs: list[tuple[Any, Any, torch._C.Value | None]] = []
    for out, a, b in zip(outs, then_results, else_results):
        if not isinstance(a, (ir.Value, list, tuple)) and not isinstance(b, (ir.Value, list, tuple)) \
                and type(a) is type(b) and a == b:
            layout.append(("same", a))
        elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
            layout.append(("list", (type(a), len(a))))
            pairs.extend((x, y, None) for x, y in zip(a, b))
        elif isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            raise TranslationError("the branches of an `if` build lists of different lengths")
        else:
            layout.append(("one", None))
            pairs.append((a, b, out))
    for sub, index in zip(subs, (0, 1)):
        sub.graph.outputs.extend(_owned(sub, p[index], p[2]) for p in pairs)
        if not pairs:
            # ONNX If needs at least one output.
            sub.graph.outputs.append(_identity(sub, sub.const(0, ir.DataType.INT64)))
    results = g.op("If", cast(g, cond, ir.DataType.BOOL), then_branch=subs[0].graph,
                   else_branch=subs[1].graph, outputs=max(len(pairs), 1))
    results = list(results) if isinstance(results, tuple) else [results]
    for res, a, b in zip(results, subs[0].graph.outputs, subs[1].graph.outputs):
        res.dtype = a.dtype or b.dtype
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            res.shape = ir.Shape([x if x == y else None for x, y in zip(a.shape, b.shape)])
        if res.shape is not None and len(res.shape) == 0:
            _mark_scalar(res)
    it = iter(results)
    for out, (kind, extra) in zip(outs, layout):
        if kind == "same":
            t._set(out, extra)
        elif kind == "list":
            seq_type, n = extra
            t._set(out, seq_type(next(it) for _ in range(n)))
        else:
            t._set(out, t._finish(out, next(it), t.info(out)))


def _owned(sub: GraphBuilder, value: Any, out: torch._C.Value | None = None) -> ir.Value:
    """`value` as an output of `sub`'s graph (a constant, or an Identity of an outer value)."""
    if not isinstance(value, ir.Value):
        dtype = _type_info(out.type())[0] if out is not None else None
        value = sub.const(value, dtype)
    producer = value.producer()
    if producer is not None and producer.graph is sub.graph and not value.is_graph_output():
        return value
    result = sub.op("Identity", value)
    result.dtype, result.shape = value.dtype, value.shape
    return result


def _mutates_lists(block: Any) -> bool:
    return any(n.kind() in _LIST_MUTATIONS for n in _all_nodes(block))


_LIST_MUTATIONS = frozenset({"aten::append", "aten::insert", "aten::pop", "aten::_set_item",
                             "aten::extend", "aten::clear"})


def _loop(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    g = t.g
    inputs = [t._get(v) for v in node.inputs()]
    trip, cond, carried = inputs[0], inputs[1], inputs[2:]
    block = next(iter(node.blocks()))
    outs = list(node.outputs())
    if not isinstance(trip, ir.Value) and not isinstance(cond, ir.Value) and \
            (_mutates_lists(block) or any(isinstance(c, list) for c in carried)):
        # A loop with a known trip count that builds a Python list: unrolled, so the list
        # stays a list of values (ONNX sequences would need the mutation made functional).
        index = 0
        while cond and index < trip:
            results = t.translate_block(g, block, [index, *carried])
            cond, carried = results[0], results[1:]
            if isinstance(cond, ir.Value):
                raise TranslationError("a loop that builds a list and stops on a tensor "
                                       "condition is not supported")
            index += 1
        for out, value in zip(outs, carried):
            t._set(out, value)
        return
    carried_values = []
    for value, out in zip(carried, outs):
        if isinstance(value, list):
            raise TranslationError("a list carried through a loop is not supported (use a tensor)")
        if not isinstance(value, ir.Value):
            value = g.const(value, _type_info(out.type())[0])
        carried_values.append(value)
    # Lists the body appends to become ONNX sequences carried through the loop.
    lists = _appended_lists(t, block)
    sequences = [_as_sequence(t, lv, _element_dtype(t, node, block, lv)) for lv in lists]
    sub = g.subgraph([], "loop_body")
    iteration = ir.Value(name=g.unique_name("loop_iteration"),
                         type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name("loop_condition"),
                         type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    body_in = []
    for value in carried_values:
        rank = len(value.shape) if value.shape is not None else None
        inner = ir.Value(name=g.unique_name(f"{value.name}_in"), type=ir.TensorType(value.dtype),
                         shape=ir.Shape([None] * rank) if rank is not None else None)
        if rank == 0:
            _mark_scalar(inner)
        outer_hint = t._hints.get(id(value)) or (
            [int(d) for d in value.shape] if value.shape is not None
            and all(isinstance(d, int) for d in value.shape) else None)
        if outer_hint is not None:
            t._hints[id(inner)] = outer_hint
        body_in.append(inner)
    seq_in = [ir.Value(name=g.unique_name(f"{seq.name}_in"), type=seq.type) for seq in sequences]
    for seq, inner in zip(sequences, seq_in):
        inner.meta.update(seq.meta)
    for lv, inner in zip(lists, seq_in):
        t._set(lv, inner)
    sub.graph.inputs.extend([iteration, condition, *body_in, *seq_in])
    _mark_scalar(iteration)
    results = t.translate_block(sub, block, [iteration, *body_in])
    again, updated = results[0], results[1:]
    updated = [*updated, *(t._get(lv) for lv in lists)]
    body_in = [*body_in, *seq_in]
    carried_values = [*carried_values, *sequences]
    sub.graph.outputs.append(_owned(sub, cast(sub, again, ir.DataType.BOOL)
                                    if isinstance(again, ir.Value) else bool(again)))
    for value, inner in zip(updated, body_in):
        if isinstance(value, ir.Value) and value.dtype is not None and value.dtype != inner.dtype \
                and not isinstance(inner.type, ir.SequenceType):
            value = sub.op("Cast", value, to=inner.dtype)
        owned = _owned(sub, value if isinstance(value, ir.Value) else sub.const(value, inner.dtype))
        sub.graph.outputs.append(owned)
    max_trip = trip if isinstance(trip, ir.Value) else g.const(int(trip), ir.DataType.INT64)
    if not isinstance(trip, ir.Value) and trip >= _INT64_MAX:
        max_trip = None
    first = cast(g, cond, ir.DataType.BOOL) if isinstance(cond, ir.Value) else g.const(bool(cond))
    results = g.op("Loop", max_trip and cast(g, max_trip, ir.DataType.INT64), first,
                   *carried_values, body=sub.graph, outputs=max(len(carried_values), 1))
    results = results if isinstance(results, tuple) else (results,)
    for lv, res, seq in zip(lists, results[len(outs):], sequences):
        res.type = seq.type
        res.meta.update(seq.meta)
        t._set(lv, res)
    for out, res, value in zip(outs, results, carried_values):
        res.dtype = value.dtype
        if value.shape is not None:
            res.shape = ir.Shape([None] * len(value.shape))
            if len(value.shape) == 0:
                _mark_scalar(res)
        t._set(out, t._finish(out, res, t.info(out)))


def _appended_lists(t: TorchScriptTranslator, block: Any) -> list[torch._C.Value]:
    """The lists defined before `block` that it appends to (TorchScript lists are mutable)."""
    found: dict[int, torch._C.Value] = {}
    for n in _all_nodes(block):
        if n.kind() == "aten::append":
            lv = n.inputsAt(0)
            if lv.unique() in t.env:
                found.setdefault(lv.unique(), lv)
    return list(found.values())


def _element_dtype(t: TorchScriptTranslator, node: torch._C.Node, block: Any,
                   lv: torch._C.Value) -> ir.DataType:
    current = t._get(lv)
    if isinstance(current, ir.Value) and isinstance(current.type, ir.SequenceType):
        return current.type.elem_type.dtype
    if isinstance(current, list) and current and isinstance(current[0], ir.Value) \
            and current[0].dtype is not None:
        return current[0].dtype
    # An empty list: translate the body once, aside, to see what it appends.
    t._appended_dtypes.pop(lv.unique(), None)
    outer_env = dict(t.env)
    scratch = t.g.subgraph([], "scratch")
    inputs = [t._get(v) for v in node.inputs()]
    fake = [_mark_scalar(ir.Value(name="scratch_iter", type=ir.TensorType(ir.DataType.INT64),
                                  shape=ir.Shape([])))]
    for value in inputs[2:]:
        if isinstance(value, ir.Value):
            stand_in = ir.Value(name="scratch", type=value.type, shape=value.shape)
            stand_in.meta.update(value.meta)
            if id(value) in t._hints:
                t._hints[id(stand_in)] = t._hints[id(value)]
            fake.append(stand_in)
        else:
            fake.append(value)
    t._set(lv, [])
    try:
        t.translate_block(scratch, block, fake)
    finally:
        t.env = outer_env
    dtype = t._appended_dtypes.get(lv.unique())
    if dtype is None:
        raise TranslationError("cannot tell the dtype of the tensors a loop appends to a list")
    return dtype


def _as_sequence(t: TorchScriptTranslator, lv: torch._C.Value, dtype: ir.DataType) -> ir.Value:
    current = t._get(lv)
    if isinstance(current, ir.Value):
        return current
    g = t.g
    if not current:
        seq = g.op("SequenceEmpty", dtype=int(dtype))
        rank = t._appended_ranks.get(lv.unique())
    else:
        seq = g.op("SequenceConstruct", *[cast(g, v, dtype) for v in current])
        rank = len(current[0].shape) if current[0].shape is not None else None
    seq.type = ir.SequenceType(ir.TensorType(dtype))
    if rank is not None:
        seq.meta[_ELEM_RANK] = rank
    return seq


def _python_op(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    """A torch.autograd.Function: its `symbolic(g, ...)` if it has one, else its ops inlined."""
    cls = getattr(node.pyobj(), "__self__", None)
    tensors = iter(t._get(v) for v in node.inputs())
    scalars = iter(node.scalar_args())
    args = [next(tensors) if c == "d" else next(scalars) for c in node.cconv()]
    outs = list(node.outputs())
    symbolic = getattr(cls, "symbolic", None)
    if symbolic is not None:
        results = call_symbolic(symbolic, t.g, args)
        results = list(results) if isinstance(results, (tuple, list)) else [results]
        for out, res in zip(outs, results):
            t._set(out, t._finish(out, res, t.info(out)))
        return
    if not t.inlines(node):
        # Kept as one node (autograd_inlining=False or a fallthrough export type).
        if t.export_type == OperatorExportTypes.ONNX:
            raise TranslationError(f"autograd.Function {node.pyname()} has no symbolic and "
                                   "autograd_inlining is False")
        results = t.g.op("PythonOp", *[a for a in args if isinstance(a, ir.Value)],
                         domain="prim", outputs=len(outs), name=node.pyname())
        results = results if isinstance(results, tuple) else (results,)
        for out, res in zip(outs, results):
            t._set(out, t._finish(out, res, t.info(out)))
        return
    if not node.hasAttribute("Subgraph"):
        raise TranslationError(f"autograd.Function {node.pyname()} has no symbolic and was not "
                               "recorded as a subgraph")
    subgraph = node.g("Subgraph")
    # The subgraph numbers its values on its own: translate it with its own environment.
    outer_env = t.env
    t.env = {}
    try:
        results = t.translate_block(t.g, subgraph, [v for v in args if isinstance(v, ir.Value)])
    finally:
        t.env = outer_env
    for out, res in zip(outs, results):
        t._set(out, res)


def _passthrough(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    t._set(node.output(), t._get(node.input()))


def _ignore(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    for out in node.outputs():
        t._set(out, None)


def _raise_exception(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    # A branch that raises: ONNX has no exceptions; the branch yields nothing useful.
    for out in node.outputs():
        t._set(out, None)


def _is_none(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    a, b = (t._get(v) for v in node.inputs())
    if isinstance(a, ir.Value) and isinstance(b, ir.Value):
        same = a is b
    elif isinstance(a, ir.Value) or isinstance(b, ir.Value):
        same = False  # a value is never None
    else:
        same = a is b or a == b
    t._set(node.output(), same if node.kind() == "aten::__is__" else not same)


def _unchecked_cast(t: TorchScriptTranslator, node: torch._C.Node) -> None:
    t._set(node.output(), t._get(node.input()))


_PRIM: dict[str, Callable[[TorchScriptTranslator, torch._C.Node], None]] = {
    "prim::Constant": _constant,
    "prim::ListConstruct": _list_construct,
    "prim::ListUnpack": _unpack,
    "prim::TupleConstruct": _tuple_construct,
    "prim::DictConstruct": _dict_construct,
    "prim::TupleUnpack": _unpack,
    "prim::TupleIndex": _tuple_index,
    "prim::GetAttr": _get_attr,
    "prim::NumToTensor": _num_to_tensor,
    "prim::If": _if,
    "prim::Loop": _loop,
    "prim::device": _device,
    "prim::dtype": _dtype,
    "prim::unchecked_cast": _unchecked_cast,
    "prim::RaiseException": _raise_exception,
    "prim::Uninitialized": _ignore,
    "prim::PythonOp": _python_op,
    "prim::min": _scalar_binary("Min", min),
    "prim::max": _scalar_binary("Max", max),
}

_SPECIAL: dict[str, Callable[[TorchScriptTranslator, torch._C.Node], None]] = {
    "aten::size": _size,
    "aten::dim": _dim,
    "aten::Int": _to_scalar(ir.DataType.INT64, int),
    "aten::Float": _to_scalar(ir.DataType.FLOAT, float),
    "aten::Bool": _to_scalar(ir.DataType.BOOL, bool),
    "aten::ScalarImplicit": _to_scalar(None, lambda v: v),
    "aten::__getitem__": _getitem,
    "aten::append": _append,
    "aten::len": _len,
    "aten::__is__": _is_none,
    "aten::__isnot__": _is_none,
    "aten::warn": _ignore,
    "aten::detach": _passthrough,
    "aten::__not__": lambda t, n: t._set(n.output(), (not t._get(n.input())) if not isinstance(
        t._get(n.input()), ir.Value) else t.g.op("Not", t._get(n.input()))),
}

# Scalar arithmetic on ints/floats (TorchScript's `int + int` etc.): schema-less shorthands.
_SCALAR_OPS = {
    "add": ("Add", lambda a, b: a + b), "sub": ("Sub", lambda a, b: a - b),
    "mul": ("Mul", lambda a, b: a * b), "floordiv": ("FloorDiv", lambda a, b: a // b),
    "eq": ("Equal", lambda a, b: a == b), "ne": ("NotEqual", lambda a, b: a != b),
    "lt": ("Less", lambda a, b: a < b), "gt": ("Greater", lambda a, b: a > b),
    "le": ("LessOrEqual", lambda a, b: a <= b), "ge": ("GreaterOrEqual", lambda a, b: a >= b),
    "div": ("Div", lambda a, b: a / b), "remainder": ("Mod", lambda a, b: a % b),
    "__and__": ("And", lambda a, b: a and b), "__or__": ("Or", lambda a, b: a or b),
    "neg": ("Neg", lambda a: -a),
}


def is_scalar_node(node: torch._C.Node) -> bool:
    """Whether an aten node is arithmetic on Python numbers (int/float/bool operands)."""
    kind = node.kind()
    if not kind.startswith("aten::") or kind[6:] not in _SCALAR_OPS:
        return False
    return all(isinstance(v.type(), (torch._C.IntType, torch._C.FloatType, torch._C.BoolType,
                                     torch._C.NumberType)) for v in node.inputs())


_SCALAR_HANDLERS = {name: _scalar_binary(op, py) for name, (op, py) in _SCALAR_OPS.items()}
