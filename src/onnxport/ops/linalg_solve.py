"""Translations for linear solvers and factorizations: LU, Cholesky, triangular and general
solves, slogdet, matrix_exp and householder_product, built from ONNX primitives.

ONNX has no factorization ops, so each algorithm is unrolled over the matrix size, which must
be static; batch dims may be dynamic. Work is done in double and cast back to the output dtype:
float32 results then round once from a value more accurate than LAPACK's own float32 result.
The LU factorization chooses pivots as LAPACK's getrf does (largest |value|, first on ties), so
pivots and factors match torch's.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

_I64 = ir.DataType.INT64
_I32 = ir.DataType.INT32
_F64 = ir.DataType.DOUBLE
# Each unrolled step adds about 15 nodes; larger matrices make impractically large graphs.
_MAX_SIZE = 64


def matrix_size(x: Tensor, axis: int, op: str) -> int:
    """The static size of `x` along `axis`; the algorithms unroll over it."""
    dim = x.shape[axis] if x.shape is not None else None
    if not isinstance(dim, int):
        raise TranslationError(f"{op} is unrolled over the matrix size, which must be static "
                               f"(got {dim})")
    if dim > _MAX_SIZE:
        raise TranslationError(f"{op} is unrolled over the matrix size; {dim} is larger than "
                               f"{_MAX_SIZE}")
    return dim


def _ints(g: GraphBuilder, values: list[int]) -> Tensor:
    return g.const(np.asarray(values, dtype=np.int64), _I64)


def _slice(g: GraphBuilder, x: Tensor, axis: int, start: int, end: int) -> Tensor:
    return g.op("Slice", x, _ints(g, [start]), _ints(g, [end]), _ints(g, [axis]))


def _mT(g: GraphBuilder, x: Tensor, r: int) -> Tensor:
    """`x` with its last two dims swapped; `r` is its rank."""
    return g.op("Transpose", x, perm=[*range(r - 2), r - 1, r - 2])


def _column_to_row(g: GraphBuilder, x: Tensor) -> Tensor:
    """[..., n, 1] -> [..., 1, n], without knowing the rank."""
    return g.op("Unsqueeze", g.op("Squeeze", x, _ints(g, [-1])), _ints(g, [-2]))


def _broadcast_batch(g: GraphBuilder, x: Tensor, other: Tensor) -> Tensor:
    """`x` [..., p, q] with its batch dims broadcast against those of `other` [..., r, s]."""
    shape = g.op("Concat", g.op("Shape", other, end=-2), g.op("Shape", x, start=-2), axis=0)
    return g.op("Expand", x, shape)


def _mask(g: GraphBuilder, array: np.ndarray) -> Tensor:
    return g.const(np.asarray(array, dtype=bool), ir.DataType.BOOL)


def _first_true(g: GraphBuilder, flags: list[Tensor]) -> Tensor:
    """int32 [...]: 1 + the index of the first true flag of each [..., 1, 1] list, else 0.

    This is LAPACK's `info` convention (the first failing step, 1-based).
    """
    # Unrolled rather than reduced: ONNX Runtime's reductions mis-shape empty batches.
    info = g.const(0, _I32)
    for k in range(len(flags) - 1, -1, -1):
        info = g.op("Where", flags[k], g.const(k + 1, _I32), info)
    return g.op("Squeeze", info, _ints(g, [-2, -1]))


def _zeros_info(g: GraphBuilder, x: Tensor) -> Tensor:
    """int32 zeros of `x`'s batch shape (x is [..., m, n])."""
    return g.op("ConstantOfShape", g.op("Shape", x, end=-2),
                value=ir.tensor(np.zeros(1, dtype=np.int32)))


# -- LU --------------------------------------------------------------------------------------------
class LUFactors:
    """An unrolled partial-pivoting LU of [..., m, n]: P^T A = L U, as LAPACK getrf computes it.

    `lu` packs L (unit lower, below the diagonal) and U; `perm` [..., m, 1] holds the original row
    of each row of P^T A; `pivots` [..., 1, 1] per step (0-based rows swapped with the step's);
    `diagonal` [..., 1, 1] per step (U's diagonal); `is_zero` per step (an exactly zero pivot).
    """

    def __init__(self, g: GraphBuilder, a: Tensor, m: int, n: int) -> None:
        rows = np.arange(m).reshape(m, 1)
        cols = np.arange(n).reshape(1, n)
        row_ids = g.const(rows, _I64)
        index_zeros = g.op("ConstantOfShape", g.op("Shape", a),
                           value=ir.tensor(np.zeros(1, dtype=np.int64)))   # [..., m, n]
        perm = g.op("Add", row_ids, _slice(g, index_zeros, -1, 0, 1))      # [..., m, 1]
        self.pivots: list[Tensor] = []
        self.diagonal: list[Tensor] = []
        self.is_zero: list[Tensor] = []
        for k in range(min(m, n)):
            column = _slice(g, a, -1, k, k + 1)                              # [..., m, 1]
            magnitude = g.op("Where", _mask(g, rows >= k), g.op("Abs", column),
                             g.const(-1.0, _F64))
            # TopK rather than ArgMax: both take the first of equal values, but ONNX Runtime's
            # ArgMax mis-shapes an empty batch.
            pivot = g.op("TopK", magnitude, _ints(g, [1]), axis=-2, outputs=2)[1]  # [..., 1, 1]
            swap = g.op("Where", _mask(g, rows == k), pivot,
                        g.op("Where", g.op("Equal", row_ids, pivot), g.const(k, _I64), row_ids))
            a = g.op("GatherElements", a, g.op("Add", swap, index_zeros), axis=-2)
            perm = g.op("GatherElements", perm, swap, axis=-2)
            head = _slice(g, a, -2, k, k + 1)                                # [..., 1, n]
            value = _slice(g, head, -1, k, k + 1)                            # [..., 1, 1]
            is_zero = g.op("Equal", value, g.const(0.0, _F64))
            column = _slice(g, a, -1, k, k + 1)
            # getrf scales by the reciprocal; a zero pivot (an all-zero column) is left as is.
            factors = g.op("Where", is_zero, column,
                           g.op("Mul", column, g.op("Reciprocal", value)))
            below = rows > k
            updated = g.op("Sub", a, g.op("Mul", factors, head))
            a = g.op("Where", _mask(g, below & (cols > k)), updated,
                     g.op("Where", _mask(g, below & (cols == k)), factors, a))
            self.pivots.append(pivot)
            self.diagonal.append(value)
            self.is_zero.append(is_zero)
        self.lu = a
        self.perm = perm

    def lapack_pivots(self, g: GraphBuilder, like: Tensor) -> Tensor:
        """int32 [..., k]: LAPACK's 1-based pivots; `like` [..., m, n] gives the batch for k = 0."""
        if not self.pivots:
            shape = g.op("Concat", g.op("Shape", like, end=-2), _ints(g, [0]), axis=0)
            return g.op("ConstantOfShape", shape, value=ir.tensor(np.zeros(1, dtype=np.int32)))
        stacked = g.op("Squeeze", g.op("Concat", *self.pivots, axis=-1), _ints(g, [-2]))
        return g.op("Cast", g.op("Add", stacked, g.const(1, _I64)), to=_I32)

    def info(self, g: GraphBuilder, like: Tensor) -> Tensor:
        return _first_true(g, self.is_zero) if self.is_zero else _zeros_info(g, like)


def _unpack_lu(g: GraphBuilder, lu: Tensor, m: int, n: int, dtype: ir.DataType
               ) -> tuple[Tensor, Tensor]:
    """L [..., m, k] (unit lower) and U [..., k, n] from a packed LU, k = min(m, n)."""
    k = min(m, n)
    zero = g.const(0.0, dtype)
    lower = _slice(g, lu, -1, 0, k)
    rows, cols = np.arange(m).reshape(m, 1), np.arange(k).reshape(1, k)
    lower = g.op("Where", _mask(g, rows > cols), lower,
                 g.op("Where", _mask(g, rows == cols), g.const(1.0, dtype), zero))
    upper = _slice(g, lu, -2, 0, k)
    rows, cols = np.arange(k).reshape(k, 1), np.arange(n).reshape(1, n)
    upper = g.op("Where", _mask(g, rows <= cols), upper, zero)
    return lower, upper


def _perm_matrix(g: GraphBuilder, perm_column: Tensor, m: int, dtype: ir.DataType) -> Tensor:
    """P [..., m, m] with A = P (P^T A), from perm [..., m, 1]: P[r, i] = (perm[i] == r)."""
    rows = g.const(np.arange(m).reshape(m, 1), _I64)
    return g.op("Cast", g.op("Equal", rows, _column_to_row(g, perm_column)), to=dtype)


def _perm_from_pivots(g: GraphBuilder, pivots: Tensor, m: int) -> Tensor:
    """perm [..., m, 1] from LAPACK pivots [..., k]: the row swaps applied in order."""
    k = matrix_size(pivots, -1, "unpacking LU pivots")
    piv = g.op("Sub", g.op("Unsqueeze", cast(g, pivots, _I64), _ints(g, [-1])),
               g.const(1, _I64))                                             # [..., k, 1]
    rows = np.arange(m).reshape(m, 1)
    row_ids = g.const(rows, _I64)
    batch_zeros = g.op("Mul", _slice(g, piv, -2, 0, 1), g.const(0, _I64))   # [..., 1, 1]
    perm = g.op("Add", row_ids, batch_zeros)                                # [..., m, 1]
    for step in range(min(k, m)):
        target = _slice(g, piv, -2, step, step + 1)                          # [..., 1, 1]
        at_step = _slice(g, perm, -2, step, step + 1)
        at_target = g.op("GatherElements", perm, target, axis=-2)
        perm = g.op("Where", _mask(g, rows == step), at_target,
                    g.op("Where", g.op("Equal", row_ids, target), at_step, perm))
    return perm


def _gather_rows(g: GraphBuilder, b: Tensor, perm: Tensor) -> Tensor:
    """Rows of b [..., n, k] reordered: out[i] = b[perm[i]], perm [..., n, 1] (batch broadcast)."""
    b = _broadcast_batch(g, b, perm)
    # Broadcast by Add rather than Expand: ONNX Runtime's optimizer drops an Expand of
    # [..., n, 1] to [..., n, 0] here, leaving indices wider than the data.
    index = g.op("Add", perm, g.op("ConstantOfShape", g.op("Shape", b),
                                   value=ir.tensor(np.zeros(1, dtype=np.int64))))
    return g.op("GatherElements", b, index, axis=-2)


def _inverse_perm(g: GraphBuilder, perm: Tensor, m: int) -> Tensor:
    """inv [..., m, 1] with inv[perm[i]] = i."""
    ids = g.op("Add", g.const(np.arange(m).reshape(m, 1), _I64), g.op("Mul", perm, g.const(0, _I64)))
    return g.op("ScatterElements", perm, perm, ids, axis=-2)


# -- triangular solves -----------------------------------------------------------------------------
def _solve_triangular(g: GraphBuilder, a: Tensor, b: Tensor, n: int, *, lower: bool,
                      unit: bool) -> Tensor:
    """X with A X = B for triangular a [..., n, n] (the other triangle is never read).

    Column-oriented substitution, as BLAS trsm: each solved row is subtracted from the rest.
    """
    b = _broadcast_batch(g, b, a)
    if n == 0:
        return b
    order = list(range(n)) if lower else list(range(n - 1, -1, -1))
    solved: dict[int, Tensor] = {}
    for step, k in enumerate(order):
        x = _slice(g, b, -2, k, k + 1)                                       # [..., 1, q]
        if not unit:
            x = g.op("Div", x, _slice(g, _slice(g, a, -2, k, k + 1), -1, k, k + 1))
        solved[k] = x
        if step < n - 1:
            # Rows already solved take values from the other triangle here; they are not read.
            b = g.op("Sub", b, g.op("Mul", _slice(g, a, -1, k, k + 1), x))
    return g.op("Concat", *(solved[k] for k in range(n)), axis=-2)


def lu_solve(g: GraphBuilder, lu: Tensor, perm: Tensor, b: Tensor, n: int, ranks: tuple[int, int],
             *, left: bool, adjoint: bool) -> Tensor:
    """X with A X = B (or A^T X = B, or X A = B, X A^T = B) for A = P L U.

    `ranks` are those of `lu` and `b`; `perm` is LUFactors.perm (or _perm_from_pivots).
    """
    if not left:
        # X A = B  <=>  A^T X^T = B^T
        solution = lu_solve(g, lu, perm, _mT(g, b, ranks[1]), n, ranks, left=True,
                            adjoint=not adjoint)
        return _mT(g, solution, max(ranks))
    if n == 0:
        return _broadcast_batch(g, b, lu)
    if not adjoint:
        y = _solve_triangular(g, lu, _gather_rows(g, b, perm), n, lower=True, unit=True)
        return _solve_triangular(g, lu, y, n, lower=False, unit=False)
    # A^T = U^T L^T P^T
    lu_t = _mT(g, lu, ranks[0])
    z = _solve_triangular(g, lu_t, b, n, lower=True, unit=False)
    w = _solve_triangular(g, lu_t, z, n, lower=False, unit=True)
    return _gather_rows(g, w, _inverse_perm(g, perm, n))


def lu_determinant(g: GraphBuilder, A: Tensor) -> Tensor:
    """det(A) in double for n >= 1: U's diagonal product, negated per row swap, from the LU of
    A^T as torch's linalg_det computes it."""
    n = matrix_size(A, -1, "det")
    factors = LUFactors(g, _mT(g, cast(g, A, _F64), rank(A)), n, n)
    # Unrolled rather than reduced: ONNX Runtime's reductions mis-shape an empty batch.
    det = g.const(1.0, _F64)
    for k, (value, pivot) in enumerate(zip(factors.diagonal, factors.pivots)):
        is_swap = g.op("Not", g.op("Equal", pivot, g.const(k, _I64)))
        det = g.op("Mul", det, g.op("Where", is_swap, g.op("Neg", value), value))
    return g.op("Squeeze", det, _ints(g, [-2, -1]))


# -- LU translations -------------------------------------------------------------------------------
@register(aten.linalg_lu_factor_ex.default)
def aten_linalg_lu_factor_ex(g: GraphBuilder, A: Tensor, *, pivot: bool = True,
                             check_errors: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)"""
    if not pivot:
        raise TranslationError("LU without pivoting (torch supports it on CUDA only)")
    m, n = matrix_size(A, -2, "lu_factor"), matrix_size(A, -1, "lu_factor")
    out_dtype = g.out_dtype(0)
    factor = LUFactors(g, cast(g, A, _F64), m, n)
    return cast(g, factor.lu, out_dtype), factor.lapack_pivots(g, A), factor.info(g, A)


@register(aten.linalg_lu.default)
def aten_linalg_lu(g: GraphBuilder, A: Tensor, *, pivot: bool = True
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)"""
    if not pivot:
        raise TranslationError("LU without pivoting (torch supports it on CUDA only)")
    m, n = matrix_size(A, -2, "linalg_lu"), matrix_size(A, -1, "linalg_lu")
    out_dtype = g.out_dtype(0)
    factor = LUFactors(g, cast(g, A, _F64), m, n)
    lower, upper = _unpack_lu(g, cast(g, factor.lu, out_dtype), m, n, out_dtype)
    return _perm_matrix(g, factor.perm, m, out_dtype), lower, upper


@register(aten.lu_unpack.default)
def aten_lu_unpack(g: GraphBuilder, LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True,
                   unpack_pivots: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)"""
    m, n = matrix_size(LU_data, -2, "lu_unpack"), matrix_size(LU_data, -1, "lu_unpack")
    dtype = g.out_dtype(1)
    # torch returns empty tensors for the parts it is told not to unpack.
    empty = g.const(np.zeros(0), dtype)
    lower = upper = permutation = empty
    if unpack_data:
        lower, upper = _unpack_lu(g, LU_data, m, n, dtype)
    if unpack_pivots:
        permutation = _perm_matrix(g, _perm_from_pivots(g, LU_pivots, m), m, dtype)
    return permutation, lower, upper


@register(aten.linalg_lu_solve.default)
def aten_linalg_lu_solve(g: GraphBuilder, LU: Tensor, pivots: Tensor, B: Tensor, *,
                         left: bool = True, adjoint: bool = False) -> Tensor:
    """linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor"""
    n = matrix_size(LU, -1, "lu_solve")
    out_dtype = g.out_dtype()
    lu = cast(g, LU, _F64)
    perm = _perm_from_pivots(g, pivots, n)
    solution = lu_solve(g, lu, perm, cast(g, B, _F64), n, (rank(LU), rank(B)), left=left,
                        adjoint=adjoint)
    return cast(g, solution, out_dtype)


@register(aten._linalg_solve_ex.default)
def aten__linalg_solve_ex(g: GraphBuilder, A: Tensor, B: Tensor, *, left: bool = True,
                          check_errors: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)"""
    n = matrix_size(A, -1, "linalg_solve")
    out_dtype = g.out_dtype(0)
    # ATen's rule: B is a (batch of) vector(s) when 1-D or shaped like A without its last dim.
    a_shape, b_shape = list(A.shape or []), list(B.shape or [])
    is_vector = len(b_shape) == 1 or (len(a_shape) - 1 == len(b_shape)
                                      and b_shape == a_shape[:-1])
    b = cast(g, B, _F64)
    if is_vector:
        b = g.op("Unsqueeze", b, _ints(g, [-1 if left else -2]))
    factor = LUFactors(g, cast(g, A, _F64), n, n)
    solution = lu_solve(g, factor.lu, factor.perm, b, n, (rank(A), len(b_shape) + int(is_vector)),
                        left=left, adjoint=False)
    if is_vector:
        solution = g.op("Squeeze", solution, _ints(g, [-1 if left else -2]))
    return (cast(g, solution, out_dtype), cast(g, factor.lu, g.out_dtype(1)),
            factor.lapack_pivots(g, A), factor.info(g, A))


@register(aten._linalg_slogdet.default)
def aten__linalg_slogdet(g: GraphBuilder, A: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)"""
    n = matrix_size(A, -1, "slogdet")
    out_dtype = g.out_dtype(0)
    a = cast(g, A, _F64)
    if n == 0:
        ones = g.op("ConstantOfShape", g.op("Shape", A, end=-2),
                    value=ir.tensor(np.ones(1, dtype=out_dtype.numpy())))
        zeros = g.op("Sub", ones, ones)
        return ones, zeros, cast(g, A, g.out_dtype(2)), LUFactors(g, a, 0, 0).lapack_pivots(g, A)
    # torch factors A^T (det(A^T) = det(A)) and returns that LU.
    factor = LUFactors(g, _mT(g, a, rank(A)), n, n)
    # Products and sums unrolled rather than reduced: ONNX Runtime's reductions mis-shape an
    # empty batch.
    sign = g.const(1.0, _F64)
    logabsdet = g.const(0.0, _F64)
    for k, (value, pivot) in enumerate(zip(factor.diagonal, factor.pivots)):
        is_swap = g.op("Not", g.op("Equal", pivot, g.const(k, _I64)))
        sign = g.op("Mul", sign, g.op("Where", is_swap, g.op("Neg", g.op("Sign", value)),
                                      g.op("Sign", value)))
        logabsdet = g.op("Add", logabsdet, g.op("Log", g.op("Abs", value)))
    sign = g.op("Squeeze", sign, _ints(g, [-2, -1]))
    logabsdet = g.op("Squeeze", logabsdet, _ints(g, [-2, -1]))
    return (cast(g, sign, out_dtype), cast(g, logabsdet, g.out_dtype(1)),
            cast(g, factor.lu, g.out_dtype(2)), factor.lapack_pivots(g, A))


# -- triangular solve translations -----------------------------------------------------------------
@register(aten.linalg_solve_triangular.default)
def aten_linalg_solve_triangular(g: GraphBuilder, self: Tensor, B: Tensor, *, upper: bool,
                                 left: bool = True, unitriangular: bool = False) -> Tensor:
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor"""
    n = matrix_size(self, -1, "solve_triangular")
    out_dtype = g.out_dtype()
    a, b = cast(g, self, _F64), cast(g, B, _F64)
    if left:
        solution = _solve_triangular(g, a, b, n, lower=not upper, unit=unitriangular)
        return cast(g, solution, out_dtype)
    # X A = B  <=>  A^T X^T = B^T
    r = max(rank(self), rank(B))
    solution = _solve_triangular(g, _mT(g, a, rank(self)), _mT(g, b, rank(B)), n, lower=upper,
                                 unit=unitriangular)
    return cast(g, _mT(g, solution, r), out_dtype)


@register(aten.triangular_solve.default)
def aten_triangular_solve(g: GraphBuilder, self: Tensor, A: Tensor, upper: bool = True,
                          transpose: bool = False, unitriangular: bool = False
                          ) -> tuple[Tensor, Tensor]:
    """triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) -> (Tensor solution, Tensor cloned_coefficient)"""
    n = matrix_size(A, -1, "triangular_solve")
    out_dtype = g.out_dtype(0)
    a = cast(g, A, _F64)
    lower = not upper
    if transpose:
        a, lower = _mT(g, a, rank(A)), upper
    solution = _solve_triangular(g, a, cast(g, self, _F64), n, lower=lower, unit=unitriangular)
    # The coefficient comes back broadcast to the common batch shape.
    return cast(g, solution, out_dtype), _broadcast_batch(g, A, self)


# -- Cholesky --------------------------------------------------------------------------------------
def _cholesky(g: GraphBuilder, a: Tensor, n: int) -> tuple[Tensor, list[Tensor]]:
    """L (lower) with A = L L^T from A's lower triangle, and per step whether it failed.

    Right-looking, as LAPACK potrf: a step fails when its diagonal is not positive (or NaN).
    """
    rows = np.arange(n).reshape(n, 1)
    zero = g.const(0.0, _F64)
    columns: list[Tensor] = []
    failed: list[Tensor] = []
    for j in range(n):
        column = _slice(g, a, -1, j, j + 1)                                  # [..., n, 1]
        diagonal = _slice(g, column, -2, j, j + 1)                           # [..., 1, 1]
        failed.append(g.op("Not", g.op("Greater", diagonal, zero)))
        root = g.op("Sqrt", diagonal)
        column = g.op("Where", _mask(g, rows > j), g.op("Div", column, root),
                      g.op("Where", _mask(g, rows == j), root, zero))
        columns.append(column)
        if j < n - 1:
            # Entries of rows and columns up to j become garbage here; they are not read again.
            a = g.op("Sub", a, g.op("Mul", column, _column_to_row(g, column)))
    return g.op("Concat", *columns, axis=-1), failed


@register(aten.linalg_cholesky_ex.default)
def aten_linalg_cholesky_ex(g: GraphBuilder, self: Tensor, *, upper: bool = False,
                            check_errors: bool = False) -> tuple[Tensor, Tensor]:
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)"""
    n = matrix_size(self, -1, "cholesky")
    out_dtype = g.out_dtype(0)
    if n == 0:
        return self, _zeros_info(g, self)
    r = rank(self)
    a = cast(g, self, _F64)
    # upper: U^T U = A reads A's upper triangle, which is the lower triangle of A^T.
    factor, failed = _cholesky(g, _mT(g, a, r) if upper else a, n)
    if upper:
        factor = _mT(g, factor, r)
    return cast(g, factor, out_dtype), _first_true(g, failed)


@register(aten.cholesky.default)
def aten_cholesky(g: GraphBuilder, self: Tensor, upper: bool = False) -> Tensor:
    """cholesky(Tensor self, bool upper=False) -> Tensor"""
    return aten_linalg_cholesky_ex(g, self, upper=upper)[0]


@register(aten.cholesky_solve.default)
def aten_cholesky_solve(g: GraphBuilder, self: Tensor, input2: Tensor, upper: bool = False
                        ) -> Tensor:
    """cholesky_solve(Tensor self, Tensor input2, bool upper=False) -> Tensor"""
    n = matrix_size(input2, -1, "cholesky_solve")
    out_dtype = g.out_dtype()
    factor = cast(g, input2, _F64)
    transposed = _mT(g, factor, rank(input2))
    # A = L L^T (or U^T U): solve with the lower factor first, then with its transpose.
    lower, upper_factor = (transposed, factor) if upper else (factor, transposed)
    y = _solve_triangular(g, lower, cast(g, self, _F64), n, lower=True, unit=False)
    return cast(g, _solve_triangular(g, upper_factor, y, n, lower=False, unit=False), out_dtype)


@register(aten.cholesky_inverse.default)
def aten_cholesky_inverse(g: GraphBuilder, self: Tensor, upper: bool = False) -> Tensor:
    """cholesky_inverse(Tensor self, bool upper=False) -> Tensor"""
    n = matrix_size(self, -1, "cholesky_inverse")
    out_dtype = g.out_dtype()
    if n == 0:
        return cast(g, self, out_dtype)
    r = rank(self)
    factor = cast(g, self, _F64)
    eye = g.const(np.eye(n), _F64)
    inverse = _solve_triangular(g, factor, eye, n, lower=not upper, unit=False)
    # (L L^T)^-1 = L^-T L^-1 and (U^T U)^-1 = U^-1 U^-T.
    pair = (inverse, _mT(g, inverse, r)) if upper else (_mT(g, inverse, r), inverse)
    return cast(g, g.op("MatMul", *pair), out_dtype)


# -- matrix_exp, householder_product ---------------------------------------------------------------
_TAYLOR_DEGREE = 18
# Bader, Blanes and Casas (2019), "Computing the matrix exponential with an optimized Taylor
# polynomial approximation": the degree-18 polynomial from 5 matrix products, its coefficients
# (rows: B_0..B_4 as combinations of I, A, A^2, A^3, A^6), and the largest float32 1-norm it
# serves. torch uses the same scheme for float32 input.
_T18_COEFFICIENTS = np.array([
    [0.0, -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04,
     0.0],
    [0.0, 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
     -6.37898194594723280150e-04],
    [-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
     -6.98210122488052056106e-03, 3.34975017086070470649e-05],
    [-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
     2.95552570429315521194e-02, -1.39180257516060693404e-05],
    [0.0, 0.0, -9.23364619367118555360e-02, -1.69364939002081722752e-02,
     -1.40086798182036094347e-05]])
_T18_THETA_FLOAT32 = 3.010066362817634


def _one_norm(g: GraphBuilder, a: Tensor) -> Tensor:
    """The matrix 1-norm (largest column sum of |a|), [..., 1, 1]."""
    return g.op("ReduceMax", g.op("ReduceSum", g.op("Abs", a), _ints(g, [-2]), keepdims=1),
                _ints(g, [-1]), keepdims=1)


def _squarings(g: GraphBuilder, a: Tensor, theta: float) -> Tensor:
    """s = max(0, ceil(log2(|a|_1 / theta))), [..., 1, 1] in a's dtype."""
    ratio = g.op("Div", _one_norm(g, a), g.const(theta, like=a))
    s = g.op("Ceil", g.op("Div", g.op("Log", ratio), g.const(float(np.log(2.0)), like=a)))
    s = g.op("Where", g.op("IsNaN", s), g.const(0.0, like=a), s)
    # Past 2^100 the result overflows float32 and double anyway; the clip bounds the loop.
    return g.op("Clip", s, g.const(0.0, like=a), g.const(1100.0, like=a))


# Up to this size, torch's CPU float32 matmul sums the products in index order without fused
# multiply-adds (measured bit for bit on 5x5); ONNX Runtime's MatMul rounds differently.
_MAX_ORDERED_MATMUL = 16


def _matmul_in_order(g: GraphBuilder, a: Tensor, b: Tensor, n: int) -> Tensor:
    """a @ b for [..., n, n] matrices, summing the products in index order."""
    if n > _MAX_ORDERED_MATMUL:
        return g.op("MatMul", a, b)
    total = g.op("Mul", _slice(g, a, -1, 0, 1), _slice(g, b, -2, 0, 1))
    for k in range(1, n):
        total = g.op("Add", total, g.op("Mul", _slice(g, a, -1, k, k + 1),
                                        _slice(g, b, -2, k, k + 1)))
    return total


def _t18(g: GraphBuilder, x: Tensor, n: int) -> Tensor:
    """The optimized degree-18 Taylor polynomial of x, in x's dtype and torch's order of
    operations (so float32 rounding follows torch's)."""
    a2 = _matmul_in_order(g, x, x, n)
    a3 = _matmul_in_order(g, x, a2, n)
    powers = [g.const(np.eye(n), x.dtype), x, a2, a3, _matmul_in_order(g, a3, a3, n)]
    combos = []
    for row in _T18_COEFFICIENTS:
        total = g.op("Mul", powers[0], g.const(float(row[0]), x.dtype))
        for power, coefficient in zip(powers[1:], row[1:]):
            total = g.op("Add", total, g.op("Mul", power, g.const(float(coefficient), x.dtype)))
        combos.append(total)
    a9 = g.op("Add", _matmul_in_order(g, combos[0], combos[4], n), combos[3])
    return g.op("Add", combos[1], _matmul_in_order(g, g.op("Add", combos[2], a9), a9, n))


@register(aten.linalg_matrix_exp.default)
def aten_linalg_matrix_exp(g: GraphBuilder, self: Tensor) -> Tensor:
    """linalg_matrix_exp(Tensor self) -> Tensor"""
    n = matrix_size(self, -1, "matrix_exp")
    out_dtype = g.out_dtype()
    if n == 0:
        return cast(g, self, out_dtype)
    if self.dtype == ir.DataType.FLOAT:
        # torch's float32 result carries float32 rounding amplified by the squarings, beyond
        # float32 tolerances for large norms: follow its algorithm step by step in float32.
        work = ir.DataType.FLOAT
        a = self
        squarings = _squarings(g, a, _T18_THETA_FLOAT32)
        series = _t18(g, g.op("Div", a, g.op("Pow", g.const(2.0, work), squarings)), n)
    else:
        # Scaling and squaring in double: A / 2^s has 1-norm <= 1, where the plain degree-18
        # Taylor polynomial is exact to double precision (remainder below 1/19! ~ 8e-18).
        work = _F64
        a = cast(g, self, work)
        squarings = _squarings(g, a, 1.0)
        x = g.op("Div", a, g.op("Pow", g.const(2.0, work), squarings))
        eye = g.const(np.eye(n), work)
        series = eye
        for k in range(_TAYLOR_DEGREE, 0, -1):
            series = g.op("Add", eye, g.op("Div", g.op("MatMul", x, series),
                                           g.const(float(k), work)))
    # One loop over the most squarings any matrix needs; each matrix squares only s times.
    flat = g.op("Reshape", squarings, _ints(g, [-1]))
    count = g.op("Cast", g.op("ReduceMax", g.op("Concat", flat, g.const([0.0], work), axis=0),
                              keepdims=0), to=_I64)
    body = g.subgraph([], "matrix_exp_squaring")
    iteration = ir.Value(name=g.unique_name("squaring_iteration"),
                         type=ir.TensorType(_I64), shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name("squaring_condition"),
                         type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    current = ir.Value(name=g.unique_name("squaring_value"), type=ir.TensorType(work))
    body.graph.inputs.extend([iteration, condition, current])
    is_active = body.op("Less", body.op("Cast", iteration, to=work), squarings)
    product = (_matmul_in_order(body, current, current, n) if work == ir.DataType.FLOAT
               else body.op("MatMul", current, current))
    squared = body.op("Where", is_active, product, current)
    keep_going = body.op("Identity", condition)
    body.graph.outputs.extend([keep_going, squared])
    result = g.op("Loop", count, g.const(True), series, body=body.graph)
    result.dtype = work
    return cast(g, result, out_dtype)


@register(aten.linalg_householder_product.default)
def aten_linalg_householder_product(g: GraphBuilder, input: Tensor, tau: Tensor) -> Tensor:
    """linalg_householder_product(Tensor input, Tensor tau) -> Tensor"""
    m, n = matrix_size(input, -2, "householder_product"), matrix_size(input, -1, "householder_product")
    k = matrix_size(tau, -1, "householder_product")
    out_dtype = g.out_dtype()
    a, t = cast(g, input, _F64), cast(g, tau, _F64)
    # Q = H_0 H_1 ... H_{k-1} I[:, :n], applied from the last reflector, as LAPACK orgqr.
    q = _broadcast_batch(g, g.const(np.eye(m, n), _F64), a)
    rows = np.arange(m).reshape(m, 1)
    for i in range(k - 1, -1, -1):
        v = g.op("Where", _mask(g, rows > i), _slice(g, a, -1, i, i + 1),
                 g.const((rows == i).astype(np.float64), _F64))             # [..., m, 1]
        scale = g.op("Unsqueeze", _slice(g, t, -1, i, i + 1), _ints(g, [-1]))  # [..., 1, 1]
        w = g.op("MatMul", _column_to_row(g, v), q)                         # [..., 1, n]
        q = g.op("Sub", q, g.op("Mul", g.op("Mul", scale, v), w))
    return cast(g, q, out_dtype)
