"""FuseGlobalPoolPass: a mean over every spatial axis, keeping them, as GlobalAveragePool.

    ReduceMean(x, axes=[2, 3], keepdims=1)   ->   GlobalAveragePool(x)      (x of rank 4)

`x.mean((2, 3), keepdim=True)` is how timm's squeeze-and-excitation blocks pool (EfficientNet,
MobileNetV3, RegNetY: one per block). Both nodes compute the same mean, of the same (N, C, 1, ...)
shape (the batch may be dynamic). ONNX Runtime runs GlobalAveragePool
in its blocked NCHWc layout, where the convolutions around it run, and ReduceMean in plain NCHW,
so a ReduceMean costs a ReorderOutput before it and a ReorderInput after it at every block.

Only float32 (the GlobalAveragePool kernel of ONNX Runtime's CPU provider) inputs of rank 4
are rewritten: the NCHWc layout is 2-D images', and a rank-3 mean over the last axis is a
hand-written LayerNorm's or RMSNorm's, which the norm fusions (and ONNX Runtime's own) match.
With H or W dynamic the translation writes the mean as ReduceSum / count (torch's NaN for an
empty image, where ReduceMean gives 0 and ONNX Runtime's GlobalAveragePool fails): not matched.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.passes import _fusion as f


class FuseGlobalPoolPass(f.MatchRewritePass):
    """ReduceMean over axes 2 and 3 of a 4-D float32 tensor, keepdims -> GlobalAveragePool."""

    op_types = ("ReduceMean",)

    def _match(self, node: ir.Node) -> tuple | None:  # type: ignore[type-arg]
        x = node.inputs[0] if node.inputs else None
        rank = f.rank(x)
        if x is None or x.dtype != ir.DataType.FLOAT or rank != 4 or len(node.outputs) != 1:
            return None
        # An empty image's mean is NaN in ReduceMean; GlobalAveragePool's is not specified.
        if f.reduce_axes(node, rank) != [2, 3] or any(d == 0 for d in x.shape[2:]):
            return None
        return (x,)

    def _rewrite(self, graph: ir.Graph, namer: f.Namer, node: ir.Node, *match: object) -> None:
        (x,) = match
        assert isinstance(x, ir.Value)
        pool = f.make_node(namer, node, "GlobalAveragePool", [x], dtype=x.dtype)
        out, old = pool.outputs[0], node.outputs[0]
        graph.insert_before(node, pool)
        name = old.name
        old.name = f"{name}__fused" if name else None
        out.name, out.shape = name, old.shape
        ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
        graph.remove(node, safe=True)
