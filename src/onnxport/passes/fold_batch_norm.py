"""FoldBatchNormPass: an inference BatchNormalization after a Conv folded into the Conv's weights.

    BatchNormalization(Conv(x, W, b), gamma, beta, mean, var, epsilon)
        -> Conv(x, W * s[:, None, ...], (b - mean) * s + beta),   s = gamma / sqrt(var + epsilon)

Only where every weight is a constant with data (initializers or Constant nodes; not graph
inputs, not fake weights), the Conv's output is read by the BatchNormalization alone, the
BatchNormalization runs in inference mode with one output, and the dtype is float32, float64
or float16 (the folded weights are computed in float64 and stored in the model's dtype).

Not in the default list, for the reason PretransposeWeightsPass is not: the folded weights are
new initializers (`<conv weight>.bn_folded`, `<conv>.bias.bn_folded`), so the Conv's and the
BatchNormalization's state_dict names leave the graph and `ONNXProgram.apply_weights` can no
longer replace them; and ONNX Runtime folds Conv + BatchNormalization at session load itself
(ConvBNFusion), so the folded file is not faster (benchmarks/bench_vision_graphs.py
`--fold-bn`: the same node count after ORT's optimizations). It makes the file smaller by one
node per BatchNormalization, as torch.onnx's optimizer does. Run it explicitly:
`run_passes(program.model, [FoldBatchNormPass(), RemoveUnusedNodesPass()])`.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.passes import _fusion as f

_DTYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)


class FoldBatchNormPass(ir.passes.InPlacePass):
    """Conv + inference BatchNormalization with constant weights -> one Conv."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph, _namer, node in f.standard_nodes(model, ("BatchNormalization",)):
            modified |= _fold(graph, node)
        return ir.passes.PassResult(model, modified)


def _data(value: ir.Value | None) -> np.ndarray | None:
    data = f.constant(value)
    return None if data is None else np.asarray(data, dtype=np.float64)


def _fold(graph: ir.Graph, bn: ir.Node) -> bool:
    if len(bn.outputs) != 1 or len(bn.inputs) != 5 or bn.inputs[0] is None:
        return False
    training = bn.attributes.get("training_mode")
    if training is not None and training.as_int() != 0:
        return False
    y = bn.inputs[0]
    conv = f.producer(y, "Conv")
    if conv is None or f.only_user(y, "BatchNormalization") is not bn or len(conv.outputs) != 1 \
            or y.dtype not in _DTYPES or len(conv.inputs) < 2 or conv.inputs[1] is None:
        return False
    w_value = conv.inputs[1]
    b_value = conv.inputs[2] if len(conv.inputs) > 2 else None
    w = _data(w_value)
    gamma, beta, mean, var = (_data(v) for v in bn.inputs[1:])
    if w is None or gamma is None or beta is None or mean is None or var is None \
            or w_value.dtype != y.dtype or w.ndim < 3:
        return False
    channels = w.shape[0]
    if any(a.shape != (channels,) for a in (gamma, beta, mean, var)):
        return False
    b = np.zeros(channels) if b_value is None else _data(b_value)
    if b is None or b.shape != (channels,):
        return False
    eps = bn.attributes.get("epsilon")
    scale = gamma / np.sqrt(var + (1e-5 if eps is None else eps.as_float()))
    dtype = y.dtype.numpy()
    w_name = w_value.name or "conv.weight"
    b_name = b_value.name if b_value is not None and b_value.name else \
        w_name.removesuffix("weight") + "bias"
    new_w = _initializer(graph, f"{w_name}.bn_folded",
                         (w * scale.reshape(-1, *[1] * (w.ndim - 1))).astype(dtype))
    new_b = _initializer(graph, f"{b_name}.bn_folded", ((b - mean) * scale + beta).astype(dtype))
    folded = ir.node("Conv", [conv.inputs[0], new_w, new_b],
                     attributes={k: a for k, a in conv.attributes.items()}, name=conv.name,
                     metadata_props=dict(conv.metadata_props))
    out, old = folded.outputs[0], bn.outputs[0]
    graph.insert_before(bn, folded)
    name = old.name
    old.name = f"{name}__folded" if name else None
    out.name, out.dtype, out.shape = name, old.dtype, old.shape
    ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
    graph.remove([bn, conv], safe=True)
    return True


def _initializer(graph: ir.Graph, name: str, data: np.ndarray) -> ir.Value:
    while name in graph.initializers:
        name += "_"
    value = ir.Value(name=name, shape=ir.Shape(data.shape), type=ir.TensorType(ir.DataType.from_numpy(data.dtype)),
                     const_value=ir.tensor(data, name=name))
    graph.register_initializer(value)
    return value
