"""Edge cases for search, order statistics, linalg extras and sampling ops beyond OpInfo's samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import onnxport

from tests.helpers import Fn, export_and_compare

NAN = float("nan")
INF = float("inf")


def check(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    export_and_compare(Fn(fn), args, optimize=False, **kwargs)


# -- search.py ------------------------------------------------------------------------------------
@pytest.mark.parametrize("right", [False, True])
def test_bucketize_ties_and_nan(right: bool) -> None:
    x = torch.tensor([[0.0, 1.0, 2.0], [NAN, -INF, 5.0]])
    check(lambda a, b: torch.bucketize(a, b, right=right), x, torch.tensor([0.0, 1.0, 1.0, 3.0]))


def test_bucketize_out_int32() -> None:
    check(lambda a, b: torch.bucketize(a, b, out_int32=True), torch.tensor([3, 1, 7]),
          torch.tensor([1, 3, 5]))


def test_searchsorted_batched_sorter_side_right() -> None:
    seq = torch.tensor([[3.0, 1.0, 2.0, 2.0], [9.0, 7.0, 8.0, 6.0]])
    sorter = torch.argsort(seq, dim=-1)
    values = torch.tensor([[2.0, 0.5, 3.5], [7.0, 10.0, 6.0]])
    check(lambda s, v, o: torch.searchsorted(s, v, side="right", sorter=o), seq, values, sorter)


def test_searchsorted_scalar_value() -> None:
    check(lambda s: torch.searchsorted(s, 2), torch.tensor([1, 2, 2, 4]))


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_cummax_cummin_ties_nan_negative_dim(op: Callable[..., Any]) -> None:
    x = torch.tensor([[1.0, 1.0, NAN, 0.0], [2.0, -1.0, 2.0, 3.0], [0.0, 0.0, 0.0, NAN]])
    check(lambda a: op(a, -1), x)
    check(lambda a: op(a, 0), x)


def test_cummax_int_and_scalar() -> None:
    check(lambda a: torch.cummax(a, 0), torch.tensor([3, 1, 3, 5, 2]))
    check(lambda a: torch.cummin(a, 0), torch.tensor(4.0))


def test_logcumsumexp_infinities_and_large_values() -> None:
    x = torch.tensor([[-INF, -INF, 0.0, 1000.0], [-1000.0, 0.0, INF, 1.0]])
    check(lambda a: torch.logcumsumexp(a, dim=1), x)


def test_kthvalue_keepdim() -> None:
    check(lambda a: torch.kthvalue(a, 3, dim=0, keepdim=True), torch.randn(5, 4))


def test_median_nanmedian_with_nan() -> None:
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [2.0, 1.0, 1.0, 3.0], [NAN, 5.0, NAN, NAN]])
    check(lambda a: torch.median(a, dim=1), x)
    check(lambda a: torch.nanmedian(a, dim=1, keepdim=True), x)
    check(lambda a: (torch.median(a), torch.nanmedian(a)), x)
    # An all-NaN row: the value is NaN; torch's index there is unspecified (nth_element).
    check(lambda a: torch.nanmedian(a, dim=1).values, torch.full((2, 4), NAN))


def test_mode_ties_pick_smallest_value() -> None:
    check(lambda a: torch.mode(a, 0), torch.tensor([1, 2, 2, 1, 3]))
    check(lambda a: torch.mode(a, -1, keepdim=True), torch.tensor([[2.0, 2.0, 5.0, 5.0, 1.0]]))


def test_unique_inverse_and_counts_2d() -> None:
    x = torch.tensor([[3, 1, 2], [1, 3, 3]])
    check(lambda a: torch.unique(a, return_inverse=True, return_counts=True), x)
    check(lambda a: torch.unique(a, sorted=True), x.float())


def test_unique_dim() -> None:
    x = torch.tensor([[3, 1], [2, 1], [3, 1]])
    check(lambda a: torch.unique(a, dim=0, return_inverse=True, return_counts=True), x)


def test_unique_consecutive_dim_and_flat() -> None:
    x = torch.tensor([[1, 2], [1, 2], [3, 4], [1, 2]])
    check(lambda a: torch.unique_consecutive(a, return_inverse=True, return_counts=True, dim=0),
          x)
    check(lambda a: torch.unique_consecutive(a, return_inverse=True, return_counts=True), x)


def test_histc_with_range_and_outliers() -> None:
    x = torch.tensor([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, NAN])
    check(lambda a: torch.histc(a, bins=3, min=0, max=3), x)
    check(lambda a: torch.histc(a, bins=4), torch.tensor([1.0, 1.0]))


# -- linalg.py ------------------------------------------------------------------------------------
def test_einsum_ellipsis_implicit_and_float16() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(4, 5)
    check(lambda x, y: torch.einsum("...ij,jk", x, y), a, b)
    check(lambda x, y: torch.einsum("b i j, j k -> b k i", x, y), a, b)
    check(lambda x, y: torch.einsum("bij,jk->bik", x, y), a.half(), b.half())


def test_det_batched_and_empty() -> None:
    check(torch.linalg.det, torch.randn(2, 3, 3))
    check(torch.det, torch.randn(4, 4))
    check(torch.linalg.det, torch.randn(2, 0, 0))


@pytest.mark.parametrize("p", [0, 1, 2, 3.5, INF, -INF])
def test_dist_p(p: float) -> None:
    check(lambda a, b: torch.dist(a, b, p), torch.randn(3, 4), torch.randn(4))


def test_cartesian_prod_and_angle() -> None:
    check(lambda a, b, c: torch.cartesian_prod(a, b, c), torch.arange(2), torch.arange(3),
          torch.arange(2))
    check(torch.angle, torch.tensor([-1.0, 0.0, -0.0, NAN, 2.0, -INF]))


# -- sampling.py ----------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, INF])
def test_cdist_p_and_batch_broadcast(p: float) -> None:
    check(lambda a, b: torch.cdist(a, b, p=p), torch.randn(2, 1, 5, 3), torch.randn(4, 6, 3))


def test_cdist_mm_path_and_empty() -> None:
    # More than 25 rows: torch's default p=2 path uses the matmul expansion.
    check(lambda a, b: torch.cdist(a, b), torch.randn(30, 8), torch.randn(27, 8))
    check(lambda a, b: torch.cdist(a, b), torch.randn(3, 0), torch.randn(2, 0))


@pytest.mark.parametrize("p", [1.0, 2.0, INF])
def test_pdist(p: float) -> None:
    check(lambda a: F.pdist(a, p=p), torch.randn(5, 3))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(mode: str, padding_mode: str, align_corners: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6)
    grid = torch.rand(2, 4, 7, 2) * 2.4 - 1.2
    check(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding_mode,
                                     align_corners=align_corners), x, grid)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_modes_with_empty_bags(mode: str, include_last_offset: bool) -> None:
    weight = torch.randn(10, 3)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 2, 2, 5, 8]) if include_last_offset else torch.tensor([0, 2, 2, 5])
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode,
                                          include_last_offset=include_last_offset),
          weight, indices, offsets)


def test_embedding_bag_padding_idx_and_2d_input() -> None:
    weight = torch.randn(6, 4)
    indices = torch.tensor([[0, 2, 5], [5, 5, 1]])
    check(lambda w, i: F.embedding_bag(i, w, mode="mean", padding_idx=5), weight, indices)
    check(lambda w, i: F.embedding_bag(i, w, mode="max", padding_idx=-1), weight, indices)


def test_embedding_bag_per_sample_weights() -> None:
    weight = torch.randn(6, 4)
    check(lambda w, i, o, s: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=s),
          weight, torch.tensor([0, 2, 5, 1]), torch.tensor([0, 1]), torch.randn(4))


def test_inverse_needs_pivoting_and_batches() -> None:
    # A zero on the diagonal forces a row swap.
    a = torch.tensor([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]])
    check(torch.linalg.inv, a)
    check(torch.inverse, torch.randn(2, 3, 4, 4) + 4 * torch.eye(4))
    check(lambda x: torch.linalg.inv_ex(x).inverse, torch.randn(5, 5) + 5 * torch.eye(5))


@pytest.mark.parametrize("p", [INF, -INF])
def test_dist_cdist_inf_norm_propagate_nan(p: float) -> None:
    a = torch.tensor([[NAN, 1.0], [2.0, 3.0]])
    check(lambda x, y: torch.dist(x, y, p), a, torch.zeros(2))
    if p > 0:
        check(lambda x, y: torch.cdist(x, y, p=p), a, torch.ones(3, 2))


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_5d_at_opset_20(mode: str) -> None:
    x, grid = torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 4, 3) * 2 - 1
    check(lambda a, g: F.grid_sample(a, g, mode=mode, align_corners=False), x, grid,
          opset_version=20)


# -- ops the TorchScript path meets undecomposed (transformers' BLOOM, T5, Wav2Vec2) ----------

@pytest.mark.parametrize("dynamo", [True, False])
@pytest.mark.parametrize(("beta", "alpha"), [(1, 1), (0.5, 2.0), (0, 1)])
def test_baddbmm(dynamo: bool, beta: float, alpha: float) -> None:
    class M(torch.nn.Module):
        def forward(self, s: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.baddbmm(s, a, b, beta=beta, alpha=alpha)

    s = torch.randn(2, 3, 5)
    if beta == 0:
        s[0, 0, 0] = float("nan")  # ignored by torch when beta == 0
    args = (s, torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    _compare_both(M(), args, dynamo)


@pytest.mark.parametrize("dynamo", [True, False])
def test_min_max_other(dynamo: bool) -> None:
    class M(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.min(a, b), torch.max(a, b)

    a = torch.tensor([1.0, float("nan"), 3.0, -2.0])
    _compare_both(M(), (a, torch.tensor([2.0, 1.0, float("nan"), -3.0])), dynamo)


@pytest.mark.parametrize("dynamo", [True, False])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_weight_norm(dynamo: bool, dim: int) -> None:
    class M(torch.nn.Module):
        def forward(self, v: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
            return torch._weight_norm(v, g, dim)

    v = torch.randn(4, 3, 5)
    g_shape = [1, 1, 1] if dim == -1 else [v.shape[d] if d == dim % 3 else 1 for d in range(3)]
    g = torch.rand(*g_shape) + 0.5
    axes = list(range(3)) if dim == -1 else [d for d in range(3) if d != dim % 3]
    torch.testing.assert_close(M()(v, g), v * g / v.pow(2).sum(axes, keepdim=True).sqrt())
    _compare_both(M(), (v, g), dynamo)


def _compare_both(model: torch.nn.Module, args: tuple[torch.Tensor, ...], dynamo: bool) -> None:
    """Export with either flavour, run in ORT, compare with eager (NaN-aware)."""
    import io

    import onnxruntime

    expected = model(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    f = io.BytesIO()
    onnxport.export(model, args, f, dynamo=dynamo, input_names=[f"in{i}" for i in range(len(args))])
    session = onnxruntime.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {f"in{i}": a.numpy() for i, a in enumerate(args)})
    assert len(outputs) == len(expected)
    for out, exp in zip(outputs, expected):
        torch.testing.assert_close(torch.from_numpy(out), exp, equal_nan=True)


# -- sorting (indexing.sort_order) ----------------------------------------------------------------
_NAN_TIES = torch.tensor([[1.0, NAN, -0.0, 0.0, -INF, NAN, INF, 0.0, -1.0, 1.0],
                          [NAN, NAN, NAN, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_nan_and_signed_zero(dtype: torch.dtype, descending: bool) -> None:
    # NaN sorts above +inf (last ascending, first descending); -0.0 and 0.0 tie, kept in order.
    x = _NAN_TIES.to(dtype)
    check(lambda a: torch.sort(a, dim=-1, descending=descending, stable=True), x)
    check(lambda a: torch.argsort(a, dim=0, descending=descending, stable=True), x)


@pytest.mark.parametrize("largest", [False, True])
def test_topk_nan_counts_as_largest(largest: bool) -> None:
    x = torch.tensor([[1.0, NAN, -2.0, 0.0, -INF, 3.0, INF, 0.5, -1.0, 4.0]])
    check(lambda a: torch.topk(a, 4, dim=-1, largest=largest), x)
    check(lambda a: torch.topk(a, 4, dim=-1, largest=largest), x.half())


@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_bool(descending: bool) -> None:
    x = torch.tensor([[True, False, True, False, False, True], [False] * 3 + [True] * 3])
    check(lambda a: torch.sort(a, dim=-1, descending=descending, stable=True), x)


# -- bool scatter reductions (indexing._reduction_dtype) -------------------------------------------
def test_index_add_bool_is_or() -> None:
    x = torch.tensor([[True, False, False], [False, False, False]])
    src = torch.tensor([[False, True, False], [True, False, False], [True, True, False]])
    index = torch.tensor([0, 1, 1])
    check(lambda a, s, i: torch.index_add(a, 0, i, s), x, src, index)


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin"])
@pytest.mark.parametrize("include_self", [False, True])
def test_scatter_reduce_bool(reduce: str, include_self: bool) -> None:
    x = torch.tensor([True, False, True, False])
    src = torch.tensor([True, False, False, True, True, False])
    index = torch.tensor([0, 0, 1, 1, 2, 2])
    check(lambda a, s, i: a.scatter_reduce(0, i, s, reduce, include_self=include_self),
          x, src, index)


def test_renorm_float16_converts_element_type() -> None:
    # torch's renorm decomposition converts the float32 scale back with
    # prims.convert_element_type.
    x = torch.randn(3, 4, 5, dtype=torch.float16)
    check(lambda a: torch.renorm(a, 2, 1, 1.5), x)


@pytest.mark.parametrize("values", [[True, True, True], [True, False, True], []])
def test_is_all_true(values: list[bool]) -> None:
    """aten._is_all_true (torch._check on a tensor condition): all() of a bool tensor, empty
    tensors true, as ATen."""
    check(torch.ops.aten._is_all_true, torch.tensor(values, dtype=torch.bool))
