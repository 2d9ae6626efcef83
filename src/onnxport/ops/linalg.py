"""Translations for matrix products (mm, bmm, addmm, matmul, linear, einsum), determinants
and distances."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.ops.indexing import aten_meshgrid_indexing
from onnxport.translate import GraphBuilder, Tensor, aten, register


@register(aten.linear.default)
def aten_linear(g: GraphBuilder, input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    if rank(input) == 2 and rank(weight) == 2 and input.dtype is not None \
            and input.dtype.is_floating_point():
        return g.op("Gemm", input, weight, bias, transB=1)
    out = g.op("MatMul", input, g.op("Transpose", weight, perm=[1, 0]) if rank(weight) == 2 else weight)
    return out if bias is None else g.op("Add", out, bias)


@register(aten.addmm.default)
def aten_addmm(g: GraphBuilder, self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1,
               alpha: float = 1) -> Tensor:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    # torch ignores `self` when beta == 0, so NaN/inf in it must not reach the output.
    bias = None if beta == 0 else self
    if mat1.dtype is not None and mat1.dtype.is_floating_point():
        return g.op("Gemm", mat1, mat2, bias, alpha=float(alpha), beta=float(beta))
    # ONNX Runtime has no integer Gemm kernel; MatMul, Mul and Add all take integers.
    out = g.op("MatMul", mat1, mat2)
    if alpha != 1:
        out = g.op("Mul", out, g.const(alpha, like=out))
    if bias is None:
        return out
    if beta != 1:
        bias = g.op("Mul", bias, g.const(beta, like=bias))
    return g.op("Add", out, bias)


@register(aten.mm.default, aten.bmm.default, aten.matmul.default)
def aten_mm(g: GraphBuilder, self: Tensor, other: Tensor) -> Tensor:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return g.op("MatMul", self, other)


@register(aten.baddbmm.default)
def aten_baddbmm(g: GraphBuilder, self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1,
                 alpha: float = 1) -> Tensor:
    """baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    out = g.op("MatMul", batch1, batch2)
    if alpha != 1:
        out = g.op("Mul", out, g.const(alpha, like=out))
    # torch ignores `self` when beta == 0, so NaN/inf in it must not reach the output.
    if beta == 0:
        return out
    bias = self if beta == 1 else g.op("Mul", self, g.const(beta, like=self))
    return g.op("Add", bias, out)


# -- einsum, determinants, distances ---------------------------------------------------------------
_I64 = ir.DataType.INT64
_F32 = ir.DataType.FLOAT


def _einsum_dtype(dtype: ir.DataType | None) -> ir.DataType:
    # ONNX Runtime's Einsum kernel covers float, double, int32 and int64.
    if dtype in (_F32, ir.DataType.DOUBLE, ir.DataType.INT32, _I64):
        return dtype
    if dtype is not None and dtype.is_floating_point():
        return _F32
    return _I64


@register(aten.einsum.default)
def aten_einsum(g: GraphBuilder, equation: str, tensors: Sequence[Tensor], *,
                path: Sequence[int] | None = None) -> Tensor:
    """einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor"""
    out_dtype = g.out_dtype()
    work = _einsum_dtype(out_dtype)
    # The contraction order (path) changes only rounding, and ONNX picks its own.
    equation = equation.replace(" ", "")
    inputs = [cast(g, t, work) for t in tensors]
    terms = equation.split("->")[0].split(",")
    # ONNX Runtime wants every "..." to cover the same number of dims; torch broadcasts them
    # right-aligned, so shorter ones get leading size-1 dims.
    spans = [rank(t) - len(term.replace("...", "")) if "..." in term else 0
             for t, term in zip(tensors, terms)]
    widest = max(spans, default=0)
    for i, (term, span) in enumerate(zip(terms, spans)):
        if "..." in term and span < widest:
            start = term.index("...")
            inputs[i] = g.op("Unsqueeze", inputs[i],
                             g.const(list(range(start, start + widest - span)), _I64))
    summed: list[int] = []
    if "->" in equation and widest and "..." not in equation.split("->")[1]:
        # torch sums over dims under "..." that the output leaves out; ONNX Runtime wants the
        # ellipsis in the output, so it goes first there and is reduced afterwards.
        lhs, rhs = equation.split("->")
        equation = f"{lhs}->...{rhs}"
        summed = list(range(widest))
    out = g.op("Einsum", *inputs, equation=equation)
    if summed:
        out = g.op("ReduceSum", out, g.const(summed, _I64), keepdims=0)
    return cast(g, out, out_dtype)


def _det_dtype(dtype: ir.DataType | None) -> ir.DataType:
    # ONNX Runtime's Det kernel covers float and double.
    return ir.DataType.DOUBLE if dtype == ir.DataType.DOUBLE else _F32


@register(aten.linalg_det.default, aten.det.default)
def aten_linalg_det(g: GraphBuilder, A: Tensor) -> Tensor:
    """linalg_det(Tensor A) -> Tensor"""
    out_dtype = g.out_dtype()
    shape = A.shape
    if shape is not None and isinstance(shape[-1], int) and shape[-1] == 0:
        # The determinant of a 0x0 matrix is 1; ONNX Det rejects empty matrices.
        batch = g.op("Shape", A, end=-2)
        return g.op("Expand", g.const(1.0, out_dtype), batch)
    return cast(g, g.op("Det", cast(g, A, _det_dtype(out_dtype))), out_dtype)


def _p_norm(g: GraphBuilder, x: Tensor, p: float, axes: Sequence[int], keepdims: int = 0,
            *, propagate_nan: bool = True) -> Tensor:
    """The vector p-norm of `x` over `axes` (float input), as torch.linalg.vector_norm.

    With propagate_nan=False the inf norm skips NaN, as torch's cdist kernel does.
    """
    magnitude = g.op("Abs", x)
    if p in (float("inf"), float("-inf")):
        if not propagate_nan:
            # torch's cdist keeps a running max from 0 that a NaN never replaces.
            magnitude = g.op("Where", g.op("IsNaN", magnitude), g.const(0.0, like=x), magnitude)
        extreme = g.op("ReduceMax" if p > 0 else "ReduceMin", magnitude,
                       g.const(list(axes), _I64), keepdims=keepdims)
        if not propagate_nan:
            return extreme
        # ONNX Runtime's ReduceMax/Min skip NaN; torch's max/min norms are NaN then.
        has_nan = g.op("ReduceMax", g.op("Cast", g.op("IsNaN", x), to=x.dtype),
                       g.const(list(axes), _I64), keepdims=keepdims)
        return g.op("Where", g.op("Greater", has_nan, g.const(0.0, like=x)),
                    g.const(float("nan"), like=x), extreme)
    if p == 0:
        nonzero = g.op("Cast", g.op("Not", g.op("Equal", x, g.const(0.0, like=x))), to=x.dtype)
        return g.op("ReduceSum", nonzero, g.const(list(axes), _I64), keepdims=keepdims)
    if p == 1:
        return g.op("ReduceSum", magnitude, g.const(list(axes), _I64), keepdims=keepdims)
    if p == 2:
        return g.op("Sqrt", g.op("ReduceSumSquare", x, g.const(list(axes), _I64),
                                 keepdims=keepdims))
    total = g.op("ReduceSum", g.op("Pow", magnitude, g.const(float(p), like=x)),
                 g.const(list(axes), _I64), keepdims=keepdims)
    return g.op("Pow", total, g.const(1.0 / float(p), like=x))


def _float_work(dtype: ir.DataType) -> ir.DataType:
    # Reductions and Pow over float16 run in float (ONNX Runtime kernels and accuracy).
    return ir.DataType.DOUBLE if dtype == ir.DataType.DOUBLE else _F32


@register(aten.dist.default)
def aten_dist(g: GraphBuilder, self: Tensor, other: Tensor, p: float = 2) -> Tensor:
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor"""
    out_dtype = g.out_dtype()
    work = _float_work(out_dtype)
    diff = g.op("Sub", cast(g, self, work), cast(g, other, work))
    flat = g.op("Reshape", diff, g.const([-1], _I64))
    return cast(g, _p_norm(g, flat, float(p), [0]), out_dtype)


@register(aten.cartesian_prod.default)
def aten_cartesian_prod(g: GraphBuilder, tensors: Sequence[Tensor]) -> Tensor:
    """cartesian_prod(Tensor[] tensors) -> Tensor"""
    if len(tensors) == 1:
        return tensors[0]
    grids = aten_meshgrid_indexing(g, tensors, indexing="ij")
    columns = [g.op("Reshape", t, g.const([-1, 1], _I64)) for t in grids]
    return g.op("Concat", *columns, axis=1)


@register(aten.angle.default)
def aten_angle(g: GraphBuilder, self: Tensor) -> Tensor:
    """angle(Tensor self) -> Tensor"""
    if self.dtype in (ir.DataType.COMPLEX64, ir.DataType.COMPLEX128):
        raise TranslationError("angle of a complex tensor: ONNX models carry no complex values")
    out_dtype = g.out_dtype()
    x = cast(g, self, out_dtype)
    # Real input: pi for negatives, 0 otherwise (-0.0 included); NaN stays NaN.
    zero = g.const(0.0, out_dtype)
    out = g.op("Where", g.op("Less", x, zero), g.const(float(np.pi), out_dtype), zero)
    return g.op("Where", g.op("IsNaN", x), x, out)


def _inverse(g: GraphBuilder, A: Tensor) -> Tensor:
    """A^-1 by Gauss-Jordan elimination with partial pivoting, unrolled over the static size.

    Computed in double: float32 inputs then match LAPACK's float32 result to its own accuracy.
    """
    n = A.shape[-1] if A.shape is not None else None
    if not isinstance(n, int):
        raise TranslationError("matrix inverse needs a static matrix size")
    if n > 32:
        raise TranslationError(f"matrix inverse is unrolled per column; {n}x{n} is too large")
    out_dtype = g.out_dtype(0)
    if A.shape is not None and any(d == 0 for d in A.shape):
        # No matrices (or 0x0 ones): the inverse is the same empty tensor.
        return cast(g, A, out_dtype)
    f64 = ir.DataType.DOUBLE
    a = cast(g, A, f64)
    # Broadcasting by Add rather than Expand: ONNX Runtime's Expand rejects an empty batch.
    zeros = g.op("ConstantOfShape", g.op("Shape", a), value=ir.tensor(np.zeros(1)))
    eye = g.op("Add", zeros, g.const(np.eye(n), f64))
    aug = g.op("Concat", a, eye, axis=-1)                                  # [..., n, 2n]
    rows = g.const(np.arange(n, dtype=np.int64), _I64)                      # [n]
    index_zeros = g.op("ConstantOfShape", g.op("Shape", aug),
                       value=ir.tensor(np.zeros(1, dtype=np.int64)))
    for k in range(n):
        column = g.op("Slice", aug, g.const([k, k], _I64), g.const([n, k + 1], _I64),
                      g.const([-2, -1], _I64))                              # [..., n-k, 1]
        pivot = g.op("Add", g.op("ArgMax", g.op("Abs", column), axis=-2, keepdims=0),
                     g.const(k, _I64))                                       # [..., 1]
        perm = g.op("Where", g.op("Equal", rows, g.const(k, _I64)), pivot,
                    g.op("Where", g.op("Equal", rows, pivot), g.const(k, _I64), rows))
        perm = g.op("Add", g.op("Unsqueeze", perm, g.const([-1], _I64)), index_zeros)
        aug = g.op("GatherElements", aug, perm, axis=-2)
        row = g.op("Slice", aug, g.const([k], _I64), g.const([k + 1], _I64), g.const([-2], _I64))
        row = g.op("Div", row, g.op("Slice", row, g.const([k], _I64), g.const([k + 1], _I64),
                                    g.const([-1], _I64)))
        factor = g.op("Slice", aug, g.const([k], _I64), g.const([k + 1], _I64),
                      g.const([-1], _I64))                                   # [..., n, 1]
        eliminated = g.op("Sub", aug, g.op("Mul", factor, row))
        is_pivot_row = g.const(np.arange(n).reshape(n, 1) == k)
        aug = g.op("Where", is_pivot_row, row, eliminated)
    inverse = g.op("Slice", aug, g.const([n], _I64), g.const([2 * n], _I64), g.const([-1], _I64))
    return cast(g, inverse, out_dtype)


@register(aten.linalg_inv.default)
def aten_linalg_inv(g: GraphBuilder, A: Tensor) -> Tensor:
    """linalg_inv(Tensor A) -> Tensor"""
    return _inverse(g, A)


@register(aten.linalg_inv_ex.default)
def aten_linalg_inv_ex(g: GraphBuilder, A: Tensor, *,
                       check_errors: bool = False) -> tuple[Tensor, Tensor]:
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)"""
    # info reports singular matrices; the ONNX model cannot detect them and reports 0.
    batch = g.op("Shape", A, start=0, end=-2)
    return _inverse(g, A), g.op("Expand", g.const(0, ir.DataType.INT32), batch)


@register(aten._linalg_check_errors.default)
def aten__linalg_check_errors(g: GraphBuilder, info: Tensor, api_name: str, *,
                              is_matrix: bool) -> None:
    """_linalg_check_errors(Tensor info, str api_name, *, bool is_matrix) -> ()"""
    # torch raises here for singular input; an ONNX model cannot raise, so nothing is emitted.
    return
