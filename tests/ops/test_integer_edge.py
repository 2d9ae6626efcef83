"""Edge cases for integer ops: gcd/lcm, shifts, bincount, and integer convolution/pooling."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import Fn, count, export_and_compare

INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def _big(*shape: int) -> torch.Tensor:
    """int64 values beyond float32's exact range (2**24), within float64's."""
    return torch.randint(-2**40, 2**40, shape)


# -- gcd / lcm --------------------------------------------------------------------------------

def test_gcd_fibonacci_worst_case() -> None:
    # consecutive Fibonacci numbers take the most Euclid steps (91 here)
    a = torch.tensor([7540113804746346429, 2**62, 0, 0, -12])
    b = torch.tensor([4660046610375530309, 3 * 2**40, 0, -5, 18])
    export_and_compare(Fn(torch.gcd), (a, b))


def test_gcd_lcm_broadcast_and_signs() -> None:
    a = torch.tensor([[4], [-6], [0], [-7]])
    b = torch.tensor([6, -4, 0, 9])
    export_and_compare(Fn(lambda x, y: (torch.gcd(x, y), torch.lcm(x, y))), (a, b))


def test_gcd_empty() -> None:
    export_and_compare(Fn(torch.gcd), (torch.zeros(0, 3, dtype=torch.int64),
                                       torch.tensor([1, 2, 3])))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_lcm_wraps_like_torch(dtype: torch.dtype) -> None:
    a = torch.tensor([100, 120, 0, 7], dtype=dtype)
    b = torch.tensor([3, 7, 5, 11], dtype=dtype)
    export_and_compare(Fn(lambda x, y: (torch.gcd(x, y), torch.lcm(x, y))), (a, b))


# -- shifts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_shift_counts_out_of_range(dtype: torch.dtype) -> None:
    low = 0 if dtype == torch.uint8 else -128
    x = torch.tensor([5, low, 127, 1, low + 3, 100] * 2, dtype=dtype)
    counts = [0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64, 65]
    s = torch.tensor(counts, dtype=torch.int64 if dtype != torch.uint8 else torch.uint8)
    export_and_compare(Fn(lambda a, b: (a << b, a >> b)), (x, s.to(dtype)))


def test_shift_negative_count() -> None:
    x = torch.tensor([5, -5, 0, -1])
    s = torch.tensor([-1, -1, -70, -2])
    export_and_compare(Fn(lambda a, b: (a << b, a >> b)), (x, s))


def test_shift_int64_extremes() -> None:
    x = torch.tensor([[2**63 - 1, -2**63, 1, -1]])
    s = torch.tensor([[0], [1], [62], [63]])
    export_and_compare(Fn(lambda a, b: (a << b, a >> b)), (x, s))


def test_shift_scalar_overloads() -> None:
    x = torch.tensor([3, -3, 40], dtype=torch.int32)
    export_and_compare(Fn(lambda a: (a << 2, a >> 1, torch.bitwise_left_shift(a, 3),
                                      torch.bitwise_right_shift(a, 4))), (x,))
    export_and_compare(Fn(lambda s: (torch.bitwise_left_shift(2, s),
                                     torch.bitwise_right_shift(-64, s))), (torch.tensor([0, 1, 5]),))


# -- bincount ---------------------------------------------------------------------------------

def test_bincount_minlength_and_weights() -> None:
    x = torch.tensor([1, 2, 2, 5, 0])
    export_and_compare(Fn(lambda a: torch.bincount(a, minlength=10)), (x,))
    export_and_compare(Fn(lambda a: torch.bincount(a, minlength=2)), (x,))
    w = torch.tensor([0.5, 1.0, 2.0, 3.0, -1.0])
    export_and_compare(Fn(torch.bincount), (x, w))
    export_and_compare(Fn(torch.bincount), (x, torch.tensor([1, 2, 3, 4, 5])))


def test_bincount_empty() -> None:
    export_and_compare(Fn(lambda a: torch.bincount(a, minlength=3)), (torch.tensor([], dtype=torch.int64),))
    export_and_compare(Fn(torch.bincount), (torch.tensor([], dtype=torch.uint8),))


# -- integer convolution and pooling ------------------------------------------------------------

def test_int_conv2d_exact_beyond_float32() -> None:
    x, w, b = _big(2, 4, 9, 8), torch.randint(-9, 9, (6, 2, 3, 2)), _big(6)
    program = export_and_compare(
        Fn(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=2, groups=2)), (x, w, b))
    assert count(program, "Conv") == 0


def test_int_conv_same_padding_and_empty_batch() -> None:
    export_and_compare(Fn(lambda x, w: F.conv2d(x, w, padding="same")),
                       (torch.randint(-9, 9, (1, 2, 6, 7)), torch.randint(-9, 9, (3, 2, 4, 3))))
    export_and_compare(Fn(F.conv2d), (torch.randint(-9, 9, (0, 3, 4, 4)),
                                      torch.randint(-9, 9, (2, 3, 1, 1))))


def test_int_conv_unbatched_1d_3d() -> None:
    export_and_compare(Fn(F.conv1d), (_big(3, 10), torch.randint(-9, 9, (4, 3, 3))))
    export_and_compare(Fn(lambda x, w: F.conv3d(x, w, stride=(1, 2, 1))),
                       (torch.randint(-9, 9, (3, 5, 5, 5)), torch.randint(-9, 9, (2, 3, 2, 2, 2))))


def test_int_conv_transpose_exact() -> None:
    export_and_compare(
        Fn(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 3), padding=(1, 0),
                                              output_padding=(1, 2), groups=2, dilation=(1, 2))),
        (_big(2, 4, 5, 4), torch.randint(-9, 9, (4, 3, 3, 2)), _big(6)))
    # output_padding beyond the stride (allowed when below the dilation)
    export_and_compare(
        Fn(lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=2, output_padding=3, dilation=4)),
        (_big(1, 3, 6), torch.randint(-9, 9, (3, 2, 3))))


def test_int_avg_pool_truncates_toward_zero() -> None:
    x = torch.tensor([[[-7, 2, 3, -5, 1]]])
    export_and_compare(Fn(lambda a: F.avg_pool1d(a, 2)), (x,))
    export_and_compare(Fn(lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
                       (_big(2, 3, 7, 8),))
    export_and_compare(Fn(lambda a: F.avg_pool2d(a, 3, 2, 1, divisor_override=5)),
                       (torch.randint(-9, 9, (2, 3, 7, 8)),))
    export_and_compare(Fn(lambda a: F.avg_pool3d(a, 2, 1, 1, ceil_mode=True)),
                       (torch.randint(-9, 9, (1, 2, 4, 5, 3)),))


def test_int_max_pool_exact() -> None:
    export_and_compare(Fn(lambda a: F.max_pool2d(a, 2, 1, 1, return_indices=True)), (_big(2, 3, 5, 5),))
