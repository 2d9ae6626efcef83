"""Translations for orthogonal decompositions built from ONNX primitives: Householder QR
(geqrf, linalg_qr, ormqr), symmetric eigenvalues (cyclic Jacobi), singular values
(one-sided Jacobi) and the pseudo-inverse built on them.

ONNX has no decomposition ops. Every algorithm here needs the matrix sizes at export time,
runs in double, and is an ONNX Loop whose body acts on the whole batch (..., m, n) at once,
so node counts do not grow with the matrix size. The Jacobi methods rotate n/2 disjoint
index pairs per iteration (round-robin ordering), one sweep being n-1 iterations, and stop
when the whole batch has converged.

Only values that are unique are produced: eigenvalues, singular values, pinv, and QR with
LAPACK's own sign rule (geqrf's Householder vectors). Eigenvectors and singular vectors are
unique only up to sign, and LAPACK's signs come out of its tridiagonal/bidiagonal QR
iterations, which these algorithms do not reproduce: _linalg_eigh and _linalg_svd raise
TranslationError unless nothing reads the vectors (as in the decompositions of matrix_rank,
cond and the nuclear norm).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir
import torch

from onnxport import _dtypes
from onnxport.errors import TranslationError
from onnxport.ops._helpers import cast, rank
from onnxport.translate import GraphBuilder, Tensor, aten, register

_F64 = ir.DataType.DOUBLE
_I64 = ir.DataType.INT64
_BOOL = ir.DataType.BOOL
# Jacobi stops once every pair is orthogonal (or the off-diagonal part is small) to this
# relative level: above double rounding, and far below what float32/float64 outputs resolve
# (the eigen/singular values' error from stopping is of its square).
_JACOBI_TOL = 1e-14
_MAX_SWEEPS = 30


# -- shared pieces -------------------------------------------------------------------------------
def _matrix_dims(A: Tensor, what: str) -> tuple[int, int]:
    """The static (m, n) of a (..., m, n) input."""
    shape = A.shape
    if shape is None or len(shape) < 2:
        raise TranslationError(f"{what} needs an input of known rank >= 2")
    m, n = shape[-2], shape[-1]
    if not isinstance(m, int) or not isinstance(n, int):
        raise TranslationError(f"{what} is unrolled over the matrix size, which must be static; "
                               f"got {m}x{n}")
    return m, n


def _has_empty_batch(A: Tensor) -> bool:
    return A.shape is not None and any(isinstance(d, int) and d == 0 for d in A.shape[:-2])


def _zeros(g: GraphBuilder, shape: Tensor, dtype: ir.DataType) -> Tensor:
    return g.op("ConstantOfShape", shape, value=ir.tensor(np.zeros(1, dtype=dtype.numpy())))


def _batch_zeros(g: GraphBuilder, A: Tensor, tail: Sequence[int], dtype: ir.DataType) -> Tensor:
    """Zeros of shape A.shape[:-2] + tail."""
    shape = g.op("Concat", g.op("Shape", A, end=-2), g.const(list(tail), _I64), axis=0)
    return _zeros(g, shape, dtype)


def _batch_eye(g: GraphBuilder, A: Tensor, rows: int, cols: int) -> Tensor:
    """The rows x cols identity in double, broadcast over A's batch dims."""
    # Add rather than Expand: ONNX Runtime's Expand rejects an empty batch.
    return g.op("Add", _batch_zeros(g, A, [rows, cols], _F64), g.const(np.eye(rows, cols), _F64))


def _transpose(g: GraphBuilder, x: Tensor, r: int) -> Tensor:
    """The matrix transpose of a rank-r value."""
    return g.op("Transpose", x, perm=[*range(r - 2), r - 1, r - 2])


def _owned(sub: GraphBuilder, value: Tensor) -> Tensor:
    """`value` as an output of `sub`'s graph: an Identity when it is not produced there."""
    producer = value.producer()
    if producer is not None and producer.graph is sub.graph:
        return value
    return sub.op("Identity", value)


Body = Callable[[GraphBuilder, Tensor, list[Tensor]], tuple[Tensor | None, list[Tensor]]]


def _loop(g: GraphBuilder, name: str, trips: int, initial: Sequence[Tensor],
          body: Body) -> list[Tensor]:
    """An ONNX Loop of at most `trips` iterations carrying `initial`.

    `body(sub, i, state)` builds the body in `sub` from the iteration number `i` (int64
    scalar) and returns (continue condition or None for "always", new state).
    """
    sub = g.subgraph([], name)
    iteration = ir.Value(name=g.unique_name(f"{name}_i"), type=ir.TensorType(_I64),
                         shape=ir.Shape([]))
    condition = ir.Value(name=g.unique_name(f"{name}_cond"), type=ir.TensorType(_BOOL),
                         shape=ir.Shape([]))
    # Every state here is double (the algorithms' working precision).
    state_in = [ir.Value(name=g.unique_name(f"{name}_state"), type=ir.TensorType(_F64))
                for _ in initial]
    sub.graph.inputs.extend([iteration, condition, *state_in])
    again, state_out = body(sub, iteration, state_in)
    if again is None:
        again = sub.const(True)
    sub.graph.outputs.extend([_owned(sub, again), *(_owned(sub, v) for v in state_out)])
    outs = g.op("Loop", g.const(trips, _I64), g.const(True), *initial, body=sub.graph,
                outputs=len(initial))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    for out in outs:
        out.dtype = _F64
    return outs


def _guarded(g: GraphBuilder, A: Tensor, core: Callable[[Tensor], list[Tensor]]) -> list[Tensor]:
    """core(A), run so that ONNX Runtime never meets an empty batch inside a Loop.

    ONNX Runtime's reductions and broadcasts fail on an empty batch inside a Loop body. A
    static empty batch is answered before any Loop; with a dynamic batch, the batch dims are
    flattened to one and a zero matrix is appended, and the extra results are dropped again.
    Every result of `core` must be batched like its input.
    """
    shape = A.shape
    if shape is None or all(isinstance(d, int) for d in shape[:-2]):
        return core(A)
    m, n = shape[-2], shape[-1]
    flat = g.op("Reshape", A, g.const([-1, m, n], _I64))
    dtype = A.dtype if A.dtype is not None else _F64
    padded = g.op("Concat", flat, _zeros(g, g.const([1, m, n], _I64), dtype), axis=0)
    padded.shape = ir.Shape([None, m, n])
    count = g.op("Shape", flat, start=0, end=1)
    batch = g.op("Shape", A, end=-2)
    results = []
    for out in core(padded):
        kept = g.op("Slice", out, g.const([0], _I64), count, g.const([0], _I64))
        # allowzero: a batch dim of 0 is a size here, not "copy the input's dim".
        results.append(g.op("Reshape", kept,
                            g.op("Concat", batch, g.op("Shape", out, start=1), axis=0),
                            allowzero=1))
    return results


def _any_positive(g: GraphBuilder, x: Tensor) -> Tensor:
    """Whether any element of double `x` is > 0, as a bool scalar (False when empty)."""
    flat = g.op("Concat", g.op("Reshape", x, g.const([-1], _I64)), g.const([0.0], _F64), axis=0)
    return g.op("Greater", g.op("ReduceMax", flat, keepdims=0), g.const(0.0, _F64))


def _jacobi_rotation(g: GraphBuilder, diff: Tensor, off: Tensor) -> tuple[Tensor, Tensor]:
    """(c, s) of the Jacobi rotation that annihilates `off` given `diff` of the two diagonal
    terms: t = s/c is the smaller root of t^2 + 2 zeta t - 1 = 0 with zeta = diff / (2 off),
    t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)) with sign(0) = +1, and t = 0 (no rotation)
    where `off` is already 0."""
    one = g.const(1.0, _F64)
    zeta = g.op("Div", diff, g.op("Mul", _safe(g, off), g.const(2.0, _F64)))
    sign = g.op("Where", g.op("Less", zeta, g.const(0.0, _F64)), g.const(-1.0, _F64), one)
    root = g.op("Sqrt", g.op("Add", g.op("Mul", zeta, zeta), one))
    t = g.op("Div", sign, g.op("Add", g.op("Abs", zeta), root))
    t = g.op("Where", g.op("Equal", off, g.const(0.0, _F64)), g.const(0.0, _F64), t)
    c = g.op("Reciprocal", g.op("Sqrt", g.op("Add", g.op("Mul", t, t), one)))
    return c, g.op("Mul", t, c)


def _safe(g: GraphBuilder, x: Tensor) -> Tensor:
    """`x` with zeros replaced by ones (for divisions whose result is then discarded)."""
    return g.op("Where", g.op("Equal", x, g.const(0.0, _F64)), g.const(1.0, _F64), x)


def _round_robin(num: int) -> tuple[np.ndarray, np.ndarray]:
    """Orderings of `num` (even) indices for the num-1 rounds of a sweep, and their inverses.

    Round r's ordering lists p_0..p_{h-1} then q_0..q_{h-1}: h = num/2 disjoint pairs, and
    every pair of indices meets exactly once per sweep (the circle method).
    """
    half = num // 2
    others = list(range(1, num))
    perms, inverses = [], []
    for r in range(num - 1):
        ring = [0, *others[r:], *others[:r]]
        perm = ring[:half] + [ring[num - 1 - i] for i in range(half)]
        perms.append(perm)
        inverses.append(list(np.argsort(perm)))
    return np.asarray(perms, dtype=np.int64), np.asarray(inverses, dtype=np.int64)


def _pad_even(g: GraphBuilder, x: Tensor, r: int, *, rows: bool, cols: bool) -> Tensor:
    """`x` with one zero row and/or column appended (a decoupled index for odd sizes)."""
    pads = [0] * (2 * r)
    if rows:
        pads[2 * r - 2] = 1
    if cols:
        pads[2 * r - 1] = 1
    return g.op("Pad", x, g.const(pads, _I64), g.const(0.0, _F64))


# -- Householder QR ------------------------------------------------------------------------------
def _geqrf(g: GraphBuilder, a: Tensor, m: int, n: int) -> tuple[Tensor, Tensor]:
    """LAPACK geqrf on a double (..., m, n): R with the Householder vectors below it, and tau.

    Column k: alpha = A[k,k], x = A[k+1:,k]; beta = -sign(alpha) ||(alpha, x)|| with
    sign(0) = +; tau = (beta - alpha)/beta, v = x/(alpha - beta); when x == 0, tau = 0 and
    beta = alpha (dlarfg). H = I - tau [1; v][1; v]^T then acts on the trailing columns.
    """
    k = min(m, n)
    taus = _batch_zeros(g, a, [k], _F64)
    if k == 0 or _has_empty_batch(a):
        # Nothing to reflect; ONNX Runtime's broadcasting also fails on empty batches in a Loop.
        return a, taus
    rows = np.arange(m, dtype=np.int64)
    cols = np.arange(n, dtype=np.int64)

    def body(sub: GraphBuilder, j: Tensor, state: list[Tensor]) -> tuple[None, list[Tensor]]:
        A, tau_all = state
        zero, one = sub.const(0.0, _F64), sub.const(1.0, _F64)
        column = sub.op("Gather", A, j, axis=-1)                              # (..., m)
        alpha = sub.op("Gather", column, j, axis=-1)                          # (...)
        row_ids = sub.const(rows, _I64)
        below = sub.op("Greater", row_ids, j)
        at = sub.op("Equal", row_ids, j)
        x = sub.op("Where", below, column, zero)
        x_norm2 = sub.op("ReduceSumSquare", x, sub.const([-1], _I64), keepdims=0)
        norm = sub.op("Sqrt", sub.op("Add", sub.op("Mul", alpha, alpha), x_norm2))
        beta = sub.op("Where", sub.op("Less", alpha, zero), norm, sub.op("Neg", norm))
        is_trivial = sub.op("Equal", x_norm2, zero)
        beta = sub.op("Where", is_trivial, alpha, beta)
        tau = sub.op("Where", is_trivial, zero,
                     sub.op("Div", sub.op("Sub", beta, alpha), _safe(sub, beta)))
        scale = sub.op("Where", is_trivial, one, sub.op("Sub", alpha, beta))
        v = sub.op("Div", x, sub.op("Unsqueeze", scale, sub.const([-1], _I64)))  # 0 at rows <= j
        v_full = sub.op("Add", v, sub.op("Cast", at, to=_F64))
        w = sub.op("MatMul", sub.op("Unsqueeze", v_full, sub.const([-2], _I64)), A)  # (..., 1, n)
        update = sub.op("Mul", sub.op("Mul", sub.op("Unsqueeze", v_full, sub.const([-1], _I64)), w),
                        sub.op("Unsqueeze", tau, sub.const([-1, -2], _I64)))
        col_ids = sub.const(cols, _I64)
        reflected = sub.op("Where", sub.op("Greater", col_ids, j), sub.op("Sub", A, update), A)
        packed = sub.op("Where", at, sub.op("Unsqueeze", beta, sub.const([-1], _I64)),
                        sub.op("Where", below, v, column))
        A = sub.op("Where", sub.op("Equal", col_ids, j),
                   sub.op("Unsqueeze", packed, sub.const([-1], _I64)), reflected)
        tau_all = sub.op("Where", sub.op("Equal", sub.const(np.arange(k, dtype=np.int64), _I64), j),
                         sub.op("Unsqueeze", tau, sub.const([-1], _I64)), tau_all)
        return None, [A, tau_all]

    packed, taus = _loop(g, "geqrf", k, [a, taus], body)
    return packed, taus


def _apply_reflectors(g: GraphBuilder, V: Tensor, tau: Tensor, C: Tensor, mn: int, r: int, *,
                      left: bool, transpose: bool) -> Tensor:
    """Q C, Q^T C, C Q or C Q^T for Q = H_0 ... H_{r-1} from geqrf's packed vectors (double);
    V is (..., mn, >= r), tau (..., r).

    H_j = I - tau_j v_j v_j^T with v_j = e_j + V[j+1:, j] (the reflectors of ormqr).
    """
    if r == 0:
        return C
    # Q C = H_0 (H_1 (... H_{r-1} C)): the last reflector acts first; Q^T C reverses that.
    is_descending = left != transpose
    rows = np.arange(mn, dtype=np.int64)

    def body(sub: GraphBuilder, i: Tensor, state: list[Tensor]) -> tuple[None, list[Tensor]]:
        (out,) = state
        j = sub.op("Sub", sub.const(r - 1, _I64), i) if is_descending else i
        row_ids = sub.const(rows, _I64)
        v = sub.op("Where", sub.op("Greater", row_ids, j), sub.op("Gather", V, j, axis=-1),
                   sub.const(0.0, _F64))
        v = sub.op("Add", v, sub.op("Cast", sub.op("Equal", row_ids, j), to=_F64))
        t = sub.op("Unsqueeze", sub.op("Gather", tau, j, axis=-1), sub.const([-1, -2], _I64))
        if left:
            w = sub.op("MatMul", sub.op("Unsqueeze", v, sub.const([-2], _I64)), out)
            update = sub.op("Mul", sub.op("Unsqueeze", v, sub.const([-1], _I64)), w)
        else:
            w = sub.op("MatMul", out, sub.op("Unsqueeze", v, sub.const([-1], _I64)))
            update = sub.op("Mul", w, sub.op("Unsqueeze", v, sub.const([-2], _I64)))
        return None, [sub.op("Sub", out, sub.op("Mul", t, update))]

    (out,) = _loop(g, "householder", r, [C], body)
    return out


def _upper_mask(g: GraphBuilder, rows: int, cols: int) -> Tensor:
    return g.const(np.triu(np.ones((rows, cols), dtype=bool)), _BOOL)


@register(aten.geqrf.default)
def aten_geqrf(g: GraphBuilder, self: Tensor) -> tuple[Tensor, Tensor]:
    """geqrf(Tensor self) -> (Tensor a, Tensor tau)"""
    m, n = _matrix_dims(self, "geqrf")
    packed, tau = _guarded(g, self, lambda a: list(_geqrf(g, cast(g, a, _F64), m, n)))
    return cast(g, packed, g.out_dtype(0)), cast(g, tau, g.out_dtype(1))


@register(aten.linalg_qr.default)
def aten_linalg_qr(g: GraphBuilder, A: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:
    """linalg_qr(Tensor A, str mode="reduced") -> (Tensor Q, Tensor R)"""
    m, n = _matrix_dims(A, "linalg_qr")
    k = min(m, n)
    r_rows = m if mode == "complete" else k

    def core(a: Tensor) -> list[Tensor]:
        packed, tau = _geqrf(g, cast(g, a, _F64), m, n)
        R = g.op("Slice", packed, g.const([0], _I64), g.const([r_rows], _I64),
                 g.const([-2], _I64))
        R = g.op("Where", _upper_mask(g, r_rows, n), R, g.const(0.0, _F64))
        if mode == "r":
            return [R]
        return [R, _apply_reflectors(g, packed, tau, _batch_eye(g, a, m, r_rows), m, k,
                                     left=True, transpose=False)]

    R, *rest = _guarded(g, A, core)
    # torch returns an empty Q in mode "r".
    Q = rest[0] if rest else g.const(np.zeros(0), g.out_dtype(0))
    return cast(g, Q, g.out_dtype(0)), cast(g, R, g.out_dtype(1))


@register(aten.ormqr.default)
def aten_ormqr(g: GraphBuilder, self: Tensor, input2: Tensor, input3: Tensor, left: bool = True,
               transpose: bool = False) -> Tensor:
    """ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor"""
    mn, _ = _matrix_dims(self, "ormqr")
    _matrix_dims(input3, "ormqr")
    r = input2.shape[-1] if input2.shape is not None and len(input2.shape) else None
    if not isinstance(r, int):
        raise TranslationError("ormqr needs a static number of reflectors")
    if _has_empty_batch(input3):
        return input3
    out = _apply_reflectors(g, cast(g, self, _F64), cast(g, input2, _F64), cast(g, input3, _F64),
                            mn, r, left=left, transpose=transpose)
    return cast(g, out, g.out_dtype())


# -- symmetric eigenvalues: cyclic Jacobi ----------------------------------------------------------
def _symmetric_from(g: GraphBuilder, a: Tensor, n: int, r: int, uplo: str) -> Tensor:
    """The symmetric matrix that the `uplo` triangle of double `a` describes (LAPACK reads
    only that triangle)."""
    lower = uplo.upper() == "L"
    keep = np.tril(np.ones((n, n), dtype=bool)) if lower else np.triu(np.ones((n, n), dtype=bool))
    mirror = np.triu(np.ones((n, n), dtype=bool), 1) if lower else np.tril(np.ones((n, n), dtype=bool), -1)
    return g.op("Where", g.const(keep, _BOOL), a,
                g.op("Where", g.const(mirror, _BOOL), _transpose(g, a, r), g.const(0.0, _F64)))


def _jacobi_eigenvalues(g: GraphBuilder, s: Tensor, n: int, r: int) -> Tensor:
    """Eigenvalues (unsorted, (..., n)) of the symmetric double (..., n, n) `s`."""
    return _jacobi_eigh(g, s, n, r, vectors=False)[0]


def _jacobi_eigh(g: GraphBuilder, s: Tensor, n: int, r: int,
                 vectors: bool) -> tuple[Tensor, Tensor | None]:
    """Eigenvalues (unsorted, (..., n)) of the symmetric double (..., n, n) `s`, and with
    `vectors` the eigenvectors as columns in the same order (signs arbitrary: only functions
    of the whole eigenspace, such as V f(L) V^T, are unique).

    Each iteration applies n/2 disjoint rotations J (p_i, q_i) as A <- J^T A J, each
    annihilating A[p_i, q_i] (Golub & Van Loan's sym.schur2), until the off-diagonal part is
    below _JACOBI_TOL of the Frobenius norm; V <- V J accumulates them.
    """
    num = n + n % 2
    if num != n:
        # A zero row and column: a decoupled index that no rotation touches.
        s = _pad_even(g, s, r, rows=True, cols=True)
    half = num // 2
    perms, inverses = _round_robin(num)
    eye = np.eye(num)
    fro2 = g.op("ReduceSumSquare", s, g.const([-2, -1], _I64), keepdims=0)
    limit = g.op("Mul", fro2, g.const(_JACOBI_TOL ** 2, _F64))

    def body(sub: GraphBuilder, i: Tensor, state: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        A = state[0]
        round_ = sub.op("Mod", i, sub.const(num - 1, _I64))
        perm = sub.op("Gather", sub.const(perms, _I64), round_, axis=0)
        inverse = sub.op("Gather", sub.const(inverses, _I64), round_, axis=0)
        B = sub.op("Gather", sub.op("Gather", A, perm, axis=-1), perm, axis=-2)
        diag = sub.op("ReduceSum", sub.op("Mul", B, sub.const(eye, _F64)),
                      sub.const([-1], _I64), keepdims=0)
        app = sub.op("Slice", diag, sub.const([0], _I64), sub.const([half], _I64),
                     sub.const([-1], _I64))
        aqq = sub.op("Slice", diag, sub.const([half], _I64), sub.const([num], _I64),
                     sub.const([-1], _I64))
        block = sub.op("Slice", B, sub.const([0, half], _I64), sub.const([half, num], _I64),
                       sub.const([-2, -1], _I64))
        eye_h = sub.const(np.eye(half), _F64)
        apq = sub.op("ReduceSum", sub.op("Mul", block, eye_h), sub.const([-1], _I64), keepdims=0)
        c, sn = _jacobi_rotation(sub, sub.op("Sub", aqq, app), apq)
        c_diag = sub.op("Mul", sub.op("Unsqueeze", c, sub.const([-1], _I64)), eye_h)
        s_diag = sub.op("Mul", sub.op("Unsqueeze", sn, sub.const([-1], _I64)), eye_h)
        # J = [[C, S], [-S, C]] in the round's ordering; J^T = [[C, -S], [S, C]].
        J = sub.op("Concat", sub.op("Concat", c_diag, s_diag, axis=-1),
                   sub.op("Concat", sub.op("Neg", s_diag), c_diag, axis=-1), axis=-2)
        JT = sub.op("Concat", sub.op("Concat", c_diag, sub.op("Neg", s_diag), axis=-1),
                    sub.op("Concat", s_diag, c_diag, axis=-1), axis=-2)
        B = sub.op("MatMul", sub.op("MatMul", JT, B), J)
        A = sub.op("Gather", sub.op("Gather", B, inverse, axis=-1), inverse, axis=-2)
        off2 = sub.op("ReduceSumSquare", sub.op("Mul", A, sub.const(1.0 - eye, _F64)),
                      sub.const([-2, -1], _I64), keepdims=0)
        new = [A]
        if vectors:
            V = sub.op("MatMul", sub.op("Gather", state[1], perm, axis=-1), J)
            new.append(sub.op("Gather", V, inverse, axis=-1))
        return _any_positive(sub, sub.op("Sub", off2, limit)), new

    initial = [s, g.op("Add", g.op("Mul", s, g.const(0.0, _F64)), g.const(eye, _F64))] \
        if vectors else [s]
    out = _loop(g, "jacobi_eigh", _MAX_SWEEPS * (num - 1), initial, body)
    A = out[0]
    diag = g.op("ReduceSum", g.op("Mul", A, g.const(eye, _F64)), g.const([-1], _I64), keepdims=0)
    V = out[1] if vectors else None
    if num != n:
        diag = g.op("Slice", diag, g.const([0], _I64), g.const([n], _I64), g.const([-1], _I64))
        if V is not None:
            V = g.op("Slice", V, g.const([0, 0], _I64), g.const([n, n], _I64),
                     g.const([-2, -1], _I64))
    return diag, V


def _sort(g: GraphBuilder, x: Tensor, n: int, *, descending: bool) -> Tensor:
    values, _ = g.op("TopK", x, g.const([n], _I64), axis=-1, largest=int(descending), sorted=1,
                     outputs=2)
    return values


def _eigvalsh(g: GraphBuilder, A: Tensor, uplo: str) -> Tensor:
    """Ascending eigenvalues (double, (..., n)) of the symmetric matrix A's `uplo` triangle holds."""
    m, n = _matrix_dims(A, "eigvalsh")
    if m != n:
        raise TranslationError(f"eigvalsh of a non-square {m}x{n} matrix")
    if n == 0 or _has_empty_batch(A):
        return _batch_zeros(g, A, [n], _F64)
    if n == 1:
        return g.op("Reshape", cast(g, A, _F64), g.op("Shape", A, end=-1))

    def core(a: Tensor) -> list[Tensor]:
        s = _symmetric_from(g, cast(g, a, _F64), n, rank(a), uplo)
        return [_sort(g, _jacobi_eigenvalues(g, s, n, rank(a)), n, descending=False)]

    return _guarded(g, A, core)[0]


@register(aten.linalg_eigvalsh.default)
def aten_linalg_eigvalsh(g: GraphBuilder, self: Tensor, UPLO: str = "L") -> Tensor:
    """linalg_eigvalsh(Tensor self, str UPLO="L") -> Tensor"""
    # Translated whole: its decomposition asks _linalg_eigh for eigenvectors it then drops.
    return cast(g, _eigvalsh(g, self, UPLO), g.out_dtype())


def _unread_zeros(g: GraphBuilder, A: Tensor, index: int, tail: Sequence[int]) -> Tensor:
    """A zero stand-in of the right shape for output `index`, which nothing reads."""
    return _batch_zeros(g, A, tail, g.out_dtype(index))


@register(aten._linalg_eigh.default)
def aten__linalg_eigh(g: GraphBuilder, A: Tensor, UPLO: str = "L",
                      compute_v: bool = True) -> tuple[Tensor, Tensor]:
    """_linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)"""
    _, n = _matrix_dims(A, "_linalg_eigh")
    if not compute_v:
        # Without eigenvectors torch returns an empty tensor in their place.
        vectors = g.const(np.zeros(0), g.out_dtype(1))
    elif not g.out_is_read(1):
        vectors = _unread_zeros(g, A, 1, [n, n])
    else:
        raise TranslationError(
            "eigenvectors are unique only up to sign, and LAPACK's signs come from its "
            "tridiagonal QR iterations, which the Jacobi method does not reproduce")
    return cast(g, _eigvalsh(g, A, UPLO), g.out_dtype(0)), vectors


# -- singular values: one-sided Jacobi -------------------------------------------------------------
def _one_sided_jacobi(g: GraphBuilder, W: Tensor, m: int, n: int, r: int,
                      has_extra: bool) -> Tensor:
    """Rotate the n columns of double W (..., m + extra, n) until the top m rows' columns are
    mutually orthogonal (Hestenes); the extra rows (e.g. an identity, giving V) follow the
    same rotations. Returns the rotated W.
    """
    num = n + n % 2
    if num != n:
        # A zero column: a decoupled index that no rotation touches.
        W = _pad_even(g, W, r, rows=False, cols=True)
    half = num // 2
    perms, inverses = _round_robin(num)
    off_diagonal = 1.0 - np.eye(num)

    def body(sub: GraphBuilder, i: Tensor, state: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        (X,) = state
        round_ = sub.op("Mod", i, sub.const(num - 1, _I64))
        perm = sub.op("Gather", sub.const(perms, _I64), round_, axis=0)
        inverse = sub.op("Gather", sub.const(inverses, _I64), round_, axis=0)
        X = sub.op("Gather", X, perm, axis=-1)
        XP = sub.op("Slice", X, sub.const([0], _I64), sub.const([half], _I64), sub.const([-1], _I64))
        XQ = sub.op("Slice", X, sub.const([half], _I64), sub.const([num], _I64),
                    sub.const([-1], _I64))
        top_p, top_q = XP, XQ
        if has_extra:
            top_p = sub.op("Slice", XP, sub.const([0], _I64), sub.const([m], _I64),
                           sub.const([-2], _I64))
            top_q = sub.op("Slice", XQ, sub.const([0], _I64), sub.const([m], _I64),
                           sub.const([-2], _I64))
        axis = sub.const([-2], _I64)
        alpha = sub.op("ReduceSumSquare", top_p, axis, keepdims=0)
        beta = sub.op("ReduceSumSquare", top_q, axis, keepdims=0)
        gamma = sub.op("ReduceSum", sub.op("Mul", top_p, top_q), axis, keepdims=0)
        # Columns p' = c p - s q, q' = s p + c q are orthogonal when
        # t = s/c solves t^2 + 2 zeta t - 1 = 0 with zeta = (beta - alpha) / (2 gamma).
        c, sn = _jacobi_rotation(sub, sub.op("Sub", beta, alpha), gamma)
        c = sub.op("Unsqueeze", c, axis)
        sn = sub.op("Unsqueeze", sn, axis)
        new_p = sub.op("Sub", sub.op("Mul", c, XP), sub.op("Mul", sn, XQ))
        new_q = sub.op("Add", sub.op("Mul", sn, XP), sub.op("Mul", c, XQ))
        X = sub.op("Gather", sub.op("Concat", new_p, new_q, axis=-1), inverse, axis=-1)
        # Converged when |<x_i, x_j>| <= tol ||x_i|| ||x_j|| for every pair.
        top = X if not has_extra else sub.op("Slice", X, sub.const([0], _I64),
                                             sub.const([m], _I64), sub.const([-2], _I64))
        gram = sub.op("MatMul", _transpose(sub, top, r), top)
        norms = sub.op("Sqrt", sub.op("ReduceSum", sub.op("Mul", gram, sub.const(np.eye(num), _F64)),
                                      sub.const([-1], _I64), keepdims=0))
        bound = sub.op("Mul", sub.op("Mul", sub.op("Unsqueeze", norms, sub.const([-1], _I64)),
                                     sub.op("Unsqueeze", norms, sub.const([-2], _I64))),
                       sub.const(_JACOBI_TOL, _F64))
        excess = sub.op("Mul", sub.op("Sub", sub.op("Abs", gram), bound),
                        sub.const(off_diagonal, _F64))
        return _any_positive(sub, excess), [X]

    (X,) = _loop(g, "jacobi_svd", _MAX_SWEEPS * (num - 1), [W], body)
    if num != n:
        X = g.op("Slice", X, g.const([0], _I64), g.const([n], _I64), g.const([-1], _I64))
    return X


def _tall(g: GraphBuilder, a: Tensor, m: int, n: int, r: int) -> tuple[Tensor, int, int, bool]:
    """`a` or its transpose, whichever has at least as many rows as columns."""
    if m >= n:
        return a, m, n, False
    return _transpose(g, a, r), n, m, True


def _singular_values(g: GraphBuilder, A: Tensor) -> Tensor:
    """Descending singular values (double, (..., min(m, n))) of A."""
    m, n = _matrix_dims(A, "singular values")
    k = min(m, n)
    if k == 0 or _has_empty_batch(A):
        return _batch_zeros(g, A, [k], _F64)
    a, rows, cols, _ = _tall(g, cast(g, A, _F64), m, n, rank(A))
    if cols == 1:
        return g.op("Sqrt", g.op("ReduceSumSquare", a, g.const([-2], _I64), keepdims=0))

    def core(a: Tensor) -> list[Tensor]:
        tall, rows, cols, _ = _tall(g, cast(g, a, _F64), m, n, rank(a))
        X = _one_sided_jacobi(g, tall, rows, cols, rank(a), has_extra=False)
        s = g.op("Sqrt", g.op("ReduceSumSquare", X, g.const([-2], _I64), keepdims=0))
        return [_sort(g, s, cols, descending=True)]

    return _guarded(g, A, core)[0]


@register(aten.linalg_svdvals.default)
def aten_linalg_svdvals(g: GraphBuilder, A: Tensor, *, driver: str | None = None) -> Tensor:
    """linalg_svdvals(Tensor A, *, str? driver=None) -> Tensor"""
    # Translated whole: its decomposition asks _linalg_svd for singular vectors it then drops.
    # The driver picks a LAPACK routine; the values are the same.
    return cast(g, _singular_values(g, A), g.out_dtype())


@register(aten._linalg_svd.default)
def aten__linalg_svd(g: GraphBuilder, A: Tensor, full_matrices: bool = False,
                     compute_uv: bool = True, *,
                     driver: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) -> (Tensor U, Tensor S, Tensor Vh)"""
    m, n = _matrix_dims(A, "_linalg_svd")
    k = min(m, n)
    if not compute_uv:
        # Without singular vectors torch returns empty tensors in their place.
        U = g.const(np.zeros(0), g.out_dtype(0))
        Vh = g.const(np.zeros(0), g.out_dtype(2))
    elif not g.out_is_read(0) and not g.out_is_read(2):
        U = _unread_zeros(g, A, 0, [m, m if full_matrices else k])
        Vh = _unread_zeros(g, A, 2, [n if full_matrices else k, n])
    else:
        raise TranslationError(
            "singular vectors are unique only up to sign, and LAPACK's signs come from its "
            "bidiagonal QR iterations, which the Jacobi method does not reproduce")
    # The driver picks a LAPACK routine; the values are the same.
    return U, cast(g, _singular_values(g, A), g.out_dtype(1)), Vh


# -- functions of a whole eigenspace or singular subspace: unique whatever the signs ----------
@register(aten.linalg_matrix_sqrth.default)  # torch >= 2.14
def aten_linalg_matrix_sqrth(g: GraphBuilder, self: Tensor) -> Tensor:
    """linalg_matrix_sqrth(Tensor self) -> Tensor"""
    # torch: V diag(sqrt(max(L, 0))) V^T from eigh of the lower triangle.
    m, n = _matrix_dims(self, "linalg_matrix_sqrth")
    if m != n:
        raise TranslationError(f"matrix_sqrth of a non-square {m}x{n} matrix")
    if n == 0 or _has_empty_batch(self):
        return _batch_zeros(g, self, [n, n], g.out_dtype())

    def core(A: Tensor) -> list[Tensor]:
        r = rank(A)
        sym = _symmetric_from(g, cast(g, A, _F64), n, r, "L")
        values, V = _jacobi_eigh(g, sym, n, r, vectors=True)
        roots = g.op("Sqrt", g.op("Max", values, g.const(0.0, _F64)))
        scaled = g.op("Mul", V, g.op("Unsqueeze", roots, g.const([-2], _I64)))
        return [g.op("MatMul", scaled, _transpose(g, V, r))]

    return cast(g, _guarded(g, self, core)[0], g.out_dtype())


@register(aten.linalg_polar.default)  # torch >= 2.14
def aten_linalg_polar(g: GraphBuilder, A: Tensor) -> tuple[Tensor, Tensor]:
    """linalg_polar(Tensor A) -> (Tensor U, Tensor H)"""
    # A = U H with A V = X = W S (one-sided Jacobi): U = X S^-1 V^T, H = V S V^T. Both are
    # unique for a full-rank A whatever the signs of the singular vectors.
    m, n = _matrix_dims(A, "linalg_polar")
    if m < n:
        raise TranslationError(f"linalg_polar needs rows >= columns, got a {m}x{n} matrix")
    if n == 0 or _has_empty_batch(A):
        return (_batch_zeros(g, A, [m, n], g.out_dtype(0)),
                _batch_zeros(g, A, [n, n], g.out_dtype(1)))

    def core(A: Tensor) -> list[Tensor]:
        r = rank(A)
        W = g.op("Concat", cast(g, A, _F64), _batch_eye(g, A, n, n), axis=-2)
        W = _one_sided_jacobi(g, W, m, n, r, has_extra=True)
        X = g.op("Slice", W, g.const([0], _I64), g.const([m], _I64), g.const([-2], _I64))
        V = g.op("Slice", W, g.const([m], _I64), g.const([m + n], _I64), g.const([-2], _I64))
        s = g.op("Sqrt", g.op("ReduceSumSquare", X, g.const([-2], _I64), keepdims=1))
        Vt = _transpose(g, V, r)
        U = g.op("MatMul", g.op("Mul", X, g.op("Reciprocal", _safe(g, s))), Vt)
        H = g.op("MatMul", g.op("Mul", V, s), Vt)
        return [U, H]

    U, H = _guarded(g, A, core)
    return cast(g, U, g.out_dtype(0)), cast(g, H, g.out_dtype(1))


# -- pseudo-inverse ------------------------------------------------------------------------------
def _pinv(g: GraphBuilder, A: Tensor, atol: Tensor | None, rtol: Tensor | None,
          hermitian: bool) -> Tensor:
    """V diag(1/s_i for s_i > max(atol, rtol * s_max), else 0) U^T; atol, rtol double or None.

    It is unique whatever the signs of the singular vectors. One-sided Jacobi gives
    X = A V = U S, so the result is V diag(w / s^2) X^T.
    """
    m, n = _matrix_dims(A, "linalg_pinv")
    out_dtype = g.out_dtype()
    if m * n == 0 or _has_empty_batch(A):
        return _batch_zeros(g, A, [n, m], out_dtype)
    if hermitian and m != n:
        raise TranslationError(f"hermitian pinv of a non-square {m}x{n} matrix")
    # Batched tolerances broadcast against the batch, which must then stay as it is.
    is_scalar_tol = all(t is None or (t.shape is not None and len(t.shape) == 0)
                        for t in (atol, rtol))
    if rtol is None:
        # torch's default: eps(dtype) * max(m, n), or 0 when a positive atol is given.
        eps = float(torch.finfo(_dtypes.to_torch(A.dtype)).eps) if A.dtype is not None \
            and A.dtype.is_floating_point() else float(torch.finfo(torch.float32).eps)
        rtol = g.const(eps * max(m, n), _F64)
        if atol is not None:
            rtol = g.op("Where", g.op("Greater", atol, g.const(0.0, _F64)), g.const(0.0, _F64), rtol)
    if atol is None:
        atol = g.const(0.0, _F64)
    last = g.const([-1], _I64)
    atol, rtol = g.op("Unsqueeze", atol, last), g.op("Unsqueeze", rtol, last)

    def core(A: Tensor) -> list[Tensor]:
        r = rank(A)
        a = cast(g, A, _F64)
        if hermitian:
            # torch's hermitian path runs eigh, which reads the lower triangle; the singular
            # values of that symmetric matrix are its |eigenvalues|, as torch's rule uses.
            a = _symmetric_from(g, a, n, r, "L")
        tall, rows, cols, is_transposed = _tall(g, a, m, n, r)
        W = g.op("Concat", tall, _batch_eye(g, A, cols, cols), axis=-2)
        W = _one_sided_jacobi(g, W, rows, cols, r, has_extra=True)
        X = g.op("Slice", W, g.const([0], _I64), g.const([rows], _I64), g.const([-2], _I64))
        V = g.op("Slice", W, g.const([rows], _I64), g.const([rows + cols], _I64),
                 g.const([-2], _I64))
        s2 = g.op("ReduceSumSquare", X, g.const([-2], _I64), keepdims=0)         # (..., cols)
        s = g.op("Sqrt", s2)
        s_max = g.op("ReduceMax", s, last, keepdims=1)
        tol = g.op("Max", atol, g.op("Mul", rtol, s_max))
        weight = g.op("Where", g.op("Greater", s, tol), g.op("Reciprocal", _safe(g, s2)),
                      g.const(0.0, _F64))
        out = g.op("MatMul", g.op("Mul", V, g.op("Unsqueeze", weight, g.const([-2], _I64))),
                   _transpose(g, X, r))
        return [_transpose(g, out, r) if is_transposed else out]

    out = _guarded(g, A, core)[0] if is_scalar_tol else core(A)[0]
    return cast(g, out, out_dtype)


@register(aten.linalg_pinv.atol_rtol_tensor)
def aten_linalg_pinv_atol_rtol_tensor(g: GraphBuilder, self: Tensor, *, atol: Tensor | None = None,
                                      rtol: Tensor | None = None,
                                      hermitian: bool = False) -> Tensor:
    """linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor"""
    return _pinv(g, self, None if atol is None else cast(g, atol, _F64),
                 None if rtol is None else cast(g, rtol, _F64), hermitian)


@register(aten.linalg_pinv.atol_rtol_float)
def aten_linalg_pinv_atol_rtol_float(g: GraphBuilder, self: Tensor, *, atol: float | None = None,
                                     rtol: float | None = None, hermitian: bool = False) -> Tensor:
    """linalg_pinv.atol_rtol_float(Tensor self, *, float? atol=None, float? rtol=None, bool hermitian=False) -> Tensor"""
    return _pinv(g, self, None if atol is None else g.const(float(atol), _F64),
                 None if rtol is None else g.const(float(rtol), _F64), hermitian)

