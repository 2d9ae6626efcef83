"""FoldConstantsPass: replace nodes whose inputs are all known constants with a Constant.

Uses the same numpy evaluations as build-time folding (`translate.folding`), so only
cheap integer/shape arithmetic is folded and weights are never copied. One forward sweep
in topological order: a folded node makes its users foldable in the same sweep.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.translate import folding


class FoldConstantsPass(ir.passes.InPlacePass):
    """Fold constant subexpressions of the main graph."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph
        for node in list(graph):
            if node.domain or len(node.outputs) != 1 or node.op_type == "Constant":
                continue
            attrs = {name: _attr_value(a) for name, a in node.attributes.items()}
            result = folding.try_fold(node.op_type, list(node.inputs), attrs)
            if result is None:
                continue
            tensor = ir.tensor(result)
            old = node.outputs[0]
            const = ir.Node("", "Constant", [], [ir.AttrTensor("value", tensor)], name=node.name)
            new = const.outputs[0]
            new.name = old.name
            new.const_value = tensor
            new.dtype = tensor.dtype
            new.shape = ir.Shape(result.shape)
            graph.insert_before(node, const)
            ir.convenience.replace_all_uses_with(old, new)
            if old.is_graph_output():
                graph.outputs[graph.outputs.index(old)] = new
            graph.remove(node, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)


def _attr_value(attr: ir.Attr) -> object:
    if attr.type == ir.AttributeType.TENSOR:
        return attr.as_tensor()
    return attr.value
