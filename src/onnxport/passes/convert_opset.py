"""Reach an opset below the op library's (18) by converting the finished model down, and
bring users' ONNX functions (onnxscript translations written for another opset) to the
model's opset.

The weights are detached before conversion and reattached after, so converting never copies
them through protobuf.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import onnx.helper
import onnx.numpy_helper
import onnx.version_converter
import onnx_ir as ir

from onnxport.errors import PassError

LIBRARY_OPSET = 18


# onnx's version converter lacks most down adapters (Relu 14 -> 13, BatchNormalization 15 ->
# 14, Identity, Reshape, ...), although most version bumps only widened type constraints or
# added attributes and inputs a node may not use. A node whose inputs, outputs and attributes
# all exist in the target version's schema means the same there: it is hidden from the
# converter (moved to a private domain) and restored afterwards. Nodes that use something the
# target version lacks (ReduceMean's `axes` input at 18, Split's `num_outputs`) still go
# through the converter's adapters.
_HIDDEN_DOMAIN = "pkg.onnxport.unadapted"


def _fits_older(node: onnx.NodeProto, opset: int, constants: dict[str, onnx.TensorProto],
                current: int = LIBRARY_OPSET) -> bool:
    try:
        new = onnx.defs.get_schema(node.op_type, current)
        old = onnx.defs.get_schema(node.op_type, opset)
    except onnx.defs.SchemaError:
        return False
    if new.since_version <= opset or old.deprecated:
        return False
    for attr in node.attribute:
        if attr.name in old.attributes:
            continue
        if node.op_type == "Reshape" and attr.name == "allowzero" and _no_zeros(node, constants):
            continue  # allowzero only matters for a 0 in the target shape
        if node.op_type == "Split" and attr.name == "num_outputs" and len(node.input) == 1 \
                and attr.i == len(node.output) and opset >= 13:
            continue  # Split 13 splits into as many equal parts as it has outputs
        # An attribute the older version lacks is fine at its default (Reshape's allowzero=0).
        default = new.attributes[attr.name].default_value if attr.name in new.attributes else None
        if default is None or not default.name or \
                onnx.helper.get_attribute_value(default) != onnx.helper.get_attribute_value(attr):
            return False
    variadic = bool(old.inputs) and old.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    if not variadic and len(node.input) > len(old.inputs):
        return False
    if len(node.input) < old.min_input:
        return False
    return len(node.output) <= old.max_output


def _no_zeros(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> bool:
    shape = constants.get(node.input[1]) if len(node.input) > 1 else None
    if shape is None or shape.data_location == onnx.TensorProto.EXTERNAL:
        return False
    return 0 not in onnx.numpy_helper.to_array(shape).tolist()


def _graphs(graph: onnx.GraphProto):  # type: ignore[no-untyped-def]
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _hide_unadapted(proto: onnx.ModelProto, opset: int, current: int = LIBRARY_OPSET) -> None:
    """Move ops without a down adapter to a private domain while the converter runs."""
    hidden = False
    for graph in _graphs(proto.graph):
        if opset < 13:
            for node in [n for n in graph.node if n.op_type == "Resize" and not n.domain]:
                _fill_resize_inputs(graph, node)
        constants = {i.name: i for i in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and not node.domain and node.attribute and \
                    node.attribute[0].name == "value":
                constants[node.output[0]] = node.attribute[0].t
        for node in graph.node:
            if not node.domain and _fits_older(node, opset, constants, current):
                old = onnx.defs.get_schema(node.op_type, opset)
                kept_attrs = [a for a in node.attribute if a.name in old.attributes]
                del node.attribute[:]
                node.attribute.extend(kept_attrs)
                node.domain = _HIDDEN_DOMAIN
                hidden = True
    if hidden:
        proto.opset_import.add(domain=_HIDDEN_DOMAIN, version=1)


def _fill_resize_inputs(graph: onnx.GraphProto, node: onnx.NodeProto) -> None:
    """Resize 11 requires `roi` and `scales`: an omitted one becomes an empty float tensor."""
    for i in (1, 2):
        if len(node.input) > i and not node.input[i]:
            name = f"{node.name or 'Resize'}_empty_{i}"
            graph.node.insert(list(graph.node).index(node), onnx.helper.make_node(
                "Constant", [], [name], value=onnx.helper.make_tensor(name, onnx.TensorProto.FLOAT,
                                                                       [0], [])))
            node.input[i] = name


def _restore_unadapted(proto: onnx.ModelProto) -> None:
    for graph in _graphs(proto.graph):
        for node in graph.node:
            if node.domain == _HIDDEN_DOMAIN:
                node.domain = ""
    kept = [o for o in proto.opset_import if o.domain != _HIDDEN_DOMAIN]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)


def _expand_layer_norm(graph: ir.Graph) -> None:
    """LayerNormalization (opset 17) as ReduceMean/Sub/Mul/... for older targets.

    Only the first output (the normalized tensor) may be used; the inputs are already in the
    compute dtype (the translation casts), so the statistics are computed in that dtype.
    """
    for node in list(ir.traversal.RecursiveGraphIterator(graph)):
        if node.op_type == "LayerNormalization" and not node.domain and \
                not any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
            _expand_one_layer_norm(node)


def _expand_one_layer_norm(node: ir.Node) -> None:
    x, scale = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    owner = node.graph
    if x is None or scale is None or scale.shape is None or x.dtype is None or owner is None:
        return
    dtype = x.dtype
    eps_attr = node.attributes.get("epsilon")
    eps = eps_attr.as_float() if eps_attr is not None else 1e-5
    k = len(scale.shape)
    name = node.name or "LayerNormalization"
    count = iter(range(1 << 30))

    def make(op: str, *inputs: ir.Value | None, **attrs: object) -> ir.Value:
        new = ir.node(op, list(inputs), attributes=dict(attrs), name=f"{name}/{op}_{next(count)}")
        new.outputs[0].name = f"{new.name}_out"
        new.outputs[0].dtype = dtype
        owner.insert_before(node, new)
        return new.outputs[0]

    axes = make("Constant", value=ir.tensor(np.arange(-k, 0, dtype=np.int64)))
    axes.dtype = ir.DataType.INT64
    mean = make("ReduceMean", x, axes, keepdims=1)
    diff = make("Sub", x, mean)
    var = make("ReduceMean", make("Mul", diff, diff), axes, keepdims=1)
    eps_value = make("Constant", value=ir.tensor(np.array(eps, dtype=dtype.numpy())))
    y = make("Mul", diff, make("Reciprocal", make("Sqrt", make("Add", var, eps_value))))
    y = make("Mul", y, scale)
    if bias is not None:
        y = make("Add", y, bias)
    old = node.outputs[0]
    y.shape, y.name = old.shape, old.name
    old.name = f"{old.name}_replaced"
    ir.convenience.replace_all_uses_with(old, y, replace_graph_outputs=True)
    owner.remove(node, safe=True)


def convert_to_opset(model: ir.Model, opset: int) -> ir.Model:
    """A model equivalent to `model` at `opset` (`model` itself when nothing changes)."""
    current = model.graph.opset_imports.get("", LIBRARY_OPSET)
    if opset == current:
        return model
    graph = model.graph
    # onnx's version converter drops node metadata (module paths, source lines): restored
    # after by node name.
    metadata = {n.name: dict(n.metadata_props) for n in graph if n.name and n.metadata_props}
    weights = {name: v.const_value for name, v in graph.initializers.items()}
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if tensor is not None:
            # A reference that serializes without reading (or copying) the weight's bytes.
            value.const_value = ir.ExternalTensor("__onnxport_detached__", 0, tensor.nbytes,
                                                  tensor.dtype, shape=tensor.shape, name=name)
    try:
        if opset < 17:
            _expand_layer_norm(model.graph)
        proto = ir.to_proto(model)
        # onnx's version converter drops the model's local functions: put them back after.
        functions = [type(f)() for f in proto.functions]
        for copy, function in zip(functions, proto.functions):
            copy.CopyFrom(function)
        # onnx converts ReduceMean & co. from 18 (axes input) to 13 (axes attribute) but has
        # no adapters below 13: go through 13, where those nodes then fit the older versions.
        source = current
        for stage in ([13] if opset < 13 < current else []) + [opset]:
            _hide_unadapted(proto, stage, source)
            proto = onnx.version_converter.convert_version(proto, stage)
            _restore_unadapted(proto)
            source = stage
        if functions and not proto.functions:
            proto.functions.extend(functions)
        converted = proto
    except Exception as e:  # noqa: BLE001  (re-raised with the target opset)
        raise PassError(f"cannot convert the model from opset {current} to opset {opset}: {e}") from e
    finally:
        for name, tensor in weights.items():
            graph.initializers[name].const_value = tensor
    new = ir.from_proto(converted)
    for node in new.graph:
        if node.name in metadata and not node.metadata_props:
            node.metadata_props.update(metadata[node.name])
    for name, value in new.graph.initializers.items():
        if weights.get(name) is not None:
            value.const_value = weights[name]
    return new


def align_function_opsets(model: ir.Model) -> None:
    """Convert each model-local function whose default-domain opset differs from the model's
    (an onnxscript translation written with `opset18` in a model at 20) to the model's opset:
    ONNX requires a function's ops to resolve to the same versions as the model's. Nodes whose
    op has the same version at both opsets are kept as they are; the others go through onnx's
    version converter, or are kept when they read a function attribute and every input and
    attribute they use exists, with the same name, at the model's version.

    Raises:
        PassError: a node cannot be converted; it names the function, the op and the opsets.
    """
    target = model.opset_imports.get("")
    if target is None:
        return
    for key, function in list(model.functions.items()):
        source = function.opset_imports.get("")
        if source is None or source == target:
            continue
        proto = ir.serde.serialize_function(function)
        nodes: list[onnx.NodeProto] = []
        for node in proto.node:
            nodes.extend(_node_at(node, source, target, proto))
        del proto.node[:]
        proto.node.extend(nodes)
        for imported in proto.opset_import:
            if imported.domain == "":
                imported.version = target
        model.functions[key] = ir.serde.deserialize_function(proto)


def _node_at(node: onnx.NodeProto, source: int, target: int,
             function: onnx.FunctionProto) -> list[onnx.NodeProto]:
    """`node` of a function at opset `source` as nodes at opset `target`."""
    if node.domain not in ("", "ai.onnx"):
        return [node]
    try:
        old = onnx.defs.get_schema(node.op_type, source)
        new = onnx.defs.get_schema(node.op_type, target)
    except onnx.defs.SchemaError:
        return [node]
    if old.since_version == new.since_version:
        return [node]
    if any(a.ref_attr_name for a in node.attribute):
        if all(a.name in new.attributes for a in node.attribute) and \
                len(node.input) <= max(len(new.inputs), new.min_input) and \
                len(node.output) <= new.max_output:
            return [node]
    else:
        untyped = onnx.TypeProto()
        body = onnx.helper.make_graph(
            [node], "node", [onnx.helper.make_value_info(n, untyped) for n in node.input if n],
            [onnx.helper.make_value_info(n, untyped) for n in node.output if n])
        wrapper = onnx.helper.make_model(body, opset_imports=[onnx.helper.make_opsetid("", source)])
        try:
            return list(onnx.version_converter.convert_version(wrapper, target).graph.node)
        except Exception as e:  # noqa: BLE001  (re-raised naming the function)
            raise PassError(
                f"the ONNX function {function.domain}::{function.name} (a custom translation) "
                f"is written for opset {source}; its {node.op_type} cannot be converted to the "
                f"model's opset {target}: {e}; export with opset_version={source}") from e
    raise PassError(
        f"the ONNX function {function.domain}::{function.name} (a custom translation) is "
        f"written for opset {source}; its {node.op_type} reads a function attribute and "
        f"changed between opsets {source} and {target}; export with opset_version={source}")
