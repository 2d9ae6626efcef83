"""Edge cases for index_reduce, put, nonzero_static, segment_reduce and histogram(dd) beyond
OpInfo's samples: NaN in max/min slots, negative indices and dims, empty segments, padding and
truncation, values on bin edges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import onnxport
from tests.helpers import Fn, export_and_compare

NAN = float("nan")
INF = float("inf")


def check(fn: Callable[..., Any], *args: Any) -> onnxport.ONNXProgram:
    return export_and_compare(Fn(fn), args, optimize=False)


# -- index_reduce ---------------------------------------------------------------------------------
@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_nan_propagates(reduce: str, include_self: bool) -> None:
    x = torch.tensor([[1.0, NAN, 3.0, -INF], [0.0, 2.0, NAN, 5.0]])
    source = torch.tensor([[NAN, 2.0, 1.0], [4.0, 1.0, -1.0]])
    index = torch.tensor([0, 1, 0])
    check(lambda a, i, s: a.index_reduce(-1, i, s, reduce, include_self=include_self),
          x, index, source)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_negative_dim_duplicates(reduce: str, include_self: bool) -> None:
    # torch rejects negative index values here (unlike index_add), so only the dim is negative.
    x = torch.randn(4, 3, 2)
    source = torch.randn(5, 3, 2)
    index = torch.tensor([3, 0, 3, 2, 0])
    check(lambda a, i, s: a.index_reduce(-3, i, s, reduce, include_self=include_self),
          x, index, source)


@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_integer_mean_rounds_down(include_self: bool) -> None:
    x = torch.tensor([5, 7, -3, 4])
    source = torch.tensor([2, 4, -4, -1, 0])
    index = torch.tensor([0, 0, 2, 2, 0])
    check(lambda a, i, s: a.index_reduce(0, i, s, "mean", include_self=include_self),
          x, index, source)


# -- put ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accumulate", [True, False])
def test_put_negative_and_2d_index(accumulate: bool) -> None:
    x = torch.arange(12.0).reshape(3, 4)
    index = torch.tensor([[-1, 0], [5, -12]])
    check(lambda a, i, s: a.put(i, s, accumulate=accumulate), x, index, torch.ones(2, 2) * 7)


def test_put_accumulate_duplicates() -> None:
    x = torch.zeros(2, 3, dtype=torch.int64)
    index = torch.tensor([1, 1, 4, 1, -2])
    check(lambda a, i, s: a.put(i, s, accumulate=True), x, index, torch.tensor([1, 2, 3, 4, 5]))


def test_put_bool_accumulate_is_or() -> None:
    x = torch.tensor([True, False, False, False])
    index = torch.tensor([0, 1, 1, 2])
    source = torch.tensor([False, True, True, False])
    check(lambda a, i, s: a.put(i, s, accumulate=True), x, index, source)
    check(lambda a, i, s: a.put(i, s), x, index[2:], source[2:])


def test_put_empty_index_and_scalar_self() -> None:
    check(lambda a, i, s: a.put(i, s), torch.ones(2, 2), torch.zeros(0, dtype=torch.int64),
          torch.zeros(0))
    check(lambda a, i, s: a.put(i, s, accumulate=True), torch.tensor(2.0), torch.tensor([0, -1]),
          torch.tensor([1.0, 3.0]))


# -- nonzero_static -------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 2, 4, 9])
def test_nonzero_static_pads_or_truncates(size: int) -> None:
    x = torch.tensor([[0.0, 1.0, NAN], [0.0, 0.0, -2.0]])
    check(lambda a: torch.nonzero_static(a, size=size, fill_value=-7), x)
    check(lambda a: torch.nonzero_static(a, size=size), x.bool())


def test_nonzero_static_zero_dim_and_empty() -> None:
    check(lambda a: torch.nonzero_static(a, size=3), torch.tensor(5))
    check(lambda a: torch.nonzero_static(a, size=2, fill_value=9), torch.zeros(3, 0, 2))


# -- segment_reduce -------------------------------------------------------------------------------
REDUCES = ["sum", "mean", "max", "min", "prod"]


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("initial", [None, 2.5])
def test_segment_reduce_empty_segments(reduce: str, initial: Any) -> None:
    data = torch.tensor([1.0, -2.0, 3.0, 4.0, 0.5])
    lengths = torch.tensor([0, 2, 0, 3, 0])
    check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=initial), data, lengths)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_segment_reduce_nan(reduce: str) -> None:
    data = torch.tensor([1.0, NAN, 2.0, -INF, 3.0])
    check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n), data, torch.tensor([2, 1, 2]))
    check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=0.0), data,
          torch.tensor([2, 1, 2]))


@pytest.mark.parametrize("reduce", REDUCES)
def test_segment_reduce_offsets_start_late_and_unsafe_lengths(reduce: str) -> None:
    data = torch.randn(6, 2)
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o), data, torch.tensor([1, 3, 3, 6]))
    check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, unsafe=True), data,
          torch.tensor([2, 1]))


@pytest.mark.parametrize("reduce", REDUCES)
def test_segment_reduce_batched_axis(reduce: str) -> None:
    data = torch.randn(2, 3, 5, 2, dtype=torch.float64)
    lengths = torch.tensor([[[2, 0, 3], [5, 0, 0], [1, 1, 3]], [[0, 0, 5], [4, 1, 0], [2, 2, 1]]])
    check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, axis=2, initial=1), data,
          lengths)
    offsets = torch.cat([torch.zeros(2, 3, 1, dtype=torch.int64), lengths.cumsum(-1)], dim=-1)
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, axis=-2), data, offsets)


# -- histogram ------------------------------------------------------------------------------------
@pytest.mark.parametrize("density", [False, True])
def test_histogram_range_edges_and_outside(density: bool) -> None:
    # Values on every edge, outside the range, and NaN (never counted).
    x = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, -0.1, 1.1, NAN, 0.5])
    weight = torch.arange(9.0)
    check(lambda a: torch.histogram(a, 4, range=(0.0, 1.0), density=density), x)
    check(lambda a, w: torch.histogram(a, 4, range=(0.0, 1.0), weight=w, density=density),
          x, weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram_data_range_many_bins(dtype: torch.dtype) -> None:
    x = torch.randn(500, dtype=dtype) * 3
    x[::7] = x[3]  # repeated values, some on interior edges once binned
    check(lambda a: torch.histogram(a, 37), x)
    check(lambda a: torch.histogram(a), torch.linspace(-1, 1, 101, dtype=dtype))


def test_histogram_point_and_empty_range() -> None:
    check(lambda a: torch.histogram(a, 4), torch.full((3,), 2.0))
    check(lambda a: torch.histogram(a, 4, range=(3.0, 3.0)), torch.tensor([1.0, 3.0, 3.2]))
    check(lambda a: torch.histogram(a, 3), torch.zeros(0))


def test_histogram_bins_tensor_with_empty_bin() -> None:
    x = torch.tensor([1.0, 5.0, 3.0, 2.0, 6.0, 0.0, 7.0])
    bins = torch.tensor([0.0, 2.0, 2.0, 6.0])
    check(lambda a, b: torch.histogram(a, b), x, bins)
    check(lambda a, b, w: torch.histogram(a, b, weight=w, density=True), x, bins, torch.rand(7))


def test_histogramdd_int_list_tensor_bins() -> None:
    x = torch.randn(4, 10, 3)
    weight = torch.rand(4, 10)
    check(lambda a: torch.histogramdd(a, bins=4), x)
    check(lambda a, w: torch.histogramdd(a, bins=[2, 3, 4], weight=w, density=True), x, weight)
    check(lambda a: torch.histogramdd(a, bins=[2, 1, 3], range=[-1.0, 1.0, 0.0, 0.0, -2.0, 2.0]), x)
    edges = [torch.tensor([-3.0, 0.0, 3.0]), torch.tensor([-1.0, 1.0]),
             torch.tensor([-2.0, -1.0, 0.0, 5.0])]
    check(lambda a, e0, e1, e2: torch.histogramdd(a, bins=[e0, e1, e2]), x, *edges)


# -- half precision: torch rounds the accumulator after every element ------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["prod", "mean"])
def test_index_reduce_half_accumulates_in_order(dtype: torch.dtype, reduce: str) -> None:
    x = (torch.rand(3, 4) + 0.5).to(dtype)
    source = (torch.rand(3, 40) + 0.5).to(dtype)
    index = torch.randint(0, 4, (40,))
    check(lambda a, i, s: a.index_reduce(1, i, s, reduce), x, index, source)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["sum", "mean", "prod"])
def test_segment_reduce_half_accumulates_in_order(dtype: torch.dtype, reduce: str) -> None:
    data = (torch.rand(30, 3) + 0.5).to(dtype)
    lengths = torch.tensor([7, 0, 13, 10])
    check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=1.5), data, lengths)


def test_put_half_accumulate_duplicates() -> None:
    x = torch.rand(4, dtype=torch.float16)
    index = torch.randint(0, 4, (50,))
    check(lambda a, i, s: a.put(i, s, accumulate=True), x, index, torch.rand(50).half())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_max_min_with_nan(dtype: torch.dtype) -> None:
    x = torch.tensor([1.0, NAN, 3.0, -2.0]).to(dtype)
    source = torch.tensor([NAN, 2.0, 5.0, 1.0]).to(dtype)
    index = torch.tensor([0, 1, 2, 2])
    check(lambda a, i, s: a.index_reduce(0, i, s, "amax", include_self=False), x, index, source)
    check(lambda d, n: torch.segment_reduce(d, "min", lengths=n), source, torch.tensor([1, 0, 3]))
