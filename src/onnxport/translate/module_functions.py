"""export_modules_as_functions: group the nodes of each nn.Module call into an ONNX local function.

Every node carries the module path of the call it came from (metadata `pkg.onnxport.module`,
set by the translators). For each selected module (deepest first), each maximal run of
consecutive nodes under its path becomes one call of a function in domain
`pkg.<module class's __module__>` named after the class; the values the run reads become
the function's inputs (weights included), those read after it its outputs. Class-level
annotated attributes of the module (PEP 526) with plain values become attributes of the call
and of the function. Calls whose bodies are the same share one function; a different body
gets a numbered name (`Linear_1`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import onnx_ir as ir
import torch

_META_MODULE = "pkg.onnxport.module"
_PLAIN = (bool, int, float, str)


def _selected(module: torch.nn.Module, which: bool | Iterable[type]) -> bool:
    if which is True:
        return True
    return isinstance(which, (set, frozenset, list, tuple)) and type(module) in which


def _annotated(module: torch.nn.Module) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for cls in reversed(type(module).__mro__):
        if cls in (torch.nn.Module, object):
            continue
        for name in getattr(cls, "__annotations__", {}):
            value = getattr(module, name, None)
            if isinstance(value, _PLAIN) or (isinstance(value, (list, tuple)) and value and
                                             all(isinstance(v, _PLAIN) for v in value)
                                             and len({type(v) for v in value}) == 1):
                found[name] = list(value) if isinstance(value, tuple) else value
    return found


def _path_of(node: ir.Node) -> str:
    return node.metadata_props.get(_META_MODULE, "")


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


def _canonical(function: ir.Function) -> str:
    proto = ir.serde.serialize_function(function)
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        if not name:
            return name
        return names.setdefault(name, f"v{len(names)}")

    for node in proto.node:
        node.name = ""
        node.ClearField("metadata_props")
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
    proto.ClearField("value_info")
    proto.ClearField("opset_import")
    proto.input[:] = [rename(n) for n in proto.input]
    proto.output[:] = [rename(n) for n in proto.output]
    proto.name = ""
    return proto.SerializeToString().hex()


def modules_as_functions(model: ir.Model, root: torch.nn.Module,
                         which: bool | Iterable[type]) -> None:
    """Replace the nodes of each selected module call of `model`'s main graph by a call."""
    graph = model.graph
    paths = {_path_of(n) for n in graph}
    modules = {}
    for path in paths:
        # Every ancestor of a path that appears is a module call too.
        parts = path.split(".") if path else []
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            try:
                module = root.get_submodule(prefix)
            except AttributeError:
                continue
            if _selected(module, which):
                modules[prefix] = module
    _split_constants(graph)
    bodies: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for path in sorted(modules, key=lambda p: -p.count(".")):
        module = modules[path]
        for run in _runs(graph, path):
            _outline(model, run, path, module, bodies)


def _split_constants(graph: ir.Graph) -> None:
    """A constant read by nodes of several modules gets one copy per module (the builder
    shares small constants across the whole graph)."""
    order = {id(n): i for i, n in enumerate(graph)}
    for node in list(graph):
        if node.op_type != "Constant" or node.domain:
            continue
        value = node.outputs[0]
        groups: dict[str, list[tuple[ir.Node, int]]] = {}
        for use in value.uses():
            groups.setdefault(_path_of(use.node), []).append((use.node, use.idx))
        own = _path_of(node)
        for path, uses in groups.items():
            if path == own:
                continue
            copy = ir.Node("", "Constant", [], list(node.attributes.values()),
                           name=f"{node.name}_{path}",
                           metadata_props={**node.metadata_props, _META_MODULE: path})
            out = copy.outputs[0]
            out.name = f"{value.name}_{path.replace('.', '_')}"
            out.type, out.shape, out.const_value = value.type, value.shape, value.const_value
            # Placed just before its first reader, inside that module's run of nodes.
            graph.insert_before(min((u for u, _ in uses), key=lambda u: order[id(u)]), copy)
            for user, idx in uses:
                user.replace_input_with(idx, out)
        if not value.uses() and not value.is_graph_output():
            graph.remove(node, safe=False)


def _runs(graph: ir.Graph, path: str) -> list[list[ir.Node]]:
    runs: list[list[ir.Node]] = []
    current: list[ir.Node] = []
    for node in graph:
        if _under(_path_of(node), path):
            current.append(node)
        elif current:
            if node.op_type == "Constant" and not node.domain and not _path_of(node):
                continue  # a constant hoisted between the calls' nodes
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _outline(model: ir.Model, run: list[ir.Node], path: str, module: torch.nn.Module,
             bodies: dict[tuple[str, str], list[tuple[str, str]]]) -> None:
    graph = model.graph
    members = {id(n) for n in run}
    inputs: list[ir.Value] = []
    local: dict[int, ir.Value] = {}
    constants: list[ir.Node] = []
    for node in list(run):
        for index, value in enumerate(node.inputs):
            if value is None:
                continue
            producer = value.producer()
            if producer is not None and id(producer) in members:
                continue
            inner = local.get(id(value))
            if inner is None and producer is not None and producer.op_type == "Constant" \
                    and not producer.domain:
                # A constant made outside the run (shared by the builder): copied in.
                copy = ir.Node("", "Constant", [], list(producer.attributes.values()),
                               name=f"{producer.name}_copy")
                inner = copy.outputs[0]
                inner.name = f"{value.name}_copy"
                inner.type, inner.shape, inner.const_value = value.type, value.shape, \
                    value.const_value
                local[id(value)] = inner
                constants.append(copy)
                node.replace_input_with(index, inner)
                continue
            if inner is None:
                inner = ir.Value(name=f"{value.name}", type=value.type, shape=value.shape)
                local[id(value)] = inner
                inputs.append(value)
            node.replace_input_with(index, inner)
    outputs: list[ir.Value] = []
    for node in run:
        for out in node.outputs:
            external = [(u.node, u.idx) for u in out.uses() if id(u.node) not in members]
            if external or out.is_graph_output():
                outputs.append(out)
    cls = type(module)
    domain = f"pkg.{cls.__module__}"
    attrs = _annotated(module)
    call = ir.Node(domain, cls.__name__, inputs, [ir.convenience.convert_attribute(k, v)
                                                  for k, v in attrs.items()],
                   num_outputs=len(outputs), name=f"/{path.replace('.', '/')}/{cls.__name__}",
                   metadata_props={_META_MODULE: path.rpartition(".")[0]} if "." in path else None)
    # Redirect the outside uses of the run's results to the call's outputs.
    for out, res in zip(outputs, call.outputs):
        res.type, res.shape = out.type, out.shape
        for user, idx in [(u.node, u.idx) for u in out.uses() if id(u.node) not in members]:
            user.replace_input_with(idx, res)
        if out.is_graph_output():
            position = list(graph.outputs).index(out)
            name = out.name
            out.name = f"{name}_inner"
            graph.outputs[position] = res
            res.name = name
        else:
            res.name = out.name
            out.name = f"{out.name}_inner"
    graph.insert_after(run[-1], call)
    for node in reversed(run):
        graph.remove(node, safe=False)
    function_inputs = [local[id(v)] for v in inputs]
    # Constants first (they read nothing), so equal bodies serialize alike.
    own_constants = [n for n in run if n.op_type == "Constant" and not n.domain]
    rest = [n for n in run if not (n.op_type == "Constant" and not n.domain)]
    body = ir.Graph(function_inputs, outputs, nodes=[*constants, *own_constants, *rest],
                    opset_imports=dict(graph.opset_imports), name=cls.__name__)
    function = ir.Function(domain, cls.__name__, graph=body,
                           attributes=[ir.convenience.convert_attribute(k, v)
                                       for k, v in attrs.items()])
    key = _canonical(function)
    known = bodies.setdefault((domain, cls.__name__), [])
    for name, existing in known:
        if existing == key:
            call.op_type = name
            break
    else:
        name = cls.__name__ if not known else f"{cls.__name__}_{len(known)}"
        known.append((name, key))
        call.op_type = name
        function.name = name
        model.functions[function.identifier()] = function
    graph.opset_imports.setdefault(domain, 1)
