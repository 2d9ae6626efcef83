"""Edge cases for the orthogonal decompositions (linalg_decomp.py): LAPACK's Householder sign
rules, odd and degenerate sizes, tolerances, dynamic sizes, node counts."""

from __future__ import annotations

import pytest
import torch

import onnxport
from onnxport.errors import OnnxExporterError
from tests.helpers import Fn, count, export_and_compare, op_types


def _qr(mode: str) -> Fn:
    return Fn(lambda a: torch.linalg.qr(a, mode=mode))


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("shape", [(6, 3), (3, 6), (2, 4, 4), (1, 1)])
def test_qr_modes_and_shapes(mode: str, shape: tuple[int, ...]) -> None:
    export_and_compare(_qr(mode), (torch.randn(shape),))


def test_geqrf_follows_dlarfg_when_the_column_below_is_zero() -> None:
    # Upper-triangular input: every x is 0, so LAPACK keeps R = A and tau = 0, even for a
    # negative or zero diagonal.
    a = torch.tensor([[-2.0, 1.0, 3.0], [0.0, 0.0, 4.0], [0.0, 0.0, 5.0]])
    export_and_compare(Fn(torch.geqrf), (a,))


def test_geqrf_zero_pivot_takes_the_positive_sign() -> None:
    # alpha = 0 with x != 0: beta = -sign(0) * ||x|| = -||x||.
    a = torch.tensor([[0.0, 1.0], [3.0, 2.0], [4.0, -1.0]], dtype=torch.float64)
    export_and_compare(Fn(torch.geqrf), (a,))
    export_and_compare(_qr("complete"), (a,))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_ormqr_with_fewer_reflectors_than_rows(left: bool, transpose: bool) -> None:
    a, tau = torch.geqrf(torch.randn(2, 5, 3))
    c = torch.randn(2, 5, 4) if left else torch.randn(2, 4, 5)
    export_and_compare(Fn(lambda a, tau, c: torch.ormqr(a, tau, c, left=left, transpose=transpose)),
                       (a, tau, c))


@pytest.mark.parametrize("n", [1, 2, 3, 7])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigvalsh_sizes_and_triangles(n: int, uplo: str) -> None:
    # The other triangle holds garbage that LAPACK never reads.
    export_and_compare(Fn(lambda a: torch.linalg.eigvalsh(a, UPLO=uplo)), (torch.randn(3, n, n),))


def test_eigvalsh_repeated_and_negative_eigenvalues() -> None:
    q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    a = q @ torch.diag(torch.tensor([-3.0, -3.0, 0.0, 2.0, 2.0, 2.0], dtype=torch.float64)) @ q.T
    export_and_compare(Fn(torch.linalg.eigvalsh), (torch.stack([a, torch.eye(6, dtype=a.dtype)]),))


@pytest.mark.parametrize("shape", [(10, 8), (8, 10), (4, 1), (1, 4), (3, 9, 9)])
def test_svdvals_shapes(shape: tuple[int, ...]) -> None:
    export_and_compare(Fn(torch.linalg.svdvals), (torch.randn(shape),))


def test_svdvals_rank_deficient_float64() -> None:
    a = torch.randn(7, 2, dtype=torch.float64) @ torch.randn(2, 5, dtype=torch.float64)
    export_and_compare(Fn(torch.linalg.svdvals), (a,))


def test_matrix_rank_cond_and_nuclear_norm() -> None:
    a = torch.randn(2, 6, 3) @ torch.randn(2, 3, 6)
    export_and_compare(Fn(lambda a: (torch.linalg.matrix_rank(a), torch.linalg.cond(a[..., :3, :3]),
                                     torch.linalg.matrix_norm(a, "nuc"))), (a,))


def test_pinv_with_batched_tolerances() -> None:
    a = torch.randn(3, 4, 6, dtype=torch.float64)
    atol = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64)
    rtol = torch.tensor([0.0, 0.1, 0.0], dtype=torch.float64)
    export_and_compare(Fn(lambda a, atol, rtol: torch.linalg.pinv(a, atol=atol, rtol=rtol)),
                       (a, atol, rtol))


def test_pinv_hermitian_reads_the_lower_triangle() -> None:
    a = torch.randn(5, 5, dtype=torch.float64)
    export_and_compare(Fn(lambda a: torch.linalg.pinv(a, hermitian=True)), (a,))


def test_pinv_of_a_wide_rank_deficient_matrix() -> None:
    a = torch.randn(4, 2) @ torch.randn(2, 7)
    export_and_compare(Fn(torch.linalg.pinv), (a,))


def test_jacobi_is_one_loop_with_a_small_body() -> None:
    program = export_and_compare(Fn(torch.linalg.svdvals), (torch.randn(10, 10),))
    assert count(program, "Loop") == 1
    assert len(op_types(program)) < 120


def test_eigh_and_svd_values_alone_export() -> None:
    # The vectors are computed by neither model: nothing reads them.
    a = torch.randn(2, 5, 5, dtype=torch.float64)
    export_and_compare(Fn(lambda a: torch.linalg.eigh(a + a.mT)[0]), (a,))
    export_and_compare(Fn(lambda a: torch.linalg.svd(a[..., :3])[1]), (a,))
    export_and_compare(Fn(lambda a: torch.linalg.matrix_norm(a, 2)), (a,))


def test_eigenvectors_are_refused() -> None:
    with pytest.raises(OnnxExporterError, match="unique only up to sign"):
        onnxport.export(Fn(torch.linalg.eigh), (torch.randn(3, 3),))


class _SvdVals(torch.nn.Module):
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.linalg.svdvals(a)


def test_dynamic_matrix_size_is_refused() -> None:
    n = torch.export.Dim("n", min=2, max=16)
    with pytest.raises(OnnxExporterError, match="linalg_svdvals.*static"):
        onnxport.export(_SvdVals(), (torch.randn(4, 4),), dynamic_shapes=({0: n, 1: n},))


class _AllValues(torch.nn.Module):
    def forward(self, a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, r = torch.linalg.qr(a)
        return (q, r, torch.linalg.svdvals(a), torch.linalg.eigvalsh(a), torch.linalg.pinv(a),
                torch.linalg.pinv(a, hermitian=True, atol=0.1))


@pytest.mark.parametrize("shape", [(3, 2, 4, 4), (0, 2, 4, 4), (2, 0, 4, 4)])
def test_dynamic_batch_including_empty(shape: tuple[int, ...]) -> None:
    # ONNX Runtime's Loop bodies fail on an empty batch; a dynamic one gets a padding matrix.
    dims = {0: torch.export.Dim("b0", min=0, max=8), 1: torch.export.Dim("b1", min=0, max=8)}
    program = onnxport.export(_AllValues(), (torch.randn(2, 3, 4, 4),), dynamic_shapes=(dims,))
    a = torch.randn(shape)
    for got, want in zip(program(a), _AllValues()(a)):
        torch.testing.assert_close(torch.as_tensor(got), want)


# torch.linalg.polar and matrix_sqrth exist from torch 2.14 on.
_needs_polar = pytest.mark.skipif(not hasattr(torch.linalg, "polar"),
                                  reason=f"torch {torch.__version__} has no linalg.polar")
_needs_sqrth = pytest.mark.skipif(not hasattr(torch.linalg, "matrix_sqrth"),
                                  reason=f"torch {torch.__version__} has no linalg.matrix_sqrth")


@_needs_sqrth
def test_matrix_sqrth_clamps_negative_eigenvalues_and_reads_the_lower_triangle() -> None:
    # Eigenvalues 3 and -1: torch takes sqrt(max(L, 0)); the upper triangle is ignored.
    a = torch.tensor([[1.0, 99.0], [2.0, 1.0]])
    export_and_compare(Fn(torch.linalg.matrix_sqrth), (a,))
    spd = torch.randn(3, 5, 5, dtype=torch.float64)
    spd = spd @ spd.mT + torch.eye(5, dtype=torch.float64)
    export_and_compare(Fn(torch.linalg.matrix_sqrth), (spd,))


@_needs_polar
@pytest.mark.parametrize("shape", [(7, 4), (3, 3), (2, 6, 3), (5, 1)])
def test_polar_tall_and_square(shape: tuple[int, ...]) -> None:
    export_and_compare(Fn(lambda a: tuple(torch.linalg.polar(a))), (torch.randn(shape),))


@_needs_polar
def test_polar_with_a_dynamic_batch() -> None:
    model = Fn(lambda a: tuple(torch.linalg.polar(a)))
    program = onnxport.export(model, (torch.randn(2, 4, 3),),
                              dynamic_shapes=(({0: "batch"},),))
    a = torch.randn(5, 4, 3)
    for actual, expected in zip(program(a), model(a)):
        torch.testing.assert_close(actual, expected)
