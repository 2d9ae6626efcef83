"""PretransposeWeightsPass: a 2-D weight read only through Transpose(perm=[1, 0]) is stored
transposed, and the Transposes are removed.

`aten.linear` on inputs of rank other than 2 is MatMul(x, Transpose(W)): one runtime node per
Linear that computes the same constant every run (ONNX Runtime folds it at session load, into
a second buffer). Here the initializer itself holds Wᵀ instead.

* **No copy.** The new tensor is a transposed *view* of the same memory (`torch.Tensor.t()`
  of the parameter, a numpy `.T` of an in-memory array); it is laid out contiguously only
  when serialized. A tensor read from a TensorProto is decoded once and replaces it. Weights
  whose data is not in memory (external data, lazy tensors) are left as they are.
* **Names stay the state_dict's.** The initializer keeps its name; the model's metadata
  `pkg.onnxport.transposed_weights` lists (comma-separated) the initializers stored
  transposed, and `ONNXProgram.apply_weights` transposes a state_dict tensor given for one
  of them (`transposed_weights(model)`, `as_stored(model, name, tensor)`). A model saved with
  `keep_initializers_as_inputs=True` takes these weights as inputs in the stored layout.
* Only main-graph initializers that are not graph inputs or outputs, with every use a
  `Transpose(perm=[1, 0])` (possibly inside a subgraph) whose output is no graph output.
  Running the pass twice changes nothing more (a second Transpose of a stored Wᵀ would flip
  the weight back; the name then leaves the list).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnx_ir.tensor_adapters import TorchTensor

TRANSPOSED_KEY = "pkg.onnxport.transposed_weights"


def transposed_weights(model: ir.Model) -> set[str]:
    """The names of the initializers stored transposed by PretransposeWeightsPass."""
    listed = model.metadata_props.get(TRANSPOSED_KEY, "")
    return {n for n in listed.split(",") if n}


def _set_transposed(model: ir.Model, names: set[str]) -> None:
    if names:
        model.metadata_props[TRANSPOSED_KEY] = ",".join(sorted(names))
    else:
        model.metadata_props.pop(TRANSPOSED_KEY, None)


def as_stored(model: ir.Model, name: str, tensor: Any) -> Any:
    """`tensor` (a state_dict entry for initializer `name`) in the layout the model stores:
    transposed (a view, no copy) when the pass stored that weight transposed."""
    if name not in transposed_weights(model):
        return tensor
    if not isinstance(tensor, ir.TensorProtocol) and hasattr(tensor, "dim"):   # a torch.Tensor
        return tensor.t() if tensor.dim() == 2 else tensor
    shape = getattr(tensor, "shape", None)
    if shape is None or len(shape) != 2:
        return tensor
    return ir.Tensor(np.asarray(tensor.numpy()).T, dtype=tensor.dtype, name=name)


def _transposed(tensor: ir.TensorProtocol, name: str) -> ir.TensorProtocol | None:
    """`tensor`ᵀ as a view of the same memory, or None when its data is not held in memory."""
    if isinstance(tensor, TorchTensor):
        return TorchTensor(tensor.raw.t(), name=name)
    if type(tensor) is ir.Tensor and isinstance(tensor.raw, np.ndarray):
        return ir.Tensor(tensor.raw.T, dtype=tensor.dtype, name=name)
    if isinstance(tensor, (ir.ExternalTensor, ir.LazyTensor)):
        return None
    # Another in-memory tensor (a TensorProto's data): read once, replaces the original.
    return ir.Tensor(np.asarray(tensor.numpy()).T, dtype=tensor.dtype, name=name)


def _is_swap(node: ir.Node) -> bool:
    if node.domain or node.op_type != "Transpose" or len(node.outputs) != 1:
        return False
    perm = node.attributes.get("perm")
    return (perm is None or list(perm.as_ints()) == [1, 0]) and \
        not node.outputs[0].is_graph_output()


class PretransposeWeightsPass(ir.passes.InPlacePass):
    """Transpose(2-D initializer) -> the initializer stored transposed."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        stored = transposed_weights(model)
        modified = False
        for name, value in list(graph.initializers.items()):
            if value.is_graph_input() or value.is_graph_output() or value.const_value is None \
                    or value.shape is None or len(value.shape) != 2:
                continue
            uses = list(value.uses())
            if not uses or not all(u.idx == 0 and _is_swap(u.node) for u in uses):
                continue
            new = _transposed(value.const_value, name)
            if new is None:
                continue
            value.const_value = new
            value.shape = ir.Shape([value.shape[1], value.shape[0]])
            for node in {id(u.node): u.node for u in uses}.values():
                ir.convenience.replace_all_uses_with(node.outputs[0], value)
                assert node.graph is not None
                node.graph.remove(node, safe=True)
            stored ^= {name}
            modified = True
        if modified:
            _set_transposed(model, stored)
        return ir.passes.PassResult(model, modified)
