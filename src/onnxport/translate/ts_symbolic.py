"""The symbolic-function bridge of the TorchScript flavour.

A node with a function given to `register_custom_op_symbolic` (looked up in
`translate/symbolic.py` for the export's opset, the in-place `aten::op_` falling back to
`aten::op`) is translated by calling it with the GraphBuilder; an autograd.Function
(`prim::PythonOp`) by its own `symbolic`, else as the ops it ran (inlined), else as one
`prim::PythonOp` node where the export type keeps unconverted ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import onnx_ir as ir
import torch

from onnxport.capture.torchscript import OperatorExportTypes
from onnxport.errors import TranslationError
from onnxport.translate.symbolic import call_symbolic, lookup_symbolic
from onnxport.translate.ts_graph import _OutVal, _is_tensor_type

if TYPE_CHECKING:
    from onnxport.translate.ts_context import ScriptTranslation


def _node_symbolic(node: torch._C.Node, opset: int) -> Callable[..., Any] | None:
    """The user symbolic function registered for this node's kind at `opset`, or None."""
    kind = node.kind()
    fn = lookup_symbolic(kind, opset)
    if fn is None and kind.startswith("aten::") and kind.endswith("_") and \
            not kind.endswith("__"):
        fn = lookup_symbolic(kind[:-1], opset)  # in-place variant
    return fn


def _user_symbolic(t: ScriptTranslation, node: torch._C.Node, fn: Callable[..., Any]) -> None:
    """A node translated by a function given to register_custom_op_symbolic."""
    args = [t._get(v) for v in node.inputs()]
    outs = list(node.outputs())
    infos = [t.info(o) for o in outs]
    t.g.out_dtypes = tuple(d for d, _ in infos)
    t.g.out_vals = tuple(_OutVal(d, s, True) for d, s in infos)
    result = call_symbolic(fn, t.g, args)
    if result is None and any(_is_tensor_type(o.type()) for o in outs):
        raise TranslationError(f"the symbolic function registered for {node.kind()} "
                               "returned None")
    t._bind_outputs(node, result, infos)
    kind = node.kind()
    if kind.endswith("_") and not kind.endswith("__") and outs:
        t._set(node.inputsAt(0), t._get(outs[0]))


def _python_op(t: ScriptTranslation, node: torch._C.Node) -> None:
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
