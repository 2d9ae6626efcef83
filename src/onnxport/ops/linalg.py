"""Translations for matrix products (mm, bmm, addmm, matmul, linear, einsum), determinants
and distances."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.ops.elementwise import _rounded_op
from onnxport.ops.indexing import aten_meshgrid_indexing
from onnxport.ops.linalg_solve import LUFactors, lu_determinant, lu_solve, matrix_size
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


def _beta_self_plus_alpha(g: GraphBuilder, self: Tensor, product: Tensor, beta: float,
                          alpha: float) -> Tensor:
    """beta * self + alpha * product, as the add*mm family computes it."""
    if alpha != 1:
        product = g.op("Mul", product, g.const(alpha, like=product))
    # torch ignores `self` when beta == 0, so NaN/inf in it must not reach the output.
    if beta == 0:
        return product
    bias = self if beta == 1 else g.op("Mul", self, g.const(beta, like=self))
    return g.op("Add", bias, product)


@register(aten.baddbmm.default)
def aten_baddbmm(g: GraphBuilder, self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1,
                 alpha: float = 1) -> Tensor:
    """baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    out = g.op("MatMul", batch1, batch2)
    return _beta_self_plus_alpha(g, self, out, beta, alpha)


@register(aten.addbmm.default)
def aten_addbmm(g: GraphBuilder, self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1,
                alpha: float = 1) -> Tensor:
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    # sum_b batch1[b] @ batch2[b] is one product over the concatenated inner dimension,
    # (n, b*m) @ (b*m, p). Reshape's 0 copies the dim at the same position (n for the left
    # side); -1 takes b*m, which is also right for an empty batch while n and p are not 0.
    i64 = ir.DataType.INT64
    lhs = g.op("Reshape", g.op("Transpose", batch1, perm=[1, 0, 2]), g.const([0, -1], i64))
    rhs = g.op("Reshape", batch2, g.op("Concat", g.const([-1], i64),
                                       g.op("Shape", batch2, start=2), axis=0))
    out = g.op("MatMul", lhs, rhs)
    return _beta_self_plus_alpha(g, self, out, beta, alpha)


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


@register(aten.linalg_det.default, aten.det.default)
def aten_linalg_det(g: GraphBuilder, A: Tensor) -> Tensor:
    """linalg_det(Tensor A) -> Tensor"""
    out_dtype = g.out_dtype()
    shape = A.shape
    if shape is not None and isinstance(shape[-1], int) and shape[-1] == 0:
        # The determinant of a 0x0 matrix is 1; ONNX Det rejects empty matrices.
        batch = g.op("Shape", A, end=-2)
        return g.op("Expand", g.const(1.0, out_dtype), batch)
    if out_dtype == ir.DataType.DOUBLE:
        # ONNX Runtime's Det kernel covers float only: double goes through an LU factorization.
        return lu_determinant(g, A)
    return cast(g, g.op("Det", cast(g, A, _F32)), out_dtype)


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


def _inverse(g: GraphBuilder, A: Tensor) -> tuple[Tensor, Tensor]:
    """A^-1 and LAPACK's info, as ATen's linalg_inv_ex: linalg_solve_ex(A, I), that is an LU
    factorization with partial pivoting (linalg_solve.py) and two triangular solves."""
    n = matrix_size(A, -1, "matrix inverse")
    f64 = ir.DataType.DOUBLE
    factors = LUFactors(g, cast(g, A, f64), n, n)
    inverse = lu_solve(g, factors.lu, factors.perm, g.const(np.eye(n), f64), n, (rank(A), 2),
                       left=True, adjoint=False)
    return cast(g, inverse, g.out_dtype(0)), factors.info(g, A)


@register(aten.linalg_inv.default)
def aten_linalg_inv(g: GraphBuilder, A: Tensor) -> Tensor:
    """linalg_inv(Tensor A) -> Tensor"""
    return _inverse(g, A)[0]


@register(aten.linalg_inv_ex.default)
def aten_linalg_inv_ex(g: GraphBuilder, A: Tensor, *,
                       check_errors: bool = False) -> tuple[Tensor, Tensor]:
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)"""
    return _inverse(g, A)


@register(aten._linalg_check_errors.default)
def aten__linalg_check_errors(g: GraphBuilder, info: Tensor, api_name: str, *,
                              is_matrix: bool) -> None:
    """_linalg_check_errors(Tensor info, str api_name, *, bool is_matrix) -> ()"""
    # torch raises here for singular input; an ONNX model cannot raise, so nothing is emitted.
    return


@register(aten.linalg_cross.default)
def aten_linalg_cross(g: GraphBuilder, self: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """linalg_cross(Tensor self, Tensor other, *, int dim=-1) -> Tensor"""
    # a[i+1] b[i+2] - a[i+2] b[i+1] along `dim`, each product and the difference rounded to
    # the output dtype as ATen's kernel does (float16 rounds after every step).
    dtype = g.out_dtype()
    r = max(rank(self), rank(other))
    axis = dim % r
    a, b = cast(g, self, dtype), cast(g, other, dtype)
    nxt, prev = g.const([1, 2, 0], ir.DataType.INT64), g.const([2, 0, 1], ir.DataType.INT64)

    def take(x: Tensor, index: Tensor) -> Tensor:
        return g.op("Gather", x, index, axis=axis - (r - rank(x)))

    left = _rounded_op(g, "Mul", dtype, take(a, nxt), take(b, prev))
    right = _rounded_op(g, "Mul", dtype, take(a, prev), take(b, nxt))
    return _rounded_op(g, "Sub", dtype, left, right)
