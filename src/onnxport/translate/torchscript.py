"""The TorchScript node loop: walk an inlined torch._C.Graph and call the ONE op library.

An `aten::` node finds its OpOverload from its schema (`aten::add.Tensor(...)`), binds its
inputs to the schema (prim::Constant inputs become Python values, tensors `ir.Value`s, lists
Python lists) and calls the same translation function the FX path calls, with the same
GraphBuilder `g`. The other nodes go to the helpers beside this module: `prim::` nodes
(constants, lists, tuples, attributes, If, Loop) to `ts_prims`, the scalar ops tracing emits
(`aten::size`, `aten::Int`, int arithmetic, ...) to `ts_scalars`, nodes with a user symbolic
function and autograd.Functions to `ts_symbolic`; `ts_graph` reads the graph (node overloads,
scopes, sources, value types).

Bookkeeping follows the FX translator: output dtypes (and shapes, where static) come from
the TorchScript value types, a Cast is inserted where a translation's dtype differs; graph
inputs take forward's parameter names (or `input_names`), initializers their state_dict
path, nodes the module path of their scope.

In-place ops keep eager's aliasing: the translator records which values are views of which
(from the op schemas' alias annotations; reshape/flatten/to/contiguous only when the traced
strides make them views in eager). An in-place op's result is written back through the views
it was applied to into their root (scatter for select/slice/narrow/diagonal and elements of
split/chunk/unbind, the inverse Transpose for permute/transpose, a Reshape for same-order
views), and every other view of that root is made again from the new values. A write through
a view it cannot invert (movedim, expand, ...) is a TranslationError naming both ops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor

from onnxport import _dtypes
from onnxport.capture.torchscript import OperatorExportTypes, ScriptCaptured
from onnxport.errors import MissingOp, OnnxExporterError, TranslationError
from onnxport.translate.binding import _keyword_only
from onnxport.translate.builder import GraphBuilder
from onnxport.translate.registry import Registry, Translation
from onnxport.translate.translator import IR_VERSION, _identity, _version, unsupported_error
from onnxport.translate.ts_graph import (
    _all_nodes, _debug_name, _dispatch_overload, _element_outputs, _has_symbolic, _is_tensor_type,
    _mark_scalar, _meta_infos, _node_overload, _OutVal, _scope_path, _shape, _source,
    _type_info,
)
from onnxport.translate.ts_prims import _ELEM_RANK, _PRIM, _SPECIAL, _Obj
from onnxport.translate.ts_scalars import (
    _SCALAR_HANDLERS, _SCALAR_TYPES, _TORCH_TO_CODE, _int_list, is_scalar_node,
)
from onnxport.translate.ts_symbolic import _node_symbolic, _user_symbolic

_META_SOURCE = "pkg.onnxport.source"
_META_MODULE = "pkg.onnxport.module"
# ops whose list argument may be an ONNX sequence (built in a loop): ConcatFromSequence's new_axis
_FROM_SEQUENCE = {torch.ops.aten.cat.default: 0, torch.ops.aten.stack.default: 1}
# Views whose elements are the viewed tensor's in the same order: a write through one is the
# new values reshaped to the viewed tensor's shape.
_SAME_ORDER_VIEWS = frozenset({
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::flatten", "aten::unflatten",
    "aten::unsqueeze", "aten::squeeze", "aten::view_as", "aten::reshape_as", "aten::alias",
    "aten::detach", "aten::contiguous", "aten::to", "aten::type_as",
})
# Ops whose result is a view of their input only sometimes (else a copy): decided per node from
# the traced sizes and strides, as eager decides.
_MAY_COPY = frozenset({"aten::reshape", "aten::flatten", "aten::reshape_as", "aten::contiguous",
                       "aten::to", "aten::type_as"})


@dataclasses.dataclass(slots=True)
class _ViewOf:
    """A TorchScript value that shares memory with `base`: made by view op `node` (None: the
    output of an in-place op, the same tensor as its input)."""

    base: torch._C.Value
    node: torch._C.Node | None
    # For an element of a Tensor[] of views (split, chunk, unbind, ...): its position.
    index: int | None = None


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
        # Aliasing, as eager has it: each value that is a view of another (by unique id), and
        # per root (a value that is no view) its views in the order they were made. An in-place
        # op writes its result back through the views it was applied to, into the root, and the
        # root's other views are made again from the new values.
        self._alias: dict[int, _ViewOf] = {}
        self._members: dict[int, list[torch._C.Value]] = {}
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
        return _node_symbolic(node, self.symbolic_opset)

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
        numbers = set(captured.number_inputs)
        for position, (value, example) in enumerate(zip(inputs, captured.example_inputs)):
            if position in numbers:
                default = captured.input_names[index] if index < len(captured.input_names) \
                    else f"input_{index}"
                name = self.input_names[index] if index < len(self.input_names) else default
                index += 1
                self._set(value, self._number_input(name, value))
                continue
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

    def _number_input(self, name: str, value: torch._C.Value) -> ir.Value:
        """A scripted model's int / float / bool parameter as a 0-d graph input.

        Its ONNX type is torch.onnx's: INT64, DOUBLE (a Python float) or BOOL. The scalar
        handlers and control flow read it as a 0-d scalar value of the type the graph gives
        floats (FLOAT), so a float input is cast once where it enters.
        """
        ty = value.type()
        dtype = ir.DataType.INT64 if isinstance(ty, torch._C.IntType) else \
            ir.DataType.DOUBLE if isinstance(ty, torch._C.FloatType) else ir.DataType.BOOL
        out = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape([]))
        self.g.reserve_name(name)
        self.g.graph.inputs.append(out)
        self._bound.add(id(out))
        if dtype == ir.DataType.DOUBLE:
            g = self.g
            g.scope.name_prefix, g.scope.value_prefix, g.scope.metadata = "", name, {}
            out = g.op("Cast", out, to=ir.DataType.FLOAT)
            out.shape = ir.Shape([])
        return _mark_scalar(out)

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
                _user_symbolic(self, node, symbolic)
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

    def _aten(self, node: torch._C.Node, *, remake: bool = False) -> None:
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
        if remake:
            return
        if inplace:
            # The in-place op's output is its input; later reads of the input, of the views
            # it was taken through and of the other views of the same memory see the result.
            self._add_view(node.outputsAt(0), _ViewOf(node.inputsAt(0), None))
            self._write(node.inputsAt(0), self._get(node.outputsAt(0)), node)
        elif _returns_view(overload) and _is_view_here(node):
            self._add_view(node.outputsAt(0), _ViewOf(node.inputsAt(0), node))
        elif overload is not None and str(overload._schema).endswith("-> Tensor(a)[]") and \
                outs and outs[0].node().kind() == "prim::ListUnpack":
            for k, out in enumerate(outs):
                self._add_view(out, _ViewOf(node.inputsAt(0), node, k))

    # -- aliasing ------------------------------------------------------------------------
    def _root(self, value: torch._C.Value) -> torch._C.Value:
        while value.unique() in self._alias:
            value = self._alias[value.unique()].base
        return value

    def _add_view(self, value: torch._C.Value, view: _ViewOf) -> None:
        self._alias[value.unique()] = view
        self._members.setdefault(self._root(view.base).unique(), []).append(value)

    def _write(self, target: torch._C.Value, value: Any, writer: torch._C.Node) -> None:
        """`target` now holds `value` (the result of in-place op `writer`): write it back through
        the views `target` was taken through into their root, then remake the root's other
        views that are read after `writer` (or that such views were taken from)."""
        self._set(target, value)
        written = {target.unique()}
        while target.unique() in self._alias:
            view = self._alias[target.unique()]
            value = self._write_through(view, self._get(view.base), value)
            self._set(view.base, value)
            target = view.base
            written.add(target.unique())
        members = [m for m in self._members.get(target.unique(), [])
                   if m.unique() not in written]
        live: set[int] = set()
        for member in reversed(members):
            if member.unique() in live or _read_after(member, writer):
                live.add(member.unique())
                live.add(self._alias[member.unique()].base.unique())
        remade: set[torch._C.Node] = set()
        for member in members:
            if member.unique() not in live:
                continue
            view = self._alias[member.unique()]
            if view.node is None:
                self._set(member, self._get(view.base))
                continue
            if view.node not in remade:
                self._aten(view.node, remake=True)
                remade.add(view.node)
            if view.index is not None:
                self._set(member, self._get(view.node.outputsAt(0))[view.index])

    def _write_through(self, view: _ViewOf, base: Any, value: Any) -> Any:
        """The new values of `base` after `value` was written into its view `view`."""
        if view.node is None:
            return value
        g = self.g
        kind = view.node.kind()
        overload, _ = _dispatch_overload(view.node)
        args, _ = self._bind(view.node, overload, None)
        if not isinstance(base, ir.Value) or not isinstance(value, ir.Value):
            raise TranslationError(f"the in-place op writes through the view made by {kind} "
                                   "into a value that is not a tensor")
        if value.dtype is not None and base.dtype is not None and value.dtype != base.dtype:
            value = g.op("Cast", value, to=base.dtype)
        rank = len(base.shape) if base.shape is not None else None
        g.out_dtypes = (base.dtype,)
        g.out_vals = (_OutVal(base.dtype, list(base.shape) if base.shape is not None else None,
                              True),)
        if view.index is not None:
            out = self._write_element(view, base, value, args, overload)
        elif kind == "aten::slice" and _whole_slice(args):
            # `y[:, 0] = v` traces a slice of all of dim 0 first: written back as it is.
            out = value
        elif kind in _SAME_ORDER_VIEWS:
            dims = list(base.shape) if base.shape is not None else None
            if dims is not None and all(isinstance(d, int) for d in dims):
                shape = g.const(dims, ir.DataType.INT64)
            else:
                shape = g.op("Shape", base)
            out = g.op("Reshape", value, shape)
        elif kind in ("aten::permute", "aten::transpose", "aten::t") and rank is not None:
            if kind == "aten::permute":
                perm = [int(d) % max(rank, 1) for d in args[1]]
            else:
                d0, d1 = (args[1], args[2]) if kind == "aten::transpose" else (0, 1)
                perm = list(range(rank))
                if rank >= 2:
                    perm[int(d0) % rank], perm[int(d1) % rank] = int(d1) % rank, int(d0) % rank
            inverse = [perm.index(i) for i in range(rank)]
            out = g.op("Transpose", value, perm=inverse)
        elif kind in ("aten::select", "aten::slice", "aten::narrow", "aten::diagonal"):
            if kind == "aten::narrow":
                dim, start, length = args[1], args[2], args[3]
                if not isinstance(start, int) or not isinstance(length, int):
                    raise TranslationError("the in-place op writes through aten::narrow with "
                                           "a start or length known only at run time")
                scatter, scatter_args = torch.ops.aten.slice_scatter.default, \
                    [dim, start, start + length, 1]
            elif kind == "aten::select":
                scatter, scatter_args = torch.ops.aten.select_scatter.default, args[1:]
            elif kind == "aten::diagonal":
                scatter, scatter_args = torch.ops.aten.diagonal_scatter.default, args[1:]
            else:
                scatter, scatter_args = torch.ops.aten.slice_scatter.default, args[1:]
            translation = self.registry.lookup(scatter, self.opset)
            if translation is None:
                raise TranslationError(f"no translation for {scatter} to write through a view")
            out = translation.function(g, base, value, *scatter_args)
        else:
            raise TranslationError(
                f"the in-place op writes into a view made by {kind}, which the TorchScript "
                "flavour cannot write back into the viewed tensor; clone the view before the "
                "in-place op, or export with dynamo=True")
        if base.dtype is not None:
            out.dtype = base.dtype
        out.shape = base.shape
        return out

    def _write_element(self, view: _ViewOf, base: ir.Value, value: ir.Value, args: list[Any],
                       overload: Any) -> ir.Value:
        """`base` with `value` written at element `view.index` of its split/chunk/unbind."""
        assert view.node is not None and view.index is not None
        kind = view.node.kind()
        named = dict(zip([a.name for a in overload._schema.arguments], args))
        dim = named.get("dim", 0)
        rank = len(base.shape) if base.shape is not None else None
        sizes = self.info(view.base)[1]
        if not isinstance(dim, int) or rank is None or sizes is None or \
                sizes[dim % rank] is None:
            raise TranslationError(f"the in-place op writes into an element of {kind} along a "
                                   "dim whose size is known only at run time")
        dim %= rank
        if kind == "aten::unbind":
            scatter, scatter_args = torch.ops.aten.select_scatter.default, [dim, view.index]
        else:
            # The elements' traced sizes along `dim` give where this one starts.
            lengths = []
            for element in _element_outputs(view.node):
                element_sizes = self.info(element)[1]
                if element_sizes is None or element_sizes[dim] is None:
                    raise TranslationError(f"the in-place op writes into an element of {kind} "
                                           "whose size is known only at run time")
                lengths.append(int(element_sizes[dim]))
            start = sum(lengths[:view.index])
            scatter = torch.ops.aten.slice_scatter.default
            scatter_args = [dim, start, start + lengths[view.index], 1]
        translation = self.registry.lookup(scatter, self.opset)
        if translation is None:
            raise TranslationError(f"no translation for {scatter} to write through a view")
        return translation.function(self.g, base, value, *scatter_args)

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


def _read_after(value: torch._C.Value, node: torch._C.Node) -> bool:
    """Whether a node after `node` (or the graph's return) reads `value`."""
    for use in value.uses():
        try:
            if use.user.isAfter(node):
                return True
        except RuntimeError:  # nodes the graph cannot order: count it as read
            return True
    return False


def _whole_slice(args: list[Any]) -> bool:
    """Whether aten::slice's bound arguments (self, dim, start, end, step) take all of dim."""
    start, end, step = (list(args[2:5]) + [None, None, 1])[:3]
    return start in (None, 0) and (end is None or (isinstance(end, int) and end >= 2**62)) \
        and step == 1


def _returns_view(overload: Any) -> bool:
    """Whether the op's schema says its one result may share memory with its first argument."""
    if overload is None:
        return False
    schema = overload._schema
    if len(schema.returns) != 1 or not schema.arguments:
        return False
    out, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return out is not None and first is not None and not out.is_write and \
        bool(set(out.before_set) & set(first.before_set)) and str(schema.returns[0].type) == "Tensor"


def _is_view_here(node: torch._C.Node) -> bool:
    """Whether this node's result is a view of its input in the traced run.

    An op of _MAY_COPY returns a view only when it can: reshape/flatten when the new shape can
    be expressed with the input's strides (asked of a meta tensor with the traced strides),
    contiguous/to/type_as when nothing changes. Without traced sizes (scripted graphs) it
    counts as a copy.
    """
    kind = node.kind()
    if kind not in _MAY_COPY:
        return True
    src, out = node.inputsAt(0).type(), node.outputsAt(0).type()
    if not isinstance(src, torch._C.TensorType) or not isinstance(out, torch._C.TensorType):
        return False
    try:
        sizes, strides = src.sizes(), src.strides()
        out_sizes, out_strides = out.sizes(), out.strides()
    except RuntimeError:
        return False
    if sizes is None or strides is None or out_sizes is None or None in sizes or \
            None in strides or None in out_sizes or src.scalarType() != out.scalarType():
        return False
    if kind in ("aten::reshape", "aten::flatten", "aten::reshape_as"):
        try:
            torch.empty_strided(sizes, strides, device="meta").view(out_sizes)
        except RuntimeError:
            return False
        return True
    overload = _node_overload(node)
    names = [a.name for a in overload._schema.arguments] if overload is not None else []
    if "copy" in names and names.index("copy") < node.inputsSize():
        flag = node.inputsAt(names.index("copy"))
        if flag.node().kind() != "prim::Constant" or flag.toIValue():
            return False
    return list(sizes) == list(out_sizes) and out_strides is not None and \
        list(strides) == list(out_strides)


def translate_script(captured: ScriptCaptured, registry: Registry, opset: int, *,
                     input_names: Sequence[str] | None = None, **options: Any) -> ir.Model:
    """Translate `captured`; the options are TorchScriptTranslator's.

    A scripted model's int / float / bool arguments are graph inputs (`number_inputs`). Where
    a translation needs one of them known at export time (a reduction's `dim`, ...) and fails
    with the run-time value, the graph is translated again with those arguments as constants
    (their example values), as before they were inputs, with a UserWarning naming them and
    the op; `input_names` then skip them.
    """
    try:
        return TorchScriptTranslator(captured, registry, opset, input_names=input_names,
                                     **options).run()
    except TranslationError as first:
        if not captured.number_inputs:
            raise
        failure = first
    numbers = set(captured.number_inputs)
    positions = [i for i, x in enumerate(captured.example_inputs)
                 if i in numbers or isinstance(x, torch.Tensor)]
    baked_names = [name for name, i in zip(captured.input_names, positions) if i in numbers]
    names = None
    if input_names is not None:
        names = [name for k, name in enumerate(input_names)
                 if k >= len(positions) or positions[k] not in numbers]
    baked = dataclasses.replace(
        captured, number_inputs=(),
        input_names=[n for n, i in zip(captured.input_names, positions) if i not in numbers])
    try:
        model = TorchScriptTranslator(baked, registry, opset, input_names=names,
                                      **options).run()
    except TranslationError:
        raise failure from None
    import warnings

    described = ", ".join(f"{n}={captured.example_inputs[i]!r}"
                          for n, i in zip(baked_names, sorted(numbers)))
    first_line = str(failure).splitlines()[0] if str(failure) else type(failure).__name__
    warnings.warn(f"the scripted model's number argument(s) {described} are exported as "
                  f"constants, not graph inputs: the ONNX model computes with these values "
                  f"whatever is given at run time. With them as inputs the translation failed "
                  f"({first_line})", UserWarning, stacklevel=4)
    return model
