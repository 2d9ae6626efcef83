"""Edge cases for shape, indexing and creation ops that OpInfo samples do not reach."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers import Fn, export_and_compare

N = torch.export.Dim("n", min=2, max=64)


def check(fn: Any, *args: Any, **kwargs: Any) -> None:
    export_and_compare(Fn(fn), args, **kwargs)


X = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
I = torch.tensor([2, 0, -1])


# -- advanced indexing -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["none_first", "middle", "two_split", "two_adjacent", "mask",
                                  "mask_rows", "negative", "broadcast"])
def test_index(name: str) -> None:
    j = torch.tensor([[1], [3]])
    fns = {
        "none_first": lambda x, i: x[None, i],
        "middle": lambda x, i: x[:, i[:2]],
        "two_split": lambda x, i: x[i, :, i],
        "two_adjacent": lambda x, i: x[:, i, i + 1],
        "mask": lambda x, i: x[x > 30],
        "mask_rows": lambda x, i: x[:, (x[0, :, 0] > 5)],
        "negative": lambda x, i: x[..., i],
        "broadcast": lambda x, i: x[i[:2], j],
    }
    check(fns[name], X, I)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate: bool) -> None:
    check(lambda x, i, v: torch.index_put(x, (i,), v, accumulate),
          X, torch.tensor([0, 2, 0]), torch.ones(4, 5))
    check(lambda x, i, v: torch.index_put(x, (i, torch.tensor([1, 3])), v, accumulate),
          X, torch.tensor([0, 2]), torch.tensor([[7.0], [8.0]]))


def test_index_put_mask_and_setitem() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[y > 40] = -1.0
        y[:, torch.tensor([1, 3])] += 2.0
        return y

    check(fn, X)


# -- slicing and views ----------------------------------------------------------------------------
def test_slices() -> None:
    check(lambda x: (x[:, 1:100], x[:, -3:-1], x[..., ::2], x[1:, :, 3:], x[:, 5:]), X)


def test_dynamic_shapes() -> None:
    def fn(x: torch.Tensor) -> Any:
        n = x.shape[0]
        return (x.view(n, -1), x.reshape(-1, 5), x.flatten(1), x.flatten(0, 1),
                x.unflatten(2, (5, 1)), torch.zeros(n, 2), torch.arange(n), torch.full((n, 3), 2.5),
                x.new_ones(n), x.expand(2, n, 4, 5), x[:, 1:], x.narrow(0, 1, 1),
                torch.eye(n), x.transpose(0, 2).contiguous(), x.roll(1, 0),
                x.unsqueeze(0).squeeze(0),
                x[:, torch.tensor([0, 2])], x[torch.tensor([1, 0]), :, torch.tensor([2, 4])],
                x.repeat_interleave(2, dim=0), x.repeat(1, 2, 1), x.cumprod(0), x.flip(0),
                torch.ones_like(x).index_put((torch.tensor([0, 1]),), torch.zeros(4, 5)),
                x.diagonal(0, 1, 2), torch.sort(x, 0)[0], x.tril())

    module = Fn(fn)
    program = export_and_compare(module, (X,), dynamic_shapes=(({0: N},),))
    bigger = torch.randn(7, 4, 5)
    for actual, expected in zip(program(bigger), fn(bigger)):
        torch.testing.assert_close(actual, expected)


def test_empty_tensors() -> None:
    e = torch.zeros(0, 3)
    check(lambda x: (x.view(-1), x.reshape(3, 0), x.flatten(), x.t(), x.unsqueeze(0), x.flip(0),
                     torch.cat([x, x]), x.expand(2, 0, 3)), e)


def test_cat_skips_legacy_empty() -> None:
    check(lambda x, e: torch.cat([x, e, x], dim=1), torch.ones(2, 3), torch.zeros(0))


def test_cat_promotes() -> None:
    check(lambda a, b: torch.cat([a, b]), torch.ones(2, dtype=torch.int64), torch.ones(3))


def test_negative_dims() -> None:
    check(lambda x: (x.transpose(-1, -3), x.squeeze(-1), x.unsqueeze(-1), x.flatten(-2),
                     torch.stack([x, x], -1), x.movedim(-1, 0), x.select(-1, -2),
                     x.unbind(-2)[1], x.chunk(2, -1)[1], x.cumsum(-1), x.diagonal(1, -1, -2)), X)


def test_diagonal_offsets() -> None:
    y = torch.randn(2, 3, 5)
    check(lambda x: (x.diagonal(), x.diagonal(2, 1, 2), x.diagonal(-1, 2, 1), x.diagonal(9, 1, 2)),
          y)


# -- gather / scatter -----------------------------------------------------------------------------
SLICE_SCATTER_BOUNDS = {
    # name: (start, end, step) from the sliced dim's size n and a second dynamic size k <= 4
    "inner": (lambda n, k: k, lambda n, k: n - k, 1),
    "negative_start": (lambda n, k: -k, lambda n, k: None, 1),
    "negative_end": (lambda n, k: 1, lambda n, k: -k, 1),
    "clamped": (lambda n, k: -(n + k), lambda n, k: n + k, 1),
    "step": (lambda n, k: k, lambda n, k: n, 2),
    "step_negative": (lambda n, k: -(k + 5), lambda n, k: -1, 3),
}


@pytest.mark.parametrize("name", list(SLICE_SCATTER_BOUNDS))
@pytest.mark.parametrize("static_dim", [False, True], ids=["symbolic_dim", "static_dim"])
def test_slice_scatter_symbolic_bounds(name: str, static_dim: bool) -> None:
    """slice_scatter whose start/end are SymInts (sizes of dynamic inputs), exported once and
    run at other sizes; the sliced dim itself is symbolic or static."""
    start_of, end_of, step = SLICE_SCATTER_BOUNDS[name]

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n, k = x.shape[1], y.shape[0]
        start, end = start_of(n, k), end_of(n, k)
        src = x[:, start:end:step] * 2.0 + 1.0
        return torch.slice_scatter(x, src, 1, start, end, step)

    x = torch.randn(3, 11, 2)
    y = torch.zeros(3)
    n, k = torch.export.Dim("n", min=10, max=64), torch.export.Dim("k", min=1, max=4)
    program = export_and_compare(Fn(fn), (x, y),
                                 dynamic_shapes=((None if static_dim else {1: n}, {0: k}),))
    for size, count in ((11, 1), (11, 4), (16, 2), (23, 4)):
        x2 = torch.randn(3, 11 if static_dim else size, 2)
        y2 = torch.zeros(count)
        (actual,) = program(x2, y2)
        torch.testing.assert_close(actual, fn(x2, y2))
        assert not torch.equal(actual, x2)


def test_scatter_value_and_reduce() -> None:
    idx = torch.tensor([[0, 1, 2], [2, 0, 1]])
    src = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    check(lambda x, i, s: (x.scatter(0, i, 7.5), x.scatter(0, i, s, reduce="multiply"),
                           x.scatter_reduce(1, i, s, "amax", include_self=False),
                           x.scatter_reduce(1, i, s, "mean", include_self=False)),
          torch.ones(3, 4), idx, src)


def test_embedding_padding_idx() -> None:
    w = torch.randn(10, 4)
    check(lambda w, i: torch.nn.functional.embedding(i, w, padding_idx=0), w,
          torch.tensor([[0, 3], [9, 0]]))


def test_take_along_dim_broadcasts() -> None:
    check(lambda x, i: torch.take_along_dim(x, i, dim=1), torch.randn(3, 4, 5),
          torch.tensor([[[0], [3]]]))


def test_repeat_interleave_tensor() -> None:
    check(lambda x, r: (x.repeat_interleave(r, dim=0), torch.repeat_interleave(r)),
          torch.randn(3, 2), torch.tensor([2, 0, 3]))


# -- creation -------------------------------------------------------------------------------
def test_arange_counts() -> None:
    check(lambda x: (torch.arange(0.0, 1.0, 0.1) + x,
                     torch.arange(1, 2.5, 0.3, dtype=torch.float64), torch.arange(10, 0, -3),
                     torch.arange(-2.5, 3), torch.arange(5.0)), torch.zeros(1))


def test_creation_dtypes() -> None:
    check(lambda x: (torch.zeros(2, 3, dtype=torch.int32), torch.ones(2, dtype=torch.bool),
                     torch.full((2,), 3, dtype=torch.float16), torch.full((2,), 7),
                     torch.full((2,), True), x.new_full((2,), 1.5),
                     torch.zeros_like(x, dtype=torch.int64),
                     torch.empty(3).fill_(2.0), torch.eye(3, 2, dtype=torch.int64),
                     torch.linspace(-1, 1, 5), torch.linspace(0, 10, 4, dtype=torch.int64),
                     torch.scalar_tensor(3, dtype=torch.float64)), torch.ones(2))


def test_one_hot_and_nonzero() -> None:
    check(lambda i: (torch.nn.functional.one_hot(i, 6), torch.nonzero(i), torch.where(i > 2)),
          torch.tensor([[1, 5], [3, 0]]))


def test_sort_distinct_values() -> None:
    x = torch.randperm(24).reshape(4, 6).float()
    check(lambda x: (torch.sort(x, 0, descending=True), torch.argsort(x), torch.topk(x, 2, dim=0),
                     torch.topk(x, 3, largest=False),
                     torch.sort(x.to(torch.int64), stable=True)), x)


def test_cumprod_and_triangles() -> None:
    x = torch.randn(3, 4, 5)
    check(lambda x: (x.cumprod(1), x.tril(-1), x.triu(2)), x)
    # float16 takes the Where path (no ORT Trilu kernel for it).
    check(lambda x: (x.tril(1), x.triu(-1)), x.half())


def test_empty_gives_shape_and_dtype() -> None:
    import onnxport

    def fn(x: torch.Tensor) -> Any:
        return (torch.empty(2, 3, dtype=torch.int32), torch.empty_like(x), x.new_empty(4),
                torch.empty_strided((2, 2), (2, 1)))

    x = torch.ones(3, dtype=torch.float16)
    actual = onnxport.export(Fn(fn), (x,))(x)
    for a, e in zip(actual, fn(x)):
        assert a.shape == e.shape and a.dtype == e.dtype


def test_transpose_variants() -> None:
    check(lambda x: (torch.concat([x, x], 1), x.swapaxes(0, 2), x.swapdims(1, -1),
                     torch.movedim(x, 0, -1), x.mT, x[0].T, x.permute(-1, 0, 1)), X)


def test_splits_and_stacks() -> None:
    check(lambda x: (torch.tensor_split(x, [1, 9], dim=1), torch.tensor_split(x, 3, dim=2),
                     x.split([1, 3], 1), torch.hstack([x[0, 0], x[1, 1]]),
                     torch.vstack([x[0, 0], x[1, 1]]),
                     torch.hstack([x, x]), x.chunk(3, 2), x.unbind(0)), X)


def test_scatter_value_reduce_and_fill_tensor() -> None:
    idx = torch.tensor([[0, 1], [1, 0]])
    check(lambda x, i, v: (x.scatter(1, i, 2.0, reduce="add"), x.clone().fill_(v)),
          torch.ones(2, 3), idx, torch.tensor(4.0))


def test_masked_select_broadcasts() -> None:
    check(lambda x, m: torch.masked_select(x, m), torch.randn(3, 4),
          torch.tensor([True, False, True, True]))


def test_meshgrid_xy_and_repeat() -> None:
    check(lambda a, b: (*torch.meshgrid(a, b, indexing="xy"), a.repeat(2, 3), b.tile(2),
                        a.tile((2, 1, 1))),
          torch.arange(3.0), torch.arange(4.0))


def test_integer_arange_truncates_bounds() -> None:
    check(lambda x: (torch.arange(0.5, 7.9, 2.5, dtype=torch.int64),
                     torch.arange(-3.7, 2, dtype=torch.int32),
                     torch.arange(0.0, -8.000001, -4.0, dtype=torch.int64),
                     torch.arange(0.1, 3.3, 0.7, dtype=torch.float16),
                     torch.arange(10, dtype=torch.float16)),
          torch.zeros(1))
