"""Backward (gradient) ops called directly, exported, and compared with eager PyTorch.

No OpInfo samples these ops (except max_pool2d_with_indices_backward, in cases/core_extra.py),
so each test builds the forward op's saved values in eager mode and asserts the backward
overload itself was dispatched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import onnxport
from tests.helpers import Fn, export_and_compare

A = torch.ops.aten


def _dispatched(program: Any, target: Any) -> None:
    targets = {n.target for n in program.exported_program.graph.nodes if n.op == "call_function"}
    assert target in targets, f"{target} was not dispatched; graph has {targets}"


def _check(fn: Callable[..., Any], args: tuple[Any, ...], target: Any) -> None:
    _dispatched(export_and_compare(Fn(fn), args), target)


def _check_half(fn: Callable[..., Any], args: tuple[torch.Tensor, ...], target: Any) -> None:
    """float16 inputs: the translation computes in float32 and rounds once, so the reference is
    the float32 eager result rounded to float16 (eager float16 rounds at every step)."""
    program = onnxport.export(Fn(fn), args)
    _dispatched(program, target)
    expected = fn(*(a.float() if a.is_floating_point() else a for a in args))
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = program(*args)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.dtype == torch.float16
        torch.testing.assert_close(got, want.half())


def test_adaptive_avg_pool2d_backward() -> None:
    x = torch.randn(2, 3, 7, 9)
    for out_size in ((3, 4), (7, 9), (1, 1), (5, 2)):
        grad = torch.randn(2, 3, *out_size)
        _check(lambda go, x: A._adaptive_avg_pool2d_backward(go, x), (grad, x),
               A._adaptive_avg_pool2d_backward.default)


def test_adaptive_avg_pool2d_backward_unbatched_float16() -> None:
    x = torch.randn(3, 6, 5, dtype=torch.float16)
    grad = torch.randn(3, 4, 3, dtype=torch.float16)
    _check_half(lambda go, x: A._adaptive_avg_pool2d_backward(go, x), (grad, x),
           A._adaptive_avg_pool2d_backward.default)


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "ceil_mode", "count_include_pad", "divisor"), [
    ((3, 2), (2, 2), (1, 0), False, True, None),
    ((3, 3), (2, 3), (1, 1), True, False, None),
    ((2, 2), (1, 2), (0, 1), True, True, 3),
    ((3, 3), (), (1, 1), False, True, None),
])
def test_avg_pool2d_backward(kernel: Any, stride: Any, padding: Any, ceil_mode: bool,
                             count_include_pad: bool, divisor: int | None) -> None:
    x = torch.randn(2, 3, 7, 9)
    out = torch.nn.functional.avg_pool2d(x, kernel, stride or None, padding, ceil_mode,
                                         count_include_pad, divisor)

    def fn(go: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return A.avg_pool2d_backward(go, x, list(kernel), list(stride), list(padding), ceil_mode,
                                     count_include_pad, divisor)

    _check(fn, (torch.randn_like(out), x), A.avg_pool2d_backward.default)


def test_max_pool2d_with_indices_backward_overlapping_windows() -> None:
    # Stride < kernel: one input pixel can be the max of several windows, so grads add up.
    x = torch.randn(2, 3, 8, 7)
    out, idx = torch.nn.functional.max_pool2d(x, 3, 1, 1, 1, True, return_indices=True)

    def fn(go: torch.Tensor, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return A.max_pool2d_with_indices_backward(go, x, [3, 3], [1, 1], [1, 1], [1, 1], True, i)

    _check(fn, (torch.randn_like(out), x, idx), A.max_pool2d_with_indices_backward.default)


@pytest.mark.parametrize(("padding_idx", "scale_grad_by_freq"), [(-1, False), (2, False), (4, True),
                                                                 (-1, True)])
def test_embedding_dense_backward(padding_idx: int, scale_grad_by_freq: bool) -> None:
    indices = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]])

    def fn(go: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return A.embedding_dense_backward(go, i, 10, padding_idx, scale_grad_by_freq)

    _check(fn, (torch.randn(2, 4, 3), indices), A.embedding_dense_backward.default)


_CONV_CASES = [
    # (C_in, C_out, groups, stride, padding, dilation, transposed, output_padding)
    (4, 6, 1, (2, 1), (1, 0), (1, 2), False, (0, 0)),
    (4, 6, 2, (2, 2), (0, 1), (1, 1), False, (0, 0)),
    (4, 4, 4, (1, 1), (1, 1), (1, 1), False, (0, 0)),
    (4, 6, 1, (1, 1), (0, 0), (1, 1), True, (0, 0)),
    (4, 6, 2, (2, 1), (1, 0), (1, 1), True, (1, 0)),
]


@pytest.mark.parametrize("case", _CONV_CASES, ids=str)
def test_convolution_backward_2d(case: tuple[Any, ...]) -> None:
    c_in, c_out, groups, stride, padding, dilation, transposed, output_padding = case
    x = torch.randn(2, c_in, 9, 8)
    if transposed:
        w = torch.randn(c_in, c_out // groups, 3, 2)
        y = torch.nn.functional.conv_transpose2d(x, w, None, stride, padding, output_padding,
                                                 groups, dilation)
    else:
        w = torch.randn(c_out, c_in // groups, 3, 2)
        y = torch.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups)

    def fn(go: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> Any:
        return A.convolution_backward(go, x, w, [c_out], list(stride), list(padding),
                                      list(dilation), transposed, list(output_padding), groups,
                                      [True, True, True])

    _check(fn, (torch.randn_like(y), x, w), A.convolution_backward.default)


@pytest.mark.parametrize("mask", [[False, True, False], [True, False, True], [True, False, False]])
def test_convolution_backward_1d_output_mask(mask: list[bool]) -> None:
    x, w = torch.randn(2, 3, 10), torch.randn(5, 3, 3)
    grad = torch.randn(2, 5, 10)

    def fn(go: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> Any:
        outs = A.convolution_backward(go, x, w, [5], [1], [1], [1], False, [0], 1, mask)
        return tuple(o for o, keep in zip(outs, mask) if keep)

    _check(fn, (grad, x, w), A.convolution_backward.default)


def test_convolution_backward_matches_autograd_of_a_conv_module() -> None:
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    x = torch.randn(1, 3, 8, 8, requires_grad=True)
    y = conv(x)
    grad = torch.randn_like(y)
    gx, gw, gb = torch.autograd.grad(y, (x, conv.weight, conv.bias), grad)

    def fn(go: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> Any:
        return A.convolution_backward(go, x, w, [4], [2, 2], [1, 1], [1, 1], False, [0, 0], 1,
                                      [True, True, True])

    args = (grad, x.detach(), conv.weight.detach())
    program = export_and_compare(Fn(fn), args)
    for got, want in zip(program(*args), (gx, gw, gb)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_native_layer_norm_backward(dtype: torch.dtype) -> None:
    x = torch.randn(3, 4, 5, dtype=dtype)
    w, b = torch.randn(4, 5, dtype=dtype), torch.randn(4, 5, dtype=dtype)
    _, mean, rstd = A.native_layer_norm(x, [4, 5], w, b, 1e-5)

    def fn(go: torch.Tensor, x: torch.Tensor, m: torch.Tensor, r: torch.Tensor, w: torch.Tensor,
           b: torch.Tensor) -> Any:
        return A.native_layer_norm_backward(go, x, [4, 5], m, r, w, b, [True, True, True])

    check = _check_half if dtype == torch.float16 else _check
    check(fn, (torch.randn_like(x), x, mean, rstd, w, b), A.native_layer_norm_backward.default)


def test_native_layer_norm_backward_without_affine_and_whole_tensor() -> None:
    x = torch.randn(4, 5)
    _, mean, rstd = A.native_layer_norm(x, [4, 5], None, None, 1e-5)

    def fn(go: torch.Tensor, x: torch.Tensor, m: torch.Tensor, r: torch.Tensor) -> Any:
        return A.native_layer_norm_backward(go, x, [4, 5], m, r, None, None,
                                            [True, False, False])[0]

    _check(fn, (torch.randn_like(x), x, mean, rstd), A.native_layer_norm_backward.default)


@pytest.mark.parametrize("with_weight", [True, False])
def test_native_group_norm_backward(with_weight: bool) -> None:
    x = torch.randn(2, 6, 4, 3)
    w, b = torch.randn(6), torch.randn(6)
    _, mean, rstd = A.native_group_norm(x, w, b, 2, 6, 12, 3, 1e-5)
    # Eager rejects a bias gradient without a weight, so that case asks for grad_input only.
    mask = [True, True, True] if with_weight else [True, False, False]

    def fn(go: torch.Tensor, x: torch.Tensor, m: torch.Tensor, r: torch.Tensor,
           w: torch.Tensor) -> Any:
        outs = A.native_group_norm_backward(go, x, m, r, w if with_weight else None, 2, 6, 12, 3,
                                            mask)
        return tuple(o for o, keep in zip(outs, mask) if keep)

    _check(fn, (torch.randn_like(x), x, mean, rstd, w), A.native_group_norm_backward.default)
