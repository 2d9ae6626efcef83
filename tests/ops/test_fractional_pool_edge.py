"""Fractional max pooling with given random samples: values and indices match eager."""

from __future__ import annotations

import pytest
import torch

import onnxport
from tests.helpers import Fn, export_and_compare

A = torch.ops.aten


@pytest.mark.parametrize(("shape", "kernel", "out"), [
    ((2, 3, 9, 11), (2, 3), (4, 5)),
    ((3, 9, 11), (3, 2), (1, 5)),       # unbatched, one output row
    ((1, 2, 5, 5), (2, 2), (4, 4)),     # windows overlap
    ((2, 3, 7, 8, 9), (2, 2, 3), (3, 4, 5)),
    ((2, 7, 8, 9), (2, 2, 3), (3, 1, 5)),
])
def test_fractional_max_pool_values_and_indices(shape: tuple[int, ...], kernel: tuple[int, ...],
                                                out: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    d = len(kernel)
    x = torch.randn(shape)
    batch = shape[0] if len(shape) == d + 2 else 1
    samples = torch.rand(batch, shape[-d - 1], d)
    op = A.fractional_max_pool2d.default if d == 2 else A.fractional_max_pool3d.default
    export_and_compare(Fn(lambda x, u: op(x, kernel, out, u)), (x, samples))


def test_fractional_max_pool_module_output_shape() -> None:
    pool = torch.nn.FractionalMaxPool2d(3, output_ratio=0.5, return_indices=True)
    x = torch.randn(2, 4, 12, 10)
    values, indices = onnxport.export(pool, (x,))(x)
    assert values.shape == (2, 4, 6, 5) and indices.dtype == torch.int64
    # Each value is the input element its index points at.
    torch.testing.assert_close(values, x.flatten(2).gather(2, indices.flatten(2)).view_as(values))
