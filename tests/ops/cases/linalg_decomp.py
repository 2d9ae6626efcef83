"""OpInfo cases for orthogonal decompositions: Householder QR, symmetric eigenvalues, singular
values and the pseudo-inverse."""

from __future__ import annotations

import torch

from onnxport.translate import aten
from tests.ops.op_db import OpTest

FLOATS = (torch.float32, torch.float64)
# matrix_rank's decomposition answers empty inputs with `full`/`zeros`, never reaching the SVD
# or eigh translations this file tests.
_EMPTY_RANK = "matrix_rank of an empty input decomposes to constants, not to a decomposition"


def _is_empty(sample: object) -> bool:
    return sample.input.numel() == 0  # type: ignore[attr-defined]


# linalg.pinv.singular calls pinv(a @ b.mT); with a zero inner size ONNX Runtime's MatMul
# leaves its (non-empty) output uninitialized, so pinv's input is garbage. It depends on
# what memory holds, so the samples are skipped rather than strictly xfailed.
_EMPTY_INNER = "ONNX Runtime's MatMul with inner size 0 returns uninitialized memory"


def _has_empty_inner_product(sample: object) -> bool:
    a, b = sample.input, sample.args[0]  # type: ignore[attr-defined]
    return a.shape[-1] == 0 and a.shape[:-1].numel() > 0 and b.shape[-2] > 0


_VECTOR_SIGNS = ("eigen/singular vectors are unique only up to sign; LAPACK's signs come from "
                 "its QR iterations, which Jacobi does not reproduce (TranslationError)")


CASES = [
    OpTest("geqrf", covers=(aten.geqrf.default,), dtypes=FLOATS),
    OpTest("linalg.qr", covers=(aten.linalg_qr.default,), dtypes=FLOATS),
    OpTest("qr", covers=(aten.linalg_qr.default,), dtypes=FLOATS),
    OpTest("ormqr", covers=(aten.ormqr.default,), dtypes=FLOATS),
    OpTest("linalg.eigvalsh", covers=(aten.linalg_eigvalsh.default,), dtypes=FLOATS),
    OpTest("linalg.matrix_rank", variant="hermitian", covers=(aten._linalg_eigh.default,),
           dtypes=FLOATS).skip(when=_is_empty, reason=_EMPTY_RANK),
    OpTest("linalg.svdvals", covers=(aten.linalg_svdvals.default,), dtypes=FLOATS),
    # torch >= 2.14 (on 2.13 the OpInfo does not exist and test_op skips them).
    OpTest("linalg.polar", covers=(aten.linalg_polar.default,), dtypes=FLOATS),
    OpTest("linalg.matrix_sqrth", covers=(aten.linalg_matrix_sqrth.default,), dtypes=FLOATS),
    OpTest("linalg.matrix_rank", covers=(aten._linalg_svd.default,), dtypes=FLOATS)
    .skip(when=_is_empty, reason=_EMPTY_RANK),
    OpTest("linalg.cond", covers=(aten._linalg_svd.default,), dtypes=FLOATS),
    OpTest("norm", variant="nuc", covers=(aten._linalg_svd.default,), dtypes=FLOATS),
    OpTest("linalg.pinv", covers=(aten.linalg_pinv.atol_rtol_tensor,
                                  aten.linalg_pinv.atol_rtol_float), dtypes=FLOATS),
    OpTest("linalg.pinv", variant="hermitian", covers=(aten.linalg_pinv.atol_rtol_tensor,), dtypes=FLOATS),
    OpTest("linalg.pinv", variant="singular", covers=(aten.linalg_pinv.atol_rtol_tensor,),
           dtypes=FLOATS).skip(when=_has_empty_inner_product, reason=_EMPTY_INNER),
    OpTest("pinverse", covers=(aten.linalg_pinv.atol_rtol_tensor,), dtypes=FLOATS),
    OpTest("linalg.eigh", covers=(aten._linalg_eigh.default,), dtypes=FLOATS)
    .xfail(reason=_VECTOR_SIGNS),
    OpTest("linalg.svd", covers=(aten._linalg_svd.default,), dtypes=FLOATS)
    .xfail(reason=_VECTOR_SIGNS),
    OpTest("svd", covers=(aten._linalg_svd.default,), dtypes=FLOATS).xfail(reason=_VECTOR_SIGNS),
]
