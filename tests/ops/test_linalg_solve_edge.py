"""Edge cases for linear solvers and factorizations beyond what OpInfo samples reach:
broadcast batches, vector right-hand sides, singular input, failure info, dynamic batch dims."""

from __future__ import annotations

import pytest
import torch

import onnxport
from tests.helpers import Fn, export_and_compare


def _spd(n: int, *batch: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A batch of symmetric positive definite n x n matrices."""
    a = torch.randn(*batch, n, n, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


def test_solve_broadcasts_batches() -> None:
    m = Fn(lambda a, b: torch.linalg.solve(a, b))
    export_and_compare(m, (torch.randn(2, 1, 3, 3), torch.randn(4, 3, 2)))


@pytest.mark.parametrize("b_shape", [(3,), (2, 3)])
def test_solve_vector_right_hand_side(b_shape: tuple[int, ...]) -> None:
    # ATen treats B as vectors when 1-D or shaped like A without its last dim.
    m = Fn(lambda a, b: torch.linalg.solve(a, b))
    export_and_compare(m, (torch.randn(2, 3, 3, dtype=torch.float64),
                           torch.randn(*b_shape, dtype=torch.float64)))


@pytest.mark.parametrize(("b_shape", "left"), [((2, 3, 0), True), ((0, 3), False)])
def test_solve_without_right_hand_sides(b_shape: tuple[int, ...], left: bool) -> None:
    m = Fn(lambda a, b: torch.linalg.solve(a, b, left=left))
    export_and_compare(m, (torch.randn(2, 3, 3), torch.randn(*b_shape)))


def test_solve_right_side() -> None:
    m = Fn(lambda a, b: torch.linalg.solve(a, b, left=False))
    export_and_compare(m, (torch.randn(2, 4, 4, dtype=torch.float64),
                           torch.randn(2, 3, 4, dtype=torch.float64)))


def test_solve_ex_reports_singular_pivot() -> None:
    # [[1, 2], [2, 4]]: the second pivot is exactly 0 in any precision, so info = 2.
    m = Fn(lambda a: torch.linalg.solve_ex(a, torch.ones(2, 1))[1])
    export_and_compare(m, (torch.tensor([[1.0, 2.0], [2.0, 4.0]]),))


def test_lu_factor_ex_info_and_pivots_of_singular_matrix() -> None:
    m = Fn(lambda a: torch.linalg.lu_factor_ex(a))
    a = torch.tensor([[[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]],
                      [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]])
    export_and_compare(m, (a,))


def test_lu_pivot_ties_take_the_first_row() -> None:
    # |-2| == |2|: LAPACK (and the ONNX model) keep the first of equal candidates.
    m = Fn(lambda a: torch.linalg.lu_factor(a))
    export_and_compare(m, (torch.tensor([[1.0, 5.0, 0.0], [-2.0, 1.0, 1.0], [2.0, 0.0, 3.0]]),))


def test_slogdet_of_singular_and_negative_matrices() -> None:
    m = Fn(lambda a: torch.linalg.slogdet(a))
    a = torch.stack([torch.tensor([[1.0, 2.0], [2.0, 4.0]]),     # singular: sign 0, -inf
                     torch.tensor([[0.0, 1.0], [1.0, 0.0]]),     # a swap: sign -1
                     torch.tensor([[-3.0, 1.0], [0.0, 2.0]])])
    export_and_compare(m, (a,))


def test_inv_ex_reports_singular_matrix() -> None:
    m = Fn(lambda a: torch.linalg.inv_ex(a)[1])
    export_and_compare(m, (torch.stack([torch.eye(3), torch.zeros(3, 3)]),))


def test_cholesky_ex_info_names_first_failing_minor() -> None:
    m = Fn(lambda a: torch.linalg.cholesky_ex(a)[1])
    a = torch.stack([torch.diag(torch.tensor([1.0, -1.0, 2.0])), _spd(3, dtype=torch.float32)])
    export_and_compare(m, (a,))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_reads_one_triangle(upper: bool) -> None:
    # The other triangle is ignored, as LAPACK potrf does.
    a = _spd(4, 2)
    garbage = torch.triu(torch.full((4, 4), 1e3, dtype=torch.float64), 1)
    a = a + (garbage.mT if upper else garbage)
    export_and_compare(Fn(lambda x: torch.linalg.cholesky(x, upper=upper)), (a,))


def test_cholesky_solve_broadcasts_batches() -> None:
    m = Fn(lambda b, factor: torch.cholesky_solve(b, factor))
    factor = torch.linalg.cholesky(_spd(3, 3))
    export_and_compare(m, (torch.randn(2, 1, 3, 2, dtype=torch.float64), factor))


@pytest.mark.parametrize(("upper", "left", "unit"),
                         [(False, True, False), (True, False, True), (False, False, False)])
def test_solve_triangular_ignores_other_triangle(upper: bool, left: bool, unit: bool) -> None:
    a = torch.randn(2, 4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    b = torch.randn(2, 4, 3, dtype=torch.float64) if left else torch.randn(2, 3, 4,
                                                                           dtype=torch.float64)
    m = Fn(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left,
                                                      unitriangular=unit))
    export_and_compare(m, (a, b))


def test_lu_solve_adjoint_right_side() -> None:
    a = torch.randn(2, 4, 4, dtype=torch.float64)
    lu, pivots = torch.linalg.lu_factor(a)
    m = Fn(lambda lu, p, b: torch.linalg.lu_solve(lu, p, b, left=False, adjoint=True))
    export_and_compare(m, (lu, pivots, torch.randn(3, 4, dtype=torch.float64)))


def test_lu_unpack_without_data() -> None:
    lu, pivots = torch.linalg.lu_factor(torch.randn(2, 5, 3))
    export_and_compare(Fn(lambda lu, p: torch.lu_unpack(lu, p, unpack_data=False)), (lu, pivots))


@pytest.mark.parametrize("scale", [0.0, 1e-3, 40.0])
def test_matrix_exp_scaling(scale: float) -> None:
    # 0 needs no squaring; 40 needs several, a different number per matrix of the batch.
    a = torch.randn(3, 4, 4, dtype=torch.float64) * torch.tensor([scale, 1.0, 0.1],
                                                                 dtype=torch.float64)[:, None, None]
    export_and_compare(Fn(torch.linalg.matrix_exp), (a,))


@pytest.mark.parametrize("scale", [1e-3, 0.3, 1.0, 2.5, 60.0])
def test_matrix_exp_float32_single_matrix(scale: float) -> None:
    # torch picks a lower Taylor degree below 1-norm 1.46 and squares above 3.01.
    export_and_compare(Fn(torch.linalg.matrix_exp), (torch.randn(4, 4) * scale,))


def test_householder_product_tall_with_fewer_reflectors() -> None:
    a = torch.randn(2, 6, 4, dtype=torch.float64)
    tau = torch.rand(2, 3, dtype=torch.float64)
    export_and_compare(Fn(torch.linalg.householder_product), (a, tau))


def test_lu_factor_dynamic_batch() -> None:
    m = Fn(lambda a: torch.linalg.lu_factor(a))
    a = torch.randn(3, 4, 4)
    batch = torch.export.Dim("batch")
    program = export_and_compare(m, (a,), dynamic_shapes=(({0: batch},),))
    lu, pivots = program(torch.randn(5, 4, 4))
    assert tuple(lu.shape) == (5, 4, 4) and tuple(pivots.shape) == (5, 4)


def test_dynamic_matrix_size_is_a_translation_error() -> None:
    m = Fn(lambda a: torch.linalg.lu_factor(a))
    n = torch.export.Dim("n")
    with pytest.raises(onnxport.errors.TranslationError, match="lu_factor"):
        onnxport.export(m, (torch.randn(4, 4),), dynamic_shapes=(({0: n, 1: n},),))


def test_det_float64_goes_through_lu() -> None:
    # ONNX Runtime has no double Det kernel.
    a = torch.randn(3, 4, 4, dtype=torch.float64)
    a[1, :, 2] = 0.0
    export_and_compare(Fn(torch.linalg.det), (a,))


def test_inv_float64_broadcast_batch() -> None:
    export_and_compare(Fn(torch.linalg.inv), (torch.randn(2, 3, 5, 5, dtype=torch.float64),))


def test_solve_and_slogdet_dynamic_batch() -> None:
    m = Fn(lambda a, b: (torch.linalg.solve(a, b), *torch.linalg.slogdet(a)))
    batch = torch.export.Dim("batch")
    program = export_and_compare(m, (torch.randn(3, 4, 4), torch.randn(3, 4, 2)),
                                 dynamic_shapes=(({0: batch}, {0: batch}),))
    a, b = torch.randn(6, 4, 4), torch.randn(6, 4, 2)
    expected = m(a, b)
    for actual, wanted in zip(program(a, b), expected):
        torch.testing.assert_close(torch.as_tensor(actual), wanted)
