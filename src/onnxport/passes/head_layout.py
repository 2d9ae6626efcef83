"""HeadLayoutPass: attention's head split of a batch of one written so that ONNX Runtime
folds its Transpose into the product that reads it.

Below opset 23 attention's Q, K and V are `Transpose(Reshape(x, [1, S, H, D]), perm)` read by
a MatMul: perm [0, 2, 1, 3] for Q and V, [0, 2, 3, 1] for K (the head split merged with K's
transpose). ONNX Runtime's MatMul fusions absorb a Transpose into `FusedMatMul` only for the
perms its `transBatch` / `trans` attributes express, [1, 2, 0, 3] and [1, 2, 3, 0] on 4-D, not
for these. With a batch of one the size-1 axis can sit anywhere for free, so

    Transpose(Reshape(x, [1, S, H, D]), [0, 2, 1, 3])  ->  Transpose(Reshape(x, [S, 1, H, D]), [1, 2, 0, 3])
    Transpose(Reshape(x, [1, S, H, D]), [0, 2, 3, 1])  ->  Transpose(Reshape(x, [S, 1, H, D]), [1, 2, 3, 0])

compute the same tensor, and ONNX Runtime then runs each head split inside the product:
three Transposes a layer fewer (a copy of Q, K and V each). Matched on static shapes whose
first axis is 1, where every reader of the Transpose is a MatMul (or a scalar Mul, attention's
query scale, read by MatMuls only). A graph that returns a key/value cache (a decoder) is left
as it is: the ONNX Runtime target's GroupQueryAttention matcher reads its head splits.
benchmarks/bench_latency.py graphs, ONNX Runtime CPU time per run, this
rewrite alone on the default graphs: BERT -2.2%, GPT-2 -1.5%, ViT -3%.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f
from onnxport.passes.fuse_attention import cache_concat

_BATCH_LAST = {(0, 2, 1, 3): [1, 2, 0, 3], (0, 2, 3, 1): [1, 2, 3, 0]}


def _read_by_products(value: ir.Value) -> bool:
    """Every reader of `value` is a MatMul, or a Mul by a one-element constant whose readers
    are all MatMuls (the query scale, which ONNX Runtime folds into the product)."""
    if value.is_graph_output() or not value.uses():
        return False
    for use in value.uses():
        node = use.node
        if node.domain:
            return False
        if node.op_type == "MatMul":
            continue
        if node.op_type != "Mul" or len(node.inputs) != 2 or \
                f.scalar(node.inputs[1 - use.idx]) is None or \
                not node.outputs[0].uses() or node.outputs[0].is_graph_output() or \
                any(u.node.op_type != "MatMul" or u.node.domain for u in node.outputs[0].uses()):
            return False
    return True


class HeadLayoutPass(ir.passes.InPlacePass):
    """Head splits of a batch of one as (S, 1, H, D) views, Transposes ORT folds into MatMul."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        if any(cache_concat(v) is not None for v in model.graph.outputs):
            return ir.passes.PassResult(model, False)
        for graph, namer, node in f.standard_nodes(model, ("Transpose",)):
            perm = node.attributes.get("perm")
            new_perm = _BATCH_LAST.get(tuple(perm.as_ints())) if perm is not None else None
            view = f.producer(node.inputs[0], "Reshape")
            x = node.inputs[0]
            if new_perm is None or view is None or x is None or x.is_graph_output() or \
                    len(x.uses()) != 1 or not _read_by_products(node.outputs[0]):
                continue
            dims = f.static_dims(x, range(4)) if f.rank(x) == 4 else None
            if dims is None or dims[0] != 1 or min(dims) <= 0:
                continue
            b, s, h, d = dims
            view.replace_input_with(1, namer.constant(view, np.array([s, b, h, d], np.int64)))
            x.shape = ir.Shape([s, b, h, d])
            node.attributes["perm"] = ir.AttrInt64s("perm", new_perm)
            modified = True
        return ir.passes.PassResult(model, modified)


__all__ = ["HeadLayoutPass"]
