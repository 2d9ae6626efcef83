"""FuseGlobalPoolPass: a mean over every spatial axis, keeping them, as GlobalAveragePool.

    ReduceMean(x, axes=[2, ..., rank - 1], keepdims=1)   ->   GlobalAveragePool(x)

`x.mean((2, 3), keepdim=True)` is how timm's squeeze-and-excitation blocks pool (EfficientNet,
MobileNetV3, RegNetY: one per block). Both nodes compute the same mean, of the same (N, C, 1, ...)
shape, for any spatial size (dynamic shapes stay dynamic). ONNX Runtime runs GlobalAveragePool
in its blocked NCHWc layout, where the convolutions around it run, and ReduceMean in plain NCHW,
so a ReduceMean costs a ReorderOutput before it and a ReorderInput after it at every block.

Only float32 (the GlobalAveragePool kernel of ONNX Runtime's CPU provider) inputs of rank >= 3
with known rank are rewritten.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.passes import _fusion as f


class FuseGlobalPoolPass(f.MatchRewritePass):
    """ReduceMean over all axes after the first two, keepdims -> GlobalAveragePool."""

    op_types = ("ReduceMean",)

    def _match(self, node: ir.Node) -> tuple | None:  # type: ignore[type-arg]
        x = node.inputs[0] if node.inputs else None
        rank = f.rank(x)
        if x is None or x.dtype != ir.DataType.FLOAT or rank is None or rank < 3 \
                or len(node.outputs) != 1:
            return None
        if f.reduce_axes(node, rank) != list(range(2, rank)):
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
