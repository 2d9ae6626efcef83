"""The weight dtypes transformers.js selects (`dtype: "q8"`, ...), one file each.

Each writer takes a float32 ONNX file and writes its variant:

* fp16 (`_fp16`): float16 weights and compute by ONNX Runtime's float16 converter, with the
  ops its block list names (and the graph's inputs and outputs) kept in float32, so callers
  feed and read float32 as at fp32;
* q8 (`_quantized`), uint8 (`_uint8`): dynamic quantization of the MatMul/Gemm weights to
  uint8 per tensor, activations quantized to uint8 at run time
  (`onnxruntime.quantization.quantize_dynamic`: DynamicQuantizeLinear + MatMulInteger);
  int8 (`_int8`): the same with int8 weights. q8 takes uint8 weights because ONNX Runtime's
  x86 AVX2 kernel for uint8 x int8 products adds pairs of products in int16, which
  saturates (its documented caveat), while WebAssembly's kernel does not: with int8 weights
  Node and the browser give different results from the same file, with uint8 the same;
* bnb4 (`_bnb4`): MatMul/Gemm weights as NF4 codes in blocks of 64 with a float32 absmax
  per block, `com.microsoft.MatMulBnb4` (`onnxport.quantize.bnb4`); embeddings stay float;
* q4 (`_q4`): onnxport's RTN quantizer (`onnxport.quantize`, the CLI's `--quantize int4`) in
  signed blocks of 32 along K, then `com.microsoft.MatMulNBits` at accuracy level 0 (float32
  activations); q4f16 (`_q4f16`): the q4 file converted as fp16 is (float16 activations and
  scales).

Embeddings (Gather) stay float at fp16 and the 8-bit dtypes; at q4 and q4f16 they are read
as int8 rows with a scale per row (`quantize_embeddings`), which keeps the q4 file under a
third of the fp32 one when the vocabulary's table is large.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

__all__ = ["DTYPES", "SUFFIX", "write_dtype"]

DTYPES = ("fp32", "fp16", "q8", "int8", "uint8", "q4", "bnb4", "q4f16")
SUFFIX = {"fp32": "", "fp16": "_fp16", "q8": "_quantized", "int8": "_int8", "uint8": "_uint8",
          "q4": "_q4", "bnb4": "_bnb4", "q4f16": "_q4f16"}
Q4_BLOCK = 32
BNB4_BLOCK = 64  # NF4 in blocks of 64, as transformers.js's converter writes model_bnb4.onnx
Q4_OPSET = 21  # INT4 and blocked DequantizeLinear, which the RTN quantizer writes first

# Protobuf's 2 GiB limit: larger models are written with their weights beside them.
_INLINE_LIMIT = 1_800_000_000


def save(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Save `model`, its weights in `<name>.data` beside it when they are too large inline."""
    path = Path(path)
    if model.ByteSize() > _INLINE_LIMIT:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save(model, str(path))


def fold_weight_transposes(model: onnx.ModelProto) -> int:
    """Replace each Transpose of an initializer in the main graph by the transposed
    initializer (the exporter's Linear reads W[N, K] through one): the quantizers then see
    a constant MatMul weight. Returns how many were folded."""
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    keep, folded = [], 0
    for node in graph.node:
        if node.op_type == "Transpose" and node.input[0] in inits and not node.domain:
            array = numpy_helper.to_array(inits[node.input[0]])
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            graph.initializer.append(numpy_helper.from_array(
                np.ascontiguousarray(np.transpose(array, perm)), node.output[0]))
            folded += 1
        else:
            keep.append(node)
    _replace_nodes(graph, keep)
    return folded


def _replace_nodes(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    """`graph` with `nodes` as its nodes, and without the initializers no node reads."""
    del graph.node[:]
    graph.node.extend(nodes)
    used = {n for node in graph.node for n in node.input} | {o.name for o in graph.output}
    _subgraph_inputs(graph, used)
    alive = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(alive)


def _subgraph_inputs(graph: onnx.GraphProto, used: set[str]) -> None:
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + list(attr.graphs):
                used.update(n for sn in sub.node for n in sn.input)
                _subgraph_inputs(sub, used)


_INTS = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
         onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL}


def index_math_nodes(model: onnx.ModelProto) -> list[str]:
    """Names of the float nodes whose result is cast to an integer or compared (T5's
    relative position buckets: a log of distances, floored): in float16 a bucket can
    flip, so they stay float32. The backward slice from each such Cast or comparison
    through float producers, up to the weights, the graph's inputs or an integer."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output if out}
    inits = {i.name for i in graph.initializer}
    keep: set[str] = set()
    stack = []
    for node in graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if (node.op_type == "Cast" and to in _INTS) or node.op_type in (
                "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Floor", "Ceil", "Round"):
            stack += [producer[n] for n in node.input if n in producer]
            if node.op_type in ("Floor", "Ceil", "Round") or node.op_type.startswith(("Less", "Greater")):
                keep.add(node.name)
    while stack:
        node = stack.pop()
        if node.name in keep or node.op_type in ("MatMul", "Gemm", "Softmax"):
            continue
        if node.op_type == "Cast" and next((a.i for a in node.attribute if a.name == "to"),
                                          None) in _INTS:
            continue
        keep.add(node.name)
        if node.op_type == "Cast":  # an integer made float: the slice starts here
            continue
        stack += [producer[n] for n in node.input if n in producer and n not in inits]
    return sorted(n for n in keep if n)


def _load(src: Path) -> onnx.ModelProto:
    model = onnx.load(str(src))
    fold_weight_transposes(model)
    return model


def _fp16(src: Path, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))  # transposes kept: a tied table stays one initializer
    # the converter's shape inference types the float16 values, which the q4 rewrite of
    # q4f16 needs (MatMulNBits takes a typed activation of known rank)
    converted = convert_float_to_float16(model, keep_io_types=True,
                                         node_block_list=index_math_nodes(model))
    save(converted, dst)


def _dynamic_int8(src: Path, dst: Path, *, signed: bool) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        folded = Path(tmp) / src.name
        save(_load(src), folded)
        quantize_dynamic(str(folded), str(dst), op_types_to_quantize=["MatMul", "Gemm"],
                         weight_type=QuantType.QInt8 if signed else QuantType.QUInt8,
                         per_channel=False, use_external_data_format=False)


def _q4(src: Path, dst: Path) -> None:
    import onnx_ir as ir
    import onnx_ir.passes.common

    from onnxport.passes.onnxruntime.matmul_nbits import FuseMatMulNBitsPass
    from onnxport.quantize import quantize_weights

    model = ir.load(str(src))
    if model.opset_imports.get("", 0) < Q4_OPSET:
        from onnxport.tasks.errors import TaskError

        raise TaskError(f"q4 weights need opset {Q4_OPSET} (blocked INT4 DequantizeLinear); "
                        f"{src.name} has opset {model.opset_imports.get('', 0)}")
    quantize_weights(model, bits=4, block_size=Q4_BLOCK, symmetric=True)
    FuseMatMulNBitsPass(bits=(4,), accuracy_level=0, block_size=Q4_BLOCK)(model)
    # the weights of Q/K/V (gate/up) packed into one MatMulNBits are left unused behind it
    onnx_ir.passes.common.RemoveUnusedNodesPass()(model)
    proto = ir.serde.serialize_model(model)
    quantize_embeddings(proto)
    save(proto, dst)


def quantize_embeddings(model: onnx.ModelProto) -> int:
    """Gathers from a constant float table [V, H] read int8 rows scaled per row instead:
    Gather(table_q, ids) as float * Gather(scale, ids), standard ONNX that dequantizes only
    the rows looked up (the vocabulary's table is most of a small LM's weights, and 4-bit
    MatMul weights alone leave the q4 file at a third of fp32's). Returns how many."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    done, new_nodes = 0, []
    for node in graph.node:
        table = inits.get(node.input[0]) if node.op_type == "Gather" and not node.domain else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if table is None or axis != 0 or len(table.dims) != 2 or table.data_type not in (
                onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) or table.dims[0] * table.dims[1] < 1024:
            new_nodes.append(node)
            continue
        w = numpy_helper.to_array(table).astype(np.float32)
        scale = np.abs(w).max(axis=1, keepdims=True) / 127.0
        q = np.round(w / np.where(scale == 0, 1, scale)).clip(-127, 127).astype(np.int8)
        base = node.output[0]
        qname, sname = f"{table.name}_int8_rows", f"{table.name}_row_scale"
        if qname not in inits:
            graph.initializer.append(numpy_helper.from_array(q, qname))
            graph.initializer.append(numpy_helper.from_array(
                scale.astype(helper.tensor_dtype_to_np_dtype(table.data_type)), sname))
            inits[qname] = inits[sname] = graph.initializer[-1]
        new_nodes += [
            helper.make_node("Gather", [qname, node.input[1]], [base + "_q"], name=node.name + "_q"),
            helper.make_node("Cast", [base + "_q"], [base + "_f"], name=node.name + "_cast",
                             to=table.data_type),
            helper.make_node("Gather", [sname, node.input[1]], [base + "_s"],
                             name=node.name + "_scale"),
            helper.make_node("Mul", [base + "_f", base + "_s"], [base], name=node.name + "_mul")]
        done += 1
    _replace_nodes(graph, new_nodes)
    return done


def _bnb4(src: Path, dst: Path) -> None:
    import onnx_ir as ir

    from onnxport.quantize.bnb4 import NF4, quantize_bnb4_weights

    model = ir.load(str(src))
    quantize_bnb4_weights(model, block_size=BNB4_BLOCK, quant_type=NF4)
    save(ir.serde.serialize_model(model), dst)


def write_dtype(dtype: str, fp32: Path, dst: Path) -> None:
    """Write the `dtype` variant of the float32 file `fp32` to `dst`."""
    if dtype == "fp16":
        _fp16(fp32, dst)
    elif dtype == "int8":
        _dynamic_int8(fp32, dst, signed=True)
    elif dtype in ("q8", "uint8"):
        _dynamic_int8(fp32, dst, signed=False)
    elif dtype == "q4":
        _q4(fp32, dst)
    elif dtype == "bnb4":
        _bnb4(fp32, dst)
    elif dtype == "q4f16":  # the q4 file's activations and scales in float16
        with tempfile.TemporaryDirectory() as tmp:
            q4 = Path(tmp) / fp32.name
            _q4(fp32, q4)
            _fp16(q4, dst)
    else:
        raise ValueError(f"unknown dtype {dtype!r}")
