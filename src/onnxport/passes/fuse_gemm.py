"""FuseGemmPass: a 2-D matrix product followed by a bias add -> one Gemm.

Matched (any module, any exporter):

    Add(MatMul(A, B), C)              -> Gemm(A, B, C)
    Add(MatMul(A, Transpose(W)), C)   -> Gemm(A, W, C, transB=1)     (the Transpose is dropped)
    Add(Gemm(A, B) without C, C)      -> Gemm(A, B, C)                (alpha, trans* kept)
    MatMul(A, Transpose(W))           -> Gemm(A, W, transB=1)         (no bias: the Transpose goes)

Only where it means the same: A and B are 2-D (MatMul of other ranks broadcasts or
batches), float32/float64 (ONNX Runtime's Gemm kernels), the product is read by the Add alone,
C has rank <= 2 and the Add's result has the product's shape (so C broadcasts to the product,
never the other way, as Gemm's unidirectional broadcasting requires). C may be a residual
(a 2-D activation): the ONNX Runtime target's skip-norm fusion takes it back out of the Gemm.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxport.passes import _fusion as f

_DTYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE)


def _same_shape(a: ir.Value, b: ir.Value) -> bool:
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    return all(x == y and (isinstance(x, int) or x.value is not None)
               for x, y in zip(a.shape, b.shape))


def _rank(value: ir.Value) -> int | None:
    dims = f.dims_of(value)
    return None if dims is None else len(dims)


class FuseGemmPass(ir.passes.InPlacePass):
    """MatMul (or C-less Gemm) + Add on 2-D operands -> Gemm."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph, namer, node in f.standard_nodes(model, ("MatMul", "Gemm")):
            modified |= _fuse(graph, namer, node)
        return ir.passes.PassResult(model, modified)


def _fuse(graph: ir.Graph, namer: f.Namer, mm: ir.Node) -> bool:
    product = mm.outputs[0]
    a, b = mm.inputs[0], mm.inputs[1]
    if a is None or b is None or _rank(a) != 2 or _rank(b) != 2 or _rank(product) != 2 \
            or a.dtype not in _DTYPES or b.dtype != a.dtype:
        return False
    if mm.op_type == "Gemm" and (len(mm.inputs) > 2 and mm.inputs[2] is not None):
        return False
    add = f.only_user(product, "Add")
    if add is None:
        return mm.op_type == "MatMul" and _transposed_weight(graph, namer, mm)
    c = f.other_input(add, product)
    if c is None or c is product or c.dtype != a.dtype or f.rank(c) is None or f.rank(c) > 2 \
            or not _same_shape(add.outputs[0], product):
        return False
    nodes = [mm, add]
    attrs: dict[str, object] = {}
    if mm.op_type == "Gemm":
        for name in ("alpha", "transA", "transB"):
            if name in mm.attributes:
                attrs[name] = mm.attributes[name].value
    else:
        transpose = f.producer(b, "Transpose")
        perm = transpose.attributes.get("perm") if transpose is not None else None
        if transpose is not None and f.only_user(b, "MatMul") is mm and \
                transpose.inputs[0] is not None and (perm is None or list(perm.as_ints()) == [1, 0]):
            b = transpose.inputs[0]
            attrs["transB"] = 1
            nodes.insert(0, transpose)
    # Named and attributed after the Add, the node that completes the computation (a bias added
    # by the module around an inner bias-free Linear belongs to the outer module).
    gemm = f.make_node(namer, add, "Gemm", [a, b, c], attrs, dtype=a.dtype)
    f.replace(graph, nodes, [gemm], add.outputs[0], gemm.outputs[0])
    return True


def _transposed_weight(graph: ir.Graph, namer: f.Namer, mm: ir.Node) -> bool:
    """MatMul(A, Transpose(W)) without a bias -> Gemm(A, W, transB=1): a bias-free Linear on
    2-D rows in one node, its weight read as stored."""
    a, b = mm.inputs[0], mm.inputs[1]
    transpose = f.producer(b, "Transpose")
    perm = transpose.attributes.get("perm") if transpose is not None else None
    if transpose is None or transpose.inputs[0] is None or f.only_user(b, "MatMul") is not mm \
            or (perm is not None and list(perm.as_ints()) != [1, 0]):
        return False
    assert a is not None
    gemm = f.make_node(namer, mm, "Gemm", [a, transpose.inputs[0]], {"transB": 1}, dtype=a.dtype)
    f.replace(graph, [transpose, mm], [gemm], mm.outputs[0], gemm.outputs[0])
    return True
